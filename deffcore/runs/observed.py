"""What this machine's finished runs took, so a plan has a time after the first run (stage:
runs).

    observed.record_run(spec, device, tokens_per_s=..., numbers_s=...)   # jobs, when a run lands
    observed.latest(model, device, dtype) -> ObservedRun | None           # the planner

A run that extracted here (not one served from the cache) leaves its extraction rate (tokens
per second over its batches, the model load not in it) and the seconds its numbers took after
the last batch, with its N, under (model, device, dtype) in `observed_runs.json` in the cache
folder: plain numbers, written atomically, the newest run replacing the older; a damaged or
foreign file is ignored. The planner prices a run without a calibration from it: extraction =
tokens / rate, numbers = the observed seconds x N / the observed N, the load from
`stage_times`. A calibration (`deffcore.runs.calibration`, a measured short run) is preferred when
there is one.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from deffcore.runs.stage_times import read_json, write_json

OBSERVED_FILE = "observed_runs.json"
JOBS_LOCK = threading.Lock()


@dataclass(frozen=True)
class ObservedRun:
    """One finished run's rates (module docstring)."""

    model: str
    device: str
    dtype: str
    tokens_per_s: float
    numbers_s: float
    n: int
    max_tokens: int
    measured_at: float  # seconds since the epoch

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.measured_at))
        return (
            f"from this machine's run of {self.model} at {when} ({self.tokens_per_s:,.0f} "
            f"tokens/s on {self.device}, N={self.n:,})"
        )


def _name(model: str, device: str, dtype: str) -> str:
    return f"{model}|{device}|{dtype}"


def _read() -> dict[str, ObservedRun]:
    found = {}
    for name, row in read_json(OBSERVED_FILE).items():
        try:
            run = ObservedRun(**row)
        except TypeError:
            continue
        numbers = (run.tokens_per_s, run.numbers_s, run.n, run.max_tokens, run.measured_at)
        if (
            isinstance(name, str)
            and all(isinstance(v, int | float) and math.isfinite(v) for v in numbers)
            and run.tokens_per_s > 0
            and run.numbers_s >= 0
            and run.n > 0
        ):
            found[name] = run
    return found


def record_run(
    spec: Any, device: str, *, tokens_per_s: float, numbers_s: float, n: int | None = None
) -> None:
    """Keep what a finished run took (best effort: a read-only cache loses nothing else)."""
    if not (math.isfinite(tokens_per_s) and tokens_per_s > 0 and math.isfinite(numbers_s)):
        return
    run = ObservedRun(
        model=spec.model,
        device=device,
        dtype=spec.dtype,
        tokens_per_s=float(tokens_per_s),
        numbers_s=max(0.0, float(numbers_s)),
        n=int(n or spec.n),
        max_tokens=int(spec.max_tokens),
        measured_at=time.time(),
    )
    with JOBS_LOCK:
        runs = {k: asdict(v) for k, v in _read().items()}
        runs[_name(run.model, device, run.dtype)] = asdict(run)
        write_json(OBSERVED_FILE, runs)


def latest(model: str, device: str, dtype: str) -> ObservedRun | None:
    """The newest finished run of `model` on `device` in `dtype` here, None when there is none."""
    return _read().get(_name(model, device, dtype))


def on_device(device: str, dtype: str) -> list[ObservedRun]:
    """Every model's newest finished run on `device` in `dtype`, newest first."""
    runs = [r for r in _read().values() if r.device == device and r.dtype == dtype]
    return sorted(runs, key=lambda r: -r.measured_at)
