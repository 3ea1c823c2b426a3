"""Models-page figures: D_eff/L against depth for every cached run and paper model, and the
gap to F_L per pooling control (colour = family or pooling, shape = where a value comes from)."""

from __future__ import annotations

__all__ = [
    "FAMILY_COLORS",
    "MODEL_SYMBOLS",
    "models_depth_scatter",
    "models_gap_by_pooling",
    "with_a_gap",
]

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go

from deffcore.core.lazy import pd  # imported on first use: a chart never needs it
from deffcore.core.safe_text import plotly_text  # a label's text in a hover is text, not HTML
from deffcore.figures.base import (
    COLOR_PAPER,
    COLOR_REFERENCE,
    LAYOUT,
    OKABE_ITO,
    POOLING_COLORS,
    POOLING_SYMBOLS,
    log_axis,
)

#: A colour per model family on the Models page (Okabe-Ito, then greys).
FAMILY_COLORS: dict[str, str] = {
    "Pythia": OKABE_ITO["orange"],
    "OLMo-2": OKABE_ITO["sky blue"],
    "Qwen": OKABE_ITO["bluish green"],
    "Llama": OKABE_ITO["blue"],
    "Mistral": OKABE_ITO["vermillion"],
    "Gemma": OKABE_ITO["reddish purple"],
    "SmolLM2": OKABE_ITO["black"],
    "GPT-2": OKABE_ITO["yellow"],
    "GPT-NeoX": "#8c6d31",
    "other": COLOR_PAPER,
}
#: Marker per (source, weights): shape says where a point comes from (paper, measured here,
#: shipped precomputed, shared), fill says trained/random.
MODEL_SYMBOLS: dict[tuple[str, str], str] = {
    ("paper", "trained"): "diamond",
    ("paper", "random"): "diamond-open",
    ("cached", "trained"): "circle",
    ("cached", "random"): "circle-open",
    ("precomputed", "trained"): "square",
    ("precomputed", "random"): "square-open",
    ("shared", "trained"): "star",
    ("shared", "random"): "star-open",
}


def _family_points(
    x: Any, y: Any, *, family: str, name: str, symbol: str, size: int, line: dict, **trace: Any
) -> go.Scatter:
    """One family's markers on the depth scatter: the family's colour, one legend group."""
    return go.Scatter(
        x=x,
        y=y,
        mode="markers",
        name=name,
        legendgroup=family,
        marker={
            "color": FAMILY_COLORS.get(family, COLOR_PAPER),
            "symbol": symbol,
            "size": size,
            "line": line,
        },
        **trace,
    )


def _known(value: Any) -> bool:
    """A cell that holds a value (not None, not NaN)."""
    return value is not None and value == value


def _hover(r: Any, source: str, weights: str) -> str:
    """A point's hover: its label (or model), where it comes from, L, and N, tokens and trust
    where the row has them (a paper row has no max tokens, an empty cache no N at all)."""
    name = getattr(r, "label", None) if _known(getattr(r, "label", None)) else r.model
    text = f"{plotly_text(name)}<br>{source}, {weights}<br>L = {int(r.layers)}"
    n, tokens, trust = (getattr(r, k, None) for k in ("n", "max_tokens", "trust"))
    if _known(n):
        text += f", N = {int(n):,}"
    if _known(tokens):
        text += f", {int(tokens)} tokens"
    return text + (f"<br>trust: {trust}" if _known(trust) else "")


def _drawn_y(fig: go.Figure) -> list[float]:
    """Every y value the figure draws, error bars' ends included (what its axis must show)."""
    out: list[float] = []
    for tr in fig.data:
        y = np.asarray(tr.y if tr.y is not None else [], dtype=np.float64)
        out += list(y)
        err = tr.error_y
        if err is not None and err.array is not None:
            out += list(y + np.asarray(err.array, dtype=np.float64))
            out += list(y - np.asarray(err.arrayminus, dtype=np.float64))
    return out


def models_depth_scatter(table: pd.DataFrame) -> go.Figure:
    """D_eff/L against L, one point per row, colour = family, shape = paper/cached, open = random.

    `table` columns: model, family, source ("paper"/"cached"), weights ("trained"/"random"),
    layers, deff_over_L; optional random_mean/random_low/random_high (a published null, drawn as
    an open marker with its min-max range) and n/max_tokens/dataset (hover). Rows without
    layers or D_eff/L are skipped. The dotted curve is 1/L (D_eff = 1: a single direction).
    """
    fig = go.Figure()
    df = table.dropna(subset=["layers", "deff_over_L"]) if len(table) else table
    for (family, source, weights), sub in (
        df.groupby(["family", "source", "weights"], sort=True) if len(df) else []
    ):
        hover = [_hover(r, source, weights) for r in sub.itertuples()]
        fig.add_trace(
            _family_points(
                sub["layers"],
                sub["deff_over_L"],
                family=family,
                name=f"{family} ({source}, {weights})",
                symbol=MODEL_SYMBOLS.get((source, weights), "circle"),
                size=12 if source == "paper" else 10,
                line={"width": 2 if weights == "random" else 1, "color": "#333"},
                text=hover,
                hovertemplate="%{text}<br>D_eff/L = %{y:.4g}<extra></extra>",
            )
        )
    if len(table) and "random_mean" in table:
        null = table.dropna(subset=["layers", "random_mean"])
        for family, sub in null.groupby("family", sort=True):
            low = sub["random_low"] if "random_low" in sub else sub["random_mean"]
            high = sub["random_high"] if "random_high" in sub else sub["random_mean"]
            low, high = low.fillna(sub["random_mean"]), high.fillna(sub["random_mean"])
            fig.add_trace(
                _family_points(
                    sub["layers"],
                    sub["random_mean"],
                    family=family,
                    name=f"{family} (paper, random null)",
                    symbol=MODEL_SYMBOLS[("paper", "random")],
                    size=12,
                    line={"width": 2},
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": high - sub["random_mean"],
                        "arrayminus": sub["random_mean"] - low,
                        "visible": True,
                    },
                    text=[f"{plotly_text(m)} random-weight null (paper)" for m in sub["model"]],
                    hovertemplate="%{text}<br>L = %{x}<br>D_eff/L = %{y:.4g}<extra></extra>",
                )
            )
    if len(df):
        L = np.unique(np.geomspace(max(2, df["layers"].min()), df["layers"].max(), 60).round())
        fig.add_trace(
            go.Scatter(
                x=L,
                y=1.0 / L,
                mode="lines",
                name="1/L (D_eff = 1)",
                line={"color": COLOR_REFERENCE, "dash": "dot"},
                hovertemplate="L = %{x}: 1/L = %{y:.4g}<extra></extra>",
            )
        )
    fig.update_layout(
        title="D_eff/L against depth L (filled: trained, open: random weights)",
        xaxis={"title": "layers L", **log_axis(df["layers"] if len(df) else [], pad=1.2)},
        yaxis={"title": "D_eff/L", **log_axis(_drawn_y(fig), pad=1.2)},
        height=480,
        legend={"font": {"size": 11}},
        **LAYOUT,
    )
    return fig


def with_a_gap(table: pd.DataFrame, poolings: Sequence[str]) -> pd.DataFrame:
    """The rows of `table` with a gap for at least one of `poolings` (published or measured)."""
    cols = [f"gap_{p}" for p in poolings if f"gap_{p}" in table]
    return table[table[cols].notna().any(axis=1)] if cols else table.iloc[:0]


def models_gap_by_pooling(table: pd.DataFrame, poolings: Sequence[str]) -> go.Figure:
    """Gap to F_L (%) per pooling control, one row of markers per model (colour = pooling).

    `table` columns: model (unique labels), and `gap_<pooling>` for each pooling in `poolings`
    (NaN where not measured/published); a row with none of them is left out (`with_a_gap`: the
    page names them). A positive gap: more redundant than orthogonal updates.
    """
    fig = go.Figure()
    table = with_a_gap(table, poolings)  # a row with no gap at all would be an empty line
    labels = list(table["model"]) if len(table) else []
    for p in poolings:
        col = f"gap_{p}"
        if col not in table or table[col].isna().all():
            continue
        fig.add_trace(
            go.Scatter(
                x=table[col],
                y=labels,
                mode="markers",
                name=p,
                marker={
                    "color": POOLING_COLORS.get(p, COLOR_PAPER),
                    "symbol": POOLING_SYMBOLS.get(p, "circle"),
                    "size": 10,
                },
                hovertemplate="%{y}<br>" + p + ": gap = %{x:.1f}%<extra></extra>",
            )
        )
    fig.add_vline(x=0, line={"color": COLOR_REFERENCE, "dash": "dot"})
    fig.update_layout(
        title="Gap to F_L per pooling control (right of 0: more redundant than orthogonal updates)",
        xaxis_title="gap to F_L (%)",
        yaxis={"autorange": "reversed", "type": "category"},
        height=max(320, 22 * len(labels) + 140),
        **LAYOUT,
    )
    return fig
