"""Short-pretraining norm probes (Table S8): the variants are trained with, the numbers are
the engine's on the probe windows, runs are reproducible."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from deffcore.core.errors import DeffError
from deffcore.labs import pretrain
from deffcore.measures.depth import depth_summary
from deffcore.measures.similarity import naive_similarity_matrix

DOCS = [
    "The committee met on Tuesday to discuss the budget and the plans for next year. " * 3,
    "Rain is expected across the north of the country later this week, forecasters said. " * 3,
    "Shares in the company rose sharply after it reported record profits again. " * 3,
    "The striker scored twice in the second half to secure a comfortable win. " * 3,
] * 3


@pytest.fixture
def tiny():
    s = replace(pretrain.PRESETS["tiny"], iters=3, eval_interval=3, n_probe=8)
    tok = pretrain.probe_tokenizer("byte")
    return s, tok, pretrain.token_data(tok, s.block_size, documents=DOCS)


def test_sweep_records_and_table_beside_the_paper(tiny):
    s, _, data = tiny
    result = pretrain.pretrain_probe(s, data=data)
    assert [(r["variant"], r["step"]) for r in result.records] == [
        ("none", 0), ("none", 3), ("no_post", 0), ("no_post", 3)
    ]  # fmt: skip
    assert all(np.isfinite(r[c]) for r in result.records for c in pretrain.COLUMNS)
    none, no_post = result.final_table()
    assert none["paper_gap_default"] == 41.3 and no_post["paper_gap_first_non_bos"] == 22.8
    assert none["paper_val_loss"] == 5.06 and none["paper_gap_no_pos0"] is None
    assert none["gap_default"] == result.records[1]["gap_default"]
    d = result.to_dict()
    assert d["lab"] == "pretrain" and d["tokens_per_run"] == 3 * s.batch_size * s.block_size


def test_same_seed_same_numbers(tiny):
    s, tok, data = tiny
    a = pretrain.train_probe("none", 0, s, tok, data)
    b = pretrain.train_probe("none", 0, s, tok, data)
    assert a == b


def test_the_variant_is_trained_with(tiny, monkeypatch):
    s, tok, data = tiny
    built = {}
    real = pretrain.build_model

    def capture(settings, tokenizer, seed):
        model = real(settings, tokenizer, seed)
        built["model"] = model
        built["init"] = {k: v.clone() for k, v in model.state_dict().items()}
        return model

    monkeypatch.setattr(pretrain, "build_model", capture)
    for variant, frozen in (("none", False), ("no_post", True)):
        pretrain.train_probe(variant, 0, s, tok, data)
        after = built["model"].state_dict()
        post = [k for k in after if "post_feedforward_layernorm" in k]
        pre = [k for k in after if "pre_feedforward_layernorm" in k]
        assert post and pre
        # an identity norm gets no gradient: its weight stays at init (AdamW's decay aside,
        # which these weights of zeros are unaffected by)
        assert all(torch.equal(after[k], built["init"][k]) for k in post) == frozen
        assert not all(torch.equal(after[k], built["init"][k]) for k in pre)


def test_probe_depth_is_the_engine_on_hooked_block_outputs(tiny):
    s, tok, data = tiny
    model = pretrain.build_model(s, tok, seed=3).eval()
    loaded = pretrain._as_loaded(model, tok, s, "x")
    probe = data.val[:8]
    got = pretrain.probe_depth(loaded, probe)
    outputs = []

    def keep(module, args, out):
        outputs.append(out[0] if isinstance(out, tuple) else out)

    hooks = [layer.register_forward_hook(keep) for layer in model.model.layers]
    with torch.no_grad():
        model.model(input_ids=probe)
    for h in hooks:
        h.remove()
    pooled = torch.stack([h.mean(dim=1) for h in outputs]).double()  # (L, N, d), every position
    direct = depth_summary(naive_similarity_matrix(pooled.numpy(), "cka"))
    assert got["gap_default"] == pytest.approx(direct.gap_pct, rel=1e-4, abs=1e-4)
    assert got["deff_over_L_default"] == pytest.approx(direct.deff_over_L, rel=1e-5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"variants": ("none", "no_mlp")}, "Unknown norm variant"),
        ({"seeds": ()}, "at least one seed"),
        ({"tokenizer": "bpe"}, "Unknown tokenizer"),
        ({"heads": 3, "kv_heads": 2}, "multiple of --kv-heads"),
        ({"n_probe": 2}, "at least 2 layers, 4 probe windows"),
    ],
)
def test_bad_settings(change, message):
    with pytest.raises(DeffError, match=message):
        pretrain.check_settings(replace(pretrain.PRESETS["tiny"], **change))
    with pytest.raises(DeffError, match="Unknown pretraining preset"):
        pretrain.settings_from("huge")


def test_a_probe_is_stored_and_read_back(monkeypatch):
    """A trained probe is stored (keyed by its settings and the text, not by `threads`) and
    read back without training; a probe given its own data is never stored."""
    s = replace(pretrain.PRESETS["tiny"], variants=("none",), iters=2, eval_interval=2)
    trained = pretrain.pretrain_probe(s)
    assert not trained.cached
    (stored,) = pretrain.stored_probes()
    assert stored.cached and stored.records == trained.records

    def no_training(*args, **kwargs):
        raise AssertionError("a stored probe must not be trained again")

    monkeypatch.setattr(pretrain, "train_probe", no_training)
    again = pretrain.pretrain_probe(replace(s, threads=1))  # threads change speed, not numbers
    assert again.cached and again.records == trained.records and again.settings.threads == 1
    assert again.final_table() == trained.final_table()
    with pytest.raises(AssertionError, match="must not be trained"):
        pretrain.pretrain_probe(replace(s, seeds=(1,)))  # other settings: trained afresh
    with pytest.raises(AssertionError, match="must not be trained"):
        pretrain.pretrain_probe(s, store=False)


def test_a_probe_on_given_data_is_never_stored(tiny):
    s, _, data = tiny
    pretrain.pretrain_probe(s, data=data)
    assert pretrain.stored_probes() == []
