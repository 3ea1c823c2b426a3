"""Background work: runs and sweeps that outlive the script run (page view) that started them.

    job_id = jobs.start(spec, device="cpu")      # checks the data first, then queues the run
    jobs.status(job_id)   -> JobStatus(stage, done, total, tokens_per_s, eta_s, state, ...)
    jobs.cancel(job_id)   # stops it before the next batch (its finished batches are kept)
    jobs.active_jobs()    # queued and running jobs, oldest first
    jobs.load_result(status.result_key) -> Measurement (read back from the cache)
    sweep_id = jobs.start_sweep(cells, n=64, engine="serial")   # a sweep is a job too
    jobs.sweep_job(sweep_id) -> {"state", "landed", "total", "rows", ...}

A Streamlit page only draws: a run started from it goes to this process-wide registry and one
worker thread (`job_worker`), so switching pages or reloading the browser does not stop it. The
cache stays the state of record: a job's result is its cache entry (`result_key`), read back by
key; an interrupted or cancelled run leaves a *partial* entry that the same spec resumes.

Decisions:
- One registry and one worker thread for every kind of background work (runs, sweeps, tasks),
  in arrival order: runs share the machine's cores, and two extractions at once would each run
  at half speed anyway. With engine "ray" a sweep's cells run as Ray tasks while the worker
  waits for them.
- Starting a spec that is already queued or running returns that job (two tabs, one run).
- `start` runs `deffcore.runs.measure.check` before anything loads; errors name the user's file.
- Models load once per server (`deffcore.inputs.model`), so the second job on a model skips the
  "loading model" stage; each load part and the whole load are timed into
  `deffcore.runs.stage_times`, and a run that extracted here leaves its rate to price the next
  plan (`deffcore.runs.observed`). Rates and ETA: `job_state`.
- Window runs show live estimates (SPEC 14, `deffcore.runs.anytime_run.measure_live`), kept in
  the job's `estimates`; `stop_when_settled(job_id)` stops the run once the BOS verdict is
  settled, keeping a run of that N (`result_key` names it, `stopped_at` says where).
- This module never imports streamlit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from deffcore.core.errors import DeffError
from deffcore.inputs.run_spec import RunSpec
from deffcore.runs.measure import check
from deffcore.work import job_state
from deffcore.work.job_state import FINISHED, Job, JobStatus, SweepWork, forget_old, status_of
from deffcore.work.job_worker import ensure_worker


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
    with job_state.JOBS_LOCK:
        for job in _active():
            if job.spec == spec:
                return job.job_id
        job = Job(
            spec=spec, metric=metric, device=device, batch_size=batch_size, names=dict(names or {})
        )
        return _enqueue(job)


def start_sweep(cells: Sequence[Any], **options: Any) -> str:
    """Queue a sweep of `cells` (`deffcore.work.sweep.run_sweep` options) -> its job id.

    The sweep is checked here, before it is queued (`deffcore.work.sweep.plan_sweep`: at most
    `MAX_CELLS` distinct cells, known interventions, and the options every cell shares): a
    malformed sweep raises its DeffError and nothing is queued. A cell whose own model or
    dataset is refused does not refuse the sweep; it fails alone, with its sentence, when the
    sweep runs (`deffcore.work.sweep.checks.cell_specs`, as `deffcore sweep` does). It then waits
    its turn in the one queue like a run (never two extractions at once), `cancel` stops it
    before its next cell or batch (the cells that landed stay in the cache), and once finished
    it is forgotten like a run (`KEEP_FINISHED`). `sweep_job(job_id)` follows it.
    """
    from deffcore.work.sweep.runner import plan_sweep

    plan = plan_sweep(cells, **options)
    with job_state.JOBS_LOCK:
        job = Job(
            metric=plan.settings["metric"],
            device=plan.device,
            batch_size=plan.batch_size,
            total=len(plan.rows),
            sweep=SweepWork(plan),
        )
        return _enqueue(job)


def start_task(name: str, fn: Any, *, model: str = "") -> str:
    """Queue background work that is neither a run nor a sweep (a run's BOS diagnostics, the
    BOS on/off check): `fn(progress, should_stop)` returns a plain result, kept with the job
    (`status(job_id).result`). `progress(done, total, stage)` as `measure`'s: a stage starting
    with "loading" or "assembling" is a one-off stage with its estimate (`model`'s). One task
    per `name` at a time: a name already queued or running returns that job. It waits its turn
    in the one queue like a run."""
    with job_state.JOBS_LOCK:
        for job in _active():
            if job.task is not None and job.name == name:
                return job.job_id
        return _enqueue(Job(task=fn, name=name, model=model))


def task_job(name: str) -> JobStatus | None:
    """The newest task named `name` (queued, running or finished), None when there is none."""
    with job_state.JOBS_LOCK:
        found = [j for j in job_state.JOBS.values() if j.task is not None and j.name == name]
        return status_of(max(found, key=lambda j: j.seq)) if found else None


def _active() -> list[Job]:
    """Queued and running jobs (under `job_state.JOBS_LOCK`)."""
    return [j for j in job_state.JOBS.values() if j.state in ("queued", "running")]


def _enqueue(job: Job) -> str:
    """Register `job` and queue it (under `job_state.JOBS_LOCK`); the worker wakes."""
    job_state.JOBS[job.job_id] = job
    job_state.QUEUE.append(job.job_id)
    forget_old()
    ensure_worker()
    job_state.WAKE.notify_all()
    return job.job_id


def sweep_job(job_id: str) -> dict[str, Any] | None:
    """A sweep job's snapshot as plain data (None for an unknown id or a run): job_id, state,
    error, engine, address, total and landed cells, each landed cell's row, elapsed_s."""
    with job_state.JOBS_LOCK:
        job = job_state.JOBS.get(job_id)
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
    with job_state.JOBS_LOCK:
        job = job_state.JOBS.get(job_id)
        return None if job is None else status_of(job)


def cancel(job_id: str) -> bool:
    """Ask a job to stop: a queued job is cancelled at once, a running one before its next
    batch (the model load finishes first). False when the job is unknown or finished."""
    with job_state.JOBS_LOCK:
        job = job_state.JOBS.get(job_id)
        if job is None or job.state in FINISHED:
            return False
        job.cancel.set()
        if job.state == "queued":
            job_state.QUEUE.remove(job_id)
            job.state, job.stage, job.ended = "cancelled", "cancelled", time.monotonic()
            job_state.WAKE.notify_all()
        return True


def stop_when_settled(job_id: str, target: str = "verdict") -> bool:
    """Ask a running window run to stop once `target` ("verdict" or "solid",
    `deffcore.statistics.stopping`) is met (at once when its latest estimates already meet it),
    keeping what it extracted as a run of that N. False when the job is unknown, finished, or not a
    run whose estimates can stop it (`anytime.prefix_refusal`)."""
    from deffcore.extraction.cache import prefix_refusal
    from deffcore.statistics.stopping import TARGETS

    if target not in TARGETS:
        raise DeffError(f"Unknown stopping target {target!r}; choose one of {', '.join(TARGETS)}.")
    with job_state.JOBS_LOCK:
        job = job_state.JOBS.get(job_id)
        if job is None or job.spec is None or job.state in FINISHED:
            return False
        if prefix_refusal(job.spec.passages, job.spec.dataset_spec) is not None:
            return False
        job.until = target
        return True


def active_jobs() -> list[JobStatus]:
    """Queued and running jobs, oldest first."""
    with job_state.JOBS_LOCK:
        return [status_of(j) for j in sorted(_active(), key=lambda j: j.seq)]


def wait(job_id: str, timeout: float | None = None) -> JobStatus | None:
    """Block until the job is finished or `timeout` seconds pass; its status (for tests, CLI)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    with job_state.JOBS_LOCK:
        while True:
            job = job_state.JOBS.get(job_id)
            if job is None or job.state in FINISHED:
                return None if job is None else status_of(job)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return status_of(job)
            job_state.WAKE.wait(timeout=left if left is not None else 1.0)


def forget_finished() -> int:
    """Forget every finished job now (a server whose cache was swapped under it; tests that
    must not see another test's finished tasks). Returns how many were forgotten."""
    with job_state.JOBS_LOCK:
        done = [k for k, j in job_state.JOBS.items() if j.state in FINISHED]
        for k in done:
            del job_state.JOBS[k]
    return len(done)


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
    from deffcore.extraction import cache

    for info in cache.list_runs():
        if info.get("key") == key and info.get("status") == "partial" and info.get("spec"):
            return RunSpec(**info["spec"])
    raise cache.UnknownRunError(f"No interrupted run with key {key!r} to resume.")


def kept_passages(spec: RunSpec) -> int:
    """Passages a partial (interrupted or cancelled) entry of `spec` holds, 0 when none."""
    from deffcore.extraction import cache

    key = spec.key()
    for info in cache.list_runs():
        if info.get("key") == key and info.get("status") == "partial":
            return int(info.get("done_passages") or 0)
    return 0
