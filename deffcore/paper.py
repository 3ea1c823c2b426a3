"""The paper's published values: display only, never a result.

`deffcore/data/paper_reference.csv` is the project's own copy of the values that *The Residual
Stream's Effective Depth* (Gahtan, Galil, Bronstein, 2026) publishes, one row per value with
its source table: columns `source, model, layers, dataset, setting, quantity, value, note`
(e.g. `Table 2, Pythia-70M, 6, FineWeb-Edu, default, gap_pct, 28.2,`). It covers Tables 1, 2 and
S3-S17, including Table S7 (initialisation-only norm probes) and Table S14 (residual carry).

`$DEFF_PAPER_REFERENCE` may point at another CSV of the same columns (for a newer version of
the values); nothing depends on it: without it the packaged copy is read.
"""

from __future__ import annotations

import csv
import os
import re
from functools import lru_cache
from pathlib import Path

from deffcore.errors import DeffError

PACKAGED_PATH = Path(__file__).resolve().parent / "data" / "paper_reference.csv"
COLUMNS: tuple[str, ...] = (
    "source",
    "model",
    "layers",
    "dataset",
    "setting",
    "quantity",
    "value",
    "note",
)


def paper_reference_path() -> Path:
    """The CSV in use: `$DEFF_PAPER_REFERENCE` when it names a file, else the packaged copy."""
    env = os.environ.get("DEFF_PAPER_REFERENCE")
    if env and Path(env).expanduser().is_file():
        return Path(env).expanduser()
    return PACKAGED_PATH


def require_paper_reference_path() -> Path:
    """The CSV in use; raises DeffError when it is missing (a broken install)."""
    path = paper_reference_path()
    if not path.is_file():
        raise DeffError(
            f"The paper's reference values are missing from this install ({path}); reinstall "
            "the project."
        )
    return path


@lru_cache(maxsize=4)
def _read(path: str, mtime_ns: int) -> tuple[dict[str, str], ...]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise DeffError(
                f"The paper reference file {path} lacks the column(s) {', '.join(missing)}."
            )
        return tuple({c: (row.get(c) or "") for c in COLUMNS} for row in reader)


def paper_rows(source: str | None = None) -> list[dict[str, str]]:
    """Every published value as a dict of the CSV's columns (strings), optionally of one table."""
    path = require_paper_reference_path()
    rows = _read(str(path), path.stat().st_mtime_ns)
    return [dict(r) for r in rows if source is None or r["source"] == source]


#: Where a model's published default-pooling gap is read first (paper Figure 1: Table 2, then
#: the appendix tables for the models Table 2 lacks).
DEFAULT_GAP_TABLES: tuple[str, ...] = ("Table 2", "Table S4", "Table S5", "Table S6", "Table S17")


def published_default_gaps() -> list[dict[str, str]]:
    """One published default-pooling gap per model, without intervention (paper Figure 1), in
    DEFAULT_GAP_TABLES order: the first table that has the model wins."""
    rows = [
        r
        for r in paper_rows()
        if r["quantity"] == "gap_pct"
        and r["setting"] == "default"
        and r["note"] in ("", "intervention: none")
        and r["source"] in DEFAULT_GAP_TABLES
    ]
    rows.sort(key=lambda r: DEFAULT_GAP_TABLES.index(r["source"]))
    seen: set[str] = set()
    return [r for r in rows if not (r["model"] in seen or seen.add(r["model"]))]


def model_family(spec: str) -> str:
    """`Pythia-70M` -> `Pythia`, `EleutherAI/pythia-70m` -> `pythia`, `random:x:1` ->
    `random-weight null` (how the gap chart groups its bars)."""
    if spec.startswith("random:"):
        return "random-weight null"
    name = spec.rstrip("/").split("/")[-1].removesuffix(".gguf")
    return re.sub(r"-[^-]*\d[^-]*$", "", name) if "-" in name else name
