"""BOS and attention-sink diagnostics (SPEC section 11): no_pos0, massive activations, sinks,
the cached `diagnose` entry point and the verdict.

Every number is checked against a hand-computed case, a closed form or a naive loop (one
passage at a time, no padding, `output_hidden_states` plus a pre-hook on the final norm for
h_L, reductions in float64 numpy).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deffcore.core.files import cache_dir
from deffcore.extraction.forward import extract_pooled, pool_states
from deffcore.inputs.architecture import decoder_layers, final_norm
from deffcore.inputs.model import load_model
from deffcore.inputs.run_spec import RunSpec
from deffcore.lenses.diagnostics import bos_diagnostics
from deffcore.lenses.diagnostics_store import diagnose, diagnostics_path, read_diagnostics
from deffcore.measures import activations
from deffcore.measures.paper_massive import sun_flags, sun_onset, sun_positions, sun_share
from deffcore.measures.paper_sinks import GuCounts, gu_min_length, gu_scores_batch, gu_uniform_score
from deffcore.statistics.bos_answer import identical_controls, no_pos0_identity
from deffcore.statistics.verdict import bos_verdict, verdict_for, verdict_inputs

# ---------------------------------------------------------------------------------------------
# naive references
# ---------------------------------------------------------------------------------------------


def _raw_states(loaded, ids: list[int]) -> list[np.ndarray]:
    """h_0 .. h_L of one unpadded passage, (T, d) float64 each: output_hidden_states for
    h_0 .. h_{L-1}, a pre-hook on the final norm for h_L (the pre-norm residual)."""
    captured = {}
    handle = final_norm(loaded.model).register_forward_pre_hook(
        lambda _m, args: captured.__setitem__("hL", args[0])
    )
    try:
        with torch.no_grad():
            res = loaded.model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    finally:
        handle.remove()
    states = [hs[0].double().numpy() for hs in res.hidden_states[:-1]]
    states.append(captured["hL"][0].double().numpy())
    return states


def _ids(loaded, passages, max_tokens):
    return [s for s in (loaded.tokenizer(t).input_ids[:max_tokens] for t in passages) if len(s) > 1]


# ---------------------------------------------------------------------------------------------
# no_pos0
# ---------------------------------------------------------------------------------------------


def test_no_pos0_hand_made_both_padding_sides():
    # passage 0: (3,4), (0,2), (6,8) -> mean of t >= 1 = (3, 5); passage 1: (1,0), (0,1) -> (0,1)
    h = torch.tensor([[[3.0, 4.0], [0.0, 2.0], [6.0, 8.0]], [[1.0, 0.0], [0.0, 1.0], [9.0, 9.0]]])
    right = pool_states(h, torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool))
    assert torch.allclose(right["no_pos0"], torch.tensor([[3.0, 5.0], [0.0, 1.0]]))
    hl = torch.tensor(
        [[[3.0, 4.0], [0.0, 2.0], [6.0, 8.0]], [[np.nan, np.nan], [1.0, 0.0], [0.0, 1.0]]]
    )
    left = pool_states(hl, torch.tensor([[1, 1, 1], [0, 1, 1]], dtype=torch.bool))
    assert torch.allclose(left["no_pos0"], right["no_pos0"])


@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("bos", [True, False])
def test_no_pos0_matches_explicit_loop(tiny_model, tiny_passages, side, bos):
    loaded = tiny_model("llama", bos=bos)
    got = extract_pooled(loaded, tiny_passages, max_tokens=40, batch_size=5, padding_side=side)
    want = []
    for ids in _ids(loaded, tiny_passages, 40):
        want.append(np.stack([x[1:].mean(0) for x in _raw_states(loaded, ids)]))  # (L+1, d)
    want = np.stack(want, axis=1)  # (L+1, N, d)
    np.testing.assert_allclose(got.pooled["no_pos0"], want, rtol=1e-5, atol=1e-5)
    # a different control from default whenever position 0 differs from the rest
    assert not np.allclose(got.pooled["no_pos0"], got.pooled["default"])


# ---------------------------------------------------------------------------------------------
# massive activations
# ---------------------------------------------------------------------------------------------


def test_passage_maxima_hand_made_left_padding_ignores_nan():
    h = torch.zeros(2, 4, 3)
    h[0, 2, 1] = -7.0  # passage 0 (right padding, 3 real tokens): position 2, feature 1
    h[0, 3, 0] = 99.0  # padding
    h[1, 0, :] = np.nan  # padding of passage 1 (left padding, 3 real tokens)
    h[1, 1, 2] = 5.0  # passage 1's first real token: position 0, feature 2
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]], dtype=torch.bool)
    value, pos, dim = activations.passage_maxima(h, mask)
    assert value.tolist() == [7.0, 5.0]
    assert pos.tolist() == [2, 0]
    assert dim.tolist() == [1, 2]


def test_most_frequent_and_onset():
    assert activations.most_frequent([3, 1, 3, 1, 2]) == 1  # tie 1 vs 3: the smaller
    assert activations.most_frequent([5, 5, 0]) == 5
    assert activations.massive_onset([1.0, 50.0, 100.0, 101.0, 3000.0]) == 3  # strictly above 100
    assert activations.massive_onset([1.0, float("nan"), 2.0]) is None


def test_massive_statistics_match_naive_loop(tiny_model, tiny_passages):
    loaded = tiny_model("llama")
    got = bos_diagnostics(loaded, tiny_passages, max_tokens=40, batch_size=5)
    per = [_raw_states(loaded, ids) for ids in _ids(loaded, tiny_passages, 40)]
    L1 = loaded.layers + 1
    for layer in range(L1):
        a = [np.abs(p[layer]) for p in per]  # (T_b, d)
        m = np.array([x.max() for x in a])
        median = np.median(np.concatenate([x.ravel() for x in a]))
        where = [np.unravel_index(np.argmax(x), x.shape) for x in a]
        np.testing.assert_allclose(got.massive_ratio[layer], m.mean() / median, rtol=1e-5)
        np.testing.assert_allclose(got.massive_median[layer], median, rtol=1e-5)
        pos = np.array([w[0] for w in where])
        dim = np.array([w[1] for w in where])
        assert got.massive_position[layer] == activations.most_frequent(pos)
        assert got.massive_dim[layer] == activations.most_frequent(dim)
        np.testing.assert_array_equal(got.passage_max_position[:, layer], pos)
        for b, p in enumerate(per):  # inspector norms: ||h_l[t]|| per token
            np.testing.assert_allclose(
                got.token_norms[b][layer], np.linalg.norm(p[layer], axis=1), rtol=1e-5
            )
    assert got.token_ids[0] == _ids(loaded, tiny_passages, 40)[0]
    assert got.tokens[0][0] == "<bos>" and "".join(got.tokens[0][1:]) == tiny_passages[0][:39]


@pytest.mark.parametrize(("k", "j"), [(2, 17), (1, 5)])
def test_planted_massive_activation_is_found(tiny_passages, k, j):
    """A hook on blocks k..L sets feature j at position 0 to 1e4 x the largest other |h|: the
    onset is k (h_k, the output of block k), at position 0, feature j."""
    loaded = load_model("tiny-llama", device="cpu", dtype="float32")  # private copy
    clean = bos_diagnostics(loaded, tiny_passages, max_tokens=40)
    assert clean.massive_onset is None  # random init: no natural massive activation

    def plant(_module, _args, output):
        h = output[0] if isinstance(output, tuple | list) else output
        others = torch.cat([h[..., :j], h[..., j + 1 :]], -1).abs().amax()
        h[:, 0, j] = 1e4 * others

    blocks = decoder_layers(loaded.model)
    handles = [blocks[i].register_forward_hook(plant) for i in range(k - 1, loaded.layers)]
    try:
        got = bos_diagnostics(loaded, tiny_passages, max_tokens=40, batch_size=4)
    finally:
        for h in handles:
            h.remove()
    assert got.massive_onset == k
    assert all(r < activations.MASSIVE_THRESHOLD for r in got.massive_ratio[:k])
    assert all(r > 1e3 for r in got.massive_ratio[k:])
    assert list(got.massive_position[k:]) == [0] * (loaded.layers + 1 - k)
    assert list(got.massive_dim[k:]) == [j] * (loaded.layers + 1 - k)
    v = bos_verdict(
        {"default": 5.0}, massive_ratio=got.massive_ratio, massive_position=got.massive_position
    )
    assert v.massive_layer == k and f"position 0 from layer {k}" in v.sentence


def test_layer_groups_under_a_small_memory_budget_give_the_same_numbers(
    tiny_model, tiny_passages, monkeypatch
):
    """When the |h| values of all layers do not fit VALUES_BUDGET, the medians are taken over
    extra passes, a group of layers each: the same numbers, one more pass per group."""
    from deffcore.lenses import diagnostics

    loaded = tiny_model("llama")
    whole = bos_diagnostics(loaded, tiny_passages, max_tokens=40, batch_size=5)
    calls = []
    tokens = sum(len(s) for s in whole.token_ids)
    monkeypatch.setattr(diagnostics, "VALUES_BUDGET", 2 * tokens * loaded.d_model * 4)
    grouped = bos_diagnostics(
        loaded, tiny_passages, max_tokens=40, batch_size=5, progress=lambda *a: calls.append(a)
    )
    np.testing.assert_array_equal(grouped.massive_median, whole.massive_median)
    np.testing.assert_array_equal(grouped.massive_ratio, whole.massive_ratio)
    np.testing.assert_array_equal(grouped.sink_scores, whole.sink_scores)
    n = len(whole.token_ids)
    assert len(calls) == 3 * 3  # 5 states in groups of 2 -> 3 passes of 3 batches
    assert calls[-1][:2] == (3 * n, 3 * n)


# ---------------------------------------------------------------------------------------------
# attention sinks
# ---------------------------------------------------------------------------------------------
# attention sinks
# ---------------------------------------------------------------------------------------------


def _planted_attention(T: int, n: int) -> torch.Tensor:
    """(3, T, T) causal attention of one passage of n real tokens: head 0 puts 0.9 on key 0,
    head 1 is uniform over the causal keys, head 2 puts 0.2 on key 0; rows >= n are NaN."""
    A = torch.full((3, T, T), float("nan"), dtype=torch.float64)
    for t in range(n):
        for h, w0 in ((0, 0.9), (2, 0.2)):
            A[h, t, : t + 1] = 0.0 if t else 1.0
            if t:
                A[h, t, 0] = w0
                A[h, t, 1 : t + 1] = (1 - w0) / t
        A[1, t, : t + 1] = 1.0 / (t + 1)
        A[:, t, t + 1 :] = 0.0
    return A


def test_sink_scores_of_planted_attention_both_padding_sides():
    T = 5
    right = torch.stack([_planted_attention(T, 5), _planted_attention(T, 3)])
    mask = torch.tensor([[1] * 5, [1, 1, 1, 0, 0]], dtype=torch.bool)
    s = activations.sink_scores_batch(right, mask).numpy()
    uniform5 = (1 / 2 + 1 / 3 + 1 / 4 + 1 / 5) / 4  # mean over queries t = 1..4 of 1/(t+1)
    uniform3 = (1 / 2 + 1 / 3) / 2
    np.testing.assert_allclose(s, [[0.9, uniform5, 0.2], [0.9, uniform3, 0.2]], rtol=1e-12)
    # the same passage left-padded: its keys and queries shift by the 2 padding slots
    left = torch.full((1, 3, T, T), float("nan"), dtype=torch.float64)
    left[0, :, 2:, 2:] = _planted_attention(3, 3)
    s_left = activations.sink_scores_batch(left, torch.tensor([[0, 0, 1, 1, 1]], dtype=torch.bool))
    np.testing.assert_allclose(s_left.numpy(), s[1:], rtol=1e-12)
    # mean over passages, then the share of heads above 0.3: uniform attention over <= 5
    # positions still gives a sink (0.32 and 0.42 > 0.3), 0.2 does not
    assert uniform5 > 0.3
    np.testing.assert_allclose(activations.sink_fraction(s.mean(0, keepdims=True)), [2 / 3])
    np.testing.assert_allclose(
        activations.sink_fraction(np.array([[0.3, 0.31], [0.0, 1.0]])), [0.5, 0.5]
    )


def test_sink_fraction_end_to_end_closed_form(tiny_passages):
    """With every query projection zeroed, each head attends uniformly to the causal keys, so
    a_{l,h} = mean_b mean_{t=1..n_b-1} 1/(t+1) in every block and head."""
    loaded = load_model("tiny-llama", device="cpu", dtype="float32")  # private copy
    for block in decoder_layers(loaded.model):
        torch.nn.init.zeros_(block.self_attn.q_proj.weight)
    short = [[1, 5, 6], [1, 7, 8, 9]]  # 3 and 4 tokens: uniform attention alone passes 0.3
    ids = short + [loaded.tokenizer(t).input_ids[:12] for t in tiny_passages[:6]]
    got = bos_diagnostics(loaded, token_ids=ids, batch_size=4)
    lengths = [len(s) for s in got.token_ids if len(s) >= 6]
    assert got.sink_passages == len(lengths) == len(ids) - 2
    want = np.mean([np.mean([1 / (t + 1) for t in range(1, n)]) for n in lengths])
    np.testing.assert_allclose(got.sink_scores, want, rtol=1e-5)
    np.testing.assert_allclose(got.sink_baseline, want, rtol=1e-12)  # it *is* uniform attention
    assert got.sink_fraction.tolist() == [float(want > 0.3)] * loaded.layers
    assert loaded.model.config._attn_implementation == "sdpa"  # restored after the pass


def test_sink_fraction_is_per_block_and_batch_independent(tiny_model, tiny_passages):
    loaded = tiny_model("gemma3")  # sliding-window and global blocks
    one = bos_diagnostics(loaded, tiny_passages, max_tokens=40, batch_size=1)
    many = bos_diagnostics(loaded, tiny_passages, max_tokens=40, batch_size=7)
    assert one.sink_fraction.shape == (loaded.layers,)
    assert ((one.sink_fraction >= 0) & (one.sink_fraction <= 1)).all()
    assert ((one.sink_scores >= 0) & (one.sink_scores <= 1)).all()
    np.testing.assert_allclose(one.sink_scores, many.sink_scores, atol=1e-6)
    np.testing.assert_allclose(one.massive_ratio, many.massive_ratio, rtol=1e-5)


def test_gu_scores_of_planted_attention_include_query_0_both_padding_sides():
    T = 5
    right = torch.stack([_planted_attention(T, 5), _planted_attention(T, 3)])
    mask = torch.tensor([[1] * 5, [1, 1, 1, 0, 0]], dtype=torch.bool)
    s = gu_scores_batch(right, mask).numpy()
    # query 0 attends 1 to itself; head 0 puts 0.9 on key 0 afterwards, head 2 0.2
    want = [
        [(1 + 4 * 0.9) / 5, gu_uniform_score(5), (1 + 4 * 0.2) / 5],
        [(1 + 2 * 0.9) / 3, gu_uniform_score(3), (1 + 2 * 0.2) / 3],
    ]
    np.testing.assert_allclose(s, want, rtol=1e-12)
    # the first 2 tokens only (a window shorter than the passage)
    two = gu_scores_batch(right, mask, max_tokens=2).numpy()
    np.testing.assert_allclose(two[:, 0], [(1 + 0.9) / 2] * 2, rtol=1e-12)
    left = torch.full((1, 3, T, T), float("nan"), dtype=torch.float64)
    left[0, :, 2:, 2:] = _planted_attention(3, 3)
    s_left = gu_scores_batch(left, torch.tensor([[0, 0, 1, 1, 1]], dtype=torch.bool))
    np.testing.assert_allclose(s_left.numpy(), s[1:], rtol=1e-12)
    # uniform attention: H_n / n, above 0.3 below 10 tokens
    assert gu_uniform_score(1) == 1.0 and gu_uniform_score(2) == 0.75
    assert gu_uniform_score(9) > 0.3 >= gu_uniform_score(10)
    assert gu_min_length() == 10 and gu_min_length(0.75) == 2


def _one_head(n: int, to_first: float) -> torch.Tensor:
    """(1, n, n) causal attention: query 0 on itself, later queries `to_first` on key 0 and the
    rest spread evenly over their other keys."""
    A = torch.zeros(1, n, n, dtype=torch.float64)
    A[0, 0, 0] = 1.0
    for t in range(1, n):
        A[0, t, 0] = to_first
        A[0, t, 1 : t + 1] = (1 - to_first) / t
    return A


def test_gu_thresholds_each_passage_before_averaging_unlike_our_score():
    """One head, two passages of 12 tokens: attention 0.9 to position 0 in one, 0 in the
    other. Gu et al. decide per passage (a sink in 1 of 2: 50%); our score averages first
    (0.45 > 0.3: a sink, 100%)."""
    attn = torch.stack([_one_head(12, 0.9), _one_head(12, 0.0)])  # (B=2, H=1, T, T)
    mask = torch.ones(2, 12, dtype=torch.bool)
    counts = GuCounts(layers=2)
    counts.add([attn, attn], mask)
    out = counts.result()
    assert out["gu_passages"] == 2
    assert out["gu_sink_rate"] == [[0.5], [0.5]] and out["gu_sink_fraction"] == [0.5, 0.5]
    assert out["gu_sink_metric"] == 0.5
    assert out["gu_baseline"] == pytest.approx(gu_uniform_score(12))
    ours = activations.sink_fraction(
        activations.sink_scores_batch(attn, mask).numpy().mean(0, keepdims=True)
    )
    assert ours.tolist() == [1.0]
    # passages shorter than 10 tokens are left out (uniform attention would pass 0.3)
    short = GuCounts(layers=1)
    short.add([torch.stack([_one_head(9, 0.9)])], torch.ones(1, 9, dtype=torch.bool))
    assert short.result()["gu_passages"] == 0 and short.result()["gu_sink_metric"] is None


def test_gu_first_64_tokens_is_a_window_of_its_own():
    """100 tokens, attention 0.4 to position 0 from queries 1..63 and none after: a sink on
    Gu et al.'s 64 tokens ((1 + 63 x 0.4) / 64 = 0.41), not on the whole passage (0.26)."""
    A = _one_head(100, 0.4)
    A[0, 64:, 0] = 0.0
    A[0, 64:, 1:] = torch.tril(torch.ones(100, 100, dtype=torch.float64))[64:, 1:]
    A[0, 64:, 1:] /= A[0, 64:, 1:].sum(-1, keepdim=True)
    counts = GuCounts(layers=1)
    counts.add([A[None]], torch.ones(1, 100, dtype=torch.bool))
    out = counts.result()
    assert out["gu_sink_rate"] == [[0.0]] and out["gu64_sink_rate"] == [[1.0]]
    assert out["gu64_baseline"] == pytest.approx(gu_uniform_score(64))
    assert out["gu_baseline"] == pytest.approx(gu_uniform_score(100))


def test_gu_metric_end_to_end_matches_a_naive_loop():
    """A private tiny-llama with sharpened queries (peaked, varied attention); its Gu counts
    from the batched, padded diagnostic pass against one unpadded eager forward per passage."""
    loaded = load_model("tiny-llama", device="cpu", dtype="float32")  # private copy
    with torch.no_grad():
        for block in decoder_layers(loaded.model):
            block.self_attn.q_proj.weight.mul_(40.0)
    rng = np.random.default_rng(3)
    lengths = (5, 12, 40, 70, 100, 23)
    ids = [[1, *rng.integers(3, 250, n - 1).tolist()] for n in lengths]
    got = bos_diagnostics(loaded, token_ids=ids, batch_size=4).to_dict(tokens=False)
    kept = [s for s in ids if len(s) >= 10]
    model = loaded.model
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        for window, prefix in ((None, "gu_"), (64, "gu64_")):
            sinks = 0.0
            for s in kept:
                with torch.no_grad():
                    att = model(input_ids=torch.tensor([s]), output_attentions=True).attentions
                n = len(s) if window is None else min(len(s), window)
                alpha = np.stack([a[0, :, :n, 0].double().mean(-1).numpy() for a in att])
                assert np.abs(alpha - 0.3).min() > 1e-4  # no score at the threshold
                sinks = sinks + (alpha > 0.3)
            np.testing.assert_allclose(got[f"{prefix}sink_rate"], sinks / len(kept), atol=1e-12)
            np.testing.assert_allclose(got[f"{prefix}sink_fraction"], (sinks / len(kept)).mean(1))
            want_base = np.mean(
                [gu_uniform_score(len(s) if window is None else min(len(s), window)) for s in kept]
            )
            assert got[f"{prefix}baseline"] == pytest.approx(want_base)
    finally:
        model.set_attn_implementation(previous)
    assert got["gu_passages"] == len(kept) == 5
    assert 0 < got["gu_sink_metric"] < 1


# ---------------------------------------------------------------------------------------------
# diagnose: the run's passages, cached in the run's entry
# ---------------------------------------------------------------------------------------------


def _spec(dataset: str, **kw) -> RunSpec:
    fields = {"model": "tiny-llama", "revision": None, "dataset": dataset, "n": 8}
    fields.update({"max_tokens": 24, "seed": 0, "dtype": "float32", **kw})
    return RunSpec(**fields)


def test_diagnose_uses_the_runs_passages_and_caches_in_its_entry(tiny_dataset, monkeypatch):
    from deffcore.inputs import model as loading
    from deffcore.inputs.texts import load_passages
    from deffcore.runs import measure as measurement

    spec = _spec(tiny_dataset)
    first = diagnose(spec)
    assert first["cached"] is False
    path = cache_dir() / spec.key() / "diagnostics.json"
    assert diagnostics_path(spec) == path
    assert not path.parent.exists()  # a run never measured: in memory, no folder
    tok = loading.load_model("tiny-llama").tokenizer
    want = [tok(t).input_ids[:24] for t in load_passages(tiny_dataset, 8, seed=0)]
    assert first["inspector"]["token_ids"] == want
    assert len(first["massive_ratio"]) == 5 and len(first["sink_fraction"]) == 4
    # the run itself can still be measured into the same folder, and diagnostics survive
    m = measurement.measure_spec(spec)
    assert not m.cached and (path.parent / "meta.json").is_file()
    # second call: no recomputation (the model is not loaded); now stored beside the run
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("model loaded"))
    second = diagnose(spec)
    assert second["cached"] is True and path.is_file()
    assert second["massive_ratio"] == first["massive_ratio"]
    # a damaged file is recomputed, not trusted
    path.write_text("{not json")
    assert read_diagnostics(spec) is None


def test_diagnose_windows_and_bos_add(tiny_dataset):
    from deffcore.inputs.model import load_model as load
    from deffcore.inputs.texts import all_documents, cut_windows, sample_windows

    spec = _spec(tiny_dataset, model="tiny-llama-nobos", passages="windows", bos="add", n=6)
    got = diagnose(spec)
    tok = load("tiny-llama-nobos").tokenizer
    docs = all_documents(tiny_dataset, 6, seed=0)
    want = sample_windows(cut_windows(tok, docs, 24, "add"), 6, 0)
    assert got["inspector"]["token_ids"] == want
    assert all(s[0] == tok.bos_token_id and tok.bos_token_id not in s[1:] for s in want)
    assert all(t[0] == "<bos>" for t in got["inspector"]["tokens"])
    assert read_diagnostics(spec)["spec"]["bos"] == "add"


# ---------------------------------------------------------------------------------------------
# the verdict
# ---------------------------------------------------------------------------------------------

FLIP = {
    "default": 6.0,
    "first_non_bos": -4.5,
    "token_normed": 3.0,
    "no_pos0": -2.0,
    "top1_pc": 1.0,
    "top3_pc": 0.5,
}
STABLE = {
    "default": 12.0,
    "first_non_bos": 9.5,
    "token_normed": 11.0,
    "no_pos0": 10.0,
    "top1_pc": 7.25,
    "top3_pc": 8.0,
}


def test_verdict_when_the_controls_flip_the_regime():
    ratio = [3.0, 40.0, 150.0, 900.0, 1200.0]
    position = [4, 0, 0, 0, 0]
    sinks = [0.0, 0.25, 0.5, 0.75]
    v = bos_verdict(FLIP, massive_ratio=ratio, massive_position=position, sink_fraction=sinks)
    assert v.regime_depends and v.flipped == ["first_non_bos", "no_pos0"]
    assert v.gap_move == pytest.approx(6.0 - (-4.5))
    assert v.default_gap == 6.0 and v.distinct == 6 and v.identical == {}
    assert v.regimes["top3_pc"] == v.regimes["top1_pc"] == "at the reference"  # +0.5, +1.0
    assert v.at_reference == ["top1_pc", "top3_pc"]
    assert v.massive_onset == 2 and v.massive_layer == 2 and v.massive_peak == 1200.0
    assert v.sink_max == 0.75 and v.sink_max_layer == 4 and v.sink_mean == pytest.approx(0.375)
    s = v.sentence
    assert s.startswith("The regime depends on the control")
    assert "first_non_bos and no_pos0 give D_eff > F_L" in s and "10.5 points" in s
    assert "top1_pc and top3_pc are at the reference (gap within ±1 point)" in s
    assert "position 0 from layer 2" in s and "1,200x at layer 4" in s
    assert "up to 75% of a block's heads" in s and "block 4" in s and "38% on average" in s


def test_verdict_when_the_controls_agree():
    ratio = [3.0, 40.0, 150.0, 90.0]  # above 100 at layer 2 but at position 3
    position = [0, 0, 3, 0]
    v = bos_verdict(STABLE, massive_ratio=ratio, massive_position=position, sink_fraction=[0, 0, 0])
    assert not v.regime_depends and v.flipped == [] and v.at_reference == []
    assert v.gap_move == pytest.approx(12.0 - 7.25)
    assert v.massive_onset == 2 and v.massive_onset_position == 3 and v.massive_layer is None
    assert v.sink_max == 0.0
    s = v.sentence
    assert "does not depend on the control: all 6 controls give D_eff < F_L" in s
    assert "+7.2% to +12.0%, a 4.8-point move" in s
    assert "from layer 2, at position 3, not position 0" in s
    assert "no head is an attention sink" in s


def test_verdict_without_diagnostics_and_nan_gaps():
    v = bos_verdict({**STABLE, "top3_pc": float("nan")})
    assert "top3_pc" not in v.gaps and "all 5 controls" in v.sentence
    assert "massive activations not computed" in v.sentence
    assert v.massive_layer is None and v.sink_max is None
    below = bos_verdict({"default": -3.0, "no_pos0": 2.0})
    assert below.flipped == ["no_pos0"] and "default gives D_eff > F_L" in below.sentence


def test_regime_tolerance_a_gap_near_zero_is_at_the_reference():
    # the case: +0.3% and -0.2% used to read "the regime depends on the control"
    v = bos_verdict({"default": 0.3, "first_non_bos": -0.2, "token_normed": 0.1})
    assert not v.regime_depends and v.flipped == []
    assert set(v.regimes.values()) == {"at the reference"}
    assert "all 3 controls are at the reference" in v.sentence
    # SPEC 11.5: within ±1 point without an interval (both edges included), beyond it a sign
    edge = bos_verdict({"default": 5.0, "a": 1.0, "b": -1.0, "c": 1.01, "d": -1.01})
    assert edge.regimes == {
        "default": "below",
        "a": "at the reference",
        "b": "at the reference",
        "c": "below",
        "d": "above",
    }
    assert edge.regime_depends and edge.flipped == ["d"]
    # one sign and some at the reference: the regime does not depend on the control
    mixed = bos_verdict({"default": 5.0, "no_pos0": 0.3, "top1_pc": 9.0})
    assert not mixed.regime_depends
    assert "2 of the 3 controls give D_eff < F_L" in mixed.sentence
    assert "no_pos0 is at the reference" in mixed.sentence
    # default at the reference while the others disagree on the sign
    split = bos_verdict({"default": 0.2, "a": 4.0, "b": -4.0})
    assert split.regime_depends and split.flipped == []
    assert "a gives D_eff < F_L but b gives D_eff > F_L" in split.sentence


def test_identical_controls_are_said_and_counted_once():
    gaps = {**STABLE, "no_pos0": STABLE["default"]}
    why = "every passage has 24 tokens and starts with the same token"
    v = bos_verdict(gaps, identical={"no_pos0": why})
    assert v.identical == {"no_pos0": why} and v.distinct == 5
    assert "all 5 distinct controls give D_eff < F_L" in v.sentence
    assert f"no_pos0 is the same control as default here ({why}), counted once" in v.sentence
    # without the run's structure: guessed from equal gaps (to 0.001 points), not otherwise
    assert bos_verdict(gaps).identical.keys() == {"no_pos0"}
    assert bos_verdict({**gaps, "no_pos0": 12.0009}).distinct == 5
    assert bos_verdict({**gaps, "no_pos0": 12.002}).identical == {}
    assert bos_verdict(gaps, identical={}).distinct == 6  # known to be distinct
    # an identical control cannot flip the regime on its own
    flip = bos_verdict({"default": 3.0, "no_pos0": -3.0}, identical={"no_pos0": why})
    assert not flip.regime_depends and flip.flipped == []


class _Pooled:
    def __init__(self, default, no_pos0, lengths):
        self.pooled = {"default": default, "no_pos0": no_pos0}
        self.lengths = lengths


def test_no_pos0_identity_on_hand_made_pooled_states():
    rng = np.random.default_rng(0)
    layers, n, d, T = 3, 20, 5, 16
    rest = rng.standard_normal((layers, n, d))  # mean over t >= 1 of each passage
    first = rng.standard_normal((layers, 1, d))  # h_l[0]: one vector for every passage
    default = (first + (T - 1) * rest) / T
    lengths = np.full(n, T)
    f32 = _Pooled(default.astype(np.float32), rest.astype(np.float32), lengths)
    why = no_pos0_identity(f32)
    assert why is not None and "16 tokens" in why and "starts with the same token" in why
    assert no_pos0_identity(f32, "unbiased_cka") == why
    assert no_pos0_identity(f32, "cosine") is None  # cosine sees the offset
    # a first token that differs between passages, unequal lengths, no lengths: not identical
    varied = (first + 0.01 * rng.standard_normal((layers, n, d)) + (T - 1) * rest) / T
    assert no_pos0_identity(_Pooled(varied, rest, lengths)) is None
    assert no_pos0_identity(_Pooled(default, rest, np.r_[lengths[:-1], T - 1])) is None
    assert no_pos0_identity(_Pooled(default, rest, None)) is None
    # the claim itself: linear and unbiased CKA of the two poolings are equal
    from deffcore.measures.similarity import similarity_matrix

    for metric in ("cka", "unbiased_cka"):
        np.testing.assert_allclose(
            similarity_matrix(default[1:], metric), similarity_matrix(rest[1:], metric), atol=1e-12
        )


@pytest.mark.parametrize(("model", "same"), [("tiny-llama", True), ("tiny-llama-nobos", False)])
def test_no_pos0_flagged_identical_on_a_windows_run(tiny_dataset, model, same):
    """Token windows with a BOS: every window starts with BOS and has max_tokens tokens, so
    no_pos0 is default (the verdict says so and counts it once); without a BOS the first
    token varies and the controls differ."""
    from deffcore.runs.measure import measure

    m = measure(model=model, dataset=tiny_dataset, n=6, max_tokens=16, passages="windows")
    found = identical_controls(m, "cka")
    assert (found.keys() == {"no_pos0"}) is same
    S_def, S_nop = m.similarity("default", "cka"), m.similarity("no_pos0", "cka")
    assert np.abs(S_def - S_nop).max() < 1e-5 if same else np.abs(S_def - S_nop).max() > 1e-3
    v = verdict_for(m, None, "cka")
    assert ("no_pos0 is the same control as default here" in v.sentence) is same
    assert v.distinct == (5 if same else 6)
    assert identical_controls(m, "cosine") == {}


def test_sun_criterion_per_activation_hand_made():
    # two passages, four states: |a| > 100 (strictly) and >= 1,000 x the median (inclusive)
    passage_max = np.array([[150.0, 99.0, 200.0, 150.0], [50.0, 5000.0, 200.0, 150.0]])
    median = [0.1, 0.01, 0.2, 1.0]  # state 3: 150 < 1,000 x 1.0, not massive
    flags = sun_flags(passage_max, median)
    assert flags.tolist() == [[True, False, True, False], [False, True, True, False]]
    np.testing.assert_allclose(sun_share(passage_max, median), [0.5, 0.5, 1.0, 0.0])
    assert sun_onset([0.0, 0.0, 0.25]) == 2 and sun_onset([0.0, None, float("nan")]) is None
    positions = np.array([[3, 1, 4, 0], [0, 1, 2, 0]])
    assert sun_positions(flags, positions).tolist() == [3, 1, 2, -1]  # tie 4 vs 2: smaller
    assert sun_flags(passage_max, [0.1, None, 0.2, 1.0])[:, 1].tolist() == [False, False]


def test_sun_share_from_passage_maxima_equals_the_per_activation_count():
    """The share computed from each passage's largest |h| equals a naive count over every
    activation (both conditions grow with |a|), on random states with planted spikes."""
    rng = np.random.default_rng(0)
    # 12 passages of 3..8 tokens, 5 states, 6 features: (T_b, states, d)
    states = [rng.standard_normal((int(rng.integers(3, 9)), 5, 6)) * 0.05 for _ in range(12)]
    for b, x in enumerate(states):
        if b % 3 == 0:
            x[1, 2, 4] = 250.0  # massive in state 2 of every third passage
        if b % 4 == 1:
            x[0, 3, 0] = -90.0  # large but not > 100: never massive
    n_states = 5
    median = [
        np.median(np.concatenate([np.abs(x[:, k]).ravel() for x in states]))
        for k in range(n_states)
    ]
    naive = np.zeros(n_states)
    for k in range(n_states):
        for x in states:
            a = np.abs(x[:, k])
            naive[k] += bool(np.any((a > 100) & (a >= 1000 * median[k])))
    naive /= len(states)
    passage_max = np.array([[np.abs(x[:, k]).max() for k in range(n_states)] for x in states])
    np.testing.assert_allclose(sun_share(passage_max, median), naive)
    assert naive[2] == pytest.approx(4 / 12) and naive[3] == 0.0


def test_sun_share_end_to_end_matches_a_naive_loop(tiny_passages):
    """A private tiny-llama whose embedding gives two token ids a feature of 3,000: passages
    holding them carry a massive activation from h_0 on; the share per state is checked
    against every activation of the unpadded states (naive loop)."""
    loaded = load_model("tiny-llama", device="cpu", dtype="float32")  # private copy
    ids = _ids(loaded, tiny_passages, 40)
    counts = {}
    for s in ids:
        for i in set(s[1:]):
            counts[i] = counts.get(i, 0) + 1
    planted = sorted(i for i, c in counts.items() if c == 1)[:2]  # in one passage each
    with torch.no_grad():
        loaded.model.get_input_embeddings().weight[planted, 3] = 3000.0
    got = bos_diagnostics(loaded, token_ids=ids, batch_size=3)
    per = [_raw_states(loaded, s) for s in ids]
    L1 = loaded.layers + 1
    for layer in range(L1):
        a = [np.abs(p[layer]) for p in per]
        median = np.median(np.concatenate([x.ravel() for x in a]))
        hits = [bool(np.any((x > 100) & (x >= 1000 * median))) for x in a]
        assert got.sun_share[layer] == pytest.approx(np.mean(hits)), layer
        where = [
            int(np.unravel_index(np.argmax(x), x.shape)[0])
            for x, h in zip(a, hits, strict=True)
            if h
        ]
        want = activations.most_frequent(where) if where else -1
        assert got.sun_position[layer] == want
    assert got.sun_share[0] == pytest.approx(2 / len(ids))  # the two planted passages
    assert got.sun_onset == 0
    d = got.to_dict(tokens=False)
    assert d["sun_share"] == [float(v) for v in got.sun_share] and d["sun_onset"] == 0
    # the project's ratio averages the maxima first: a different number, named apart
    assert d["massive_ratio"][0] == pytest.approx(got.massive_max[0] / got.massive_median[0])


def test_the_uniform_sink_baseline_closed_forms():
    # uniform causal attention: mean_{t=1..n-1} 1/(t+1)
    assert activations.uniform_sink_score(2) == 0.5
    assert activations.uniform_sink_score(3) == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert activations.uniform_sink_score(64) == pytest.approx(0.0594, abs=1e-4)
    assert activations.uniform_sink_score(5) > 0.3 >= activations.uniform_sink_score(6)
    assert activations.sink_min_length() == 6 and activations.sink_min_length(0.5) == 2
    with pytest.raises(Exception, match=">= 2 tokens"):
        activations.uniform_sink_score(1)


def test_the_sun_sentence_says_the_onset_share_and_where_most_passages_have_one():
    """A walk's table: a first massive activation in 2% of the passages at layer 3, every
    passage from layer 12 to 28 (most from 10 to 29), half at layer 31: the sentence says all
    three, never
    "from layer 3, in 2% of the passages" as if that held from layer 3 on."""
    share = [0.0] * 3 + [0.02, 0.0, 0.1, 0.3, 0.4, 0.45, 0.49, 0.6, 0.9] + [1.0] * 17
    share += [0.7, 0.2, 0.5]  # layers 29, 30, 31
    diag = {
        "massive_ratio": [5.0] * 3 + [150.0] * 29,
        "massive_position": [0] * 32,
        "sun_share": share,
        "sun_position": [-1] * 3 + [0] * 29,
    }
    v = bos_verdict({"default": 5.0}, **verdict_inputs(diag))
    assert v.sun_onset == 3 and v.sun_onset_share == pytest.approx(0.02)
    assert v.sun_most == [(10, 29), (31, 31)] and v.sun_peak_share == 1.0
    assert (
        "one first appears at layer 3, in 2% of the passages there, at position 0, and most "
        "passages (≥ 50%) have one at layers 10–29 and layer 31, up to 100%" in v.sentence
    )
    assert "from layer 3, in 2% of the passages" not in v.sentence


def test_verdict_reports_both_massive_criteria_gu_and_the_uniform_baseline():
    ratio = [5.0, 233.0, 800.0, 13500.0]  # the ratio passes 100 at layer 1 ...
    diag = {
        "massive_ratio": ratio,
        "massive_position": [3, 0, 0, 0],
        "sun_share": [0.0, 0.0, 0.0, 0.75],  # ... Sun et al.'s criterion only at layer 3
        "sun_position": [-1, -1, -1, 1],
        "sink_fraction": [0.0, 0.5, 1.0],
        "sink_baseline": 0.0594,
        "sink_passages": 64,
        "gu_sink_fraction": [0.25, 0.5, 0.0],
    }
    v = bos_verdict({"default": 5.0}, **verdict_inputs(diag))
    assert v.massive_onset == 1 and v.massive_layer == 1 and v.sun_onset == 3
    assert v.sun_evaluated and v.sun_onset_position == 1 and v.sun_onset_share == 0.75
    assert "position 0 from layer 1 by the ratio" in v.sentence
    assert (
        "its state's median) one first appears at layer 3, in 75% of the passages there, at "
        "position 1, and most passages (≥ 50%) have one at layer 3, up to 75%" in v.sentence
    )
    assert "uniform attention would score 0.06" in v.sentence
    assert v.gu_sink_metric == pytest.approx(0.25) and v.gu_sink_max_layer == 2
    assert (
        "by Gu et al.'s metric" in v.sentence and "25% of heads are sinks on average" in v.sentence
    )
    few = bos_verdict({"default": 5.0}, **verdict_inputs({**diag, "sun_share": [0, 0.1, 0.3, 0]}))
    assert few.sun_most == [] and few.sun_peak_share == 0.3
    assert "no state has one in most passages (at most 30%, at layer 2)" in few.sentence
    none = bos_verdict({"default": 5.0}, **verdict_inputs({**diag, "sun_share": [0.0] * 4}))
    assert none.sun_onset is None and "no passage has one in any state" in none.sentence
    old = bos_verdict({"default": 5.0}, massive_ratio=ratio, massive_position=[0] * 4)
    assert not old.sun_evaluated and "needs each passage's activations" in old.sentence
    assert old.gu_sink_metric is None and "Gu et al." not in old.sentence
    short = bos_verdict(
        {"default": 5.0}, sink_fraction=[None, None, None], sink_passages=0, sink_baseline=None
    )
    assert short.sink_max is None and "no diagnosed passage has the 6 tokens" in short.sentence


# ---------------------------------------------------------------------------------------------
# figures (deffcore.figures, "BOS & attention sinks")
# ---------------------------------------------------------------------------------------------


def test_bos_figures_carry_the_numbers():
    from deffcore import figures

    ratio, pos, dim = [5.0, 150.0, 2000.0], [3, 0, 0], [1, 7, 7]
    fig = figures.massive_ratio_figure(ratio, pos, dim)
    assert fig.layout.yaxis.type == "log" and "onset at layer 1" in fig.layout.title.text
    np.testing.assert_allclose(fig.data[0].y, ratio)
    np.testing.assert_array_equal(np.asarray(fig.data[0].customdata)[:, 1], dim)
    sinks = figures.sink_fraction_figure([0.0, 0.5, 1.0])
    assert list(sinks.data[0].x) == [1, 2, 3]  # blocks 1..L
    norms = np.array([[1.0, 10.0, 100.0], [0.1, 1.0, 1000.0]])
    heat = figures.token_norm_heatmap(
        norms, ["<bos>", "a", "\n"], max_position=[2, 2], max_dim=[4, 5], max_value=[9.0, 99.0]
    )
    np.testing.assert_allclose(heat.data[0].z, np.log10(norms))
    np.testing.assert_allclose(heat.data[0].customdata, norms)
    # a token is text, never Plotly's HTML-like markup (core.safe_text.plotly_text)
    assert list(heat.data[0].text[0]) == ["&lt;bos&gt;", "a", "\\n"]
    assert list(heat.data[1].x) == [2, 2]
    assert list(heat.data[0].colorbar.ticktext) == ["0.1", "1", "10", "100", "1000"]
    assert figures.POOLING_COLORS["no_pos0"] and figures.POOLING_SYMBOLS["no_pos0"]


def test_the_inspector_outlines_the_largest_feature_and_leaves_its_cell_visible():
    """The caption points at the position-0 column, where the largest |h_j| usually sits: the
    mark must leave that cell's colour visible, so nothing opaque is drawn on a cell's centre;
    the cell is outlined on its border instead."""
    from deffcore import figures

    norms = np.arange(1.0, 13.0).reshape(3, 4)
    heat = figures.token_norm_heatmap(
        norms, list("abcd"), max_position=[0, 0, 2], max_dim=[4, 5, 6], max_value=[9, 99, 999]
    )
    centres = {(t, layer) for t in range(4) for layer in range(3)}
    for trace in heat.data[1:]:
        drawn = trace.mode and "markers" in trace.mode and trace.marker.opacity != 0
        points = set(zip(trace.x, trace.y, strict=True))
        assert not (drawn and points & centres), trace.name  # nothing over a cell's colour
        assert trace.fill in (None, "none")
    hover = next(t for t in heat.data[1:] if t.hovertemplate)
    assert list(hover.x) == [0, 0, 2] and list(hover.customdata[:, 0]) == [4, 5, 6]
    (outline,) = [t for t in heat.data[1:] if t.mode == "lines"]
    assert outline.showlegend is not False and "largest |h_j|" in outline.name
    x, y = list(outline.x), list(outline.y)
    for layer, t in enumerate([0, 0, 2]):  # each cell's four corners, a closed border
        cell = list(zip(x[6 * layer : 6 * layer + 5], y[6 * layer : 6 * layer + 5], strict=True))
        assert cell[0] == cell[-1]
        assert {(abs(a - t), abs(b - layer)) for a, b in cell} == {(0.5, 0.5)}
