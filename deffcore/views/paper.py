"""The paper's published values: display only, never a result.

`deffcore/data/paper_reference.csv` is the project's own copy of the values that *The Residual
Stream's Effective Depth* (Gahtan, Galil, Bronstein, 2026) publishes, one row per value with
its source table: columns `source, model, layers, dataset, setting, quantity, value, note`
(e.g. `Table 2, Pythia-70M, 6, FineWeb-Edu, default, gap_pct, 28.2,`). It covers Tables 1, 2 and
S3-S22 and Figure S6, including Table S7 (initialisation-only norm probes), Table S8 (short-
pretraining norm probes), Table S14 (residual carry), S17 (per-model pruning tolerance), S18
(its correlation with D_eff/L), S20/S21 (benchmark correlations), S22 (Gromov–Wasserstein).
Rows of a whole panel (S18, S20, S21) have model "panel"; S20/S21 keep the task in `dataset`
and the subset ("all 16", "drop Gemma") in `setting`; S18 keeps the subset in `setting`.

`$DEFF_PAPER_REFERENCE` may point at another CSV of the same columns (for a newer version of
the values); nothing depends on it: without it the packaged copy is read.
"""

from __future__ import annotations

import csv
import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from deffcore.core.errors import DeffError
from deffcore.core.files import DATA_DIR

if TYPE_CHECKING:
    import pandas as pd

PACKAGED_PATH = DATA_DIR / "paper_reference.csv"
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


def paper_table() -> pd.DataFrame | None:
    """Every published value as a DataFrame (the CSV's columns; a copy, free to change), None
    when the CSV is not found (a copy of the project without it: pages say so and go on)."""
    path = paper_reference_path()
    if path is None or not path.is_file():
        return None
    return _paper_frame(str(path), path.stat().st_mtime_ns).copy()


@lru_cache(maxsize=4)
def _paper_frame(path: str, mtime_ns: int) -> pd.DataFrame:
    import pandas as pd

    return pd.read_csv(path)


#: Where Figure 1's published default-pooling gaps come from, in order of preference.
DEFAULT_GAP_TABLES: tuple[str, ...] = ("Table 2", "Table S4", "Table S5", "Table S6", "Table S17")


def paper_default_gaps(paper: pd.DataFrame) -> pd.DataFrame:
    """One published default-pooling gap per model (no intervention), as in the paper's Figure 1.

    `paper`: `paper_table()`. Table 2 first, then the appendix tables for models that Table 2
    lacks (Gemma, Mistral, ...), in the order of `DEFAULT_GAP_TABLES`.
    """
    order = list(DEFAULT_GAP_TABLES)
    pub = paper[
        (paper["quantity"] == "gap_pct")
        & (paper["setting"] == "default")
        & (paper["note"].isna() | (paper["note"] == "intervention: none"))
        & paper["source"].isin(order)
    ].copy()
    pub["rank"] = pub["source"].map(order.index)
    return pub.sort_values("rank").drop_duplicates("model", keep="first").drop(columns="rank")


#: Where the paper's pooling controls are published (Figure 2's values).
CONTROL_TABLES: tuple[str, ...] = ("Table S4", "Table S5", "Table S6")


def paper_controls(paper: pd.DataFrame) -> pd.DataFrame:
    """The published gap to F_L of every (model, pooling control), no intervention, first
    table of `CONTROL_TABLES` that has it: columns `model`, `setting` (the pooling), `value`,
    `source` and the rest of the CSV's. `paper`: `paper_table()`."""
    pub = paper[(paper["quantity"] == "gap_pct") & paper["source"].isin(CONTROL_TABLES)]
    pub = pub[pub["note"].isna() | (pub["note"] == "intervention: none")]
    return pub.drop_duplicates(["model", "setting"], keep="first")


def _float(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def paper_pivot(source: str) -> dict[tuple[str, str, str], dict[str, float]]:
    """One table as {(model, dataset, setting): {quantity: value}} (values that parse).

    E.g. `paper_pivot("Table S18")[("panel", "FineWeb-Edu", "drop both")]["k110_pearson_r"]`
    is -0.92, `paper_pivot("Table S17")[("Mistral-7B", "FineWeb-Edu", "default")]["k_1.10"]`
    is 1. Tables whose rows differ only in the note (S7, S8) need `paper_norm_probe`.
    """
    out: dict[tuple[str, str, str], dict[str, float]] = {}
    for r in paper_rows(source):
        value = _float(r["value"])
        if value is not None:
            out.setdefault((r["model"], r["dataset"], r["setting"]), {})[r["quantity"]] = value
    return out


def note_intervention(note: str) -> str | None:
    """'intervention: no post; short pretraining; ...' -> 'no post' (None when absent)."""
    head = note.split(";")[0].strip()
    return head.removeprefix("intervention:").strip() if head.startswith("intervention:") else None


def note_sd(note: str) -> float | None:
    """The standard deviation a note states ('...; sd 0.6') or None."""
    import re

    m = re.search(r"\bsd ([0-9.]+)", note)
    return float(m.group(1)) if m else None


def paper_norm_probe(source: str) -> dict[str, dict[str, dict[str, float | None]]]:
    """A norm-probe table (Table S7 or S8) as {intervention label: {column: {value, sd}}}.

    Columns: the pooling controls' gap% (default, first_non_bos, token_normed, top1_pc,
    top3_pc), max_pos0_ratio and, in Table S8, val_loss. Intervention labels as the paper
    writes them ("none", "no post", "no QK", "no post/no QK").
    """
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for r in paper_rows(source):
        label = note_intervention(r["note"])
        value = _float(r["value"])
        if label is None or value is None:
            continue
        column = r["setting"] if r["quantity"] == "gap_pct" else r["quantity"]
        out.setdefault(label, {})[column] = {"value": value, "sd": note_sd(r["note"])}
    return out
