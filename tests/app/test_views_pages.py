"""AppTest of the result views (Similarity, Lag decay, Gap, Baselines, Runs) and their figures:
runs told apart, compare from the current run with a colour per run, two runs side by side,
the precomputed gallery, interrupted runs, the bias floor, downloads that name their run.

The module's cache holds a tiny-llama run (16 BBC passages, 32 tokens), its random-weight
nulls (seeds 1 and 2), a `windows` variant and one interrupted (partial) entry; the current run
is set directly in the session, so these tests do not depend on how the sidebar starts a run.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from apptest_helpers import assert_clean, chart, plain, plotly_array
from streamlit.testing.v1 import AppTest

from deffcore import figures
from deffcore.measures.depth import lag_profile
from deffcore.views.labels import run_slug
from deffcore.views.run import Run, load_gallery

REPO = Path(__file__).resolve().parents[2]
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 16, "max_tokens": 32, "seed": 0}


@pytest.fixture(scope="module")
def runs(cache_dir):
    """The trained run (with its two null seeds), a windows variant and a partial entry."""
    from deffcore.extraction import cache as partial
    from deffcore.inputs import run_spec
    from deffcore.runs.measure import measure

    trained = measure(**RUN, random_seeds=(1, 2))
    windows = measure(**RUN, passages="windows")
    partial_spec = run_spec.RunSpec(
        model="tiny-llama",
        revision=None,
        dataset="bbc-news",
        n=24,
        max_tokens=32,
        seed=5,
        dtype="float32",
    )
    partial.PartialRun(partial_spec)._start({"n": 24, "layers": 4, "d_model": 64})
    return {"trained": trained, "windows": windows, "partial": partial_spec}


@pytest.fixture(scope="module")
def app(runs):
    from explorer import views

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180)
    at.session_state[views.VIEW_KEY] = Run.from_measurement(runs["trained"])
    at.run()
    assert_clean(at)
    return at


def complete_keys(model: str | None = None) -> list[str]:
    """Keys of the complete cached runs (of one model when given), newest first."""
    from deffcore.extraction import cache as entries

    return [
        m["key"]
        for m in entries.list_runs()
        if m["status"] == "complete" and model in (None, m["spec"]["model"])
    ]


def goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(page)
    return at.run()


# ---------------------------------------------------------------------------------------------
# Runs: told apart, partial, compare, side by side
# ---------------------------------------------------------------------------------------------


def test_runs_table_tells_every_run_apart_and_shows_the_partial(app, runs):
    at = goto(app, "pages/7_Runs.py")
    assert_clean(at)
    table = at.dataframe[0].value
    assert table["run"].is_unique, list(table["run"])
    cached = table[table["status"] != "precomputed"]  # the gallery has random nulls too
    nulls = cached[cached["weights"].str.startswith("random weights")]
    assert sorted(nulls["run"]) == [
        r for r in sorted(cached["run"]) if "init seed 1" in r or "init seed 2" in r
    ]
    assert len(nulls) == 2
    assert set(table["status"].str.split(" ").str[0]) >= {"complete", "partial"}
    partial = table[table["status"].str.startswith("partial")]
    assert list(partial["status"]) == ["partial (0/24 passages)"]
    assert (table["current"] & (table["status"] == "complete")).sum() == 1
    if load_gallery():
        assert (table["status"] == "precomputed").sum() == len(load_gallery())
    # no cache path on the page
    assert "path" not in table.columns
    shown = " ".join(str(v) for v in table.to_numpy().ravel())
    assert str(runs["partial"].dataset) in shown and "/tmp" not in shown
    # the interrupted run can be resumed (or says how, until background runs land)
    assert at.selectbox(key="runs_resume").options
    assert at.button(key="runs_resume_button") is not None
    # what resuming takes and writes is said first (SPEC 14, "Writes said first")
    from deffcore.runs.action_costs import runs_cost

    said = runs_cost([runs["partial"]], "cpu").line()
    assert any(
        plain(c.value).startswith("Resuming (priced as the whole run): ")
        and plain(c.value).endswith(said + ".")
        for c in at.caption
    ), [c.value for c in at.caption]


def test_compare_starts_from_the_current_run_with_a_colour_per_run(app, runs):
    at = goto(app, "pages/7_Runs.py")
    current = runs["trained"].spec.key()
    picked = at.multiselect(key="runs_compare").value
    assert picked[0] == current and len(picked) == 2
    fig = chart(at, "Lag profiles of the selected runs")
    colours = [t["line"]["color"] for t in fig["data"]]
    assert len(set(colours)) == len(colours) == 2
    np.testing.assert_allclose(
        plotly_array(fig["data"][0]["y"]), lag_profile(runs["trained"].similarity("default", "cka"))
    )
    # four runs: four colours, in the order picked
    cached = complete_keys()
    at.multiselect(key="runs_compare").set_value(cached).run()
    assert_clean(at)
    fig = chart(at, "Lag profiles of the selected runs")
    assert [t["line"]["color"] for t in fig["data"]] == [
        figures.run_style(i)["color"] for i in range(len(cached))
    ]
    names = [t["name"] for t in fig["data"]]
    assert len(set(names)) == len(names)


def test_compare_warns_when_runs_differ_in_trust_n_or_passages(app, runs):
    at = goto(app, "pages/7_Runs.py")
    trained, shipped = runs["trained"].spec.key(), f"precomputed:{load_gallery()[0].key}"
    at.multiselect(key="runs_compare").set_value([trained, shipped]).run()
    assert_clean(at)
    (warning,) = [w.value for w in at.warning if "with care" in w.value]
    text = warning.replace("\\", "")
    table = next(d.value for d in at.dataframe if "trust" in d.value.columns)
    levels = list(table["trust"])  # the shipped N = 4,096 run: "indicative"
    assert levels[0] == "noise" and levels[1] in ("indicative", "solid"), levels
    assert "differ in trust" in text and "noise" in text and levels[1] in text
    assert "N differs (16, 4,096 passages)" in text.replace("\\,", ",")
    assert "Passages are cut differently" in text
    same = complete_keys("random:tiny-llama:")[:1]
    at.multiselect(key="runs_compare").set_value([trained, *same]).run()
    assert not [w for w in at.warning if "with care" in w.value]  # both N = 16 noise


def test_side_by_side_shows_both_maps_their_difference_and_the_changes(app, runs):
    at = goto(app, "pages/7_Runs.py")
    trained = runs["trained"]
    null_key = complete_keys("random:tiny-llama:1")[0]
    at.multiselect(key="runs_compare").set_value([trained.spec.key(), null_key]).run()
    at.selectbox(key="runs_side_a").set_value(trained.spec.key())
    at.selectbox(key="runs_side_b").set_value(null_key).run()
    assert_clean(at)
    fig = chart(at, "Layer similarity side by side")
    heat = [t for t in fig["data"] if t["type"] == "heatmap"]
    assert len(heat) == 3
    from deffcore.extraction import cache
    from deffcore.inputs import run_spec
    from deffcore.runs.measure import Measurement

    meta = cache.load_meta(null_key)
    spec = run_spec.RunSpec(**meta["spec"])
    S_null = Measurement(spec=spec, pooled=cache.load(spec), cached=True, meta=meta).similarity(
        "default", "cka"
    )
    S = trained.similarity("default", "cka")
    np.testing.assert_allclose(plotly_array(heat[0]["z"]), S)
    np.testing.assert_allclose(plotly_array(heat[2]["z"]), S_null - S, atol=1e-12)
    changes = next(d.value for d in at.dataframe if "difference" in d.value.columns)
    rows = changes.set_index("quantity")
    assert rows.loc["D_eff", "run A"] == pytest.approx(trained.summary().deff)
    gap = rows.loc["Gap to F_L (%)"]
    assert gap["difference"].endswith(" points")  # absolute, never "% of A"
    diff = float(gap["difference"].split()[0].replace("−", "-"))
    assert diff == pytest.approx(gap["run B"] - gap["run A"], abs=0.006)
    # downloads named by the compared runs and the view
    ids = [b.proto.id for b in at.get("download_button")]
    stem = f"{run_slug(trained.spec.__dict__)}_and-1-more_default_cka_side_by_side"
    assert any(stem in i for i in ids), ids


def test_resume_and_delete_only_list_cache_entries(app, runs):
    at = goto(app, "pages/7_Runs.py")
    options = at.selectbox(key="runs_delete").options
    assert not any(o.startswith("precomputed:") for o in at.selectbox(key="runs_delete").options)
    assert len(options) == 5  # the trained run, two nulls, windows, the partial entry


def test_resume_finishes_an_interrupted_run(app, runs):
    from deffcore.extraction import cache as entries

    key = runs["partial"].key()
    at = goto(app, "pages/7_Runs.py")
    at.selectbox(key="runs_resume").set_value(key)
    at.button(key="runs_resume_button").click().run()
    assert_clean(at)
    status = {m["key"]: m["status"] for m in entries.list_runs()}
    assert status[key] == "complete"
    at = goto(app, "pages/7_Runs.py")
    table = at.dataframe[0].value
    assert not table["status"].str.startswith("partial").any()


def test_a_precomputed_run_can_be_opened(app):
    gallery = load_gallery()
    assert gallery, "the shipped snapshot gallery is missing"
    from explorer import views

    at = goto(app, "pages/7_Runs.py")
    at.selectbox(key="runs_open").set_value(f"precomputed:{gallery[0].key}")
    at.button(key="runs_open_button").click().run()
    assert_clean(at)
    assert any("every page now shows it" in s.value for s in at.success)
    view = at.session_state[views.VIEW_KEY]
    assert view.source == "precomputed" and view.key == gallery[0].key
    at.session_state[views.VIEW_KEY] = None


# ---------------------------------------------------------------------------------------------
# Gap, Lag decay, Similarity, Baselines
# ---------------------------------------------------------------------------------------------


def test_gap_page_labels_are_unique_and_precomputed_runs_are_shown(app, runs):
    from explorer import views

    app.session_state[views.VIEW_KEY] = Run.from_measurement(runs["trained"])
    at = goto(app, "pages/3_Gap_to_F_L.py")
    assert_clean(at)
    fig = chart(at, "Gap to the orthogonal-update reference")
    labels = [y for t in fig["data"] for y in t["y"]]
    assert len(labels) == len(set(labels)), labels
    cached = next(t for t in fig["data"] if t["name"] == "cached")
    seeds = [y for y in cached["y"] if "random weights" in y]
    assert len(seeds) == 2 and seeds[0] != seeds[1]
    assert any("windows" in y for y in cached["y"])
    if load_gallery():
        pre = next(t for t in fig["data"] if t["name"] == "precomputed")
        assert all(y.endswith("(precomputed)") for y in pre["y"])
    # the paper's values come from the package's own copy (deffcore.views.paper)
    from deffcore.views.paper import paper_reference_path

    if paper_reference_path() is not None:
        assert any(t["name"] == "paper" for t in fig["data"])


def test_lag_decay_bias_floor_only_for_linear_cka_and_explained_above_the_data(app, runs):
    at = goto(app, "pages/2_Lag_decay.py")
    assert_clean(at)
    m = runs["trained"]
    rho = lag_profile(m.similarity("default", "cka"))
    floor = 64 / (m.n + 64)
    fig = chart(at, "Lag decay")
    line = next(t for t in fig["data"] if t["name"].startswith("iid-bias floor"))
    np.testing.assert_allclose(plotly_array(line["y"]), floor)
    above = bool(np.any(rho < floor))
    assert (line["line"]["dash"] == "longdash") == above
    notes = [a["text"] for a in fig["layout"].get("annotations", [])]
    assert any("isotropic" in n for n in notes) == above
    captions = " ".join(c.value for c in at.caption)
    assert ("rough upper bound" in captions) == above
    for metric in ("unbiased_cka", "cosine"):
        at.selectbox(key="metric").set_value(metric).run()
        assert_clean(at)
        names = [t["name"] for t in chart(at, "Lag decay")["data"]]
        assert not any(n.startswith("iid-bias floor") for n in names)
        assert "No bias floor is drawn" in " ".join(c.value for c in at.caption)
    at.selectbox(key="metric").set_value("cka").run()


def test_downloads_name_the_run_and_the_view(app, runs):
    at = goto(app, "pages/1_Similarity.py")
    assert_clean(at)
    stem = f"{run_slug(runs['trained'].spec.__dict__)}_default_cka_heatmap"
    ids = [b.proto.id for b in at.get("download_button")]
    assert any(i.endswith(f"{stem}_csv") for i in ids), ids
    for page in ("pages/2_Lag_decay.py", "pages/6_Baselines.py"):
        at = goto(app, page)
        assert_clean(at)
        ids = [b.proto.id for b in at.get("download_button")]
        assert ids and all(run_slug(runs["trained"].spec.__dict__) in i for i in ids), ids


# ---------------------------------------------------------------------------------------------
# the figures behind these pages
# ---------------------------------------------------------------------------------------------


def test_run_styles_never_repeat_within_28_runs():
    styles = [tuple(figures.run_style(i).values()) for i in range(28)]
    assert len(set(styles)) == 28
    assert figures.OKABE_ITO["yellow"] not in figures.RUN_COLORS  # too faint on white


def test_side_by_side_difference_and_different_depths():
    rng = np.random.default_rng(0)
    A, B = rng.random((5, 5)), rng.random((5, 5))
    fig = figures.side_by_side_heatmaps(A, B, label_a="a", label_b="b")
    assert [t.name for t in fig.data] == ["A: a", "B: b", "B − A"]
    np.testing.assert_array_equal(np.asarray(fig.data[2].z), B - A)
    span = np.abs(B - A).max()
    assert (fig.layout.coloraxis2.cmin, fig.layout.coloraxis2.cmax) == (-span, span)
    other = figures.side_by_side_heatmaps(A, rng.random((7, 7)), label_a="a", label_b="b")
    assert len(other.data) == 2 and "no difference map" in other.layout.title.text
    data = figures.figure_data(fig)
    assert len(data) == 3 * 25  # every cell of the three maps


def test_tagged_figure_csv_leads_with_the_run_identity():
    from deffcore.views.labels import run_identity

    spec = {**RUN, "revision": None, "dtype": "float32", "passages": "windows"}
    ident = run_identity(spec, pooling="default", metric="cka")
    fig = figures.tag_run(figures.lag_decay(np.array([0.9, 0.8, 0.7])), ident)
    table = pd.read_csv(io.StringIO(figures.figure_csv(fig)))
    assert list(table.columns[: len(ident)]) == list(ident)
    assert set(table["passages"]) == {"windows"} and set(table["model"]) == {"tiny-llama"}
    assert list(table.columns[len(ident) :]) == list(figures.figure_data(fig).columns)
    plain = pd.read_csv(io.StringIO(figures.figure_csv(figures.lag_decay(np.array([0.9, 0.8])))))
    assert "model" not in plain.columns  # untagged figures are unchanged


def test_lag_decay_floor_is_dashed_and_explained_only_when_above_the_data():
    low = figures.lag_decay(np.array([0.9, 0.8, 0.7]), n=100, d=25)  # floor 0.2 < rho
    assert low.data[2].line.dash == "dot" and not low.layout.annotations
    high = figures.lag_decay(np.array([0.9, 0.5, 0.1]), n=100, d=25)  # rho(3) < 0.2
    assert high.data[2].line.dash == "longdash"
    assert "isotropic" in high.layout.annotations[0].text
    assert high.data[2].name.startswith("iid-bias floor")


def test_first_screen_shows_linear_and_unbiased_cka_side_by_side(cache_dir):
    """The shipped default (N >= 4,096 windows): both metrics on the first screen, equal to the
    snapshot's own numbers, and the bias figure d/(N+d) about 0.12."""
    from deffcore.views.run import load_snapshot

    snap = load_snapshot()
    assert snap is not None and snap.n >= 4096
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300).run()
    assert not at.exception
    table = next(m.value for m in at.markdown if m.value.startswith("| similarity"))
    rows = _markdown_rows(table)
    assert [row["similarity"] for row in rows] == ["linear CKA", "unbiased CKA"]
    for row, metric in zip(rows, ("cka", "unbiased_cka"), strict=True):
        h = snap.headline("default", metric)
        assert float(row["D_eff"]) == round(h.deff, 3)
        assert float(row["gap to F_L (%)"]) == round(h.gap_pct, 1)
    assert round(snap.headline("default", "cka").cka_bias, 2) == 0.12


def _markdown_rows(table: str) -> list[dict[str, str]]:
    """The rows of a Markdown table `explorer.tables.markdown_table` drew, cells unescaped."""
    import re

    def cells(line: str) -> list[str]:
        inner = line.strip()[2:-2]  # "| a | b |" -> "a | b"
        return [re.sub(r"\\(.)", r"\1", c) for c in re.split(r"(?<!\\) \| ", inner)]

    header, _, *body = table.splitlines()
    return [dict(zip(cells(header), cells(line), strict=True)) for line in body]


def test_a_markdown_table_shows_every_cell_literally():
    """Cells are text, never Markdown: a pipe, a star or a link stays as typed; None reads —."""
    from explorer.tables import MISSING, markdown_table

    rows = [{"name": "a|b *c* [x](y)", "D_eff / L": 0.5, "gap": None}]
    table = markdown_table(rows)
    assert table.splitlines()[1] == "|---|---|---|"
    assert _markdown_rows(table) == [{"name": "a|b *c* [x](y)", "D_eff / L": "0.5", "gap": MISSING}]
    assert markdown_table([]) == ""
