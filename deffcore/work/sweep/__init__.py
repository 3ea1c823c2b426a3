"""Sweeps: one measurement over a grid of cells, serially or as Ray tasks.

    cells = grid_cells(models=["tiny-llama", "tiny-gpt2"], random_seeds=[0, 1])
    result = run_sweep(cells, n=64, max_tokens=32, engine="ray")
    result.rows            # one dict per cell, in cell order (see `CELL_KEYS`)

`cells` (cells, grids, manifests and their checks), `runner` (the driver and the worker side:
`plan_sweep`, `run_sweep`, `compute_cell`), `ray_runtime` (join a cluster or start a private
local runtime), `table_s7` (paper Table S7 as one sweep). A background sweep (the Models page)
is a job of `deffcore.work.jobs`, the one registry and queue of background work. The Models overview
(`model_family`, `paper_models`) lives in `deffcore.views.models_overview`, a cached run's row in
`deffcore.runs.tables.cached_model_row`.

Every public name is re-exported here; `start_sweep` and `sweep_job` are `deffcore.work.jobs`'s,
resolved on first use (jobs imports the cache and torch), so importing this package stays light.
"""

from __future__ import annotations

from deffcore.runs.tables import cached_model_row
from deffcore.views.models_overview import FAMILIES, model_family, paper_models
from deffcore.work.sweep.cells import (
    MAX_CELLS,
    Cell,
    check_cells,
    checkpoint_cells,
    grid_cells,
    manifest_cells,
)
from deffcore.work.sweep.checks import SweepError
from deffcore.work.sweep.ray_runtime import ray_runtime
from deffcore.work.sweep.runner import (
    AUTO_RAY_MIN_CELLS,
    AUTO_RAY_MIN_CPUS,
    CELL_KEYS,
    ENGINES,
    STATUSES,
    OnCell,
    SweepPlan,
    SweepResult,
    compute_cell,
    plan_sweep,
    release_models,
    run_plan,
    run_sweep,
    worker_id,
)
from deffcore.work.sweep.table_s7 import (
    TABLE_S7_MODEL,
    TABLE_S7_SEEDS,
    paper_table_s7,
    table_s7,
    table_s7_cells,
    table_s7_rows,
)

__all__ = [
    "AUTO_RAY_MIN_CELLS",
    "AUTO_RAY_MIN_CPUS",
    "CELL_KEYS",
    "ENGINES",
    "FAMILIES",
    "MAX_CELLS",
    "STATUSES",
    "TABLE_S7_MODEL",
    "TABLE_S7_SEEDS",
    "Cell",
    "OnCell",
    "SweepError",
    "SweepPlan",
    "SweepResult",
    "cached_model_row",
    "check_cells",
    "checkpoint_cells",
    "compute_cell",
    "grid_cells",
    "manifest_cells",
    "model_family",
    "paper_models",
    "paper_table_s7",
    "plan_sweep",
    "ray_runtime",
    "release_models",
    "run_plan",
    "run_sweep",
    "table_s7",
    "table_s7_cells",
    "table_s7_rows",
    "worker_id",
]

_FROM_JOBS = ("start_sweep", "sweep_job")
__all__ += list(_FROM_JOBS)


def __getattr__(name: str):
    if name in _FROM_JOBS:
        from deffcore.work import jobs

        return getattr(jobs, name)
    raise AttributeError(f"module 'deffcore.work.sweep' has no attribute {name!r}")
