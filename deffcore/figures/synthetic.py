"""Synthetic-lab figures: the constructions against depth, updates vs accumulated states, and
the teaching story's lag profiles and depth bars (closed forms solid, samples as markers)."""

from __future__ import annotations

__all__ = [
    "CONSTRUCTION_COLORS",
    "CONSTRUCTION_SYMBOLS",
    "STORY_STYLES",
    "legend_above",
    "states_vs_updates",
    "story_depth_bars",
    "story_lag_profiles",
    "synthetic_sweep",
]

from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go

from deffcore.core.lazy import pd  # imported on first use: a chart never needs it
from deffcore.figures.base import (
    COLOR_MEASURED,
    COLOR_PAPER,
    COLOR_REFERENCE,
    COLOR_SUB,
    COLOR_UPDATES,
    LAYOUT,
    OKABE_ITO,
    integer_ticks,
    regime_color,
)
from deffcore.figures.run import reference_lag_trace

#: Synthetic constructions: none vermillion, which marks the iid reference they are read against.
CONSTRUCTION_COLORS = {
    "independent states": OKABE_ITO["orange"],
    "orthogonal states": OKABE_ITO["bluish green"],
    "orthogonal updates on h_0": OKABE_ITO["blue"],
}
CONSTRUCTION_SYMBOLS = {
    "independent states": "square",
    "orthogonal states": "diamond",
    "orthogonal updates on h_0": "circle",
}


def synthetic_sweep(
    table: pd.DataFrame, *, n: int, d: int, sampled: pd.DataFrame | None = None
) -> go.Figure:
    """D_eff/L against L for each construction, with F_L/L and the finite-sample iid reference.

    table: columns `construction`, `L`, `deff_over_L` (lines). sampled: the same columns,
    measured on drawn samples, drawn as open markers of the construction's colour and shape.
    The iid reference is D/L = 1 / (1 + b (L-1)) with b = d/(N+d) (SPEC section 7); it is the
    last trace and F_L/L the one before. The y axis is logarithmic (values run from 1/L to 1)
    and fitted to the data.
    """
    fig = go.Figure()
    for name in table["construction"].unique():
        part = table[table["construction"] == name].sort_values("L")
        fig.add_trace(
            go.Scatter(
                x=part["L"],
                y=part["deff_over_L"],
                mode="lines+markers",
                name=name,
                line={"color": CONSTRUCTION_COLORS.get(name), "width": 3},
                marker={"size": 8, "symbol": CONSTRUCTION_SYMBOLS.get(name, "circle")},
                hovertemplate=f"{name}<br>L = %{{x}}<br>D_eff/L = %{{y:.4g}}<extra></extra>",
            )
        )
    if sampled is not None:
        for name in sampled["construction"].unique():
            part = sampled[sampled["construction"] == name].sort_values("L")
            fig.add_trace(
                go.Scatter(
                    x=part["L"],
                    y=part["deff_over_L"],
                    mode="markers",
                    name=f"{name}, sampled",
                    marker={
                        "size": 12,
                        "color": CONSTRUCTION_COLORS.get(name),
                        "symbol": CONSTRUCTION_SYMBOLS.get(name, "circle") + "-open",
                        "line": {"width": 2},
                    },
                    hovertemplate=f"{name}, sampled<br>L = %{{x}}<br>D_eff/L = %{{y:.4g}}"
                    "<extra></extra>",
                )
            )
    _add_depth_references(fig, np.array(sorted(table["L"].unique()), dtype=np.float64), n, d)
    values = [np.asarray(tr.y, dtype=np.float64) for tr in fig.data]
    finite = np.concatenate(values) if values else np.array([1.0])
    finite = finite[np.isfinite(finite) & (finite > 0)]
    low = float(finite.min()) if finite.size else 0.01
    fig.update_layout(
        title=f"Synthetic constructions: D_eff/L against depth (N = {n}, d = {d})",
        xaxis_title="layers L",
        yaxis={
            "title": "D_eff/L (log scale)",
            "type": "log",
            "range": [np.log10(low) - 0.1, np.log10(1.15)],
        },
        height=440,
        **LAYOUT,
    )
    return fig


def _add_depth_references(fig: go.Figure, Ls: np.ndarray, n: int, d: int) -> None:
    """F_L/L and the finite-sample iid reference D_iid/L at the depths `Ls` (the last traces)."""
    from deffcore.measures.references import iid_reference_depth

    b = d / (n + d)
    fig.add_trace(
        go.Scatter(
            x=Ls,
            y=2.0 / (Ls + 1.0),
            mode="lines",
            name="F_L/L = 2/(L+1)",
            line={"color": COLOR_REFERENCE, "dash": "dash"},
            hovertemplate="L = %{x}<br>F_L/L = %{y:.4g}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=Ls,
            y=[iid_reference_depth(n, d, int(L)) / L for L in Ls],
            mode="lines",
            name=f"iid reference, b = d/(N+d) = {b:.3f}",
            line={"color": COLOR_SUB, "dash": "dot", "width": 2},
            hovertemplate="L = %{x}<br>D_iid/L = %{y:.4g}<extra></extra>",
        )
    )


def states_vs_updates(rho_states: np.ndarray, rho_updates: np.ndarray) -> go.Figure:
    """Lag profiles of accumulated states and of the updates that built them."""
    fig = go.Figure()
    for name, rho, color in (
        ("accumulated states h_l", rho_states, COLOR_MEASURED),
        ("updates f_l", rho_updates, COLOR_UPDATES),
    ):
        rho = np.asarray(rho, dtype=np.float64)
        fig.add_trace(
            go.Scatter(
                x=list(range(1, rho.shape[0] + 1)),
                y=rho,
                mode="lines+markers",
                name=name,
                line={"color": color},
                hovertemplate=f"{name}<br>k = %{{x}}<br>rho(k) = %{{y:.4g}}<extra></extra>",
            )
        )
    L = len(rho_states) + 1
    fig.add_trace(reference_lag_trace(L, "min/max reference"))
    fig.update_layout(
        title="Updates vs accumulated states: lag profiles",
        xaxis_title="lag k",
        yaxis_title="ρ(k) = mean S(i, i+k)",
        height=380,
        **LAYOUT,
    )
    return fig


#: Line styles of the teaching story's lag curves: closed forms solid, samples as markers.
STORY_STYLES = {
    "closed": {"mode": "lines", "line": {"color": COLOR_MEASURED, "width": 4}},
    "previous": {"mode": "lines", "line": {"color": COLOR_UPDATES, "width": 2, "dash": "dashdot"}},
    "population": {"mode": "lines", "line": {"color": COLOR_PAPER, "width": 2, "dash": "dot"}},
    "sampled": {
        "mode": "markers",
        "marker": {"color": COLOR_SUB, "size": 9, "symbol": "circle-open", "line": {"width": 2}},
    },
    "sampled_unbiased": {
        "mode": "markers",
        "marker": {"color": OKABE_ITO["bluish green"], "size": 9, "symbol": "diamond-open"},
    },
}


def story_lag_profiles(
    curves: Mapping[str, tuple[np.ndarray, str]], *, L: int, bias: float | None = None
) -> go.Figure:
    """Lag profiles of a teaching step beside the orthogonal-update reference (F_L).

    curves: name -> (rho (L-1,), style), style a key of `STORY_STYLES`. bias: the finite-sample
    floor b = d/(N+d), drawn when given. Large fonts (projector); y fitted to [min(0, data), 1].
    """
    fig = go.Figure()
    k = list(range(1, L))
    for name, (rho, style) in curves.items():
        rho = np.asarray(rho, dtype=np.float64)
        fig.add_trace(
            go.Scatter(
                x=k,
                y=rho,
                name=name,
                hovertemplate=f"{name}<br>k = %{{x}}<br>ρ(k) = %{{y:.4g}}<extra></extra>",
                **STORY_STYLES[style],
            )
        )
    name = "orthogonal updates, S = min/max (F_L)"
    fig.add_trace(reference_lag_trace(L, name, "ρ_ref(k)", width=2))
    if bias is not None:
        fig.add_trace(
            go.Scatter(
                x=k,
                y=[bias] * len(k),
                mode="lines",
                name=f"bias floor b = d/(N+d) = {bias:.3g}",
                line={"color": COLOR_SUB, "dash": "dot", "width": 2},
                hovertemplate="b = %{y:.4g}<extra></extra>",
            )
        )
    low = min(0.0, *(float(np.nanmin(c[0])) for c in curves.values() if len(c[0]))) if k else 0.0
    fig.update_layout(
        title="Lag profile: mean similarity of layers k apart",
        xaxis_title="lag k (layers apart)",
        yaxis={"title": "ρ(k)", "range": [low - 0.02, 1.02]},
        height=400,
        font={"size": 15},
        legend={"orientation": "h", "x": 0, "y": -0.22, "yanchor": "top"},
        **LAYOUT,
    )
    integer_ticks(fig, L - 1)
    return fig


def story_depth_bars(values: Mapping[str, float], *, F_L: float, L: int) -> go.Figure:
    """D_eff of a teaching step (and its comparisons) as labelled bars beside F_L.

    values: name -> D_eff, drawn top to bottom. Each bar's label (left of the plot) says its
    value and, in words, whether it is more or less redundant than orthogonal updates, so the
    dashed F_L line never runs through a value; F_L's own value is in the axis title. The x
    axis is fitted to the values and F_L (never the full 0..L when everything is near 2).
    """
    names = list(values)
    deffs = [float(values[k]) for k in names]
    gaps = [100.0 * (1.0 - v / F_L) for v in deffs]
    words = [
        "= F_L" if abs(g) < 0.05 else ("more redundant" if g > 0 else "less redundant")
        for g in gaps
    ]
    labels = [f"{n}: {v:.3f} ({w})" for n, v, w in zip(names, deffs, words, strict=True)]
    fig = go.Figure(
        go.Bar(
            x=deffs,
            y=labels,
            orientation="h",
            marker={
                "color": [
                    COLOR_REFERENCE if w == "= F_L" else regime_color(g)
                    for g, w in zip(gaps, words, strict=True)
                ],
                "pattern": {"shape": ["" if w == "more redundant" else "/" for w in words]},
            },
            customdata=np.stack([gaps, [v / L for v in deffs]], axis=-1),
            name="D_eff",
            hovertemplate="%{y}<br>D_eff = %{x:.4g} (D_eff/L = %{customdata[1]:.4g})"
            "<br>gap to F_L = %{customdata[0]:.3g}%<extra></extra>",
        )
    )
    fig.add_vline(x=F_L, line={"color": "black", "dash": "dash", "width": 2})
    top = max([F_L, *deffs])
    fig.update_layout(
        title=f"Effective depth beside F_L = 2L/(L+1) (L = {L})",
        xaxis={
            "title": f"D_eff (effective number of layers); dashed: F_L = {F_L:.3f}",
            "range": [0, top * 1.1],
        },
        yaxis={"categoryorder": "array", "categoryarray": labels[::-1]},
        height=140 + 55 * len(names),
        font={"size": 15},
        showlegend=False,
        **LAYOUT,
    )
    return fig


#: A story chart's legend names, shortened for the projector (prefix -> short name); the
#: hover keeps the full name.
SHORT_NAMES = {
    "this step": "this step",
    "same construction": "N → ∞",
    "previous step": "previous step",
    "orthogonal updates": "F_L (orthogonal updates)",
}


def legend_above(fig: go.Figure, *, short: bool = False) -> go.Figure:
    """The legend between the title and the plot, two entries a row, never over a curve;
    the top margin made room for it (font `fig.layout.font.size`). short: the legend's names
    shortened (`SHORT_NAMES`, the bias floor by its value). Returns `fig`."""
    shown = [t for t in fig.data if t.showlegend is not False]
    if short:
        for t in shown:
            name = t.name or ""
            match = next((v for k, v in SHORT_NAMES.items() if name.startswith(k)), None)
            if name.startswith("bias floor"):
                match = "bias floor b = " + name.rsplit("= ", 1)[-1]
            t.name = match or name
    size = fig.layout.font.size or 15
    rows = max(1, (len(shown) + 1) // 2)
    title = 2.2 * (fig.layout.title.font.size or size + 4)
    row = 1.6 * (fig.layout.legend.font.size or size)
    fig.update_layout(
        legend={"orientation": "h", "x": 0, "xanchor": "left", "y": 1.0, "yanchor": "bottom",
                "entrywidth": 0.5, "entrywidthmode": "fraction", "bgcolor": "rgba(0,0,0,0)"},
        title={"y": 1.0, "yanchor": "top", "yref": "container", "pad": {"t": 4}},
        margin={"t": int(title + rows * row + 12)},
    )  # fmt: skip
    return fig
