"""The runs: cached, shared and precomputed ones, told apart by what differs; open, compare (a
colour per run, two runs side by side), upload a shared run, resume an interrupted run, delete
a cached or shared one."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import streamlit as st

from deffcore import figures
from deffcore.core.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.views.comparisons import comparison_caveats, headline_differences
from deffcore.views.labels import common_label, label_fields, run_label, run_labels, run_slug
from deffcore.views.models_overview import model_family
from deffcore.views.run import Headline, Run
from explorer.cards import show_figure
from explorer.guard import guarded
from explorer.page import page, page_links
from explorer.run_panel import resume_run
from explorer.settings import Settings
from explorer.shared_runs import share_section, shared_entries
from explorer.views import (
    cached_result,
    forget_run,
    measurement_from_cache,
    open_run,
    precomputed_runs,
    set_view,
)


@st.cache_data(show_spinner=False, max_entries=64)
def cached_similarity(key: str, created: str, pooling: str, metric: str) -> np.ndarray:
    """(L, L) similarity of a cached run (the states are read from disk, the model not run)."""
    return Run.from_measurement(measurement_from_cache(key)).similarity(pooling, metric)


def line_name(i: int) -> str:
    """The i-th run's line in words ("orange, dashed"), as the chart draws it."""
    style = figures.run_style(i)
    colour = next(k for k, v in figures.OKABE_ITO.items() if v == style["color"])
    return colour if style["dash"] == "solid" else f"{colour}, {style['dash']}"


#: Runs that are a file (a view each), not a cache entry.
VIEW_SOURCES = ("shared", "precomputed")


@dataclass
class Runs:
    """Every run the page lists: cached entries, then the precomputed gallery, by id (a cached
    run by its cache key, a precomputed one, which may also be cached, by `precomputed:<key>`),
    each labelled by what tells it apart from the others."""

    entries: list[dict[str, Any]]
    labels: dict[str, str]
    by_id: dict[str, dict[str, Any]]
    current_id: str | None
    shared: str  # what every listed run has in common

    @property
    def complete(self) -> list[str]:
        return [e["id"] for e in self.entries if e["status"] in ("complete", *VIEW_SOURCES)]


def cache_entries() -> list[dict[str, Any]]:
    from deffcore.extraction import cache

    entries = []
    with guarded("Listing the cache"):
        for m in cache.list_runs():
            status = m.get("status") or ("corrupt" if m.get("corrupt") else "complete")
            if m.get("running") and status != "complete":
                status = "running"
            entries.append({**m, "status": status, "source": "cached"})
    return entries


def gallery_entries() -> list[dict[str, Any]]:
    return [
        {
            "key": snap.key,
            "spec": snap.spec,
            "n": snap.n,
            "layers": snap.layers,
            "d_model": snap.d_model,
            "status": "precomputed",
            "source": "precomputed",
            "view": snap,
        }
        for snap in precomputed_runs()
    ]


def list_runs(view: Run | None) -> Runs:
    entries = cache_entries() + shared_entries() + gallery_entries()
    for e in entries:
        e.setdefault("id", e["key"] if e["source"] == "cached" else f"precomputed:{e['key']}")
        e["tags"] = [] if e["status"] == "complete" else [e["status"]]
    labels = entry_labels([e for e in entries if isinstance(e.get("spec"), dict)])
    with_spec = [e for e in entries if e["id"] in labels]
    for e in entries:
        if e["id"] not in labels and e["status"] in ("complete", *VIEW_SOURCES):
            e["status"], e["tags"] = "unreadable", ["unreadable"]  # never opened or compared
        base = labels.get(e["id"], f"unreadable entry {e['key'][:8]}")
        labels[e["id"]] = " · ".join([base, *e["tags"]])

    def is_current(e: dict[str, Any]) -> bool:
        if view is None or e["key"] != getattr(view, "key", None):
            return False
        if "shared" in (e["source"], view.source):  # the very file: two may hold one run
            return e.get("sha256") == getattr(view, "sha256", None)
        return (e["source"] == "precomputed") == (view.source == "precomputed")

    return Runs(
        entries=entries,
        labels=labels,
        by_id={e["id"]: e for e in entries},
        current_id=next((e["id"] for e in entries if is_current(e)), None),
        shared=common_label([e["spec"] for e in with_spec]) if len(with_spec) > 1 else "",
    )


def entry_labels(entries: list[dict[str, Any]]) -> dict[str, str]:
    """Each entry's label by what tells it apart (`run_labels`); should that fail on one odd
    spec, each entry is labelled alone, and one that cannot be is left out (its row says so)."""
    try:
        return dict(
            zip([e["id"] for e in entries], run_labels([e["spec"] for e in entries]), strict=True)
        )
    except Exception:  # one entry must not take every label down: each on its own
        labels = {}
        for e in entries:
            with contextlib.suppress(Exception):
                labels[e["id"]] = run_label(e["spec"])
        return labels


def safe_row(e: dict[str, Any], runs: Runs) -> dict[str, Any]:
    """`table_row`, or a row that says the entry cannot be shown (the rest of the table and
    the page go on)."""
    try:
        return table_row(e, runs)
    except Exception as err:
        note = f"cannot be shown ({type(err).__name__})"
        return {"current": False, "run": runs.labels.get(e.get("id"), "?"), "status": note}


def table_row(e: dict[str, Any], runs: Runs) -> dict[str, Any]:
    spec = e.get("spec") if isinstance(e.get("spec"), dict) else {}
    f = label_fields(spec) if spec else {}
    done = (
        f"{e.get('done_passages', 0)}/{e.get('total_passages', '?')}"
        if e["status"] in ("partial", "running")
        else ""
    )
    return {
        "current": e["id"] == runs.current_id,
        "run": runs.labels[e["id"]],
        "status": e["status"] + (f" ({done} passages)" if done else ""),
        "model": f.get("model", ""),
        "weights": f.get("weights", ""),
        "dataset": f.get("dataset", ""),
        "N": e.get("n") or spec.get("n"),
        "max tokens": spec.get("max_tokens"),
        "passages": spec.get("passages", "documents") if spec else "",
        "BOS": spec.get("bos", "default") if spec else "",
        "intervention": spec.get("intervention", "none") if spec else "",
        "seed": spec.get("seed"),
        "L (layers)": e.get("layers"),
        "d (features)": e.get("d_model"),
        "created": e.get("created", ""),
        "size (MB)": round(e.get("size_bytes", 0) / 1e6, 2) if e["source"] == "cached" else None,
        "key": e["key"][:10],
    }


#: Pixels per character of a table cell's text (the app's sans-serif at 14 px; digits and
#: "·" are narrower), the cell's padding, and the widest a pinned column may be.
CHAR_PX, CELL_PAD_PX, MAX_COLUMN_PX = 7.5, 32, 760


def label_px(labels: Any) -> int:
    """A column width that shows the longest of `labels` whole (at most MAX_COLUMN_PX)."""
    longest = max((len(str(x)) for x in labels), default=0)
    return int(min(MAX_COLUMN_PX, max(200, CHAR_PX * longest + CELL_PAD_PX)))


def runs_table(runs: Runs) -> None:
    """The intro and one row per run; stops the page when there is none."""
    shared = f" (all of them: {md_escape(runs.shared)})." if runs.shared else "."
    st.markdown(
        "Every run you press is kept in the cache; the **precomputed** runs ship with the app, "
        "so models can be compared before anything is run. Each run is named by what tells it "
        "apart from the others" + shared
    )
    rows = [safe_row(e, runs) for e in runs.entries]
    if not rows:
        st.info("No runs yet: press Run above; every run is kept in the cache.")
        st.stop()
    table = pd.DataFrame(rows)
    # a column every run shares is in the sentence above: the table keeps what differs
    same = [
        c for c in table.columns
        if c not in ("current", "run", "status", "model", "dataset")
        and table[c].astype(str).nunique() <= 1
    ]  # fmt: skip
    st.dataframe(
        table.drop(columns=same if len(table) > 1 else []),
        hide_index=True,
        width="stretch",  # the page's width; more columns scroll inside the table, never cut
        column_config={  # the run column as wide as its longest name (400 px cut them)
            "run": st.column_config.TextColumn("run", pinned=True, width=label_px(table["run"])),
            "current": st.column_config.CheckboxColumn("current", pinned=True, width="small"),
        },
    )


def open_section(runs: Runs) -> None:
    st.subheader("Open")
    complete = runs.complete
    if not complete:
        return
    c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
    start = complete.index(runs.current_id) if runs.current_id in complete else 0
    to_open = c1.selectbox(
        "Run", complete, index=start, format_func=runs.labels.get, key="runs_open"
    )
    if c2.button("Open", key="runs_open_button") and open_entry(runs.by_id[to_open]):
        st.session_state["runs_opened"] = to_open
        st.rerun()  # redraw the sidebar too, which was drawn before the run changed
    opened = st.session_state.pop("runs_opened", None)
    if opened in runs.labels:
        shown = md_escape(run_label(runs.by_id[opened]["spec"]))
        st.success(f"Opened {shown}; every page now shows it.")


def open_entry(e: dict[str, Any]) -> bool:
    if "view" in e:  # precomputed or shared: the file is the run
        set_view(e["view"])
        return True
    return open_run(e["key"]) is not None


def resume_cost(key: str) -> str:
    """What resuming the interrupted run `key` writes into the cache and takes, said first
    (SPEC 14, "Writes said first"): the whole entry is written when it finishes; its time is
    priced as the whole run's (the kept passages are not extracted again)."""
    from deffcore.inputs.model import resolve_device_dtype
    from deffcore.runs.action_costs import runs_cost
    from deffcore.work.jobs import partial_spec

    try:
        spec = partial_spec(key)
    except Exception:  # gone since the list was read: the button says why
        return "the run is no longer in the cache"
    return runs_cost([spec], resolve_device_dtype(None, None)[0]).line()


def resume_section(runs: Runs) -> None:
    unfinished = [e["id"] for e in runs.entries if e["status"] == "partial"]
    if not unfinished:
        return
    st.subheader("Interrupted runs")
    st.caption(
        "These runs stopped before the end (cancelled, or the app was closed); the passages "
        "already done are kept, so resuming computes only the rest."
    )
    c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
    to_resume = c1.selectbox(
        "Interrupted run", unfinished, format_func=runs.labels.get, key="runs_resume"
    )
    cost = resume_cost(runs.by_id[to_resume]["key"])
    c1.caption(md_escape(f"Resuming (priced as the whole run): {cost}."))
    if c2.button("Resume", key="runs_resume_button"):
        with guarded("Resuming the run"):
            resume_run(runs.by_id[to_resume]["key"])
            st.rerun()


def compare_section(runs: Runs, settings: Settings) -> None:
    st.subheader("Compare")
    complete = runs.complete
    if len(complete) < 2:
        st.caption(
            "Only one run so far: press Run above with another model or setting "
            "(e.g. Model source → Random-weight null) to have something to compare."
        )
        return
    # start from the current run, beside the first run of another model (else the next run)
    first = runs.current_id if runs.current_id in complete else complete[0]
    model = label_fields(runs.by_id[first]["spec"])["model"]
    other = next(
        (
            i
            for i in complete
            if i != first and label_fields(runs.by_id[i]["spec"])["model"] != model
        ),
        next(i for i in complete if i != first),
    )
    picked = st.multiselect(
        "Runs to compare (two or more; the first is the reference)",
        complete,
        default=[first, other],
        format_func=runs.labels.get,
        key="runs_compare",
    )
    if len(picked) < 2:
        st.caption("Pick at least two runs, e.g. a trained model and its random-weight null.")
        return
    names = dict(zip(picked, run_labels([runs.by_id[i]["spec"] for i in picked]), strict=True))
    for i in picked:
        if runs.by_id[i]["source"] != "cached":
            names[i] += f" · {runs.by_id[i]['source']}"
    shared = common_label([runs.by_id[i]["spec"] for i in picked])
    if shared:
        shown = md_escape(shared)
        st.caption(f"All compared runs: {shown} · {settings.metric} · pooling {settings.pooling}")
    results = compared_results(runs, picked, settings)
    if results:
        caveats(runs, names, results)
        comparison_charts(runs, names, results, settings)
    side_by_side_section(runs, names, results, picked, settings)


def compared_results(
    runs: Runs, picked: list[str], settings: Settings
) -> dict[str, dict[str, Any]]:
    """Headline numbers, lag profile and trust level of each picked run (a failing one is
    left out)."""
    pooling, metric = settings.pooling, settings.metric
    results: dict[str, dict[str, Any]] = {}
    for i in picked:
        e = runs.by_id[i]
        with guarded(f"Run {runs.labels[i]}"):
            if "view" in e:
                snap = e["view"]
                h = snap.headline(pooling, metric)
                r = {**h.to_dict(), "rho": snap.lag_profile(pooling, metric)}
                r["trust"] = snap.trust(pooling, metric).level
            else:
                r = dict(cached_result(e["key"], e.get("created", ""), pooling, metric))
            results[i] = r
    return results


def caveats(runs: Runs, names: dict[str, str], results: dict[str, dict[str, Any]]) -> None:
    """A warning whenever the compared runs differ in trust level, N, tokens or passages."""
    rows = [
        {
            "label": names[i],
            "trust": r.get("trust"),
            "n": r["n"],
            "max_tokens": runs.by_id[i]["spec"].get("max_tokens"),
            "passages": runs.by_id[i]["spec"].get("passages", "documents"),
        }
        for i, r in results.items()
    ]
    found = comparison_caveats(rows)
    if found:
        st.warning(md_escape("Compare these runs with care. " + " ".join(found)))


def compare_identity(runs: Runs, ids: list[str], settings: Settings) -> dict[str, Any]:
    """What a comparison's downloads carry: the runs (first one's slug in the file name)."""
    first = run_slug(runs.by_id[ids[0]]["spec"])
    more = f"and-{len(ids) - 1}-more" if len(ids) > 1 else ""
    return {
        "compare": f"{first}_{more}".strip("_"),
        "runs": " | ".join(run_label(runs.by_id[i]["spec"]) for i in ids),
        "pooling": settings.pooling,
        "metric": settings.metric,
    }


def comparison_charts(
    runs: Runs, names: dict[str, str], results: dict[str, dict[str, Any]], settings: Settings
) -> None:
    """Lag profiles and gaps of the compared runs, and their numbers in one table."""
    tag = compare_identity(runs, list(results), settings)
    show_figure(
        figures.compare_lag_profiles({names[i]: r["rho"] for i, r in results.items()}),
        "lag_profiles",
        tag,
    )
    gaps = pd.DataFrame(
        {
            "label": [names[i] for i in results],
            "family": [model_family(runs.by_id[i]["spec"]["model"]) for i in results],
            "gap_pct": [r["gap_pct"] for r in results.values()],
            "source": [runs.by_id[i]["source"] for i in results],
        }
    )
    show_figure(figures.gap_bars(gaps), "gaps", tag)
    st.dataframe(
        pd.DataFrame(
            {
                "run": [names[i] for i in results],
                "line": [line_name(j) for j in range(len(results))],
                "trust": [r.get("trust") for r in results.values()],
                "L (layers)": [r["layers"] for r in results.values()],
                "N (passages)": [r["n"] for r in results.values()],
                "D_eff": [r["deff"] for r in results.values()],
                "D_eff / L": [r["deff_over_L"] for r in results.values()],
                "Gap to F_L (%)": [r["gap_pct"] for r in results.values()],
                "ρ̂(1)": [r["rho1"] for r in results.values()],
            }
        ),
        hide_index=True,
        column_config={
            "D_eff": st.column_config.NumberColumn(format="%.3f"),
            "D_eff / L": st.column_config.NumberColumn(format="%.4f"),
            "Gap to F_L (%)": st.column_config.NumberColumn(format="%+.2f"),
            "ρ̂(1)": st.column_config.NumberColumn(format="%.4f"),
        },
    )


def side_by_side_section(
    runs: Runs,
    names: dict[str, str],
    results: dict[str, dict[str, Any]],
    picked: list[str],
    settings: Settings,
) -> None:
    """Two of the compared runs: their similarity maps (and difference) and headline changes."""
    st.subheader("Two runs side by side")
    ok = [i for i in picked if i in results]
    c1, c2 = st.columns(2)
    a = c1.selectbox("Run A", ok, index=0, format_func=names.get, key="runs_side_a")
    b = c2.selectbox(
        "Run B", ok, index=min(1, len(ok) - 1), format_func=names.get, key="runs_side_b"
    )
    if a == b:
        st.caption("Pick two different runs.")
        return
    pooling, metric = settings.pooling, settings.metric
    mats = {}
    for i in (a, b):
        e = runs.by_id[i]
        with guarded(f"Run {names[i]}"):
            mats[i] = (
                e["view"].similarity(pooling, metric)
                if "view" in e
                else cached_similarity(e["key"], e.get("created", ""), pooling, metric)
            )
    if len(mats) < 2:
        return
    tag = compare_identity(runs, [a, b], settings)
    show_figure(
        figures.side_by_side_heatmaps(
            mats[a], mats[b], label_a=names[a], label_b=names[b], metric=metric
        ),
        "side_by_side",
        tag,
    )
    fields = Headline.__dataclass_fields__
    rows = headline_differences(
        Headline(**{k: results[a][k] for k in fields}),
        Headline(**{k: results[b][k] for k in fields}),
    )
    st.markdown(f"**B − A, in each number's own unit** (B: {md_escape(names[b])})")
    st.dataframe(
        pd.DataFrame(rows)[["quantity", "run A", "run B", "difference"]],
        hide_index=True,
        column_config={c: st.column_config.NumberColumn(format="%.4g") for c in ("run A", "run B")},
    )


def delete_section(runs: Runs) -> None:
    deletable = [
        e["id"] for e in runs.entries if e["source"] == "cached" and e["status"] != "running"
    ]
    st.subheader("Delete")
    if not deletable:
        st.caption("No cached run to delete (precomputed runs ship with the app).")
        return
    c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
    to_delete = c1.selectbox(
        "Cached run to delete", deletable, format_func=runs.labels.get, key="runs_delete"
    )
    if c2.button("Delete…", key="runs_delete_button"):
        st.session_state["runs_confirm_delete"] = to_delete
    pending = st.session_state.get("runs_confirm_delete")
    if pending in deletable:
        confirm_delete(runs, pending)


def confirm_delete(runs: Runs, pending: str) -> None:
    shown = md_escape(runs.labels[pending])
    st.warning(f"Delete {shown} from the cache? Its states cannot be recovered.")
    c1, c2, _ = st.columns([1, 1, 4])
    if c1.button("Yes, delete", type="primary", key="runs_delete_confirm"):
        with guarded("Deleting the run"):
            from deffcore.extraction import cache

            key = runs.by_id[pending]["key"]
            cache.delete(key)
            forget_run(key)
            del st.session_state["runs_confirm_delete"]
            st.rerun()
    if c2.button("Cancel", key="runs_delete_cancel"):
        del st.session_state["runs_confirm_delete"]
        st.rerun()


def main() -> None:
    view, settings = page("Runs", run_panel=True)  # the one place the run panel lives
    page_links([("pages/6_Baselines.py", "Baselines: random-weight null, references, bootstrap")])
    runs = list_runs(view)
    # each section on its own: one that fails is a sentence, and the delete controls are
    # always drawn (a bad entry must be removable from here)
    with guarded("The table of runs"):
        runs_table(runs)
    for what, section in (
        ("Opening a run", lambda: open_section(runs)),
        ("The shared runs", lambda: share_section(runs.entries)),
        ("The interrupted runs", lambda: resume_section(runs)),
        ("Comparing runs", lambda: compare_section(runs, settings)),
        ("Deleting a run", lambda: delete_section(runs)),
    ):
        with guarded(what):
            section()


main()
