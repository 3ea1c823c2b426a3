"""Plotly figures for the explorer: plain inputs (arrays, dicts, DataFrames) in, `go.Figure` out.

No Streamlit here, so every figure is testable on its own and usable from a notebook. Each
figure carries its numbers in the traces (hover shows the exact values), so `figure_data`
can export what is drawn as a table and `figure_html` as a self-contained page.

Layer numbering: a similarity matrix `S (L, L)` is indexed by the measured states
`h_1 .. h_L`, so axes are labelled 1..L; the position-0 norm ratio covers `h_0 .. h_L`.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

#: The Okabe-Ito palette: distinguishable with every common colour-vision deficiency.
OKABE_ITO = {
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "bluish green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish purple": "#CC79A7",
    "black": "#000000",
}
#: Colours: measured vs published values, and the two regimes of the gap to F_L. The regimes
#: are vermillion vs sky blue (never red vs green), and every chart also says them in words
#: or shape (bar side, text, marker), so colour is never the only cue.
COLOR_MEASURED = OKABE_ITO["blue"]
COLOR_PAPER = "#9e9e9e"
COLOR_SUB = OKABE_ITO["vermillion"]  # gap > 0: D_eff < F_L, more redundant than orth. updates
COLOR_ABOVE = OKABE_ITO["sky blue"]  # gap < 0: D_eff > F_L, less redundant
COLOR_REFERENCE = "#7f7f7f"
#: Updates (vs accumulated states) on the synthetic charts.
COLOR_UPDATES = OKABE_ITO["orange"]
#: Synthetic constructions: none vermillion, which marks the iid reference they are read against.
CONSTRUCTION_COLORS = {
    "independent states": OKABE_ITO["orange"],
    "orthogonal states": OKABE_ITO["bluish green"],
    "orthogonal updates": OKABE_ITO["blue"],
}
CONSTRUCTION_SYMBOLS = {
    "independent states": "square",
    "orthogonal states": "diamond",
    "orthogonal updates": "circle",
}
#: A fixed colour and marker shape per pooling control, the same on every page.
POOLING_COLORS = {
    "default": OKABE_ITO["blue"],
    "first_non_bos": OKABE_ITO["orange"],
    "token_normed": OKABE_ITO["bluish green"],
    "no_pos0": OKABE_ITO["black"],  # diag (issue 11): the symmetric position-0 control
    "top1_pc": OKABE_ITO["reddish purple"],
    "top3_pc": OKABE_ITO["vermillion"],
}
POOLING_SYMBOLS = {
    "default": "circle",
    "first_non_bos": "square",
    "token_normed": "diamond",
    "no_pos0": "x",  # diag (issue 11)
    "top1_pc": "triangle-up",
    "top3_pc": "triangle-down",
}
#: The regimes in words (the glossary's wording, not "sub-reference").
REGIME_MORE = "more redundant than orthogonal updates"
REGIME_LESS = "less redundant than orthogonal updates"

# No template here: building a plotly template object costs ~0.3 s per figure, and
# st.plotly_chart applies the app theme anyway.
_LAYOUT = {"margin": {"l": 60, "r": 20, "t": 60, "b": 50}}


def _integer_ticks(fig: go.Figure, n: int, axes: str = "x") -> None:
    """Whole-number ticks on layer / lag axes of short runs (plotly would label 1.5, 2.5)."""
    if n <= 12:
        if "x" in axes:
            fig.update_xaxes(dtick=1)
        if "y" in axes:
            fig.update_yaxes(dtick=1)


def regime_color(gap_pct: float) -> str:
    """Vermillion for gap > 0 (more redundant), sky blue for gap <= 0 (less redundant)."""
    return COLOR_SUB if gap_pct > 0 else COLOR_ABOVE


def regime_label(gap_pct: float) -> str:
    """The regime in words: "more/less redundant than orthogonal updates (D_eff < / ≥ F_L)"."""
    if not np.isfinite(gap_pct):
        return "undefined"
    return f"{REGIME_MORE} (D_eff < F_L)" if gap_pct > 0 else f"{REGIME_LESS} (D_eff ≥ F_L)"


# ---------------------------------------------------------------------------------------------
# Similarity
# ---------------------------------------------------------------------------------------------


#: `meta` of helper traces that carry no data of their own (skipped by `figure_data`).
CLICK_TARGET = "click-target"


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
        **_LAYOUT,
    )
    fig.update_xaxes(constrain="domain")
    fig.update_yaxes(scaleanchor="x", constrain="domain")
    _integer_ticks(fig, S.shape[0], "xy")
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
        **_LAYOUT,
    )
    _integer_ticks(fig, S.shape[0])
    return fig


# ---------------------------------------------------------------------------------------------
# Lag decay
# ---------------------------------------------------------------------------------------------


def reference_lag_profile(L: int) -> np.ndarray:
    """rho_ref(k), k = 1..L-1, of the orthogonal-update reference S(i, j) = min(i,j)/max(i,j).

    Closed form of the lag profile: rho_ref(k) = mean_{i=1..L-k} i / (i + k).
    """
    return np.array([np.mean([i / (i + k) for i in range(1, L - k + 1)]) for k in range(1, L)])


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
    fig.add_trace(
        go.Scatter(
            x=k,
            y=reference_lag_profile(L),
            mode="lines",
            name="orthogonal updates: S = min/max (F_L)",
            line={"color": COLOR_REFERENCE, "dash": "dash"},
            hovertemplate="k = %{x}<br>rho_ref(k) = %{y:.4g}<extra></extra>",
        )
    )
    if n is not None and d is not None:
        floor = d / (n + d)
        # ui-views (issue 12.2): d/(N+d) is what linear CKA gives unrelated layers of
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
            # bottom left of the plot: empty for decaying profiles (both curves start high)
            fig.add_annotation(
                x=0.01,
                y=0.02,
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
        **_LAYOUT,
    )
    _integer_ticks(fig, L - 1)
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
        **_LAYOUT,
    )
    _integer_ticks(fig, L - 1)
    return fig


# ---------------------------------------------------------------------------------------------
# Gap to F_L (the paper's Figure 1) and pooling controls (Figure 2)
# ---------------------------------------------------------------------------------------------


def gap_bars(table: pd.DataFrame) -> go.Figure:
    """Signed gap-to-F_L bars, grouped by family and sorted within each family.

    table: one row per bar with columns `label`, `family`, `gap_pct`, `source`, where source is
    "this run", "cached", "precomputed" (a shipped gallery run) or "paper". Published values
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
    styles = {
        "paper": {"color": COLOR_PAPER, "pattern": "/"},
        "cached": {"color": None, "pattern": ""},
        "precomputed": {"color": None, "pattern": ""},  # ui-views: the shipped gallery runs
        "this run": {"color": None, "pattern": ""},
    }
    for source in ("paper", "precomputed", "cached", "this run"):
        part = t[t["source"] == source]
        if part.empty:
            continue
        style = styles[source]
        colors = (
            [style["color"]] * len(part)
            if style["color"]
            else [regime_color(g) for g in part["gap_pct"]]
        )
        fig.add_trace(
            go.Bar(
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
        )
    fig.add_vline(x=0, line={"color": "black", "width": 1})
    legend = (
        f"<span style='color:{COLOR_SUB}'>■</span> gap > 0: {REGIME_MORE}   "
        f"<span style='color:{COLOR_ABOVE}'>■</span> gap < 0: {REGIME_LESS}   "
        f"<span style='color:{COLOR_PAPER}'>▨</span> paper (published)   "
        "□ black outline: this run"
    )
    fig.add_annotation(
        text=legend,
        xref="paper",
        yref="paper",
        x=0,
        y=1.0,
        yanchor="bottom",
        xanchor="left",
        showarrow=False,
        font={"size": 12},
    )
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
        title="Pooling controls: gap to F_L (%)  (filled: measured, open: paper)",
        xaxis_title="gap to F_L (%)  (> 0: D_eff < F_L, sub-reference)",
        height=max(300, 50 * table["label"].nunique() + 150),
        **_LAYOUT,
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
            name="||h[pos 0]|| / mean ||h[t≥1]||",
            marker={"color": [COLOR_SUB if i == peak else COLOR_MEASURED for i in layers]},
            hovertemplate="layer %{x}<br>ratio = %{y:.4f}x<extra></extra>",
        )
    )
    fig.add_hline(y=1.0, line={"color": COLOR_REFERENCE, "dash": "dash"})
    fig.update_layout(
        title=f"Position-0 norm ratio per layer (peak {ratios[peak]:.1f}x at layer {peak})",
        xaxis_title="layer (0 = h_0, the input of block 1)",
        yaxis_title="‖h(pos 0)‖ / mean ‖h(t ≥ 1)‖",
        height=360,
        **_LAYOUT,
    )
    return fig


# ---------------------------------------------------------------------------------------------
# Synthetic lab
# ---------------------------------------------------------------------------------------------


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
    from deffcore.references import iid_reference_depth

    Ls = np.array(sorted(table["L"].unique()), dtype=np.float64)
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
        **_LAYOUT,
    )
    return fig


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
    fig.add_trace(
        go.Scatter(
            x=list(range(1, L)),
            y=reference_lag_profile(L),
            mode="lines",
            name="min/max reference",
            line={"color": COLOR_REFERENCE, "dash": "dash"},
            hovertemplate="k = %{x}<br>rho_ref(k) = %{y:.4g}<extra></extra>",
        )
    )
    fig.update_layout(
        title="Updates vs accumulated states: lag profiles",
        xaxis_title="lag k",
        yaxis_title="ρ(k) = mean S(i, i+k)",
        height=380,
        **_LAYOUT,
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
    fig.add_trace(
        go.Scatter(
            x=k,
            y=reference_lag_profile(L),
            mode="lines",
            name="orthogonal updates, S = min/max (F_L)",
            line={"color": COLOR_REFERENCE, "dash": "dash", "width": 2},
            hovertemplate="k = %{x}<br>ρ_ref(k) = %{y:.4g}<extra></extra>",
        )
    )
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
        **_LAYOUT,
    )
    _integer_ticks(fig, L - 1)
    return fig


def story_depth_bars(values: Mapping[str, float], *, F_L: float, L: int) -> go.Figure:
    """D_eff of a teaching step (and its comparisons) as labelled bars beside F_L.

    values: name -> D_eff, drawn top to bottom. Each bar says its value and, in words, whether it
    is more or less redundant than orthogonal updates; F_L is a dashed line. The x axis is fitted
    to the values and F_L (never the full 0..L when everything is near 2).
    """
    names = list(values)
    deffs = [float(values[k]) for k in names]
    gaps = [100.0 * (1.0 - v / F_L) for v in deffs]
    words = [
        "= F_L" if abs(g) < 0.05 else ("more redundant" if g > 0 else "less redundant")
        for g in gaps
    ]
    fig = go.Figure(
        go.Bar(
            x=deffs,
            y=names,
            orientation="h",
            marker={
                "color": [
                    COLOR_REFERENCE if w == "= F_L" else regime_color(g)
                    for g, w in zip(gaps, words, strict=True)
                ],
                "pattern": {"shape": ["" if w == "more redundant" else "/" for w in words]},
            },
            text=[f"{v:.3f} ({w})" for v, w in zip(deffs, words, strict=True)],
            textposition="outside",
            cliponaxis=False,
            customdata=np.stack([gaps, [v / L for v in deffs]], axis=-1),
            name="D_eff",
            hovertemplate="%{y}<br>D_eff = %{x:.4g} (D_eff/L = %{customdata[1]:.4g})"
            "<br>gap to F_L = %{customdata[0]:.3g}%<extra></extra>",
        )
    )
    fig.add_vline(
        x=F_L,
        line={"color": "black", "dash": "dash", "width": 2},
        annotation_text=f"F_L = {F_L:.3f}",
        annotation_position="top",
    )
    top = max([F_L, *deffs])
    fig.update_layout(
        title=f"Effective depth beside F_L = 2L/(L+1) (L = {L})",
        xaxis={"title": "D_eff (effective number of layers)", "range": [0, top * 1.45]},
        yaxis={"categoryorder": "array", "categoryarray": names[::-1]},
        height=110 + 55 * len(names),
        font={"size": 15},
        showlegend=False,
        **_LAYOUT,
    )
    return fig


# ---------------------------------------------------------------------------------------------
# Baselines
# ---------------------------------------------------------------------------------------------


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
        title="Trained vs random-weight null", yaxis_title="D_eff/L", height=380, **_LAYOUT
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
        **_LAYOUT,
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
        title="Passage bootstrap of D_eff/L", xaxis_title="D_eff/L", height=340, **_LAYOUT
    )
    return fig


# ---------------------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------------------


def figure_html(fig: go.Figure) -> str:
    """A self-contained HTML page of the figure (plotly.js inlined: opens offline)."""
    return fig.to_html(include_plotlyjs=True, full_html=True)


def figure_data(fig: go.Figure) -> pd.DataFrame:
    """The numbers drawn in a figure as a long table: one row per point (or heatmap cell).

    Columns: `trace`, `x`, `y`, and `z` for heatmaps, `customdata` where a trace has it.
    """
    frames = []
    for i, trace in enumerate(fig.data):
        if getattr(trace, "meta", None) == CLICK_TARGET:
            continue
        name = trace.name if trace.name is not None else f"trace {i}"
        if trace.type == "heatmap":
            z = np.asarray(trace.z, dtype=np.float64)
            xs = list(trace.x) if trace.x is not None else list(range(z.shape[1]))
            ys = list(trace.y) if trace.y is not None else list(range(z.shape[0]))
            rows = [
                {"trace": name, "x": xs[c], "y": ys[r], "z": z[r, c]}
                for r in range(z.shape[0])
                for c in range(z.shape[1])
            ]
            frames.append(pd.DataFrame(rows))
            continue
        x = list(trace.x) if getattr(trace, "x", None) is not None else None
        y = list(trace.y) if getattr(trace, "y", None) is not None else None
        length = len(x) if x is not None else len(y) if y is not None else 0
        frame = pd.DataFrame(
            {
                "trace": [name] * length,
                "x": x if x is not None else [None] * length,
                "y": y if y is not None else [None] * length,
            }
        )
        custom = getattr(trace, "customdata", None)
        if custom is not None and len(custom) == length:
            frame["customdata"] = ["; ".join(map(str, c)) if np.ndim(c) else c for c in custom]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def figure_csv(fig: go.Figure) -> str:
    """`figure_data` as CSV text; a figure tagged with `tag_run` leads with the run's identity."""
    buffer = io.StringIO()
    data = figure_data(fig)
    run = fig.layout.meta.get("run") if isinstance(fig.layout.meta, dict) else None
    if isinstance(run, dict):  # ui-views: downloads carry the run's identity (issue 12.5)
        data = pd.concat([pd.DataFrame({k: [v] * len(data) for k, v in run.items()}), data], axis=1)
    data.to_csv(buffer, index=False)
    return buffer.getvalue()


# ---------------------------------------------------------------------------------------------
# --- run comparison (ui-views, issue 12.5): a colour per run, two runs side by side, downloads
# that say which run they came from
# ---------------------------------------------------------------------------------------------

#: One colour per compared run, in the order the runs are listed: Okabe-Ito without yellow
#: (too faint on white). Past seven runs the colours repeat with another line dash and marker,
#: so no two runs ever look the same.
RUN_COLORS: tuple[str, ...] = tuple(
    OKABE_ITO[c]
    for c in ("blue", "orange", "bluish green", "vermillion", "reddish purple", "sky blue", "black")
)
RUN_DASHES: tuple[str, ...] = ("solid", "dash", "dot", "dashdot")
RUN_SYMBOLS: tuple[str, ...] = ("circle", "square", "diamond", "triangle-up")


def run_style(i: int) -> dict[str, str]:
    """The colour, line dash and marker symbol of the i-th compared run (0-based)."""
    cycle, pos = divmod(int(i), len(RUN_COLORS))
    return {
        "color": RUN_COLORS[pos],
        "dash": RUN_DASHES[cycle % len(RUN_DASHES)],
        "symbol": RUN_SYMBOLS[cycle % len(RUN_SYMBOLS)],
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
                hovertemplate=f"{name}<br>k = %{{customdata}} (k/L = %{{x:.3g}})"
                "<br>ρ(k) = %{y:.4g}<extra></extra>",
            )
        )
    fig.update_layout(
        title="Lag profiles of the selected runs",
        xaxis_title="relative lag k/L",
        yaxis_title="ρ(k) = mean S(i, i+k)",
        height=440,
        legend={"orientation": "h", "x": 0, "y": -0.2, "yanchor": "top"},
        **_LAYOUT,
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
    titles = ["A: " + label_a, "B: " + label_b] + (["B − A"] if same else [])
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
                hovertemplate=f"{name}<br>layer %{{y}} vs layer %{{x}}<br>S = %{{z:.4g}}"
                "<extra></extra>",
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
        D = S_b - S_a
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
        layout["coloraxis2"] = {
            "colorscale": "PuOr",
            "cmin": -span,
            "cmax": span,
            "colorbar": {"title": "ΔS", "x": 1.0, "len": 0.8},
        }
    title = f"Layer similarity side by side ({metric})"
    if not same:
        title += f": L = {S_a.shape[0]} vs {S_b.shape[0]}, so no difference map"
    fig.update_layout(title=title, height=430, **layout, **_LAYOUT)
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


def headline_change_bars(rows: Sequence[Mapping[str, float]], *, label_b: str) -> go.Figure:
    """The change B - A of each headline number (`snapshot.headline_changes` rows), relative to
    A in percent, as horizontal bars with the absolute values in the hover (N and L too)."""
    names = [r["quantity"] for r in rows]
    rel = [
        100.0 * (r["run B"] - r["run A"]) / abs(r["run A"]) if r["run A"] else float("nan")
        for r in rows
    ]
    fig = go.Figure(
        go.Bar(
            x=rel,
            y=names,
            orientation="h",
            name=f"B vs A ({label_b})",
            marker={"color": [run_style(1)["color"]] * len(rows)},
            customdata=np.array(
                [[r["run A"], r["run B"], r["change (B - A)"]] for r in rows], dtype=np.float64
            ),
            text=[f"{v:+.3g}%" if np.isfinite(v) else "" for v in rel],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y}<br>A = %{customdata[0]:.4g}<br>B = %{customdata[1]:.4g}"
            "<br>B − A = %{customdata[2]:+.3g} (%{x:+.3g}% of A)<extra></extra>",
        )
    )
    span = float(np.nanmax(np.abs(rel))) if np.isfinite(rel).any() else 1.0
    fig.add_vline(x=0, line={"color": "black", "width": 1})
    fig.update_layout(
        title="Change of each headline number, B relative to A",
        xaxis={"title": "change (% of A)", "range": [-1.3 * span - 1, 1.3 * span + 1]},
        yaxis={"autorange": "reversed"},
        height=340,
        **_LAYOUT,
    )
    return fig


def tag_run(fig: go.Figure, identity: Mapping[str, object]) -> go.Figure:
    """Attach a run's identity (`snapshot.run_identity`) to a figure: `figure_csv` then writes
    it as leading columns of every row, so a downloaded table says which run it came from."""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    fig.update_layout(meta={**meta, "run": dict(identity)})
    return fig


# --- BOS & attention sinks (diag, issue 11; SPEC section 11) ------------------------------------


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
            name="max |h| / median |h|",
            line={"color": COLOR_MEASURED},
            marker={
                "size": 9,
                "color": [COLOR_SUB if o else COLOR_MEASURED for o in over],
                "symbol": ["diamond" if o else "circle" for o in over],
            },
            customdata=np.column_stack([np.asarray(position), np.asarray(dim)]),
            hovertemplate="layer %{x}<br>ratio = %{y:,.1f}x<br>at position %{customdata[0]}, "
            "feature %{customdata[1]}<extra></extra>",
        )
    )
    fig.add_hline(
        y=threshold,
        line={"color": COLOR_REFERENCE, "dash": "dash"},
        annotation_text=f"{threshold:.0f}x: massive",
        annotation_position="top left",
    )
    onset = next((i for i, o in enumerate(over) if o), None)
    where = "none above the threshold" if onset is None else f"onset at layer {onset}"
    fig.update_layout(
        title=f"Massive activations per layer ({where})",
        xaxis_title="layer (0 = h_0, the input of block 1)",
        yaxis={"title": "mean max |h| / median |h|  (log)", "type": "log"},
        height=360,
        showlegend=False,
        **_LAYOUT,
    )
    _integer_ticks(fig, len(layers))
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
        **_LAYOUT,
    )
    _integer_ticks(fig, len(blocks))
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
        **_LAYOUT,
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
    layer; drawn as markers (the massive feature)."""
    z = np.asarray(norms, dtype=np.float64)
    L1, T = z.shape
    logz = np.log10(np.clip(z, 1e-12, None))
    text = [[repr(tok)[1:-1] for tok in tokens] for _ in range(L1)]
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
                marker={"symbol": "x", "size": 9, "color": COLOR_SUB, "line": {"width": 1}},
                customdata=np.column_stack([np.asarray(dims, dtype=object), vals]),
                hovertemplate="layer %{y}: largest |h| at position %{x}<br>feature "
                "%{customdata[0]}, |h| = %{customdata[1]:.4g}<extra></extra>",
            )
        )
    fig.update_layout(
        title="Token-state norms per layer and position (log colour)",
        xaxis_title="position t",
        yaxis_title="layer (0 = h_0)",
        height=max(320, 16 * L1 + 140),
        legend={"orientation": "h", "y": -0.2},
        **_LAYOUT,
    )
    if T <= 40:
        fig.update_xaxes(
            tickvals=list(range(T)), ticktext=[repr(t)[1:-1] for t in tokens], tickangle=-60
        )
    return fig


# --- models overview (ray, issue 10.6): every cached run and the paper's models -----------------

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
#: Marker per (source, weights): shape says where a point comes from, fill says trained/random.
MODEL_SYMBOLS: dict[tuple[str, str], str] = {
    ("paper", "trained"): "diamond",
    ("paper", "random"): "diamond-open",
    ("cached", "trained"): "circle",
    ("cached", "random"): "circle-open",
}


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
        hover = [
            f"{r.model}<br>{source}, {weights}<br>L = {int(r.layers)}"
            + (f", N = {int(r.n)}, {int(r.max_tokens)} tokens" if "n" in sub and r.n == r.n else "")
            for r in sub.itertuples()
        ]
        fig.add_trace(
            go.Scatter(
                x=sub["layers"],
                y=sub["deff_over_L"],
                mode="markers",
                name=f"{family} ({source}, {weights})",
                legendgroup=family,
                marker={
                    "color": FAMILY_COLORS.get(family, COLOR_PAPER),
                    "symbol": MODEL_SYMBOLS.get((source, weights), "circle"),
                    "size": 12 if source == "paper" else 10,
                    "line": {"width": 2 if weights == "random" else 1, "color": "#333"},
                },
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
                go.Scatter(
                    x=sub["layers"],
                    y=sub["random_mean"],
                    mode="markers",
                    name=f"{family} (paper, random null)",
                    legendgroup=family,
                    marker={
                        "color": FAMILY_COLORS.get(family, COLOR_PAPER),
                        "symbol": MODEL_SYMBOLS[("paper", "random")],
                        "size": 12,
                        "line": {"width": 2},
                    },
                    error_y={
                        "type": "data",
                        "symmetric": False,
                        "array": high - sub["random_mean"],
                        "arrayminus": sub["random_mean"] - low,
                        "visible": True,
                    },
                    text=[f"{m} random-weight null (paper)" for m in sub["model"]],
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
        xaxis={"title": "layers L", "type": "log"},
        yaxis={"title": "D_eff/L", "type": "log"},
        height=480,
        legend={"font": {"size": 11}},
        **_LAYOUT,
    )
    return fig


def models_gap_by_pooling(table: pd.DataFrame, poolings: Sequence[str]) -> go.Figure:
    """Gap to F_L (%) per pooling control, one row of markers per model (colour = pooling).

    `table` columns: model (unique labels), and `gap_<pooling>` for each pooling in `poolings`
    (NaN where not measured/published). A positive gap: more redundant than orthogonal updates.
    """
    fig = go.Figure()
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
        **_LAYOUT,
    )
    return fig
