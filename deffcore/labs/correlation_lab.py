"""The correlation lab (paper Tables S18, S20, S21, Figure S6): a depth number across models
against a per-model quantity, with the robustness rows the paper reports.

Three kinds of y (`deffcore.labs.panels` says where each number comes from):

- **scores** a user supplies as a CSV (model, task, score; `deffcore.labs.scores`), one
  correlation per task against x from the model panel (cached runs, a sweep file, the paper's
  models): the structure of Tables S20 (all models) and S21 (leave one family out);
- **pruning tolerance** f_110 and k_110 of the stored pruning checks (Tables S17/S18), x their
  own D_eff/L, optionally with the paper's Table S17 models beside ours;
- **trajectory geometry** (geodesic / Euclidean efficiency) of every cached run (Figure S6);
- **the depth-use atlas** (SPEC 16): per model, the atlas columns of a run (share of blocks past
  the phase point, mean BI of the second half, the depth Gromov et al. keep at a 10% angular
  budget, late-over-early relative contribution) against the same run's D_eff/L
  (`atlas_correlations`; a column with too few models is reported with its points, not refused).

Each correlation is `deffcore.measures.correlation.correlate` (Pearson, Spearman with scipy's
t p and the exact permutation p, n, leave-one-out and leave-one-family-out rows, a small-n
warning).

**Table S18 from the paper's own values** (`s18_check`). Table S17 prints six models' k_1.10;
Table S18's panel has eight (it drops "Qwen3.5-4B", which S17 does not list). Two results:
- *recomputed*: the four S18 rows over S17's six models alone (what can strictly be
  recomputed; "drop Qwen3.5-4B" is then the full six);
- *reconstructed*: S17's six plus Qwen3.5-4B (L = 32, D_eff/L = 0.034, Table S13) and
  Qwen3.5-27B (L = 64, D_eff/L = 0.021, Table S13), both with k_1.10 = 2. Those two k are
  *inferred*, not published: a search over an eighth and ninth model's (L, D_eff/L, k) found
  these the only values that reproduce the printed table; with them 29 of S18's 32 printed
  numbers agree to their printed precision (|ours - printed| <= half a unit of the last digit),
  with Spearman p from scipy's t approximation (the exact permutation p does not match the
  printed ones). The three that differ by one unit in the last digit: rho(k_1.10) is -0.9045
  in "drop OLMo-2-1B" and "drop Qwen3.5-4B" (printed -0.91) and the Pearson p of f_1.10 in
  "drop Qwen3.5-4B" is 0.0246 (printed 0.03), consistent with the paper correlating
  unrounded D_eff/L values where we have S17's three decimals.

**The caption contradicts the rows** (`s18_endpoint_conflict`). S18's caption says
its leave-one-out subsets "drop the largest- and smallest-D_eff/L endpoints"; its rows drop
OLMo-2-1B (0.070, the largest) and Qwen3.5-4B (0.034), but the panel's smallest D_eff/L is
Qwen3.5-27B (0.021, Table S13). The printed numbers follow the row labels: of the 16 values
of the two rows concerned, dropping Qwen3.5-4B reproduces 14, dropping Qwen3.5-27B (the
caption's reading) 3. With the inferred k_1.10, Qwen3.5-4B has the panel's largest f_1.10
(2/32), which may be the endpoint the authors meant. Both readings are computed, never assumed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from deffcore.core.errors import DeffError, InvalidArgumentError
from deffcore.labs.panels import (
    SOURCES,
    X_QUANTITIES,
    atlas_panel,
    geometry_panel,
    model_key,
    model_panel,
    paper_pruning_rows,
    pruning_panel,
)
from deffcore.measures.atlas import ATLAS_COLUMNS
from deffcore.measures.correlation import MIN_N, correlate
from deffcore.views.paper import paper_pivot, paper_rows

PRUNING_Y: tuple[str, ...] = ("f_110", "k_110")
GEOMETRY_Y: tuple[str, ...] = ("geodesic_efficiency", "euclidean_efficiency")
ATLAS_Y: tuple[str, ...] = ATLAS_COLUMNS
Y_BUILTIN: tuple[str, ...] = PRUNING_Y + GEOMETRY_Y + ATLAS_Y

#: Table S18's subsets: name -> models dropped from the panel.
S18_SUBSETS: dict[str, tuple[str, ...]] = {
    "full panel": (),
    "drop OLMo-2-1B": ("OLMo-2-1B",),
    "drop Qwen3.5-4B": ("Qwen3.5-4B",),
    "drop both": ("OLMo-2-1B", "Qwen3.5-4B"),
}
#: The two S18 panel models Table S17 does not list; k_110 INFERRED (module docstring).
S18_INFERRED: tuple[dict[str, Any], ...] = (
    {"model": "Qwen3.5-4B", "family": "Qwen", "layers": 32, "deff_over_L": 0.034, "k_110": 2},
    {"model": "Qwen3.5-27B", "family": "Qwen", "layers": 64, "deff_over_L": 0.021, "k_110": 2},
)
for _row in S18_INFERRED:
    _row["f_110"] = _row["k_110"] / _row["layers"]
    _row["source"] = "inferred (D_eff/L: Table S13; k_1.10 not published)"


def correlate_points(
    points: Sequence[dict[str, Any]], x: str, y: str, *, label: str = "model"
) -> dict[str, Any]:
    """`correlate` over points carrying `x`, `y`, `family` and `label`; plus the points."""
    result = correlate(
        [p[x] for p in points],
        [p[y] for p in points],
        families=[p.get("family") or "other" for p in points],
        labels=[str(p[label]) for p in points],
    )
    keep = ("model", "family", "source", "dataset", "key", "label")
    return {
        "x": x,
        "y": y,
        **result.to_dict(),
        "points": [{**{k: p[k] for k in keep if k in p}, "x": p[x], "y": p[y]} for p in points],
    }


def _usable(rows: Sequence[dict[str, Any]], *names: str) -> list[dict[str, Any]]:
    def ok(v: Any) -> bool:
        return isinstance(v, int | float) and math.isfinite(v)

    return [r for r in rows if all(ok(r.get(n)) for n in names)]


class TooFewModelsError(DeffError):
    """Fewer models than a correlation needs (not bad input: measure or store more)."""


def _too_few(n: int, what: str) -> TooFewModelsError:
    return TooFewModelsError(f"Only {n} {what}; a correlation needs at least {MIN_N}.")


# ---------------------------------------------------------------------------------------------
# Scores (Tables S20, S21)


def score_correlations(
    table: Any,
    *,
    x: str = "deff_over_L",
    sources: Sequence[str] = SOURCES,
    sweep_file: str | None = None,
    metric: str = "cka",
    ignore_unknown: bool = False,
) -> dict[str, Any]:
    """One correlation per task of a `ScoreTable` against x of the model panel."""
    if x not in X_QUANTITIES:
        raise InvalidArgumentError(f"Unknown x {x!r}; choose one of {', '.join(X_QUANTITIES)}.")
    panel = model_panel(sources, sweep_file=sweep_file, metric=metric)
    usable = {k: r for k, r in panel.items() if _usable([r], x)}
    unknown = [m for m in table.models if model_key(m) not in usable]
    if unknown and not ignore_unknown:
        raise InvalidArgumentError(
            f"The scores name model(s) with no {x} in the panel ({', '.join(sources)}): "
            f"{', '.join(unknown[:8])}{' ...' if len(unknown) > 8 else ''}; measure them, add "
            "a source, or leave them out (--ignore-unknown; in the app, the checkbox)."
        )
    results = []
    for task, by_model in table.scores.items():
        points = []
        for model, score in by_model.items():
            row = usable.get(model_key(model))
            if row is not None:
                family = table.families.get(model) or row.get("family") or "other"
                points.append({**row, "model": model, "family": family, "score": score})
        if len(points) < MIN_N:
            results.append(
                {"task": task, "n": len(points), "skipped": str(_too_few(len(points), "models"))}
            )
            continue
        results.append({"task": task, **correlate_points(points, x, "score")})
    return {
        "lab": "correlation",
        "kind": "scores",
        "x": x,
        "metric": metric,
        "sources": list(sources),
        "scores_file": table.path,
        "unknown_models": unknown,
        "results": results,
        "paper": paper_score_tables(),
    }


def paper_score_tables() -> dict[str, list[dict[str, Any]]]:
    """Tables S20 and S21 as published: rows {task, setting, quantity: value}."""
    out = {}
    for source in ("Table S20", "Table S21"):
        out[source] = [
            {"task": task, "setting": setting, **values}
            for (_, task, setting), values in paper_pivot(source).items()
        ]
    return out


# ---------------------------------------------------------------------------------------------
# Pruning tolerance (Tables S17, S18) and trajectory geometry (Figure S6)


def pruning_correlations(*, x: str = "deff_over_L", with_paper: bool = False) -> dict[str, Any]:
    """f_110 and k_110 of the stored pruning checks against their own D_eff/L (or gap%)."""
    if x not in ("deff_over_L", "gap_pct"):
        raise InvalidArgumentError(
            f"A pruning check records deff_over_L and gap_pct; --x {x} is not among them."
        )
    rows = _usable(pruning_panel(with_paper=with_paper), x, "f_110")
    if len(rows) < MIN_N:
        raise _too_few(
            len(rows),
            "models with a stored pruning check (run `python -m deffcore pruning --model M` "
            "for more, or add --with-paper for the paper's Table S17 models)",
        )
    return {
        "lab": "correlation",
        "kind": "pruning",
        "x": x,
        "results": [correlate_points(rows, x, y) for y in PRUNING_Y],
        "paper": s18_check(),
    }


def geometry_correlations(*, x: str = "deff_over_L", metric: str = "cka") -> dict[str, Any]:
    """Geodesic and Euclidean efficiency of every cached run against its D_eff/L (Fig. S6)."""
    if x not in X_QUANTITIES:
        raise InvalidArgumentError(f"Unknown x {x!r}; choose one of {', '.join(X_QUANTITIES)}.")
    rows = geometry_panel(metric)
    results = []
    for y in GEOMETRY_Y:
        points = _usable(rows, x, y)
        if len(points) < MIN_N:
            raise _too_few(len(points), "cached runs of trained weights (measure more models)")
        results.append(correlate_points(points, x, y, label="label"))
    published = paper_pivot("Figure S6")
    return {
        "lab": "correlation",
        "kind": "geometry",
        "x": x,
        "metric": metric,
        "results": results,
        "paper": {
            "figure_s6_pearson_r": next(iter(published.values()))[
                "pearson_r_deff_over_L_vs_geodesic_efficiency"
            ],
            "note": "The paper does not define its geodesic efficiency; ours is documented "
            "in deffcore.measures.geometry (SPEC 13), so the two r need not measure the "
            "same thing.",
        },
    }


def atlas_correlations(
    *, x: str = "deff_over_L", metric: str = "cka", ys: Sequence[str] = ATLAS_Y
) -> dict[str, Any]:
    """Each atlas column of the atlas panel's models against their own runs' x (SPEC 16)."""
    if x not in X_QUANTITIES:
        raise InvalidArgumentError(f"Unknown x {x!r}; choose one of {', '.join(X_QUANTITIES)}.")
    bad = [y for y in ys if y not in ATLAS_Y]
    if bad:
        raise InvalidArgumentError(f"Unknown atlas column(s) {', '.join(bad)}.")
    panel = atlas_panel(metric)
    results = []
    for y in ys:
        points = _usable(panel, x, y)
        if len(points) < MIN_N:
            why = _too_few(len(points), "models with a depth-use atlas (measure more models)")
            kept = ("model", "family", "source", "label")
            shown = [{**{k: p[k] for k in kept if k in p}, "x": p[x], "y": p[y]} for p in points]
            results.append({"x": x, "y": y, "n": len(points), "skipped": str(why), "points": shown})
            continue
        results.append(correlate_points(points, x, y, label="label"))
    return {
        "lab": "correlation",
        "kind": "atlas",
        "x": x,
        "metric": metric,
        "results": results,
        "panel": panel,
    }


# ---------------------------------------------------------------------------------------------
# Table S18 from the paper's own per-model values


def table_s18(
    rows: Sequence[dict[str, Any]], subsets: dict[str, tuple[str, ...]] | None = None
) -> list[dict[str, Any]]:
    """Table S18's four subsets over `rows` (model, layers, deff_over_L, k_110); `subsets`
    (name -> models dropped) defaults to the paper's row labels, `S18_SUBSETS`.

    f_1.10 is computed as k_110 / layers, not taken as printed: S17 prints 1/32 as 0.031,
    which would break the tie with 2/64 = 0.03125 that the published Spearman rho keeps.
    """
    out = []
    for subset, dropped in (subsets or S18_SUBSETS).items():
        kept = [r for r in rows if r["model"] not in dropped]
        entry: dict[str, Any] = {"subset": subset, "n": len(kept)}
        x = [r["deff_over_L"] for r in kept]
        for prefix, y in (
            ("frac110", [r["k_110"] / r["layers"] for r in kept]),
            ("k110", [r["k_110"] for r in kept]),
        ):
            c = correlate(x, y)
            entry.update(
                {
                    f"{prefix}_pearson_r": c.pearson_r,
                    f"{prefix}_pearson_p": c.pearson_p,
                    f"{prefix}_spearman_rho": c.spearman_rho,
                    f"{prefix}_spearman_p": c.spearman_p_t,
                    f"{prefix}_spearman_p_exact": c.spearman_p_exact,
                }
            )
        out.append(entry)
    return out


def printed_decimals(text: str) -> int:
    """Decimals the paper prints a value with: the CSV's own, at least 2 ('-0.9' was -0.90)."""
    return max(2, len(text.partition(".")[2]))


def agrees(ours: float, printed: str) -> bool:
    """|ours - printed| <= half a unit of the last printed digit."""
    return abs(ours - float(printed)) <= 0.5 * 10.0 ** -printed_decimals(printed) + 1e-12


def s18_check() -> dict[str, Any]:
    """Table S18 as published beside our recomputation (six S17 models) and reconstruction
    (the six plus the two inferred models); see the module docstring."""
    six = paper_pruning_rows()
    recomputed = {r["subset"]: r for r in table_s18(six)}
    reconstructed = {r["subset"]: r for r in table_s18([*six, *S18_INFERRED])}
    rows = []
    for r in paper_rows("Table S18"):
        if r["quantity"] == "n_models":
            continue
        ours = reconstructed[r["setting"]][r["quantity"]]
        rows.append(
            {
                "subset": r["setting"],
                "quantity": r["quantity"],
                "published": float(r["value"]),
                "reconstructed": ours,
                "recomputed_six": recomputed[r["setting"]][r["quantity"]],
                "agrees": agrees(ours, r["value"]),
            }
        )
    return {
        "table": "Table S18",
        "rows": rows,
        "agree": sum(r["agrees"] for r in rows),
        "total": len(rows),
        "recomputed_six": list(recomputed.values()),
        "reconstructed_eight": list(reconstructed.values()),
        "panel_six": six,
        "inferred": list(S18_INFERRED),
        "note": "Recomputed: S17's six models alone. Reconstructed: with Qwen3.5-4B and "
        "Qwen3.5-27B added, whose k_1.10 = 2 is inferred (not published). Spearman p: scipy's "
        "t approximation, as the paper's; the exact permutation p is in the tables.",
        "conflict": s18_endpoint_conflict(),
    }


#: The words of Table S18's caption about its leave-one-out subsets.
S18_CAPTION = "drop the largest- and smallest-D_eff/L endpoints"


def s18_endpoint_conflict() -> dict[str, Any]:
    """Table S18's caption against its own numbers (module docstring): the panel's largest
    and smallest D_eff/L models, the one the rows drop instead, and how many printed values of
    the rows that drop it are reproduced under each reading ("labels": as the rows name it;
    "caption": the smallest-D_eff/L model dropped instead), with one sentence saying so."""
    panel = [*paper_pruning_rows(), *S18_INFERRED]
    by_x = sorted(panel, key=lambda r: r["deff_over_L"])
    smallest, largest = by_x[0], by_x[-1]
    labelled = S18_SUBSETS["drop both"]
    other = next(m for m in labelled if m != largest["model"])
    named = {r["model"]: r for r in panel}[other]
    caption = {k: tuple(smallest["model"] if m == other else m for m in v)
               for k, v in S18_SUBSETS.items()}  # fmt: skip
    readings = {"labels": table_s18(panel), "caption": table_s18(panel, caption)}
    concerned = [k for k, v in S18_SUBSETS.items() if other in v]
    printed = [r for r in paper_rows("Table S18") if r["quantity"] != "n_models"]
    agree = {}
    for reading, table in readings.items():
        ours = dict(zip(S18_SUBSETS, table, strict=True))
        agree[reading] = sum(
            agrees(ours[r["setting"]][r["quantity"]], r["value"])
            for r in printed
            if r["setting"] in concerned
        )
    total = sum(r["setting"] in concerned for r in printed)
    f_max = max(panel, key=lambda r: r["k_110"] / r["layers"])
    sentence = (
        f'Table S18\'s caption says its leave-one-out subsets "{S18_CAPTION}", but its rows '
        f"drop {largest['model']} (D_eff/L {largest['deff_over_L']:.3f}, the largest) and "
        f"{other} ({named['deff_over_L']:.3f}), while the panel's smallest is "
        f"{smallest['model']} ({smallest['deff_over_L']:.3f}, Table S13); the printed numbers "
        f"follow the row labels: of the {total} values of the rows that drop {other}, "
        f"dropping {other} reproduces {agree['labels']} and dropping {smallest['model']} "
        f"{agree['caption']}."
    )
    if f_max["model"] == other:
        sentence += (
            f" With the inferred k_1.10, {other} has the panel's largest f_1.10 "
            f"({f_max['k_110']}/{f_max['layers']}), perhaps the endpoint meant."
        )
    return {
        "caption": S18_CAPTION,
        "largest": largest["model"],
        "smallest": smallest["model"],
        "dropped_instead": other,
        "values": total,
        "agree_labels": agree["labels"],
        "agree_caption": agree["caption"],
        "sentence": sentence,
    }
