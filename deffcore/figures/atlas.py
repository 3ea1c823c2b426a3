"""The depth-use atlas's figures (SPEC 16): an `Atlas` (or its to_dict) in, `go.Figure` out.

Stage: figures.

Every per-block chart has blocks 1..L on x with the passage-bootstrap interval as error bars,
and the phase point marked; the angular distance is a heatmap over h_0..h_L beside Gromov et
al.'s best block per size; the skip effect is a heatmap of skipped block x later block and the
next-token KL per skipped block; where predictions form (the logit lens, SPEC 16.2) is
KL(p_L || p_l) and the top-1 agreement over layers 0..L with the prediction depth marked.
"""

from __future__ import annotations

__all__ = [
    "angular_figure",
    "block_influence_figure",
    "contribution_figure",
    "lens_figure",
    "skip_figure",
]

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from deffcore.figures.base import (
    COLOR_MEASURED,
    COLOR_REFERENCE,
    LAYOUT,
    OKABE_ITO,
    integer_ticks,
    log_axis,
)

COLOR_ATTENTION = OKABE_ITO["orange"]
COLOR_MLP = OKABE_ITO["bluish green"]
COLOR_PHASE = OKABE_ITO["vermillion"]


def _d(atlas: Any) -> dict[str, Any]:
    return atlas if isinstance(atlas, dict) else atlas.to_dict()


def _floats(values: Any) -> np.ndarray:
    """A stored list (or list of rows) as float64, None (no value) as NaN."""
    return np.asarray(values, dtype=np.float64)


def _errors(d: dict[str, Any], name: str, values: np.ndarray, **style: Any) -> dict | None:
    """Asymmetric error bars from the passage-bootstrap interval `d["intervals"][name]`."""
    band = (d.get("intervals") or {}).get(name)
    if not band:
        return None
    return {
        "type": "data",
        "symmetric": False,
        "array": np.clip(_floats(band["high"]) - values, 0, None),
        "arrayminus": np.clip(values - _floats(band["low"]), 0, None),
        **style,
    }


def _series(fig, d, name, values, label, color, row, *, dash=None, first=1, what="block") -> None:
    """`values` at x = first, first + 1, ... (blocks from 1, layers from 0) in panel `row`,
    with the interval `name` of the atlas as error bars."""
    y = _floats(values)
    fig.add_trace(
        go.Scatter(
            x=list(range(first, len(y) + first)),
            y=y,
            mode="lines+markers",
            name=label,
            line={"color": color, "dash": dash},
            error_y=_errors(d, name, y, thickness=1),
            hovertemplate=f"{what} %{{x}}<br>{label} = %{{y:.4g}}<extra></extra>",
        ),
        row=row,
        col=1,
    )


def _marker_line(fig: go.Figure, x: float, rows: int, text: str, position: str) -> None:
    """A dotted vertical line at `x` in every panel, said once inside the first panel."""
    said = {
        "annotation_text": text,
        "annotation_position": position,
        "annotation_font_color": COLOR_PHASE,
    }
    for row in range(1, rows + 1):
        fig.add_vline(
            x=x,
            line={"color": COLOR_PHASE, "dash": "dot"},
            row=row,
            col=1,
            **(said if row == 1 else {}),
        )


def _phase(fig: go.Figure, d: dict[str, Any], rows: int) -> None:
    """The phase point as a dotted line after its block."""
    p = d["phase_point"]
    if p < d["layers"]:
        _marker_line(fig, p + 0.5, rows, f"phase point: after block {p}", "top right")


def _r_axis(d: dict[str, Any]) -> dict[str, Any]:
    """r_l's log axis (`log_axis`: 1-2-5 labels written whole, or powers of ten, never plotly's
    bare first digits "2, 10, 5, 2, 1"), fitted to every r drawn and its interval."""
    drawn: list[Any] = list(d["relative_contribution"])
    names = ["relative_contribution"]
    sub = d.get("sublayers") or {}
    for part in ("attention", "mlp"):
        if part in sub:
            drawn += list(sub[part]["relative_contribution"])
            names.append(f"{part}_relative_contribution")
    for name in names:
        band = (d.get("intervals") or {}).get(name) or {}
        drawn += list(band.get("low") or []) + list(band.get("high") or [])
    return log_axis(drawn, pad=1.3)


def contribution_figure(atlas: Any) -> go.Figure:
    """r_l (attention and MLP beside it where known) and c_l per block, with intervals."""
    d = _d(atlas)
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=(
            "relative contribution r_l = ‖u_l‖ / ‖h_{l−1}‖",
            "alignment c_l = cos(u_l, h_{l−1})",
        ),
    )
    r, c = "relative_contribution", "alignment"
    _series(fig, d, r, d[r], "block r_l", COLOR_MEASURED, 1)
    sub = d.get("sublayers")
    if sub:
        for part, color in (("attention", COLOR_ATTENTION), ("mlp", COLOR_MLP)):
            _series(fig, d, f"{part}_{r}", sub[part][r], f"{part} r", color, 1, dash="dash")
            _series(fig, d, f"{part}_{c}", sub[part][c], f"{part} c", color, 2, dash="dash")
    _series(fig, d, c, d[c], "block c_l", COLOR_MEASURED, 2)
    fig.add_hline(y=0, line={"color": COLOR_REFERENCE, "width": 1}, row=2, col=1)
    # log scale: the first blocks can write many times the stream they read (small embeddings)
    fig.update_yaxes(title_text="r_l (log)", row=1, col=1, **_r_axis(d))
    fig.update_yaxes(title_text="c_l", row=2, col=1)
    _phase(fig, d, 2)
    fig.update_layout(
        title="How much each block writes, and in which direction (Csordás et al.)",
        height=620,
        legend={"orientation": "h", "y": -0.12},
        **LAYOUT,
    )
    fig.update_xaxes(title_text="block l", row=2, col=1)
    integer_ticks(fig, d["layers"])
    return fig


def block_influence_figure(atlas: Any) -> go.Figure:
    """BI_l per block (passage-weighted, with interval) and ShortGPT's token-weighted BI."""
    d = _d(atlas)
    fig = make_subplots(rows=1, cols=1)
    bi, label = "block_influence", "BI_l (each passage weighs the same)"
    _series(fig, d, bi, d[bi], label, COLOR_MEASURED, 1)
    label = "BI_l token-weighted (ShortGPT, the pruning lab)"
    _series(fig, d, f"{bi}_tokens", d[f"{bi}_tokens"], label, COLOR_ATTENTION, 1, dash="dot")
    _phase(fig, d, 1)
    fig.update_layout(
        title="Block Influence: 1 − mean cos(h_{l−1}, h_l) (ShortGPT)",
        xaxis_title="block l",
        yaxis_title="BI_l",
        height=420,
        legend={"orientation": "h", "y": -0.25},
        **LAYOUT,
    )
    integer_ticks(fig, d["layers"])
    return fig


def lens_figure(atlas: Any) -> go.Figure | None:
    """Where predictions form: KL(p_L || p_l) and top-1 agreement per layer 0..L (layer 0 = the
    embeddings), with intervals, and the mean prediction depth; None when the atlas has no lens."""
    d = _d(atlas)
    lens = d.get("logit_lens")
    if not lens:
        return None
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        subplot_titles=(
            "KL(p_L ‖ p_l): what layer l's lens still misses of the final prediction (nats)",
            "top-1 agreement with the final layer",
        ),
    )
    for row, name, values, label in (
        (1, "logit_lens_kl", lens["kl"], "KL(p_L ‖ p_l)"),
        (2, "logit_lens_top1", lens["top1_agreement"], "top-1 = final top-1"),
    ):
        _series(fig, d, name, values, label, COLOR_MEASURED, row, first=0, what="layer")
    depth = lens.get("prediction_depth")
    if depth is not None:
        _marker_line(fig, depth, 2, f"mean prediction depth {depth:.2f}", "top left")
    fig.update_yaxes(title_text="KL (nats)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="share of tokens", range=[0, 1.05], row=2, col=1)
    fig.update_xaxes(title_text="layer l (0 = embeddings)", row=2, col=1)
    fig.update_layout(
        title="Where predictions form (logit lens: the model's final norm and unembedding on h_l)",
        height=560,
        showlegend=False,
        **LAYOUT,
    )
    return fig


def angular_figure(atlas: Any) -> go.Figure:
    """Angular distance heatmap over h_0..h_L and Gromov et al.'s best block per size n."""
    d = _d(atlas)
    D, g = _floats(d["angular_distance"]), d["gromov"]
    best = _floats(g["best_distance"])
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.5, 0.5],
        horizontal_spacing=0.22,
        subplot_titles=("d(i, j) at the last token", "best block of n layers"),
    )
    idx = list(range(D.shape[0]))
    fig.add_trace(
        go.Heatmap(
            z=D,
            x=idx,
            y=idx,
            colorscale="Viridis",
            zmin=0,
            zmax=float(np.nanmax(D)),
            colorbar={"title": "d", "x": 0.41, "thickness": 12},
            hovertemplate="h_%{y} vs h_%{x}<br>d = %{z:.4f}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    n = list(range(1, len(best) + 1))
    starts = g["best_start"]
    fig.add_trace(
        go.Scatter(
            x=n,
            y=best,
            mode="lines+markers",
            name="min over l of d(l, l+n)",
            # a start is None where a file holds no best block for that size (the schema allows it)
            customdata=[
                [None, None] if s is None else [s + 1, s + k]
                for k, s in zip(n, starts, strict=True)
            ],
            line={"color": COLOR_MEASURED},
            hovertemplate="n = %{x}: drop blocks %{customdata[0]}–%{customdata[1]}"
            "<br>d = %{y:.4f}<extra></extra>",
        ),
        row=1,
        col=2,
    )
    fig.add_hline(
        y=g["budget"],
        line={"color": COLOR_PHASE, "dash": "dot"},
        row=1,
        col=2,
        annotation_text=f"budget {g['budget']:.0%}: drop {g['n_drop']}",
    )
    fig.update_yaxes(autorange="reversed", title_text="h_i", row=1, col=1)
    fig.update_xaxes(title_text="h_j", row=1, col=1)
    fig.update_xaxes(title_text="block size n", row=1, col=2)
    fig.update_yaxes(title_text="angular distance (share of π)", row=1, col=2)
    fig.update_layout(
        title="Angular distance between layers (Gromov et al.)",
        height=460,
        showlegend=False,
        **LAYOUT,
    )
    return fig


def skip_figure(skip: Any) -> go.Figure:
    """Skip effect: e_{s->l} heatmap (skipped block s x later block l) and KL per s."""
    d = skip if isinstance(skip, dict) else skip.to_dict()
    E, kl = _floats(d["later"]), _floats(d["kl"])
    L = E.shape[0]
    blocks = list(range(1, L + 1))
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.5, 0.5],
        horizontal_spacing=0.22,
        subplot_titles=("effect on later blocks", "effect on the output"),
    )
    fig.add_trace(
        go.Heatmap(
            z=E,
            x=blocks,
            y=blocks,
            colorscale="Viridis",
            colorbar={"title": "e", "x": 0.41, "thickness": 12},
            hovertemplate="skip %{y}, block %{x}<br>e = %{z:.4f}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Bar(
            x=blocks,
            y=kl,
            name="KL",
            marker_color=COLOR_MEASURED,
            error_y=_errors(d, "kl", kl),
            hovertemplate="skip block %{x}<br>KL = %{y:.4g}<extra></extra>",
        ),
        row=1,
        col=2,
    )
    fig.update_yaxes(autorange="reversed", title_text="skipped block s", row=1, col=1)
    fig.update_xaxes(title_text="later block l", row=1, col=1)
    fig.update_xaxes(title_text="skipped block s", row=1, col=2)
    fig.update_yaxes(title_text="mean next-token KL(p ‖ p_skip)", row=1, col=2)
    fig.update_layout(
        title=f"Skipping one block ({d['passages']} passages; Csordás et al. §3.2)",
        height=460,
        showlegend=False,
        **LAYOUT,
    )
    return fig
