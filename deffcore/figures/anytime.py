"""A run's estimates as they sharpen: the gap to F_L against N, with its band (SPEC 14).

Input: the trajectory, a list of `anytime.Estimate.to_dict()` (what `jobs.JobStatus.estimates`
and `measure --json`'s `anytime.trajectory` hold). One line per pooling control (its colour and
marker shape from `base`), the band of each drawn as a shaded area; the reference (gap 0) and
the "at the reference" tolerance (±REGIME_TOLERANCE points) as lines; markers open where the
trust rule does not call the number solid. N on a log-2 axis (the marks double).
"""

from __future__ import annotations

__all__ = ["gap_vs_n"]

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

from deffcore.core.constants import REGIME_TOLERANCE
from deffcore.figures.base import COLOR_REFERENCE, LAYOUT, POOLING_COLORS, POOLING_SYMBOLS, rgba


def _band_trace(ns: list[int], low: list[float], high: list[float], color: str, name: str):
    """A closed shaded area between the band's edges (high out, low back)."""
    return go.Scatter(
        x=ns + ns[::-1],
        y=high + low[::-1],
        fill="toself",
        fillcolor=rgba(color, 0.15),
        line={"width": 0},
        hoverinfo="skip",
        showlegend=False,
        name=f"{name} band",
    )


def gap_vs_n(
    trajectory: Sequence[dict[str, Any]], poolings: Sequence[str] = ("default",)
) -> go.Figure:
    """Gap to F_L (%) of each of `poolings` against N, with bands (module docstring)."""
    fig = go.Figure()
    for p in poolings:
        rows = [(e["n"], e["poolings"][p]) for e in trajectory if p in e.get("poolings", {})]
        if not rows:
            continue
        ns = [n for n, _ in rows]
        color = POOLING_COLORS.get(p, COLOR_REFERENCE)
        lows = [r["gap_low"] for _, r in rows]
        highs = [r["gap_high"] for _, r in rows]
        if all(v is not None for v in lows + highs):
            fig.add_trace(_band_trace(ns, lows, highs, color, p))
        solid = [r["level"] == "solid" for _, r in rows]
        fig.add_trace(
            go.Scatter(
                x=ns,
                y=[r["gap_pct"] for _, r in rows],
                mode="lines+markers",
                name=p,
                line={"color": color},
                marker={
                    "symbol": [
                        POOLING_SYMBOLS.get(p, "circle") + ("" if s else "-open") for s in solid
                    ],
                    "size": 9,
                    "color": color,
                },
                customdata=[[r["level"], r["metric"], r["band"]] for _, r in rows],
                hovertemplate="N = %{x:,}<br>gap %{y:+.2f}%<br>%{customdata[0]} "
                "(%{customdata[1]}; %{customdata[2]})<extra>" + p + "</extra>",
            )
        )
    for y, dash in ((0.0, "solid"), (REGIME_TOLERANCE, "dot"), (-REGIME_TOLERANCE, "dot")):
        fig.add_hline(y=y, line={"color": COLOR_REFERENCE, "dash": dash, "width": 1})
    fig.update_layout(
        **LAYOUT,
        title="Gap to F_L as passages land (filled marker: solid; band: its uncertainty)",
        xaxis={"title": "passages N", "type": "log", "dtick": 0.30103},
        yaxis={"title": "gap to F_L (%), > 0: D_eff < F_L"},
        height=360,
    )
    return fig
