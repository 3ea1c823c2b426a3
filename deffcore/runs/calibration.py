"""This machine's measured throughput for one model: a few small batches, cached.

    cal = calibration.cached(key)  or  calibration.calibrate(model, device=..., ...)
    cal.tokens_per_s, cal.load_s, cal.similarity_rate

`calibrate` loads the model (timed: `load_s`), extracts one warm-up batch and then
CAL_BATCHES timed batches of `batch` windows of `max_tokens` token ids through the real
extraction (`extract.extract_pooled`, hooks and pooling included): `tokens_per_s`. A forward's
cost does not depend on which ids it sees, so the ids are drawn at random from the bottom of the
vocabulary (no dataset is read). It also times one `similarity_matrix` pass on random states of
the model's L and d at SIM_PASSAGES passages: `similarity_rate`, multiply-adds per second of
the cheaper route (`similarity.route_costs`), from which the planner prices bootstraps; and
one live estimate (`anytime.estimate`, every pooling control with its trust) at each of
EST_PASSAGES: `estimate_fixed_s + estimate_s_per_madd x route cost` fits the two (at small N
the fixed part, Python and per-call work, is most of an estimate's time).

Cached as JSON under `<cache>/calibration/<hash>.json`, keyed by everything that changes the
rate: the model's weights id, device, dtype, max_tokens, batch size, torch's thread count and
version, the code version, the host name and CPU count. A calibration older than MAX_AGE_S is
stale (the machine's load and software change); `calibrate` always measures afresh. Measured
under load, it prices runs under that load: `load_average` records it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deffcore.core.errors import DeffError

FORMAT = 2  # 2: estimate timings
#: Timed batches after the warm-up batch.
CAL_BATCHES = 2
#: Passages of the timed similarity pass.
SIM_PASSAGES = 512
#: Passages of the two timed live estimates.
EST_PASSAGES = (64, 256)
#: A calibration older than this is measured again (seconds).
MAX_AGE_S = 7 * 24 * 3600.0
_FOLDER = "calibration"


@dataclass(frozen=True)
class Calibration:
    """One measured calibration (module docstring); `key` is what it was measured for."""

    key: dict[str, Any]
    tokens_per_s: float
    load_s: float
    similarity_rate: float
    measured_at: float  # seconds since the epoch
    seconds: float  # how long the calibration took
    load_average: float | None = None
    estimate_fixed_s: float = 0.0  # one live estimate: fixed seconds ...
    estimate_s_per_madd: float = 0.0  # ... plus seconds per multiply-add of one pass

    def estimate_seconds(self, madds: float) -> float:
        """Seconds of one live estimate whose similarity pass costs `madds` multiply-adds."""
        return self.estimate_fixed_s + self.estimate_s_per_madd * madds

    def age_s(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.measured_at

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(self.measured_at))
        load = "" if self.load_average is None else f", load average {self.load_average:.1f}"
        return (
            f"{self.tokens_per_s:,.0f} tokens/s measured {when} on {self.key['device']} "
            f"({self.key['model']}, {self.key['dtype']}, batch {self.key['batch']} x "
            f"{self.key['max_tokens']} tokens{load})"
        )


def calibration_key(
    model: str,
    *,
    revision: str | None,
    device: str,
    dtype: str,
    max_tokens: int,
    batch: int,
) -> dict[str, Any]:
    """Everything that changes a measured rate (module docstring), as plain values."""
    import torch

    from deffcore.core.constants import CODE_VERSION
    from deffcore.inputs.model import model_identity

    return {
        "format": FORMAT,
        "model": model,
        "weights_id": model_identity(model, revision)["weights_id"],
        "device": device,
        "dtype": dtype,
        "max_tokens": int(max_tokens),
        "batch": int(batch),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "code_version": CODE_VERSION,
        "host": platform.node(),
        "cpus": os.cpu_count(),
    }


def _folder() -> Path:
    from deffcore.core.files import cache_dir

    folder = cache_dir() / _FOLDER
    if folder.is_symlink():
        raise DeffError(f"{folder} is a link; calibrations are kept only in a real folder.")
    return folder


def _path(key: dict[str, Any]) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return _folder() / f"{digest}.json"


def cached(key: dict[str, Any], *, max_age_s: float = MAX_AGE_S) -> Calibration | None:
    """The stored calibration for exactly `key`, None when absent, unreadable or stale."""
    path = _path(key)
    try:
        data = json.loads(path.read_text())
        cal = Calibration(**data)
    except (OSError, ValueError, TypeError):
        return None
    if cal.key != key or not cal.tokens_per_s > 0 or cal.age_s() > max_age_s:
        return None
    return cal


def any_cached(device: str, dtype: str, *, max_age_s: float = MAX_AGE_S) -> list[Calibration]:
    """Every fresh calibration of this host's `device` and `dtype` (for scaling to a model
    that has none), newest first."""
    folder = _folder()
    if not folder.is_dir():
        return []
    out = []
    for path in folder.glob("*.json"):
        try:
            cal = Calibration(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        k = cal.key
        if (
            k.get("device") == device
            and k.get("dtype") == dtype
            and k.get("host") == platform.node()
            and cal.age_s() <= max_age_s
            and cal.tokens_per_s > 0
        ):
            out.append(cal)
    return sorted(out, key=lambda c: -c.measured_at)


def _store(cal: Calibration) -> None:
    from deffcore.core.files import replace_file

    _folder().mkdir(parents=True, exist_ok=True)
    replace_file(_path(cal.key), json.dumps(asdict(cal), indent=2).encode())


def calibrate(
    model: str,
    *,
    revision: str | None = None,
    device: str = "cpu",
    dtype: str = "float32",
    max_tokens: int = 128,
    batch: int = 32,
    loaded: Any = None,
) -> Calibration:
    """Measure and store this machine's rates for `model` (module docstring)."""
    from deffcore.inputs.model import MODELS, lease_or_given

    key = calibration_key(
        model, revision=revision, device=device, dtype=dtype, max_tokens=max_tokens, batch=batch
    )
    began, loads = time.perf_counter(), MODELS.loads
    with lease_or_given(loaded, model, revision=revision, device=device, dtype=dtype) as loaded:
        load_s = time.perf_counter() - began
        return _measure_rates(key, loaded, model, max_tokens, batch, began, load_s, loads)


def _measure_rates(key: dict[str, Any], loaded: Any, model: str, max_tokens: int, batch: int,
                   began: float, load_s: float, loads: int) -> Calibration:  # fmt: skip
    """The timed batches, similarity pass and estimates of `calibrate` on a loaded model.

    A model that was already loaded (the process's cache served it) was not timed here: its
    load time is this machine's last one (`stage_times`), else the measured lease (~0 s)."""
    from deffcore.extraction.forward import extract_pooled
    from deffcore.inputs.model import MODELS
    from deffcore.measures.similarity import route_costs, similarity_matrix
    from deffcore.runs.priors import load_average
    from deffcore.runs.stage_times import estimate

    if MODELS.loads == loads:  # not loaded here: the time this machine last took
        load_s = estimate("loading model", model) or load_s
    vocab = int(getattr(loaded.tokenizer, "vocab_size", 0) or 256)
    rng = np.random.default_rng(0)
    ids = rng.integers(3, max(4, min(vocab, 250)), size=((1 + CAL_BATCHES) * batch, max_tokens))
    rows = [list(map(int, r)) for r in ids]
    extract_pooled(loaded, None, token_ids=rows[:batch], max_tokens=max_tokens, batch_size=batch)
    start = time.perf_counter()
    extract_pooled(loaded, None, token_ids=rows[batch:], max_tokens=max_tokens, batch_size=batch)
    tokens_per_s = CAL_BATCHES * batch * max_tokens / (time.perf_counter() - start)
    x = rng.standard_normal((loaded.layers, SIM_PASSAGES, loaded.d_model), dtype=np.float32)
    x = np.cumsum(x, axis=0)  # a random walk over layers, like a residual stream
    start = time.perf_counter()
    similarity_matrix(x)
    sim_s = time.perf_counter() - start
    rate = min(route_costs(SIM_PASSAGES, loaded.d_model, loaded.layers).values()) / sim_s
    fixed, per = _time_estimates(x, loaded.layers, loaded.d_model)
    cal = Calibration(
        key=key,
        tokens_per_s=float(tokens_per_s),
        load_s=float(load_s),
        similarity_rate=float(rate),
        measured_at=time.time(),
        seconds=time.perf_counter() - began,
        load_average=load_average(),
        estimate_fixed_s=fixed,
        estimate_s_per_madd=per,
    )
    _store(cal)
    return cal


def _time_estimates(walk: np.ndarray, layers: int, d: int) -> tuple[float, float]:
    """(fixed seconds, seconds per multiply-add) of a live estimate, from one at each of
    EST_PASSAGES passages of `walk` (L, >= max(EST_PASSAGES), d) random states."""
    from deffcore.core.constants import EXTRACTED_POOLINGS
    from deffcore.extraction.forward import PooledStates
    from deffcore.measures.similarity import route_costs
    from deffcore.statistics.anytime import estimate

    points = []
    for n in EST_PASSAGES:
        x = np.concatenate([walk[:1, :n], walk[:, :n]])  # (L+1, n, d): an h_0 in front
        pooled = PooledStates(
            pooled={p: x for p in EXTRACTED_POOLINGS},
            pos0_norm_ratio=np.ones(layers + 1, np.float32),
            n_dropped_short=0,
            tokens=n,
            lengths=np.ones(n, np.int64),
        )
        start = time.perf_counter()
        estimate(pooled)
        points.append((min(route_costs(n, d, layers).values()), time.perf_counter() - start))
    (w1, t1), (w2, t2) = points
    per = max(0.0, (t2 - t1) / (w2 - w1)) if w2 > w1 else 0.0
    return max(0.0, t1 - per * w1), per
