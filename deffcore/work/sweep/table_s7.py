"""Paper Table S7 (initialisation-only norm probes) as one sweep: its grid, the paper's values,
and mean +- sd over seeds per (intervention, pooling) beside them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from deffcore.core.constants import POOLINGS
from deffcore.work.sweep.cells import Cell, grid_cells
from deffcore.work.sweep.runner import SweepResult, run_sweep

TABLE_S7_MODEL = "gemma3-270m"
TABLE_S7_SEEDS: tuple[int, ...] = (0, 1, 2)


def table_s7_cells(
    model: str = TABLE_S7_MODEL, seeds: Sequence[int] = TABLE_S7_SEEDS
) -> list[Cell]:
    """random:<model>:<seed> x (none, no_post, no_qk, no_post_no_qk): paper Table S7's grid."""
    from deffcore.inputs.interventions import INTERVENTIONS

    return grid_cells([model], random_seeds=seeds, trained=False, interventions=INTERVENTIONS)


def paper_table_s7() -> dict[tuple[str, str], dict[str, float | None]]:
    """The paper's Table S7 (Gemma-3-4B, random init): {(intervention, pooling): {gap_pct, sd}}.

    Also the max position-0 ratio under pooling key "max_pos0_ratio".
    """
    import re

    from deffcore.inputs.interventions import PAPER_LABELS
    from deffcore.views.paper import paper_rows

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
    from deffcore.inputs.interventions import INTERVENTIONS

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
