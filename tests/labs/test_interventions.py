"""norm_intervention: the named norms act as identity inside the block, and only there."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from deffcore.core.constants import POOLINGS
from deffcore.core.errors import UnsupportedArchitectureError
from deffcore.inputs.interventions import (
    INTERVENTIONS,
    norm_intervention,
    post_norm_modules,
    qk_norm_modules,
    supported_interventions,
)
from deffcore.labs.interventions import paper_intervention_rows


def _logits(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).logits


def _with_identity_norms(model: nn.Module, name: str) -> nn.Module:
    """Independent construction: a copy whose named norms are swapped for nn.Identity."""
    twin = copy.deepcopy(model)
    for layer in twin.model.layers:
        if name in ("no_post", "no_post_no_qk"):
            layer.post_attention_layernorm = nn.Identity()
            layer.post_feedforward_layernorm = nn.Identity()
        if name in ("no_qk", "no_post_no_qk"):
            layer.self_attn.q_norm = nn.Identity()
            layer.self_attn.k_norm = nn.Identity()
    return twin


def test_finds_every_gemma3_norm(gemma3_model):
    assert len(post_norm_modules(gemma3_model)) == 2 * 4
    assert len(qk_norm_modules(gemma3_model)) == 2 * 4
    assert supported_interventions(gemma3_model) == list(INTERVENTIONS)


@pytest.mark.parametrize("name", ["no_post", "no_qk", "no_post_no_qk"])
def test_intervention_equals_identity_norms_and_restores_exactly(gemma3_model, token_ids, name):
    base = _logits(gemma3_model, token_ids)
    expected = _logits(_with_identity_norms(gemma3_model, name), token_ids)
    with norm_intervention(gemma3_model, name) as m:
        assert m is gemma3_model
        inside = _logits(gemma3_model, token_ids)
    after = _logits(gemma3_model, token_ids)
    assert not torch.allclose(inside, base, atol=1e-3)  # the forward pass really changed
    torch.testing.assert_close(inside, expected, rtol=0, atol=0)
    assert torch.equal(after, base)  # bit-for-bit restored
    for module in gemma3_model.modules():
        assert not module._forward_hooks


def test_interventions_differ_from_each_other(gemma3_model, token_ids):
    outs = {}
    for name in INTERVENTIONS:
        with norm_intervention(gemma3_model, name):
            outs[name] = _logits(gemma3_model, token_ids)
    for a in INTERVENTIONS:
        for b in INTERVENTIONS:
            if a < b:
                assert not torch.allclose(outs[a], outs[b], atol=1e-3), (a, b)


def test_none_changes_nothing_on_any_model(llama_model, token_ids):
    base = _logits(llama_model, token_ids)
    with norm_intervention(llama_model, "none"):
        assert torch.equal(_logits(llama_model, token_ids), base)


def test_restores_when_the_body_raises(gemma3_model, token_ids):
    base = _logits(gemma3_model, token_ids)
    with pytest.raises(RuntimeError), norm_intervention(gemma3_model, "no_post_no_qk"):
        raise RuntimeError("boom")
    assert torch.equal(_logits(gemma3_model, token_ids), base)


@pytest.mark.parametrize(
    ("name", "missing"),
    [("no_post", "post_feedforward_layernorm"), ("no_qk", "q_norm"), ("no_post_no_qk", "post")],
)
def test_llama_refuses_with_what_is_missing(llama_model, token_ids, name, missing):
    base = _logits(llama_model, token_ids)
    with (
        pytest.raises(UnsupportedArchitectureError, match=missing) as info,
        norm_intervention(llama_model, name),
    ):
        pass
    assert "LlamaForCausalLM" in str(info.value)
    assert torch.equal(_logits(llama_model, token_ids), base)
    assert supported_interventions(llama_model) == ["none"]


def test_llama_post_attention_layernorm_is_not_a_post_norm(llama_model):
    # Llama's post_attention_layernorm is the pre-MLP norm; it must not be a target.
    assert post_norm_modules(llama_model) == []


def test_unknown_name_refuses(gemma3_model):
    with (
        pytest.raises(UnsupportedArchitectureError, match="Unknown norm intervention 'no_pre'"),
        norm_intervention(gemma3_model, "no_pre"),
    ):
        pass


def test_paper_rows_are_table_s6():
    rows = paper_intervention_rows()
    assert {r["model"] for r in rows} == {"Gemma-3-4B", "Gemma-3-12B"}
    assert {r["intervention"] for r in rows} <= set(INTERVENTIONS)
    row = next(
        r
        for r in rows
        if r["model"] == "Gemma-3-4B" and r["intervention"] == "no_qk" and r["pooling"] == "default"
    )
    assert row["gap_pct"] == pytest.approx(-60.2)


def test_intervention_table_matches_an_independent_measurement(tiny_gemma3, lab_cache):
    from dataclasses import replace

    from deffcore.extraction.forward import extract_pooled
    from deffcore.inputs.texts import load_passages
    from deffcore.labs.interventions import intervention_table
    from deffcore.measures.depth import effective_depth, gap_percent
    from deffcore.measures.similarity import naive_similarity_matrix

    table = intervention_table("tiny-gemma3", n=8, max_tokens=24, device="cpu", dtype="float32")
    rows = table.to_dict()["rows"]
    assert len(rows) == len(INTERVENTIONS) * len(POOLINGS)
    assert {r["pooling"] for r in rows} == set(POOLINGS)
    passages = load_passages("bbc-news", 8, seed=0)
    for name in ("none", "no_post_no_qk"):
        twin = replace(tiny_gemma3, model=_with_identity_norms(tiny_gemma3.model, name))
        pooled = extract_pooled(twin, passages, max_tokens=24)
        for pooling in ("default", "token_normed"):
            S = naive_similarity_matrix(pooled.pooled[pooling][1:])
            expected = gap_percent(effective_depth(S), 4)
            assert table.value(name, pooling) == pytest.approx(expected, rel=1e-4, abs=1e-3)
    assert table.value("none", "default") != pytest.approx(table.value("no_post", "default"))


def test_intervention_table_refuses_before_measuring(lab_cache):
    from deffcore.labs.interventions import intervention_table

    with pytest.raises(UnsupportedArchitectureError, match="post"):
        intervention_table("tiny-llama", n=8, max_tokens=24, device="cpu")
    from deffcore.extraction.cache import list_runs

    assert list_runs() == []  # nothing was measured (not even the "none" run)


@pytest.mark.parametrize(
    ("spec", "supported"),
    [
        ("tiny-olmo2", ["none", "no_post", "no_qk", "no_post_no_qk"]),  # post norms, QK norms
        ("tiny-qwen3", ["none", "no_qk"]),  # QK norms only
        ("tiny-gpt2", ["none"]),
    ],
)
def test_other_architectures(spec, supported, token_ids):
    from deffcore.inputs.model import load_model

    model = load_model(spec, device="cpu", dtype="float32").model
    assert supported_interventions(model) == supported
    base = _logits(model, token_ids)
    for name in supported[1:]:
        with norm_intervention(model, name):
            assert not torch.allclose(_logits(model, token_ids), base, atol=1e-4)
        assert torch.equal(_logits(model, token_ids), base)


def test_intervention_table_second_call_reads_the_cache(monkeypatch):
    import deffcore.inputs.model
    from deffcore.labs.interventions import intervention_table
    from deffcore.runs.measure import measure

    first = intervention_table("tiny-gemma3", n=8, max_tokens=24, interventions=["none", "no_qk"])

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded again")

    monkeypatch.setattr(deffcore.inputs.model, "load_model", no_model)
    second = intervention_table("tiny-gemma3", n=8, max_tokens=24, interventions=["none", "no_qk"])
    assert second.rows == first.rows
    # the lab's entries are measure()'s entries
    direct = measure(model="tiny-gemma3", n=8, max_tokens=24, intervention="no_qk")
    assert direct.cached
    assert direct.summary("default").gap_pct == pytest.approx(second.value("no_qk", "default"))
    # each intervention's move against "none": paired by passage (the same token ids, SPEC 15)
    from deffcore.runs.run_pairs import run_difference

    none = measure(model="tiny-gemma3", n=8, max_tokens=24)
    d = run_difference(none, direct, pooling="default", metric="cka", B=50, seed=0)
    row = next(r for r in second.rows if (r["intervention"], r["pooling"]) == ("no_qk", "default"))
    moved = second.value("no_qk", "default") - second.value("none", "default")
    assert row["paired"] is True and row["delta_vs_none"] == pytest.approx(moved, abs=1e-9)
    assert row["delta_vs_none"] == pytest.approx(d.delta) and d.paired
    assert row["delta_interval"] == pytest.approx(list(d.interval))
    assert all("delta_vs_none" not in r for r in second.rows if r["intervention"] == "none")
