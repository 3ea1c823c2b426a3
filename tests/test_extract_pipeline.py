"""Extraction at full speed: hooks that never synchronise with the device, the same
numbers as the per-layer pooling they replaced, the CUDA pipeline's control flow (a batch
finished one place behind) run on the CPU, and models spread over devices by accelerate."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from deffcore.core.constants import EXTRACTED_POOLINGS
from deffcore.core.errors import NonFiniteActivationsError, RunCancelled
from deffcore.extraction import forward as batches
from deffcore.extraction import forward as forward_mod
from deffcore.extraction import forward as pooling
from deffcore.extraction import forward as stage
from deffcore.extraction.forward import extract_pooled
from deffcore.inputs.architecture import architecture_of, decoder_layers
from deffcore.inputs.model import load_model
from deffcore.inputs.texts import tokenize

# ----------------------------------------------------------------------------------------------
# No host-device synchronisation inside the hooks


class HostSyncError(AssertionError):
    """A call that makes the host wait for the device (on CUDA) ran inside a hook."""


Tensor = torch.Tensor
#: Python-level calls that copy a device value to the host (each waits for the GPU on CUDA).
_SYNC_FUNCS = {
    Tensor.item, Tensor.tolist, Tensor.numpy, Tensor.cpu, Tensor.__bool__, Tensor.__int__,
    Tensor.__float__, Tensor.__index__, Tensor.nonzero, torch.nonzero, Tensor.equal,
    torch.equal, Tensor.allclose, torch.allclose, torch.masked_select, Tensor.masked_select,
    torch.unique, Tensor.unique, torch.is_nonzero,
}  # fmt: skip
#: Operators whose output size or value depends on the data: the host must wait to know it.
_SYNC_OPS = {"_local_scalar_dense", "nonzero", "masked_select", "_unique2", "unique_dim",
             "unique_consecutive", "is_nonzero", "equal", "repeat_interleave"}  # fmt: skip


def _to_host(func, args, kwargs) -> bool:
    """`tensor.to(...)` / `tensor.copy_(...)` that lands on the CPU from another device, or a
    `.to` naming the CPU (a no-op on a CPU tensor, a synchronising copy from a GPU)."""
    if func is Tensor.to:
        targets = [*args[1:], kwargs.get("device")]
        return any(
            (isinstance(t, str | torch.device) and torch.device(t).type == "cpu") for t in targets
        )
    if func is Tensor.copy_:
        dst, src = args[0], args[1]
        return dst.device.type == "cpu" and src.device.type != "cpu"
    return False


def _bool_index(args) -> bool:
    """Indexing with a boolean mask (its size is the mask's count: a synchronisation)."""
    index = args[1] if len(args) > 1 else None
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, Tensor) and i.dtype == torch.bool for i in items)


class ForbidHostSync(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SYNC_FUNCS or _to_host(func, args, kwargs):
            raise HostSyncError(f"{getattr(func, '__name__', func)} inside an extraction hook")
        if func in (Tensor.__getitem__, Tensor.__setitem__) and _bool_index(args):
            raise HostSyncError("boolean-mask indexing inside an extraction hook")
        return func(*args, **kwargs)


class ForbidSyncOps(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name.removeprefix("aten::") in _SYNC_OPS:
            raise HostSyncError(f"aten::{func._schema.name} inside an extraction hook")
        return func(*args, **(kwargs or {}))


def _guarded_hooks(monkeypatch) -> list[int]:
    """Run every hook call of an extraction under both guards; returns the calls seen."""
    real, calls = forward_mod.register_hooks, []

    def register(arch, pooler):
        def guarded(layer, hidden):
            calls.append(layer)
            with ForbidHostSync(), ForbidSyncOps():
                pooler(layer, hidden)

        return real(arch, guarded)

    monkeypatch.setattr(forward_mod, "register_hooks", register)
    return calls


@pytest.mark.parametrize(
    "make",
    [
        lambda t: bool(t.sum() > 0),
        lambda t: t.sum().item(),
        lambda t: t.tolist(),
        lambda t: t.numpy(),
        lambda t: t.cpu(),
        lambda t: t.to("cpu"),
        lambda t: t.to(device=torch.device("cpu")),
        lambda t: float(t.sum()),
        lambda t: torch.nonzero(t > 0),
        lambda t: t[t > 0],
        lambda t: torch.isfinite(t).all().item(),
        lambda t: torch.equal(t, t),
    ],
)
def test_the_guard_catches_each_synchronising_call(make):
    t = torch.randn(4, 3)
    with pytest.raises(HostSyncError), ForbidHostSync(), ForbidSyncOps():
        make(t)


def test_the_guard_allows_what_the_hooks_do():
    h, mask = torch.randn(2, 5, 3, dtype=torch.bfloat16), torch.ones(2, 5, dtype=torch.bool)
    mask[1, 3:] = False
    w = pooling.BatchWeights.from_mask(mask)  # once per batch, outside the hooks
    means, first, norms = torch.empty(2, 3, 3), torch.empty(2, 3), torch.empty(2, 5)
    with ForbidHostSync(), ForbidSyncOps():
        pooling.pool_layer(h, w, means, first, norms)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_hooks_make_no_host_synchronising_call(tiny_passages, monkeypatch, dtype, side):
    """The old hook's per-layer `bool(torch.isfinite(...).all())` fails this test (the GPU
    waited once per layer per batch): every hook call now only queues device work."""
    calls = _guarded_hooks(monkeypatch)
    loaded = load_model("tiny-gemma3", device="cpu", dtype=dtype)
    got = extract_pooled(loaded, tiny_passages, max_tokens=40, batch_size=5, padding_side=side)
    assert len(calls) == (loaded.layers + 1) * got.meta["batches"]


def test_non_finite_check_still_names_the_first_bad_layer_without_syncing(
    tiny_passages, monkeypatch
):
    _guarded_hooks(monkeypatch)
    loaded = load_model("tiny-llama", device="cpu", dtype="float32")
    with torch.no_grad():
        decoder_layers(loaded.model)[1].mlp.down_proj.weight.fill_(float("inf"))  # block 2
    with pytest.raises(NonFiniteActivationsError, match=r"at layer 2 \(the output of block 2\)"):
        extract_pooled(loaded, tiny_passages, max_tokens=16, batch_size=4)


# ----------------------------------------------------------------------------------------------
# Same numbers as the per-layer pooling of the hooks before the full-speed pooling


def _per_layer_pool(hidden, mask):
    """The pooling the hooks ran once per layer before, verbatim."""
    h = hidden.float()
    m = mask.bool()
    rows = torch.arange(h.shape[0])
    count = m.sum(1, keepdim=True).float()
    hz = torch.where(m[..., None], h, 0.0)
    norms = hz.norm(dim=-1)
    w_mean = m.float() / count
    w_normed = w_mean / norms.clamp_min(1e-12)
    first = m.int().argmax(1)
    w_rest = m.float()
    w_rest[rows, first] = 0.0
    w_rest = w_rest / (count - 1)
    means = torch.bmm(torch.stack([w_mean, w_normed, w_rest], 1), hz)
    n0 = norms[rows, first]
    rest = (norms.sum(1) - n0) / (count[:, 0] - 1)
    return {
        "default": means[:, 0],
        "first_non_bos": h[rows, first + 1],
        "token_normed": means[:, 1],
        "no_pos0": means[:, 2],
        "pos0_ratio": n0 / rest,
    }


def _per_layer_extract(loaded, passages, max_tokens, batch_size, side):
    """Batches as extract_pooled makes them (longest first), pooled layer by layer as before."""
    ids, _ = tokenize(loaded.tokenizer, passages, max_tokens)
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    L1, n, d = loaded.layers + 1, len(ids), loaded.d_model
    out = {p: torch.zeros(L1, n, d) for p in [*EXTRACTED_POOLINGS, "pos0_ratio"]}
    out["pos0_ratio"] = torch.zeros(L1, n)
    state = {}

    def pooler(layer, hidden):
        for p, v in _per_layer_pool(hidden, state["mask"]).items():
            out[p][layer, state["slots"]] = v

    handles = forward_mod.register_hooks(architecture_of(loaded.model), pooler)
    try:
        with torch.inference_mode():
            for start in range(0, n, batch_size):
                batch = order[start : start + batch_size]
                b_ids, b_mask, b_pos = batches.pad_batch([ids[i] for i in batch], 0, side, "cpu")
                state.update(mask=b_mask, slots=torch.tensor(batch))
                forward_mod._forward(architecture_of(loaded.model), b_ids, b_mask, b_pos)
    finally:
        for h in handles:
            h.remove()
    return out


@pytest.mark.parametrize("arch,dtype,side", [("llama", "float32", "right"),
                         ("llama", "bfloat16", "left"), ("gemma3", "bfloat16", "right"),
                         ("gpt2", "float32", "left")])  # fmt: skip
def test_bit_identical_to_the_per_layer_pooling(tiny_passages, arch, dtype, side):
    loaded = load_model(f"tiny-{arch}", device="cpu", dtype=dtype)
    want = _per_layer_extract(loaded, list(tiny_passages), 40, 5, side)
    got = extract_pooled(loaded, tiny_passages, max_tokens=40, batch_size=5, padding_side=side)
    for p in EXTRACTED_POOLINGS:
        assert np.array_equal(got.pooled[p], want[p].numpy()), p
    assert np.array_equal(got.pos0_norm_ratio, want["pos0_ratio"].mean(1).numpy())


# ----------------------------------------------------------------------------------------------
# The CUDA pipeline (batch k finished after batch k+1 is queued), run on the CPU


@pytest.fixture
def lagged(monkeypatch):
    monkeypatch.setattr(forward_mod, "pipeline_depth", lambda _device: 1)


def test_lagged_pipeline_gives_the_same_states_and_progress(tiny_model, tiny_passages, monkeypatch):
    loaded = tiny_model("qwen3")
    direct_calls, lagged_calls = [], []
    direct = extract_pooled(loaded, tiny_passages, max_tokens=32, batch_size=5,
                            progress=lambda *a: direct_calls.append(a))  # fmt: skip
    monkeypatch.setattr(forward_mod, "pipeline_depth", lambda _device: 1)
    waits = []
    real_wait = stage.Shipped.wait
    monkeypatch.setattr(stage.Shipped, "wait", lambda s: (waits.append(1), real_wait(s)))
    got = extract_pooled(loaded, tiny_passages, max_tokens=32, batch_size=5,
                         progress=lambda *a: lagged_calls.append(a))  # fmt: skip
    for p in EXTRACTED_POOLINGS:
        assert np.array_equal(got.pooled[p], direct.pooled[p]), p
    assert np.array_equal(got.pos0_norm_ratio, direct.pos0_norm_ratio)
    assert lagged_calls == direct_calls == [(5, 12, "extract"), (10, 12, "extract"),
                                            (12, 12, "extract")]  # fmt: skip
    assert len(waits) == 3  # the host waits once per batch, not once per layer


def test_lagged_pipeline_names_the_bad_layer_and_halves_on_oom(
    tiny_model, tiny_passages, lagged, monkeypatch
):
    loaded = load_model("tiny-llama", device="cpu")
    want = extract_pooled(tiny_model("llama"), tiny_passages, max_tokens=32, batch_size=12)
    real, seen = forward_mod._forward, []

    def forward(arch, ids, mask, pos):
        seen.append(ids.shape[0])
        if ids.shape[0] > 3:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        real(arch, ids, mask, pos)

    monkeypatch.setattr(forward_mod, "_forward", forward)
    got = extract_pooled(loaded, tiny_passages, max_tokens=32, batch_size=12)
    assert seen[:3] == [12, 6, 3] and got.meta["oom_halvings"] == 2
    for p in EXTRACTED_POOLINGS:
        np.testing.assert_allclose(got.pooled[p], want.pooled[p], atol=1e-5)
    monkeypatch.setattr(forward_mod, "_forward", real)
    with torch.no_grad():
        decoder_layers(loaded.model)[3].mlp.down_proj.weight.fill_(float("nan"))  # block 4
    with pytest.raises(NonFiniteActivationsError, match=r"at layer 4 \(the output of block 4\)"):
        extract_pooled(loaded, tiny_passages, max_tokens=32, batch_size=4)


class _Keep:
    """A checkpoint that keeps every saved chunk in memory."""

    def __init__(self):
        self.saved = []

    def resume(self, plan, order):
        return []

    def save(self, index, batch):
        self.saved.append(batch)


def test_lagged_pipeline_keeps_the_batch_in_flight_when_a_forward_fails(
    tiny_model, tiny_passages, lagged, monkeypatch
):
    """Forward 4 fails while batch 3 is still in flight: batch 3 is finished and saved before
    the error propagates (the direct pipeline had saved it already)."""
    monkeypatch.setattr(forward_mod, "CHECKPOINT_EVERY_S", 0.0)
    real, calls = forward_mod._forward, [0]

    def forward(arch, ids, mask, pos):
        calls[0] += 1
        if calls[0] == 4:
            raise RuntimeError("injected failure")
        real(arch, ids, mask, pos)

    monkeypatch.setattr(forward_mod, "_forward", forward)
    keep = _Keep()
    with pytest.raises(RuntimeError, match="injected"):
        extract_pooled(tiny_model("llama"), tiny_passages, max_tokens=32, batch_size=2,
                       checkpoint=keep)  # fmt: skip
    assert [len(b.slots) for b in keep.saved] == [2, 2, 2]
    ref = extract_pooled(tiny_model("llama"), tiny_passages, max_tokens=32, batch_size=2)
    for b in keep.saved:
        for p in EXTRACTED_POOLINGS:
            assert np.array_equal(b.rows[p], ref.pooled[p][:, b.slots]), p


def test_lagged_pipeline_cancel_finishes_the_batch_in_flight(tiny_model, tiny_passages, lagged):
    asked, seen = [0], []

    def stop() -> bool:
        asked[0] += 1
        return asked[0] > 3

    with pytest.raises(RunCancelled, match="stopped after 6 of 12 passages"):
        extract_pooled(tiny_model("llama"), tiny_passages, max_tokens=32, batch_size=2,
                       should_stop=stop, progress=lambda *a: seen.append(a))  # fmt: skip
    assert seen[-1] == (6, 12, "extract")


# ----------------------------------------------------------------------------------------------
# Models over several devices


def test_blocks_on_another_device_pool_there_and_land_on_the_stage(
    tiny_model, tiny_passages, monkeypatch
):
    """The path of a block on a second GPU, forced on the CPU: pooled where the state is, with
    that device's copy of the token weights, then copied into the batch's stage."""
    loaded = tiny_model("qwen2")
    want = extract_pooled(loaded, tiny_passages, max_tokens=32, batch_size=5, padding_side="left")
    copies = []
    real_to = pooling.BatchWeights.to
    monkeypatch.setattr(
        pooling.BatchWeights, "to", lambda w, d: (copies.append(d), real_to(w, d))[1]
    )
    monkeypatch.setattr(stage, "on_stage_device", lambda hidden, stage: False)
    got = extract_pooled(loaded, tiny_passages, max_tokens=32, batch_size=5, padding_side="left")
    for p in EXTRACTED_POOLINGS:
        assert np.array_equal(got.pooled[p], want.pooled[p]), p
    assert np.array_equal(got.pos0_norm_ratio, want.pos0_norm_ratio)
    assert len(copies) == got.meta["batches"]  # one copy of the weights per batch and device


def test_offloaded_blocks_give_the_single_device_states(tiny_model, tiny_passages):
    """accelerate's dispatch with two blocks offloaded to disk (their weights loaded into each
    forward by accelerate's hooks, beside ours): the same pooled states, bit for bit."""
    want = extract_pooled(tiny_model("llama"), tiny_passages, max_tokens=32, batch_size=5)
    device_map = {"model.embed_tokens": "cpu", "model.layers.0": "cpu", "model.layers.1": "disk",
                  "model.layers.2": "disk", "model.layers.3": "cpu", "model.norm": "cpu",
                  "model.rotary_emb": "cpu", "lm_head": "cpu"}  # fmt: skip
    loaded = load_model("tiny-llama", device="cpu", device_map=device_map)
    assert loaded.device == "cpu"
    assert decoder_layers(loaded.model)[1].mlp.down_proj.weight.device.type == "meta"  # on disk
    assert hasattr(decoder_layers(loaded.model)[1], "_hf_hook")
    got = extract_pooled(loaded, tiny_passages, max_tokens=32, batch_size=5)
    for p in EXTRACTED_POOLINGS:
        assert np.array_equal(got.pooled[p], want.pooled[p]), p


def test_device_map_auto_on_one_device_is_the_plain_model(tiny_model, tiny_passages):
    want = extract_pooled(tiny_model("gemma3"), tiny_passages, max_tokens=24, batch_size=6)
    loaded = load_model("tiny-gemma3", device="cpu", device_map="auto")
    assert loaded.device == "cpu" and loaded.model.hf_device_map == {"": "cpu"}
    got = extract_pooled(loaded, tiny_passages, max_tokens=24, batch_size=6)
    for p in EXTRACTED_POOLINGS:
        assert np.array_equal(got.pooled[p], want.pooled[p]), p


@pytest.mark.parametrize(
    "device_map,inputs_go_to",
    [
        ({"model.embed_tokens": 1, "model.layers": 0, "model.norm": 0, "lm_head": 0}, "cuda:1"),
        ({"model.embed_tokens": "cpu", "model.layers": 0, "lm_head": "cuda:0"}, "cuda:0"),
        ({"model": "disk", "lm_head": "cuda:2"}, "cuda:2"),
        ({"": "cpu"}, "cpu"),
        ({"model.embed_tokens": "cuda:3", "model.layers": "disk"}, "cuda:3"),
    ],
)
def test_inputs_go_to_the_embeddings_execution_device(tiny_model, device_map, inputs_go_to):
    """accelerate runs a block offloaded to "cpu" or "disk" on the map's first GPU."""
    from deffcore.inputs import model as devices

    model = tiny_model("llama").model
    model.hf_device_map = device_map
    try:
        assert devices._input_device(model) == inputs_go_to
    finally:
        del model.hf_device_map
