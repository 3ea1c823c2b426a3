"""How long a run's one-off stages take on this machine, so progress shows from the first second.

    estimate("loading model", "gemma3-270m") -> seconds | None
    record("loading model", "gemma3-270m", 48.8)     # what this machine just took

A run's first stages move no passage counter: assembling a packaged model's file (Gemma-3's
GGUF parts are joined once into the cache folder), then loading the model (and cutting its
token windows). Their estimate is the time this machine last took for the same stage and model
(`stage_times.json` in the cache folder: plain numbers, written atomically; a damaged or
foreign file is ignored, never trusted), else the packaged model's prior for this class of
machine (`deffcore.runs.priors`, SPEC 14, ETA), else `PRIORS` (measured on the project's
reference machine, a busy 2-core CPU; BENCHMARKS.md), else none (the display then shows the elapsed
time alone). An estimate is an expectation, not a promise: the bar stops short of full.
"""

from __future__ import annotations

import json
import math
import threading

from deffcore.core.files import cache_dir
from deffcore.inputs.model import Kind, ModelSpec

STAGE_FILE = "stage_times.json"
#: Seconds per (stage, model) on the reference machine (2 cores at load 7-8; BENCHMARKS.md).
PRIORS: dict[tuple[str, str], float] = {
    ("loading model", "smollm2-135m"): 21.0,
    ("loading model", "gemma3-270m"): 49.0,
    ("assembling", "gemma3-270m"): 5.0,
}
#: A tiny demo model loads in about this long.
TINY_PRIOR_S = 2.0
#: The finest time kept (seconds): a stage quicker than this is kept as this long.
RESOLUTION_S = 0.001
#: How far a stage's bar goes on its estimate alone (it never claims to be done).
MAX_FRACTION = 0.95
_LOCK = threading.Lock()


def read_json(name: str) -> dict:
    """The cache folder's plain-JSON file `name` as a dict ({} when absent or damaged)."""
    try:
        data = json.loads((cache_dir() / name).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_json(name: str, data: dict) -> None:
    """Write the cache folder's file `name` atomically, best effort: a read-only cache loses
    nothing else."""
    from deffcore.core.errors import DeffError
    from deffcore.core.files import atomic_write

    path = cache_dir() / name
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, json.dumps(data, sort_keys=True).encode())
    except (OSError, DeffError):
        pass


def _read() -> dict[str, float]:
    return {
        str(k): float(v)
        for k, v in read_json(STAGE_FILE).items()
        if isinstance(v, int | float) and math.isfinite(v) and v > 0
    }


def _name(stage: str, model: str) -> str:
    return f"{stage}|{model}"


def estimate(stage: str, model: str) -> float | None:
    """Seconds the stage is expected to take for `model` (module docstring), None if unknown."""
    found = _read().get(_name(stage, model))
    if found is not None:
        return found
    from deffcore.runs.priors import stage_seconds

    measured = stage_seconds(stage, model)
    if measured is not None:
        return measured
    if (stage, model) in PRIORS:
        return PRIORS[(stage, model)]
    if stage == "loading model" and ModelSpec.stored(model).kind is Kind.TINY:
        return TINY_PRIOR_S
    return None


def record(stage: str, model: str, seconds: float) -> None:
    """Keep what this machine took (best effort: a read-only cache loses nothing else)."""
    if not (math.isfinite(seconds) and seconds > 0):
        return
    with _LOCK:
        times = _read()
        # kept to the millisecond, and never as 0 (which `_read` ignores as no estimate): a tiny
        # model moves to the CPU in well under a millisecond on a fast machine
        times[_name(stage, model)] = max(RESOLUTION_S, round(float(seconds), 3))
        write_json(STAGE_FILE, times)


def fraction(elapsed_s: float, estimate_s: float | None) -> float:
    """A stage's bar from its elapsed time and estimate, capped at MAX_FRACTION (0 without one)."""
    if not estimate_s or estimate_s <= 0:
        return 0.0
    return min(MAX_FRACTION, max(0.0, elapsed_s / estimate_s))
