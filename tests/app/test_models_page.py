"""AppTest of the Models page: it renders on an empty cache with the packaged precomputed runs
and the paper's models, labels runs by what differs, carries N / trust / bias per row, warns
when rows differ, and lists cached runs, filters, export, charts, and a sweep from the form.

Expected numbers come from `measure` called directly (the same cache entry the page reads), the
shipped snapshots (`load_gallery`) and `deffcore.work.sweep.paper_models` (the packaged paper CSV).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from apptest_helpers import assert_clean, charts, plotly_array
from streamlit.testing.v1 import AppTest

from deffcore.runs.measure import measure
from deffcore.views.models_overview import paper_models
from deffcore.work.sweep import sweep_job

REPO = Path(__file__).resolve().parents[2]
PAGE = "pages/13_Models.py"
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 16, "max_tokens": 32, "seed": 0}


def test_renders_on_an_empty_cache_with_the_shipped_runs(tmp_path, monkeypatch):
    """A first-time visitor: no cached run at all. No error; the packaged precomputed runs and
    the paper's models are listed from the start, each with N, trust and bias."""
    from deffcore.views.run import load_gallery

    monkeypatch.setenv("DEFF_CACHE_DIR", str(tmp_path / "empty"))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    at.switch_page(PAGE).run()
    assert_clean(at)
    df = table(at)
    shipped = df[df["source"] == "precomputed"]
    assert len(shipped) == len(load_gallery()) >= 4
    assert {"smollm2-135m", "gemma3-270m", "random:gemma3-270m:1"} <= set(shipped["model"])
    assert set(shipped["trust"]) <= {"solid", "indicative", "noise"}
    assert shipped["n"].notna().all() and shipped["bias"].notna().all()
    paper = df[df["source"] == "paper"]
    assert (paper["trust"] == "published").all() and (paper["n"] == 10_000).all()
    assert len(set(df["label"])) == len(df)  # every row named apart
    assert [w.value for w in at.warning if "with care" in w.value]  # N and trust differ
    titles = " | ".join(c["layout"]["title"]["text"] for c in charts(at))
    assert "D_eff/L against depth" in titles and "Gap to F_L per pooling" in titles


def test_two_runs_differing_in_bos_get_different_labels():
    from deffcore.runs.tables import models_table

    base = {"model": "smollm2-135m", "dataset": "bbc-news", "n": 512, "max_tokens": 128, "seed": 0}
    rows = [
        {"source": "cached", "key": "a", "model": "smollm2-135m", "spec": {**base, "bos": "add"}},
        {"source": "cached", "key": "b", "model": "smollm2-135m", "spec": {**base}},
        {"source": "precomputed", "key": "a", "model": "smollm2-135m", "spec": {**base}},
    ]
    out = models_table(rows, [{"source": "paper", "model": "Pythia-70M"}])
    assert [r["label"] for r in out] == ["BOS add", "BOS default", "Pythia-70M (paper)"]


@pytest.fixture(scope="module")
def app(cache_dir, measurement):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    at.switch_page(PAGE)
    return at.run()


def table(at: AppTest):
    return at.dataframe[0].value


def test_table_has_the_paper_models_and_the_cached_run(app, measurement):
    assert_clean(app)
    df = table(app)
    paper = df[df["source"] == "paper"]
    assert sorted(paper["model"]) == sorted(m["model"] for m in paper_models())
    p70 = paper[paper["model"] == "Pythia-70M"].iloc[0]
    assert (p70["layers"], p70["deff_over_L"], p70["gap_default"]) == (6, 0.205, 28.3)  # 2, S4
    assert "gap_pct" not in df.columns  # one column per number: gap_default is it
    mine = df[(df["source"] == "cached") & (df["model"] == "tiny-llama")]
    assert len(mine) == 1
    row = mine.iloc[0]
    assert row["layers"] == 4 and row["n"] == 16 and row["max_tokens"] == 32
    assert row["trust"] == "noise"  # N = 16 < 32: the rule says noise
    assert row["bias"] == pytest.approx(64 / (16 + 64))
    assert row["deff_over_L"] == pytest.approx(
        measurement.summary("default").deff_over_L, abs=1e-12
    )
    assert row["gap_token_normed"] == pytest.approx(
        measurement.summary("token_normed").gap_pct, abs=1e-9
    )


def test_scatter_shows_the_cached_point_and_the_paper(app, measurement):
    specs = [json.loads(el.proto.spec) for el in app.get("plotly_chart")]
    scatter = next(s for s in specs if "against depth" in s["layout"]["title"]["text"])
    points = [
        (x, y)
        for trace in scatter["data"]
        if "cached" in trace.get("name", "")
        for x, y in zip(plotly_array(trace["x"]), plotly_array(trace["y"]), strict=True)
    ]
    assert (4, pytest.approx(measurement.summary().deff_over_L)) in points
    names = " ".join(t.get("name", "") for t in scatter["data"])
    assert "Pythia (paper, trained)" in names and "random null" in names


def test_filters_apply_to_the_table(app):
    app.multiselect(key="models_sources").set_value(["cached"])
    at = app.run()
    assert set(table(at)["source"]) == {"cached"}
    at.multiselect(key="models_sources").set_value(["paper", "precomputed", "shared", "cached"])
    at.text_input(key="models_text").set_value("pythia")
    at = at.run()
    models = set(table(at)["model"])
    assert len(models) == 5 and all("pythia" in m.lower() for m in models)
    at.text_input(key="models_text").set_value("")
    at.run()


def test_sweep_from_the_form_lands_in_the_table(app, measurement):
    at = app
    at.switch_page("pages/7_Runs.py").run()  # the run settings: on the Runs page
    at.number_input(key="n").set_value(RUN["n"])
    at.number_input(key="max_tokens").set_value(RUN["max_tokens"])
    at.selectbox(key="passages").set_value("documents")  # the panel starts at the shipped run's
    at.run()
    at.switch_page(PAGE).run()
    at.multiselect(key="sweep_models").set_value(["tiny-gpt2", "tiny-llama"])
    at.text_input(key="sweep_seeds").set_value("1")
    at.radio(key="sweep_engine").set_value("serial")
    form_button = next(b for b in at.button if b.label == "Run the sweep")
    form_button.click()
    at.run()
    assert_clean(at)
    job_id = at.session_state["_models_sweep_job"]
    deadline = time.monotonic() + 300
    while sweep_job(job_id)["state"] in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.5)
    snap = sweep_job(job_id)
    assert snap["state"] == "done" and snap["landed"] == snap["total"] == 4
    statuses = {r["label"]: r["status"] for r in snap["rows"]}
    assert statuses["tiny-llama"] == "cached"  # measured above: read, not recomputed
    assert statuses["tiny-gpt2"] == statuses["random:tiny-gpt2:1"] == "done"
    at.run()
    assert_clean(at)
    df = table(at)
    cached = set(df[df["source"] == "cached"]["model"])
    assert {"tiny-gpt2", "random:tiny-gpt2:1", "random:tiny-llama:1"} <= cached
    gpt2 = measure(**{**RUN, "model": "random:tiny-gpt2:1"})
    assert gpt2.cached
    row = df[df["model"] == "random:tiny-gpt2:1"].iloc[0]
    assert row["weights"] == "random"
    assert row["deff_over_L"] == pytest.approx(gpt2.summary().deff_over_L, abs=1e-12)
