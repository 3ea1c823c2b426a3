"""The forward pass: passages -> pooled states h_0 .. h_L, one pass of the base model per batch;
first below, its batches, the pooling arithmetic and the batch stage (in that order).

Hooks (the unembedding is never run) capture

    h_0      input of block 1 (a forward pre-hook, so Gemma's sqrt(d) embedding scale is in it)
    h_l      output of block l, l = 1..L (so h_L is the input of the final norm)

and pool each state into the batch's stage (`LayerPooler`, `BatchStage`); nothing else of
the batch is kept. `torch.compile` and CUDA graphs are not used: batches change shape
(B and T), the hooks sit inside arbitrary transformers forwards, and what is left per layer is
five kernels against the layer's own dozens (BENCHMARKS.md "GPU at full speed"). An
out-of-memory error halves the batch size and retries the batch; at batch size 1 it raises
OutOfMemoryError. The pooled rows are written back at each passage's original slot.

Resuming: with a `checkpoint` (`BatchCheckpoint`, e.g. `extraction.cache.PartialRun`) finished
batches are saved as one chunk at most every CHECKPOINT_EVERY_S seconds (`_Run.maybe_save`), and
an interrupted run's are put back at the start (`_Run.resume`); the loop continues with the
batch cap in force when it stopped, so the remaining batches are exactly those of an
uninterrupted run and the result is bit-identical. `should_stop()` is asked before every
batch; when it says True the run ends with RunCancelled, its finished batches kept. A batch in
flight when a forward fails is finished (kept) before the error propagates.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from deffcore.core.constants import EXTRACTED_POOLINGS
from deffcore.core.errors import (
    DeffError,
    NonFiniteActivationsError,
    OutOfMemoryError,
    RunCancelled,
    UnsupportedArchitectureError,
)
from deffcore.core.lazy import torch  # imported on first use
from deffcore.inputs.architecture import Architecture
from deffcore.inputs.model import LoadedModel
from deffcore.inputs.run_spec import RunInputs

# ---------------------------------------------------------------------------------------------
# Ready token ids into batches: the token budget, padding, and how finished batches are kept.
#
# The ids come tokenised (`deffcore.inputs.texts.prepare_ids`: the tokenizer's special tokens
# per the BOS option, truncated to `max_tokens`, passages with fewer than 2 tokens dropped and
# counted). Kept passages are sorted by length (longest first) so a batch pads little; with
# `batch_size=None` a batch holds as many passages as fit a token budget. Padding: an attention
# mask and explicit `position_ids = cumsum(mask) - 1` are passed, so a passage's states do not
# depend on its batch or on the padding side.

#: Token budget per batch when `batch_size` is None (padded tokens, B * T).
TOKEN_BUDGET = {"cpu": 4096, "cuda": 32768}


@dataclass
class SavedBatch:
    """One finished batch as a checkpoint keeps it.

    slots: (b,) int64 rows of the batch (indices into the kept passages, in plan order)
    rows:  {pooling: (L+1, b, d) float32 for each extracted pooling, "pos0_ratio": (L+1, b)}
    cap:   the batch-size cap in force after this batch (None: token budget), so a resumed run
           continues with the batches an uninterrupted one would have made
    """

    slots: np.ndarray
    rows: dict[str, np.ndarray]
    cap: int | None


class BatchCheckpoint(Protocol):
    """Where `extract_pooled` keeps finished batches (`deffcore.extraction.cache.PartialRun` is
    one)."""

    def resume(self, plan: dict[str, Any], order: list[int]) -> list[SavedBatch]:
        """The saved batches that continue `order` from its start, if saved under `plan`."""
        ...

    def save(self, index: int, batch: SavedBatch) -> None:
        """Keep finished batch number `index` (0, 1, 2 ... in plan order)."""
        ...


def token_ids_sha256(ids: list[list[int]]) -> str:
    """Content hash of the token ids: a partial run is reused only for exactly these ids."""
    h = hashlib.sha256()
    for seq in ids:
        h.update(len(seq).to_bytes(4, "little"))
        h.update(np.asarray(seq, dtype=np.int64).tobytes())
    return h.hexdigest()


def pad_batch(
    seqs: list[list[int]], pad_id: int, side: str, device: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask, position_ids), each (B, T) on `device`.

    Built on the host; to CUDA through pinned memory without blocking (the copy is queued
    behind the work already on the GPU, so the host can prepare the next batch meanwhile).
    """
    T = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), T), dtype=torch.long)
    for b, s in enumerate(seqs):
        sl = slice(T - len(s), T) if side == "left" else slice(0, len(s))
        ids[b, sl] = torch.tensor(s, dtype=torch.long)
        mask[b, sl] = 1
    # positions count real tokens only, so left padding sees the same positions as right padding
    pos = (mask.cumsum(1) - 1).clamp_min(0)
    if torch.device(device).type == "cuda":
        return tuple(t.pin_memory().to(device, non_blocking=True) for t in (ids, mask, pos))
    return ids.to(device), mask.to(device), pos.to(device)


def next_batch(lengths: list[int], order: list[int], cap: int | None, budget: int, start: int):
    """The next batch (positions in `order`) from `start`: up to `cap` passages within `budget`."""
    longest = lengths[order[start]]  # sorted longest first: the first one sets the padding
    size = max(1, budget // longest) if cap is None else cap
    return order[start : start + size]


# ---------------------------------------------------------------------------------------------
# Pooling arithmetic: one layer of one batch into every pooling, on its device (SPEC section 2).
#
# Each captured (B, T, d) state is pooled right away, in float32: one float32 copy of the state
# with padding zeroed, its token norms, one batched matmul for the three means (per-token weights
# computed once per batch from the mask), one gather for `first_non_bos`. No host-device
# synchronisation: kernels are only queued.
#
# Decisions where SPEC is silent: `first_non_bos` is the state at position 1 of the passage
# (its second token) whatever the tokenizer does, so for a tokenizer without BOS it is the second
# word piece. The position-0 ratio of a passage is `||h[0]|| / mean_{t>=1} ||h[t]||` over its
# real tokens; the reported value per layer is the mean over passages.

_NORM_EPS = 1e-12

#: The pooled means, in the order of the rows of `BatchWeights.weights` (one batched matmul).
POOLED_MEANS: tuple[str, ...] = ("default", "token_normed", "no_pos0")


@dataclass
class PooledStates:
    """Pooled states of one run.

    pooled:           {pooling: (L+1, N, d) float32}, layer 0 = h_0, layer L = h_L (pre-norm)
    pos0_norm_ratio:  (L+1,) mean over passages of ||h_l[0]|| / mean_{t>=1} ||h_l[t]||
    n_dropped_short:  passages dropped for having fewer than 2 tokens
    tokens:           total tokens processed (BOS included, padding excluded)
    meta:             plain values describing the extraction (JSON-ready)
    lengths:          (N,) tokens per kept passage
    """

    pooled: dict[str, np.ndarray]
    pos0_norm_ratio: np.ndarray
    n_dropped_short: int
    tokens: int
    meta: dict[str, Any] = field(default_factory=dict)
    lengths: np.ndarray | None = None

    @property
    def layers(self) -> int:
        return self.pooled["default"].shape[0] - 1

    @property
    def n(self) -> int:
        return self.pooled["default"].shape[1]

    @property
    def d_model(self) -> int:
        return self.pooled["default"].shape[2]


@dataclass
class BatchWeights:
    """Per-token weights of one batch, shared by all its layers (computed once from the mask).

    weights:  (B, 3, T) float32, rows = the `POOLED_MEANS`: 1/n at real tokens (default), row 1
              rewritten per layer as (1/n) / ||h_t|| (token_normed), 1/(n-1) at real tokens
              t >= 1 (no_pos0); 0 at padding
    keep:     (B, T, 1) bool, True at real tokens; None when the batch has no padding
    first:    (B, 1) int64, first real position (0 with right padding, the pad count with left)
    second:   (B,) int64, index of position first+1 in the (B*T, d) view of a state
    count:    (B, 1) float32 real tokens per passage
    """

    weights: torch.Tensor
    keep: torch.Tensor | None
    first: torch.Tensor
    second: torch.Tensor
    count: torch.Tensor

    @classmethod
    def from_mask(cls, mask: torch.Tensor, padded: bool = True) -> BatchWeights:
        """`mask` (B, T), True/1 at real tokens (>= 2 per row, any padding side)."""
        m = mask.bool()
        B, T = m.shape
        rows = torch.arange(B, device=m.device)
        count = m.sum(1, keepdim=True).float()  # (B, 1)
        first = m.int().argmax(1)
        w_rest = m.float()
        w_rest[rows, first] = 0.0
        weights = torch.empty((B, 3, T), dtype=torch.float32, device=m.device)
        weights[:, 0] = m.float() / count
        weights[:, 2] = w_rest / (count - 1)
        return cls(
            weights=weights,
            keep=m[..., None] if padded else None,
            first=first[:, None],
            second=rows * T + first + 1,
            count=count,
        )

    def to(self, device: torch.device) -> BatchWeights:
        """A copy on `device` (a model spread over several devices)."""

        def move(t: torch.Tensor | None) -> torch.Tensor | None:
            # asynchronous only between CUDA devices: a host copy must be complete when read
            fast = t is not None and t.is_cuda and device.type == "cuda"
            return None if t is None else t.to(device, non_blocking=fast)

        return BatchWeights(*(move(getattr(self, f)) for f in self.__dataclass_fields__))


@contextlib.contextmanager
def _ieee_float32(on_cuda: bool):
    """Full float32 for the pooling matmul even when the user enabled TF32 (whose 10-bit
    mantissa would round the token weights: ~5e-4 relative error in the pooled means)."""
    if not (on_cuda and torch.backends.cuda.matmul.allow_tf32):
        yield
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = True


def pool_layer(
    hidden: torch.Tensor,
    w: BatchWeights,
    means: torch.Tensor,
    first: torch.Tensor,
    norms: torch.Tensor,
) -> None:
    """Pool one layer into the given outputs; queues kernels only (no host synchronisation).

    hidden (B, T, d) any dtype; outputs float32 on hidden's device: means (B, 3, d) (the
    `POOLED_MEANS`), first (B, d) (`first_non_bos`), norms (B, T) (token norms, 0 at padding).
    Padding positions never enter a result, even when they hold NaN.
    """
    # padding -> 0 (and any NaN there with it), then float32: one pass each
    hz = (hidden if w.keep is None else torch.where(w.keep, hidden, 0.0)).float()
    torch.linalg.vector_norm(hz, dim=-1, out=norms)
    torch.div(w.weights[:, 0], norms.clamp_min(_NORM_EPS), out=w.weights[:, 1])
    # The three means as one batched matmul with per-token weights: one more pass over the state.
    with _ieee_float32(hz.is_cuda):
        torch.bmm(w.weights, hz, out=means)
    torch.index_select(hz.reshape(-1, hz.shape[-1]), 0, w.second, out=first)


def position0_ratio(norms: torch.Tensor, w: BatchWeights) -> torch.Tensor:
    """||h[first]|| / mean of the other real tokens' norms: norms (..., B, T) -> (..., B)."""
    n0 = norms.gather(-1, w.first.expand(*norms.shape[:-1], 1)).squeeze(-1)
    rest = (norms.sum(-1) - n0) / (w.count[:, 0] - 1)
    return n0 / rest


def pool_states(hidden: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every pooling of one layer's batch (the arithmetic the hooks use, for one layer).

    hidden (B, T, d) any dtype; mask (B, T) bool, True at real tokens (>= 2 per row, any padding
    side). Returns float32 `default`, `first_non_bos`, `token_normed`, `no_pos0` (B, d) and
    `pos0_ratio` (B,). `no_pos0` is the mean over real positions t >= 1 (SPEC section 11.1).
    Padding positions never enter a result, even when they hold NaN.
    """
    w = BatchWeights.from_mask(mask.to(hidden.device))
    B, T, d = hidden.shape
    means = hidden.new_empty((B, 3, d), dtype=torch.float32)
    first = hidden.new_empty((B, d), dtype=torch.float32)
    norms = hidden.new_empty((B, T), dtype=torch.float32)
    pool_layer(hidden, w, means, first, norms)
    out = {p: means[:, k] for k, p in enumerate(POOLED_MEANS)}
    return {**out, "first_non_bos": first, "pos0_ratio": position0_ratio(norms, w)}


def check_rows_fit(n: int, L1: int, d: int) -> None:
    """The pooled rows of `n` passages (L1 x n x d float32 per extracted pooling, and the
    position-0 ratios; the live estimates keep one more copy) checked against the machine's
    memory before any is allocated: one sentence (OutOfMemoryError), never numpy's."""
    from deffcore.core.checks import check_memory
    from deffcore.inputs.model import host_memory_bytes

    memory = host_memory_bytes()
    each = 4 * L1 * (d * len(EXTRACTED_POOLINGS) + 1)
    check_memory(
        n * each,
        memory,
        f"The pooled states of {n:,} passages ({L1} layers x {d} features x "
        f"{len(EXTRACTED_POOLINGS)} poolings, float32)",
        f"ask for n <= {max((memory or 0) // each, 1):,}",
    )


# ---------------------------------------------------------------------------------------------
# A batch in flight: the device buffers its hooks pool into, and their trip to the host.
#
# At the end of a batch the stage goes to the host, where the rows land in the (L+1, N, d) result
# arrays. Finiteness is checked once per batch, on the pooled means of every layer at once (a
# NaN/inf at any real token reaches the means), and the error names the first bad layer. On CUDA
# the stage is copied to pinned host memory on a side stream and the batch is *finished* only
# after the next batch has been queued, so the GPU never waits for the host (`pipeline_depth`);
# on the CPU every batch is finished at once. Models spread over several devices (`device_map`,
# accelerate): a hook pools on the device its state arrives on (with that device's copy of the
# batch's token weights) and copies the small pooled results to the stage.


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


#: Finished batches are handed to the checkpoint at most this often (seconds), as one chunk of
#: consecutive batches: a kill loses at most this much work plus one batch, and writing
#: (~0.2 s per 9 MB chunk on the 2-core CPU) stays a small share of fast GPU extraction too.
CHECKPOINT_EVERY_S = 10.0

_clock = time.monotonic  # separate so tests can drive the checkpoint interval

#: progress(done, total, stage): stage "extract" after every batch (done = passages finished,
#: resumed ones included), "resume" once when a partial run is picked up (done = passages
#: resumed). A caller wanting a rate takes done over elapsed time; tokens per passage are at most
#: max_tokens.
Progress = Callable[[int, int, str], None]


def register_hooks(arch: Architecture, pooler: Callable[[int, torch.Tensor], None]) -> list:
    """Hooks calling `pooler(layer, state)` for h_0 (block 1's input) and every block's output
    of the model `arch` describes (`deffcore.inputs.architecture.architecture_of(model)`)."""
    model, blocks, (site, after) = arch.model, arch.blocks, arch.h0_site()
    seen: set[int] = set()  # the layers captured in this forward: a looped model is refused

    def capture(layer: int, hidden: torch.Tensor) -> None:
        if layer in seen:
            raise UnsupportedArchitectureError(
                f"{type(model).__name__} runs its block {max(layer, 1)} more than once per "
                "forward pass (a looped or recurrent-depth model), so its blocks are not one "
                "residual stream of L states; it cannot be measured."
            )
        seen.add(layer)
        pooler(layer, hidden)

    def pre_hook(_module, args, kwargs):
        capture(0, arch.block_input(args, kwargs))

    def make_hook(layer: int):
        def hook(_module, _args, output):
            capture(layer, arch.block_output(output))

        return hook

    handles = [arch.base.register_forward_pre_hook(lambda *_: seen.clear())]
    if after:
        handles.append(site.register_forward_hook(make_hook(0)))
    else:
        handles.append(site.register_forward_pre_hook(pre_hook, with_kwargs=True))
    handles += [blk.register_forward_hook(make_hook(i + 1)) for i, blk in enumerate(blocks)]
    return handles


def _forward(arch: Architecture, ids, mask, pos) -> None:
    """One base-model forward (separate so tests can inject an out-of-memory error)."""
    arch.forward(ids, mask, pos)


def _is_oom(err: BaseException) -> bool:
    if isinstance(err, torch.OutOfMemoryError):
        return True
    text = str(err).lower()
    return isinstance(err, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )


@dataclass
class _InFlight:
    """A batch whose forward is queued: its passages, the cap in force after it, its results
    on their way to the host, and (pipelined) the landing of its rows in the host results."""

    batch: list[int]
    cap: int | None
    shipped: Shipped
    landed: Future | None = None


class _Run:
    """The state of one `extract_pooled` call; `run()` does the batches, `result()` packs them.

    `launched` passages (in plan order) have had their forward queued, `finished` of them are
    checked, in the host results and reported; at most `pipeline_depth` batches are between.
    Pipelined, a batch's rows land in the host results on one helper thread (waiting for its
    copy, then ~70 MB of strided copies for SmolLM2 at batch 256: torch releases the GIL), so
    this thread keeps queueing the next batch's kernels meanwhile; checkpoints, progress and
    errors stay on this thread, in plan order.
    """

    def __init__(self, loaded: LoadedModel, arch: Architecture, ids: list[list[int]],
                 padding_side: str,
                 batch_size: int | None, progress: Progress | None,
                 checkpoint: BatchCheckpoint | None,
                 should_stop: Callable[[], bool] | None) -> None:  # fmt: skip
        self.loaded, self.ids, self.padding_side = loaded, ids, padding_side
        self.arch = arch  # each batch's forward runs its base (Architecture.forward)
        self.progress, self.checkpoint, self.should_stop = progress, checkpoint, should_stop
        self.lengths = [len(s) for s in ids]
        self.order = sorted(range(len(ids)), key=lambda i: -self.lengths[i])
        tok = loaded.tokenizer
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
        self.budget = TOKEN_BUDGET["cuda" if loaded.device.startswith("cuda") else "cpu"]
        self.batch_size, self.cap = batch_size, batch_size
        self.sizes: list[int] = []
        self.halvings = self.launched = self.finished = 0
        L1, n, d = loaded.layers + 1, len(ids), loaded.d_model
        check_rows_fit(n, L1, d)  # the machine's memory, before the rows are allocated
        # host results; every row is written exactly once (by its batch or by a resume)
        self.pooled = {p: torch.empty((L1, n, d), dtype=torch.float32) for p in EXTRACTED_POOLINGS}
        self.ratio = torch.empty((L1, n), dtype=torch.float32)
        self.pooler = LayerPooler(loaded.layers, d)
        self.taps: list[ExtractionTap] = []  # see "Hook point" below
        self.in_flight: deque[_InFlight] = deque()
        self.depth = pipeline_depth(torch.device(loaded.device))
        self.lander = ThreadPoolExecutor(1, thread_name_prefix="deff-land") if self.depth else None
        self.resumed = self.flushed = self.n_saved = 0
        self.last_save = 0.0

    def plan(self) -> dict[str, Any]:
        """What a checkpoint must match to be resumed (plain values)."""
        loaded = self.loaded
        return {
            "n": len(self.ids),
            "layers": loaded.layers,
            "d_model": loaded.d_model,
            "ids_sha256": token_ids_sha256(self.ids),
            "device": loaded.device,
            "dtype": loaded.dtype,
            "padding_side": self.padding_side,
            "pad_id": int(self.pad_id),
            "batch_size": self.batch_size,
            "budget": self.budget,
            "poolings": list(EXTRACTED_POOLINGS),
        }

    def resume(self) -> None:
        """Put back the rows of an interrupted run's finished batches; continue after them."""
        saved = [] if self.checkpoint is None else self.checkpoint.resume(self.plan(), self.order)
        for done in saved:
            slots = torch.as_tensor(done.slots, dtype=torch.long)
            for p in EXTRACTED_POOLINGS:
                self.pooled[p][:, slots] = torch.as_tensor(done.rows[p])
            self.ratio[:, slots] = torch.as_tensor(done.rows["pos0_ratio"])
            start = self.finished
            assert done.slots.tolist() == self.order[start : start + len(done.slots)]
            self.finished += len(done.slots)
            self.sizes.append(len(done.slots))
            self.cap = done.cap
        self.launched = self.resumed = self.flushed = self.finished
        self.n_saved = len(saved)
        self.last_save = _clock()
        if self.resumed and self.progress is not None:
            self.progress(self.resumed, len(self.order), "resume")

    def run(self) -> None:
        """Every remaining batch: queue its forward, finish the batch `depth` places behind."""
        total = len(self.order)
        try:
            while self.launched < total:
                if self.should_stop is not None and self.should_stop():
                    self.drain()
                    raise RunCancelled(
                        f"The run was stopped after {self.finished} of {total} passages"
                        + ("; rerun it to resume from there." if self.checkpoint else ".")
                    )
                batch = next_batch(self.lengths, self.order, self.cap, self.budget, self.launched)
                if not self.launch(batch):
                    continue  # out of memory: retried with half the batch size
                while len(self.in_flight) > self.depth:
                    self.finish_oldest()
            self.drain()
        except BaseException:
            with contextlib.suppress(Exception):  # keep what is already computed, if it can be
                self.drain()
            raise
        finally:
            if self.lander is not None:  # no landing may write after the run returns
                self.lander.shutdown(wait=True, cancel_futures=True)

    def launch(self, batch: list[int]) -> bool:
        """Queue one batch's forward; False (cap halved) when it ran out of memory."""
        loaded = self.loaded
        seqs = [self.ids[i] for i in batch]
        b_ids, b_mask, b_pos = pad_batch(seqs, self.pad_id, self.padding_side, loaded.device)
        padded = len(seqs[0]) != len(seqs[-1])  # sorted longest first
        try:
            self.pooler.begin(b_mask, padded)
            for tap in self.taps:
                tap.begin(b_mask)
            _forward(self.arch, b_ids, b_mask, b_pos)
        except (RuntimeError, torch.OutOfMemoryError) as err:
            self.pooler.abandon()
            for tap in self.taps:
                tap.abandon()
            if not _is_oom(err):
                raise
            if len(batch) == 1:
                raise OutOfMemoryError(
                    f"Even one passage of {self.lengths[batch[0]]} tokens does not fit in "
                    f"memory on {loaded.device}; lower max_tokens."
                ) from err
            self.cap, self.halvings = max(1, len(batch) // 2), self.halvings + 1
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            return False
        item = _InFlight(batch, self.cap, self.pooler.end())
        for tap in self.taps:
            tap.end(batch)
        if self.lander is not None:
            item.landed = self.lander.submit(self.land, item)
        self.in_flight.append(item)
        self.sizes.append(len(batch))
        self.launched += len(batch)
        return True

    def land(self, item: _InFlight) -> None:
        """Wait for a batch's results on the host, check them, write its rows."""
        item.shipped.wait()
        host = item.shipped.host
        raise_if_nonfinite(host["bad"])
        idx = torch.as_tensor(item.batch, dtype=torch.long)
        for k, p in enumerate(POOLED_MEANS):
            self.pooled[p].index_copy_(1, idx, host["means"][:, :, k])
        self.pooled["first_non_bos"].index_copy_(1, idx, host["first"])
        self.ratio.index_copy_(1, idx, host["ratio"])

    def finish_oldest(self) -> None:
        """The oldest batch in flight: landed (checked, rows written), then saved and reported."""
        item = self.in_flight.popleft()
        try:
            if item.landed is None:
                self.land(item)
            else:
                item.landed.result()  # re-raises the landing's error (NaN in a layer) here
            self.finished += len(item.batch)
            self.maybe_save(item.cap)
        except BaseException:
            self.in_flight.clear()  # later batches cannot be finished in plan order any more
            raise
        if self.progress is not None:
            self.progress(self.finished, len(self.order), "extract")

    def drain(self) -> None:
        while self.in_flight:
            self.finish_oldest()

    def maybe_save(self, cap: int | None) -> None:
        """Hand the batches finished since the last save to the checkpoint, as one chunk, when
        CHECKPOINT_EVERY_S has passed (never after the last batch: the entry follows at once)."""
        if (
            self.checkpoint is None
            or self.finished >= len(self.order)
            or _clock() - self.last_save < CHECKPOINT_EVERY_S
        ):
            return
        chunk = self.order[self.flushed : self.finished]
        idx = torch.as_tensor(chunk, dtype=torch.long)
        rows = {p: self.pooled[p][:, idx].numpy() for p in EXTRACTED_POOLINGS}
        rows["pos0_ratio"] = self.ratio[:, idx].numpy()
        self.checkpoint.save(self.n_saved, SavedBatch(np.asarray(chunk, dtype=np.int64), rows, cap))
        self.n_saved, self.flushed, self.last_save = self.n_saved + 1, self.finished, _clock()


def _check_padding_side(padding_side: str) -> None:
    if padding_side not in ("left", "right"):
        raise DeffError(f"padding_side must be 'left' or 'right', got {padding_side!r}.")


def extract_pooled(
    loaded: LoadedModel,
    passages: list[str] | None,
    *,
    max_tokens: int,
    batch_size: int | None = None,
    progress: Progress | None = None,
    padding_side: str = "right",
    bos: str = "default",
    token_ids: list[list[int]] | None = None,
    checkpoint: BatchCheckpoint | None = None,
    should_stop: Callable[[], bool] | None = None,
    taps: Sequence[ExtractionTap] = (),
) -> PooledStates:
    """Pooled h_0 .. h_L of `passages` for every extracted pooling, in one pass per batch.

    Either `passages` (texts, tokenised here with the BOS option `bos`) or `token_ids`
    (ready ids, e.g. token windows; `passages` None): `RunInputs.of` makes them the run's
    inputs, then `extract_run` (its arguments, errors and `meta`).
    """
    _check_padding_side(padding_side)  # before any tokenising
    run = RunInputs.of(loaded, passages, token_ids, max_tokens, bos)
    return extract_run(
        run,
        batch_size=batch_size,
        progress=progress,
        padding_side=padding_side,
        checkpoint=checkpoint,
        should_stop=should_stop,
        taps=taps,
    )


def extract_run(
    inputs: RunInputs,
    *,
    batch_size: int | None = None,
    progress: Progress | None = None,
    padding_side: str = "right",
    checkpoint: BatchCheckpoint | None = None,
    should_stop: Callable[[], bool] | None = None,
    taps: Sequence[ExtractionTap] = (),
) -> PooledStates:
    """Pooled h_0 .. h_L of a run's ready ids (`deffcore.inputs.run_spec`) for every
    extracted pooling, in one pass per batch.

    `batch_size` None adapts to a token budget; an OOM halves it. `progress(done, total,
    stage)` is called after each batch (stage "extract") and once with stage "resume" when
    `checkpoint` returns finished batches. `checkpoint` keeps finished batches and returns those
    of an interrupted run (see the module docstring); `should_stop()`, asked before each batch,
    ends the run with RunCancelled. `meta["resumed_passages"]` counts the passages taken from
    the checkpoint. `taps` see the same captured states (`ExtractionTap`, e.g. the depth-use
    atlas's `AtlasTap`). Raises NonFiniteActivationsError, OutOfMemoryError, RunCancelled.
    """
    loaded, arch, ids = inputs.loaded, inputs.arch, inputs.ids
    _check_padding_side(padding_side)
    if padding_side == "left" and arch.recurrent:
        raise UnsupportedArchitectureError(
            f"{loaded.architecture} has recurrent blocks (a state or a convolution along the "
            "sequence), which padding in front of a passage would reach; use right padding."
        )
    if arch.pad_sensitive:  # its sparse attention reads padded keys: no padding at all
        batch_size = 1
    run = _Run(loaded, arch, ids, padding_side, batch_size, progress, checkpoint, should_stop)
    run.taps = list(taps)
    run.resume()
    handles = register_hooks(arch, _fan_out(run.pooler, run.taps))
    handles += [h for tap in run.taps for h in tap.attach(loaded.model, len(ids))]
    try:
        with torch.inference_mode():
            run.run()
    finally:
        for h in handles:
            h.remove()
    return PooledStates(
        pooled={p: run.pooled[p].numpy() for p in EXTRACTED_POOLINGS},
        pos0_norm_ratio=run.ratio.mean(1).numpy(),
        n_dropped_short=inputs.given - len(inputs.kept),
        tokens=int(sum(run.lengths)),
        lengths=np.asarray(run.lengths, dtype=np.int64),
        meta={
            "model": loaded.spec,
            "architecture": loaded.architecture,
            "device": loaded.device,
            "dtype": loaded.dtype,
            "max_tokens": inputs.max_tokens,
            "padding_side": padding_side,
            "adds_bos": loaded.adds_bos,
            "bos": inputs.bos,
            "batches": len(run.sizes),
            "max_batch_size": max(run.sizes),
            "oom_halvings": run.halvings,
            "kept_indices": inputs.kept,
            "resumed_passages": run.resumed,
        },
    )


class ExtractionTap(Protocol):
    """A second consumer of the states the hooks capture (`deffcore.extraction.atlas.AtlasTap`).

    attach(model, n) -> hook handles it needs itself (removed with the extraction's); per batch
    begin(mask (B, T)), tap(layer, hidden) for h_0 .. h_L in order, then end(slots: the batch's
    passage rows) once its forward is queued, or abandon() when the forward failed (an
    out-of-memory retry). Batches resumed from a checkpoint never reach a tap.
    """

    def attach(self, model: torch.nn.Module, n: int) -> list: ...
    def begin(self, mask: torch.Tensor) -> None: ...
    def __call__(self, layer: int, hidden: torch.Tensor) -> None: ...
    def end(self, slots: list[int]) -> None: ...
    def abandon(self) -> None: ...


def _fan_out(pooler: Callable[[int, torch.Tensor], None], taps: list[ExtractionTap]):
    """The hook target: the pooler, then every tap (the pooler alone when there is none)."""
    if not taps:
        return pooler

    def target(layer: int, hidden: torch.Tensor) -> None:
        pooler(layer, hidden)
        for tap in taps:
            tap(layer, hidden)

    return target
