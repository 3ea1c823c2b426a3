"""Tables of the further lenses that the app pages show (Tables S8, S17, S18, S20-S22, Fig. S6).

Each builder takes the plain dicts the library returns (what `--json` prints) and returns a
`pandas.DataFrame` with human column names; nothing is computed here beyond unit conversion
(radians to degrees) and picking fields, so a page shows exactly the library's numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from deffcore.measures.gw import PAPER_INIT
from deffcore.views.glossary import COLUMN_LABELS, human_columns
from deffcore.views.paper import paper_norm_probe, paper_pivot

#: The statistics of one correlation row, in display order.
STAT_COLUMNS: tuple[str, ...] = ("n", "pearson_r", "pearson_p", "spearman_rho", "spearman_p")
_LABELS = {
    "n": "n (models)",
    "pearson_p": "p (Pearson)",
    "spearman_p": "p (Spearman)",
    "spearman_p_t": "p (Spearman, t approx.)",
    "spearman_p_exact": "p (Spearman, exact)",
    "spearman_p_method": "Spearman p from",
}


def _named(frame: pd.DataFrame) -> pd.DataFrame:
    return human_columns(frame.rename(columns=_LABELS))


def correlation_summary(result: Mapping[str, Any]) -> pd.DataFrame:
    """One row: n, r, its p, rho, its reported p (exact for small n), both Spearman p and
    which one is reported."""
    keys = (*STAT_COLUMNS, "spearman_p_t", "spearman_p_exact", "spearman_p_method")
    return _named(pd.DataFrame([{k: result.get(k) for k in keys}]))


def _stat_rows(rows: Sequence[Mapping[str, Any]], lead: Sequence[str]) -> pd.DataFrame:
    keys = (*lead, *STAT_COLUMNS, "skipped")
    frame = pd.DataFrame([{k: r.get(k) for k in keys} for r in rows], columns=list(keys))
    if frame["skipped"].isna().all():
        frame = frame.drop(columns="skipped")
    return frame


def leave_one_out(result: Mapping[str, Any]) -> pd.DataFrame:
    """Every model left out in turn; `extreme` names the largest- and smallest-x models (the
    ones Table S18 drops)."""
    frame = _stat_rows(result["loo"], ("dropped",))
    ends = {v: k.replace("_", " ") for k, v in (result.get("extremes") or {}).items()}
    frame.insert(1, "extreme", [ends.get(d, "") for d in frame["dropped"]])
    return _named(frame.rename(columns={"dropped": "left out"}))


def leave_one_family_out(result: Mapping[str, Any]) -> pd.DataFrame:
    """Every family left out in turn (those leaving >= 3 models); a family of one model says
    that its row is that model's leave-one-out row."""
    rows = result.get("lofo") or []
    frame = _stat_rows(rows, ("dropped_family", "dropped"))
    frame["same as leaving out"] = [r.get("same_as_loo") or "" for r in rows]
    names = {"dropped_family": "family left out", "dropped": "models left out"}
    return _named(frame.rename(columns=names))


def points_frame(result: Mapping[str, Any]) -> pd.DataFrame:
    """The correlation's points: label, family, source, x and y under their own names."""
    rows = [
        {
            "model": p.get("label") or p.get("model"),
            "family": p.get("family"),
            "source": p.get("source"),
            result["x"]: p["x"],
            result["y"]: p["y"],
        }
        for p in result["points"]
    ]
    return human_columns(pd.DataFrame(rows))


def published_scores(paper: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, pd.DataFrame]:
    """Tables S20 and S21 as published ({table: frame}; rows task, setting, statistics)."""
    return {table: _named(pd.DataFrame(list(rows))) for table, rows in paper.items() if rows}


def pruning_tolerance(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per model (stored checks and/or Table S17): the numbers of Table S17."""
    keys = ("model", "source", "layers", "deff_over_L", "gap_pct", "ppl0", "k_110", "f_110",
            "n", "n_heldout", "dataset")  # fmt: skip
    frame = pd.DataFrame([{k: r.get(k) for k in keys} for r in rows], columns=list(keys))
    frame["source"] = frame["source"].replace(
        {"pruning": "this machine (stored check)", "Table S17": "paper (Table S17)"}
    )
    frame = frame.dropna(axis=1, how="all")
    return human_columns(frame.rename(columns={"n": "measured passages"}))


def ppl_k_frame(check: Mapping[str, Any]) -> pd.DataFrame:
    """A pruning check's (`pruning --json`) Table S17 curve: per skip count k (lowest BI
    first) PPL_k, PPL_k / PPL_0 and whether it is within the 1.10 tolerance."""
    from deffcore.labs.pruning import PPL_TOLERANCE

    ppl0 = check["ppl0"]
    rows = []
    for k, ppl in sorted(((int(k), v) for k, v in check["ppl_k"].items())):
        finite = isinstance(ppl, int | float) and math.isfinite(ppl)
        rows.append({
            "k skipped": k,
            "PPL_k": ppl,
            "PPL_k / PPL₀": ppl / ppl0 if finite else math.nan,
            f"≤ {PPL_TOLERANCE:.2f} PPL₀": bool(finite and ppl <= PPL_TOLERANCE * ppl0),
        })  # fmt: skip
    return pd.DataFrame(rows).set_index("k skipped")


def _degrees(radians: Any) -> float:
    return math.degrees(radians) if isinstance(radians, int | float) else math.nan


def geometry_frame(table: Mapping[str, Any]) -> pd.DataFrame:
    """From `aggregation_table`: per similarity metric, D_eff/L, the geodesic efficiency
    beside the orthogonal-update reference E_L and the mean turning angle (degrees); a last
    row for the Euclidean path of the pooled states (None values without states)."""
    deff = {r["metric"]: r["value_over_L"] for r in table["rows"] if r["aggregation"] == "deff"}
    reference = table["trajectory"]["reference_efficiency"]
    rows = [
        {
            "geometry": f"arccos {COLUMN_LABELS.get(metric, metric)}",
            "D_eff / L": deff.get(metric),
            "efficiency": g["efficiency"],
            "reference E_L": reference,
            "mean turning angle (°)": _degrees(g["mean_turning"]),
        }
        for metric, g in table["geometry"].items()
    ]
    traj = table["trajectory"]
    rows.append(
        {
            "geometry": "Euclidean (pooled states)",
            "D_eff / L": None,
            "efficiency": traj["euclidean_efficiency"],
            "reference E_L": None,
            "mean turning angle (°)": _degrees(traj["euclidean_mean_turning"]),
        }
    )
    return pd.DataFrame(rows).set_index("geometry")


GW_STATS: tuple[str, ...] = ("spearman_gw_cka", "spearman_lag_gw", "spearman_lag_cka")


def _paper_start(gw: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The figures of `gw` from the paper's start (POT's product coupling): `gw` itself when
    computed from it, its `paper` part when it carries one (the default start, SPEC 13.1),
    else None."""
    if gw.get("init") == PAPER_INIT:
        return gw
    paper = gw.get("paper")
    return paper if isinstance(paper, Mapping) and paper.get("init") == PAPER_INIT else None


def gw_paper_note(gw: Mapping[str, Any]) -> str | None:
    """None when `gw` may stand beside Table S22 (it has figures from the paper's start, POT's
    product coupling: its own or, for the default start, beside them), else the sentence
    saying why it is not compared."""
    if _paper_start(gw) is not None:
        return None
    init = gw.get("init")
    start = "an unrecorded start" if init is None else f"the start {init!r}"
    return (
        f"Not compared with Table S22: this GW matrix comes from {start}, the paper's numbers "
        f"from POT's default start ({PAPER_INIT!r}, the product coupling), which gives "
        "different local optima and different correlations."
    )


def _paper_gw_rows() -> list[dict[str, Any]]:
    return [
        {"model": f"{model} (paper)", **{k: values.get(k) for k in GW_STATS}}
        for (model, _, _), values in paper_pivot("Table S22").items()
    ]


def gw_beside_paper(gw: Mapping[str, Any]) -> pd.DataFrame:
    """A `gw_lens` result's Spearman correlations over layer pairs (first row, with its
    start); a default-start result's figures from the paper's start (the product coupling)
    below it; then the paper's Table S22 models, when there are figures from the paper's start
    (`gw_paper_note` says why not otherwise)."""
    ours = {
        "model": f"{gw['model']} (this run, n_gw = {gw['n_gw']})",
        "starting coupling": gw.get("init"),
        "layers": gw["layers"],
    }
    rows = [{**ours, **{k: gw[k] for k in GW_STATS}}]
    paper_start = _paper_start(gw)
    if paper_start is not None and paper_start is not gw:
        rows.append({**ours, "starting coupling": f"{PAPER_INIT} (the paper's start)",
                     **{k: paper_start[k] for k in GW_STATS}})  # fmt: skip
    if paper_start is not None:
        rows += [
            {**r, "starting coupling": "product (assumed; not stated)"} for r in _paper_gw_rows()
        ]
    frame = pd.DataFrame(rows, columns=["model", "starting coupling", "layers", *GW_STATS])
    return human_columns(frame.dropna(axis=1, how="all"))


def gw_paper_lines(gw: Mapping[str, Any]) -> list[str]:
    """The CLI's lines under a GW result: the paper's start's figures of this run (a
    default-start result) and Table S22's three figures per model, or the note why it is not
    compared."""
    note = gw_paper_note(gw)
    if note is not None:
        return [f"  {note}"]
    lines = []
    paper_start = _paper_start(gw)
    if paper_start is not gw and paper_start is not None:
        values = " / ".join(fmt_rho(paper_start.get(k)) for k in GW_STATS)
        lines.append(f"  this run from the paper's start (product): {values}")
    lines.append("  Table S22 (paper): rho(GW, CKA) / rho(|i-j|, GW) / rho(|i-j|, CKA)")
    for r in _paper_gw_rows():
        values = " / ".join(fmt_rho(r[k]) for k in GW_STATS)
        lines.append(f"    {r['model'].removesuffix(' (paper)')}: {values}")
    return lines


def fmt_rho(value: Any, spec: str = "+.2f") -> str:
    """A correlation (or its p, `spec` ".3g") as the CLI and the lens figures print it beside
    the paper's tables (a dash when undefined)."""
    return "—" if value is None or value != value else format(value, spec)


#: Table S8's columns as the page names them.
PRETRAIN_LABELS: dict[str, str] = {
    "gap_default": "default gap %",
    "gap_first_non_bos": "first non-BOS gap %",
    "gap_token_normed": "token-normed gap %",
    "gap_no_pos0": "no pos-0 gap %",
    "gap_top1_pc": "top-1 PC gap %",
    "gap_top3_pc": "top-3 PC gap %",
    "max_pos0_ratio": "max pos-0 ratio",
    "val_loss": "validation loss",
}


#: Table S8's decimals per column (as the paper prints them: a mean to 4 decimals beside the
#: paper's 1 claims a precision neither has), for the page's Styler.
PRETRAIN_FORMATS: dict[str, str] = {
    **{label: "{:.1f}" for key, label in PRETRAIN_LABELS.items() if key.startswith("gap_")},
    "max pos-0 ratio": "{:.2f}",
    "validation loss": "{:.2f}",
    "sd of default gap": "{:.1f}",
}


def pretrain_beside_paper(final: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Per variant two rows: ours (mean over seeds, and the sd of the default gap) and the
    paper's Table S8 (its printed values; empty where it prints none)."""
    rows = []
    for r in final:
        cols = [c for c in PRETRAIN_LABELS if c in r]
        ours = {"variant": r["variant"], "source": f"this machine ({r['seeds']} seeds)"}
        ours.update({PRETRAIN_LABELS[c]: r[c] for c in cols})
        ours["sd of default gap"] = r.get("gap_default_sd")
        paper = {"variant": r["variant"], "source": "paper (Table S8)"}
        paper.update({PRETRAIN_LABELS[c]: r.get(f"paper_{c}") for c in cols})
        paper["sd of default gap"] = r.get("paper_gap_default_sd")
        rows += [ours, paper]
    return pd.DataFrame(rows)


def paper_table_s8() -> pd.DataFrame:
    """Table S8 as published: per variant (the paper's names) each column's value, and the
    sd of the default gap."""
    rows = []
    for variant, columns in paper_norm_probe("Table S8").items():
        row = {"variant": variant}
        for col, label in PRETRAIN_LABELS.items():
            found = columns.get(col.removeprefix("gap_"))
            if found is not None:
                row[label] = found["value"]
        row["sd of default gap"] = (columns.get("default") or {}).get("sd")
        rows.append(row)
    return pd.DataFrame(rows)


_S18_Y = {"frac110": "f₁.₁₀", "k110": "k₁.₁₀"}
_S18_STAT = {"pearson_r": "Pearson r", "pearson_p": "p (Pearson)", "spearman_rho": "Spearman ρ",
             "spearman_p": "p (Spearman, t approx.)"}  # fmt: skip


def s18_table(check: Mapping[str, Any]) -> pd.DataFrame:
    """`correlation_lab.s18_check()`'s rows: subset, quantity in words (f₁.₁₀ / k₁.₁₀ and the
    statistic; the paper's Spearman p is scipy's t approximation), published, ours from eight
    models (two k₁.₁₀ inferred), ours from Table S17's six alone, and whether ours agrees to
    the printed precision."""
    rows = []
    for r in check["rows"]:
        y, _, stat = r["quantity"].partition("_")
        rows.append({
            "subset": r["subset"],
            "quantity": f"{_S18_Y.get(y, y)}: {_S18_STAT.get(stat, stat)}",
            "published": r["published"],
            "reconstructed (8 models, 2 k₁.₁₀ inferred)": r["reconstructed"],
            "recomputed (Table S17's 6 models)": r["recomputed_six"],
            "agrees to the printed digits": r["agrees"],
        })  # fmt: skip
    return pd.DataFrame(rows)


def s18_conflict_note(check: Mapping[str, Any]) -> str:
    """The sentence shown next to the Table S18 reconstruction: the paper's caption says which
    endpoints its leave-one-out rows drop, its numbers say otherwise
    (`correlation_lab.s18_endpoint_conflict`)."""
    return str(check["conflict"]["sentence"])
