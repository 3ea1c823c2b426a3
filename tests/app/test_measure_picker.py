"""AppTest of the sidebar's metric picker beyond the CKA family (SPEC 17.5): it lists every
measure; a measure the run holds renders on the Overview, Similarity, Lag decay and Gap pages
with the table's point estimate; one it does not hold is offered, computed only when asked, in
the background; the pages defined for the CKA family say so."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import assert_clean, charts, plotly_array
from streamlit.testing.v1 import AppTest

import deffcore as dc
import deffcore.statistics.measure_table as mt
from deffcore.work import jobs

REPO = Path(__file__).resolve().parents[2]
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 16, "max_tokens": 32, "seed": 0}
OVERVIEW, SIMILARITY = "pages/0_Overview.py", "pages/1_Similarity.py"
LAG, GAP, BASELINES = "pages/2_Lag_decay.py", "pages/3_Gap_to_F_L.py", "pages/6_Baselines.py"


@pytest.fixture(scope="module")
def app(cache_dir, measurement):
    from tests.app.test_app_pages import press_run  # the run panel, as the other pages

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    press_run(at)
    assert_clean(at)
    return at


def show(at: AppTest, page: str, metric: str) -> AppTest:
    at.switch_page(page).run()
    at.selectbox(key="metric").set_value(metric).run()
    assert_clean(at)
    return at


def card(at: AppTest, name: str) -> str:
    return next(m.value for m in at.metric if m.label == name)


def point(measurement, measure: str) -> float:
    """The table's point estimate of D_eff/L (`dc.measure_table`, the run's default pooling)."""
    table = dc.measure_table(measurement.states("default"), (measure,), B=2, permutations=1)
    return table.row(measure).deff_over_L


#: The SPEC 17 measures the picker offers beyond the CKA family.
SIX = ("procrustes", "mutual_knn", "cknna", "rsa", "svcca", "pwcca")


@pytest.fixture
def stripped(cache_dir):
    """The shipped run opened first as a shared run, stripped of its SPEC 17 matrices (a
    snapshot made before it held them, or by `--measures none`)."""
    from deffcore.views.run import DEFAULT_RUN_PATH
    from deffcore.views.sharing import APP_RUN_ENV, save_shared

    data = json.loads(DEFAULT_RUN_PATH.read_text())
    for pooling, by in data["similarity"].items():
        data["similarity"][pooling] = {k: v for k, v in by.items() if k in dc.METRICS}
    view = save_shared(json.dumps(data).encode(), name="stripped.json")
    os.environ[APP_RUN_ENV] = view.sha256[:16]
    yield view
    os.environ.pop(APP_RUN_ENV, None)


def test_the_shipped_run_draws_a_measure_on_the_first_screen(cache_dir):
    from deffcore.measures.depth import effective_depth
    from deffcore.views.run import DEFAULT_RUN_PATH

    S = json.loads(DEFAULT_RUN_PATH.read_text())["similarity"]["default"]["procrustes"]
    deff = effective_depth(np.asarray(S, dtype=float))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()  # shipped run
    for page in (OVERVIEW, SIMILARITY):
        show(at, page, "procrustes")
        notes = [i.value for i in at.info]  # (the Similarity page's table across measures
        assert not any("matrix for pooling" in n for n in notes), notes  # is another note)
        assert not [b for b in at.button if str(b.key).startswith("measure_go")]
    heat = next(c for c in charts(at) if c["data"][0]["type"] == "heatmap")
    assert abs(plotly_array(heat["data"][0]["z"]) - np.asarray(S)).max() < 1e-12
    show(at, OVERVIEW, "procrustes")
    assert card(at, "D_eff") == f"{deff:.3f}"


def test_a_snapshot_without_the_matrix_says_so_and_computes_nothing(stripped):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    for page in (OVERVIEW, LAG):
        show(at, page, "pwcca")
        assert any("snapshot carries no PWCCA matrix" in i.value for i in at.info), page
        assert not at.metric and not charts(at)
        assert not [b for b in at.button if str(b.key).startswith("measure_go")]


def test_the_picker_lists_every_measure_cka_first(app):
    app.switch_page(OVERVIEW).run()
    picker = app.selectbox(key="metric")
    assert picker.value == "cka"
    assert len(picker.options) == len(mt.TABLE_MEASURES) == 9
    assert picker.options[0] == "linear CKA (CKA family)"
    assert picker.options == [
        f"{mt.MEASURE_LABELS[m]} ({'CKA family' if i < 3 else 'SPEC 17, computed on request'})"
        for i, m in enumerate(mt.TABLE_MEASURES)
    ]


def test_a_measure_without_its_matrix_is_offered_not_computed(app, measurement, monkeypatch):
    calls = []
    real = mt._matrix
    monkeypatch.setattr(mt, "_matrix", lambda x, m, *a, **k: calls.append(m) or real(x, m, *a, **k))
    for page in (OVERVIEW, SIMILARITY, LAG, GAP):
        show(app, page, "procrustes")
        assert any("holds no orthogonal Procrustes matrix" in i.value for i in app.info), page
        assert any("takes about" in i.value for i in app.info)
        assert app.button(key="measure_go_default_procrustes") is not None
        assert not app.metric and not charts(app), page  # nothing of the run drawn meanwhile
        assert any("Glossary" in e.proto.label for e in app.sidebar.expander), page
    assert calls == []  # choosing it computed nothing
    app.button(key="measure_go_default_procrustes").click().run()
    status = jobs.task_job(f"measure-matrix:{measurement.spec.key()}:default:procrustes")
    assert status is not None
    assert jobs.wait(status.job_id, timeout=300).state == "done"
    assert calls == ["procrustes"]  # one all-pairs pass, in the background
    show(app, OVERVIEW, "procrustes")
    assert card(app, "D_eff / L") == f"{point(measurement, 'procrustes'):.4f}"


def test_a_held_measure_renders_the_tables_point_estimate(app, measurement):
    table = measurement.measure_table("default", ("rsa",), B=3, permutations=1)
    want = table.row("rsa")
    S = measurement.similarity("default", "rsa")
    assert want.deff_over_L == point(measurement, "rsa")
    show(app, OVERVIEW, "rsa")
    assert card(app, "D_eff / L") == f"{want.deff_over_L:.4f}"
    assert card(app, "D_eff") == f"{want.deff:.3f}"
    assert card(app, "Gap to F_L") == f"{want.gap_pct:+.1f}%"
    said = " ".join(c.value for c in app.caption)
    assert "No trust level" in said and f"[{want.low:.4f}, {want.high:.4f}]" in said
    assert any("decided under the CKA family only" in i.value for i in app.info)  # no answer
    show(app, SIMILARITY, "rsa")
    heat = next(c for c in charts(app) if c["data"][0]["type"] == "heatmap")
    z = plotly_array(heat["data"][0]["z"])
    assert z.shape == S.shape and abs(z - S).max() < 1e-12
    show(app, LAG, "rsa")
    by_k = app.dataframe[0].value
    last = by_k[by_k["maximum lag K"] == measurement.layers - 1]
    assert float(last["D_eff / L"].iloc[0]) == pytest.approx(want.deff_over_L, abs=1e-12)
    show(app, GAP, "rsa")
    rows = app.dataframe[0].value
    mine = rows[rows["label"].str.startswith("this run")]
    assert mine["deff_over_L"].iloc[0] == f"{want.deff_over_L:.4f}"
    assert float(mine["gap_pct"].iloc[0]) == pytest.approx(want.gap_pct, abs=1e-9)
    said = " ".join(c.value for c in app.caption)  # the shipped runs hold no RSA matrix
    assert "hold no RSA (Spearman) (SPEC 17, computed on request) matrix" in said
    from deffcore.extraction import cache
    from explorer.measure_pick import cached_summary

    meta = cache.load_meta(measurement.spec.key())  # another cached run reads it the same way
    assert cached_summary(meta, "default", "rsa").deff == want.deff
    assert cached_summary(meta, "default", "svcca") is None


def test_a_cka_only_page_says_so_and_shows_linear_cka(app):
    show(app, BASELINES, "rsa")
    assert any("defined for the CKA family only" in i.value for i in app.info)
    assert any(" · cka · " in c.value for c in app.caption)  # the numbers: linear CKA
