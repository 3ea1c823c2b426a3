"""Running a sweep: the driver (`run_sweep`) and the worker side (`compute_cell`).

1. `plan_sweep` checks the sweep (cells, engine, pooling, resources) and the options every cell
   shares, before anything runs (a bad one refuses the sweep); then each cell's spec is built on
   its own (`deffcore.work.sweep.checks.cell_specs`): a cell whose model or dataset is refused (an
   unknown tiny model, a corrupt GGUF, a missing dataset) is planned as failed, with its
   sentence, and fails alone while the others run;
2. the cache is read first: a cell already there is "cached" (nothing is recomputed, so an
   interrupted sweep resumes where it stopped);
3. the others are computed by `compute_cell` (`deffcore.runs.measure.extract_spec`), each one Ray
   task or, with engine "serial", one after the other in this process. A worker returns the
   cell's pooled states to the driver, which stores them with `deffcore.extraction.cache.store`
   (workers need no shared disk and never write the cache);
4. a failing cell (unknown model, hub offline, out of memory, a worker that died) gets status
   "failed" with its one-sentence error while the other cells finish.

Each landed cell's numbers are computed from the cache entry the driver just wrote, exactly as
`measure` computes them from the same entry, so a sweep cell equals `measure` on its spec.

Engines. "ray" runs cells as tasks on a local Ray runtime or a cluster (`ray_runtime`).
"serial" runs cells in this process. "auto" (the default) picks "ray" when `address` is given or
when at least `AUTO_RAY_MIN_CELLS` cells need computing, "serial" otherwise: starting a local Ray
runtime costs several seconds (benchmarks/bench_sweep.py, BENCHMARKS.md "Sweeps"), more than a
handful of tiny cells take in one process. On a machine of fewer than `AUTO_RAY_MIN_CPUS` cores
"auto" stays serial: torch already uses every core there.

Resources: each Ray task asks for `cpus_per_cell` CPUs (default 1; Ray then limits the task's
torch threads to that many) and `gpus_per_cell` GPUs (default 1 when this machine has CUDA, else
0; fractions share a GPU). Tasks are not retried (`max_retries=0`): a worker killed for memory
fails its cell, and rerunning the sweep computes only what is missing.

A worker keeps the last model it loaded (one slot) so consecutive cells of the same model, e.g.
the interventions of one random seed, load it once; `release_models()` empties the slot.

Cancelling: `should_stop()` is asked before every serial cell (and by the cell's extraction
before every batch) and while waiting for Ray tasks; when it says stop, pending tasks are
cancelled and RunCancelled is raised. Cells that landed stay in the cache.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from deffcore.core.constants import POOLINGS
from deffcore.core.errors import DeffError, RunCancelled
from deffcore.measures.atlas import ATLAS_COLUMNS
from deffcore.work.sweep import checks
from deffcore.work.sweep.cells import Cell, check_cells, one_sentence
from deffcore.work.sweep.checks import SweepError
from deffcore.work.sweep.pruning_column import (
    PRUNING_KEYS,
    PruningOptions,
    cell_pruning,
    empty_columns,
    pruning_options,
    skip_reason,
)
from deffcore.work.sweep.ray_runtime import ray_runtime

#: The atlas column's keys (SPEC 16), in every row: `ATLAS_COLUMNS` and `atlas_status`.
ATLAS_KEYS: tuple[str, ...] = (*ATLAS_COLUMNS, "atlas_status")
#: The keys of one cell in `SweepResult.rows` that the CLI's `--json` prints, in order.
CELL_KEYS: tuple[str, ...] = (
    "model",
    "revision",
    "seed",
    "intervention",
    "dataset",
    "status",
    "deff_over_L",
    "gap_pct",
    "error",
    "worker",
    "seconds",
    *ATLAS_KEYS,
)
STATUSES: tuple[str, ...] = ("done", "cached", "failed")
ENGINES: tuple[str, ...] = ("auto", "ray", "serial")
#: With engine "auto", a local Ray runtime is started only for at least this many cells to
#: compute (BENCHMARKS.md "Sweeps": start-up costs more than a few tiny cells).
AUTO_RAY_MIN_CELLS = 8
#: ... and only on a machine with at least this many cores: on 2 cores torch already uses both
#: for one cell, and Ray's workers only add overhead (BENCHMARKS.md "Sweeps": 0.6x).
AUTO_RAY_MIN_CPUS = 4
OnCell = Callable[[dict[str, Any], int, int], None]
_RAY_LOCK = threading.Lock()
#: How often a Ray sweep's driver wakes while its tasks run (seconds): it asks `should_stop`
#: and Python handles signals (SIGTERM, Ctrl-C), which a wait without a timeout would block.
POLL_S = 0.5
_SLOT: dict[tuple[str, str | None, str, str], Any] = {}


def release_models() -> None:
    """Forget the model kept between cells (frees its memory once nothing else holds it)."""
    _SLOT.clear()


def _loaded(spec: Any, device: str) -> Any:
    from deffcore.inputs.model import load_model

    key = (spec.model, spec.revision, device, spec.dtype)
    if key not in _SLOT:
        _SLOT.clear()  # one slot: free the previous model before loading the next
        _SLOT[key] = load_model(spec.model, revision=spec.revision, device=device, dtype=spec.dtype)
    return _SLOT[key]


def compute_cell(
    spec: Any,
    device: str,
    batch_size: int | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """Run one cell's extraction (what a Ray task executes; also the serial engine's body).

    Returns {"pooled": PooledStates | None, "error": str | None, "worker": "<host>:<pid>",
    "seconds": float}. Errors are caught here and returned as their sentence, so a failing
    cell never takes the sweep down and no exception object needs to cross processes; only a
    cancel (`should_stop()` true before a batch: RunCancelled) stops the sweep itself.
    """
    from deffcore.extraction.atlas import atlas_taps
    from deffcore.runs.measure import extract_spec

    start = time.perf_counter()
    out: dict[str, Any] = {"pooled": None, "error": None, "worker": worker_id()}
    try:
        import torch

        try:
            loaded = _loaded(spec, device)
            taps = atlas_taps()
            out["pooled"] = extract_spec(
                spec, device=device, batch_size=batch_size, loaded=loaded, should_stop=should_stop,
                taps=taps,
            )  # fmt: skip
            out["atlas"] = _atlas_rows(taps, out["pooled"])
        except torch.OutOfMemoryError as err:
            release_models()
            raise MemoryError(f"out of memory on {device}: {str(err).splitlines()[0]}") from err
    except RunCancelled:
        raise
    except Exception as err:  # fault isolation: every failure becomes this cell's sentence
        out["error"] = one_sentence(err)
    out["seconds"] = time.perf_counter() - start
    return out


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# ---------------------------------------------------------------------------------------------
# The atlas column (SPEC 16): always on and nearly free. A computed cell takes its depth-use
# atlas in its own extraction; the worker returns the per-passage rows with the pooled states and
# the driver keeps them beside the cell's cache entry. `atlas_status` is "done" (computed with
# this cell), "stored" (read from beside a cached entry) or "missing" (a cell cached before the
# atlas existed: `python -m deffcore atlas` adds it; the columns stay empty, never a guess).


def _atlas_rows(taps: tuple, pooled: Any) -> Any:
    """The atlas rows of a cell's extraction (None when some passage did not run there)."""
    for tap in taps:
        if pooled is not None and pooled.lengths is not None and tap.n == pooled.n:
            return tap.rows(pooled.lengths)
    return None


def atlas_columns(spec: Any, pooled: Any, computed: bool) -> dict[str, Any]:
    """The atlas columns of a landed cell, from the rows kept beside its entry."""
    from deffcore.extraction.atlas import read_rows
    from deffcore.measures.atlas import columns_of

    rows = read_rows(spec)
    if rows is None or rows.n != pooled.n:
        return {**dict.fromkeys(ATLAS_COLUMNS), "atlas_status": "missing"}
    return {**columns_of(rows), "atlas_status": "done" if computed else "stored"}


@dataclass
class SweepResult:
    """Rows in cell order; `engine` actually used, `address` of the Ray cluster (None: serial)."""

    engine: str
    address: str | None
    rows: list[dict[str, Any]]
    settings: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The CLI's `--json` object: engine, address and each cell's `CELL_KEYS` (and, with
        the pruning column on, `PRUNING_KEYS`)."""
        keys = CELL_KEYS + (PRUNING_KEYS if self.settings.get("pruning") else ())
        return {
            "engine": self.engine,
            "address": self.address,
            "cells": [{k: row[k] for k in keys} for row in self.rows],
        }

    def counts(self) -> dict[str, int]:
        return {s: sum(r["status"] == s for r in self.rows) for s in STATUSES}


def _row(cell: Cell, spec: Any) -> dict[str, Any]:
    return {
        "model": cell.model,
        "revision": cell.revision,
        "seed": cell.seed,
        "intervention": cell.intervention,
        "dataset": cell.dataset,
        "status": "pending",
        "deff_over_L": None,
        "gap_pct": None,
        "error": None,
        "worker": None,
        "seconds": None,
        # beyond CELL_KEYS: for the library and the Models page
        "label": cell.label(),
        "model_spec": cell.model_spec,
        "key": None,
        "layers": None,
        "results": {},
        **dict.fromkeys(ATLAS_KEYS),
    }


def _fill_numbers(row: dict[str, Any], spec: Any, pooled: Any, metric: str, pooling: str) -> None:
    """Numbers of a landed cell, from its cache entry, as `measure` computes them."""
    from deffcore.runs.measure import Measurement, check_kept

    check_kept(spec, pooled)
    m = Measurement(spec=spec, pooled=pooled, metric=metric)
    row["layers"] = m.layers
    for p in POOLINGS:
        s = m.summary(p)
        row["results"][p] = {"deff_over_L": s.deff_over_L, "gap_pct": s.gap_pct, "rho1": s.rho1}
    ratio, _ = m.pos0_peak()
    row["pos0_ratio_max"] = ratio
    row["deff_over_L"] = row["results"][pooling]["deff_over_L"]
    row["gap_pct"] = row["results"][pooling]["gap_pct"]


@dataclass
class SweepPlan:
    """A checked sweep, ready to run (`plan_sweep`): one RunSpec (None for a cell that cannot
    be built) and one result row per cell, the settings every cell shares, the engine options,
    and per cell the sentence it fails with (None for a cell that runs)."""

    specs: list[Any | None]
    rows: list[dict[str, Any]]
    settings: dict[str, Any]
    engine: str
    address: str | None
    num_cpus: int | None
    batch_size: int | None
    errors: list[str | None]

    @property
    def device(self) -> str:
        return self.settings["device"]

    def result(self, engine: str, address: str | None) -> SweepResult:
        return SweepResult(engine=engine, address=address, rows=self.rows, settings=self.settings)


def plan_sweep(
    cells: Sequence[Cell],
    *,
    n: int = 512,
    max_tokens: int = 128,
    seed: int = 0,
    metric: str = "cka",
    device: str | None = None,
    dtype: str | None = None,
    passages: str = "documents",
    bos: str = "default",
    batch_size: int | None = None,
    pooling: str = "default",
    engine: str = "auto",
    address: str | None = None,
    num_cpus: int | None = None,
    cpus_per_cell: float = 1,
    gpus_per_cell: float | None = None,
    pruning: Any = None,
) -> SweepPlan:
    """Check a sweep before anything runs -> its plan (nothing is read, loaded or computed).

    `pruning`: the optional pruning column (`deffcore.work.sweep.pruning_column`): None/False off,
    True with the default sizes, or {n, n_heldout}.

    Raises SweepError (a DeffError) for a malformed sweep: no cells, too many, a bad engine,
    pooling or resource value, and the DeffError of `check_run_options` for an option every
    cell shares that it rejects (n, max tokens, seed, dtype, ...). A cell whose own model or
    dataset is refused (`run_spec`) does not refuse the sweep: its sentence is kept in
    `plan.errors` and the cell fails alone when the plan runs.
    """
    cells = check_cells(cells)
    _check_options(engine, pooling, cpus_per_cell, gpus_per_cell, num_cpus)
    prune = pruning_options(pruning)
    if gpus_per_cell and device is None:
        device = "cuda"  # a GPU per cell: the workers have CUDA even if this driver has none
    # shared options once (a bad one refuses the sweep); a cell that cannot be built fails alone
    specs, errors, resolved, dtype = checks.cell_specs(
        cells, n=n, max_tokens=max_tokens, seed=seed, metric=metric, device=device, dtype=dtype,
        passages=passages, bos=bos, batch_size=batch_size,
        # with a GPU per cell the workers have CUDA even where this driver has none
        device_here=not gpus_per_cell,
    )  # fmt: skip
    rows = [_row(cell, spec) for cell, spec in zip(cells, specs, strict=True)]
    if prune is not None:
        for row in rows:
            row.update(empty_columns())
    if gpus_per_cell is None:
        gpus_per_cell = 1.0 if resolved.startswith("cuda") else 0.0
    settings = {
        "n": n,
        "max_tokens": max_tokens,
        "seed": seed,
        "metric": metric,
        "device": resolved,
        "dtype": dtype,
        "passages": passages,
        "bos": bos,
        "pooling": pooling,
        "cpus_per_cell": cpus_per_cell,
        "gpus_per_cell": gpus_per_cell,
        "pruning": prune.to_dict() if prune is not None else None,
    }
    return SweepPlan(specs, rows, settings, engine, address, num_cpus, batch_size, errors)


def _check_options(
    engine: str,
    pooling: str,
    cpus_per_cell: float,
    gpus_per_cell: float | None,
    num_cpus: int | None = None,
) -> None:
    """The engine, pooling and resources, before anything runs: a NaN or infinite share of a
    CPU or GPU (which `x <= 0` lets through) or a runtime of no CPUs is one sentence."""
    if engine not in ENGINES:
        raise SweepError(f"Unknown sweep engine {engine!r}; choose one of {', '.join(ENGINES)}.")
    if pooling not in POOLINGS:
        raise SweepError(f"Unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}.")
    gpus_ok = gpus_per_cell is None or (math.isfinite(gpus_per_cell) and gpus_per_cell >= 0)
    if not (math.isfinite(cpus_per_cell) and cpus_per_cell > 0) or not gpus_ok:
        raise SweepError(
            "--cpus-per-cell must be a finite number > 0 and --gpus-per-cell a finite number "
            f">= 0, got {cpus_per_cell!r} and {gpus_per_cell!r}."
        )
    if num_cpus is not None and (
        isinstance(num_cpus, bool) or not isinstance(num_cpus, int) or num_cpus < 1
    ):
        raise SweepError(f"--num-cpus must be a positive integer, got {num_cpus!r}.")


def run_sweep(
    cells: Sequence[Cell],
    *,
    on_cell: OnCell | None = None,
    should_stop: Callable[[], bool] | None = None,
    **options: Any,
) -> SweepResult:
    """Measure every cell (see the module docstring); never raises for one failing cell.

    `options` are those of `plan_sweep` (n, max_tokens, seed, metric, device, dtype, passages,
    bos, batch_size, pooling, engine, address, num_cpus, cpus_per_cell, gpus_per_cell); a
    malformed sweep raises there, before anything runs. `on_cell(row, landed, total)` is called
    in this thread as each cell lands (cached ones first), with the row dict also found in the
    result. `should_stop()` true cancels the sweep (RunCancelled; landed cells stay cached).
    """
    return run_plan(plan_sweep(cells, **options), on_cell=on_cell, should_stop=should_stop)


def run_plan(
    plan: SweepPlan,
    *,
    on_cell: OnCell | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> SweepResult:
    """Run a checked sweep: land what the cache holds, then compute the rest on the engine."""
    landing = _Landing(plan, on_cell)
    todo = landing.read_cache()
    engine = _choose_engine(plan.engine, len(todo), plan.address)
    if not todo:
        return plan.result(engine, plan.address if engine == "ray" else None)
    if engine == "serial":
        _run_serial(plan, landing, todo, should_stop)
        return plan.result("serial", None)
    return plan.result("ray", _run_ray(plan, landing, todo, should_stop))


def _choose_engine(engine: str, to_compute: int, address: str | None) -> str:
    """Engine "auto": Ray for a cluster, or for many cells on a machine with many cores."""
    if engine != "auto":
        return engine
    many = to_compute >= AUTO_RAY_MIN_CELLS and (os.cpu_count() or 1) >= AUTO_RAY_MIN_CPUS
    return "ray" if address or many else "serial"


class _Landing:
    """Where a plan's cells land: each fills its row and is reported to `on_cell`."""

    def __init__(self, plan: SweepPlan, on_cell: OnCell | None) -> None:
        self.plan, self.on_cell, self.landed = plan, on_cell, 0

    def land(self, i: int, status: str, **values: Any) -> None:
        row = self.plan.rows[i]
        row.update(status=status, **values)
        self.landed += 1
        if self.on_cell is not None:
            self.on_cell(row, self.landed, len(self.plan.rows))

    def read_cache(self) -> list[int]:
        """Land every cell the cache holds (and every malformed one, which fails before any
        work); returns the indices of the cells left to compute."""
        from deffcore.extraction import cache

        todo: list[int] = []
        for i, spec in enumerate(self.plan.specs):
            if self.plan.errors[i] is not None:  # its model or dataset was refused: fails alone
                self.land(i, "failed", error=self.plan.errors[i])
                continue
            try:
                self.plan.rows[i]["key"] = spec.key()
                pooled = cache.load(spec)
                if pooled is None:
                    todo.append(i)
                    continue
                self._fill(i, pooled)
            except DeffError as err:
                self.land(i, "failed", error=str(err))
                continue
            self.land(i, "cached", seconds=0.0)
        return todo

    def finish(self, i: int, out: dict[str, Any]) -> None:
        """Store a worker's result (driver side) and fill the row."""
        from deffcore.extraction import cache
        from deffcore.extraction.atlas import write_rows

        worker, seconds = out.get("worker"), out.get("seconds")
        if out.get("error"):
            self.land(i, "failed", error=out["error"], worker=worker, seconds=seconds)
            return
        try:
            spec = self.plan.specs[i]
            cache.store(spec, out["pooled"], sources=spec.sources(), elapsed_s=seconds)
            if out.get("atlas") is not None:  # beside the entry just written
                write_rows(spec, out["atlas"])
            stored = cache.load(spec, strict=True)
            assert stored is not None  # just written
            self._fill(i, stored, computed=True)
        except Exception as err:  # e.g. a full disk: this cell fails, the sweep goes on
            self.land(i, "failed", error=one_sentence(err), worker=worker, seconds=seconds)
            return
        self.land(i, "done", worker=worker, seconds=seconds)

    def _fill(self, i: int, pooled: Any, computed: bool = False) -> None:
        settings = self.plan.settings
        row, spec = self.plan.rows[i], self.plan.specs[i]
        _fill_numbers(row, spec, pooled, settings["metric"], settings["pooling"])
        row.update(atlas_columns(spec, pooled, computed))
        if settings.get("pruning"):
            row.update(_pruning_columns(row, spec, settings))


def _pruning_columns(row: dict[str, Any], spec: Any, settings: dict[str, Any]) -> dict[str, Any]:
    """The pruning column of a landed cell (`pruning_column`), with the model this process
    still holds for it when there is one (the serial engine's slot)."""
    reason = skip_reason(row)
    if reason is not None:
        return {**empty_columns(), "pruning_status": "skipped", "pruning_error": reason}
    held = _SLOT.get((spec.model, spec.revision, settings["device"], spec.dtype))
    return cell_pruning(spec, PruningOptions(**settings["pruning"]), settings, loaded=held)


def _cancelled(should_stop: Callable[[], bool] | None) -> None:
    if should_stop is not None and should_stop():
        raise RunCancelled("The sweep was cancelled; the cells that landed are kept.")


def _run_serial(
    plan: SweepPlan,
    landing: _Landing,
    todo: list[int],
    should_stop: Callable[[], bool] | None,
) -> None:
    """One cell after the other in this process (the model slot is emptied at the end)."""
    try:
        for i in todo:
            _cancelled(should_stop)
            out = compute_cell(plan.specs[i], plan.device, plan.batch_size, should_stop)
            landing.finish(i, out)
    finally:
        release_models()


def _run_ray(
    plan: SweepPlan,
    landing: _Landing,
    todo: list[int],
    should_stop: Callable[[], bool] | None,
) -> str:
    """Every cell one Ray task; returns the cluster's address. One Ray sweep at a time per
    process: a second one (another browser tab) would share the runtime and lose its tasks when
    the first shuts it down."""
    import ray

    cpus, gpus = plan.settings["cpus_per_cell"], plan.settings["gpus_per_cell"]
    with _RAY_LOCK:
        # a runtime this process already holds (or a cluster) says itself what GPUs it has
        num_gpus = None if plan.address or ray.is_initialized() else _local_gpus(gpus)
        with ray_runtime(plan.address, num_cpus=plan.num_cpus, num_gpus=num_gpus) as gcs:
            _check_resources(ray.cluster_resources(), cpus, gpus, gcs)
            task = ray.remote(compute_cell).options(num_cpus=cpus, num_gpus=gpus, max_retries=0)
            pending = {task.remote(plan.specs[i], plan.device, plan.batch_size): i for i in todo}
            try:
                _collect(pending, landing, should_stop)
            finally:
                for ref in pending:  # interrupted: do not leave tasks running on a cluster
                    with contextlib.suppress(Exception):
                        ray.cancel(ref, force=True)
    return gcs


def _collect(
    pending: dict[Any, int], landing: _Landing, should_stop: Callable[[], bool] | None
) -> None:
    """Land each Ray task as it finishes (removing it from `pending`); a worker that died
    fails its cell."""
    import ray

    while pending:
        _cancelled(should_stop)
        # a timeout hands control back to Python every POLL_S, so signals (SIGTERM, Ctrl-C)
        # are handled and `should_stop` is asked while the tasks run
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
        for ref in ready:
            i = pending.pop(ref)
            try:
                out = ray.get(ref)
            except Exception as err:  # the worker died (killed for memory, crashed)
                out = {
                    "error": "The Ray worker running this cell died before it finished "
                    f"(out of memory or killed): {one_sentence(err)}",
                    "worker": None,
                    "seconds": None,
                }
            landing.finish(i, out)


def _check_resources(
    available: dict[str, float], cpus_per_cell: float, gpus_per_cell: float, address: str
) -> None:
    """A cell the cluster can never place would wait forever: refuse the sweep instead."""
    for name, need in (("CPU", cpus_per_cell), ("GPU", gpus_per_cell)):
        if need and available.get(name, 0.0) < need:
            raise SweepError(
                f"Each cell asks for {need:g} {name}(s) but the Ray cluster at {address} has "
                f"{available.get(name, 0.0):g}; lower --{name.lower()}s-per-cell or add nodes."
            )


def _local_gpus(gpus_per_cell: float) -> int | None:
    """GPUs a local runtime offers: every CUDA device when cells ask for GPUs, else none."""
    if not gpus_per_cell:
        return 0
    import torch

    if not torch.cuda.is_available():
        raise SweepError("--gpus-per-cell needs CUDA on this machine (or a cluster: --address).")
    return torch.cuda.device_count()
