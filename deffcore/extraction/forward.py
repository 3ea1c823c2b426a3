"""The forward pass: passages -> pooled states h_0 .. h_L, one pass of the base model per batch.

Hooks (the unembedding is never run) capture

    h_0      input of block 1 (a forward pre-hook, so Gemma's sqrt(d) embedding scale is in it)
    h_l      output of block l, l = 1..L (so h_L is the input of the final norm)

and pool each state into the batch's stage (`deffcore.extraction.pooling`, `.stage`); nothing
else of the batch is kept. `torch.compile` and CUDA graphs are not used: batches change shape
(B and T), the hooks sit inside arbitrary transformers forwards, and what is left per layer is
five kernels against the layer's own dozens (BENCHMARKS.md "GPU at full speed"). An
out-of-memory error halves the batch size and retries the batch; at batch size 1 it raises
OutOfMemoryError. The pooled rows are written back at each passage's original slot.

Resuming: with a `checkpoint` (e.g. `deffcore.extraction.partial.PartialRun`), the pooled
rows of finished batches are handed to `checkpoint.save` as the run goes, the batches finished
since the last save as one chunk, at most every CHECKPOINT_EVERY_S seconds (the last chunk is not
saved: the complete entry follows at once), and at the start `checkpoint.resume(plan, order)`
returns the batches an interrupted run already finished. Their rows are put back and the loop
continues from the next passage of the same plan with the batch cap in force when the run
stopped, so the remaining batches are exactly those of an uninterrupted run and the result is
bit-identical. `should_stop()` is asked before every batch; when it says True the run ends with
RunCancelled, its finished batches kept. A batch in flight when a forward fails is finished
(kept) before the error propagates.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from deffcore.core.constants import EXTRACTED_POOLINGS
from deffcore.core.errors import (
    DeffError,
    OutOfMemoryError,
    RunCancelled,
    UnsupportedArchitectureError,
)
from deffcore.extraction.batches import (
    TOKEN_BUDGET,
    BatchCheckpoint,
    SavedBatch,
    next_batch,
    pad_batch,
    token_ids_sha256,
)
from deffcore.extraction.pooling import POOLED_MEANS, PooledStates
from deffcore.extraction.prefix import check_rows_fit
from deffcore.extraction.stage import LayerPooler, Shipped, pipeline_depth, raise_if_nonfinite
from deffcore.inputs.architecture import Architecture
from deffcore.inputs.loading import LoadedModel
from deffcore.inputs.run_inputs import RunInputs

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
            _taps_begin(self.taps, b_mask)
            _forward(self.arch, b_ids, b_mask, b_pos)
        except (RuntimeError, torch.OutOfMemoryError) as err:
            self.pooler.abandon()
            _taps_abandon(self.taps)
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
        _taps_end(self.taps, batch)
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
    """Pooled h_0 .. h_L of a run's ready ids (`deffcore.inputs.run_inputs`) for every
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
    handles += _taps_attach(run.taps, loaded.model, len(ids))
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


def _taps_attach(taps: list[ExtractionTap], model: torch.nn.Module, n: int) -> list:
    return [h for tap in taps for h in tap.attach(model, n)]


def _taps_begin(taps: list[ExtractionTap], mask: torch.Tensor) -> None:
    for tap in taps:
        tap.begin(mask)


def _taps_end(taps: list[ExtractionTap], batch: list[int]) -> None:
    for tap in taps:
        tap.end(batch)


def _taps_abandon(taps: list[ExtractionTap]) -> None:
    for tap in taps:
        tap.abandon()
