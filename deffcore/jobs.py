"""Background runs: a measurement that outlives the script run (page view) that started it.

    job_id = jobs.start(spec, device="cpu")      # checks the data first, then queues the run
    jobs.status(job_id)   -> JobStatus(stage, done, total, tokens_per_s, eta_s, state, ...)
    jobs.cancel(job_id)   # stops it before the next batch (its finished batches are kept)
    jobs.active_jobs()    # queued and running jobs, oldest first
    jobs.load_result(status.result_key) -> Measurement (read back from the cache)

A Streamlit page only draws: a run started from it goes to this process-wide registry and one
worker thread, so switching pages or reloading the browser does not stop it. The thread runs
`deffcore.measurement.measure_spec`, so the cache stays the state of record: a job's result is
its cache entry (`result_key`), read back by key; an interrupted or cancelled run leaves a
*partial* entry (never a complete-looking one) that the same spec resumes.

Decisions:
- One worker thread, jobs in arrival order (`queued` until it is their turn): runs share the
  machine's cores, and two extractions at once would each run at half speed anyway.
- Starting a spec that is already queued or running returns that job (two tabs, one run).
- `start` checks what can be checked cheaply BEFORE anything loads (`check`): the model path,
  the dataset (opened and sampled: an empty, unreadable or too small file fails here) and, for
  token windows, the window count (`deffcore.tokens.count_windows`). Errors name the
  user's own file when `names` maps a saved path to it (uploads are stored under a hash name).
- Rates: passages per second over the extraction batches seen so far (the model load is not in
  it); tokens per second = that rate x max_tokens, exact for token windows (every window is
  max_tokens long) and an upper bound for documents (`tokens_exact` False); once done, the
  rate x the run's exact mean tokens per passage. ETA = remaining passages / rate.
- This module never imports streamlit.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deffcore.cache import RunSpec
from deffcore.constants import WINDOW_MODES
from deffcore.errors import DeffError, RunCancelled, TooFewPassagesError, UnknownModelError

FINISHED = ("done", "failed", "cancelled")
#: Finished jobs kept for `status` (a session that reloads still finds its job).
KEEP_FINISHED = 200


@dataclass(frozen=True)
class JobStatus:
    """A snapshot of one job; every field is plain data (safe to read from any thread)."""

    job_id: str
    spec: RunSpec
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

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    def describe(self) -> str:
        """One line for a progress display: stage, passages, tokens/s, ETA."""
        if self.state == "queued":
            return f"queued: waiting for {self.ahead} run(s) ahead of it"
        if self.state == "done":
            how = "served from the cache" if self.from_cache else f"in {self.elapsed_s:.0f} s"
            rate = f" · {self.tokens_per_s:,.0f} tokens/s" if self.tokens_per_s else ""
            return f"done {how}: {self.done:,} passages{rate}"
        if self.state in ("failed", "cancelled"):
            return self.state
        if self.stage == "loading model":
            what = (
                "loading model and cutting windows"
                if self.spec.passages in WINDOW_MODES
                else ("loading model")
            )
            return f"{what}… {self.stage_elapsed_s:.0f} s"
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
        return " · ".join(parts)


@dataclass
class _Job:
    job_id: str
    spec: RunSpec
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


_LOCK = threading.Lock()
_JOBS: dict[str, _Job] = {}
_QUEUE: deque[str] = deque()
_WAKE = threading.Condition(_LOCK)
_SEQ = itertools.count()
_WORKER: threading.Thread | None = None


# ---------------------------------------------------------------------------------------------
# Checks before anything loads
# ---------------------------------------------------------------------------------------------


def display(text: str, names: dict[str, str] | None) -> str:
    """`text` with every saved path (and its file name) replaced by the user's file name."""
    for path, shown in (names or {}).items():
        text = text.replace(path, shown).replace(Path(path).name, shown)
    return text


def plan(
    *, names: dict[str, str] | None = None, windows: int | None = None, **run: Any
) -> tuple[RunSpec, str]:
    """`deffcore.measurement.run_spec(**run)` followed by `check`: (spec, device) of a run
    whose arguments, model path and data were checked before anything loads; errors name the
    user's files (`names`). `windows`: the window count when the caller already knows it."""
    from deffcore.measurement import run_spec

    try:
        spec, device = run_spec(**run)
    except DeffError as err:
        raise type(err)(display(str(err), names)) from None
    check(spec, names=names, windows=windows)
    return spec, device


def check(
    spec: RunSpec, *, names: dict[str, str] | None = None, windows: int | None = None
) -> None:
    """Raise the DeffError a run of `spec` would hit in its data or model path, before any
    model loads (see the module doc). Hub datasets are not opened here (network): the worker
    opens them first, still before the model. `windows` skips counting them again."""
    try:
        _check(spec, windows)
    except DeffError as err:
        raise type(err)(display(str(err), names)) from None


def _check(spec: RunSpec, windows: int | None = None) -> None:
    from deffcore import serving
    from deffcore.texts import all_documents, load_passages

    inner = spec.model
    if inner.startswith("random:"):
        inner = inner.removeprefix("random:").rpartition(":")[0]
    if serving.looks_like_path(inner):
        path = Path(inner).expanduser()
        if path.suffix == ".gguf" and not path.is_file():
            raise UnknownModelError(f"The GGUF file {inner} does not exist.")
        if path.suffix != ".gguf" and not path.is_dir() and inner.startswith((".", "/", "~")):
            raise UnknownModelError(f"The model folder {inner} does not exist.")
    if spec.dataset.startswith("hf:"):
        return
    if spec.passages in WINDOW_MODES:
        all_documents(spec.dataset, spec.n, seed=spec.seed)
        available = windows if windows is not None else _count_windows(spec)
        if available is not None and spec.n > available:
            raise TooFewPassagesError(
                f"{spec.dataset} yields {available:,} windows of {spec.max_tokens} tokens "
                f"for {spec.model}, fewer than N = {spec.n:,}; ask for N <= {available:,}."
            )
    else:
        load_passages(spec.dataset, spec.n, seed=spec.seed)


def _count_windows(spec: RunSpec) -> int | None:
    """The window count of `spec`'s data (tokenizer only); None when the tokenizer cannot load
    here (the worker will say why). A DeffError (bad data, bad option) is the check's answer."""
    from deffcore.tokens import count_windows

    try:
        return int(
            count_windows(
                spec.model,
                spec.dataset,
                spec.max_tokens,
                spec.bos,
                spec.revision,
                mode=spec.passages,
            )
        )
    except DeffError:
        raise  # not swallowed by the line below: it is the user's error, said before the load
    except Exception:
        return None


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
        _JOBS[job.job_id] = job
        _QUEUE.append(job.job_id)
        _forget_old()
        _ensure_worker()
        _WAKE.notify_all()
        return job.job_id


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
    exact = job.spec.passages in WINDOW_MODES
    tps = job.final_tokens_per_s
    if tps is None and rate is not None and job.state == "running":
        tps = rate * job.spec.max_tokens
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
        total=job.total or job.spec.n,
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
    )


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
            _set_stage(job, "checking data")
        _run(job)


def _set_stage(job: _Job, stage: str) -> None:
    if stage != job.stage:
        job.stage, job.stage_started = stage, time.monotonic()


def _progress(job: _Job):
    """measure's progress(done, total, stage) -> the job's fields."""

    def progress(done: int, total: int, stage: str) -> None:
        now = time.monotonic()
        with _LOCK:
            job.total = int(total)
            if stage.startswith("loading"):
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

    return progress


def _run(job: _Job) -> None:
    from deffcore import measurement

    state, error = "failed", None
    try:
        m = measurement.measure_spec(
            job.spec,
            metric=job.metric,
            device=job.device,
            batch_size=job.batch_size,
            progress=_progress(job),
            should_stop=job.cancel.is_set,
        )
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
    with _LOCK:
        job.state, job.error, job.ended = state, error, time.monotonic()
        _set_stage(job, state)
        _WAKE.notify_all()


# ---------------------------------------------------------------------------------------------
# Results and partial entries (the cache is the state of record)
# ---------------------------------------------------------------------------------------------


def load_result(key: str) -> Any:
    """The `Measurement` of the complete cache entry `key` (no model runs)."""
    from deffcore import cache
    from deffcore.measurement import Measurement

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
    from deffcore import cache

    for info in cache.list_runs():
        if info.get("key") == key and info.get("status") == "partial" and info.get("spec"):
            return RunSpec(**info["spec"])
    raise cache.UnknownRunError(f"No interrupted run with key {key!r} to resume.")


def kept_passages(spec: RunSpec) -> int:
    """Passages a partial (interrupted or cancelled) entry of `spec` holds, 0 when none."""
    from deffcore import cache

    key = spec.key()
    for info in cache.list_runs():
        if info.get("key") == key and info.get("status") == "partial":
            return int(info.get("done_passages") or 0)
    return 0
