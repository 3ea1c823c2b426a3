"""BOS and attention-sink figures (SPEC section 11): pooling controls (the paper's Figure 2),
the position-0 norm ratio, massive activations, sink heads, and the passage inspector."""

from __future__ import annotations

__all__ = [
    "controls_dotplot",
    "massive_ratio_figure",
    "pos0_ratio",
    "sink_fraction_figure",
    "sink_scores_heatmap",
    "token_norm_heatmap",
]

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from deffcore.core.lazy import pd  # imported on first use: a chart never needs it
from deffcore.core.safe_text import plotly_text  # a passage's tokens are text, not HTML
from deffcore.figures.base import (
    COLOR_MEASURED,
    COLOR_REFERENCE,
    COLOR_SUB,
    LAYOUT,
    POOLING_COLORS,
    POOLING_SYMBOLS,
    REGIME_MORE,
    integer_ticks,
    log_axis,
    reference_hline,
)


def controls_dotplot(table: pd.DataFrame) -> go.Figure:
    """Gap to F_L per pooling control and model: the paper's Figure 2 dot plot.

    table: columns `label` (model / run), `pooling`, `gap_pct`, `source`. Each pooling is one
    trace, so its points share a colour; the vertical line marks the reference (gap 0).
    """
    fig = go.Figure()
    for pooling in table["pooling"].unique():
        part = table[table["pooling"] == pooling]
        is_paper = part["source"].astype(str).str.startswith("paper")
        fig.add_trace(
            go.Scatter(
                x=part["gap_pct"],
                y=part["label"],
                mode="markers",
                name=pooling,
                marker={
                    "size": 11,
                    "color": POOLING_COLORS.get(pooling),
                    # shape per pooling (colour is not the only cue); open = published value
                    "symbol": [
                        POOLING_SYMBOLS.get(pooling, "circle") + ("-open" if p else "")
                        for p in is_paper
                    ],
                    "line": {"width": 2},
                },
                customdata=part["source"],
                hovertemplate=(
                    f"%{{y}}<br>{pooling}: gap = %{{x:.2f}}%<br>%{{customdata}}<extra></extra>"
                ),
            )
        )
    fig.add_vline(x=0, line={"color": "black", "width": 1, "dash": "dash"})
    fig.update_layout(
        title="Pooling controls: gap to F_L (%) (filled: measured, open: paper)",
        xaxis_title=f"gap to F_L (%)  (> 0: D_eff < F_L, {REGIME_MORE})",
        height=max(300, 50 * table["label"].nunique() + 150),
        **LAYOUT,
    )
    return fig


def pos0_ratio(ratios: np.ndarray) -> go.Figure:
    """Position-0 norm ratio per layer, `ratios (L+1,)` for h_0 .. h_L."""
    ratios = np.asarray(ratios, dtype=np.float64)
    layers = list(range(ratios.shape[0]))
    peak = int(np.nanargmax(ratios))
    fig = go.Figure(
        go.Bar(
            x=layers,
            y=ratios,
            name="position-0 norm ratio: ‖h(pos 0)‖ / mean ‖h(t ≥ 1)‖",
            marker={"color": [COLOR_SUB if i == peak else COLOR_MEASURED for i in layers]},
            hovertemplate="layer %{x}<br>ratio = %{y:.4f}x<extra></extra>",
        )
    )
    fig.add_hline(y=1.0, line={"color": COLOR_REFERENCE, "dash": "dash"})
    fig.update_layout(
        title=f"Position-0 norm ratio per layer (peak {ratios[peak]:.1f}× at layer {peak})",
        xaxis_title="layer (0 = h_0, the input of block 1)",
        yaxis_title="‖h(pos 0)‖ / mean ‖h(t ≥ 1)‖",
        height=360,
        **LAYOUT,
    )
    return fig


def massive_ratio_figure(
    ratio: Sequence[float],
    position: Sequence[int],
    dim: Sequence[int],
    *,
    threshold: float = 100.0,
) -> go.Figure:
    """Massive activations per state, log scale: `ratio (L+1,)` = mean_b max|h| / median |h|
    for h_0 .. h_L, with where the maximum sits (`position`, feature `dim`) on hover; states
    above `threshold` are drawn in vermillion and the threshold as a dashed line."""
    r = np.asarray([np.nan if v is None else v for v in ratio], dtype=np.float64)
    layers = list(range(r.shape[0]))
    over = [bool(np.isfinite(v) and v > threshold) for v in r]
    fig = go.Figure(
        go.Scatter(
            x=layers,
            y=r,
            mode="lines+markers",
            name="massive-activation ratio: mean max |h| / median |h|",
            line={"color": COLOR_MEASURED},
            marker={
                "size": 9,
                "color": [COLOR_SUB if o else COLOR_MEASURED for o in over],
                "symbol": ["diamond" if o else "circle" for o in over],
            },
            customdata=np.column_stack([np.asarray(position), np.asarray(dim)]),
            hovertemplate="layer %{x}<br>massive-activation ratio = %{y:,.1f}×<br>largest |h| "
            "at position %{customdata[0]}, feature %{customdata[1]}<extra></extra>",
        )
    )
    onset = next((i for i, o in enumerate(over) if o), None)
    where = "none above the threshold" if onset is None else f"onset at layer {onset}"
    fig.update_layout(
        title=f"Massive activations per layer ({where})",
        xaxis_title="layer (0 = h_0, the input of block 1)",
        yaxis={"title": "massive-activation ratio (log)", **log_axis(r, include=(threshold,))},
        height=360,
        showlegend=False,
        **LAYOUT,
    )
    reference_hline(fig, threshold, f"{threshold:.0f}×: massive", log=True)
    integer_ticks(fig, len(layers))
    return fig


def sink_fraction_figure(fraction: Sequence[float], *, threshold: float = 0.3) -> go.Figure:
    """Share of attention-sink heads per block, `fraction (L,)` for blocks 1..L (a head is a
    sink when its mean attention from positions >= 1 to position 0 exceeds `threshold`)."""
    f = np.asarray(fraction, dtype=np.float64)
    blocks = list(range(1, f.shape[0] + 1))
    fig = go.Figure(
        go.Bar(
            x=blocks,
            y=f,
            name="sink heads",
            marker={"color": COLOR_MEASURED},
            hovertemplate="block %{x}<br>%{y:.0%} of heads are sinks<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"Attention sinks: share of heads attending > {threshold:g} to position 0",
        xaxis_title="block l",
        yaxis={"title": "share of heads", "range": [0, 1], "tickformat": ".0%"},
        height=340,
        **LAYOUT,
    )
    integer_ticks(fig, len(blocks))
    return fig


def sink_scores_heatmap(scores: np.ndarray, *, threshold: float = 0.3) -> go.Figure:
    """Mean attention to position 0 per block and head, `scores (L, H)` in [0, 1]."""
    s = np.asarray(scores, dtype=np.float64)
    fig = go.Figure(
        go.Heatmap(
            z=s,
            x=list(range(s.shape[1])),
            y=list(range(1, s.shape[0] + 1)),
            zmin=0.0,
            zmax=1.0,
            colorscale="Viridis",
            colorbar={"title": "attention<br>to pos 0"},
            hovertemplate="block %{y}, head %{x}<br>mean attention to position 0 = %{z:.3f}"
            "<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"Attention to position 0 per head (sink: > {threshold:g})",
        xaxis_title="head",
        yaxis_title="block l",
        height=max(300, 14 * s.shape[0] + 120),
        **LAYOUT,
    )
    return fig


def token_norm_heatmap(
    norms: np.ndarray,
    tokens: Sequence[str],
    *,
    max_position: Sequence[int] | None = None,
    max_dim: Sequence[int] | None = None,
    max_value: Sequence[float] | None = None,
) -> go.Figure:
    """Passage inspector: ||h_l[t]|| per layer and position, `norms (L+1, T)`, log colour.

    tokens: the T token strings (shown on hover and under the x axis for short passages).
    max_position/max_dim/max_value (L+1,): where this passage's largest |h_l[t, j]| sits per
    layer (the massive feature); drawn as an outline around that cell, never over it, so the
    cell's colour (the position-0 column the caption points to) stays visible, with an
    invisible marker at the cell's centre carrying the hover (the feature j and |h_j|)."""
    z = np.asarray(norms, dtype=np.float64)
    L1, T = z.shape
    logz = np.log10(np.clip(z, 1e-12, None))
    text = [[plotly_text(repr(tok)[1:-1]) for tok in tokens] for _ in range(L1)]
    lo, hi = int(np.floor(np.nanmin(logz))), int(np.ceil(np.nanmax(logz)))
    ticks = list(range(lo, hi + 1))
    fig = go.Figure(
        go.Heatmap(
            z=logz,
            x=list(range(T)),
            y=list(range(L1)),
            customdata=z,
            text=text,
            colorscale="Viridis",
            colorbar={
                "title": "‖h‖ (log)",
                "tickvals": ticks,
                "ticktext": [f"{10.0**t:g}" for t in ticks],
            },
            name="‖h_l[t]‖",
            hovertemplate="layer %{y}, position %{x}<br>token %{text}<br>‖h‖ = "
            "%{customdata:.4g}<extra></extra>",
        )
    )
    if max_position is not None:
        dims = list(max_dim) if max_dim is not None else [None] * L1
        vals = list(max_value) if max_value is not None else [None] * L1
        fig.add_trace(
            go.Scatter(
                x=list(max_position),
                y=list(range(L1)),
                mode="markers",
                name="largest |h_j| (feature j)",
                marker={"size": 12, "opacity": 0, "color": COLOR_SUB},  # hover only
                showlegend=False,
                customdata=np.column_stack([np.asarray(dims, dtype=object), vals]),
                hovertemplate="layer %{y}: largest |h| at position %{x}<br>feature "
                "%{customdata[0]}, |h| = %{customdata[1]:.4g}<extra></extra>",
            )
        )
        ox: list[float | None] = []
        oy: list[float | None] = []
        for layer, t in enumerate(max_position):  # each cell's border: its colour stays seen
            ox += [t - 0.5, t + 0.5, t + 0.5, t - 0.5, t - 0.5, None]
            oy += [layer - 0.5, layer - 0.5, layer + 0.5, layer + 0.5, layer - 0.5, None]
        fig.add_trace(
            go.Scatter(
                x=ox,
                y=oy,
                mode="lines",
                name="largest |h_j| (feature j): outlined cell",
                line={"color": COLOR_SUB, "width": 1.5},
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        title="Token-state norms per layer and position (log colour)",
        xaxis_title="position t",
        yaxis={"title": "layer (0 = h_0, at the top)", "autorange": "reversed"},
        height=max(320, 16 * L1 + 140),
        legend={"orientation": "h", "y": -0.2},
        **LAYOUT,
    )
    if T <= 40:
        fig.update_xaxes(
            tickvals=list(range(T)), ticktext=[repr(t)[1:-1] for t in tokens], tickangle=-60
        )
    return fig
