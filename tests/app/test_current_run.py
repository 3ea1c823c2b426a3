"""AppTest of the current run that stays put (explorer.current_run): its key in the URL, a
reload (a new session with that URL) showing the same run with the sidebar set to its settings,
precomputed and shared runs by reference, a link to a run this machine lacks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from apptest_helpers import assert_clean, plain
from streamlit.testing.v1 import AppTest

from deffcore.views.run import load_gallery

REPO = Path(__file__).resolve().parents[2]
RUNS = "pages/7_Runs.py"  # the run panel's one page
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 24, "max_tokens": 16, "seed": 3}


def new_app(ref: str | None = None) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180)
    if ref is not None:
        at.query_params["run"] = ref
    return at.run()


def current(at: AppTest) -> str:
    return next(plain(c.value) for c in at.sidebar.caption if c.value.startswith("Current run"))


def test_the_implicit_default_puts_nothing_in_the_url():
    at = new_app()
    assert_clean(at)
    assert "run" not in at.query_params
    assert current(at).startswith("Current run (precomputed): smollm2-135m")


def test_a_landed_run_is_in_the_url_and_a_reload_restores_it_with_its_settings(measurement):
    at = new_app().switch_page(RUNS).run()  # the run panel's one page
    at.selectbox(key="model_packaged").set_value(RUN["model"])
    for key in ("n", "max_tokens", "seed"):
        at.number_input(key=key).set_value(RUN[key])
    at.selectbox(key="passages").set_value("documents")  # the panel starts at the shipped run's
    at.button(key="run").click().run()  # a cache hit: lands at once
    assert_clean(at)
    ref = f"cached:{measurement.spec.key()}"
    assert at.query_params["run"] == ref
    at.switch_page("pages/1_Similarity.py").run()  # navigation clears it; the page sets it
    assert at.query_params["run"] == ref

    reload = new_app(ref)  # a new session: what a reload, a bookmark or a colleague's link is
    assert_clean(reload)
    assert current(reload) == f"Current run (measured): {measurement_label(measurement)}"
    reload.switch_page(RUNS).run()  # the run panel shows the run's settings
    assert reload.selectbox(key="model_packaged").value == RUN["model"]
    assert [reload.number_input(key=k).value for k in ("n", "max_tokens", "seed")] == [
        RUN["n"], RUN["max_tokens"], RUN["seed"],
    ]  # fmt: skip
    assert reload.query_params["run"] == ref


def measurement_label(m) -> str:
    from deffcore.views.labels import run_label

    return run_label(m.spec.__dict__)


def test_opening_a_precomputed_run_puts_it_in_the_url_and_sets_the_sidebar():
    gemma = next(v for v in load_gallery() if v.spec["model"] == "gemma3-270m")
    at = new_app()
    at.switch_page(RUNS).run()
    at.selectbox(key="runs_open").set_value(f"precomputed:{gemma.key}")
    at.button(key="runs_open_button").click().run()
    assert_clean(at)
    assert at.query_params["run"] == f"precomputed:{gemma.key}"
    assert at.selectbox(key="model_packaged").value == "gemma3-270m"
    assert at.number_input(key="n").value == gemma.n
    assert at.selectbox(key="passages").value == "windows"
    reload = new_app(f"precomputed:{gemma.key}")
    assert current(reload).startswith("Current run (precomputed): gemma3-270m")


def test_a_shared_run_is_found_by_its_content_hash(measurement):
    from deffcore.views.run import Run
    from deffcore.views.sharing import save_shared

    view = save_shared(json.dumps(Run.from_measurement(measurement).to_snapshot()).encode())
    at = new_app(f"shared:{view.sha256[:16]}")
    assert_clean(at)
    assert current(at).startswith("Current run (shared): tiny-llama")
    assert at.query_params["run"] == f"shared:{view.sha256[:16]}"


@pytest.mark.parametrize(
    "ref", ["cached:0123456789abcdef0123", "precomputed:ffffffffffffffffffff", "nonsense"]
)
def test_a_link_to_a_run_this_machine_lacks_says_so_and_shows_the_default(ref):
    at = new_app(ref)
    assert not at.exception
    (warning,) = [plain(w.value) for w in at.warning if "Showing the shipped default" in w.value]
    assert "no run" in warning or "No precomputed run" in warning or "names no run" in warning
    assert "/" not in warning.split(" Showing")[0]  # no folder of the server is named
    assert current(at).startswith("Current run (precomputed): smollm2-135m")
    assert "run" not in at.query_params
