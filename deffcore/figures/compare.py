"""Figures that compare runs: the gap-to-F_L bars (the paper's Figure 1), lag profiles of
several runs (a `run_style` per run), two similarity maps side by side."""

from __future__ import annotations

__all__ = [
    "RUN_COLORS",
    "RUN_DASHES",
    "RUN_SYMBOLS",
    "compare_lag_profiles",
    "gap_bars",
    "run_style",
    "side_by_side_heatmaps",
]

from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go

from deffcore.core.lazy import pd  # imported on first use: a chart never needs it
from deffcore.core.safe_text import plotly_text
from deffcore.figures.base import (
    COLOR_ABOVE,
    COLOR_PAPER,
    COLOR_SUB,
    LAYOUT,
    OKABE_ITO,
    REGIME_LESS,
    REGIME_MORE,
    regime_color,
    regime_label,
)

#: Bar style per source of a gap bar: published values hatched grey, measured ones by regime.
GAP_BAR_STYLES: dict[str, dict[str, str | None]] = {
    "paper": {"color": COLOR_PAPER, "pattern": "/"},
    "precomputed": {"color": None, "pattern": ""},  # the shipped gallery runs
    "shared": {"color": None, "pattern": ""},  # snapshot files someone sent (Runs page)
    "cached": {"color": None, "pattern": ""},
    "this run": {"color": None, "pattern": ""},
}


def gap_bars(table: pd.DataFrame) -> go.Figure:
    """Signed gap-to-F_L bars, grouped by family and sorted within each family.

    table: one row per bar with columns `label`, `family`, `gap_pct`, `source`, where source is
    "this run", "cached", "precomputed" (a shipped gallery run), "shared" (a snapshot file
    someone sent) or "paper". Published values
    keep a hatched grey bar and the word "paper" in their label, so they are never mistaken
    for measurements.

    Measured bars are coloured by regime (vermillion: more redundant than orthogonal updates,
    sky blue: less redundant), so one source mixes colours; the source traces therefore keep
    no legend swatch (plotly would draw the first bar's colour, e.g. a "cached" swatch in the
    wrong regime colour) and the legend is a line of coloured words above the plot. Each bar
    also carries its gap as text and the regime in its hover, so colour is never the only cue.
    """
    t = table.copy()
    t["family_order"] = t.groupby("family")["gap_pct"].transform("mean")
    t = t.sort_values(["family_order", "family", "gap_pct"], ascending=[True, True, True])
    fig = go.Figure()
    for source in GAP_BAR_STYLES:
        part = t[t["source"] == source]
        if not part.empty:
            fig.add_trace(_gap_bar_trace(part, source))
    fig.add_vline(x=0, line={"color": "black", "width": 1})
    _add_regime_legend(fig, set(t["source"]))
    span = float(np.nanmax(np.abs(t["gap_pct"]))) if len(t) else 1.0
    fig.update_layout(
        title={
            "text": "Gap to the orthogonal-update reference F_L = 2L/(L+1)",
            "y": 0.98,
            "yanchor": "top",
        },
        xaxis={
            "title": "gap to F_L (%)   ← less redundant · more redundant →",
            # room for the text labels outside the bars on both sides
            "range": [-1.25 * span - 1, 1.25 * span + 1],
        },
        yaxis={"categoryorder": "array", "categoryarray": list(t["label"])},
        barmode="overlay",
        height=max(380, 26 * len(t) + 150),
        margin={"l": 60, "r": 20, "t": 90, "b": 50},
    )
    return fig


def _gap_bar_trace(part: pd.DataFrame, source: str) -> go.Bar:
    """The bars of one source (`GAP_BAR_STYLES`), each with its gap as text and its regime."""
    style = GAP_BAR_STYLES[source]
    colors = (
        [style["color"]] * len(part)
        if style["color"]
        else [regime_color(g) for g in part["gap_pct"]]
    )
    return go.Bar(
        x=part["gap_pct"],
        y=part["label"],
        orientation="h",
        name=source,
        marker={
            "color": colors,
            "pattern": {"shape": style["pattern"]},
            "line": {"width": 2 if source == "this run" else 0, "color": "black"},
        },
        customdata=np.stack(
            [part["family"], part["source"], [regime_label(g) for g in part["gap_pct"]]],
            axis=-1,
        ),
        text=[f"{g:+.1f}%" for g in part["gap_pct"]],
        textposition="outside",
        cliponaxis=False,
        showlegend=False,
        hovertemplate=(
            "%{y}<br>family %{customdata[0]}<br>gap = %{x:.3g}%"
            "<br>%{customdata[2]}<br>source: %{customdata[1]}<extra></extra>"
        ),
    )


def _add_regime_legend(fig: go.Figure, sources: set[str]) -> None:
    """The gap bars' legend: a line of coloured words above the plot (see `gap_bars`), naming
    the hatched paper bars and the outlined "this run" bar only when they are drawn."""
    # two short lines: one long line is cut at the right of a narrow chart
    legend = (
        f"<span style='color:{COLOR_SUB}'>■</span> gap > 0: {REGIME_MORE}   "
        f"<span style='color:{COLOR_ABOVE}'>■</span> gap < 0: {REGIME_LESS}"
    )
    marks = [
        f"<span style='color:{COLOR_PAPER}'>▨</span> paper (published)" * ("paper" in sources),
        "□ black outline: this run" * ("this run" in sources),
    ]
    if any(marks):
        legend += "<br>" + "   ".join(m for m in marks if m)
    fig.add_annotation(
        text=legend,
        xref="paper",
        yref="paper",
        x=1.0,  # right-aligned: long run labels leave the plot area narrow, the text runs left
        y=1.0,
        yanchor="bottom",
        xanchor="right",
        align="right",
        showarrow=False,
        font={"size": 12},
    )


#: One colour per compared run, in the order the runs are listed: Okabe-Ito without yellow
#: (too faint on white), and one line dash and marker per run as well (the dashes cycle by 4,
#: the colours by 7: no two of the first 28 runs look the same, and two lines that overlap
#: stay apart without colour).
RUN_COLORS: tuple[str, ...] = tuple(
    OKABE_ITO[c]
    for c in ("blue", "orange", "bluish green", "vermillion", "reddish purple", "sky blue", "black")
)
RUN_DASHES: tuple[str, ...] = ("solid", "dash", "dot", "dashdot")
RUN_SYMBOLS: tuple[str, ...] = ("circle", "square", "diamond", "triangle-up")


def run_style(i: int) -> dict[str, str]:
    """The colour, line dash and marker symbol of the i-th compared run (0-based): each run
    its own dash (i mod 4) and colour (i mod 7)."""
    i = int(i)
    return {
        "color": RUN_COLORS[i % len(RUN_COLORS)],
        "dash": RUN_DASHES[i % len(RUN_DASHES)],
        "symbol": RUN_SYMBOLS[i % len(RUN_SYMBOLS)],
    }


def compare_lag_profiles(profiles: Mapping[str, np.ndarray]) -> go.Figure:
    """Lag profiles of several runs against k/L, each run in its own `run_style` (by order).

    profiles: label -> rho (L-1,); runs may differ in depth L, hence the relative lag k/L.
    """
    fig = go.Figure()
    for i, (name, rho) in enumerate(profiles.items()):
        rho = np.asarray(rho, dtype=np.float64)
        L = rho.shape[0] + 1
        k = np.arange(1, L)
        style = run_style(i)
        fig.add_trace(
            go.Scatter(
                x=k / L,
                y=rho,
                mode="lines+markers",
                name=name,
                line={"color": style["color"], "dash": style["dash"]},
                marker={"color": style["color"], "symbol": style["symbol"], "size": 6},
                customdata=k,
                hovertemplate=f"{plotly_text(name)}<br>k = %{{customdata}} (k/L = %{{x:.3g}})"
                "<br>ρ(k) = %{y:.4g}<extra></extra>",
            )
        )
    fig.update_layout(
        title="Lag profiles of the selected runs",
        xaxis_title="relative lag k/L",
        yaxis_title="ρ(k) = mean S(i, i+k)",
        height=440,
        legend={"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"},
        **LAYOUT,
    )
    return fig


def side_by_side_heatmaps(
    S_a: np.ndarray,
    S_b: np.ndarray,
    *,
    label_a: str,
    label_b: str,
    metric: str = "cka",
) -> go.Figure:
    """Two runs' similarity maps `S_a (L, L)`, `S_b (L', L')` and, when L = L', S_b - S_a.

    The two maps share one colour scale (0..1, as on the Similarity page); the difference has
    its own diverging, colour-blind-safe scale (purple-orange) centred on 0 and symmetric, so
    the sign reads from the hue and the size from its depth.
    """
    from plotly.subplots import make_subplots

    S_a = np.asarray(S_a, dtype=np.float64)
    S_b = np.asarray(S_b, dtype=np.float64)
    same = S_a.shape == S_b.shape
    cols = 3 if same else 2
    # run labels carry user text (model, dataset names): shown as text, never as HTML
    titles = ["A: " + plotly_text(label_a), "B: " + plotly_text(label_b)]
    titles += ["B − A"] if same else []
    fig = make_subplots(rows=1, cols=cols, subplot_titles=titles, horizontal_spacing=0.08)
    low = min(0.0, float(np.nanmin(S_a)), float(np.nanmin(S_b)))
    for col, (S, name) in enumerate(((S_a, f"A: {label_a}"), (S_b, f"B: {label_b}")), start=1):
        layers = list(range(1, S.shape[0] + 1))
        fig.add_trace(
            go.Heatmap(
                z=S,
                x=layers,
                y=layers,
                coloraxis="coloraxis",
                name=name,
                hovertemplate=f"{plotly_text(name)}<br>layer %{{y}} vs layer %{{x}}"
                "<br>S = %{z:.4g}<extra></extra>",
            ),
            row=1,
            col=col,
        )
    layout: dict = {
        "coloraxis": {
            "colorscale": "Viridis",
            "cmin": low,
            "cmax": 1.0,
            "colorbar": {"title": metric, "x": 1.0 if not same else 0.62, "len": 0.8},
        }
    }
    if same:
        layout["coloraxis2"] = _add_difference_map(fig, S_b - S_a)
    title = f"Layer similarity side by side ({metric})"
    if not same:
        title += f": L = {S_a.shape[0]} vs {S_b.shape[0]}, so no difference map"
    fig.update_layout(title=title, height=430, **layout, **LAYOUT)
    for col in range(1, cols + 1):
        n = (S_a, S_b, S_a)[col - 1].shape[0]
        fig.update_xaxes(range=[0.5, n + 0.5], constrain="domain", row=1, col=col)
        fig.update_yaxes(range=[n + 0.5, 0.5], constrain="domain", row=1, col=col)
        # square cells: each y axis follows its own x axis
        fig.update_yaxes(scaleanchor=f"x{'' if col == 1 else col}", row=1, col=col)
        if n <= 12:  # whole layer numbers on short runs (plotly would label 1.5, 2.5)
            fig.update_xaxes(dtick=1, row=1, col=col)
            fig.update_yaxes(dtick=1, row=1, col=col)
    fig.update_annotations(font={"size": 12})
    return fig


def _add_difference_map(fig: go.Figure, D: np.ndarray) -> dict:
    """The third panel, `D = S_b - S_a (L, L)`, on its own diverging scale centred on 0;
    returns that colour axis."""
    span = max(float(np.nanmax(np.abs(D))), 1e-12)
    layers = list(range(1, D.shape[0] + 1))
    fig.add_trace(
        go.Heatmap(
            z=D,
            x=layers,
            y=layers,
            coloraxis="coloraxis2",
            name="B − A",
            hovertemplate="B − A<br>layer %{y} vs layer %{x}<br>ΔS = %{z:+.3g}<extra></extra>",
        ),
        row=1,
        col=3,
    )
    return {
        "colorscale": "PuOr",
        "cmin": -span,
        "cmax": span,
        "colorbar": {"title": "ΔS", "x": 1.0, "len": 0.8},
    }
