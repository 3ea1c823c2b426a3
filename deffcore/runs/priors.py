"""What the packaged models' first run costs on a class of machine, before this machine has
run anything (SPEC 14, ETA), and how the first extraction batch refines it.

    machine_class("cpu")                       -> "cpu-2"  (cores this process may use)
    prior("smollm2-135m", "cpu", "float32")    -> RunPrior | None
    eta(expected, elapsed_s=..., done=..., total=..., extract_s=...) -> seconds

`deffcore/data/run_priors.json` holds, per machine class ("cpu-<cores>", "cuda-<GPU name>")
and packaged model, one measured first run of the app's default settings
(`benchmarks/bench_run_prior.py` measures and writes it): the seconds of reading the data, of
assembling the packaged file, of loading the model, of preparing (cutting windows up to the
first batch), the extraction rate (tokens per second over the batches) and the seconds of the
numbers after the last batch at its N. A CPU class this file lacks is priced from the nearest
CPU class measured, its rate scaled by the ratio of cores (the load and the reading are not
scaled); a packaged model the class lacks is priced from another packaged model's row, its
rate scaled by block parameters (its load and numbers by the inverse); a GPU this file lacks
has no prior. A CPU prior is priced for the load now: its rate x (the CPU share now / the
share while it was measured), the share = cores / max(cores, the 1-minute load average, the
run's own threads included). A damaged file gives no prior, never an error.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from deffcore.core.errors import DeffError
from deffcore.core.files import DATA_DIR

PRIOR_FILE = DATA_DIR / "run_priors.json"
#: The one-off stages a prior prices (the job's stage names, in run order) -> its field.
ONE_OFF = {
    "checking data": "read_s",
    "assembling": "assemble_s",
    "loading model": "load_s",
    "preparing": "prepare_s",
}


@dataclass(frozen=True)
class RunPrior:
    """One measured first run of a packaged model on a machine class (module docstring)."""

    model: str
    machine: str  # the class it was measured on
    read_s: float  # "checking data": reading the dataset before the load
    assemble_s: float  # joining a packaged GGUF's parts (0 when it ships whole)
    load_s: float
    prepare_s: float  # from the end of the load to the first extraction batch's start
    tokens_per_s: float
    numbers_s: float  # after the last batch, at N = n
    n: int
    max_tokens: int
    scaled: float = 1.0  # the rate's factor from what was measured to this machine and model
    scaled_from: str = ""  # the packaged model measured, when it is not `model`
    measured_load: float | None = None  # the 1-minute load average while it was measured
    load_factor: float = 1.0  # this machine's CPU share now / the share when measured

    def describe(self) -> str:
        how = "" if self.scaled == 1.0 else f", its rate scaled x{self.scaled:.2g}"
        if self.scaled_from:
            how += f" from {self.scaled_from}'s by block parameters"
        elif self.scaled != 1.0:
            how += " by cores"
        if abs(self.load_factor - 1.0) > 0.05 and self.measured_load is not None:
            how += f"; x{self.load_factor:.2g} for the load now against {self.measured_load:.1f}"
        return (
            f"prior for {self.model} on a {self.machine} machine "
            f"({self.tokens_per_s:,.0f} tokens/s{how})"
        )


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def machine_class(device: str) -> str:
    """The machine's class: "cpu-<cores>" for a CPU run (the cores this process may use),
    "cuda-<GPU name>" on a GPU (lowercase, spaces as dashes), "<device>" otherwise."""
    if device.startswith("cuda"):
        try:
            import torch

            index = torch.device(device).index or 0
            name = torch.cuda.get_device_name(index)
        except Exception:  # no CUDA here: a class no prior is measured for
            return "cuda"
        return "cuda-" + re.sub(r"\s+", "-", name.strip().lower())
    if device == "cpu":
        return f"cpu-{_cores()}"
    return device


@lru_cache(maxsize=1)
def _table() -> dict[str, dict[str, dict[str, Any]]]:
    try:
        data = json.loads(PRIOR_FILE.read_text())
        machines = data["machines"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return machines if isinstance(machines, dict) else {}


_FIELDS = (*ONE_OFF.values(), "tokens_per_s", "numbers_s")


def _row(model: str, machine: str, row: Any, scaled: float) -> RunPrior | None:
    if not isinstance(row, dict):
        return None
    try:
        values = {k: float(row[k]) for k in _FIELDS}
        n, max_tokens = int(row["n"]), int(row["max_tokens"])
    except (KeyError, TypeError, ValueError):
        return None
    if not all(math.isfinite(v) and v >= 0 for v in values.values()):
        return None
    if values["tokens_per_s"] <= 0 or n <= 0 or max_tokens <= 0:
        return None
    values["tokens_per_s"] *= scaled
    load = row.get("load_avg")
    load = float(load) if isinstance(load, int | float) and math.isfinite(load) else None
    return RunPrior(model, machine, **values, n=n, max_tokens=max_tokens, scaled=scaled,
                    measured_load=load if load is not None and load >= 0 else None)  # fmt: skip


def load_average() -> float | None:
    """The 1-minute load average, None where the system has none."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def cpu_share(load: float, cores: int) -> float:
    """The share of `cores` a CPU-bound run gets while `load` threads want to run (the
    1-minute load average, the run's own included): cores / max(cores, load)."""
    return cores / max(float(cores), load)


def _at_load(found: RunPrior, cores: int) -> RunPrior:
    """`found` priced for the load now: its seconds / f and its rate x f, with f = the CPU
    share now (the load average + the run's own `cores` threads) / the share it was measured
    at (SPEC 14, ETA). Unchanged when either load is unknown."""
    from dataclasses import replace

    now = load_average()
    if found.measured_load is None or now is None:
        return found
    f = cpu_share(now + cores, cores) / cpu_share(found.measured_load, cores)
    if f == 1.0:
        return found
    seconds = {k: getattr(found, k) / f for k in (*ONE_OFF.values(), "numbers_s")}
    return replace(found, **seconds, tokens_per_s=found.tokens_per_s * f, load_factor=f)


def prior(model: str, device: str, dtype: str = "float32") -> RunPrior | None:
    """The measured first run of `model` for this machine's class (module docstring), else
    another packaged model's on this class scaled by block parameters, None when the table
    has none (another dtype, an unmeasured GPU, a model that is not packaged)."""
    found = _measured(model, device, dtype) or _by_block_params(model, device, dtype)
    if found is None or not found.machine.startswith("cpu-"):
        return found
    return _at_load(found, _cores())


def _by_block_params(model: str, device: str, dtype: str) -> RunPrior | None:
    """A packaged model this class lacks: another packaged model's prior, its rate x (its
    block parameters / this model's), its load and numbers / that factor (the planner's rule
    for a calibration of another model)."""
    from dataclasses import replace

    from deffcore.inputs.model import PACKAGED_MODELS, model_size

    if model not in PACKAGED_MODELS:
        return None
    try:
        size = model_size(model)
    except DeffError:  # its file missing or unreadable: no prior, never an error
        return None
    for other in PACKAGED_MODELS:
        ref = _measured(other, device, dtype) if other != model else None
        try:
            ref_size = model_size(other) if ref is not None else None
        except DeffError:
            continue
        if ref is None or ref_size is None or size is None or not size.block_params:
            continue
        factor = ref_size.block_params / size.block_params
        return replace(
            ref,
            model=model,
            tokens_per_s=ref.tokens_per_s * factor,
            load_s=ref.load_s / factor,
            numbers_s=ref.numbers_s / factor,
            scaled=ref.scaled * factor,
            scaled_from=other,
        )
    return None


def _measured(model: str, device: str, dtype: str) -> RunPrior | None:
    table, here = _table(), machine_class(device)
    found = table.get(here, {}).get(model)
    if isinstance(found, dict) and found.get("dtype", "float32") == dtype:
        return _row(model, here, found, 1.0)
    if not here.startswith("cpu-"):
        return None
    cores = int(here.split("-", 1)[1])
    measured = []
    for name, rows in table.items():
        row = rows.get(model) if isinstance(rows, dict) else None
        usable = isinstance(row, dict) and row.get("dtype", "float32") == dtype
        if usable and name.startswith("cpu-") and name[4:].isdigit():
            measured.append((abs(int(name[4:]) - cores), int(name[4:]), name, row))
    if not measured:
        return None
    _, ref, name, row = min(measured)
    return _row(model, name, row, cores / ref)


def stage_seconds(stage: str, model: str, device: str | None = None) -> float | None:
    """The prior's seconds of a one-off stage ("assembling", "loading model", ...) on `device`
    (None: this machine's default device), None when there is no prior or it does not price
    that stage."""
    if device is None:
        from deffcore.inputs.model import default_device

        device = default_device()
    found = prior(model, device)
    if found is None or stage not in ONE_OFF:
        return None
    return getattr(found, ONE_OFF[stage]) or None


@dataclass(frozen=True)
class Expected:
    """A run's expected seconds by part (SPEC 14, ETA): the stages before the first extraction
    batch is reported (`ONE_OFF`, in run order; "preparing" holds the first batch), the
    extraction of the passages after it at `rate` passages per second, the numbers after
    the last batch."""

    stages: tuple[tuple[str, float], ...]
    extract_s: float
    numbers_s: float
    rate: float  # passages per second expected

    @property
    def total_s(self) -> float:
        return sum(s for _, s in self.stages) + self.extract_s + self.numbers_s

    def stage_s(self, stage: str) -> float | None:
        """The expected seconds of `stage`, None when it is not expected."""
        return dict(self.stages).get(stage)

    def to_dict(self) -> dict[str, Any]:
        return {"stages": dict(self.stages), "extract_s": self.extract_s,
                "numbers_s": self.numbers_s, "rate": self.rate,
                "total_s": self.total_s}  # fmt: skip


def expected_run(found: RunPrior, n: int, max_tokens: int, batch: int, *,
                 load_s: float | None = None, cached_model: bool = False,
                 assembled: bool = False) -> Expected:  # fmt: skip
    """A run of N passages x max_tokens in batches of `batch` priced by a prior: the one-off
    stages as measured (no load when the model is already in memory, no assembly once the
    packaged file is whole; `load_s` replaces the prior's load, e.g. what this machine last
    took), "preparing" = the prior's preparing + the first batch, extraction = the other
    passages x max_tokens / the prior's tokens per second, the numbers scaled by N / its N."""
    load = 0.0 if cached_model else (found.load_s if load_s is None else load_s)
    rate = found.tokens_per_s / max_tokens
    first = min(max(batch, 1), n)
    stages = (
        ("checking data", found.read_s),
        ("assembling", 0.0 if cached_model or assembled else found.assemble_s),
        ("loading model", load),
        ("preparing", found.prepare_s + first / rate),
    )
    return Expected(
        stages=tuple((k, v) for k, v in stages if v > 0),
        extract_s=(n - first) / rate,
        numbers_s=found.numbers_s * n / found.n,
        rate=rate,
    )


def eta(
    expected: Expected,
    *,
    stage: str,
    stage_elapsed_s: float,
    done: int,
    total: int,
    seen: tuple[int, float] | None = None,
) -> float:
    """Seconds left of a run (SPEC 14, ETA). Before its first batch is reported: the rest of the
    stage under way (at least 0), the stages after it, the extraction and the numbers, as
    expected. From then on `seen` = (passages, seconds) extracted so far gives the rate seen,
    which replaces the expected one: the passages left at the rate seen, plus the numbers
    scaled by expected rate / rate seen (a machine slower at the forward is slower at the
    numbers too)."""
    if seen is not None and seen[0] > 0 and seen[1] > 0:
        rate = seen[0] / seen[1]
        return max(total - done, 0) / rate + expected.numbers_s * expected.rate / rate
    names = [k for k, _ in expected.stages]
    left = expected.extract_s + expected.numbers_s
    if stage in names:
        at = names.index(stage)
        left += max(expected.stages[at][1] - stage_elapsed_s, 0.0)
        left += sum(s for _, s in expected.stages[at + 1 :])
    elif stage == "queued":
        left += sum(s for _, s in expected.stages)
    return left
