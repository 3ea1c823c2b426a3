"""The registry's state: every background job, its queue, and the plain status a page reads.

One lock guards the jobs and the queue (`JOBS_LOCK`); a job's `JobStatus` is a snapshot of plain
data, safe to read from any thread. Rates: passages per second over the extraction batches seen
so far (the model load is not in it); tokens per second = that rate x max_tokens, exact for
token windows (every window is max_tokens long) and an upper bound for documents
(`tokens_exact` False); once done, the rate x the run's exact mean tokens per passage.
ETA = remaining passages / rate; a run with expected parts (a plan's time: a calibration, an
observed run or a packaged model's prior, SPEC 14, ETA) has an ETA from its first second,
`priors.eta`, refined by the batches seen.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from deffcore.core.constants import WINDOW_MODES
from deffcore.inputs.run_spec import RunSpec

FINISHED = ("done", "failed", "cancelled")

#: Stages that move no counter; their progress is their time against `stage_times.estimate`.
ONE_OFF_STAGES = ("assembling", "loading model")

#: Stages of a run before its first batch whose bar is their time against the run's expected
#: parts (`Job.expected`, SPEC 14, ETA): "preparing" ends with the first batch.
TIMED_STAGES = ("checking data", "preparing")

#: What each stage before the first batch does, in words.
STAGE_WORDS = {
    "checking data": "reading the dataset",
    "assembling": "assembling the packaged model file (once, kept for later runs)",
    "loading model": "loading model",
    "preparing": "preparing: tokenising the passages, then the first batch",
}

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
    #: the expected seconds of a one-off stage (`deffcore.runs.stage_times`), None when unknown
    stage_estimate_s: float | None = None
    label: str = ""  # a task's name for people
    result: Any = None  # a finished task's plain result
    #: SPEC 14: the live estimates so far (`anytime.Estimate.to_dict()`, one per mark), the
    #: stopping target asked for ("verdict", "solid" or None) and where the run stopped
    estimates: tuple[dict[str, Any], ...] = ()
    until: str | None = None
    stopped_at: int | None = None
    #: the part of the model load going on ("reading", "de-quantising", "building",
    #: "moving": `deffcore.inputs.model`), its seconds so far and its estimate
    load_part: str = ""
    load_part_elapsed_s: float = 0.0
    load_part_estimate_s: float | None = None
    #: the parts of this job's load that ended, with their seconds, in order
    load_parts: tuple[tuple[str, float], ...] = ()
    #: the run's expected seconds in all when it started (SPEC 14, ETA), None when unknown
    expected_s: float | None = None
    prep_part: str = ""

    @property
    def finished(self) -> bool:
        return self.state in FINISHED

    @property
    def stage_fraction(self) -> float:
        """The current stage's bar: passages (or a task's steps) done, or a one-off stage's
        elapsed time against its estimate (`stage_times.fraction`, never full)."""
        from deffcore.runs.stage_times import fraction

        if self.stage in ONE_OFF_STAGES or self.stage in TIMED_STAGES:
            return fraction(self.stage_elapsed_s, self.stage_estimate_s)
        if self.total and self.stage not in ("queued", "checking data"):
            return min(max(self.done / self.total, 0.0), 1.0)
        return 0.0

    def _one_off(self) -> str:
        """A stage before the first batch in words: what, how long so far, the estimate, the
        run's ETA when it is known."""
        text = STAGE_WORDS.get(self.stage, self.stage)
        if self.stage == "preparing" and self.prep_part:
            text = f"preparing: {self.prep_part}, then the first batch"
        if self.stage == "loading model" and self.load_part:
            done = [f"{part} {seconds:.0f} s" for part, seconds in self.load_parts]
            now = f"{self.load_part} {self.load_part_elapsed_s:.0f} s"
            if self.load_part_estimate_s:
                now += f" of about {self.load_part_estimate_s:.0f} s"
            text += " (" + ", ".join([*done, now]) + ")"
        text += f"… {self.stage_elapsed_s:.0f} s"
        if self.stage_estimate_s:
            left = max(self.stage_estimate_s - self.stage_elapsed_s, 0.0)
            text += f" of about {self.stage_estimate_s:.0f} s" + (
                "" if left else " (taking longer than expected)"
            )
        if self.eta_s is not None:
            text += f" · run ETA {self.eta_s:.0f} s"
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
        if self.kind == "task" and self.stage not in ONE_OFF_STAGES:
            return task_line(self)
        if self.stage != "extracting":
            return self._one_off()
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


def task_line(status: JobStatus) -> str:
    """A task's progress: its stage, steps done of total, ETA."""
    parts = [
        f"{status.stage}: {status.done:,} / {status.total:,}" if status.total else status.stage
    ]
    parts.append(f"ETA {status.eta_s:.0f} s" if status.eta_s is not None else "ETA: measuring…")
    return " · ".join(parts)


@dataclass
class SweepWork:
    """What a sweep job runs (a plan checked when it was started) and what has landed."""

    plan: Any  # deffcore.work.sweep.runner.SweepPlan
    rows: list[dict[str, Any]] = field(default_factory=list)
    engine: str | None = None
    address: str | None = None


@dataclass
class Job:
    """One background job: a run (`spec`), a sweep (`sweep`) or a task (`task`). Made under
    `JOBS_LOCK`, which its `seq` (arrival order) needs."""

    job_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    spec: RunSpec | None = None  # None for a sweep or a task
    metric: str = "cka"
    device: str | None = None
    batch_size: int | None = None
    names: dict[str, str] = field(default_factory=dict)
    seq: int = field(default_factory=lambda: next(SEQ))
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
    sweep: SweepWork | None = None
    task: Any = None  # a task's fn(progress, should_stop) -> plain result
    name: str = ""  # a task's identity (one at a time) and model (for stage times)
    model: str = ""
    result: Any = None
    estimates: list[dict[str, Any]] = field(default_factory=list)
    until: str | None = None
    stopped_at: int | None = None
    load_part: str = ""
    load_part_started: float = 0.0
    load_parts: list[tuple[str, float]] = field(default_factory=list)
    signal: float = 0.0  # the latest progress call
    extract_from: float | None = None  # the signal before the first extraction batch
    #: the run's expected seconds by part (`deffcore.runs.priors.Expected`), None when unknown
    expected: Any = None
    prep_part: str = ""  # what "preparing" is doing ("cutting token windows")


JOBS_LOCK = threading.Lock()

JOBS: dict[str, Job] = {}

QUEUE: deque[str] = deque()

WAKE = threading.Condition(JOBS_LOCK)

SEQ = itertools.count()


def passage_rate(job: Job) -> float | None:
    """Passages per second between the first and the last extraction batch seen."""
    if job.first and job.last and job.last[0] > job.first[0] and job.last[1] > job.first[1]:
        return (job.last[1] - job.first[1]) / (job.last[0] - job.first[0])
    return None


def status_of(job: Job) -> JobStatus:
    now = time.monotonic()
    end = job.ended or now
    rate = passage_rate(job)
    spec = job.spec
    exact = spec is not None and spec.passages in WINDOW_MODES
    tps = job.final_tokens_per_s
    if tps is None and rate is not None and job.state == "running" and spec is not None:
        tps = rate * spec.max_tokens
    elif tps is not None:
        exact = True
    eta = _eta(job, now, rate)
    ahead = sum(1 for j in JOBS.values() if j.state in ("queued", "running") and j.seq < job.seq)
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
        **_load_part(job, now),
        expected_s=None if job.expected is None else job.expected.total_s,
        prep_part=job.prep_part,
    )


def seen_extraction(job: Job) -> tuple[int, float] | None:
    """(passages, seconds) extracted here so far: between the first and the last batch
    reported once two are, else the first batch from the signal before it (SPEC 14, ETA)."""
    if job.first is None or job.last is None:
        return None
    if job.last[1] > job.first[1] and job.last[0] > job.first[0]:
        return job.last[1] - job.first[1], job.last[0] - job.first[0]
    if job.extract_from is not None and job.first[0] > job.extract_from:
        return job.first[1] - job.resumed, job.first[0] - job.extract_from
    return None


def _eta(job: Job, now: float, rate: float | None) -> float | None:
    """Seconds left of a running job: a run with expected parts from its start
    (`priors.eta`, refined by the batches seen), else the passages left at the rate seen."""
    if job.state != "running":
        return None
    if job.expected is not None and job.spec is not None and job.task is None:
        from deffcore.runs.priors import eta

        return eta(
            job.expected,
            stage=job.stage,
            stage_elapsed_s=now - job.stage_started,
            done=job.done,
            total=job.total or job.spec.n,
            seen=seen_extraction(job),
        )
    return (job.total - job.done) / rate if rate else None


def _stage_estimate(job: Job) -> float | None:
    if job.stage in TIMED_STAGES:
        return None if job.expected is None else job.expected.stage_s(job.stage)
    if job.stage not in ONE_OFF_STAGES:
        return None
    from deffcore.runs.stage_times import estimate

    return estimate(job.stage, model_of(job))


def _datasets(job: Job) -> tuple[str, ...]:
    if job.sweep is None:
        return (job.spec.dataset,) if job.spec is not None else ()
    specs = [spec for spec in job.sweep.plan.specs if spec is not None]  # None: a refused cell
    return tuple(dict.fromkeys(spec.dataset for spec in specs))


def forget_old() -> None:
    finished = sorted((j for j in JOBS.values() if j.state in FINISHED), key=lambda j: j.seq)
    for job in finished[: max(0, len(finished) - KEEP_FINISHED)]:
        del JOBS[job.job_id]


def model_of(job: Job) -> str:
    return job.model or (job.spec.model if job.spec is not None else "")


def _load_part(job: Job, now: float) -> dict[str, Any]:
    """The JobStatus fields of the load part going on (none outside the model load)."""
    if job.stage != "loading model" or not job.load_part:
        return {}
    from deffcore.runs.stage_times import estimate

    return {
        "load_part": job.load_part,
        "load_part_elapsed_s": now - job.load_part_started,
        "load_part_estimate_s": estimate(f"loading model: {job.load_part}", model_of(job)),
        "load_parts": tuple(job.load_parts),
    }
