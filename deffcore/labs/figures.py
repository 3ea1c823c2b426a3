"""Plotly figures and tables for the labs: results (plain dicts, as the labs' `to_dict()`) in,
`go.Figure` / `pd.DataFrame` out. No Streamlit. Colours follow `deffcore.figures`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from deffcore.core.constants import POOLINGS
from deffcore.figures.base import (
    COLOR_PAPER,
    COLOR_REFERENCE,
    OKABE_ITO,
    POOLING_COLORS,
    log_axis,
    reference_hline,
    rgba,
)
from deffcore.labs.aggregations import AGGREGATION_LABELS, AGGREGATIONS
from deffcore.views.glossary import COLUMN_LABELS

_LAYOUT = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 60, "b": 50}}

# Okabe-Ito colours (colour-blind safe), each paired with a shape or dash so colour is never
# the only cue.
INTERVENTION_COLORS = {
    "none": OKABE_ITO["blue"],
    "no_post": OKABE_ITO["orange"],
    "no_qk": OKABE_ITO["bluish green"],
    "no_post_no_qk": OKABE_ITO["vermillion"],
}
INTERVENTION_PATTERNS = {"none": "", "no_post": "/", "no_qk": ".", "no_post_no_qk": "x"}
RANKING_COLORS = {"bi": OKABE_ITO["blue"], "local_deff": OKABE_ITO["vermillion"]}
RANKING_SYMBOLS = {"bi": "circle", "local_deff": "square"}
METRIC_COLORS = {
    "cka": OKABE_ITO["blue"],
    "unbiased_cka": OKABE_ITO["orange"],
    "cosine": OKABE_ITO["bluish green"],
}
METRIC_PATTERNS = {"cka": "", "unbiased_cka": "/", "cosine": "."}
#: One colour and dash per gamma of the residual-carry lab (others fall back to grey).
GAMMA_COLORS = {
    1.0: OKABE_ITO["blue"],
    0.75: OKABE_ITO["bluish green"],
    0.5: OKABE_ITO["orange"],
    0.25: OKABE_ITO["vermillion"],
}
GAMMA_DASHES = {1.0: "solid", 0.75: "dash", 0.5: "dot", 0.25: "dashdot"}
#: Perplexities above this multiple of PPL_0 are drawn at the cap, marked "> cap": a skipped
#: block can make PPL explode (1e63 was seen), which would squash every other point.
PPL_CAP_FACTOR = 1000.0


# ----------------------------------------------------------------------------------------------
# 1. Interventions


def intervention_frame(
    rows: Sequence[Mapping[str, Any]], paper_rows: Sequence[Mapping[str, Any]] = ()
) -> pd.DataFrame:
    """intervention x pooling table of gap%: this run's columns, then each paper model's."""
    from deffcore.inputs.interventions import INTERVENTIONS, PAPER_LABELS

    parts = []
    sources = [(pd.DataFrame(rows), "this run")] if rows else []
    if paper_rows:
        paper = pd.DataFrame(paper_rows)
        sources += [(sub, f"{model}, paper") for model, sub in paper.groupby("model", sort=False)]
    for frame, tag in sources:
        piv = frame.pivot(index="intervention", columns="pooling", values="gap_pct")
        piv = piv.reindex(columns=[p for p in POOLINGS if p in piv.columns])
        piv.columns = [f"{p} ({tag})" for p in piv.columns]
        parts.append(piv)
    if not parts:
        return pd.DataFrame()
    table = pd.concat(parts, axis=1)
    order = [i for i in INTERVENTIONS if i in table.index]
    if rows:  # only the interventions of this run
        order = [i for i in order if i in {r["intervention"] for r in rows}]
    table = table.reindex(order)
    table.index = [PAPER_LABELS.get(i, i) for i in order]  # the paper's words, as the picker's
    table.index.name = "intervention"
    return table


def intervention_plot(
    rows: Sequence[Mapping[str, Any]], paper_rows: Sequence[Mapping[str, Any]] = ()
) -> go.Figure:
    """Gap% per pooling control (x) for each intervention (colour); paper values as open marks.

    Before any run (no `rows`) the paper's values are drawn alone, for every intervention.
    """
    from deffcore.inputs.interventions import INTERVENTIONS, PAPER_LABELS

    fig = go.Figure()
    present = {r["intervention"] for r in rows or paper_rows}
    order = [i for i in INTERVENTIONS if i in present] + sorted(present - set(INTERVENTIONS))
    for name in order:
        sub = [r for r in rows if r["intervention"] == name]
        if not sub:  # no run yet: the paper's values alone
            continue
        fig.add_trace(
            go.Bar(
                x=[r["pooling"] for r in sub],
                y=[r["gap_pct"] for r in sub],
                name=f"{PAPER_LABELS.get(name, name)} (this run, trust {sub[0].get('trust', '?')})",
                marker_color=INTERVENTION_COLORS.get(name, COLOR_PAPER),
                marker_pattern_shape=INTERVENTION_PATTERNS.get(name, ""),
                hovertemplate="%{x}<br>gap = %{y:.3g}%<extra>"
                + PAPER_LABELS.get(name, name)
                + "</extra>",
            )
        )
    symbols = ["circle-open", "diamond-open", "square-open"]
    for i, model in enumerate(dict.fromkeys(r["model"] for r in paper_rows)):
        for name in order:
            sub = [r for r in paper_rows if r["model"] == model and r["intervention"] == name]
            if not sub:
                continue
            fig.add_trace(
                go.Scatter(
                    x=[r["pooling"] for r in sub],
                    y=[r["gap_pct"] for r in sub],
                    mode="markers",
                    name=f"{PAPER_LABELS.get(name, name)} ({model}, paper)",
                    marker={
                        "symbol": symbols[i % len(symbols)],
                        "size": 11,
                        "color": INTERVENTION_COLORS.get(name, COLOR_PAPER),
                        "line": {"width": 2},
                    },
                    hovertemplate="%{x}<br>paper gap = %{y:.1f}%<extra>" + model + "</extra>",
                )
            )
    fig.add_hline(y=0, line_color=COLOR_REFERENCE, line_dash="dash")
    fig.update_layout(
        title="Gap to F_L under norm interventions (> 0: more redundant than orthogonal updates)",
        barmode="group",
        xaxis={
            "title": "pooling control",
            "categoryorder": "array",
            "categoryarray": list(POOLINGS),
        },
        yaxis_title="gap to F_L (%)",
        legend_title_text="intervention (bars: this run, open: paper)",
        height=460,
        **_LAYOUT,
    )
    return fig


# ----------------------------------------------------------------------------------------------
# 2. Pruning


def pruning_plot(result: Mapping[str, Any]) -> go.Figure:
    """PPL against k skipped blocks for each ranking (log y), with the 1.10 x PPL_0 line.

    The y axis is fitted to the data: values above `PPL_CAP_FACTOR` x PPL_0 (or not finite) are
    drawn at that cap as triangles labelled "> cap", their true value in the hover, so one
    exploded perplexity does not squash the rest. `customdata` holds the true values.
    """
    from deffcore.labs.pruning import PPL_TOLERANCE, RANKING_LABELS

    fig = go.Figure()
    ppl0 = float(result["ppl0"])
    cap = PPL_CAP_FACTOR * ppl0 if math.isfinite(ppl0) and ppl0 > 0 else math.inf
    shown: list[float] = [PPL_TOLERANCE * ppl0]
    capped_any = False
    for ranking, ppl in result["ppl"].items():
        ks = sorted(int(k) for k in ppl)
        true = [float(ppl[str(k)]) for k in ks]
        over = [not (math.isfinite(p) and p <= cap) for p in true]
        capped_any |= any(over)
        ys = [cap if o else p for p, o in zip(true, over, strict=True)]
        shown += ys
        symbol = RANKING_SYMBOLS.get(ranking, "circle")
        fig.add_trace(
            go.Scatter(
                x=ks,
                y=ys,
                mode="lines+markers+text",
                name=f"{RANKING_LABELS.get(ranking, ranking)} "
                f"(k₁.₁₀ = {result['k_1.10'][ranking]})",
                line={"color": RANKING_COLORS.get(ranking, COLOR_PAPER)},
                marker={
                    "symbol": ["triangle-up" if o else symbol for o in over],
                    "size": [13 if o else 8 for o in over],
                },
                text=[f"> {cap:.3g}" if o else "" for o in over],
                textposition="top center",
                customdata=true,
                hovertemplate="k = %{x}<br>PPL = %{customdata:.4g}<extra></extra>",
            )
        )
    finite = [v for v in shown if math.isfinite(v) and v > 0]
    fig.update_layout(
        title=f"Held-out perplexity after skipping k blocks "
        f"({result['model']}, L = {result['layers']})",
        xaxis_title="k (blocks skipped, lowest-ranked first)",
        yaxis={
            "title": "perplexity (log scale"
            + (f"; ▲ = above {cap:.3g}, off the chart)" if capped_any else ")"),
            # fitted to the drawn values, with room for the "> cap" labels
            **log_axis(finite or [1.0, 10.0], pad=2.2 if capped_any else 1.3),
        },
        height=440,
        **_LAYOUT,
    )
    # the label in the axis' units: add_hline's own label sits at 10^y on a log axis
    reference_hline(fig, PPL_TOLERANCE * ppl0, f"{PPL_TOLERANCE:.2f} × PPL_0", log=True)
    return fig


def pruning_scores_plot(result: Mapping[str, Any]) -> go.Figure:
    """BI and local Delta D_eff per block, side by side (their rankings are what is compared)."""
    L = result["layers"]
    blocks = list(range(1, L + 1))
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Block Influence", "local ΔD_eff"))
    for col, (ranking, name, values) in enumerate(
        (("bi", "BI", "block_influence"), ("local_deff", "local ΔD_eff", "local_delta_deff")),
        start=1,
    ):
        fig.add_trace(
            go.Bar(
                x=blocks,
                y=result[values],
                name=name,
                marker_color=RANKING_COLORS[ranking],
                hovertemplate=f"block %{{x}}<br>{name} = %{{y:.4g}}<extra></extra>",
            ),
            row=1,
            col=col,
        )
    fig.update_xaxes(title_text="block l")
    fig.update_layout(
        title="Per-block scores (the lowest are skipped first)",
        height=360,
        showlegend=False,
        **_LAYOUT,
    )
    return fig


# ----------------------------------------------------------------------------------------------
# 3. Residual carry

CARRY_PANELS: tuple[tuple[str, str], ...] = (
    ("deff_h_over_L", "D_eff(h)/L"),
    ("deff_upd_over_L", "D_eff(update)/L"),
    ("val_loss", "validation loss"),
    ("f_over_h", "||f|| / ||h||"),
)


def carry_trajectories(records: Sequence[Mapping[str, Any]]) -> go.Figure:
    """2 x 2 panels against step: per gamma, each seed faint and the across-seed mean bold."""
    fig = make_subplots(rows=2, cols=2, subplot_titles=[label for _, label in CARRY_PANELS])
    frame = pd.DataFrame(records)
    if frame.empty:
        return fig
    for gamma, by_gamma in frame.groupby("gamma", sort=False):
        color = GAMMA_COLORS.get(float(gamma), COLOR_PAPER)
        dash = GAMMA_DASHES.get(float(gamma), "solid")
        for p_index, (quantity, label) in enumerate(CARRY_PANELS):
            row, col = divmod(p_index, 2)

            drawn = []
            for seed, run in by_gamma.groupby("seed"):  # each seed faint
                run = run.sort_values("step")
                who = f"γ={gamma:g} seed {seed}"
                drawn.append((run["step"], run[quantity], who, who, False))
            mean = by_gamma.groupby("step")[quantity].mean()
            drawn.append(
                (mean.index, mean.values, f"γ={gamma:g} mean", f"γ = {gamma:g} (mean)", True)
            )
            for x, y, who, name, bold in drawn:
                fig.add_trace(
                    go.Scatter(
                        x=x,
                        y=y,
                        mode="lines",
                        line={
                            "color": color if bold else rgba(color, 0.3),
                            "width": 3 if bold else 1,
                            "dash": dash,
                        },
                        name=name,
                        legendgroup=f"g{gamma}",
                        showlegend=bold and p_index == 0,
                        hovertemplate=f"{who}<br>step %{{x}}<br>{label} = %{{y:.4g}}"
                        "<extra></extra>",
                    ),
                    row=row + 1,
                    col=col + 1,
                )
    fig.update_xaxes(title_text="training step")
    fig.update_layout(
        title="Residual carry: h_l = γ h_{l-1} + block(h_{l-1})", height=640, **_LAYOUT
    )
    return fig


CARRY_TABLE_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (key, COLUMN_LABELS[key])
    for key in ("val_loss", "deff_h_over_L", "deff_upd_over_L", "rho1", "f_over_h")
)


def carry_table(final: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """The final-step table: mean [min, max] across seeds per gamma (as Table S14)."""
    rows = []
    for r in final:
        row: dict[str, Any] = {"γ": r["gamma"], "Seeds": r["seeds"], "Step": r["step"]}
        for quantity, label in CARRY_TABLE_COLUMNS:
            lo, hi = r[f"{quantity}_min"], r[f"{quantity}_max"]
            row[label] = f"{r[quantity]:.3f} [{lo:.3f}, {hi:.3f}]"
        rows.append(row)
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------
# 4. Training dynamics


def dynamics_plot(result: Mapping[str, Any], *, log_x: bool = False) -> go.Figure:
    """Gap to F_L (left) and D_eff/L (right) against tokens/steps; missing checkpoints are
    dotted vertical lines labelled "missing", and lines are broken there (never interpolated)."""
    axis = result["x_axis"]
    points = list(result["points"])
    fig = make_subplots(rows=1, cols=2, subplot_titles=("gap to F_L (%)", "D_eff / L"))
    xs = [i if axis == "index" else p[axis] for i, p in enumerate(points)]
    for col, quantity in ((1, "gap_pct"), (2, "deff_over_L")):
        label = COLUMN_LABELS[quantity]
        ys = [p[quantity] if p["status"] == "ok" else None for p in points]
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines+markers",
                connectgaps=False,
                name=label,
                text=[p["label"] for p in points],
                line={"color": POOLING_COLORS["default"]},
                hovertemplate="%{text}<br>" + axis + " %{x}<br>" + label + " = %{y:.4g}"
                "<extra></extra>",
                showlegend=False,
            ),
            row=1,
            col=col,
        )
    for x, p in zip(xs, points, strict=True):
        if p["status"] != "ok" and x is not None:
            for col in (1, 2):
                fig.add_vline(
                    x=x,
                    line_dash="dot",
                    line_color=COLOR_PAPER,
                    row=1,
                    col=col,
                    annotation_text="missing",
                    annotation_textangle=-90,
                )
    if log_x:
        fig.update_xaxes(type="log")
    fig.update_xaxes(title_text=f"training {axis}")
    missing = [p["label"] for p in points if p["status"] != "ok"]
    title = f"Training dynamics: {result['landed']} of {result['planned']} checkpoints landed"
    if missing:
        title += f" (missing: {', '.join(missing[:4])}{' …' if len(missing) > 4 else ''})"
    fig.update_layout(title=title, height=420, **_LAYOUT)
    return fig


# ----------------------------------------------------------------------------------------------
# 5. Aggregations


def aggregations_plot(table: Mapping[str, Any]) -> go.Figure:
    """Value / L of every aggregation (x) under each metric (colour)."""
    fig = go.Figure()
    for metric in table["xi"]:
        sub = {r["aggregation"]: r for r in table["rows"] if r["metric"] == metric}
        fig.add_trace(
            go.Bar(
                x=[AGGREGATION_LABELS[a] for a in AGGREGATIONS],
                y=[sub[a]["value_over_L"] for a in AGGREGATIONS],
                name=COLUMN_LABELS.get(metric, metric),
                marker_color=METRIC_COLORS.get(metric, COLOR_PAPER),
                marker_pattern_shape=METRIC_PATTERNS.get(metric, ""),
                hovertemplate="%{x}<br>value / L = %{y:.4g}<extra>" + metric + "</extra>",
            )
        )
    L = table["layers"]
    # a legend entry, not a text annotation on an hline, which would sit on the bars
    labels = [AGGREGATION_LABELS[a] for a in AGGREGATIONS]
    fig.add_trace(
        go.Scatter(
            x=labels,
            y=[2 / (L + 1)] * len(labels),
            mode="lines",
            hovertemplate="F_L/L = %{y:.4g}<extra></extra>",
            name=f"F_L/L = {2 / (L + 1):.4f}",
            line={"color": COLOR_REFERENCE, "dash": "dash"},
        )
    )
    fig.update_layout(
        title=f"Aggregations of the same similarity matrix (L = {L})",
        barmode="group",
        yaxis_title="effective number of layers / L",
        height=440,
        **_LAYOUT,
    )
    return fig


def aggregations_frame(table: Mapping[str, Any]) -> pd.DataFrame:
    """aggregation x metric table of value / L."""
    frame = pd.DataFrame(table["rows"]).pivot(
        index="aggregation", columns="metric", values="value_over_L"
    )
    return frame.reindex(index=list(AGGREGATIONS), columns=list(table["xi"]))
