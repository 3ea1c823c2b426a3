"""Baselines figures: trained vs the random-weight null, matched references, the bootstrap."""

from __future__ import annotations

__all__ = ["bootstrap_histogram", "matched_references_bars", "null_baseline"]

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from deffcore.figures.base import COLOR_MEASURED, COLOR_PAPER, COLOR_REFERENCE, LAYOUT


def null_baseline(trained: float, random_values: Sequence[float], *, label: str) -> go.Figure:
    """Trained D_eff/L beside the random-weight seeds and their mean +- 2 sigma band."""
    random_values = np.asarray(random_values, dtype=np.float64)
    fig = go.Figure()
    if random_values.size:
        mean = float(random_values.mean())
        two_sigma = 2.0 * float(random_values.std(ddof=1)) if random_values.size > 1 else 0.0
        fig.add_trace(
            go.Scatter(
                x=["random-weight null"] * random_values.size,
                y=random_values,
                mode="markers",
                name="random seeds",
                marker={"color": COLOR_PAPER, "size": 10},
                hovertemplate="random seed<br>D_eff/L = %{y:.4g}<extra></extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=["random-weight null"],
                y=[mean],
                mode="markers",
                name="random mean ± 2σ",
                marker={"color": "black", "size": 14, "symbol": "line-ew-open"},
                error_y={"type": "data", "array": [two_sigma], "visible": True},
                hovertemplate=f"mean = %{{y:.4g}} ± {two_sigma:.4g}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=[label],
            y=[trained],
            mode="markers",
            name="trained",
            marker={"color": COLOR_MEASURED, "size": 14},
            hovertemplate="trained<br>D_eff/L = %{y:.4g}<extra></extra>",
        )
    )
    fig.update_layout(
        title="Trained vs random-weight null", yaxis_title="D_eff/L", height=380, **LAYOUT
    )
    return fig


def matched_references_bars(deff: float, references: Mapping[str, float]) -> go.Figure:
    """D_eff beside each matched reference (F_L, F_norm, F_h0+norm, F_h0+corr) and the gaps."""
    names = list(references)
    values = [float(references[k]) for k in names]
    gaps = [100.0 * (1.0 - deff / v) if v else float("nan") for v in values]
    fig = go.Figure(
        go.Bar(
            x=names,
            y=values,
            name="reference depth",
            marker={"color": COLOR_REFERENCE},
            customdata=gaps,
            hovertemplate="%{x} = %{y:.4f}<br>gap = %{customdata:.2f}%<extra></extra>",
        )
    )
    fig.add_hline(
        y=deff,
        line={"color": COLOR_MEASURED, "width": 3},
        annotation_text=f"measured D_eff = {deff:.4f}",
    )
    fig.update_layout(
        title="Matched references (closed forms from measured update sizes and correlations)",
        yaxis_title="effective depth",
        height=380,
        **LAYOUT,
    )
    return fig


def bootstrap_histogram(samples: np.ndarray, *, point: float, low: float, high: float) -> go.Figure:
    """Bootstrap distribution of D_eff/L with the point estimate and the CI bounds."""
    fig = go.Figure(
        go.Histogram(
            x=np.asarray(samples, dtype=np.float64),
            name="bootstrap D_eff/L",
            marker={"color": COLOR_MEASURED},
            hovertemplate="D_eff/L in %{x}<br>count %{y}<extra></extra>",
        )
    )
    # labels on the side away from the neighbouring line, so close lines keep readable labels
    if point > high:
        sides = {"point": "top right", "low": "top left", "high": "top left"}
    elif point < low:
        sides = {"point": "top left", "low": "top right", "high": "top right"}
    else:
        sides = {"point": "bottom right", "low": "top left", "high": "top right"}
    for value, name, dash in (
        (point, "point", "solid"),
        (low, "low", "dash"),
        (high, "high", "dash"),
    ):
        fig.add_vline(
            x=value,
            line={"color": "black", "dash": dash},
            annotation_text=f"{name} {value:.4f}",
            annotation_position=sides[name],
            annotation_bgcolor="rgba(255,255,255,0.8)",
        )
    fig.update_layout(
        title="Passage bootstrap of D_eff/L", xaxis_title="D_eff/L", height=340, **LAYOUT
    )
    return fig
