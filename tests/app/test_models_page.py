"""AppTest of the Models page: cached runs beside the paper's models, filters, export, charts,
and a sweep launched from the form whose cells land in the table.

Expected numbers come from `measure` called directly (the same cache entry the page reads) and
from `deffcore.sweep.paper_models` (the packaged paper CSV).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from apptest_helpers import assert_clean, plotly_array
from streamlit.testing.v1 import AppTest

from deffcore.measurement import measure
from deffcore.sweep import paper_models, sweep_job

REPO = Path(__file__).resolve().parents[2]
PAGE = "pages/13_Models.py"
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 16, "max_tokens": 32, "seed": 0}


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
    at.multiselect(key="models_sources").set_value(["paper", "cached"])
    at.text_input(key="models_text").set_value("pythia")
    at = at.run()
    models = set(table(at)["model"])
    assert len(models) == 5 and all("pythia" in m.lower() for m in models)
    at.text_input(key="models_text").set_value("")
    at.run()


def test_sweep_from_the_form_lands_in_the_table(app, measurement):
    at = app
    at.number_input(key="n").set_value(RUN["n"])
    at.number_input(key="max_tokens").set_value(RUN["max_tokens"])
    at.run()
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
