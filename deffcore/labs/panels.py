"""Where the correlation lab's per-model numbers come from: panels of models and of runs.

Model panels (one row per model, the x of a correlation with a user's scores):

- `cached`: the measured runs in the cache (complete, trained weights, no intervention; the
  random-weight kinds of RANDOM_WEIGHTS, `random:...` and the `tiny-...` test models, never). A
  model measured several times counts once: its run with the largest N, the newest among equal
  N (the best measurement, not an average of a quick test with a real run). Numbers at the
  default pooling and the lab's metric: deff, deff_over_L, gap_pct, rho1.
- `sweep`: a sweep's result file, the `python -m deffcore sweep --json` object ({"cells":
  [...]}) or a CSV with columns model, deff_over_L (and optionally gap_pct, status,
  intervention). Landed cells (status done or cached, or no status column) of trained models
  with no intervention; a model with several cells gets their mean (`runs` counts them: a
  sweep's cells of one model are replicates over seeds or datasets).
- `paper`: the paper's published models (`deffcore.work.sweep.paper_models`): deff_over_L and
  gap_pct where the paper prints them.

A model in several sources takes the first of cached, sweep, paper (your own measurement
first); `source` says which. Names are matched case-insensitively, a hub id by its last part
("meta-llama/Llama-3.1-8B" matches "Llama-3.1-8B").

Point panels (one row per point, both x and y from the same place):

- `pruning_panel`: stored pruning checks (`deffcore.labs.store`, lab "pruning"), one per
  model (the newest of those with the most held-out passages), x = D_eff/L of the check's own
  measured passages, y = k_110 / f_110; optionally the paper's Table S17 rows beside them.
- `geometry_panel`: every cached run of trained weights (model-dataset pairs, as the paper's
  Figure S6), x = its D_eff/L, y = its geodesic efficiency (`deffcore.measures.geometry`).
- `atlas_panel`: one row per trained model whose run carries a depth-use atlas (SPEC 16):
  cached runs with their stored atlas (the largest N, then the newest), then the shipped
  precomputed runs (`deffcore.views.run.load_gallery`) for models not measured here; x = the
  run's own D_eff/L (gap%, rho1, deff), y = the atlas columns
  (`deffcore.measures.atlas.ATLAS_COLUMNS`) of the same run and passages.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from deffcore.core.checks import csv_rows
from deffcore.core.errors import InvalidArgumentError
from deffcore.extraction import cache
from deffcore.extraction.atlas import read_rows
from deffcore.inputs.model import Kind, ModelSpec
from deffcore.labs.store import list_results
from deffcore.lenses.diagnostics_store import spec_from_fields
from deffcore.measures.atlas import columns_of
from deffcore.measures.depth import depth_summary
from deffcore.measures.geometry import geodesic_efficiency
from deffcore.runs.measure import Measurement
from deffcore.views.models_overview import model_family, paper_models
from deffcore.views.paper import paper_rows

SOURCES: tuple[str, ...] = ("cached", "sweep", "paper")
#: Headline numbers a model panel row may carry (paper rows: deff_over_L and gap_pct only).
X_QUANTITIES: tuple[str, ...] = ("deff_over_L", "gap_pct", "rho1", "deff")
MAX_SWEEP_BYTES = 50 * 2**20


def model_key(name: str) -> str:
    """The name a model is matched by: lower case, a hub id's organisation dropped."""
    name = str(name).strip()
    if "/" in name and not name.startswith((".", "/", "~")) and name.count("/") == 1:
        name = name.split("/", 1)[1]
    return name.lower()


def _complete_runs() -> list[dict[str, Any]]:
    return [r for r in cache.list_runs() if r.get("status") == "complete"]


def _measurement(meta: dict[str, Any], metric: str) -> Any:
    """The Measurement of a cached run, read by key (None when its states are unreadable)."""
    found = cache._read_entry(meta["key"])  # by key, as deffcore.work.sweep.cached_model_row
    if found is None:
        return None
    return Measurement(spec=spec_from_fields(meta["spec"]), pooled=found[0], metric=metric)


#: Kinds of model spec whose weights are random (the null `random:<m>:<seed>` and the tiny
#: test models): never a point of a panel, which compares trained models.
RANDOM_WEIGHTS: tuple[Kind, ...] = (Kind.RANDOM, Kind.TINY)


def _trained_plain(spec: dict[str, Any]) -> bool:
    return ModelSpec.stored(spec.get("model", "")).kind not in RANDOM_WEIGHTS and (
        spec.get("intervention", "none") == "none"
    )


def _run_row(source: str, spec: Any, run: Any, key: str, s: Any) -> dict[str, Any]:
    """A run's panel row: its model and dataset (`spec`), size (`run.layers`, `run.n`), key
    and the default pooling's depth summary `s`."""
    return {
        "model": spec["model"],
        "family": model_family(spec["model"]),
        "source": source,
        "layers": run.layers,
        "n": run.n,
        "dataset": spec["dataset"],
        "key": key,
        "deff": s.deff,
        "deff_over_L": s.deff_over_L,
        "gap_pct": s.gap_pct,
        "rho1": s.rho1,
    }


def _cached_row(meta: dict[str, Any], m: Any) -> dict[str, Any]:
    spec = {"model": m.spec.model, "dataset": m.spec.dataset}
    return _run_row("cached", spec, m, meta["key"], m.summary("default"))


def _best_cached(make_row: Callable[[dict[str, Any]], dict[str, Any] | None]) -> list[dict]:
    """One row per model over the complete cached runs of trained weights without
    intervention: `make_row(meta)` (None passes a run over) of its run with the largest N,
    the newest among equal N."""
    best: dict[str, dict[str, Any]] = {}
    for meta in _complete_runs():  # newest first
        spec = meta.get("spec") or {}
        key = model_key(spec.get("model", ""))
        if not _trained_plain(spec) or (key in best and best[key]["n"] >= int(meta.get("n") or 0)):
            continue
        row = make_row(meta)
        if row is not None:
            best[key] = row
    return list(best.values())


def cached_panel(metric: str = "cka") -> list[dict[str, Any]]:
    """One row per cached model (largest N, then newest; see the module docstring)."""

    def row(meta: dict[str, Any]) -> dict[str, Any] | None:
        m = _measurement(meta, metric)
        return None if m is None else _cached_row(meta, m)

    return _best_cached(row)


def _read_user_file(path: str | Path, what: str) -> tuple[Path, str]:
    path = Path(path).expanduser()
    if not path.is_file():
        raise InvalidArgumentError(f"The {what} {path} does not exist or is not a file.")
    if path.stat().st_size > MAX_SWEEP_BYTES:
        raise InvalidArgumentError(f"The {what} {path} is larger than 50 MB.")
    try:
        return path, path.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise InvalidArgumentError(f"The {what} {path} cannot be read as UTF-8 text.") from err


def _sweep_cells(path: Path, text: str) -> list[dict[str, Any]]:
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except ValueError as err:
            raise InvalidArgumentError(f"The sweep file {path} is not valid JSON.") from err
        cells = data.get("cells") if isinstance(data, dict) else None
        if not isinstance(cells, list) or not all(isinstance(c, dict) for c in cells):
            raise InvalidArgumentError(
                f"The sweep file {path} has no list of cells (expected the object that "
                "`python -m deffcore sweep --json` prints)."
            )
        return cells
    if path.suffix.lower() != ".csv":
        raise InvalidArgumentError(f"The sweep file {path} must be a .json or .csv file.")
    table = csv_rows(text, f"The sweep file {path.name}")  # fields bounded, one sentence
    rows = [dict(zip(table[0], row, strict=False)) for row in table[1:]] if table else []
    if not rows or not {"model", "deff_over_L"} <= set(rows[0]):
        raise InvalidArgumentError(
            f"The sweep file {path} needs the columns model and deff_over_L and at least one row."
        )
    return rows


def _number(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError, OverflowError):  # 10**400 is no float
        return None
    return out if np.isfinite(out) else None


def sweep_panel(path: str | Path) -> list[dict[str, Any]]:
    """One row per model of a sweep result file (mean over its landed cells)."""
    path, text = _read_user_file(path, "sweep file")
    groups: dict[str, list[dict[str, Any]]] = {}
    for cell in _sweep_cells(path, text):
        if str(cell.get("status") or "done") not in ("done", "cached"):
            continue
        if not _trained_plain(
            {"model": cell.get("model") or "", "intervention": cell.get("intervention") or "none"}
        ):
            continue
        if _number(cell.get("deff_over_L")) is None:
            continue
        groups.setdefault(model_key(cell["model"]), []).append(cell)
    rows = []
    for cells in groups.values():
        row: dict[str, Any] = {
            "model": cells[0]["model"],
            "family": model_family(cells[0]["model"]),
            "source": "sweep",
            "runs": len(cells),
        }
        for q in ("deff_over_L", "gap_pct"):
            values = [v for v in (_number(c.get(q)) for c in cells) if v is not None]
            if values:
                row[q] = float(np.mean(values))
        rows.append(row)
    return rows


def paper_panel() -> list[dict[str, Any]]:
    """The paper's models with their published D_eff/L and gap% (display values)."""
    keep = ("model", "family", "layers", "deff_over_L", "gap_pct", "table")
    return [{**{k: m.get(k) for k in keep}, "source": "paper"} for m in paper_models()]


def model_panel(
    sources: Sequence[str] = SOURCES, *, sweep_file: str | None = None, metric: str = "cka"
) -> dict[str, dict[str, Any]]:
    """{model_key: row} over `sources`, the first source of cached, sweep, paper winning."""
    bad = [s for s in sources if s not in SOURCES]
    if bad:
        raise InvalidArgumentError(
            f"Unknown panel source(s) {', '.join(bad)}; choose from {', '.join(SOURCES)}."
        )
    rows = {
        "cached": lambda: cached_panel(metric),
        "sweep": lambda: sweep_panel(sweep_file) if sweep_file else [],
        "paper": paper_panel,
    }
    panel: dict[str, dict[str, Any]] = {}
    for source in (s for s in SOURCES if s in sources):  # in SOURCES' order: the first wins
        for row in rows[source]():
            panel.setdefault(model_key(row["model"]), row)
    return panel


# ---------------------------------------------------------------------------------------------
# Point panels


def paper_pruning_rows() -> list[dict[str, Any]]:
    """Table S17 of the paper, one row per model: layers, deff_over_L, gap_pct, ppl0, k_110,
    f_110 (as printed)."""
    by_model: dict[str, dict[str, Any]] = {}
    names = {"k_1.10": "k_110", "f_1.10": "f_110"}
    for r in paper_rows("Table S17"):
        row = by_model.setdefault(
            r["model"],
            {
                "model": r["model"],
                "family": model_family(r["model"]),
                "source": "Table S17",
                "layers": int(r["layers"]),
            },
        )
        row[names.get(r["quantity"], r["quantity"])] = float(r["value"])
    for row in by_model.values():
        row["k_110"] = int(row["k_110"])
    return list(by_model.values())


def stored_pruning_rows() -> list[dict[str, Any]]:
    """One row per model from the stored pruning checks (most held-out passages, then newest)."""
    best: dict[str, dict[str, Any]] = {}
    for record in list_results("pruning"):  # newest first
        d = record["result"]
        try:
            row = {
                "model": d["model"],
                "family": model_family(d["model"]),
                "source": "pruning",
                "layers": int(d["layers"]),
                "n": int(d["n"]),
                "n_heldout": int(d["n_heldout"]),
                "dataset": d.get("dataset"),
                "deff_over_L": float(d["deff_over_L"]),
                "gap_pct": float(d["gap_pct"]),
                "ppl0": float(d["ppl0"]),
                "k_110": int(d["k_110"]),
                "f_110": float(d["f_110"]),
                "key": record["key"],
            }
        except (KeyError, TypeError, ValueError):
            continue  # a result stored by an older version without these fields
        key = model_key(row["model"])
        if key not in best or row["n_heldout"] > best[key]["n_heldout"]:
            best[key] = row
    return list(best.values())


def pruning_panel(*, with_paper: bool = False) -> list[dict[str, Any]]:
    """Stored pruning checks of trained weights (never RANDOM_WEIGHTS specs), and the paper's
    Table S17 rows when `with_paper`."""
    rows = [r for r in stored_pruning_rows() if _trained_plain({"model": r["model"]})]
    if with_paper:
        mine = {model_key(r["model"]) for r in rows}
        rows += [r for r in paper_pruning_rows() if model_key(r["model"]) not in mine]
    return rows


def geometry_panel(metric: str = "cka") -> list[dict[str, Any]]:
    """Every cached run of trained weights without intervention: D_eff/L and its trajectory
    geometry (CKA-angle and Euclidean efficiency, mean turning angles)."""
    rows = []
    for meta in _complete_runs():
        if not _trained_plain(meta.get("spec") or {}):
            continue
        m = _measurement(meta, metric)
        if m is None or m.layers < 3:
            continue
        row = _cached_row(meta, m)
        geo = geodesic_efficiency(m.states("default"), metric=metric)
        row.update(
            geodesic_efficiency=geo.efficiency,
            euclidean_efficiency=geo.euclidean_efficiency,
            mean_turning=geo.mean_turning,
            euclidean_mean_turning=geo.euclidean_mean_turning,
            label=f"{m.spec.model} · {m.spec.dataset} · N={m.n}",
        )
        rows.append(row)
    return rows


def check_sources(text: str) -> tuple[str, ...]:
    """'cached,paper' -> ("cached", "paper"), refusing unknown names (one sentence)."""
    names = tuple(s.strip() for s in text.split(",") if s.strip())
    bad = [s for s in names if s not in SOURCES]
    if bad or not names:
        raise InvalidArgumentError(
            f"--sources must name some of {', '.join(SOURCES)}; got {text!r}."
        )
    return names


def _atlas_row(base: dict[str, Any], columns: dict[str, float]) -> dict[str, Any]:
    return {**base, **{k: float(v) for k, v in columns.items()}}


def cached_atlas_rows(metric: str = "cka") -> list[dict[str, Any]]:
    """Cached runs of trained weights with a stored atlas, one per model (largest N, newest)."""

    def row(meta: dict[str, Any]) -> dict[str, Any] | None:
        rows = read_rows(spec_from_fields(meta["spec"]))
        m = _measurement(meta, metric) if rows is not None else None
        if m is None or rows.n != m.n:
            return None
        return _atlas_row(_cached_row(meta, m), columns_of(rows))

    return _best_cached(row)


def precomputed_atlas_rows(metric: str = "cka") -> list[dict[str, Any]]:
    """The shipped precomputed runs of trained weights that carry an atlas."""
    from deffcore.views.run import load_gallery

    rows = []
    for view in load_gallery():
        found = view.atlas() if _trained_plain(view.spec) else None
        if found is None:
            continue
        try:
            s = depth_summary(view.similarity("default", metric))
        except KeyError:  # a snapshot without this metric
            continue
        base = _run_row("precomputed", view.spec, view, view.key, s)
        rows.append(_atlas_row(base, found.columns()))
    return rows


def atlas_panel(metric: str = "cka") -> list[dict[str, Any]]:
    """One row per trained model with an atlas: this machine's cached runs first, then the
    shipped precomputed runs (see the module docstring)."""
    panel: dict[str, dict[str, Any]] = {}
    for row in [*cached_atlas_rows(metric), *precomputed_atlas_rows(metric)]:
        panel.setdefault(model_key(row["model"]), row)
    for row in panel.values():
        row["label"] = f"{row['model']} · {row['source']} · N={row['n']}"
    return list(panel.values())
