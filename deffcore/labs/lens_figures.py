"""Figures of the further lenses (Tables S8, S17, S18, S20-S22, Figure S6), for the app pages.

Each builder takes the plain dicts the library returns (what `--json` prints) and returns a
`plotly.graph_objects.Figure`; nothing here computes a number that the figure does not show
as given, except the fitted line (from the result's own slope and intercept).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from deffcore.core.safe_text import plotly_text
from deffcore.figures.base import COLOR_PAPER, COLOR_REFERENCE, OKABE_ITO
from deffcore.labs.figures import INTERVENTION_COLORS
from deffcore.labs.lens_tables import PRETRAIN_LABELS, fmt_rho
from deffcore.views.glossary import COLUMN_LABELS

_LAYOUT = {"template": "plotly_white", "margin": {"l": 60, "r": 20, "t": 70, "b": 50}}
_FAMILY_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "star", "hexagon")
_PALETTE = tuple(OKABE_ITO.values())


def gw_heatmaps(gw: Mapping[str, Any]) -> go.Figure:
    """Two heatmaps over layers 1..L: the run's similarity S and its GW^2 matrix."""
    S = np.asarray(gw["similarity"], dtype=np.float64)
    G = np.asarray(gw["gw"], dtype=np.float64)
    layers = list(range(1, S.shape[0] + 1))
    fig = make_subplots(
        rows=1,
        cols=2,
        horizontal_spacing=0.14,
        subplot_titles=(f"{gw['metric']} similarity", f"Gromov–Wasserstein² ({gw['gw_metric']})"),
    )
    fig.add_trace(
        go.Heatmap(
            z=S, x=layers, y=layers, colorscale="Viridis", zmax=1.0,
            zmin=min(0.0, float(np.nanmin(S))), colorbar={"title": gw["metric"], "x": 0.43},
            name="similarity", hovertemplate="layer %{y} vs %{x}<br>S = %{z:.4g}<extra></extra>",
        ),
        row=1, col=1,
    )  # fmt: skip
    fig.add_trace(
        go.Heatmap(
            z=G, x=layers, y=layers, colorscale="Magma", reversescale=True, zmin=0.0,
            colorbar={"title": "GW²"}, name="GW",
            hovertemplate="layer %{y} vs %{x}<br>GW² = %{z:.4g}<extra></extra>",
        ),
        row=1, col=2,
    )  # fmt: skip
    for col in (1, 2):
        fig.update_xaxes(title_text="layer", row=1, col=col)
        fig.update_yaxes(title_text="layer", autorange="reversed", row=1, col=col)
    fig.update_layout(
        title=f"{plotly_text(gw['model'])}: "
        f"ρ(GW, {gw['metric']}) = {fmt_rho(gw['spearman_gw_cka'])}, "
        f"ρ(|i−j|, GW) = {fmt_rho(gw['spearman_lag_gw'])}, "
        f"ρ(|i−j|, {gw['metric']}) = {fmt_rho(gw['spearman_lag_cka'])}  (n_gw = {gw['n_gw']})",
        height=430,
        **_LAYOUT,
    )
    return fig


def correlation_scatter(result: Mapping[str, Any], *, x_title: str | None = None,
                        y_title: str | None = None) -> go.Figure:  # fmt: skip
    """Points of one correlation (`correlate_points` output), a trace per family, labelled,
    with the least-squares line over the x range and r, rho, p and n in the title (which
    names the task, else `y_title`, else y)."""
    points = result["points"]
    where = _label_positions(points)
    families = sorted({p.get("family") or "other" for p in points})
    fig = go.Figure()
    for i, family in enumerate(families):
        mine = [p for p in points if (p.get("family") or "other") == family]
        fig.add_trace(
            go.Scatter(
                x=[p["x"] for p in mine],
                y=[p["y"] for p in mine],
                mode="markers+text",
                name=plotly_text(family),
                text=[plotly_text(p.get("label") or p.get("model")) for p in mine],
                textposition=[where[id(p)] for p in mine],
                marker={
                    "size": 10,
                    "color": _PALETTE[i % len(_PALETTE)],
                    "symbol": _FAMILY_SYMBOLS[i % len(_FAMILY_SYMBOLS)],
                },
                hovertemplate="%{text}<br>x = %{x:.4g}<br>y = %{y:.4g}<extra></extra>",
            )
        )
    xs = [p["x"] for p in points]
    if math.isfinite(result.get("slope", math.nan)) and xs:
        line_x = [min(xs), max(xs)]
        fig.add_trace(
            go.Scatter(
                x=line_x,
                y=[result["slope"] * v + result["intercept"] for v in line_x],
                mode="lines",
                name="least-squares fit",
                line={"color": COLOR_REFERENCE, "dash": "dash"},
                hoverinfo="skip",
            )
        )
    what = plotly_text(result.get("task") or y_title or result["y"])
    fig.update_layout(
        title=f"{what}: Pearson r = {fmt_rho(result['pearson_r'])} "
        f"(p = {fmt_rho(result['pearson_p'], '.3g')}), "
        f"Spearman ρ = {fmt_rho(result['spearman_rho'])} "
        f"(p = {fmt_rho(result['spearman_p'], '.3g')}), n = {result['n']}",
        xaxis_title=x_title or result["x"],
        yaxis_title=y_title or result["y"],
        height=460,
        **_LAYOUT,
    )
    return fig


#: Where a point's label goes when points crowd each other, in turn.
_LABEL_SPOTS = ("top center", "bottom center", "middle right", "middle left")


def _label_positions(points: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """A text position per point (by `id`): "top center", unless a point within 8% of the x
    range and 6% of the y range already holds a spot, then the next free one of
    `_LABEL_SPOTS` (equal f_1.10 values put several models on one line)."""
    xs, ys = [p["x"] for p in points], [p["y"] for p in points]
    if not points:
        return {}
    dx = 0.08 * ((max(xs) - min(xs)) or 1.0)
    dy = 0.06 * ((max(ys) - min(ys)) or 1.0)
    placed: list[tuple[float, float, str]] = []
    out: dict[int, str] = {}
    for p in sorted(points, key=lambda q: (q["x"], q["y"])):
        near = {s for x, y, s in placed if abs(x - p["x"]) < dx and abs(y - p["y"]) < dy}
        spot = next((s for s in _LABEL_SPOTS if s not in near), _LABEL_SPOTS[len(near) % 4])
        placed.append((p["x"], p["y"], spot))
        out[id(p)] = spot
    return out


def pruning_tolerance_bars(rows: Sequence[Mapping[str, Any]]) -> go.Figure:
    """f_1.10 per model (bars, k_1.10 / L as text), grouped by source: our stored checks
    ("pruning") and the paper's Table S17 (grey, hatched)."""
    fig = go.Figure()
    for source, color, pattern in (
        ("pruning", OKABE_ITO["blue"], ""),
        ("Table S17", COLOR_PAPER, "/"),
    ):
        mine = [r for r in rows if r.get("source") == source]
        if not mine:
            continue
        fig.add_trace(
            go.Bar(
                x=[r["model"] for r in mine],
                y=[r["f_110"] for r in mine],
                name="this machine" if source == "pruning" else "paper (Table S17)",
                marker={"color": color, "pattern": {"shape": pattern}},
                text=[f"{r['k_110']}/{r['layers']}" for r in mine],
                textposition="outside",
                customdata=[[r["deff_over_L"]] for r in mine],
                hovertemplate="%{x}<br>f₁.₁₀ = %{y:.3f} (k/L = %{text})<br>"
                "D_eff/L = %{customdata[0]:.3f}<extra></extra>",
            )
        )
    fig.update_layout(
        title="Pruning tolerance: the share of blocks that can be skipped (lowest BI first) "
        "with PPL ≤ 1.10 PPL₀",
        yaxis_title="f₁.₁₀ = k₁.₁₀ / L",
        xaxis_title="model",
        barmode="group",
        height=420,
        **_LAYOUT,
    )
    return fig


def pretrain_trajectories(
    records: Sequence[Mapping[str, Any]], column: str = "gap_default"
) -> go.Figure:
    """`column` (default: gap% at default pooling) against training tokens, one line per
    (variant, seed), coloured by variant."""
    fig = go.Figure()
    runs = sorted({(r["variant"], r["seed"]) for r in records})
    for variant, seed in runs:
        mine = sorted(
            (r for r in records if r["variant"] == variant and r["seed"] == seed),
            key=lambda r: r["step"],
        )
        fig.add_trace(
            go.Scatter(
                x=[r["tokens"] for r in mine],
                y=[r[column] for r in mine],
                mode="lines+markers",
                name=f"{variant}, seed {seed}",
                legendgroup=variant,
                line={"color": INTERVENTION_COLORS.get(variant, COLOR_PAPER)},
            )
        )
    label = PRETRAIN_LABELS.get(column, column)  # the table's words, never the field name
    fig.update_layout(
        title=f"Short pretraining from random weights: {label} over training",
        xaxis_title="training tokens",
        yaxis_title=label,
        height=420,
        **_LAYOUT,
    )
    return fig


def turning_angles_plot(table: Mapping[str, Any]) -> go.Figure:
    """The turning angle (degrees) at layers 2 .. L-1 of `aggregation_table`'s geometry: one
    line per similarity metric (arccos S) and one for the Euclidean path of the pooled states
    when present; 90° (orthogonal updates' every turn) dashed."""
    fig = go.Figure()
    series = [
        (f"arccos {COLUMN_LABELS.get(m, m)}", g["turning_angles"])
        for m, g in table["geometry"].items()
    ]
    euclidean = table["trajectory"].get("euclidean_turning_angles")
    if euclidean is not None:
        series.append(("Euclidean (pooled states)", euclidean))
    for i, (name, angles) in enumerate(series):
        degrees = [math.degrees(a) if a is not None and math.isfinite(a) else None
                   for a in angles]  # fmt: skip
        fig.add_trace(
            go.Scatter(
                x=list(range(2, len(degrees) + 2)), y=degrees, mode="lines+markers", name=name,
                line={"color": _PALETTE[i % len(_PALETTE)]},
                hovertemplate="layer %{x}: %{y:.1f}°<extra>" + name + "</extra>",
            )
        )  # fmt: skip
    fig.add_hline(
        y=90.0, line={"color": COLOR_REFERENCE, "dash": "dash"},
        annotation_text="90°: orthogonal updates", annotation_position="top left",
    )  # fmt: skip
    fig.update_layout(
        title="Turning angle of the layer path (0° straight on, 90° a right angle)",
        xaxis_title="layer l (the bend between l−1 → l and l → l+1)",
        yaxis_title="turning angle (°)",
        height=400,
        **_LAYOUT,
    )
    return fig
