"""Display cards: the headline numbers with their trust badge, the precomputed-run note, and
`show_figure` (a chart with its HTML and CSV downloads, named by the run or what made it:
the one download helper of every page) and `download_table`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from deffcore import figures
from deffcore.core.constants import METRICS
from deffcore.core.lazy import pd  # imported on first use: a chart never needs it
from deffcore.core.safe_text import csv_safe, md_code  # user text is text, never markup
from deffcore.inputs.supply import passages_action
from deffcore.statistics.trust_rule import Trust
from deffcore.views.labels import identity_stem, run_identity
from deffcore.views.run import Run
from explorer.settings import Settings

#: Extraction speed used for time estimates (SmolLM2-135M, quiet 2-core CPU, BENCHMARKS.md).
CPU_TOKENS_PER_S = 600


def precomputed_note(view: Run) -> None:
    if view.source == "shared":
        shared_note(view)
    elif view.source == "precomputed":
        tokens = view.n * int(view.spec.get("max_tokens", 128))
        minutes = max(1, round(tokens / CPU_TOKENS_PER_S / 60))
        st.info(
            f"Precomputed with {md_code(view.command)}. To compute it here, press **Run** on "
            "the Runs page: its settings start as this run's "
            f"(about {minutes} minutes on a quiet 2-core CPU "
            f"for {tokens:,} tokens; seconds on a GPU; a smaller N is quicker).",
            icon="ℹ️",
        )


def shared_note(view: Run) -> None:
    """Where a shared run comes from; its command is someone else's text, shown as code."""
    st.info(
        "A shared run: the numbers are read from the snapshot file its sender made, never "
        "re-run here. To measure it yourself, choose the same settings on the "
        "Runs page and press **Run**." + (" It was made with:" if view.command else ""),
        icon="ℹ️",
    )
    if view.command:
        st.code(view.command, language="bash")


def trust_of(view: Run, settings: Settings) -> Trust:
    """The trust badge of the current headline (`Run.trust`), with the bootstrap interval
    when the Baselines page computed one for this view, else the one the run was stored with."""
    pooling, metric, K = settings.pooling, settings.metric, settings.K
    ci = mean = None
    if K in (None, view.layers - 1):
        for k, v in st.session_state.items():
            if (
                isinstance(k, tuple)
                and k[:4] == ("bootstrap", getattr(view, "key", None), pooling, metric)
                and isinstance(v, dict)
                and {"low", "high"} <= set(v)
            ):
                ci = (float(v["low"]), float(v["high"]))
                mean = v.get("mean")
    return view.trust(pooling, metric, K, ci, mean)  # no ci: the run's stored bootstrap


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


def headline_cards(view: Run, settings: Settings) -> None:
    """D_eff, D_eff/L, gap to F_L, rho_hat(1), position-0 ratio, N, CKA bias (one row), with
    the trust badge of these numbers; the CKA-bias warning only when the bias moves them."""
    h = view.headline(settings.pooling, settings.metric, settings.K)
    trust = trust_of(view, settings) if settings.metric in METRICS else None
    badge = f"Trust: {trust.badge}. " if trust is not None else ""
    cols = st.columns(7)
    cols[0].metric("D_eff", f"{h.deff:.3f}", help=f"{badge}K = {h.K}, L = {h.layers}")
    cols[1].metric("D_eff / L", f"{h.deff_over_L:.4f}", help=badge.strip())
    sub = h.gap_pct > 0
    cols[2].metric(
        "Gap to F_L",
        f"{h.gap_pct:+.1f}%",
        # short enough for a seventh of the page at 1400 px; the full words are in the help
        delta="more redundant" if sub else "less redundant",
        delta_color="red" if sub else "green",
        delta_arrow="off",
        help=f"{badge}100 (1 - D_eff / F_L), F_L = 2L/(L+1) = {h.reference_FL:.4f}; positive: "
        "D_eff < F_L, more redundant than orthogonal updates; negative: less redundant",
    )
    cols[3].metric("ρ̂(1)", f"{h.rho1:.4f}", help=f"{badge}mean similarity of adjacent layers")
    cols[4].metric(
        "Pos-0 norm ratio",
        f"{h.pos0_ratio:.1f}×",
        help=f"Position-0 norm ratio ‖h(pos 0)‖ / mean ‖h(t ≥ 1)‖, peak at layer "
        f"{h.pos0_layer}: how much longer the first token's state is. Not the "
        "massive-activation ratio of the BOS page (glossary).",
    )
    cols[5].metric("N", f"{h.n}", help=f"d = {h.d_model}, L = {h.layers}")
    cols[6].metric("CKA bias d/(N+d)", f"{h.cka_bias:.3f}")
    if trust is None:  # the trust rule is calibrated for the CKA family (SPEC 8, 17.5)
        st.caption(measure_spread_line(view, settings.pooling, settings.metric))
        return
    trust_line(trust)
    if trust.bias_material:
        action = passages_action(trust.solid_n, view.spec or None, view.window_source())
        st.warning(
            f"Linear CKA's finite-sample bias matters here: with N = {h.n} passages and d = "
            f"{h.d_model}, unrelated layers would still score about d/(N+d) = "
            f"{h.cka_bias:.3f}, which inflates similarity and lowers D_eff. "
            f"{action[:1].upper()}{action[1:]} or switch the metric to unbiased_cka."
        )


def measure_spread_line(view: Run, pooling: str, metric: str) -> str:
    """What stands in for the trust badge under a SPEC 17 measure: the trust rule is the CKA
    family's, so no level; the interval and regime of the run's table across measures when it
    holds the row (SPEC 17.4), else where to compute them."""
    from deffcore.statistics.measure_table import MEASURE_LABELS

    name = MEASURE_LABELS.get(metric, metric)
    head = f"No trust level: the trust rule is calibrated for the CKA family only, not for {name}."
    table = view.measure_table(pooling)
    row = None
    if table is not None and metric in {r.measure for r in table.rows}:
        row = table.row(metric)
    if row is None or row.undefined is not None:
        return (
            f"{head} Its passage-bootstrap interval and regime against F_L are in the table "
            "across measures (Similarity page), computed on request."
        )
    return (
        f"{head} The table across measures gives D_eff/L {row.deff_over_L:.4f}, "
        f"{round(100 * table.ci)}% interval [{row.low:.4f}, {row.high:.4f}] (B = {table.B}), "
        f"regime: {row.regime}."
    )


#: Plotly's toolbar without the buttons nobody uses here (a narrower bar covers less).
PLOTLY_CONFIG = {"displaylogo": False, "modeBarButtonsToRemove": ["lasso2d", "autoScale2d"]}


def show_figure(
    fig: go.Figure,
    what: str,
    identity: Mapping[str, Any],
    *,
    on_select: str = "ignore",
    **kwargs: Any,
) -> Any:
    """THE way a page shows a figure: the chart, laid out for the page
    (`figures.for_display`: its title clear of the toolbar), with HTML and CSV downloads
    named by `identity` and `what` (`labels.identity_stem`: a run's identity gives its
    slug) and a CSV that leads with the identity's columns (`figures.tag_run`). identity: a
    run's `run_identity`, or what else made the figure (a lab's settings, a construction's
    knobs). The downloads are built on click, so reruns stay fast."""
    key = identity_stem(dict(identity), what)
    fig = figures.for_display(figures.tag_run(fig, identity))
    shown = figures.plain_text_labels(fig)  # user text in labels shows as text, not HTML
    shown = figures.theme_safe_colors(shown)  # no colour the chart theme would swap
    event = st.plotly_chart(shown, key=key, on_select=on_select, config=PLOTLY_CONFIG, **kwargs)
    row = st.container(horizontal=True)
    for label, build, source, ext, mime in (
        ("Figure (HTML)", figures.figure_html, shown, "html", "text/html"),
        ("Data (CSV)", figures.figure_csv, fig, "csv", "text/csv"),
    ):
        row.download_button(
            label,
            data=lambda build=build, source=source: build(source),
            file_name=f"{key}.{ext}",
            mime=mime,
            key=f"{key}_{ext}",
            on_click="ignore",
        )
    return event


def show_run_figure(
    fig: go.Figure,
    spec: Mapping[str, Any],
    what: str,
    *,
    pooling: str,
    metric: str,
    identity: Mapping[str, Any] | None = None,
    **kwargs: Any,
) -> Any:
    """`show_figure` for a figure of one run and view (`labels.run_identity`), plus
    `identity`'s extra fields."""
    tag = {**run_identity(dict(spec), pooling=pooling, metric=metric), **(identity or {})}
    return show_figure(fig, what, tag, **kwargs)


def download_table(
    table: pd.DataFrame, what: str, identity: Mapping[str, Any], label: str = "Table (CSV)"
) -> None:
    """A table's CSV download, named and led by `identity` like `show_figure`'s."""
    key = identity_stem(dict(identity), what)
    lead = pd.DataFrame({k: [v] * len(table) for k, v in identity.items()}, index=table.index)
    st.download_button(
        label,
        data=lambda: csv_safe(pd.concat([lead, table], axis=1)).to_csv(index=False),
        file_name=f"{key}.csv",
        mime="text/csv",
        key=f"{key}_csv",
        on_click="ignore",
    )


def download_html(
    build: Any, what: str, identity: Mapping[str, Any], label: str, help_text: str = ""
) -> None:
    """An HTML file's download (`build()` -> its text, called on click), named and keyed by
    `identity` and `what` like `show_figure`'s (the run's slug for a run's identity)."""
    key = identity_stem(dict(identity), what)
    st.download_button(
        label,
        data=build,
        file_name=f"{key}.html",
        mime="text/html",
        key=f"{key}_html",
        on_click="ignore",
        help=help_text or None,
    )
