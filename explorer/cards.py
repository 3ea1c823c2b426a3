"""Display cards: the headline numbers with their trust badge, the precomputed-run note, and
`show_figure` (a chart with its HTML and CSV downloads)."""

from __future__ import annotations

import contextlib
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from deffcore import figures
from deffcore.snapshot import RunView, SnapshotView, download_stem, run_identity
from deffcore.trust_rule import Trust, trust_badge
from explorer.settings import Settings

#: Extraction speed used for time estimates (SmolLM2-135M, quiet 2-core CPU, BENCHMARKS.md).
CPU_TOKENS_PER_S = 600


def precomputed_note(view: RunView) -> None:
    if isinstance(view, SnapshotView):
        tokens = view.n * int(view.spec.get("max_tokens", 128))
        # ~600 tokens/s: SmolLM2-135M on a quiet 2-core CPU (BENCHMARKS.md, extraction)
        minutes = max(1, round(tokens / CPU_TOKENS_PER_S / 60))
        st.info(
            f"Precomputed with `{view.command}`. To compute it here, choose the same settings "
            f"in the sidebar and press **Run** (about {minutes} minutes on a quiet 2-core CPU "
            f"for {tokens:,} tokens; seconds on a GPU; a smaller N is quicker).",
            icon="ℹ️",
        )


def trust_of(view: RunView, settings: Settings) -> Trust:
    """The trust badge of the current headline (`deffcore.trust`): N against d, the bias's
    effect (linear vs unbiased CKA), the bootstrap interval when the Baselines page computed
    one for this view, the random-weight band when the run has one."""
    pooling, metric, K = settings.pooling, settings.metric, settings.K
    h = view.headline(pooling, metric, K)
    unbiased = None
    if metric == "cka":
        with contextlib.suppress(KeyError):  # a snapshot may lack unbiased CKA
            unbiased = view.headline(pooling, "unbiased_cka", K).deff_over_L
    ci = None
    if K in (None, view.layers - 1):
        for k, v in st.session_state.items():
            if (
                isinstance(k, tuple)
                and k[:4] == ("bootstrap", getattr(view, "key", None), pooling, metric)
                and isinstance(v, dict)
                and {"low", "high"} <= set(v)
            ):
                ci = (float(v["low"]), float(v["high"]))
    band = view.random_band(pooling, metric) or {}
    seeds = len(band.get("seeds") or band.get("deff_over_L") or [])
    null = (band["low"], band["high"]) if seeds and "low" in band and "high" in band else None
    return trust_badge(
        h.n,
        h.d_model,
        metric=metric,
        value=h.deff_over_L,
        unbiased_value=unbiased,
        ci=ci,
        null_band=null,
        null_seeds=seeds,
    )


_BADGE_COLOR = {"solid": "green", "indicative": "orange", "noise": "red"}
_BADGE_ICON = {
    "solid": ":material/verified:",
    "indicative": ":material/info:",
    "noise": ":material/warning:",
}


def trust_line(trust: Trust) -> None:
    """The badge (shape + word + colour) and its one sentence."""
    row = st.container(horizontal=True, vertical_alignment="center")
    row.badge(
        f"Trust: {trust.level}", icon=_BADGE_ICON[trust.level], color=_BADGE_COLOR[trust.level]
    )
    row.caption(trust.sentence())


def headline_cards(view: RunView, settings: Settings) -> None:
    """D_eff, D_eff/L, gap to F_L, rho_hat(1), position-0 ratio, N, CKA bias (one row), with
    the trust badge of these numbers; the CKA-bias warning only when the bias moves them."""
    h = view.headline(settings.pooling, settings.metric, settings.K)
    trust = trust_of(view, settings)
    badge = f"Trust: {trust.badge}. "
    cols = st.columns(7)
    cols[0].metric("D_eff", f"{h.deff:.3f}", help=f"{badge}K = {h.K}, L = {h.layers}")
    cols[1].metric("D_eff / L", f"{h.deff_over_L:.4f}", help=badge.strip())
    sub = h.gap_pct > 0
    cols[2].metric(
        "Gap to F_L",
        f"{h.gap_pct:+.1f}%",
        delta="more redundant than orthogonal updates" if sub else "less redundant",
        delta_color="red" if sub else "green",
        delta_arrow="off",
        help=f"{badge}100 (1 - D_eff / F_L), F_L = 2L/(L+1) = {h.reference_FL:.4f}; positive: "
        "D_eff < F_L, more redundancy than accumulated orthogonal updates",
    )
    cols[3].metric("ρ̂(1)", f"{h.rho1:.4f}", help=f"{badge}mean similarity of adjacent layers")
    cols[4].metric("Pos-0 norm ratio", f"{h.pos0_ratio:.1f}x", help=f"peak at layer {h.pos0_layer}")
    cols[5].metric("N", f"{h.n}", help=f"d = {h.d_model}, L = {h.layers}")
    cols[6].metric("CKA bias d/(N+d)", f"{h.cka_bias:.3f}")
    trust_line(trust)
    if trust.bias_material:
        st.warning(
            f"Linear CKA's finite-sample bias matters here: with N = {h.n} passages and d = "
            f"{h.d_model}, unrelated layers would still score about d/(N+d) = "
            f"{h.cka_bias:.3f}, which inflates similarity and lowers D_eff. Use ≥ "
            f"{trust.solid_n:,} passages or switch the metric to unbiased_cka."
        )


def show_figure(fig: go.Figure, key: str, *, on_select: str = "ignore", **kwargs: Any) -> Any:
    """Plot a figure with HTML and CSV downloads (built on click, so reruns stay fast)."""
    event = st.plotly_chart(fig, key=key, on_select=on_select, **kwargs)
    row = st.container(horizontal=True)
    for label, build, ext, mime in (
        ("Figure (HTML)", figures.figure_html, "html", "text/html"),
        ("Data (CSV)", figures.figure_csv, "csv", "text/csv"),
    ):
        row.download_button(
            label,
            data=lambda build=build: build(fig),
            file_name=f"{key}.{ext}",
            mime=mime,
            key=f"{key}_{ext}",
            on_click="ignore",
        )
    return event


def show_run_figure(
    fig: go.Figure,
    spec: dict[str, Any],
    what: str,
    *,
    pooling: str,
    metric: str,
    identity: dict[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """`show_figure` for a figure of one run and view: its downloads say which (file name and
    leading CSV columns, `snapshot.run_identity`), plus `identity`'s extra fields."""
    tag = {**run_identity(spec, pooling=pooling, metric=metric), **(identity or {})}
    key = download_stem(spec, what, pooling=pooling, metric=metric)
    return show_figure(figures.tag_run(fig, tag), key=key, **kwargs)
