"""Figures of one run: the layer-similarity heatmap and its rows, the lag decay, D_eff(K).

Layer numbering: a similarity matrix `S (L, L)` is indexed by the measured states `h_1 .. h_L`,
so axes are labelled 1..L.
"""

from __future__ import annotations

__all__ = [
    "deff_vs_K",
    "lag_decay",
    "reference_lag_profile",
    "reference_lag_trace",
    "similarity_heatmap",
    "similarity_rows",
]

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from deffcore.figures.base import (
    CLICK_TARGET,
    COLOR_MEASURED,
    COLOR_REFERENCE,
    COLOR_SUB,
    LAYOUT,
    integer_ticks,
)


def similarity_heatmap(
    S: np.ndarray,
    *,
    metric: str = "cka",
    pooling: str = "default",
    selectable: bool = False,
    title: str | None = None,
) -> go.Figure:
    """Layer x layer heatmap of `S (L, L)`; hover shows the pair and the exact value.

    selectable: also lay an invisible marker on every cell. Plotly heatmap traces emit no
    selection events (a click or box on them selects nothing), so this transparent scatter is
    what a click or a box selection picks; its points carry `y` = layer i. Its `meta` is
    `CLICK_TARGET`, so exports skip it. (Streamlit selects on click only while the drag mode is
    pan, its default for point selection, so no drag mode is set here.)
    """
    S = np.asarray(S, dtype=np.float64)
    layers = list(range(1, S.shape[0] + 1))
    fig = go.Figure(
        go.Heatmap(
            z=S,
            x=layers,
            y=layers,
            colorscale="Viridis",
            zmin=min(0.0, float(np.nanmin(S))),
            zmax=1.0,
            colorbar={"title": metric},
            name=f"S ({metric}, {pooling})",
            hovertemplate="layer %{y} vs layer %{x}<br>S = %{z:.4g}<extra></extra>",
        )
    )
    fig.update_layout(
        title=title or f"Layer similarity S(i, j): {metric}, pooling {pooling}",
        xaxis={"title": "layer j", "range": [0.5, S.shape[0] + 0.5]},
        yaxis={"title": "layer i", "range": [S.shape[0] + 0.5, 0.5]},  # layer 1 at the top
        height=520,
        **LAYOUT,
    )
    # square cells: the axis with room to spare shrinks towards the colour bar (right) and
    # the title (top), so a wide download keeps the bar beside the map, not at the far edge
    fig.update_xaxes(constrain="domain", constraintoward="right")
    fig.update_yaxes(scaleanchor="x", constrain="domain", constraintoward="top")
    integer_ticks(fig, S.shape[0], "xy")
    if selectable:
        L = S.shape[0]
        ii, jj = np.meshgrid(layers, layers, indexing="ij")
        fig.add_trace(
            go.Scatter(
                x=jj.ravel(),
                y=ii.ravel(),
                mode="markers",
                marker={"size": max(4, min(24, 400 // L)), "color": "rgba(0,0,0,0)"},
                customdata=S.ravel(),
                name="pick a layer",
                meta=CLICK_TARGET,
                showlegend=False,
                hovertemplate="layer %{y} vs layer %{x}<br>S = %{customdata:.4g}"
                "<br>click: show row %{y}<extra></extra>",
                # keep the cells' look when points are (de)selected
                selected={"marker": {"opacity": 0}},
                unselected={"marker": {"opacity": 0}},
            )
        )
        fig.data[0].hoverinfo = "skip"
        fig.data[0].hovertemplate = None
    return fig


def similarity_rows(S: np.ndarray, layers: Sequence[int], *, metric: str = "cka") -> go.Figure:
    """Rows `S(i, :)` for the chosen 1-based layers i, one curve each."""
    S = np.asarray(S, dtype=np.float64)
    x = list(range(1, S.shape[0] + 1))
    fig = go.Figure()
    for layer in layers:
        fig.add_trace(
            go.Scatter(
                x=x,
                y=S[layer - 1],
                mode="lines+markers",
                name=f"layer {layer}",
                hovertemplate=f"S({layer}, %{{x}}) = %{{y:.4g}}<extra></extra>",
            )
        )
    fig.update_layout(
        title=f"S(i, j) of the selected layer i = {', '.join(map(str, layers))} ({metric})",
        xaxis_title="layer j",
        yaxis_title=f"S(i, j), {metric}",
        height=380,
        **LAYOUT,
    )
    integer_ticks(fig, S.shape[0])
    return fig


def reference_lag_profile(L: int) -> np.ndarray:
    """rho_ref(k), k = 1..L-1, of the orthogonal-update reference S(i, j) = min(i,j)/max(i,j).

    Closed form of the lag profile: rho_ref(k) = mean_{i=1..L-k} i / (i + k).
    """
    return np.array([np.mean([i / (i + k) for i in range(1, L - k + 1)]) for k in range(1, L)])


def reference_lag_trace(L: int, name: str, rho: str = "rho_ref(k)", **line: Any) -> go.Scatter:
    """`reference_lag_profile(L)` against k = 1..L-1 as a dashed grey line (`line` adds to its
    style); `rho` names it in the hover."""
    return go.Scatter(
        x=list(range(1, L)),
        y=reference_lag_profile(L),
        mode="lines",
        name=name,
        line={"color": COLOR_REFERENCE, "dash": "dash", **line},
        hovertemplate=f"k = %{{x}}<br>{rho} = %{{y:.4g}}<extra></extra>",
    )


def lag_decay(
    rho: np.ndarray, *, n: int | None = None, d: int | None = None, label: str = "this run"
) -> go.Figure:
    """rho(k) against k with the orthogonal-update reference and the iid-bias floor d/(N+d).

    rho: (L-1,) the measured lag profile. The floor is drawn only when n and d are given.
    """
    rho = np.asarray(rho, dtype=np.float64)
    L = rho.shape[0] + 1
    k = list(range(1, L))
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=k,
            y=rho,
            mode="lines+markers",
            name=label,
            line={"color": COLOR_MEASURED},
            hovertemplate="k = %{x}<br>rho(k) = %{y:.4g}<extra></extra>",
        )
    )
    fig.add_trace(reference_lag_trace(L, "orthogonal updates: S = min/max (F_L)"))
    if n is not None and d is not None:
        floor = d / (n + d)
        # d/(N+d) is what linear CKA gives unrelated layers of
        # isotropic data; real (anisotropic) states can sit below it, and at small N it can
        # lie above the whole profile. It is then drawn dashed and says so, never silently.
        above = bool(np.any(rho < floor))
        fig.add_trace(
            go.Scatter(
                x=k,
                y=[floor] * len(k),
                mode="lines",
                name=f"iid-bias floor d/(N+d) = {floor:.4g}"
                + (" (isotropic-data bound; above the data)" if above else ""),
                line={"color": COLOR_SUB, "dash": "longdash" if above else "dot"},
                hovertemplate="d/(N+d) = %{y:.4g}<extra></extra>",
            )
        )
        if above:
            # above the plot area, under the title (`for_display` makes room for its lines):
            # inside it, at small N, it hid part of the F_L curve
            fig.add_annotation(
                x=0,
                y=1.0,
                xref="paper",
                yref="paper",
                xanchor="left",
                yanchor="bottom",
                showarrow=False,
                align="left",
                bgcolor="rgba(255,255,255,0.85)",
                font={"size": 11, "color": COLOR_SUB},
                text=(
                    f"d/(N+d) = {floor:.3g} lies above part of ρ(k): it is the bias<br>"
                    "for isotropic data at this N; real states are not isotropic<br>"
                    "and can sit below it, so here it is a rough bound, not a floor."
                ),
            )
    fig.update_layout(
        title="Lag decay: mean similarity at layer distance k",
        xaxis_title="lag k (layers apart)",
        yaxis_title="ρ(k) = mean S(i, i+k)",
        height=460,
        # below the axis, so the curve keeps the full width (also in a half-width column)
        legend={"orientation": "h", "x": 0, "y": -0.28, "yanchor": "top"},
        **LAYOUT,
    )
    integer_ticks(fig, L - 1)
    return fig


def deff_vs_K(deff_over_L_by_K: Mapping[int, float], *, L: int, K: int | None = None) -> go.Figure:
    """D_eff/L as a function of the maximum lag K, with F_L/L (which does not depend on K).

    K: the maximum lag the headline uses (the sidebar's), marked with a vertical line.
    """
    Ks = sorted(deff_over_L_by_K)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=Ks,
            y=[deff_over_L_by_K[K] for K in Ks],
            mode="lines+markers",
            name="D_eff(K)/L",
            line={"color": COLOR_MEASURED},
            hovertemplate="K = %{x}<br>D_eff/L = %{y:.4g}<extra></extra>",
        )
    )
    FL_over_L = 2.0 / (L + 1)
    fig.add_trace(
        go.Scatter(
            x=Ks,
            y=[FL_over_L] * len(Ks),
            mode="lines",
            name=f"F_L/L = 2/(L+1) = {FL_over_L:.4f}",
            line={"color": COLOR_REFERENCE, "dash": "dash"},
            hovertemplate="F_L/L = %{y:.4g}<extra></extra>",
        )
    )
    if K is not None and K in deff_over_L_by_K:
        fig.add_vline(
            x=K,
            line={"color": COLOR_MEASURED, "dash": "dot", "width": 1},
            annotation_text=f"K = {K} (headline): D_eff/L = {deff_over_L_by_K[K]:.4f}",
            annotation_position="top left" if max(Ks) / 2 < K else "top right",
        )
    fig.update_layout(
        title="Effective depth against the maximum lag K",
        xaxis_title="maximum lag K",
        yaxis_title="D_eff/L",
        height=380,
        **LAYOUT,
    )
    integer_ticks(fig, L - 1)
    return fig
