"""Pruning boundary check: BI, local Delta D_eff, block skipping, perplexity, k_1.10."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr

from deffcore.core.errors import DeffError, InvalidStatesError
from deffcore.inputs.texts import load_passages
from deffcore.labs.pruning import (
    block_influence,
    heldout_passages,
    k_tolerance,
    local_delta_deff,
    perplexity,
    pruning_check,
    rank_lowest_first,
    skip_blocks,
    skip_counts,
)

PASSAGES = [
    "The bank raised interest rates again on Tuesday.",
    "A short one.",
    "Football fans queued for hours to buy tickets to the final match of the season.",
]


def _deff(S):
    return S.shape[0] ** 2 / S.sum()


def test_local_delta_deff_by_hand():
    S = np.array([[1.0, 0.5, 0.2], [0.5, 1.0, 0.4], [0.2, 0.4, 1.0]])
    full = 9 / S.sum()
    expected = [
        full - 4 / (2 + 2 * 0.4),  # drop layer 1: keep 2, 3
        full - 4 / (2 + 2 * 0.2),  # drop layer 2: keep 1, 3
        full - 4 / (2 + 2 * 0.5),  # drop layer 3: keep 1, 2
    ]
    np.testing.assert_allclose(local_delta_deff(S), expected)


def test_local_delta_deff_closed_forms():
    np.testing.assert_allclose(local_delta_deff(np.eye(6)), np.ones(6))  # L - (L-1)
    np.testing.assert_allclose(local_delta_deff(np.ones((6, 6))), np.zeros(6))  # 1 - 1
    with pytest.raises(InvalidStatesError):
        local_delta_deff(np.eye(2))


def test_ranking_and_tolerance():
    assert rank_lowest_first([0.3, 0.1, 0.3, 0.0]) == [3, 1, 0, 2]
    assert skip_counts(4) == [0, 1, 2]
    assert skip_counts(30) == [0, 1, 2, 4, 6, 8]
    assert k_tolerance({0: 10.0, 1: 10.5, 2: 11.0, 4: 11.01}) == 2
    assert k_tolerance({0: 10.0, 1: 12.0, 2: 10.9}) == 2  # largest qualifying k
    assert k_tolerance({0: 10.0, 1: 12.0}) == 0
    with pytest.raises(DeffError):
        k_tolerance({1: 3.0})


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids, use_cache=False).logits


@pytest.mark.parametrize("skip", [[0], [2], [1, 3]])
def test_skip_equals_deleting_the_block(llama_model, token_ids, skip):
    base = _logits(llama_model, token_ids)
    twin = copy.deepcopy(llama_model)
    twin.model.layers = torch.nn.ModuleList(
        layer for i, layer in enumerate(twin.model.layers) if i not in skip
    )
    with skip_blocks(llama_model, skip):
        inside = _logits(llama_model, token_ids)
    torch.testing.assert_close(inside, _logits(twin, token_ids), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(inside, base, atol=1e-4)
    assert torch.equal(_logits(llama_model, token_ids), base)
    with pytest.raises(DeffError, match="out of range"), skip_blocks(llama_model, [4]):
        pass


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_gemma3"])
def test_block_influence_matches_direct_computation(request, fixture):
    loaded = request.getfixturevalue(fixture)
    got = block_influence(loaded.model, loaded.tokenizer, PASSAGES, max_tokens=24, batch_size=2)
    # Direct: per passage, unpadded, h_0..h_L from output_hidden_states with the final norm
    # replaced by identity (so the last entry is h_L before the norm).
    twin = copy.deepcopy(loaded.model)
    twin.model.norm = torch.nn.Identity()
    L = loaded.layers
    cos_sum, count = np.zeros(L), 0
    for text in PASSAGES:
        ids = torch.tensor([loaded.tokenizer(text).input_ids[:24]])
        with torch.no_grad():
            hs = twin(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
        for layer in range(L):
            cos_sum[layer] += (
                F.cosine_similarity(hs[layer][0], hs[layer + 1][0], dim=-1).sum().item()
            )
        count += ids.shape[1]
    np.testing.assert_allclose(got, 1 - cos_sum / count, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fixture", ["tiny_llama", "tiny_gemma3"])
def test_perplexity_zero_skips_is_hf_loss(request, fixture):
    loaded = request.getfixturevalue(fixture)
    out = perplexity(loaded.model, loaded.tokenizer, PASSAGES, max_tokens=24, batch_size=3)
    # Direct: HF's own loss over the whole batch (padding labelled -100), one batch
    rows = [loaded.tokenizer(t).input_ids[:24] for t in PASSAGES]
    T = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), T, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
    labels = ids.masked_fill(mask == 0, -100)
    with torch.no_grad():
        loss = loaded.model(input_ids=ids, attention_mask=mask, labels=labels, use_cache=False).loss
    assert out["ppl"] == pytest.approx(math.exp(loss.item()), rel=1e-5)
    assert out["tokens"] == sum(len(r) - 1 for r in rows)
    # batching does not change it
    one = perplexity(loaded.model, loaded.tokenizer, PASSAGES, max_tokens=24, batch_size=1)
    assert one["ppl"] == pytest.approx(out["ppl"], rel=1e-5)
    skipped = perplexity(loaded.model, loaded.tokenizer, PASSAGES, max_tokens=24, skip=[1])
    assert skipped["ppl"] != pytest.approx(out["ppl"], rel=1e-6)


def test_heldout_is_disjoint():
    measured = load_passages("bbc-news", 20, seed=3)
    held = heldout_passages("bbc-news", measured, 10, seed=3)
    assert len(held) == 10 and not set(held) & set(measured)


def test_pruning_check_end_to_end(tiny_llama):
    result = pruning_check(
        "tiny-llama", n=12, n_heldout=6, max_tokens=32, seed=1, loaded=tiny_llama
    )
    out = result.to_dict()
    assert out["ks"] == [0, 1, 2]
    assert set(out["ppl"]) == {"bi", "local_deff"}
    assert out["ppl"]["bi"]["0"] == out["ppl"]["local_deff"]["0"] == out["ppl0"]
    measured = load_passages("bbc-news", 12, seed=1)
    held = heldout_passages("bbc-news", measured, 6, seed=1)
    direct = perplexity(tiny_llama.model, tiny_llama.tokenizer, held, max_tokens=32)
    assert out["ppl0"] == pytest.approx(direct["ppl"])
    bi = block_influence(tiny_llama.model, tiny_llama.tokenizer, measured, max_tokens=32)
    np.testing.assert_allclose(out["block_influence"], bi)
    assert out["skip_order"]["bi"] == rank_lowest_first(bi)
    two = perplexity(
        tiny_llama.model,
        tiny_llama.tokenizer,
        held,
        max_tokens=32,
        skip=out["skip_order"]["bi"][:2],
    )
    assert out["ppl"]["bi"]["2"] == pytest.approx(two["ppl"])
    rho = spearmanr(out["block_influence"], out["local_delta_deff"])[0]
    assert out["spearman_bi_vs_local_deff"] == pytest.approx(rho)
    assert out["k_1.10"]["bi"] == k_tolerance({int(k): v for k, v in out["ppl"]["bi"].items()})
    assert out["f_1.10"]["bi"] == out["k_1.10"]["bi"] / 4
    assert out["deff_over_L"] == pytest.approx(out["deff"] / 4)


# ----------------------------------------------------------------------------------------------
# Pruning tolerance (Table S17): k_1.10 on planted perplexity curves, the stored result


@pytest.mark.parametrize(
    ("curve", "k110", "contiguous"),
    [
        ({0: 10.0, 1: 10.2, 2: 10.9, 4: 11.2, 6: 15.0, 8: 40.0}, 2, 2),  # monotone
        ({0: 10.0, 1: 11.0, 2: 11.0001}, 1, 1),  # exactly 1.10 PPL_0 qualifies, just above not
        ({0: 10.0, 1: 10.5, 2: 12.0, 4: 10.8, 6: 30.0}, 4, 1),  # non-monotone: 4 after 2 failed
        ({0: 10.0, 1: 20.0, 2: 10.0}, 2, 0),
        ({0: 10.0, 1: float("nan"), 2: float("inf")}, 0, 0),  # non-finite never qualifies
        ({0: 10.0}, 0, 0),
    ],
)
def test_k110_on_planted_curves(curve, k110, contiguous):
    from deffcore.labs.pruning import k_tolerance_contiguous

    assert k_tolerance(curve) == k110
    assert k_tolerance_contiguous(curve) == contiguous
    assert k_tolerance_contiguous(dict(reversed(list(curve.items())))) == contiguous  # any order


def _planted_result(curve: dict[int, float], layers: int = 16):
    from deffcore.labs.pruning import PruningResult

    return PruningResult(
        model="planted", layers=layers, n=8, n_heldout=4, deff=2.0, bi=[0.1] * layers,
        local_deff=[0.0] * layers, order={"bi": list(range(layers))}, ks=sorted(curve),
        ppl={"bi": dict(curve)}, heldout_tokens=100,
    )  # fmt: skip


def test_to_dict_reports_the_s17_fields_and_round_trips():
    from deffcore.labs.pruning import PruningResult

    curve = {0: 10.0, 1: 10.5, 2: 12.0, 4: 10.8, 6: 30.0, 8: 50.0}
    d = _planted_result(curve).to_dict()
    assert d["ppl0"] == 10.0
    assert d["ppl_k"] == {str(k): v for k, v in curve.items()}
    assert d["k_110"] == 4 and d["f_110"] == 4 / 16
    assert d["k_110_contiguous"] == 1 and d["k_110_monotone"] is False
    back = PruningResult.from_dict(d).to_dict()
    assert back == d


def test_pruning_check_is_stored_and_read_back(tiny_llama, monkeypatch):
    from deffcore.labs import pruning
    from deffcore.labs.store import list_results

    first = pruning_check("tiny-llama", n=8, n_heldout=4, max_tokens=24, seed=2, loaded=tiny_llama)
    assert not first.cached
    (record,) = list_results("pruning")
    assert record["identity"]["model"] == "tiny-llama" and record["identity"]["n_heldout"] == 4

    def refuse(*args, **kwargs):
        raise AssertionError("recomputed although the result is stored")

    monkeypatch.setattr(pruning, "_compute", refuse)
    again = pruning_check("tiny-llama", n=8, n_heldout=4, max_tokens=24, seed=2, loaded=tiny_llama)
    assert again.cached
    d1, d2 = first.to_dict(), again.to_dict()
    d1.pop("cached"), d2.pop("cached")
    assert d1 == d2
    # any result-changing argument is a different entry
    with pytest.raises(AssertionError, match="recomputed"):
        pruning_check("tiny-llama", n=8, n_heldout=5, max_tokens=24, seed=2, loaded=tiny_llama)
    with pytest.raises(AssertionError, match="recomputed"):
        pruning_check("tiny-llama", n=8, n_heldout=4, max_tokens=24, seed=2, loaded=tiny_llama,
                      store=False)  # fmt: skip
