"""This run beside every cached run and the paper's published models: the paper's Figure 1."""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from deffcore import figures
from deffcore.core.errors import DeffError
from deffcore.core.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.views.comparisons import PAPER_N, comparison_caveats
from deffcore.views.labels import common_label, run_labels
from deffcore.views.models_overview import model_family
from deffcore.views.paper import paper_default_gaps, paper_table
from deffcore.views.run import Run
from explorer.cards import show_run_figure
from explorer.guard import guarded
from explorer.measure_pick import cached_summary, cka_family, metric_label
from explorer.page import OVERVIEW_TABS, require_view
from explorer.settings import Settings
from explorer.views import cached_result, cached_runs, precomputed_runs


def run_row(
    spec: dict, source: str, gap_pct: float, deff_over_L: float, layers: int, trust: str | None
) -> dict:
    """One measured bar: the run's spec (for its label), where it comes from, its numbers."""
    return {
        "spec": spec,
        "source": source,
        "family": model_family(spec["model"]),
        "gap_pct": gap_pct,
        "deff_over_L": deff_over_L,
        "layers": layers,
        "trust": trust,
    }


def measured_runs(view: Run, settings: Settings) -> list[dict[str, Any]]:
    """This run, then every other complete cached run, then the shipped precomputed runs.
    Under a SPEC 17 measure: only the runs that hold its matrix (`measure_runs`), no trust."""
    pooling, metric = settings.pooling, settings.metric
    if not cka_family(metric):
        return measure_runs(view, settings)
    h = view.headline(pooling, metric)
    trust = view.trust(pooling, metric).level
    runs = [run_row(view.spec, "this run", h.gap_pct, h.deff_over_L, view.layers, trust)]
    seen = {(getattr(view, "key", None), view.source == "precomputed")}
    for meta in cached_runs():
        if meta.get("status", "complete") != "complete" or (meta["key"], False) in seen:
            continue
        seen.add((meta["key"], False))
        with guarded(f"Cached run {meta['key']}"):
            g = cached_result(meta["key"], meta.get("created", ""), pooling, metric)
            runs.append(
                run_row(
                    meta["spec"],
                    "cached",
                    g["gap_pct"],
                    g["deff_over_L"],
                    g["layers"],
                    g.get("trust"),
                )
            )
    for snap in precomputed_runs():
        if (snap.key, True) in seen:
            continue
        with guarded(f"Precomputed run {snap.label}"):
            g = snap.headline(pooling, metric)
            t = snap.trust(pooling, metric).level
            runs.append(run_row(snap.spec, "precomputed", g.gap_pct, g.deff_over_L, g.layers, t))
    return runs


def measure_runs(view: Run, settings: Settings) -> list[dict[str, Any]]:
    """This run and every cached or precomputed run that holds the SPEC 17 measure's matrix
    (read, never computed), without a trust level (the rule is the CKA family's); a caption
    says how many runs were left out for lack of it."""
    pooling, metric = settings.pooling, settings.metric
    h = view.headline(pooling, metric)
    runs = [run_row(view.spec, "this run", h.gap_pct, h.deff_over_L, view.layers, None)]
    seen, left_out = {(getattr(view, "key", None), view.source == "precomputed")}, 0
    others = [(meta["key"], False, meta) for meta in cached_runs()
              if meta.get("status", "complete") == "complete"]  # fmt: skip
    others += [(snap.key, True, snap) for snap in precomputed_runs()]
    for key, shipped, run in others:
        if (key, shipped) in seen:
            continue
        seen.add((key, shipped))
        try:  # read, never computed: a run without the matrix is left out
            if shipped:
                g, spec = run.headline(pooling, metric), run.spec
            else:
                g, spec = cached_summary(run, pooling, metric), run["spec"]
        except (KeyError, DeffError):
            g = None
        if g is None:
            left_out += 1
            continue
        source = "precomputed" if shipped else "cached"
        runs.append(run_row(spec, source, g.gap_pct, g.deff_over_L, g.layers, None))
    if left_out:
        st.caption(
            f"{left_out} other run(s) hold no {metric_label(metric)} matrix for pooling "
            f"{pooling} and are left out (open one and compute it there to add it)."
        )
    return runs


def bar_rows(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every measured bar named by what tells it apart (intervention variants and random-weight
    seeds used to read the same), tagged with where it comes from."""
    names = run_labels([r["spec"] for r in runs])
    return [
        {
            "label": (
                f"this run: {name}"
                if r["source"] == "this run"
                else f"{name} (precomputed)"
                if r["source"] == "precomputed"
                else name
            ),
            **{k: v for k, v in r.items() if k != "spec"},
        }
        for name, r in zip(names, runs, strict=True)
    ]


def published_rows() -> list[dict[str, Any]]:
    """The paper's default-pooling gaps (labelled "paper"), or a note when the file is gone."""
    paper = paper_table()
    if paper is None:
        st.info(
            "The paper's published values were not found (deffcore/data/paper_reference.csv is "
            "missing from this copy, and DEFF_PAPER_REFERENCE names no file), so only measured "
            "runs are shown."
        )
        return []
    return [
        {
            "label": f"{r.model} (paper)",
            "family": model_family(r.model),
            "gap_pct": float(r.value),
            "deff_over_L": float("nan"),
            "layers": r.layers,
            "source": "paper",
        }
        for r in paper_default_gaps(paper).itertuples()
    ]


def gap_table(table: pd.DataFrame) -> None:
    # published values give only the gap: their D_eff/L (and some L) are blank, not "None"
    shown = table.sort_values(["family", "gap_pct"]).assign(
        deff_over_L=lambda t: [f"{v:.4f}" if v == v else "" for v in t["deff_over_L"]],
        layers=lambda t: [f"{int(v)}" if v == v and v is not None else "" for v in t["layers"]],
    )
    st.dataframe(
        shown,
        hide_index=True,
        column_order=["label", "family", "source", "gap_pct", "deff_over_L", "layers"],
        column_config={
            "label": st.column_config.TextColumn("run"),
            "family": st.column_config.TextColumn("family"),
            "source": st.column_config.TextColumn("source"),
            "gap_pct": st.column_config.NumberColumn("gap to F_L (%)", format="%.2f"),
            "deff_over_L": st.column_config.TextColumn("D_eff/L"),
            "layers": st.column_config.TextColumn("L (layers)"),
        },
    )


def main() -> None:
    ctx = require_view("Gap to F_L", tabs=OVERVIEW_TABS, measures=True)
    if ctx is None:
        st.stop()
    view, settings = ctx
    pooling, metric = settings.pooling, settings.metric
    st.latex(
        r"\mathrm{gap} = 100\,\Big(1 - \frac{D_\mathrm{eff}}{F_L}\Big), \qquad "
        r"F_L = \frac{2L}{L+1}"
    )
    st.caption(
        f"Measured runs use pooling {pooling} and metric {metric} at K = L-1; the grey "
        "hatched bars labelled (paper) are the paper's published values (default pooling, "
        "linear CKA), never re-measured here. A positive gap means D_eff < F_L: more redundant "
        "than accumulated orthogonal updates. (precomputed): runs shipped with the app."
    )
    runs = measured_runs(view, settings)
    shared = common_label([r["spec"] for r in runs]) if len(runs) > 1 else ""
    if shared:
        st.caption(f"Every measured run here: {md_escape(shared)}.")
    caveats = comparison_caveats(
        [
            {"label": "this run" if r["source"] == "this run" else r["source"],
             "trust": r["trust"], "n": r["spec"].get("n"),
             "max_tokens": r["spec"].get("max_tokens"), "passages": r["spec"].get("passages")}
            for r in runs
        ]
        + [{"label": "the paper", "trust": "published", "n": PAPER_N}]
    )  # fmt: skip
    if caveats:
        st.warning(md_escape("Read these bars side by side with care. " + " ".join(caveats)))
    table = pd.DataFrame(bar_rows(runs) + published_rows())
    show_run_figure(figures.gap_bars(table), view.spec, "gap_to_FL", pooling=pooling, metric=metric)
    gap_table(table)


main()
