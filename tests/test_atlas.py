"""The depth-use atlas's measures (SPEC 16), each against an independent computation.

- From `output_hidden_states` (h_0 .. h_{L-1}) and a pre-hook on the final norm (h_L), one
  unpadded passage at a time, in float64 numpy: r_l, c_l, BI_l, the angular distance at the last
  token, on every tiny architecture; the attention / MLP split from independent hooks on the
  *attention* sublayer's write (the atlas hooks the MLP's), including a sequential GPT-NeoX.
- Closed forms on exactly orthogonal updates (h_0 = a_0 e_0, u_l = a_l e_l with orthonormal e,
  a different basis per token): r_l = a_l / sqrt(A_{l-1}), c_l = 0, BI_l = 1 - sqrt(A_{l-1}/A_l),
  d(i, j) = arccos(sqrt(A_i / A_j)) / π with A_l = sum_{m<=l} a_m^2; and the population values
  of the synthetic `orthogonal_updates` construction (iid updates, orthogonal in expectation).
- The derived numbers (phase point, Gromov et al.'s block, the columns) on hand-made inputs; the
  bootstrap interval's coverage on a construction whose population value is known.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from deffcore.extraction.atlas import AtlasTap, rows_from_states, split_kind
from deffcore.extraction.forward import extract_pooled
from deffcore.inputs.architecture import decoder_layers, final_norm
from deffcore.measures.atlas import (
    columns_of,
    gromov_curve,
    gromov_drop,
    phase_point,
    summarize,
    token_weighted_bi,
)

#: The module whose output is the attention sublayer's write, per architecture (independent of
#: the atlas's own hook, which is on the MLP's write).
ATTENTION_WRITE = {
    "llama": "self_attn",
    "qwen2": "self_attn",
    "qwen3": "self_attn",
    "gemma3": "post_attention_layernorm",
    "olmo2": "post_attention_layernorm",
    "gpt2": "attn",
    "gptneox": "post_attention_dropout",
}


def _first(x):
    return x[0] if isinstance(x, tuple | list) else x


def naive_passage(model, ids: list[int], arch: str | None = None) -> dict[str, np.ndarray]:
    """One unpadded passage: per-token values averaged over its tokens, float64."""
    captured, attn = {}, {}
    hooks = [
        final_norm(model).register_forward_pre_hook(
            lambda _m, args: captured.__setitem__("hL", args[0])
        )
    ]
    if arch is not None:
        for i, blk in enumerate(decoder_layers(model)):
            module = getattr(blk, ATTENTION_WRITE[arch])
            hooks.append(
                module.register_forward_hook(
                    lambda _m, _a, out, i=i: attn.__setitem__(i, _first(out))
                )
            )
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    finally:
        for h in hooks:
            h.remove()
    hs = [x[0].double().numpy() for x in out.hidden_states[:-1]]
    hs.append(captured["hL"][0].double().numpy())
    res = {k: [] for k in ("r", "c", "bi", "r_attn", "c_attn", "r_mlp", "c_mlp")}
    parallel = getattr(model.config, "use_parallel_residual", False)

    def norm(x):
        return np.linalg.norm(x, axis=1)

    def cos(x, y):
        return (x * y).sum(1) / (norm(x) * norm(y))

    for layer in range(1, len(hs)):
        prev, cur = hs[layer - 1], hs[layer]
        u = cur - prev
        res["r"].append((norm(u) / norm(prev)).mean())
        res["c"].append(cos(u, prev).mean())
        res["bi"].append(1 - cos(prev, cur).mean())
        if arch is not None:
            a = attn[layer - 1][0].double().numpy()
            m = u - a
            base = prev if parallel else prev + a
            res["r_attn"].append((norm(a) / norm(prev)).mean())
            res["c_attn"].append(cos(a, prev).mean())
            res["r_mlp"].append((norm(m) / norm(base)).mean())
            res["c_mlp"].append(cos(m, base).mean())
    last = np.stack([h[-1] for h in hs])
    last /= np.linalg.norm(last, axis=1, keepdims=True)
    res["angular"] = np.arccos(np.clip(last @ last.T, -1, 1)) / np.pi
    return {k: np.asarray(v) for k, v in res.items() if len(v)}


def _ids(loaded, passages, max_tokens):
    return [s for s in (loaded.tokenizer(t).input_ids[:max_tokens] for t in passages) if len(s) > 1]


def _tap_rows(loaded, passages, *, max_tokens=40, side="right", batch_size=5):
    tap = AtlasTap()
    pooled = extract_pooled(
        loaded,
        passages,
        max_tokens=max_tokens,
        batch_size=batch_size,
        padding_side=side,
        taps=[tap],
    )
    return tap.rows(pooled.lengths), pooled


def test_every_measure_matches_output_hidden_states(tiny_model, tiny_arch, tiny_passages):
    loaded = tiny_model(tiny_arch)
    rows, pooled = _tap_rows(loaded, tiny_passages)
    want = [naive_passage(loaded.model, ids, tiny_arch) for ids in _ids(loaded, tiny_passages, 40)]
    for name in ("r", "c", "bi"):
        np.testing.assert_allclose(getattr(rows, name), [w[name] for w in want], atol=2e-6)
    np.testing.assert_allclose(rows.angular, [w["angular"] for w in want], atol=2e-6)
    assert rows.split_kind == ("parallel" if tiny_arch == "gptneox" else "sequential")
    for name in ("r_attn", "c_attn", "r_mlp", "c_mlp"):
        np.testing.assert_allclose(
            rows.split[name], [w[name] for w in want], atol=2e-5, err_msg=name
        )
    assert rows.lengths.tolist() == pooled.lengths.tolist()
    # the matrix is exact: symmetric, zero diagonal, within [0, 1]
    assert (rows.angular == rows.angular.transpose(0, 2, 1)).all()
    assert (np.diagonal(rows.angular, axis1=1, axis2=2) == 0).all()


def test_padding_side_and_batching_do_not_change_the_rows(tiny_model, tiny_passages):
    loaded = tiny_model("gemma3")
    right, _ = _tap_rows(loaded, tiny_passages, batch_size=5)
    left, _ = _tap_rows(loaded, tiny_passages, side="left", batch_size=3)
    for name in ("r", "c", "bi", "angular"):
        np.testing.assert_allclose(getattr(left, name), getattr(right, name), atol=2e-6)


def test_a_sequential_gpt_neox_is_split_as_sequential(tiny_model, tiny_passages):
    from transformers import GPTNeoXForCausalLM

    from deffcore.runs.external import wrap_loaded

    base = tiny_model("gptneox")
    config = copy.deepcopy(base.model.config)
    config.use_parallel_residual = False
    torch.manual_seed(0)
    model = GPTNeoXForCausalLM(config).eval()
    loaded = wrap_loaded(model, base.tokenizer, "loaded")
    assert split_kind(model) == "sequential"
    rows, _ = _tap_rows(loaded, tiny_passages)
    want = [naive_passage(model, ids, "gptneox") for ids in _ids(loaded, tiny_passages, 40)]
    for name in ("r_attn", "c_attn", "r_mlp", "c_mlp"):
        np.testing.assert_allclose(rows.split[name], [w[name] for w in want], atol=2e-5)


def test_an_architecture_not_verified_has_no_split(tiny_model, tiny_passages, monkeypatch):
    from deffcore.extraction import atlas as atlas_tap

    monkeypatch.setattr(atlas_tap, "SPLIT_ARCHITECTURES", {})
    rows, _ = _tap_rows(tiny_model("llama"), tiny_passages)
    assert rows.split is None and rows.split_kind is None


# ---------------------------------------------------------------------------------------------
# Closed forms


def orthogonal_update_states(sizes: np.ndarray, n: int, T: int, seed: int = 0):
    """h_0 .. h_L (N, T, d) with h_0 = a_0 e_0 and u_l = a_l e_l, the e's orthonormal and
    drawn afresh per token (d = L + 3)."""
    rng = np.random.default_rng(seed)
    L = len(sizes) - 1
    d = L + 3
    states = np.zeros((L + 1, n, T, d))
    for b in range(n):
        for t in range(T):
            q, _ = np.linalg.qr(rng.standard_normal((d, d)))
            h = np.zeros(d)
            for layer in range(L + 1):
                h = h + sizes[layer] * q[:, layer]
                states[layer, b, t] = h
    return [torch.tensor(s, dtype=torch.float32) for s in states]


def test_exact_orthogonal_updates_give_the_closed_forms():
    sizes = np.array([1.0, 0.5, 2.0, 1.0, 0.25, 3.0])  # a_0 .. a_L
    L, A = len(sizes) - 1, np.cumsum(sizes**2)
    states = orthogonal_update_states(sizes, n=3, T=4)
    rows = rows_from_states(states, torch.ones(3, 4))
    np.testing.assert_allclose(rows.r, np.tile(sizes[1:] / np.sqrt(A[:-1]), (3, 1)), rtol=1e-5)
    np.testing.assert_allclose(rows.c, 0.0, atol=1e-5)
    np.testing.assert_allclose(rows.bi, np.tile(1 - np.sqrt(A[:-1] / A[1:]), (3, 1)), atol=1e-5)
    i, j = np.meshgrid(np.arange(L + 1), np.arange(L + 1), indexing="ij")
    D = np.arccos(np.sqrt(A[np.minimum(i, j)] / A[np.maximum(i, j)])) / np.pi
    np.testing.assert_allclose(rows.angular, np.broadcast_to(D, rows.angular.shape), atol=1e-5)
    atlas = summarize(rows, B=20)
    assert atlas.phase_point == phase_point(sizes[1:] / np.sqrt(A[:-1]))


def test_synthetic_orthogonal_updates_match_their_population_values():
    """iid updates of scale s on an iid h_0 (the synthetic lab's construction): for large d,
    r_l = s / sqrt(1 + s^2 (l-1)), c_l = 0, 1 - BI_l = sqrt((1 + s^2 (l-1)) / (1 + s^2 l))."""
    from deffcore.measures.synthetic import orthogonal_updates

    s, L = 0.7, 6
    syn = orthogonal_updates(48, 4096, L, scale=s, seed=0)
    h = syn.states_with_h0()  # (L+1, N, d): each passage one token
    rows = rows_from_states([torch.tensor(x[:, None, :]) for x in h], torch.ones(48, 1))
    layer = np.arange(1, L + 1)
    np.testing.assert_allclose(rows.r.mean(0), s / np.sqrt(1 + s**2 * (layer - 1)), rtol=0.02)
    np.testing.assert_allclose(rows.c.mean(0), 0.0, atol=0.01)
    expected_cos = np.sqrt((1 + s**2 * (layer - 1)) / (1 + s**2 * layer))
    np.testing.assert_allclose(1 - rows.bi.mean(0), expected_cos, rtol=0.01)


# ---------------------------------------------------------------------------------------------
# Derived numbers


def test_phase_point_by_hand():
    # first half 4, 2 -> median 3, threshold 1.5; the last block above it: no phase point
    assert phase_point(np.array([4.0, 2.0, 1.0, 1.0, 2.0])) == 5
    assert phase_point(np.array([4.0, 2.0, 1.0, 1.0, 1.4])) == 2  # blocks 3.. stay below
    assert phase_point(np.array([4.0, 2.0, 1.0, 1.6, 1.4])) == 4  # block 4 is not below
    assert phase_point(np.array([1.0, 0.1, 0.1])) == 1  # first half = block 1 alone
    assert phase_point(np.array([4.0, 2.0, 1.0, 1.5])) == 4  # equal to the threshold: not below
    # odd L: the first half is blocks 1..floor(L/2) (median 3, not median(4, 2, 1.2) = 2)
    assert phase_point(np.array([4.0, 2.0, 1.2, 1.0, 1.0])) == 2


def test_gromov_block_by_hand():
    D = np.array(
        [
            [0.0, 0.30, 0.40, 0.50],
            [0.30, 0.0, 0.05, 0.09],
            [0.40, 0.05, 0.0, 0.20],
            [0.50, 0.09, 0.20, 0.0],
        ]
    )
    best, start = gromov_curve(D)
    np.testing.assert_allclose(best, [0.05, 0.09, 0.50])
    assert start.tolist() == [1, 1, 0]
    assert gromov_drop(D, 0.10) == (2, 2)  # drop blocks 2-3: d(h_1, h_3) = 0.09
    assert gromov_drop(D, 0.06) == (1, 2)
    assert gromov_drop(D, 0.05) == (1, 2)  # d equal to the budget is within it
    assert gromov_drop(D, 0.01) == (0, None)


def test_columns_and_token_weighting(tiny_model, tiny_passages):
    rows, _ = _tap_rows(tiny_model("llama"), tiny_passages)
    L, half = rows.layers, rows.layers // 2
    r, bi = rows.r.mean(0), rows.bi.mean(0)
    cols = columns_of(rows)
    assert cols["bi_second_half"] == pytest.approx(bi[half:].mean())
    assert cols["r_late_over_early"] == pytest.approx(r[half:].mean() / r[:half].mean())
    assert cols["phase_share"] == (L - phase_point(r)) / L
    n_drop, _ = gromov_drop(rows.angular.mean(0))
    assert cols["gromov_keep_share"] == (L - n_drop) / L
    # token-weighted (ShortGPT) vs passage-weighted: equal only when lengths are equal
    tw = token_weighted_bi(rows)
    w = rows.lengths / rows.lengths.sum()
    np.testing.assert_allclose(tw, w @ rows.bi)
    assert not np.allclose(tw, rows.bi.mean(0))
    same = rows.subset(np.zeros(5, dtype=np.int64))
    np.testing.assert_allclose(token_weighted_bi(same), same.bi.mean(0))


def test_summary_means_intervals_and_reproducibility(tiny_model, tiny_passages):
    rows, _ = _tap_rows(tiny_model("qwen3"), tiny_passages)
    a = summarize(rows, B=50, seed=3)
    np.testing.assert_allclose(a.relative_contribution, rows.r.mean(0))
    np.testing.assert_allclose(a.angular_distance, rows.angular.mean(0))
    for name in ("relative_contribution", "alignment", "block_influence"):
        low, high = a.intervals[name]
        assert (low <= getattr(a, name) + 1e-12).all() and (getattr(a, name) <= high + 1e-12).all()
        assert (high > low).all()
    b = summarize(rows, B=50, seed=3)
    np.testing.assert_array_equal(a.intervals["alignment"][0], b.intervals["alignment"][0])
    c = summarize(rows, B=50, seed=4)
    assert not np.array_equal(a.intervals["alignment"][0], c.intervals["alignment"][0])
    assert a.intervals["phase_point"][0] <= a.phase_point <= a.intervals["phase_point"][1]
    again = type(a).from_dict(a.to_dict())
    np.testing.assert_allclose(again.relative_contribution, a.relative_contribution)
    np.testing.assert_allclose(again.intervals["alignment"][1], a.intervals["alignment"][1])
    assert again.columns() == pytest.approx(a.columns())


def _mixture_rows(rng, n: int, sizes: np.ndarray) -> tuple:
    """Per-passage rows of exact orthogonal updates whose update scale is 0.5 or 2 (each with
    probability 1/2) per passage: r_l's population mean is the mean of the two closed forms."""
    from deffcore.extraction.atlas import AtlasRows

    def r_of(scale):
        a = np.concatenate([[1.0], scale * sizes])
        A = np.cumsum(a**2)
        return a[1:] / np.sqrt(A[:-1])

    scales = rng.choice([0.5, 2.0], size=n)
    r = np.stack([r_of(s) for s in scales])
    L = len(sizes)
    rows = AtlasRows(
        r=r,
        c=np.zeros_like(r),
        bi=np.zeros_like(r),
        angular=np.zeros((n, L + 1, L + 1)),
        lengths=np.ones(n, dtype=np.int64),
    )
    return rows, (r_of(0.5) + r_of(2.0)) / 2


def test_bootstrap_interval_coverage_on_a_known_population():
    """How often the 95% interval of r_l holds the population value (it always answers): at
    N = 64 passages, over 200 samples and 4 blocks, within a binomial band of 95%."""
    rng = np.random.default_rng(0)
    sizes = np.array([1.0, 1.0, 1.0, 1.0])
    hits = []
    for rep in range(200):
        rows, truth = _mixture_rows(rng, 64, sizes)
        low, high = summarize(rows, B=200, seed=rep).intervals["relative_contribution"]
        hits.append((low <= truth) & (truth <= high))
    coverage = np.mean(hits)
    assert 0.91 <= coverage <= 0.98, coverage


def test_a_tap_with_a_passage_that_never_ran_has_no_rows(tiny_model, tiny_passages):
    """A batch resumed from a checkpoint never reaches the tap: no rows rather than a hole."""
    loaded = tiny_model("llama")
    tap = AtlasTap()
    handles = tap.attach(loaded.model, 3)
    from deffcore.extraction.forward import register_hooks
    from deffcore.inputs.architecture import architecture_of

    handles += register_hooks(architecture_of(loaded.model), tap)
    ids = torch.tensor([loaded.tokenizer(t).input_ids[:8] for t in ["aaaaaaaa"] * 2])
    try:
        tap.begin(torch.ones_like(ids))
        with torch.no_grad():
            loaded.model(input_ids=ids)
        tap.end([0, 1])  # passage 2 never ran
    finally:
        for h in handles:
            h.remove()
    assert tap.rows([8, 8, 8]) is None
    tap.start(2, loaded.layers, tap.kind)
    assert tap.rows([8, 8]) is None  # nothing ran at all


def test_padding_never_enters_a_row_even_when_it_holds_nan():
    """Left and right padding, NaN at every padded position: the rows are the unpadded ones."""
    rng = np.random.default_rng(1)
    L, d = 3, 5
    states = [torch.tensor(rng.standard_normal((2, 4, d)), dtype=torch.float32)]
    for _ in range(L):
        states.append(
            states[-1] + 0.5 * torch.tensor(rng.standard_normal((2, 4, d)), dtype=torch.float32)
        )
    clean = rows_from_states([h[:, :3] for h in states], torch.ones(2, 3))
    for mask in (torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0]]), torch.tensor([[0, 1, 1, 1]] * 2)):
        padded = []
        for h in states:
            x = torch.full_like(h, float("nan"))
            if mask[0, 0]:
                x[:, :3] = h[:, :3]
            else:
                x[:, 1:] = h[:, :3]
            padded.append(x)
        got = rows_from_states(padded, mask)
        for name in ("r", "c", "bi", "angular"):
            np.testing.assert_allclose(getattr(got, name), getattr(clean, name), atol=1e-6)
