"""The depth-use atlas's logit lens (SPEC 16.2, "where predictions form"), against independent
computations.

- On every tiny architecture: the lens at h_L reproduces the model's own next-token
  distribution (its `logits`, soft-capping included), and the tap's per-passage KL(p_L || p_l)
  and top-1 agreement equal a naive per-token loop (full logits of every layer, torch.log_softmax,
  python loops over tokens in float64) to float32 rounding, with either padding side.
- Prediction depth on hand-made sequences of top-1s; the per-passage mean of it by hand.
- A model whose head is not verified is refused in one sentence; its atlas has no lens.
- The summary's passage bootstrap resamples passages (the lens's means and intervals).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deffcore.core.errors import DeffError
from deffcore.extraction.atlas import AtlasTap, lens_head, prediction_depth
from deffcore.extraction.forward import extract_pooled
from deffcore.inputs.architecture import final_norm


def _ids(loaded, passages, max_tokens):
    return [s for s in (loaded.tokenizer(t).input_ids[:max_tokens] for t in passages) if len(s) > 1]


def naive_lens(model, ids: list[int]) -> dict[str, np.ndarray]:
    """One unpadded passage: per-layer mean over tokens of KL(p_L || p_l), top-1 agreement and
    prediction depth, from full logits and python loops (p_L from the model's own logits)."""
    captured = {}
    hook = final_norm(model).register_forward_pre_hook(
        lambda _m, args: captured.__setitem__("hL", args[0])
    )
    try:
        with torch.no_grad():
            out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
            states = [*out.hidden_states[:-1], captured["hL"]]
            head = model.get_output_embeddings()
            logps = [
                torch.log_softmax(head(final_norm(model)(h))[0].double(), dim=-1) for h in states
            ]
    finally:
        hook.remove()
    final = torch.log_softmax(out.logits[0].double(), dim=-1)
    T, L1 = len(ids), len(states)
    kl, top1, depth = np.zeros(L1), np.zeros(L1), 0.0
    for t in range(T):
        p = final[t].exp()
        tops = [int(torch.argmax(logps[layer][t])) for layer in range(L1)]
        for layer in range(L1):
            kl[layer] += float((p * (final[t] - logps[layer][t])).sum()) / T
            top1[layer] += (tops[layer] == tops[-1]) / T
        first = L1 - 1
        while first > 0 and tops[first - 1] == tops[-1]:
            first -= 1
        depth += first / T
    return {"kl": kl, "top1": top1, "depth": np.float64(depth), "final": final}


def test_the_lens_at_the_last_layer_is_the_models_own_distribution(tiny_model, tiny_arch):
    loaded = tiny_model(tiny_arch)
    ids = _ids(loaded, ["The committee met on Tuesday to discuss the budget."], 24)[0]
    captured = {}
    hook = final_norm(loaded.model).register_forward_pre_hook(
        lambda _m, args: captured.__setitem__("hL", args[0])
    )
    try:
        with torch.no_grad():
            logits = loaded.model(input_ids=torch.tensor([ids])).logits[0]
            mine = lens_head(loaded.model).log_probs(captured["hL"][0])
    finally:
        hook.remove()
    torch.testing.assert_close(mine, torch.log_softmax(logits.float(), -1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("side", ["right", "left"])
def test_the_taps_lens_equals_a_naive_per_token_loop(tiny_model, tiny_arch, tiny_passages, side):
    loaded = tiny_model(tiny_arch)
    tap = AtlasTap(lens=True)
    pooled = extract_pooled(
        loaded, tiny_passages, max_tokens=20, batch_size=3, padding_side=side, taps=[tap]
    )
    rows = tap.rows(pooled.lengths)
    assert rows is not None and rows.lens is not None and rows.lens_refused is None
    ids = _ids(loaded, tiny_passages, 20)
    assert rows.n == len(ids)
    for i, passage in enumerate(ids):
        want = naive_lens(loaded.model, passage)
        np.testing.assert_allclose(rows.lens["kl"][i], want["kl"], rtol=1e-4, atol=2e-6)
        np.testing.assert_allclose(rows.lens["top1"][i], want["top1"], atol=1e-12)
        np.testing.assert_allclose(rows.lens["depth"][i], want["depth"], atol=1e-12)
    assert rows.lens["kl"][:, -1].max() < 1e-6  # KL(p_L || p_L) = 0
    np.testing.assert_array_equal(rows.lens["top1"][:, -1], 1.0)


def test_the_lens_streams_chunks_of_tokens(tiny_model, tiny_passages, monkeypatch):
    """A chunk of one token at a time gives the same numbers (no token's logits outlive it)."""
    from deffcore.extraction import atlas as atlas_module

    loaded = tiny_model("llama")
    got = []
    for budget in (atlas_module.LENS_CHUNK_BYTES, 1):
        monkeypatch.setattr(atlas_module, "LENS_CHUNK_BYTES", budget)
        tap = AtlasTap(lens=True)
        pooled = extract_pooled(loaded, tiny_passages, max_tokens=20, batch_size=4, taps=[tap])
        got.append(tap.rows(pooled.lengths).lens)
    for q in ("kl", "top1", "depth"):
        np.testing.assert_allclose(got[0][q], got[1][q], rtol=1e-4, atol=1e-7)


def test_prediction_depth_of_hand_made_top1_sequences():
    # rows: layers h_0 .. h_4; columns: tokens
    top1 = torch.tensor(
        [
            [7, 1, 5, 2, 9],
            [7, 2, 5, 2, 9],
            [3, 2, 5, 2, 8],
            [7, 2, 5, 6, 8],
            [7, 2, 5, 2, 8],
        ]
    )
    # token 0: settles at 3 (layer 2 differs); 1: at 1; 2: at 0 (always the same);
    # 3: at 4 (layer 3 differs, only the last agrees); 4: at 2
    assert prediction_depth(top1).tolist() == [3, 1, 0, 4, 2]
    assert prediction_depth(torch.tensor([[4], [4]])).tolist() == [0]
    assert prediction_depth(torch.tensor([[4], [5]])).tolist() == [1]


def test_a_model_without_a_verified_head_is_refused_in_one_sentence(
    tiny_model, tiny_passages, monkeypatch
):
    from deffcore.extraction import atlas as atlas_module

    loaded = tiny_model("llama")
    monkeypatch.setattr(atlas_module, "LENS_ARCHITECTURES", frozenset({"gpt2"}))
    with pytest.raises(DeffError, match=r"^The logit lens is verified only for gpt2 .*llama") as e:
        lens_head(loaded.model)
    assert str(e.value).count(".") == 1 and str(e.value).endswith(".")
    tap = AtlasTap(lens=True)
    pooled = extract_pooled(loaded, tiny_passages[:3], max_tokens=12, taps=[tap])
    rows = tap.rows(pooled.lengths)
    assert rows is not None and rows.lens is None and rows.lens_refused == str(e.value)


def test_a_base_model_without_its_head_is_refused(tiny_model):
    from deffcore.inputs.architecture import base_model

    with pytest.raises(DeffError, match="logit lens"):
        lens_head(base_model(tiny_model("llama").model))


# --- the summary (passage bootstrap), the file round trip, the snapshot's schema


def _lens_rows(N: int = 40, L: int = 4, seed: int = 1):
    from deffcore.extraction.atlas import AtlasRows

    rng = np.random.default_rng(seed)
    kl = rng.gamma(2.0, 0.5, (N, L + 1)) * np.linspace(1, 0, L + 1)
    top1 = np.clip(rng.uniform(0, 1, (N, L + 1)), 0, 1)
    top1[:, -1] = 1.0
    return AtlasRows(
        r=rng.uniform(0.1, 1, (N, L)),
        c=rng.uniform(-0.5, 0.5, (N, L)),
        bi=rng.uniform(0, 0.5, (N, L)),
        angular=np.zeros((N, L + 1, L + 1)),
        lengths=np.full(N, 10, dtype=np.int64),
        lens={"kl": kl, "top1": top1, "depth": rng.integers(0, L + 1, N).astype(np.float64)},
    )


def test_the_summary_resamples_passages_for_the_lens():
    from deffcore.measures.atlas import Atlas, resample_weights, summarize

    rows = _lens_rows()
    a = summarize(rows, B=50, seed=3)
    np.testing.assert_allclose(a.logit_lens["kl"], rows.lens["kl"].mean(0), rtol=1e-12)
    np.testing.assert_allclose(a.logit_lens["top1_agreement"], rows.lens["top1"].mean(0))
    assert a.logit_lens["prediction_depth"] == pytest.approx(rows.lens["depth"].mean())
    # the interval is the percentile interval of passage resamples (not of tokens)
    reps = resample_weights(rows.n, 50, 3) @ rows.lens["depth"]
    lo, hi = a.intervals["prediction_depth"]
    assert lo == pytest.approx(np.quantile(reps, 0.025)) and hi == pytest.approx(
        np.quantile(reps, 0.975)
    )
    assert a.intervals["logit_lens_kl"][0].shape == (rows.layers + 1,)
    back = Atlas.from_dict(a.to_dict())
    np.testing.assert_allclose(back.logit_lens["kl"], a.logit_lens["kl"])
    assert back.logit_lens["prediction_depth"] == a.logit_lens["prediction_depth"]


def test_a_refused_lens_is_said_in_the_summary():
    from deffcore.measures.atlas import summarize

    rows = _lens_rows()
    rows.lens, rows.lens_refused = None, "The logit lens is verified only for llama."
    a = summarize(rows, B=10)
    assert a.logit_lens is None and a.meta["logit_lens_refused"] == rows.lens_refused


def test_the_store_keeps_the_lens_and_refuses_a_damaged_one():
    from deffcore.extraction.atlas import check_rows

    rows = _lens_rows()
    arrays = {q: getattr(rows, q) for q in ("r", "c", "bi", "angular", "lengths")}
    arrays.update({f"lens_{q}": v for q, v in rows.lens.items()})
    got = check_rows(arrays, None)
    np.testing.assert_array_equal(got.lens["kl"], rows.lens["kl"])
    for q, bad in (("kl", -1.0), ("top1", 1.5), ("depth", rows.layers + 1.0), ("kl", np.nan)):
        broken = dict(arrays)
        broken[f"lens_{q}"] = arrays[f"lens_{q}"].copy()
        broken[f"lens_{q}"].flat[0] = bad
        assert check_rows(broken, None) is None, q
    assert check_rows({k: v for k, v in arrays.items() if k != "lens_top1"}, None) is None


def _snapshot_with_lens(edit=None):
    import copy
    import json

    from deffcore.views.run import DEFAULT_RUN_PATH

    data = json.loads(DEFAULT_RUN_PATH.read_text())
    L = data["layers"]
    atlas = data["atlas"]
    atlas["logit_lens"] = {
        "kl": [float(L - i) for i in range(L + 1)],
        "top1_agreement": [i / L for i in range(L + 1)],
        "prediction_depth": L - 2.5,
    }
    atlas["intervals"]["logit_lens_kl"] = {"low": [0.0] * (L + 1), "high": [1.0] * (L + 1)}
    atlas["intervals"]["prediction_depth"] = {"low": 1.0, "high": 2.0}
    if edit is not None:
        edit(atlas)
    return copy.deepcopy(data)


def test_a_snapshot_carries_the_lens_typed():
    from deffcore.views.run_schema import check_snapshot

    check_snapshot(_snapshot_with_lens())


@pytest.mark.parametrize(
    "edit",
    [
        lambda a: a["logit_lens"]["kl"].__setitem__(0, -1.0),
        lambda a: a["logit_lens"]["kl"].__setitem__(0, "1"),
        lambda a: a["logit_lens"]["top1_agreement"].__setitem__(2, 1.5),
        lambda a: a["logit_lens"].update(kl=[0.1]),
        lambda a: a["logit_lens"].update(prediction_depth=1e9),
        lambda a: a["logit_lens"].update(prediction_depth=True),
        lambda a: a["intervals"]["logit_lens_kl"].update(low=[0.0], high=[1.0]),
        lambda a: a.update(logit_lens="lots"),
    ],
)
def test_a_snapshot_with_a_hostile_lens_is_refused_in_one_sentence(edit):
    from deffcore.views.run_schema import SnapshotError, check_snapshot

    with pytest.raises(SnapshotError) as err:
        check_snapshot(_snapshot_with_lens(edit), "run.json")
    text = str(err.value)
    assert text.startswith("run.json") and "\n" not in text and text.endswith("."), text


def test_a_default_atlas_does_not_take_the_lens():
    """The lens costs L + 1 unembeddings per token: taken on request only (SPEC 16.2)."""
    from deffcore.extraction.atlas import atlas_taps

    assert not atlas_taps()[0].want_lens and atlas_taps(lens=True)[0].want_lens
