"""Stage 5, figures of the papers' own lens definitions beside the project's: Sun
et al.'s share of passages with a massive activation per state, and the sink-head share per
block by the project's score and by Gu et al.'s metric (`deffcore.measures.paper_massive`,
`deffcore.measures.paper_sinks`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from deffcore.figures.base import COLOR_MEASURED, COLOR_SUB, LAYOUT, integer_ticks
from deffcore.statistics.verdict import finite_or_nan

__all__ = ["sink_shares_figure", "sun_share_figure"]


def sun_share_figure(share: Sequence[float | None]) -> go.Figure:
    """Sun et al.'s criterion per activation, `share (L+1,)` for h_0 .. h_L: the share of
    passages with an activation |a| > 100 and >= 1,000x its state's median."""
    s = finite_or_nan(share)
    layers = list(range(s.shape[0]))
    onset = next((i for i, v in enumerate(s) if np.isfinite(v) and v > 0), None)
    fig = go.Figure(
        go.Bar(
            x=layers,
            y=s,
            name="share of passages with a massive activation (Sun et al.)",
            marker={"color": [COLOR_SUB if v > 0 else COLOR_MEASURED for v in np.nan_to_num(s)]},
            hovertemplate="layer %{x}<br>%{y:.0%} of passages have an activation > 100 and "
            "≥ 1,000× the median<extra></extra>",
        )
    )
    where = "in no state" if onset is None else f"from layer {onset}"
    fig.update_layout(
        title=f"Massive activations by Sun et al.'s criterion, per activation ({where})",
        xaxis_title="layer (0 = h_0, the input of block 1)",
        yaxis={"title": "share of passages", "range": [0, 1], "tickformat": ".0%"},
        height=340,
        showlegend=False,
        **LAYOUT,
    )
    integer_ticks(fig, len(layers))
    return fig


def sink_shares_figure(
    ours: Sequence[float | None],
    gu: Sequence[float | None] | None = None,
    *,
    threshold: float = 0.3,
    gu_window: str = "whole passages",
) -> go.Figure:
    """Share of attention-sink heads per block 1..L: `ours (L,)`, the project's score (mean
    attention from queries >= 1 to position 0 over passages, then > threshold) and, when
    given, `gu (L,)`, Gu et al.'s metric (query 0 included, > threshold per passage, then the
    mean over passages) on `gu_window`."""
    f = finite_or_nan(ours)
    blocks = list(range(1, f.shape[0] + 1))
    fig = go.Figure(
        go.Bar(
            x=blocks,
            y=f,
            name="ours: mean attention, then > 0.3",
            marker={"color": COLOR_MEASURED},
            hovertemplate="block %{x}<br>%{y:.0%} of heads are sinks (ours)<extra></extra>",
        )
    )
    if gu is not None:
        fig.add_trace(
            go.Bar(
                x=blocks,
                y=finite_or_nan(gu),
                name=f"Gu et al.: > 0.3 per passage, {gu_window}",
                marker={"color": COLOR_SUB},
                hovertemplate="block %{x}<br>%{y:.0%} of heads are sinks (Gu et al., "
                f"{gu_window})<extra></extra>",
            )
        )
    fig.update_layout(
        title=f"Attention sinks: share of heads attending > {threshold:g} to position 0",
        xaxis_title="block l",
        yaxis={"title": "share of heads", "range": [0, 1], "tickformat": ".0%"},
        barmode="group",
        height=340,
        **LAYOUT,
    )
    integer_ticks(fig, len(blocks))
    return fig
