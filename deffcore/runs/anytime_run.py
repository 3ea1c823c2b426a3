"""A run that shows its numbers as batches land, and may stop once they are settled.

    live = measure_live(spec, until=StopRule("verdict"), on_estimate=print)
    live.measurement            # the run that was kept: N = spec.n, or the N it stopped at
    live.trajectory             # anytime.Estimate at 64, 128, 256, ... passages
    live.stopped                # True when the stopping rule ended it early

While the run extracts, every finished chunk of batches reaches `PrefixRows` through the run's
checkpoint (`cache.PrefixCheckpoint`), and each mark of `anytime.schedule` is estimated as soon
as its passages are in: `on_estimate(est)` is called with it. Chunks come at most every
`forward.CHECKPOINT_EVERY_S` seconds, so an estimate lands within that time of its batches.

With a stopping rule (`deffcore.statistics.stopping.StopRule`) the run ends before its next
batch once the rule says so (or at once when a resumed prefix already settles it), and the
first k passages, k the mark it stopped at, are stored as a normal complete run of N = k
(`cache.pooled_from_rows`: bit-identical to an uninterrupted k-run); the N-run's partial entry
is then removed unless another process computes it. Documents mode and streamed datasets have
no prefix property (`cache.prefix_refusal`): a stopping rule is refused there; their estimates
are made on the sample's first k passages once all of them have landed.

A run already complete in the cache is read, and its trajectory computed from its rows (what
it showed while it ran); a stopping rule does not cut it short.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from deffcore.core.constants import EXTRACTED_POOLINGS, WINDOW_MODES
from deffcore.core.errors import DeffError, RunCancelled
from deffcore.extraction import cache
from deffcore.extraction.cache import (
    PrefixRows,
    batch_rows,
    finished_rows,
    prefix_refusal,
    schedule,
)
from deffcore.extraction.forward import SavedBatch
from deffcore.inputs.run_spec import RunSpec
from deffcore.statistics.anytime import Estimate, estimate
from deffcore.statistics.bos_answer import ANSWER_POOLINGS
from deffcore.statistics.stopping import StopRule


@dataclass
class LiveRun:
    """The outcome of `measure_live` (module docstring)."""

    measurement: Any  # deffcore.runs.measure.Measurement
    trajectory: list[Estimate]
    stopped: bool
    requested_n: int
    rule: StopRule | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the trajectory (a list, one object per mark), the stop and the rule."""
        return {
            "requested_n": self.requested_n,
            "n": int(self.measurement.n),
            "stopped": self.stopped,
            "until": None if self.rule is None else self.rule.describe(),
            "trajectory": [e.to_dict() for e in self.trajectory],
            "notes": list(self.notes),
        }


class _Watch:
    """The live side of one run: rows in, estimates out, the stop decision.

    `rule` is a StopRule, None, or a callable returning one (a rule chosen while the run goes:
    the app's "Stop when settled" button); `ready()` says whether the run may stop now."""

    def __init__(
        self,
        spec: RunSpec,
        marks: list[int],
        rule: StopRule | Callable[[], StopRule | None] | None,
        on_estimate: Callable[[Estimate], None] | None,
        options: dict[str, Any],
    ):
        self.spec, self.marks, self._rule = spec, marks, rule
        self.on_estimate, self.options = on_estimate, options
        self.rows = PrefixRows(spec.n)
        self.trajectory: list[Estimate] = []
        self.stop_at: int | None = None
        self.started = time.perf_counter()

    def tap(self, batch: SavedBatch) -> None:
        self.rows.add(batch)
        tokens = self.spec.max_tokens if self.spec.passages in WINDOW_MODES else None
        while self.stop_at is None and self._next() is not None and self._next() <= self.rows.done:
            self.add(self.rows.pooled(self._next(), max_tokens=tokens))

    def _next(self) -> int | None:
        """The next mark to estimate, below n (the full run is estimated when it lands)."""
        done = len(self.trajectory)
        return self.marks[done] if done < len(self.marks) - 1 else None

    @property
    def rule(self) -> StopRule | None:
        return self._rule() if callable(self._rule) else self._rule

    def add(self, pooled: Any) -> Estimate:
        est = estimate(pooled, elapsed_s=time.perf_counter() - self.started, **self.options)
        self.trajectory.append(est)
        if self.on_estimate is not None:
            self.on_estimate(est)
        self.ready()
        return est

    def ready(self) -> bool:
        """True once the rule says stop at the last estimate (below N); remembers where."""
        if self.stop_at is not None or not self.trajectory:
            return self.stop_at is not None
        rule, last = self.rule, self.trajectory[-1]
        if rule is not None and rule.should_stop(self.trajectory):
            self.stop_at = last.n
        return self.stop_at is not None


def measure_live(
    spec: RunSpec,
    *,
    metric: str = "cka",
    device: str | None = None,
    batch_size: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    until: StopRule | Callable[[], StopRule | None] | None = None,
    on_estimate: Callable[[Estimate], None] | None = None,
    bootstrap: int | None = None,
    bootstrap_poolings: Sequence[str] = ANSWER_POOLINGS,
    use_cache: bool = True,
    final_estimate: bool = True,
    replay: bool = True,
) -> LiveRun:
    """Measure `spec` with estimates at growing N, stopping early when `until` says so.

    `until`: a StopRule, or a callable returning the rule in force (None: none yet), asked
    before every batch. `bootstrap` B replicates give an interval to `bootstrap_poolings` at
    every mark, from one paired bootstrap (costly: about B similarity passes each); with
    default and no_pos0 among them (the default), each estimate carries the BOS answer.
    `final_estimate`: also estimate the whole run when it lands; `replay`: estimate the marks
    a cached (or partly checkpointed) run did not show while extracting, from its states (the
    app skips both: its pages show the landed run). Raises DeffError for a stopping rule on a
    run without the prefix property, and what `measure_spec` raises (RunCancelled when
    `should_stop` cancels).
    """
    from deffcore.inputs.model import resolve_device_dtype
    from deffcore.runs.measure import measure_spec

    refusal = prefix_refusal(spec.passages, spec.dataset_spec)
    if isinstance(until, StopRule) and refusal is not None:
        raise DeffError(f"--until cannot stop this run early. {refusal}")
    device = device or resolve_device_dtype(None, spec.dtype)[0]
    batch = batch_rows(spec.max_tokens, device, batch_size)
    # estimates on the sample's first k passages in every mode (documents too: PrefixRows
    # waits for the whole prefix); only a stop needs k to be a k-run's own batches
    marks = schedule(spec.n, batch if spec.passages in WINDOW_MODES else 1)
    options = {
        "metric": metric, "bootstrap": bootstrap, "bootstrap_poolings": bootstrap_poolings,
        "spec": spec, "seed": spec.seed,  # the seed a bootstrap of the run itself uses
    }  # fmt: skip
    watch = _Watch(spec, marks, until if refusal is None else None, on_estimate, options)
    run = {"metric": metric, "device": device, "batch_size": batch_size, "progress": progress}
    try:
        m = measure_spec(
            spec,
            **run,
            use_cache=use_cache,
            tap=watch.tap,
            should_stop=lambda: watch.ready() or bool(should_stop and should_stop()),
        )
    except RunCancelled:
        if watch.stop_at is None:
            raise
        return _handed_on(_stopped(watch, run, batch, use_cache))
    if replay:
        _fill_from_states(watch, m)
    if final_estimate:
        watch.add(m.pooled)
    notes = [f"This run cannot stop early. {refusal}"] if refusal and until is not None else []
    return _handed_on(LiveRun(m, watch.trajectory, False, spec.n, watch.rule, notes))


def _handed_on(live: LiveRun) -> LiveRun:
    """`live` with its last estimate's paired bootstrap adopted by the kept run when that
    estimate is on the run's own passages (a stopped run, or the final estimate): a bootstrap
    of the run it covers (same B and seed) is then read from it, not drawn again."""
    last = live.trajectory[-1] if live.trajectory else None
    if last is not None and last.n == live.measurement.n:
        live.measurement.adopt_paired(last.paired)
    return live


def _fill_from_states(watch: _Watch, m: Any) -> None:
    """Marks the run did not estimate while it extracted (it came from the cache, or its last
    chunks were never checkpointed): estimated now from its rows (the same numbers)."""
    if watch.rows.done >= m.n or watch._next() is None:
        return
    rule, watch._rule = watch._rule, None  # a complete run is not cut short
    try:
        watch.tap(finished_rows(m.pooled))
    finally:
        watch._rule = rule


def _stopped(watch: _Watch, run: dict[str, Any], batch: int, use_cache: bool) -> LiveRun:
    """Keep the first `stop_at` passages as a complete run of that N (module docstring)."""
    from deffcore.runs.measure import Measurement

    spec, k = watch.spec, int(watch.stop_at)
    spec_k = replace(spec, n=k)
    rows = {**{p: watch.rows.rows[p] for p in EXTRACTED_POOLINGS}, "pos0_ratio": watch.rows.ratio}
    pooled = cache.pooled_from_rows(
        rows, spec_k, device=run["device"], batch=batch, resumed=0, ratio_rows=k
    )
    if use_cache:
        pooled, _cached, meta = cache.get_or_compute(
            spec_k, lambda: pooled, sources=spec_k.sources()
        )
        _drop_partial(spec.key())
    else:
        meta = {}
    elapsed = time.perf_counter() - watch.started  # the stopped run took this long
    m = Measurement(spec=spec_k, pooled=pooled, metric=run["metric"], meta=meta, elapsed_s=elapsed)
    note = (
        f"Stopped at N = {k:,} of {spec.n:,} ({watch.rule.describe()}); kept as a run of "
        f"N = {k:,}" + (f" (key {spec_k.key()})." if use_cache else ".")
    )
    return LiveRun(m, watch.trajectory, True, spec.n, watch.rule, [note])


def _drop_partial(key: str) -> None:
    """Remove the stopped run's partial entry (the k-run now holds its rows), unless a process
    computes it right now (`cache.delete` refuses that): then it is theirs to finish."""
    for info in cache.list_runs():
        if info.get("key") == key and info.get("status") == "partial" and not info["running"]:
            with contextlib.suppress(DeffError, OSError):
                cache.delete(key)
