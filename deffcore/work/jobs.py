"""Background work: runs and sweeps that outlive the script run (page view) that started them.

    job_id = jobs.start(spec, device="cpu")      # checks the data first, then queues the run
    jobs.status(job_id)   -> JobStatus(stage, done, total, tokens_per_s, eta_s, state, ...)
    jobs.cancel(job_id)   # stops it before the next batch (its finished batches are kept)
    jobs.active_jobs()    # queued and running jobs, oldest first
    jobs.load_result(status.result_key) -> Measurement (read back from the cache)
    sweep_id = jobs.start_sweep(cells, n=64, engine="serial")   # a sweep is a job too
    jobs.sweep_job(sweep_id) -> {"state", "landed", "total", "rows", ...}

A Streamlit page only draws: a run started from it goes to this process-wide registry and one
worker thread, so switching pages or reloading the browser does not stop it. The thread runs
`deffcore.measurement.measure_spec`, so the cache stays the state of record: a job's result is
its cache entry (`result_key`), read back by key; an interrupted or cancelled run leaves a
*partial* entry (never a complete-looking one) that the same spec resumes.

Decisions:
- One registry and one worker thread for every kind of background work, jobs in arrival order
  (`queued` until it is their turn): runs share the machine's cores, and two extractions at
  once would each run at half speed anyway. A sweep (`start_sweep`, the Models page) is one
  job of the same queue: checked before it is queued, cancellable between cells and batches,
  forgotten like a run once finished. With engine "ray" its cells run as Ray tasks while the
  worker waits for them: Ray, not this queue, schedules a cluster.
- Starting a spec that is already queued or running returns that job (two tabs, one run).
- `start` checks what can be checked cheaply BEFORE anything loads (`check`, from
  `deffcore.preflight`, re-exported here with `plan` and `display`): the model path and the
  data; errors name the user's own file.
- Rates: passages per second over the extraction batches seen so far (the model load is not in
  it); tokens per second = that rate x max_tokens, exact for token windows (every window is
  max_tokens long) and an upper bound for documents (`tokens_exact` False); once done, the
  rate x the run's exact mean tokens per passage. ETA = remaining passages / rate.
- Window runs show live estimates (issue 23): the worker runs them through
  `deffcore.anytime_run.measure_live`, each estimate lands in the job's `estimates` as plain
  data, and `stop_when_settled(job_id)` makes the run stop once the BOS verdict is settled
  (a stopping rule read before every batch, so it may be asked while the run goes), keeping a
  run of that N (`result_key` names it, `stopped_at` says where). Documents runs have none.
- This module never imports streamlit.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from deffcore.core.constants import WINDOW_MODES
from deffcore.core.errors import DeffError, RunCancelled
from deffcore.inputs.run_spec import RunSpec
from deffcore.runs.preflight import check, display, plan

__all__ = [
    "FINISHED",
    "KEEP_FINISHED",
    "JobStatus",
    "active_jobs",
    "cancel",
    "check",
    "display",
    "forget_finished",
    "kept_passages",
    "load_result",
    "partial_spec",
    "plan",
    "start",
    "start_sweep",
    "start_task",
    "status",
    "stop_when_settled",
    "sweep_job",
    "task_job",
    "wait",
]

FINISHED = ("done", "failed", "cancelled")
#: Stages that move no counter; their progress is their time against `stage_times.estimate`.
ONE_OFF_STAGES = ("assembling", "loading model")
#: Finished jobs kept for `status` (a session that reloads still finds its job).
KEEP_FINISHED = 200


@dataclass(frozen=True)
class JobStatus:
    """A snapshot of one job; every field is plain data (safe to read from any thread)."""

    job_id: str
    spec: RunSpec | None  # None for a sweep
    state: str
    stage: str
    done: int
    total: int
    tokens_per_s: float | None
    tokens_exact: bool
    eta_s: float | None
    elapsed_s: float
    stage_elapsed_s: float
    error: str | None
    result_key: str | None
    from_cache: bool
    resumed: int
    cancel_requested: bool
    ahead: int  # jobs queued or running before this one
    kind: str = "run"  # "run" (one RunSpec), "sweep" (done/total count cells) or "task"
    datasets: tuple[str, ...] = ()  # every dataset the job reads (uploads in use stay)
    #: the expected seconds of a one-off stage (`deffcore.stage_times`), None when unknown
    stage_estimate_s: float | None = None
    label: str = ""  # a task's name for people
    result: Any = None  # a finished task's plain result
    #: issue 23: the live estimates so far (`anytime.Estimate.to_dict()`, one per mark), the
    #: stopping target asked for ("verdict", "solid" or None) and where the run stopped
    estimates: tuple[dict[str, Any], ...] = ()
    until: str | None = None
    stopped_at: int | None = None

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def stage_fraction(self) -> float:
        """The current stage's bar: passages (or a task's steps) done, or a one-off stage's
        elapsed time against its estimate (`stage_times.fraction`, never full)."""
        from deffcore.runs.stage_times import fraction

        if self.stage in ONE_OFF_STAGES:
            return fraction(self.stage_elapsed_s, self.stage_estimate_s)
        if self.total and self.stage not in ("queued", "checking data"):
            return min(max(self.done / self.total, 0.0), 1.0)
        return 0.0

    def _one_off(self) -> str:
        """A one-off stage in words: what, how long so far, the estimate, once-only."""
        what = {"assembling": "assembling the packaged model file (once, kept for later runs)"}
        text = what.get(self.stage, "loading model")
        if self.stage == "loading model" and self.spec is not None:
            text += " and cutting windows" if self.spec.passages in WINDOW_MODES else ""
        text += f"… {self.stage_elapsed_s:.0f} s"
        if self.stage_estimate_s:
            left = max(self.stage_estimate_s - self.stage_elapsed_s, 0.0)
            text += f" of about {self.stage_estimate_s:.0f} s" + (
                f" (ETA {left:.0f} s)" if left else " (taking longer than last time)"
            )
        return text

    def describe(self) -> str:
        """One line for a progress display: stage, passages, tokens/s, ETA."""
        if self.state == "queued":
            return f"queued: waiting for {self.ahead} run(s) ahead of it"
        if self.kind == "sweep":
            stopping = " · stopping after this cell" if self.cancel_requested else ""
            return f"sweep {self.state}: {self.done:,} of {self.total:,} cells landed{stopping}"
        if self.state == "done":
            how = "served from the cache" if self.from_cache else f"in {self.elapsed_s:.0f} s"
            rate = f" · {self.tokens_per_s:,.0f} tokens/s" if self.tokens_per_s else ""
            return f"done {how}: {self.done:,} passages{rate}"
        if self.state in ("failed", "cancelled"):
            return self.state
        if self.stage in ONE_OFF_STAGES:
            return self._one_off()
        if self.kind == "task":
            return _task_line(self)
        if self.stage != "extracting":
            return f"{self.stage}… {self.stage_elapsed_s:.0f} s"
        parts = [f"extracting: {self.done:,} / {self.total:,} passages"]
        if self.resumed:
            parts.append(f"{self.resumed:,} resumed")
        if self.tokens_per_s:
            bound = "" if self.tokens_exact else "≤ "
            parts.append(f"{bound}{self.tokens_per_s:,.0f} tokens/s")
        parts.append(f"ETA {self.eta_s:.0f} s" if self.eta_s is not None else "ETA: measuring…")
        if self.cancel_requested:
            parts.append("stopping after this batch")
        elif self.until:
            parts.append(f"stops when {'settled' if self.until == 'verdict' else 'solid'}")
        return " · ".join(parts)


def _task_line(status: JobStatus) -> str:
    """A task's progress: its stage, steps done of total, ETA."""
    parts = [
        f"{status.stage}: {status.done:,} / {status.total:,}" if status.total else status.stage
    ]
    parts.append(f"ETA {status.eta_s:.0f} s" if status.eta_s is not None else "ETA: measuring…")
    return " · ".join(parts)


@dataclass
class _SweepWork:
    """What a sweep job runs (a plan checked when it was started) and what has landed."""

    plan: Any  # deffcore.sweep.runner.SweepPlan
    rows: list[dict[str, Any]] = field(default_factory=list)
    engine: str | None = None
    address: str | None = None


@dataclass
class _Job:
    job_id: str
    spec: RunSpec | None  # None for a sweep
    metric: str
    device: str | None
    batch_size: int | None
    names: dict[str, str]
    seq: int
    created: float = field(default_factory=time.monotonic)
    state: str = "queued"
    stage: str = "queued"
    stage_started: float = field(default_factory=time.monotonic)
    started: float | None = None
    ended: float | None = None
    done: int = 0
    total: int = 0
    first: tuple[float, int] | None = None  # (time, done) at the first extraction batch
    last: tuple[float, int] | None = None
    resumed: int = 0
    final_tokens_per_s: float | None = None
    error: str | None = None
    result_key: str | None = None
    from_cache: bool = False
    cancel: threading.Event = field(default_factory=threading.Event)
    sweep: _SweepWork | None = None
    task: Any = None  # a task's fn(progress, should_stop) -> plain result
    name: str = ""  # a task's identity (one at a time) and model (for stage times)
    model: str = ""
    result: Any = None
    estimates: list[dict[str, Any]] = field(default_factory=list)
    until: str | None = None
    stopped_at: int | None = None


_LOCK = threading.Lock()
_JOBS: dict[str, _Job] = {}
_QUEUE: deque[str] = deque()
_WAKE = threading.Condition(_LOCK)
_SEQ = itertools.count()
_WORKER: threading.Thread | None = None


# ---------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------


def start(
    spec: RunSpec,
    *,
    metric: str = "cka",
    device: str | None = None,
    batch_size: int | None = None,
    names: dict[str, str] | None = None,
    checked: bool = False,
) -> str:
    """Queue a run of `spec` after `check` (skipped when `checked`); returns its job id.

    A spec already queued or running returns that job's id. `names` maps saved file paths to
    the names the user knows them by (for messages).
    """
    if not checked:
        check(spec, names=names)
    with _LOCK:
        for job in _JOBS.values():
            if job.spec == spec and job.state in ("queued", "running"):
                return job.job_id
        job = _Job(
            job_id=uuid.uuid4().hex,
            spec=spec,
            metric=metric,
            device=device,
            batch_size=batch_size,
            names=dict(names or {}),
            seq=next(_SEQ),
        )
        return _enqueue(job)


def start_sweep(cells: Sequence[Any], **options: Any) -> str:
    """Queue a sweep of `cells` (`deffcore.sweep.run_sweep` options) -> its job id.

    The sweep is checked here, before it is queued (`deffcore.sweep.plan_sweep`: at most
    `MAX_CELLS` distinct cells, known interventions, and the options every cell shares): a
    malformed sweep raises its DeffError and nothing is queued. A cell whose own model or
    dataset is refused does not refuse the sweep; it fails alone, with its sentence, when the
    sweep runs (`deffcore.sweep_checks.cell_specs`, as `deffcore sweep` does). It then waits
    its turn in the one queue like a run (never two extractions at once), `cancel` stops it
    before its next cell or batch (the cells that landed stay in the cache), and once finished
    it is forgotten like a run (`KEEP_FINISHED`). `sweep_job(job_id)` follows it.
    """
    from deffcore.work.sweep.runner import plan_sweep

    plan = plan_sweep(cells, **options)
    with _LOCK:
        job = _Job(
            job_id=uuid.uuid4().hex,
            spec=None,
            metric=plan.settings["metric"],
            device=plan.device,
            batch_size=plan.batch_size,
            names={},
            seq=next(_SEQ),
            total=len(plan.rows),
            sweep=_SweepWork(plan),
        )
        return _enqueue(job)


def start_task(name: str, fn: Any, *, model: str = "") -> str:
    """Queue background work that is neither a run nor a sweep (a run's BOS diagnostics, the
    BOS on/off check): `fn(progress, should_stop)` returns a plain result, kept with the job
    (`status(job_id).result`). `progress(done, total, stage)` as `measure`'s: a stage starting
    with "loading" or "assembling" is a one-off stage with its estimate (`model`'s). One task
    per `name` at a time: a name already queued or running returns that job. It waits its turn
    in the one queue like a run."""
    with _LOCK:
        for job in _JOBS.values():
            if job.task is not None and job.name == name and job.state in ("queued", "running"):
                return job.job_id
        job = _Job(
            job_id=uuid.uuid4().hex,
            spec=None,
            metric="cka",
            device=None,
            batch_size=None,
            names={},
            seq=next(_SEQ),
            task=fn,
            name=name,
            model=model,
        )
        return _enqueue(job)


def task_job(name: str) -> JobStatus | None:
    """The newest task named `name` (queued, running or finished), None when there is none."""
    with _LOCK:
        found = [j for j in _JOBS.values() if j.task is not None and j.name == name]
        return _snapshot(max(found, key=lambda j: j.seq)) if found else None


def _enqueue(job: _Job) -> str:
    """Register `job` and queue it (under `_LOCK`); the worker wakes."""
    _JOBS[job.job_id] = job
    _QUEUE.append(job.job_id)
    _forget_old()
    _ensure_worker()
    _WAKE.notify_all()
    return job.job_id


def sweep_job(job_id: str) -> dict[str, Any] | None:
    """A sweep job's snapshot as plain data (None for an unknown id or a run): job_id, state,
    error, engine, address, total and landed cells, each landed cell's row, elapsed_s."""
    with _LOCK:
        job = _JOBS.get(job_id)
        if job is None or job.sweep is None:
            return None
        end = job.ended or time.monotonic()
        return {
            "job_id": job.job_id,
            "state": job.state,
            "error": job.error,
            "engine": job.sweep.engine,
            "address": job.sweep.address,
            "total": job.total,
            "landed": len(job.sweep.rows),
            "rows": [dict(r) for r in job.sweep.rows],
            "elapsed_s": end - (job.started or job.created),
        }


def status(job_id: str) -> JobStatus | None:
    """The job's current status, None for an id this process does not know."""
    with _LOCK:
        job = _JOBS.get(job_id)
        return None if job is None else _snapshot(job)


def cancel(job_id: str) -> bool:
    """Ask a job to stop: a queued job is cancelled at once, a running one before its next
    batch (the model load finishes first). False when the job is unknown or finished."""
    with _LOCK:
        job = _JOBS.get(job_id)
        if job is None or job.state in FINISHED:
            return False
        job.cancel.set()
        if job.state == "queued":
            _QUEUE.remove(job_id)
            job.state, job.stage, job.ended = "cancelled", "cancelled", time.monotonic()
            _WAKE.notify_all()
        return True


def stop_when_settled(job_id: str, target: str = "verdict") -> bool:
    """Ask a running window run to stop once `target` ("verdict" or "solid",
    `deffcore.stopping`) is met (at once when its latest estimates already meet it), keeping
    what it extracted as a run of that N. False when the job is unknown, finished, or not a
    run whose estimates can stop it (`anytime.prefix_refusal`)."""
    from deffcore.extraction.prefix import prefix_refusal
    from deffcore.statistics.stopping import TARGETS

    if target not in TARGETS:
        raise DeffError(f"Unknown stopping target {target!r}; choose one of {', '.join(TARGETS)}.")
    with _LOCK:
        job = _JOBS.get(job_id)
        if job is None or job.spec is None or job.state in FINISHED:
            return False
        if prefix_refusal(job.spec.passages, job.spec.dataset) is not None:
            return False
        job.until = target
        return True


def active_jobs() -> list[JobStatus]:
    """Queued and running jobs, oldest first."""
    with _LOCK:
        jobs = sorted(
            (j for j in _JOBS.values() if j.state in ("queued", "running")), key=lambda j: j.seq
        )
        return [_snapshot(j) for j in jobs]


def wait(job_id: str, timeout: float | None = None) -> JobStatus | None:
    """Block until the job is finished or `timeout` seconds pass; its status (for tests, CLI)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with _LOCK:
        while True:
            job = _JOBS.get(job_id)
            if job is None or job.state in FINISHED:
                return None if job is None else _snapshot(job)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return _snapshot(job)
            _WAKE.wait(timeout=left if left is not None else 1.0)


def _rate(job: _Job) -> float | None:
    """Passages per second between the first and the last extraction batch seen."""
    if job.first and job.last and job.last[0] > job.first[0] and job.last[1] > job.first[1]:
        return (job.last[1] - job.first[1]) / (job.last[0] - job.first[0])
    return None


def _snapshot(job: _Job) -> JobStatus:
    now = time.monotonic()
    end = job.ended or now
    rate = _rate(job)
    spec = job.spec
    exact = spec is not None and spec.passages in WINDOW_MODES
    tps = job.final_tokens_per_s
    if tps is None and rate is not None and job.state == "running" and spec is not None:
        tps = rate * spec.max_tokens
    elif tps is not None:
        exact = True
    eta = (job.total - job.done) / rate if rate and job.state == "running" else None
    ahead = sum(1 for j in _JOBS.values() if j.state in ("queued", "running") and j.seq < job.seq)
    return JobStatus(
        job_id=job.job_id,
        spec=job.spec,
        state=job.state,
        stage=job.stage,
        done=job.done,
        total=job.total or (spec.n if spec is not None else 0),
        tokens_per_s=tps,
        tokens_exact=exact,
        eta_s=eta,
        elapsed_s=end - (job.started or job.created),
        stage_elapsed_s=end - job.stage_started,
        error=job.error,
        result_key=job.result_key,
        from_cache=job.from_cache,
        resumed=job.resumed,
        cancel_requested=job.cancel.is_set(),
        ahead=ahead if job.state == "queued" else 0,
        kind="task" if job.task is not None else "run" if job.sweep is None else "sweep",
        datasets=_datasets(job),
        stage_estimate_s=_stage_estimate(job),
        label=job.name,
        result=job.result,
        estimates=tuple(job.estimates),
        until=job.until,
        stopped_at=job.stopped_at,
    )


def _stage_estimate(job: _Job) -> float | None:
    if job.stage not in ONE_OFF_STAGES:
        return None
    from deffcore.runs.stage_times import estimate

    return estimate(job.stage, _model_of(job))


def _datasets(job: _Job) -> tuple[str, ...]:
    if job.sweep is None:
        return (job.spec.dataset,) if job.spec is not None else ()
    specs = [spec for spec in job.sweep.plan.specs if spec is not None]  # None: a refused cell
    return tuple(dict.fromkeys(spec.dataset for spec in specs))


def forget_finished() -> int:
    """Forget every finished job now (a server whose cache was swapped under it; tests that
    must not see another test's finished tasks). Returns how many were forgotten."""
    with _LOCK:
        done = [k for k, j in _JOBS.items() if j.state in FINISHED]
        for k in done:
            del _JOBS[k]
    return len(done)


def _forget_old() -> None:
    finished = sorted((j for j in _JOBS.values() if j.state in FINISHED), key=lambda j: j.seq)
    for job in finished[: max(0, len(finished) - KEEP_FINISHED)]:
        del _JOBS[job.job_id]


def _ensure_worker() -> None:
    global _WORKER
    if _WORKER is None or not _WORKER.is_alive():
        _WORKER = threading.Thread(target=_work, name="deff-jobs", daemon=True)
        _WORKER.start()


def _work() -> None:
    while True:
        with _LOCK:
            while not _QUEUE:
                _WAKE.wait()
            job = _JOBS[_QUEUE.popleft()]
            job.state, job.started = "running", time.monotonic()
            _set_stage(
                job, "sweeping" if job.sweep else "starting" if job.task else "checking data"
            )
        if job.task is not None:
            _run_task(job)
        elif job.sweep is None:
            _run(job)
        else:
            _run_sweep(job)


def _set_stage(job: _Job, stage: str) -> None:
    if stage != job.stage:
        now = time.monotonic()
        if job.stage in ONE_OFF_STAGES and stage not in FINISHED:  # it ended by working on
            from deffcore.runs.stage_times import record

            record(job.stage, _model_of(job), now - job.stage_started)
        job.stage, job.stage_started = stage, now


def _model_of(job: _Job) -> str:
    return job.model or (job.spec.model if job.spec is not None else "")


def _progress(job: _Job):
    """measure's progress(done, total, stage) -> the job's fields."""

    def progress(done: int, total: int, stage: str) -> None:
        now = time.monotonic()
        with _LOCK:
            job.total = int(total)
            if stage.startswith("assembling"):
                _set_stage(job, "assembling")
            elif stage.startswith("loading"):
                _set_stage(job, "loading model")
            elif stage == "resume":
                job.resumed = int(done)
                job.done = int(done)
            elif stage == "extract":
                _set_stage(job, "extracting")
                job.done = int(done)
                job.last = (now, int(done))
                if job.first is None:
                    job.first = job.last
            else:
                _set_stage(job, stage)
                if job.task is not None:  # a task's own steps count like passages
                    job.done, job.last = int(done), (now, int(done))
                    job.first = job.first or job.last

    return progress


def _measure(job: _Job) -> Any:
    """The job's run: with live estimates (and a stop when settled) where its passages allow
    them (`deffcore.anytime_run`), else a plain `measure_spec`."""
    from deffcore.extraction.prefix import prefix_refusal
    from deffcore.runs import measure

    options = {
        "metric": job.metric,
        "device": job.device,
        "batch_size": job.batch_size,
        "progress": _progress(job),
        "should_stop": job.cancel.is_set,
    }
    if prefix_refusal(job.spec.passages, job.spec.dataset) is not None:
        return measure.measure_spec(job.spec, **options)
    from deffcore.runs.anytime_run import measure_live
    from deffcore.statistics.stopping import StopRule

    def on_estimate(est: Any) -> None:
        with _LOCK:
            job.estimates.append(est.to_dict())

    live = measure_live(
        job.spec,
        **options,
        until=lambda: StopRule(job.until) if job.until else None,
        on_estimate=on_estimate,
        final_estimate=False,
        replay=False,
    )
    with _LOCK:
        job.stopped_at = int(live.measurement.n) if live.stopped else None
    return live.measurement


def _run(job: _Job) -> None:
    state, error = "failed", None
    try:
        m = _measure(job)
        with _LOCK:
            job.result_key = m.spec.key()
            job.from_cache = bool(m.cached)
            job.done = job.total = int(m.n)
            job.resumed = int(getattr(m, "resumed_passages", 0) or 0)
            # exact mean tokens per passage x the passage rate over the extraction batches
            # (the model load is not in it); none when fewer than two batches ran here
            rate = _rate(job)
            if not m.cached and rate and m.pooled.tokens and m.n:
                job.final_tokens_per_s = float(m.pooled.tokens) / float(m.n) * rate
        state = "done"
    except RunCancelled:
        state = "cancelled"
    except DeffError as err:
        error = display(str(err), job.names)
    except MemoryError:
        error = "The run ran out of memory; lower N or max tokens and try again."
    except Exception as err:  # any third-party failure ends the job, never the worker
        error = display(f"The run failed unexpectedly ({type(err).__name__}): {err}", job.names)
    _finish(job, state, error)


def _run_task(job: _Job) -> None:
    """The worker's body for a task: its function, with progress and cancellation."""
    state, error = "failed", None
    try:
        result = job.task(_progress(job), job.cancel.is_set)
        with _LOCK:
            job.result = result
        state = "done"
    except RunCancelled:
        state = "cancelled"
    except DeffError as err:
        error = str(err)
    except MemoryError:
        error = "It ran out of memory."
    except Exception as err:  # the worker records every failure, never dies of one
        error = f"It failed unexpectedly ({type(err).__name__}): {err}"
    _finish(job, state, error)


def _run_sweep(job: _Job) -> None:
    """The worker's body for a sweep job: its checked plan, cell after cell (or on Ray)."""
    from deffcore.work.sweep.cells import one_sentence
    from deffcore.work.sweep.runner import run_plan

    work = job.sweep
    assert work is not None

    def on_cell(row: dict[str, Any], landed: int, total: int) -> None:
        with _LOCK:
            work.rows.append(dict(row))
            job.done = landed

    state, error = "failed", None
    try:
        result = run_plan(work.plan, on_cell=on_cell, should_stop=job.cancel.is_set)
        with _LOCK:
            work.engine, work.address = result.engine, result.address
        state = "done"
    except RunCancelled:
        state = "cancelled"
    except Exception as err:  # the worker records every failure, never dies of one
        error = one_sentence(err)
    _finish(job, state, error)


def _finish(job: _Job, state: str, error: str | None) -> None:
    with _LOCK:
        job.state, job.error, job.ended = state, error, time.monotonic()
        _set_stage(job, state)
        _WAKE.notify_all()


# ---------------------------------------------------------------------------------------------
# Results and partial entries (the cache is the state of record)
# ---------------------------------------------------------------------------------------------


def load_result(key: str) -> Any:
    """The `Measurement` of the complete cache entry `key` (no model runs)."""
    from deffcore.extraction import cache
    from deffcore.runs.measure import Measurement

    meta = cache.load_meta(key)
    spec = RunSpec(**meta["spec"])
    pooled = cache.load(spec) if spec.key() == key else None
    if pooled is None:
        raise DeffError(
            f"The cached run {key} can no longer be read (its model, data or code version "
            "changed, or the entry is damaged); run it again."
        )
    return Measurement(spec=spec, pooled=pooled, cached=True, meta=meta)


def partial_spec(key: str) -> RunSpec:
    """The spec of the partial (interrupted) entry `key`, to resume it with `start`."""
    from deffcore.extraction import cache, entries

    for info in entries.list_runs():
        if info.get("key") == key and info.get("status") == "partial" and info.get("spec"):
            return RunSpec(**info["spec"])
    raise cache.UnknownRunError(f"No interrupted run with key {key!r} to resume.")


def kept_passages(spec: RunSpec) -> int:
    """Passages a partial (interrupted or cancelled) entry of `spec` holds, 0 when none."""
    from deffcore.extraction import entries

    key = spec.key()
    for info in entries.list_runs():
        if info.get("key") == key and info.get("status") == "partial":
            return int(info.get("done_passages") or 0)
    return 0
