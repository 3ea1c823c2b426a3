"""A sweep's atlas column (SPEC 16): the depth-use atlas's per-run numbers in every cell's row.

Stage: work (beside `deffcore.work.sweep.runner`).

Always on and nearly free: each computed cell takes its atlas during its own extraction
(`compute_cell` passes the atlas tap; the worker returns the per-passage rows with the pooled
states, the driver keeps them beside the cell's cache entry), so the row gains
`ATLAS_COLUMNS` (share of blocks past the phase point, mean BI of the second half, the depth
Gromov et al. keep at a 10% angular budget over L, late-over-early relative contribution) and
`atlas_status`: "done" (computed with this cell), "stored" (read from beside a cached entry)
or "missing" (a cell cached before the atlas existed: `python -m deffcore atlas` on its
settings adds it; the column stays empty, never a guess).
"""

from __future__ import annotations

from typing import Any

from deffcore.measures.atlas import ATLAS_COLUMNS

#: Keys every row carries (the CLI's --json prints them after the measurement's keys).
ATLAS_KEYS: tuple[str, ...] = (*ATLAS_COLUMNS, "atlas_status")


def cell_atlas_taps() -> tuple:
    """The taps a cell's extraction takes its atlas with."""
    from deffcore.extraction.atlas import atlas_taps

    return atlas_taps()


def cell_rows(taps: tuple, pooled: Any) -> Any:
    """The atlas rows of a cell's extraction (None when some passage did not run there)."""
    for tap in taps:
        if pooled is not None and pooled.lengths is not None and tap.n == pooled.n:
            return tap.rows(pooled.lengths)
    return None


def keep_cell_rows(spec: Any, rows: Any) -> None:
    """Driver side: keep a worker's atlas rows beside the cell's cache entry just written."""
    from deffcore.extraction.atlas import write_rows

    if rows is not None:
        write_rows(spec, rows)


def atlas_columns(spec: Any, pooled: Any, computed: bool) -> dict[str, Any]:
    """The atlas columns of a landed cell, from the rows kept beside its entry."""
    from deffcore.extraction.atlas import read_rows
    from deffcore.measures.atlas import columns_of

    rows = read_rows(spec)
    if rows is None or rows.n != pooled.n:
        return {**dict.fromkeys(ATLAS_COLUMNS), "atlas_status": "missing"}
    return {**columns_of(rows), "atlas_status": "done" if computed else "stored"}
