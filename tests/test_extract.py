"""Extraction: pooling by hand, h_0/h_L placement per architecture, padding, BOS, errors, OOM."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deffcore.core.constants import EXTRACTED_POOLINGS
from deffcore.core.errors import NonFiniteActivationsError, OutOfMemoryError, TooFewPassagesError
from deffcore.extraction import forward as batches
from deffcore.extraction import forward as forward_mod
from deffcore.extraction.forward import extract_pooled, pool_states
from deffcore.inputs.architecture import decoder_layers, final_norm
from deffcore.inputs.texts import tokenize

TOL = 1e-5


def test_pool_states_hand_made_right_padding():
    # passage 0: tokens (3,4), (0,2), (6,8); passage 1: (1,0), (0,1) then one padding slot (NaN)
    h = torch.tensor(
        [[[3.0, 4.0], [0.0, 2.0], [6.0, 8.0]], [[1.0, 0.0], [0.0, 1.0], [np.nan, np.nan]]]
    )
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    p = pool_states(h, mask)
    assert torch.allclose(p["default"], torch.tensor([[3.0, 14 / 3], [0.5, 0.5]]))
    assert torch.allclose(p["first_non_bos"], torch.tensor([[0.0, 2.0], [0.0, 1.0]]))
    # unit vectors: (0.6, 0.8), (0, 1), (0.6, 0.8) -> mean (0.4, 2.6/3); (1,0),(0,1) -> (.5,.5)
    assert torch.allclose(p["token_normed"], torch.tensor([[0.4, 2.6 / 3], [0.5, 0.5]]))
    # norms 5, 2, 10 -> 5 / mean(2, 10) = 5/6; second passage 1 / 1
    assert torch.allclose(p["pos0_ratio"], torch.tensor([5 / 6, 1.0]))


def test_pool_states_left_padding_matches_right():
    h = torch.randn(1, 4, 3)
    right = pool_states(
        torch.cat([h, torch.full((1, 2, 3), np.nan)], 1), torch.tensor([[1] * 4 + [0] * 2])
    )
    left = pool_states(
        torch.cat([torch.full((1, 2, 3), np.inf), h], 1), torch.tensor([[0] * 2 + [1] * 4])
    )
    for k in right:
        assert torch.allclose(right[k], left[k], atol=1e-6), k
    assert torch.allclose(right["first_non_bos"][0], h[0, 1])


def _naive_pooled(loaded, passages, max_tokens):
    """Independent reference: one passage at a time, the full causal-LM forward with
    output_hidden_states for h_0 .. h_{L-1}, a pre-hook on the final norm for h_L, pooling in
    float64 numpy."""
    model, tok = loaded.model, loaded.tokenizer
    captured = {}
    handle = final_norm(model).register_forward_pre_hook(
        lambda _m, args: captured.__setitem__("hL", args[0])
    )
    out = {p: [] for p in EXTRACTED_POOLINGS}
    ratios = []
    try:
        for text in passages:
            ids = tok(text).input_ids[:max_tokens]
            if len(ids) < 2:
                continue
            with torch.no_grad():
                res = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
            layers = [hs[0].double().numpy() for hs in res.hidden_states[:-1]]
            layers.append(captured["hL"][0].double().numpy())
            assert not np.allclose(layers[-1], res.hidden_states[-1][0].double().numpy())
            per = {p: [] for p in EXTRACTED_POOLINGS}
            r = []
            for x in layers:  # (T, d)
                norms = np.linalg.norm(x, axis=1)
                per["default"].append(x.mean(0))
                per["first_non_bos"].append(x[1])
                per["token_normed"].append((x / norms[:, None]).mean(0))
                per["no_pos0"].append(x[1:].mean(0))
                r.append(norms[0] / norms[1:].mean())
            for p in EXTRACTED_POOLINGS:
                out[p].append(np.stack(per[p]))
            ratios.append(r)
    finally:
        handle.remove()
    pooled = {p: np.stack(v, axis=1) for p, v in out.items()}  # (L+1, N, d)
    return pooled, np.mean(ratios, axis=0)


def test_extract_matches_naive_reference_per_architecture(tiny_model, tiny_arch, tiny_passages):
    """h_0 = embedding output as the first block sees it, h_L = final norm input (not
    output_hidden_states[-1]), batching and length bucketing restore the passage order."""
    loaded = tiny_model(tiny_arch)
    got = extract_pooled(loaded, tiny_passages, max_tokens=48, batch_size=5)
    want, ratios = _naive_pooled(loaded, tiny_passages, 48)
    assert got.pooled["default"].shape == (loaded.layers + 1, len(tiny_passages), loaded.d_model)
    for p in EXTRACTED_POOLINGS:
        assert got.pooled[p].dtype == np.float32
        np.testing.assert_allclose(got.pooled[p], want[p], atol=TOL, rtol=TOL, err_msg=p)
    np.testing.assert_allclose(got.pos0_norm_ratio, ratios, rtol=1e-5)
    assert got.tokens == sum(len(loaded.tokenizer(t).input_ids[:48]) for t in tiny_passages)


@pytest.mark.parametrize("side", ["left", "right"])
def test_pooled_vectors_do_not_depend_on_batch_mates(tiny_model, tiny_arch, tiny_passages, side):
    loaded = tiny_model(tiny_arch)
    together = extract_pooled(
        loaded, tiny_passages, max_tokens=64, batch_size=12, padding_side=side
    )
    for i in (0, 6):  # a short and the longest passage
        alone = extract_pooled(
            loaded, [tiny_passages[i], tiny_passages[i]], max_tokens=64, batch_size=1
        )
        for p in EXTRACTED_POOLINGS:
            np.testing.assert_allclose(
                together.pooled[p][:, i],
                alone.pooled[p][:, 0],
                atol=TOL,
                rtol=TOL,
                err_msg=f"{p} passage {i}",
            )


def test_lm_head_is_never_called(tiny_model, tiny_passages):
    loaded = tiny_model("gemma3")
    calls = []
    handle = loaded.model.lm_head.register_forward_hook(lambda *a: calls.append(1))
    try:
        extract_pooled(loaded, tiny_passages, max_tokens=16)
        assert calls == []
        loaded.model(input_ids=torch.tensor([[1, 5, 6]]))  # the hook itself works
        assert calls == [1]
    finally:
        handle.remove()


def test_bos_tokenizer_and_truncation(tiny_model):
    bos, nobos = tiny_model("llama"), tiny_model("llama", bos=False)
    ids, _ = tokenize(bos.tokenizer, ["abcdefgh"], max_tokens=4)
    assert ids[0][0] == bos.tokenizer.bos_token_id and len(ids[0]) == 4  # BOS counts
    ids_nb, _ = tokenize(nobos.tokenizer, ["abcdefgh"], max_tokens=4)
    assert ids_nb[0] == [*ids[0][1:], nobos.tokenizer("d").input_ids[0]]
    assert bos.adds_bos and not nobos.adds_bos


def test_first_non_bos_is_position_one_for_both_tokenizers(tiny_model, tiny_passages):
    """Same weights, two tokenizers: position 1 is the first text token with a BOS and the
    second without; a one-token passage is kept with a BOS (2 tokens) and dropped without."""
    bos, nobos = tiny_model("llama"), tiny_model("llama", bos=False)
    passages = [*tiny_passages[:3], "a"]
    with_bos = extract_pooled(bos, passages, max_tokens=32)
    without = extract_pooled(nobos, passages, max_tokens=32)
    assert with_bos.n == 4 and with_bos.n_dropped_short == 0
    assert without.n == 3 and without.n_dropped_short == 1
    assert with_bos.meta["kept_indices"] == [0, 1, 2, 3] and without.meta["kept_indices"] == [
        0,
        1,
        2,
    ]
    ref, _ = _naive_pooled(bos, passages, 32)
    np.testing.assert_allclose(with_bos.pooled["first_non_bos"], ref["first_non_bos"], atol=TOL)
    # "a" with BOS: [<bos>, a] -> position 1 is the last (and only text) token
    with torch.no_grad():
        res = bos.model(
            input_ids=torch.tensor([bos.tokenizer("a").input_ids]), output_hidden_states=True
        )
    np.testing.assert_allclose(
        with_bos.pooled["first_non_bos"][0, 3], res.hidden_states[0][0, 1], atol=TOL
    )


def test_nan_activation_names_the_layer(tiny_model, tiny_passages):
    loaded = tiny_model("llama")
    block = decoder_layers(loaded.model)[1]  # block 2 -> h_2

    def poison(_m, _a, out):
        out = out.clone()
        out[0, 1, 0] = float("nan")
        return out

    handle = block.register_forward_hook(poison)
    try:
        with pytest.raises(NonFiniteActivationsError, match="layer 2"):
            extract_pooled(loaded, tiny_passages, max_tokens=16)
    finally:
        handle.remove()


def test_nan_in_padding_is_ignored(tiny_model, tiny_passages):
    loaded = tiny_model("llama")
    clean = extract_pooled(loaded, tiny_passages, max_tokens=64, batch_size=12)
    mask_holder = {}

    def poison_padding(_m, _a, out):
        out = out.clone()
        out[~mask_holder["mask"]] = float("inf")
        return out

    real_forward = forward_mod._forward

    def forward(arch, ids, mask, pos):
        mask_holder["mask"] = mask.bool()
        real_forward(arch, ids, mask, pos)

    # the last block: inf at its padding positions reaches no later computation, only pooling
    handle = decoder_layers(loaded.model)[-1].register_forward_hook(poison_padding)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(forward_mod, "_forward", forward)
            dirty = extract_pooled(loaded, tiny_passages, max_tokens=64, batch_size=12)
    finally:
        handle.remove()
    assert mask_holder["mask"].sum() < mask_holder["mask"].numel()  # there was padding
    for p in EXTRACTED_POOLINGS:
        np.testing.assert_allclose(dirty.pooled[p], clean.pooled[p], atol=TOL)


def test_oom_halves_the_batch(tiny_model, tiny_passages, monkeypatch):
    loaded = tiny_model("qwen2")
    want = extract_pooled(loaded, tiny_passages, max_tokens=32, batch_size=12)
    real_forward = forward_mod._forward
    seen = []

    def forward(arch, ids, mask, pos):
        seen.append(ids.shape[0])
        if ids.shape[0] > 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        real_forward(arch, ids, mask, pos)

    monkeypatch.setattr(forward_mod, "_forward", forward)
    got = extract_pooled(loaded, tiny_passages, max_tokens=32, batch_size=12)
    assert seen[:3] == [12, 6, 3]
    assert got.meta["oom_halvings"] == 2 and got.meta["max_batch_size"] == 3
    for p in EXTRACTED_POOLINGS:
        np.testing.assert_allclose(got.pooled[p], want.pooled[p], atol=TOL)


def test_oom_at_batch_size_one_raises(tiny_model, tiny_passages, monkeypatch):
    def forward(*_a):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't "
            "allocate memory: you tried to allocate 1099511627776 bytes."
        )

    monkeypatch.setattr(forward_mod, "_forward", forward)
    with pytest.raises(OutOfMemoryError, match="lower max_tokens"):
        extract_pooled(tiny_model("llama"), tiny_passages, max_tokens=32)


def test_other_runtime_errors_propagate(tiny_model, tiny_passages, monkeypatch):
    def forward(*_a):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(forward_mod, "_forward", forward)
    with pytest.raises(RuntimeError, match="shape mismatch"):
        extract_pooled(tiny_model("llama"), tiny_passages, max_tokens=32)


def test_auto_batch_size_uses_token_budget(tiny_model, tiny_passages, monkeypatch):
    monkeypatch.setitem(batches.TOKEN_BUDGET, "cpu", 200)
    got = extract_pooled(tiny_model("gpt2"), tiny_passages, max_tokens=100)
    assert got.meta["batches"] > 1
    assert got.meta["max_batch_size"] * 100 <= 200 or got.meta["max_batch_size"] <= 200 // 50


def test_progress_reports_every_batch(tiny_model, tiny_passages):
    calls = []
    extract_pooled(
        tiny_model("llama"),
        tiny_passages,
        max_tokens=16,
        batch_size=5,
        progress=lambda d, t, s: calls.append((d, t, s)),
    )
    assert calls == [(5, 12, "extract"), (10, 12, "extract"), (12, 12, "extract")]


def test_too_few_passages(tiny_model):
    with pytest.raises(TooFewPassagesError, match="at least 2 tokens"):
        extract_pooled(tiny_model("llama", bos=False), ["a", "b", "cd"], max_tokens=16)


# ----------------------------------------------------------------------------------------------
# reduced-precision extraction on the CPU

#: Largest relative Frobenius error per layer and pooling, ||X_dtype - X_fp32|| / ||X_fp32||,
#: allowed against float32 on the tiny models. Measured on the 12 tiny passages (max over
#: llama, gemma3, gpt2, qwen3 and the four extracted poolings): bfloat16 1.0e-2, float16 1.3e-3
#: (bfloat16 keeps 8 mantissa bits, float16 11: the 8x ratio is the expected one).
PRECISION_TOL = {"bfloat16": 2e-2, "float16": 3e-3}


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_reduced_precision_pooled_states_match_float32(tiny_model, tiny_passages, arch):
    from deffcore.inputs.model import load_model

    ref = extract_pooled(tiny_model(arch), tiny_passages, max_tokens=48)
    worst = {}
    for dtype, tol in PRECISION_TOL.items():
        loaded = load_model(f"tiny-{arch}", device="cpu", dtype=dtype)
        assert next(loaded.model.parameters()).dtype == getattr(torch, dtype)
        got = extract_pooled(loaded, tiny_passages, max_tokens=48)
        assert got.meta["dtype"] == dtype
        errors = []
        for p in EXTRACTED_POOLINGS:
            assert got.pooled[p].dtype == np.float32  # pooled in float32 whatever the model
            a, b = ref.pooled[p].astype(np.float64), got.pooled[p].astype(np.float64)
            err = np.linalg.norm(a - b, axis=(1, 2)) / np.linalg.norm(a, axis=(1, 2))  # per layer
            assert (err < tol).all(), (dtype, p, err)
            errors.append(err.max())
        worst[dtype] = max(errors)
        np.testing.assert_allclose(got.pos0_norm_ratio, ref.pos0_norm_ratio, rtol=10 * tol)
    # the models really ran in reduced precision: errors are there, bfloat16's the larger
    assert worst["bfloat16"] > worst["float16"] > 1e-5


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_nan_weights_name_the_block(tiny_passages, dtype):
    from deffcore.inputs.model import load_model

    loaded = load_model("tiny-llama", device="cpu", dtype=dtype)  # a private copy: poisoned
    with torch.no_grad():
        decoder_layers(loaded.model)[2].mlp.down_proj.weight.fill_(float("nan"))  # block 3
    with pytest.raises(NonFiniteActivationsError, match=r"at layer 3 \(the output of block 3\)"):
        extract_pooled(loaded, tiny_passages, max_tokens=16)
