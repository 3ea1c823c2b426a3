"""A batch in flight: the device buffers its hooks pool into, and their trip to the host.

At the end of a batch the stage goes to the host, where the rows land in the (L+1, N, d) result
arrays. Finiteness is checked once per batch, on the pooled means of every layer at once (a
NaN/inf at any real token reaches the means), and the error names the first bad layer. On CUDA
the stage is copied to pinned host memory on a side stream and the batch is *finished* only
after the next batch has been queued, so the GPU never waits for the host (`pipeline_depth`);
on the CPU every batch is finished at once. Models spread over several devices (`device_map`,
accelerate): a hook pools on the device its state arrives on (with that device's copy of the
batch's token weights) and copies the small pooled results to the stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from deffcore.core.errors import NonFiniteActivationsError
from deffcore.extraction.pooling import BatchWeights, pool_layer, position0_ratio


@dataclass
class BatchStage:
    """Device buffers of the batch in flight: means (L+1, B, 3, d), first (L+1, B, d),
    norms (L+1, B, T), float32, on the device the batch's inputs go to; the batch's token
    weights there and their copies on other devices (`elsewhere`, made on first use)."""

    means: torch.Tensor
    first: torch.Tensor
    norms: torch.Tensor
    weights: BatchWeights
    elsewhere: dict[torch.device, BatchWeights] = field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        return self.means.device


def on_stage_device(hidden: torch.Tensor, stage: BatchStage) -> bool:
    return hidden.device == stage.device


class LayerPooler:
    """Hook target: `pooler(layer, hidden)` pools a captured layer into the current stage."""

    def __init__(self, layers: int, d: int):
        self.layers, self.d = layers, d
        self.stage: BatchStage | None = None

    def begin(self, mask: torch.Tensor, padded: bool) -> None:
        """A new batch: its stage and token weights (mask (B, T) on the input device)."""
        B, T = mask.shape
        L1, dev = self.layers + 1, mask.device
        w = BatchWeights.from_mask(mask, padded)
        self.stage = BatchStage(
            means=torch.empty((L1, B, 3, self.d), dtype=torch.float32, device=dev),
            first=torch.empty((L1, B, self.d), dtype=torch.float32, device=dev),
            norms=torch.empty((L1, B, T), dtype=torch.float32, device=dev),
            weights=w,
        )

    def __call__(self, layer: int, hidden: torch.Tensor) -> None:
        st = self.stage
        assert st is not None, "begin() a batch before its forward"
        if on_stage_device(hidden, st):
            pool_layer(hidden, st.weights, st.means[layer], st.first[layer], st.norms[layer])
            return
        # a block on another device: pool there, then copy the small results to the stage
        if hidden.device not in st.elsewhere:
            st.elsewhere[hidden.device] = st.weights.to(hidden.device)
        w = st.elsewhere[hidden.device]
        out = [torch.empty_like(t[layer], device=hidden.device) for t in (st.means, st.first)]
        norms = torch.empty_like(st.norms[layer], device=hidden.device)
        pool_layer(hidden, w, out[0], out[1], norms)
        fast = hidden.is_cuda and st.device.type == "cuda"
        for dst, src in zip((st.means, st.first, st.norms), (*out, norms), strict=True):
            dst[layer].copy_(src, non_blocking=fast)

    def end(self) -> Shipped:
        """Per-layer ratios and finiteness of the whole batch, on the device; sent to the host."""
        st, self.stage = self.stage, None
        assert st is not None
        ratio = position0_ratio(st.norms, st.weights)  # (L+1, B)
        # a NaN/inf at any real token reaches every mean of that passage: (L+1,) True = bad
        bad = ~torch.isfinite(st.means).view(self.layers + 1, -1).all(1)
        return ship_to_host({"means": st.means, "first": st.first, "ratio": ratio, "bad": bad})

    def abandon(self) -> None:
        self.stage = None


@dataclass
class Shipped:
    """A finished batch's stage on its way to the host: `wait()`, then read `host`.

    host: {"means": (L+1, B, 3, d), "first": (L+1, B, d), "ratio": (L+1, B), "bad": (L+1,)},
    CPU tensors (pinned on CUDA, filled by an asynchronous copy that `done` marks).
    """

    host: dict[str, torch.Tensor]
    done: Any = None  # torch.cuda.Event or None

    def wait(self) -> None:
        if self.done is not None:
            self.done.synchronize()


_COPY_STREAMS: dict[torch.device, Any] = {}


def ship_to_host(tensors: dict[str, torch.Tensor]) -> Shipped:
    """Copy device tensors to the host without blocking this thread (CPU tensors: as they are).

    On CUDA the copies run on a side stream after the work queued so far, into pinned memory,
    so the next batch's forward overlaps them; `record_stream` keeps the caching allocator
    from handing the device buffers to that next batch before the copy has read them.
    """
    device = next(iter(tensors.values())).device
    if device.type == "cpu":
        return Shipped(tensors)
    if device.type != "cuda":  # e.g. Apple MPS: a plain (synchronous) copy
        return Shipped({name: t.cpu() for name, t in tensors.items()})
    if device not in _COPY_STREAMS:
        _COPY_STREAMS[device] = torch.cuda.Stream(device)
    stream = _COPY_STREAMS[device]
    stream.wait_stream(torch.cuda.current_stream(device))
    host = {}
    with torch.cuda.stream(stream):
        for name, t in tensors.items():
            host[name] = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            host[name].copy_(t, non_blocking=True)
            t.record_stream(stream)
        done = torch.cuda.Event()
        done.record(stream)
    return Shipped(host, done)


def pipeline_depth(device: torch.device) -> int:
    """Batches left in flight before the oldest is finished: 1 on CUDA (the host finishes batch
    k while the GPU runs batch k+1), 0 elsewhere (the forward itself is synchronous)."""
    return 1 if device.type == "cuda" else 0


def raise_if_nonfinite(bad: torch.Tensor) -> None:
    """NonFiniteActivationsError naming the first layer whose flag in `bad` (L+1,) is set."""
    flags = bad.numpy()
    if not flags.any():
        return
    layer = int(np.flatnonzero(flags)[0])
    where = "the input of block 1 (h_0)" if layer == 0 else f"the output of block {layer}"
    raise NonFiniteActivationsError(
        f"The model produced NaN or inf at layer {layer} ({where}); the states cannot "
        "be measured. Try float32 (--dtype float32) or check the weights."
    )
