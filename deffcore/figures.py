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

#: Colours: measured vs published values, and the two regimes of the gap to F_L.
COLOR_MEASURED = "#1f77b4"
COLOR_PAPER = "#9e9e9e"
COLOR_SUB = "#d62728"  # gap > 0: D_eff < F_L (sub-reference, more redundancy)
COLOR_ABOVE = "#2ca02c"  # gap < 0: D_eff > F_L (above-reference)
COLOR_REFERENCE = "#7f7f7f"
#: Synthetic constructions: none of them red, which marks the iid reference they are read against.
CONSTRUCTION_COLORS = {
    "independent states": "#ff7f0e",
    "orthogonal states": "#2ca02c",
    "orthogonal updates": "#1f77b4",
}
#: A fixed colour per pooling control, so the same control looks the same on every page.
POOLING_COLORS = {
    "default": "#1f77b4",
    "first_non_bos": "#ff7f0e",
    "token_normed": "#2ca02c",
    "top1_pc": "#9467bd",
    "top3_pc": "#8c564b",
}

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
    """Red for sub-reference (gap > 0), green for above-reference (gap < 0)."""
    return COLOR_SUB if gap_pct > 0 else COLOR_ABOVE


def regime_label(gap_pct: float) -> str:
    if not np.isfinite(gap_pct):
        return "undefined"
    return "sub-reference (D_eff < F_L)" if gap_pct > 0 else "above reference (D_eff ≥ F_L)"


# ---------------------------------------------------------------------------------------------
# Similarity
# ---------------------------------------------------------------------------------------------


#: `meta` of helper traces that carry no data of their own (skipped by `figure_data`).
CLICK_TARGET = "click-target"


def similarity_heatmap(
    S: np.ndarray, *, metric: str = "cka", pooling: str = "default", selectable: bool = False
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
            hovertemplate="layer %{y} vs layer %{x}<br>S = %{z:.6f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"Layer similarity S(i, j): {metric}, pooling {pooling}",
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
                hovertemplate="layer %{y} vs layer %{x}<br>S = %{customdata:.6f}"
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
                hovertemplate=f"S({layer}, %{{x}}) = %{{y:.6f}}<extra></extra>",
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
            hovertemplate="k = %{x}<br>rho(k) = %{y:.6f}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=k,
            y=reference_lag_profile(L),
            mode="lines",
            name="orthogonal updates: S = min/max (F_L)",
            line={"color": COLOR_REFERENCE, "dash": "dash"},
            hovertemplate="k = %{x}<br>rho_ref(k) = %{y:.6f}<extra></extra>",
        )
    )
    if n is not None and d is not None:
        floor = d / (n + d)
        fig.add_trace(
            go.Scatter(
                x=k,
                y=[floor] * len(k),
                mode="lines",
                name=f"iid-bias floor d/(N+d) = {floor:.4f}",
                line={"color": COLOR_SUB, "dash": "dot"},
                hovertemplate="d/(N+d) = %{y:.6f}<extra></extra>",
            )
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
            hovertemplate="K = %{x}<br>D_eff/L = %{y:.6f}<extra></extra>",
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
            hovertemplate="F_L/L = %{y:.6f}<extra></extra>",
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
    "this run", "cached" or "paper". Published values keep a hatched grey bar and the word
    "paper" in their label, so they are never mistaken for measurements.
    """
    t = table.copy()
    t["family_order"] = t.groupby("family")["gap_pct"].transform("mean")
    t = t.sort_values(["family_order", "family", "gap_pct"], ascending=[True, True, True])
    fig = go.Figure()
    styles = {
        "paper": {"color": COLOR_PAPER, "pattern": "/"},
        "cached": {"color": None, "pattern": ""},
        "this run": {"color": None, "pattern": ""},
    }
    for source in ("paper", "cached", "this run"):
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
                customdata=np.stack([part["family"], part["source"]], axis=-1),
                hovertemplate=(
                    "%{y}<br>family %{customdata[0]}<br>gap = %{x:.2f}%"
                    "<br>source: %{customdata[1]}<extra></extra>"
                ),
            )
        )
    fig.add_vline(x=0, line={"color": "black", "width": 1})
    fig.update_layout(
        title="Gap to the orthogonal-update reference F_L = 2L/(L+1)  (positive: D_eff < F_L)",
        xaxis_title="gap to F_L (%)",
        yaxis={"categoryorder": "array", "categoryarray": list(t["label"])},
        barmode="overlay",
        height=max(360, 26 * len(t) + 120),
        **_LAYOUT,
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
                    "symbol": ["circle-open" if p else "circle" for p in is_paper],
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


def synthetic_sweep(table: pd.DataFrame, *, n: int, d: int) -> go.Figure:
    """D_eff/L against L for each construction, with F_L/L and the finite-sample iid reference.

    table: columns `construction`, `L`, `deff_over_L`. The iid reference is
    D/L = 1 / (1 + b (L-1)) with b = d/(N+d) (SPEC section 7).
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
                marker={"size": 8},
                hovertemplate=f"{name}<br>L = %{{x}}<br>D_eff/L = %{{y:.6f}}<extra></extra>",
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
            hovertemplate="L = %{x}<br>F_L/L = %{y:.6f}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=Ls,
            y=[iid_reference_depth(n, d, int(L)) / L for L in Ls],
            mode="lines",
            name=f"iid reference, b = d/(N+d) = {b:.3f}",
            line={"color": COLOR_SUB, "dash": "dot", "width": 2},
            hovertemplate="L = %{x}<br>D_iid/L = %{y:.6f}<extra></extra>",
        )
    )
    fig.update_layout(
        title=f"Synthetic constructions: D_eff/L against depth (N = {n}, d = {d})",
        xaxis_title="layers L",
        yaxis_title="D_eff/L",
        yaxis_range=[0, 1.05],
        height=420,
        **_LAYOUT,
    )
    return fig


def states_vs_updates(rho_states: np.ndarray, rho_updates: np.ndarray) -> go.Figure:
    """Lag profiles of accumulated states and of the updates that built them."""
    fig = go.Figure()
    for name, rho, color in (
        ("accumulated states h_l", rho_states, COLOR_MEASURED),
        ("updates f_l", rho_updates, COLOR_ABOVE),
    ):
        rho = np.asarray(rho, dtype=np.float64)
        fig.add_trace(
            go.Scatter(
                x=list(range(1, rho.shape[0] + 1)),
                y=rho,
                mode="lines+markers",
                name=name,
                line={"color": color},
                hovertemplate=f"{name}<br>k = %{{x}}<br>rho(k) = %{{y:.6f}}<extra></extra>",
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
            hovertemplate="k = %{x}<br>rho_ref(k) = %{y:.6f}<extra></extra>",
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
                hovertemplate="random seed<br>D_eff/L = %{y:.6f}<extra></extra>",
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
                hovertemplate=f"mean = %{{y:.6f}} ± {two_sigma:.6f}<extra></extra>",
            )
        )
    fig.add_trace(
        go.Scatter(
            x=[label],
            y=[trained],
            mode="markers",
            name="trained",
            marker={"color": COLOR_MEASURED, "size": 14},
            hovertemplate="trained<br>D_eff/L = %{y:.6f}<extra></extra>",
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
# Comparing runs
# ---------------------------------------------------------------------------------------------


def overlay_lag_profiles(profiles: Mapping[str, np.ndarray]) -> go.Figure:
    """Lag profiles of several runs against the relative lag k/L (runs may differ in depth)."""
    fig = go.Figure()
    for name, rho in profiles.items():
        rho = np.asarray(rho, dtype=np.float64)
        L = rho.shape[0] + 1
        k = np.arange(1, L)
        fig.add_trace(
            go.Scatter(
                x=k / L,
                y=rho,
                mode="lines+markers",
                name=name,
                customdata=k,
                hovertemplate=f"{name}<br>k = %{{customdata}} (k/L = %{{x:.3f}})"
                "<br>rho(k) = %{y:.6f}<extra></extra>",
            )
        )
    fig.update_layout(
        title="Lag profiles of the selected runs",
        xaxis_title="relative lag k/L",
        yaxis_title="ρ(k) = mean S(i, i+k)",
        height=400,
        **_LAYOUT,
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
    """`figure_data` as CSV text."""
    buffer = io.StringIO()
    figure_data(fig).to_csv(buffer, index=False)
    return buffer.getvalue()
