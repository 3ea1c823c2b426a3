"""Sweeps: one measurement over a grid of cells, serially or as Ray tasks (issue 10).

A *cell* is one `measure` spec: a model (optionally its random-weight null `random:<m>:<seed>`),
a revision, a norm intervention and a dataset; every other option (N, tokens, passage seed,
passages mode, BOS, dtype, device) is shared by the sweep. A sweep

    cells = grid_cells(models=["tiny-llama", "tiny-gpt2"], random_seeds=[0, 1])
    result = run_sweep(cells, n=64, max_tokens=32, engine="ray")
    result.rows            # one dict per cell, in cell order (see `CELL_KEYS`)

1. drops duplicate cells (same cache key) and reads every cell already in the cache
   (status "cached": nothing is recomputed, so an interrupted sweep resumes where it stopped);
2. computes the others with `deffcore.measurement.extract_spec`, each cell one Ray task (or, with
   `engine="serial"`, one after the other in this process). A worker returns the cell's pooled
   states (numpy arrays) to the driver, which stores them with `deffcore.cache.store`: workers
   need no shared disk and never write the cache;
3. reports a failing cell (unknown model, hub offline, out of memory, a worker that died) as
   status "failed" with its one-sentence error while the other cells finish.

Each landed cell's numbers are computed from the cache entry the driver just wrote, exactly as
`measure` computes them from the same entry, so a sweep cell equals `measure` on its spec.

Engines. "ray" starts a local Ray runtime bound to 127.0.0.1 (`ray.init(num_cpus=...)`, no
dashboard) and shuts it down afterwards, or joins an existing cluster when given `address`
(then it leaves the cluster running). "serial" runs cells in this process. "auto" (the default)
picks "ray" when `address` is given or when at least `AUTO_RAY_MIN_CELLS` cells need computing,
"serial" otherwise: starting a local Ray runtime costs several seconds (benchmarks/bench_sweep.py,
BENCHMARKS.md "Sweeps"), more than a handful of tiny cells take in one process. On a machine of
fewer than `AUTO_RAY_MIN_CPUS` cores "auto" stays serial: torch already uses every core there.

Resources: each Ray task asks for `cpus_per_cell` CPUs (default 1; Ray then limits the task's
torch threads to that many) and `gpus_per_cell` GPUs (default 1 when this machine has CUDA, else
0; fractions share a GPU). Tasks are not retried (`max_retries=0`): a worker killed for memory
fails its cell, and rerunning the sweep computes only what is missing.

A worker keeps the last model it loaded (one slot) so consecutive cells of the same model, e.g.
the interventions of one random seed, load it once; `release_models()` empties the slot.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deffcore import sweep_checks
from deffcore.constants import POOLINGS
from deffcore.errors import DeffError
from deffcore.sweep_checks import SweepError  # re-exported: the class lives with the checks

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
)
STATUSES: tuple[str, ...] = ("done", "cached", "failed")
ENGINES: tuple[str, ...] = ("auto", "ray", "serial")
#: With engine "auto", a local Ray runtime is started only for at least this many cells to
#: compute (BENCHMARKS.md "Sweeps": start-up costs more than a few tiny cells).
AUTO_RAY_MIN_CELLS = 8
#: ... and only on a machine with at least this many cores: on 2 cores torch already uses both
#: for one cell, and Ray's workers only add overhead (BENCHMARKS.md "Sweeps": 0.6x).
AUTO_RAY_MIN_CPUS = 4
#: Cells a single sweep may hold (a typo in a grid should not queue a million runs).
MAX_CELLS = 2000

OnCell = Callable[[dict[str, Any], int, int], None]
_RAY_LOCK = threading.Lock()


# ---------------------------------------------------------------------------------------------
# Cells


@dataclass(frozen=True)
class Cell:
    """One cell of a sweep. `seed` is the random-weight seed (None: the trained weights)."""

    model: str
    revision: str | None = None
    seed: int | None = None
    intervention: str = "none"
    dataset: str = "bbc-news"

    @property
    def model_spec(self) -> str:
        """The model spec `load_model` reads: `random:<model>:<seed>` for a random null."""
        return self.model if self.seed is None else f"random:{self.model}:{self.seed}"

    def label(self) -> str:
        parts = [self.model_spec]
        if self.revision:
            parts.append(f"@{self.revision}")
        if self.intervention != "none":
            parts.append(f"[{self.intervention}]")
        if self.dataset != "bbc-news":
            parts.append(f"on {self.dataset}")
        return " ".join(parts)


def _split_random(model: str) -> tuple[str, int | None]:
    """'random:tiny-llama:3' -> ('tiny-llama', 3); a trained model -> (model, None)."""
    from deffcore.models import parse_random

    rnd = parse_random(model)
    return (model, None) if rnd is None else (rnd[0], int(rnd[1]))


def _check_interventions(names: Iterable[str]) -> None:
    from deffcore.labs.interventions import INTERVENTIONS

    for name in names:
        if name not in INTERVENTIONS:
            raise SweepError(
                f"Unknown norm intervention {name!r} in the sweep; choose from "
                f"{', '.join(INTERVENTIONS)}."
            )


def grid_cells(
    models: Sequence[str],
    *,
    revisions: Sequence[str | None] = (None,),
    random_seeds: Sequence[int] = (),
    trained: bool = True,
    interventions: Sequence[str] = ("none",),
    datasets: Sequence[str] = ("bbc-news",),
) -> list[Cell]:
    """The product models x revisions x weights x interventions x datasets, in that order.

    Weights are the trained model (unless `trained` is False) and one random-weight null per
    seed in `random_seeds`. A random null is built from the model's config, so it ignores the
    revision: it appears once per model, not once per revision. A model written as
    `random:<model>:<seed>` is that one random null.
    """
    axes = sweep_checks.check_axes(models=models, revisions=revisions, random_seeds=random_seeds,
                                   interventions=interventions, datasets=datasets)  # fmt: skip
    models, revisions, random_seeds = axes["models"], axes["revisions"], axes["random_seeds"]
    interventions, datasets = axes["interventions"], axes["datasets"]
    models = [m.strip() for m in models if m and m.strip()]
    if not models:
        raise SweepError("A sweep needs at least one model (--models a,b or a manifest).")
    if not trained and not random_seeds:
        raise SweepError("--random-only needs --random-seeds (which random seeds to measure).")
    if not interventions or not datasets or not revisions:
        raise SweepError("Every sweep axis needs at least one value.")
    _check_interventions(interventions)
    weights: list[int | None] = ([None] if trained else []) + [int(s) for s in random_seeds]
    cells: list[Cell] = []
    for model, revision, seed, intervention, dataset in itertools.product(
        models, revisions, weights, interventions, datasets
    ):
        base, own_seed = _split_random(model)
        if own_seed is not None:
            if seed is not None:
                continue  # a random null's own random nulls make no sense
            seed = own_seed
        cells.append(
            Cell(
                model=base,
                revision=None if seed is not None else (revision or None),
                seed=seed,
                intervention=intervention,
                dataset=dataset,
            )
        )
    return _dedupe(cells)


def checkpoint_cells(root: str | Path, **axes: Any) -> list[Cell]:
    """One cell per checkpoint folder under `root` (the dynamics lab's local checkpoints).

    Residual-carry `.pt` checkpoints are not HF models; the dynamics lab measures them.
    """
    from deffcore.labs.dynamics import local_checkpoints

    folders = [cp.model for cp in local_checkpoints(root) if cp.kind == "folder"]
    if not folders:
        raise SweepError(
            f"No save_pretrained checkpoint folders under {root} (residual-carry .pt files are "
            "measured by `python -m deffcore dynamics`)."
        )
    return grid_cells(folders, **axes)


_CELL_FIELDS = ("model", "revision", "seed", "intervention", "dataset")
_AXES = ("models", "revisions", "random_seeds", "trained", "interventions", "datasets")


def manifest_cells(path: str | Path) -> list[Cell]:
    """Cells listed in a YAML or JSON manifest file.

    Either a list of cells, or an object with `cells` (a list) and/or `grid` (keyword arguments
    of `grid_cells`: models, revisions, random_seeds, trained, interventions, datasets). A cell
    is a mapping with `model` and optionally revision, seed (random-weight seed), intervention,
    dataset; a bare string is a model.
    """
    path = Path(path).expanduser()
    try:
        text = path.read_text()
    except OSError as err:
        raise SweepError(f"Cannot read the sweep manifest {path}: {err.strerror}.") from err
    try:
        if path.suffix.lower() in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as err:  # yaml.YAMLError / json.JSONDecodeError: both mean malformed
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise SweepError(f"The sweep manifest {path} is not valid YAML/JSON ({first}).") from err
    if isinstance(data, list):
        data = {"cells": data}
    if not isinstance(data, dict) or not ({"cells", "grid"} & set(data)):
        raise SweepError(
            f"The sweep manifest {path} must be a list of cells or hold 'cells'/'grid'."
        )
    unknown = set(data) - {"cells", "grid"}
    if unknown:
        raise SweepError(
            f"The sweep manifest {path} has unknown key(s) {', '.join(sorted(unknown))}."
        )
    cells: list[Cell] = []
    for i, item in enumerate(data.get("cells") or []):
        if isinstance(item, str):
            item = {"model": item}
        if not isinstance(item, dict) or not isinstance(item.get("model"), str):
            raise SweepError(f"Cell {i + 1} of the sweep manifest {path} needs a 'model' string.")
        bad = set(item) - set(_CELL_FIELDS)
        if bad:
            raise SweepError(
                f"Cell {i + 1} of the sweep manifest {path} has unknown field(s) "
                f"{', '.join(sorted(bad))}; allowed: {', '.join(_CELL_FIELDS)}."
            )
        seed = item.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise SweepError(f"Cell {i + 1} of {path}: seed must be an integer, got {seed!r}.")
        sweep_checks.check_manifest_cell(item, f"Cell {i + 1} of the sweep manifest {path}")
        cells += grid_cells(
            [item["model"]],
            revisions=[item.get("revision")],
            random_seeds=[] if seed is None else [seed],
            trained=seed is None,
            interventions=[item.get("intervention") or "none"],
            datasets=[item.get("dataset") or "bbc-news"],
        )
    grid = data.get("grid")
    if grid is not None:
        if not isinstance(grid, dict) or set(grid) - set(_AXES):
            raise SweepError(f"The 'grid' of {path} must be a mapping of {', '.join(_AXES)}.")
        grid = dict(grid)
        if "trained" in grid and not isinstance(grid["trained"], bool):
            raise SweepError(f"The 'grid' of {path}: 'trained' must be true or false.")
        axes = {k: v for k, v in grid.items() if k != "trained"}
        grid.update(sweep_checks.check_axes(f"The 'grid' of {path}", **axes))
        cells += grid_cells(grid.pop("models", []) or [], **grid)
    return _dedupe(cells)


def _dedupe(cells: Iterable[Cell]) -> list[Cell]:
    return list(dict.fromkeys(cells))


# ---------------------------------------------------------------------------------------------
# The worker side: one cell -> pooled states (no cache)

_SLOT: dict[tuple[str, str | None, str, str], Any] = {}


def release_models() -> None:
    """Forget the model kept between cells (frees its memory once nothing else holds it)."""
    _SLOT.clear()


def _loaded(spec: Any, device: str) -> Any:
    from deffcore.models import load_model

    key = (spec.model, spec.revision, device, spec.dtype)
    if key not in _SLOT:
        _SLOT.clear()  # one slot: free the previous model before loading the next
        _SLOT[key] = load_model(spec.model, revision=spec.revision, device=device, dtype=spec.dtype)
    return _SLOT[key]


def _one_sentence(err: BaseException) -> str:
    """A person-readable sentence for any error (DeffError texts already are)."""
    if isinstance(err, DeffError):
        return str(err)
    text = (str(err).strip().splitlines() or [""])[0][:300]
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def compute_cell(spec: Any, device: str, batch_size: int | None = None) -> dict[str, Any]:
    """Run one cell's extraction (what a Ray task executes; also the serial engine's body).

    Returns {"pooled": PooledStates | None, "error": str | None, "worker": "<host>:<pid>",
    "seconds": float}. Errors are caught here and returned as their sentence, so a failing
    cell never takes the sweep down and no exception object needs to cross processes.
    """
    from deffcore.measurement import extract_spec

    start = time.perf_counter()
    out: dict[str, Any] = {"pooled": None, "error": None, "worker": worker_id()}
    try:
        import torch

        try:
            loaded = _loaded(spec, device)
            out["pooled"] = extract_spec(spec, device=device, batch_size=batch_size, loaded=loaded)
        except torch.OutOfMemoryError as err:
            release_models()
            raise MemoryError(f"out of memory on {device}: {str(err).splitlines()[0]}") from err
    except Exception as err:  # fault isolation: every failure becomes this cell's sentence
        out["error"] = _one_sentence(err)
    out["seconds"] = time.perf_counter() - start
    return out


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


# ---------------------------------------------------------------------------------------------
# The driver


@dataclass
class SweepResult:
    """Rows in cell order; `engine` actually used, `address` of the Ray cluster (None: serial)."""

    engine: str
    address: str | None
    rows: list[dict[str, Any]]
    settings: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """The CLI's `--json` object: engine, address and each cell's `CELL_KEYS`."""
        return {
            "engine": self.engine,
            "address": self.address,
            "cells": [{k: row[k] for k in CELL_KEYS} for row in self.rows],
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
    }


def _fill_numbers(row: dict[str, Any], spec: Any, pooled: Any, metric: str, pooling: str) -> None:
    """Numbers of a landed cell, from its cache entry, as `measure` computes them."""
    from deffcore.measurement import MIN_PASSAGES, Measurement

    if pooled.n < MIN_PASSAGES:
        raise DeffError(
            f"Only {pooled.n} passages of {spec.dataset!r} have at least 2 tokens "
            f"({pooled.n_dropped_short} dropped); a run needs at least {MIN_PASSAGES}."
        )
    m = Measurement(spec=spec, pooled=pooled, metric=metric)
    row["layers"] = m.layers
    for p in POOLINGS:
        s = m.summary(p)
        row["results"][p] = {"deff_over_L": s.deff_over_L, "gap_pct": s.gap_pct, "rho1": s.rho1}
    ratio, _ = m.pos0_peak()
    row["pos0_ratio_max"] = ratio
    row["deff_over_L"] = row["results"][pooling]["deff_over_L"]
    row["gap_pct"] = row["results"][pooling]["gap_pct"]


def _local_ray_init(num_cpus: int | None, num_gpus: int | None) -> None:
    """Start a private Ray runtime on this machine, every port bound to 127.0.0.1.

    Ray picks the machine's routable address for a local runtime on Linux; with
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 it uses the loopback address (its behaviour on a
    laptop), so nothing of the runtime is reachable from the network. The variable is set
    only while the runtime starts; its processes inherit it.
    """
    import ray

    repo = str(Path(__file__).resolve().parent.parent)
    old = {k: os.environ.get(k) for k in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "PYTHONPATH")}
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    # workers must import deffcore even when the driver runs from another directory
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (repo, old["PYTHONPATH"]) if p)
    # Ray reads the variable once, when it is imported; this process may have imported it
    # already, so the flag it derived is switched too (and restored below).
    from ray._private import ray_constants

    old_flag = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(
            address="local",  # a new runtime even when RAY_ADDRESS names a cluster
            num_cpus=num_cpus or os.cpu_count() or 1,
            num_gpus=num_gpus,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = old_flag
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _join_ray(address: str) -> None:
    import ray

    def init() -> None:
        ray.init(address=address, log_to_driver=False, configure_logging=False)

    try:  # probed first, joined with a deadline (a dead address: one sentence, not for ever)
        sweep_checks.join_ray(address, init)
    except SweepError:
        raise
    except Exception as err:  # ConnectionError and friends: a sentence, not a traceback
        raise SweepError(
            f"Cannot join the Ray cluster at {address!r} ({_one_sentence(err)}); start it with "
            "`ray start --head` and pass its address."
        ) from err


@contextlib.contextmanager
def ray_runtime(
    address: str | None = None, *, num_cpus: int | None = None, num_gpus: int | None = None
):
    """Connect to Ray for the duration of the block; yields the cluster's GCS address.

    Reuses a runtime this process already holds; else joins `address`, or starts a local one
    (shut down on exit; a joined cluster is only disconnected from).
    """
    try:
        import ray
    except ImportError as err:
        raise SweepError("The ray engine needs Ray: pip install -r requirements.txt.") from err
    started = False
    if not ray.is_initialized():
        if address:
            _join_ray(address)
        else:
            _local_ray_init(num_cpus, num_gpus)
        started = True
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        if started:
            ray.shutdown()


def run_sweep(
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
    on_cell: OnCell | None = None,
) -> SweepResult:
    """Measure every cell (see the module docstring); never raises for one failing cell.

    Raises SweepError (a DeffError) for a malformed sweep: no cells, too many, a bad engine,
    pooling or resource value, or options every cell shares that `run_spec` rejects.
    `on_cell(row, landed, total)` is called in this thread as each cell lands (cached ones
    first), with the row dict also found in the result.
    """
    from deffcore import cache

    cells = _dedupe(cells)
    if not cells:
        raise SweepError("The sweep has no cells.")
    if len(cells) > MAX_CELLS:
        raise SweepError(f"The sweep has {len(cells)} cells; at most {MAX_CELLS} are allowed.")
    if engine not in ENGINES:
        raise SweepError(f"Unknown sweep engine {engine!r}; choose one of {', '.join(ENGINES)}.")
    if pooling not in POOLINGS:
        raise SweepError(f"Unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}.")
    if cpus_per_cell <= 0 or (gpus_per_cell is not None and gpus_per_cell < 0):
        raise SweepError("--cpus-per-cell must be > 0 and --gpus-per-cell >= 0.")
    _check_interventions(c.intervention for c in cells)
    if gpus_per_cell and device is None:
        device = "cuda"  # a GPU per cell: the workers have CUDA even if this driver has none
    # shared options once (a bad one refuses the sweep); a cell that cannot be built fails alone
    specs, errors, device, dtype = sweep_checks.cell_specs(
        cells, n=n, max_tokens=max_tokens, seed=seed, metric=metric, device=device, dtype=dtype,
        passages=passages, bos=bos, batch_size=batch_size,
        # with a GPU per cell the workers have CUDA even where this driver has none
        device_here=not gpus_per_cell,
    )  # fmt: skip
    rows = [_row(cell, spec) for cell, spec in zip(cells, specs, strict=True)]
    if gpus_per_cell is None:
        gpus_per_cell = 1.0 if device.startswith("cuda") else 0.0
    settings = {
        "n": n,
        "max_tokens": max_tokens,
        "seed": seed,
        "metric": metric,
        "device": device,
        "dtype": dtype,
        "passages": passages,
        "bos": bos,
        "pooling": pooling,
        "cpus_per_cell": cpus_per_cell,
        "gpus_per_cell": gpus_per_cell,
    }
    total, landed = len(cells), 0

    def land(i: int, status: str, **values: Any) -> None:
        nonlocal landed
        rows[i].update(status=status, **values)
        landed += 1
        if on_cell is not None:
            on_cell(rows[i], landed, total)

    # 1. the cache (and malformed cells, which fail before any work)
    todo: list[int] = []
    for i, spec in enumerate(specs):
        if errors[i] is not None:  # its model or dataset was refused: this cell fails alone
            land(i, "failed", error=errors[i])
            continue
        try:
            rows[i]["key"] = spec.key()
            pooled = cache.load(spec)
        except DeffError as err:
            land(i, "failed", error=str(err))
            continue
        if pooled is None:
            todo.append(i)
            continue
        try:
            _fill_numbers(rows[i], spec, pooled, metric, pooling)
        except DeffError as err:
            land(i, "failed", error=str(err))
            continue
        land(i, "cached", seconds=0.0)

    def finish(i: int, out: dict[str, Any]) -> None:
        """Store a worker's result (driver side) and fill the row."""
        if out.get("error"):
            land(
                i,
                "failed",
                error=out["error"],
                worker=out.get("worker"),
                seconds=out.get("seconds"),
            )
            return
        try:
            cache.store(specs[i], out["pooled"], elapsed_s=out["seconds"])
            stored = cache.load(specs[i], strict=True)
            assert stored is not None  # just written
            _fill_numbers(rows[i], specs[i], stored, metric, pooling)
        except Exception as err:  # e.g. a full disk: this cell fails, the sweep goes on
            land(
                i, "failed", error=_one_sentence(err), worker=out.get("worker"),
                seconds=out["seconds"],
            )  # fmt: skip
            return
        land(i, "done", worker=out["worker"], seconds=out["seconds"])

    chosen = engine
    if engine == "auto":
        many = len(todo) >= AUTO_RAY_MIN_CELLS and (os.cpu_count() or 1) >= AUTO_RAY_MIN_CPUS
        chosen = "ray" if address or many else "serial"
    if not todo:
        return SweepResult(
            engine=chosen,
            address=address if chosen == "ray" else None,
            rows=rows,
            settings=settings,
        )
    if chosen == "serial":
        try:
            for i in todo:
                finish(i, compute_cell(specs[i], device, batch_size))
        finally:
            release_models()
        return SweepResult(engine="serial", address=None, rows=rows, settings=settings)

    import ray

    # one Ray sweep at a time per process: a second one (another browser tab) would share the
    # runtime and lose its tasks when the first shuts it down
    with (
        _RAY_LOCK,
        ray_runtime(
            address, num_cpus=num_cpus, num_gpus=None if address else _local_gpus(gpus_per_cell)
        ) as gcs,
    ):
        _check_resources(ray.cluster_resources(), cpus_per_cell, gpus_per_cell, gcs)
        task = ray.remote(compute_cell).options(
            num_cpus=cpus_per_cell, num_gpus=gpus_per_cell, max_retries=0
        )
        pending = {task.remote(specs[i], device, batch_size): i for i in todo}
        try:
            while pending:
                # a timeout hands control back to Python each second, so signals are handled
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
                for ref in ready:
                    i = pending.pop(ref)
                    try:
                        out = ray.get(ref)
                    except Exception as err:  # the worker died (killed for memory, crashed)
                        out = {
                            "error": "The Ray worker running this cell died before it finished "
                            f"(out of memory or killed): {_one_sentence(err)}",
                            "worker": None,
                            "seconds": None,
                        }
                    finish(i, out)
        finally:
            for ref in pending:  # interrupted: do not leave tasks running on a cluster
                with contextlib.suppress(Exception):
                    ray.cancel(ref, force=True)
    return SweepResult(engine="ray", address=gcs, rows=rows, settings=settings)


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


# ---------------------------------------------------------------------------------------------
# Table S7: initialisation-only norm probes as one sweep

TABLE_S7_MODEL = "gemma3-270m"
TABLE_S7_SEEDS: tuple[int, ...] = (0, 1, 2)


def table_s7_cells(
    model: str = TABLE_S7_MODEL, seeds: Sequence[int] = TABLE_S7_SEEDS
) -> list[Cell]:
    """random:<model>:<seed> x (none, no_post, no_qk, no_post_no_qk): paper Table S7's grid."""
    from deffcore.labs.interventions import INTERVENTIONS

    return grid_cells([model], random_seeds=seeds, trained=False, interventions=INTERVENTIONS)


def paper_table_s7() -> dict[tuple[str, str], dict[str, float | None]]:
    """The paper's Table S7 (Gemma-3-4B, random init): {(intervention, pooling): {gap_pct, sd}}.

    Also the max position-0 ratio under pooling key "max_pos0_ratio".
    """
    import re

    from deffcore.labs.interventions import PAPER_LABELS
    from deffcore.paper import paper_rows

    by_label = {label: name for name, label in PAPER_LABELS.items()}
    out: dict[tuple[str, str], dict[str, float | None]] = {}
    for r in paper_rows("Table S7"):
        label = r["note"].split(";")[0].removeprefix("intervention:").strip()
        if label not in by_label:
            continue
        sd = re.search(r"sd ([0-9.]+)", r["note"])
        key = r["setting"] if r["quantity"] == "gap_pct" else r["quantity"]
        out[(by_label[label], key)] = {
            "value": float(r["value"]),
            "sd": float(sd.group(1)) if sd else None,
            "model": r["model"],
        }
    return out


def table_s7_rows(result: SweepResult) -> list[dict[str, Any]]:
    """Mean +- sd (ddof=1) over seeds of gap% per (intervention, pooling), beside the paper.

    Rows: intervention, pooling, seeds (landed), gap_pct_mean, gap_pct_sd, deff_over_L_mean,
    paper_gap_pct, paper_sd; plus one row per intervention with pooling "max_pos0_ratio".
    Failed cells are left out of the means (and `seeds` says how many landed).
    """
    from deffcore.labs.interventions import INTERVENTIONS

    paper = paper_table_s7()
    ok = [r for r in result.rows if r["status"] in ("done", "cached")]
    rows = []

    def stats(values: list[float]) -> tuple[float | None, float | None]:
        if not values:
            return None, None
        arr = np.asarray(values, dtype=np.float64)
        return float(arr.mean()), (float(arr.std(ddof=1)) if arr.size > 1 else None)

    for name in INTERVENTIONS:
        mine = [r for r in ok if r["intervention"] == name]
        if not mine and not any(r["intervention"] == name for r in result.rows):
            continue
        for pooling in (*POOLINGS, "max_pos0_ratio"):
            if pooling == "max_pos0_ratio":
                mean, sd = stats([r["pos0_ratio_max"] for r in mine])
                dmean = None
            else:
                mean, sd = stats([r["results"][pooling]["gap_pct"] for r in mine])
                dmean, _ = stats([r["results"][pooling]["deff_over_L"] for r in mine])
            ref = paper.get((name, pooling), {})
            rows.append(
                {
                    "intervention": name,
                    "pooling": pooling,
                    "seeds": len(mine),
                    "gap_pct_mean": mean,
                    "gap_pct_sd": sd,
                    "deff_over_L_mean": dmean,
                    "paper_gap_pct": ref.get("value"),
                    "paper_sd": ref.get("sd"),
                }
            )
    return rows


def table_s7(
    *,
    model: str = TABLE_S7_MODEL,
    seeds: Sequence[int] = TABLE_S7_SEEDS,
    **sweep_kwargs: Any,
) -> tuple[list[dict[str, Any]], SweepResult]:
    """Run paper Table S7's grid as one sweep -> (table rows, the sweep's result).

    `sweep_kwargs` go to `run_sweep` (n, max_tokens, dataset options, engine, address, ...).
    For "max_pos0_ratio" rows, gap_pct_mean/sd hold the ratio's mean/sd.
    """
    result = run_sweep(table_s7_cells(model, seeds), **sweep_kwargs)
    return table_s7_rows(result), result


# ---------------------------------------------------------------------------------------------
# Background sweeps (the Models page): the sweep runs in a thread of the server process

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
    cells = _dedupe(cells)
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
                job.state, job.error = "failed", _one_sentence(err)
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


# ---------------------------------------------------------------------------------------------
# Models overview: every cached run and the paper's models in one table (the Models page)

#: Family of a model, from its name (first match wins); the Models page colours by it.
FAMILIES: tuple[tuple[str, str], ...] = (
    ("pythia", "Pythia"),
    ("olmo", "OLMo-2"),
    ("qwen", "Qwen"),
    ("llama", "Llama"),
    ("mistral", "Mistral"),
    ("gemma", "Gemma"),
    ("smollm", "SmolLM2"),
    ("gpt2", "GPT-2"),
    ("gptneox", "GPT-NeoX"),
)


def model_family(name: str) -> str:
    """'random:tiny-llama:0' -> 'Llama', 'EleutherAI/pythia-70m' -> 'Pythia', else 'other'."""
    low = name.lower().removeprefix("random:")
    return next((family for key, family in FAMILIES if key in low), "other")


def _num(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def paper_models() -> list[dict[str, Any]]:
    """The paper's models with their published depth numbers, one row per model.

    Columns: source ("paper"), model, family, weights ("trained"), layers, d_model,
    deff_over_L, gap_pct (default pooling), gap_<pooling> per pooling control where published,
    random_mean / random_low / random_high (the random-weight null's D_eff/L where published),
    table (where D_eff/L comes from). D_eff/L is taken from Table 2, else Table S13, S15, S17,
    Table 1 (in that order: the first table that publishes it); gap per pooling from Table S4,
    else S5; the null from Table S10 (mean, min, max), else Table 1 (one value).
    """
    from deffcore.paper import paper_rows

    order = ("Table 2", "Table S13", "Table S15", "Table S17", "Table 1")
    models: dict[str, dict[str, Any]] = {}
    for r in paper_rows():
        name = r["model"]
        if "(" in name:  # "Gemma-3-4B (random init)", "nanoGPT-12L (residual carry)": not a model
            continue
        q, value, src = r["quantity"], _num(r["value"]), r["source"]
        m = models.setdefault(
            name,
            {"source": "paper", "model": name, "family": model_family(name), "weights": "trained"},
        )
        if r["layers"] and m.get("layers") is None:
            m["layers"] = int(float(r["layers"]))
        if value is None:
            continue
        if q == "d_model":
            m["d_model"] = int(value)
        elif q in ("deff_over_L", "deff_over_L_trained") and src in order:
            if m.get("table") is None or order.index(src) < order.index(m["table"]):
                m["deff_over_L"], m["table"] = value, src
        elif q == "gap_pct" and src in ("Table 2", "Table S4", "Table S5", "Table S17"):
            key = f"gap_{r['setting']}"
            if src in ("Table S4", "Table S5") or key not in m:
                m[key] = value
        elif src == "Table S10" and q.startswith("deff_over_L_random_"):
            m[
                {"mean": "random_mean", "min": "random_low", "max": "random_high"}[
                    q.rsplit("_", 1)[1]
                ]
            ] = value
        elif src == "Table 1" and q == "deff_over_L_random":
            m.setdefault("random_mean", value)
    rows = [m for m in models.values() if m.get("deff_over_L") is not None or "gap_default" in m]
    for m in rows:
        m["gap_pct"] = m.get("gap_default")
    return sorted(rows, key=lambda m: (m["family"], m.get("layers") or 0, m["model"]))


def cached_model_row(meta: dict[str, Any], metric: str = "cka") -> dict[str, Any]:
    """One cached run (its cache meta) as a Models-table row, numbers computed from its states.

    Raises DeffError when the entry cannot be read (corrupt, missing).
    """
    from deffcore import cache
    from deffcore.cache import RunSpec
    from deffcore.measurement import Measurement

    spec = RunSpec(**meta["spec"])
    found = cache._read_entry(meta["key"])  # by key: the stored spec's key may predate a change
    if found is None:
        raise DeffError(f"The cached run {meta['key']} has no states.")
    m = Measurement(spec=spec, pooled=found[0], metric=metric)
    row: dict[str, Any] = {
        "source": "cached",
        "model": spec.model,
        "family": model_family(spec.model),
        "weights": "random" if spec.model.startswith("random:") else "trained",
        "layers": m.layers,
        "d_model": m.d_model,
        "n": m.n,
        "max_tokens": spec.max_tokens,
        "dataset": spec.dataset,
        "intervention": spec.intervention,
        "passages": spec.passages,
        "revision": spec.revision,
        "key": meta["key"],
        "created": meta.get("created"),
    }
    for p in POOLINGS:
        s = m.summary(p)
        row[f"gap_{p}"] = s.gap_pct
        if p == "default":
            row["deff_over_L"], row["gap_pct"] = s.deff_over_L, s.gap_pct
    return row
