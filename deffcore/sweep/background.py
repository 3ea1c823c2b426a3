"""Background sweeps (the Models page): a sweep running in a thread of the server process."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from deffcore.sweep.cells import Cell, SweepError, _check_interventions, dedupe, one_sentence
from deffcore.sweep.runner import run_sweep

_JOBS: dict[str, SweepJob] = {}
_JOBS_LOCK = threading.Lock()


@dataclass
class SweepJob:
    """A sweep running in a background thread; `rows` fill in as cells land.

    state: "running", "done" (the sweep ran, some cells may have failed) or "failed" (the sweep
    itself could not run: `error` says why). Read `snapshot()` from any thread.
    """

    job_id: str
    total: int
    state: str = "running"
    error: str | None = None
    engine: str | None = None
    address: str | None = None
    rows: list[dict[str, Any]] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    finished: float | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "job_id": self.job_id,
                "state": self.state,
                "error": self.error,
                "engine": self.engine,
                "address": self.address,
                "total": self.total,
                "landed": len(self.rows),
                "rows": [dict(r) for r in self.rows],
                "elapsed_s": (self.finished or time.time()) - self.started,
            }


def start_sweep(cells: Sequence[Cell], **sweep_kwargs: Any) -> str:
    """Start `run_sweep(cells, **sweep_kwargs)` in a daemon thread -> job id (see `sweep_job`).

    Malformed sweeps raise here (SweepError), before the thread starts: the cells and shared
    options are checked with the same code `run_sweep` uses.
    """
    cells = dedupe(cells)
    if not cells:
        raise SweepError("The sweep has no cells.")
    _check_interventions(c.intervention for c in cells)
    job = SweepJob(job_id=uuid.uuid4().hex[:12], total=len(cells))

    def on_cell(row: dict[str, Any], landed: int, total: int) -> None:
        with job._lock:
            job.rows.append(dict(row))

    def work() -> None:
        try:
            result = run_sweep(cells, on_cell=on_cell, **sweep_kwargs)
            with job._lock:
                job.engine, job.address, job.state = result.engine, result.address, "done"
        except Exception as err:  # the thread must record every failure, never die silently
            with job._lock:
                job.state, job.error = "failed", one_sentence(err)
        finally:
            job.finished = time.time()

    with _JOBS_LOCK:
        _JOBS[job.job_id] = job
    threading.Thread(target=work, name=f"sweep-{job.job_id}", daemon=True).start()
    return job.job_id


def sweep_job(job_id: str) -> dict[str, Any] | None:
    """A background sweep's snapshot (None for an unknown id)."""
    job = _JOBS.get(job_id)
    return None if job is None else job.snapshot()
