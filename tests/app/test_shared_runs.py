"""AppTest of shared runs: a snapshot file someone sent round-trips through the Runs page.

Upload -> it is kept and becomes the current run with the same headline as the run it was made
from -> it is listed beside the cached runs ("shared"), opens, compares with a cached run (the
numbers of each, side by side) and is deleted; a corrupt or foreign upload is one sentence and
changes nothing. `deffcore app --run FILE` hands a kept run's content id to new sessions
(`DEFF_APP_RUN`): a new session opens it first.

The module's cache holds a tiny-llama run (`RUN`); the shared run is a tiny-gpt2 run whose
cache entry is deleted after its snapshot is made, so the app knows it only from the file.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import assert_clean, chart, plotly_array
from streamlit.testing.v1 import AppTest

from deffcore.views.run import Run, load_gallery
from deffcore.views.sharing import APP_RUN_ENV, list_shared, read_snapshot, save_shared

REPO = Path(__file__).resolve().parents[2]
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 16, "max_tokens": 32, "seed": 0}
RUNS = "pages/7_Runs.py"


@pytest.fixture(scope="module")
def shared(measurement):
    """(the bytes of a tiny-gpt2 run's snapshot, the Measurement it was made from)."""
    from deffcore.extraction import cache as entries
    from deffcore.runs.measure import measure

    m = measure(model="tiny-gpt2", dataset="bbc-news", n=16, max_tokens=32)
    body = json.dumps(
        Run.from_measurement(m).to_snapshot(command="deffcore measure --model tiny-gpt2 --n 16")
    ).encode()
    entries.delete(m.spec.key())  # the app knows this run only from the file
    return body, m


@pytest.fixture(scope="module")
def app(shared):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    assert_clean(at)
    at.switch_page(RUNS)
    return at.run()


def upload(at: AppTest, name: str, body: bytes) -> AppTest:
    at.switch_page(RUNS).run()
    at.file_uploader(key="runs_share_upload").set_value((name, body, "application/json"))
    return at.run()


def plain(text: str) -> str:
    """What a visitor reads of a Markdown body that `md_escape` escaped."""
    return re.sub(r"\\(.)", r"\1", text)


def current(at: AppTest):
    from explorer.views import VIEW_KEY

    return at.session_state[VIEW_KEY] if VIEW_KEY in at.session_state else None  # noqa: SIM401


def table(at: AppTest):
    return at.dataframe[0].value


def test_an_upload_becomes_the_current_run_with_the_same_headline(app, shared):
    body, m = shared
    at = upload(app, "their run.json", body)
    assert_clean(at)
    view = current(at)
    assert view.source == "shared" and view.sha256 == hashlib.sha256(body).hexdigest()
    assert any("every page now shows it" in s.value for s in at.success)
    live = Run.from_measurement(m).headline()
    h = view.headline()
    for field in ("deff", "deff_over_L", "gap_pct", "rho1", "layers", "n", "d_model"):
        assert getattr(h, field) == pytest.approx(getattr(live, field), rel=1e-5, abs=1e-6)
    # kept with the runs, listed as "shared" and marked current
    assert [v.sha256 for v in list_shared()] == [view.sha256]
    rows = table(at)
    mine = rows[rows["status"] == "shared"]
    assert len(mine) == 1 and bool(mine["current"].iloc[0]) and mine["model"].iloc[0] == "tiny-gpt2"
    assert int(rows["current"].sum()) == 1  # not the cached run of the same page
    assert any("Current run (shared)" in c.value for c in at.sidebar.caption)
    # the Overview shows its numbers, says where they come from, shows its command as code
    at.switch_page("pages/0_Overview.py").run()
    assert_clean(at)
    assert next(x.value for x in at.metric if x.label == "D_eff") == f"{h.deff:.3f}"
    assert any("A shared run" in i.value for i in at.info)
    assert [c.value for c in at.code] == ["deffcore measure --model tiny-gpt2 --n 16"]


def test_a_shared_run_compares_with_a_cached_run(app, shared, measurement):
    body, m = shared
    at = upload(app, "their run.json", body)
    sid = f"shared:{hashlib.sha256(body).hexdigest()[:16]}"
    cached = measurement.spec.key()
    at.multiselect(key="runs_compare").set_value([sid, cached]).run()
    at.selectbox(key="runs_side_a").set_value(sid)
    at.selectbox(key="runs_side_b").set_value(cached).run()
    assert_clean(at)
    numbers = next(d.value for d in at.dataframe if "D_eff / L" in d.value.columns)
    assert list(numbers["D_eff"]) == pytest.approx(
        [read_snapshot(body).headline().deff, measurement.summary().deff], rel=1e-6
    )
    assert numbers["run"].iloc[0].endswith("· shared")
    gaps = chart(at, "Gap to the orthogonal-update reference")
    bars = {t["name"]: list(t["x"]) for t in gaps["data"] if t["type"] == "bar"}
    assert set(bars) == {"shared", "cached"}  # each run is a bar, named by where it comes from
    heat = [t for t in chart(at, "side by side")["data"] if t["type"] == "heatmap"]
    S_shared, S_cached = (plotly_array(t["z"]) for t in heat[:2])
    np.testing.assert_allclose(S_shared, m.similarity("default", "cka"), atol=1e-6)  # 6 decimals
    np.testing.assert_allclose(S_cached, measurement.similarity("default", "cka"))


def test_a_cached_run_opened_after_it_is_current_and_the_shared_one_opens_again(
    app, shared, measurement
):
    body, _ = shared
    at = upload(app, "their run.json", body)
    sid = f"shared:{hashlib.sha256(body).hexdigest()[:16]}"
    at.selectbox(key="runs_open").set_value(measurement.spec.key())
    at.button(key="runs_open_button").click().run()
    assert current(at).source == "measured"
    at.selectbox(key="runs_open").set_value(sid)
    at.button(key="runs_open_button").click().run()
    assert_clean(at)
    assert current(at).source == "shared" and current(at).sha256 == hashlib.sha256(body).hexdigest()


@pytest.mark.parametrize(
    "name, body, said",
    [
        ("broken.json", b'{"format": 1, "spec": ', "broken.json is not valid JSON"),
        ("other.json", b'{"name": "a notebook", "cells": []}', "other.json"),
        ("![x](http:evil).json", b"[1, 2]", "not a run snapshot"),
    ],
)
def test_a_corrupt_upload_is_one_sentence_and_changes_nothing(app, shared, name, body, said):
    before = current(app).sha256 if current(app) is not None else None
    kept = [v.sha256 for v in list_shared()]
    at = upload(app, name, body)
    assert not at.exception
    (error,) = at.error
    shown = plain(error.value)  # md_escape: the file name is text, not Markdown
    assert said in shown and shown.count(". ") == 0 and shown.endswith(".")
    if "![" in name:
        assert "\\!\\[x\\]" in error.value  # escaped: no image is fetched
    assert getattr(current(at), "sha256", None) == before
    assert [v.sha256 for v in list_shared()] == kept
    at.run()  # the widget still holds the file: the same sentence, nothing kept
    assert len(at.error) == 1 and [v.sha256 for v in list_shared()] == kept


def test_a_shared_copy_of_a_cached_run_is_the_current_one_not_the_cache_entry(app, measurement):
    """The same run twice (cached here, and a file someone sent): the one opened is current."""
    from deffcore.views.sharing import delete_shared

    body = json.dumps(Run.from_measurement(measurement).to_snapshot()).encode()
    try:
        at = upload(app, "mine again.json", body)
        assert_clean(at)
        rows = table(at)
        (row,) = rows[rows["current"]].to_dict("records")
        assert row["status"] == "shared" and row["key"] == measurement.spec.key()[:10]
        at.selectbox(key="runs_open").set_value(measurement.spec.key())
        at.button(key="runs_open_button").click().run()
        rows = table(at)
        assert list(rows[rows["current"]]["status"]) == ["complete"]
    finally:
        delete_shared(hashlib.sha256(body).hexdigest())


def test_a_shared_run_is_deleted_and_leaves_the_session(app, shared):
    body, _ = shared
    at = upload(app, "their run.json", body)
    sha = hashlib.sha256(body).hexdigest()
    at.selectbox(key="runs_shared_delete").set_value(f"shared:{sha[:16]}")
    at.button(key="runs_shared_delete_button").click().run()
    assert_clean(at)
    assert not list_shared() and current(at) is None
    assert "shared" not in set(table(at)["status"])
    assert any("Deleted the shared run" in s.value for s in at.success)


def test_run_file_opens_first_in_a_new_session(shared, monkeypatch):
    """`deffcore app --run FILE` keeps the file and names it in DEFF_APP_RUN."""
    body, _ = shared
    view = save_shared(body, name="run.json")
    monkeypatch.setenv(APP_RUN_ENV, view.sha256[:16])
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    assert_clean(at)
    assert current(at).sha256 == view.sha256
    assert any("Current run (shared)" in c.value for c in at.sidebar.caption)
    at.switch_page("pages/1_Similarity.py").run()
    assert_clean(at)
    assert any("Showing a shared run" in c.value for c in at.caption)
    # opened once: a run the visitor opens afterwards stays theirs
    at.session_state["deff_view"] = None
    at.run()
    assert current(at) is None
    # a link (or a reload) that names another run keeps it: the shared run does not replace it
    shipped = load_gallery()[0]
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180)
    at.query_params["run"] = f"precomputed:{shipped.key}"
    at.run()
    assert_clean(at)
    assert current(at).key == shipped.key and current(at).source == "precomputed"
    # a kept file that changed, or an unknown id: one sentence, the default run is shown
    monkeypatch.setenv(APP_RUN_ENV, "0" * 16)
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    assert [plain(e.value) for e in at.error] == [f"No shared run {'0' * 16!r} is kept here."]
    assert current(at) is None
