"""AppTest of background runs, the trust badge on the first page, the
navigation and words, and the local-path setting in the app.

A run started from the sidebar goes to `deffcore.work.jobs` (a worker thread of this process), so
these tests drive the app like a browser would: `_deff_run_wait_s = 0` makes the Run click
return at once (a browser then polls with a fragment; AppTest reruns by hand), and a gate on
the model loader holds a run in "loading model" while the test switches pages or cancels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import plain
from streamlit.testing.v1 import AppTest

import deffcore.extraction.forward
import deffcore.runs.measure
from deffcore.core.constants import METRICS, POOLINGS
from deffcore.extraction import cache
from deffcore.extraction import cache as entries
from deffcore.inputs.run_spec import RunSpec
from deffcore.views.run import Run
from deffcore.work import jobs

REPO = Path(__file__).resolve().parents[2]
OVERVIEW = "pages/0_Overview.py"
RUNS = "pages/7_Runs.py"  # the run panel's one page
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 16, "max_tokens": 32, "seed": 0}


@pytest.fixture(autouse=True)
def deff_cache_dir(cache_dir, monkeypatch):
    """One cache for the module (the worker thread reads DEFF_CACHE_DIR as it runs)."""
    monkeypatch.setenv("DEFF_CACHE_DIR", str(cache_dir))
    yield cache_dir
    for job in jobs.active_jobs():  # never leave a job running into the next test
        jobs.cancel(job.job_id)
        jobs.wait(job.job_id, timeout=600)


def new_app(wait_s: float | None = 0) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=600)
    if wait_s is not None:
        at.session_state["_deff_run_wait_s"] = wait_s
    return at.run()


def choose(at: AppTest, **overrides) -> AppTest:
    """The run panel (on the Runs page, its one place) set to RUN with `overrides`."""
    run = {**RUN, **overrides}
    at.switch_page(RUNS).run()
    at.radio(key="model_source").set_value("Packaged (offline)").run()
    at.selectbox(key="model_packaged").set_value(run["model"])
    at.number_input(key="n").set_value(run["n"])
    at.number_input(key="max_tokens").set_value(run["max_tokens"])
    at.number_input(key="seed").set_value(run["seed"])
    at.selectbox(key="passages").set_value("documents")  # the panel starts at the shipped run's
    return at.run()


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def texts(at: AppTest, kind: str) -> list[str]:
    return [plain(e.value) for e in getattr(at, kind)]


def progress_texts(at: AppTest) -> list[str]:
    return [p.proto.text for p in at.get("progress")]


def session_job(at: AppTest) -> str:
    return at.session_state["_deff_job"]


def browser_switch(at: AppTest, page: str) -> AppTest:
    """A page switch as the browser makes it: `st.navigation` drops the URL's query parameters
    (AppTest keeps them), the new page's script run puts back what it keeps."""
    at.switch_page(page)
    at.query_params.clear()
    return at.run()


# ---------------------------------------------------------------------------------------------
# a run survives a page switch, lands, and says so
# ---------------------------------------------------------------------------------------------


def test_run_survives_a_page_switch_and_lands(gate):
    at = choose(new_app())
    at.button(key="run").click().run()
    assert not at.exception and not at.error
    job_id = session_job(at)
    # the main area shows the run from the first second: model load included, with Cancel
    assert any(t.startswith("Running:") or "Running:" in t for t in texts(at, "markdown"))
    assert any("loading model" in t or "reading the dataset" in t or "queued" in t
               for t in progress_texts(at)), progress_texts(at)  # fmt: skip
    assert at.button(key="job_cancel").label == "Cancel run"
    assert at.query_params.get("job") in (job_id, [job_id])  # a reload finds it again

    browser_switch(at, "pages/2_Lag_decay.py")  # the user goes elsewhere while it runs
    assert not at.exception
    assert jobs.status(job_id).state == "running"
    assert at.query_params.get("job") in (job_id, [job_id])  # this page's URL carries it too
    assert at.button(key="job_cancel")  # the run box follows the user to every page
    gate.set()
    assert jobs.wait(job_id, timeout=600).state == "done"

    at.switch_page(OVERVIEW).run()  # back on the first page: it has landed
    assert not at.exception and not at.error
    notices = texts(at, "success")
    assert any(n.startswith("Run finished: tiny-llama") for n in notices), notices
    assert not any("served from the cache" in n for n in notices)
    assert not at.toast  # one notice: a toast beside it covered half of it
    m = deffcore.runs.measure.measure(**RUN)
    assert m.cached  # the job's entry: the cache is the state of record
    assert metric(at, "D_eff") == f"{m.summary().deff:.3f}"
    assert "_deff_job" not in at.session_state
    with pytest.raises(KeyError):  # progress box gone
        at.button(key="job_cancel")

    # the same settings again: served from the cache
    at.switch_page(RUNS).run()
    at.button(key="run").click().run()
    if "_deff_job" in at.session_state:  # not landed within this run: let it finish
        jobs.wait(session_job(at), timeout=600)
    at.run()
    assert any("served from the cache" in n for n in texts(at, "success")), texts(at, "success")


def test_a_reload_finds_the_running_job(gate):
    at = choose(new_app(), n=20)
    at.button(key="run").click().run()
    job_id = session_job(at)
    fresh = AppTest.from_file(str(REPO / "app.py"), default_timeout=600)  # a new session
    fresh.query_params["job"] = job_id
    fresh.session_state["_deff_run_wait_s"] = 0
    fresh.run()
    assert not fresh.exception
    assert fresh.session_state["_deff_job"] == job_id
    assert fresh.button(key="job_cancel")
    gate.set()
    jobs.wait(job_id, timeout=600)
    fresh.run()
    assert any("Run finished" in n for n in texts(fresh, "success"))


def test_a_reload_of_another_page_finds_the_job_and_lands_it(gate):
    """Run pressed, a switch to another page, a reload there (a new session with that page's
    URL): the job, its settings in the run panel and its progress come back, and it lands."""
    at = choose(new_app(), n=24)
    at.button(key="run").click().run()
    job_id = session_job(at)
    browser_switch(at, "pages/2_Lag_decay.py")
    url = dict(at.query_params)  # what the browser's address bar shows on that page
    assert url.get("job") in (job_id, [job_id]), url

    fresh = AppTest.from_file(str(REPO / "app.py"), default_timeout=600)  # the reload
    for key, value in url.items():
        fresh.query_params[key] = value
    fresh.session_state["_deff_run_wait_s"] = 0
    fresh.switch_page("pages/2_Lag_decay.py").run()
    assert not fresh.exception
    assert fresh.session_state["_deff_job"] == job_id
    assert progress_texts(fresh)  # the progress box is back
    assert fresh.query_params.get("job") in (job_id, [job_id])
    fresh.switch_page(RUNS).run()
    assert fresh.number_input(key="n").value == 24  # the run panel shows the run's settings

    gate.set()
    assert jobs.wait(job_id, timeout=600).state == "done"
    fresh.run()
    assert any("Run finished" in n for n in texts(fresh, "success")), texts(fresh, "success")
    assert "job" not in fresh.query_params  # landed: the URL names the run instead
    assert fresh.query_params["run"] == f"cached:{jobs.status(job_id).result_key}"


def test_a_stale_job_link_is_dropped():
    fresh = AppTest.from_file(str(REPO / "app.py"), default_timeout=600)
    fresh.query_params["job"] = "0" * 32  # a job of a server that restarted
    fresh.run()
    assert not fresh.exception
    assert "job" not in fresh.query_params and "_deff_job" not in fresh.session_state


# ---------------------------------------------------------------------------------------------
# Cancel
# ---------------------------------------------------------------------------------------------


def test_cancel_stops_the_run_and_leaves_no_complete_entry(gate):
    at = choose(new_app(), n=64, max_tokens=64)
    before = metric(at.switch_page(OVERVIEW).run(), "D_eff")
    at.switch_page(RUNS).run()
    at.button(key="run").click().run()
    job_id = session_job(at)
    spec = jobs.status(job_id).spec
    at.button(key="job_cancel").click().run()
    # the worker may stop (before its model load) while that very rerun is still drawing the
    # page, which then already shows the notice, once: look for it in both reruns
    shown = texts(at, "info")
    assert jobs.status(job_id).cancel_requested
    gate.set()
    assert jobs.wait(job_id, timeout=600).state == "cancelled"
    at.run()
    assert not at.exception and not at.error
    shown += texts(at, "info")
    assert sum(i.startswith("Run cancelled") for i in shown) == 1, shown
    assert metric(at.switch_page(OVERVIEW).run(), "D_eff") == before  # current run unchanged
    assert cache.load(spec) is None  # nothing loads as a complete run
    runs = [r for r in entries.list_runs() if r["key"] == spec.key()]
    assert all(r["status"] != "complete" for r in runs)
    from explorer import views

    assert spec.key() not in [m["key"] for m in views.cached_runs()]


def test_cancel_notice_shows_once_when_the_worker_stops_during_the_cancel_rerun(gate, monkeypatch):
    # the race of the test above, forced: the job is over before the Cancel rerun draws
    real_cancel = jobs.cancel

    def cancel_and_finish(jid: str) -> None:
        real_cancel(jid)
        gate.set()
        jobs.wait(jid, timeout=600)

    # patched before the page draws its Cancel button, which binds jobs.cancel as it draws
    monkeypatch.setattr(jobs, "cancel", cancel_and_finish)
    at = choose(new_app(), n=64, max_tokens=64)
    at.button(key="run").click().run()
    job_id = session_job(at)
    at.button(key="job_cancel").click().run()
    assert jobs.status(job_id).state == "cancelled"
    shown = texts(at, "info")
    at.run()
    shown += texts(at, "info")
    assert not at.exception and not at.error
    assert sum(i.startswith("Run cancelled") for i in shown) == 1, shown


def test_an_interrupted_run_resumes_from_the_runs_page(cancel_after_first_batch):
    at = choose(new_app(wait_s=None), n=96, max_tokens=128)  # AppTest waits for the job
    at.button(key="run").click().run()
    shown = (texts(at, "info"), texts(at, "success"), texts(at, "error"))
    assert any(i.startswith("Run cancelled") for i in texts(at, "info")), shown
    assert any("passages are kept" in i for i in texts(at, "info")), shown
    partial = [r for r in entries.list_runs() if r["status"] == "partial" and r["spec"]["n"] == 96]
    assert len(partial) == 1 and partial[0]["done_passages"] > 0
    cancel_after_first_batch()  # stop cancelling: the resumed job runs to the end

    at.switch_page("pages/7_Runs.py").run()
    at.selectbox(key="runs_resume").set_value(partial[0]["key"])
    at.button(key="runs_resume_button").click().run()  # calls explorer.run_panel.resume_run(key)
    assert not at.exception
    success = " ".join(texts(at, "success"))
    assert "Run finished" in success and "passages resumed" in success, success
    assert cache.load(RunSpec(**partial[0]["spec"])) is not None


# ---------------------------------------------------------------------------------------------
# bad input is refused before any model loads, naming the user's own file
# ---------------------------------------------------------------------------------------------


def test_bad_uploads_are_refused_before_any_model_loads(no_model, cache_dir):
    at = choose(new_app())
    at.radio(key="data_source").set_value("Upload a file").run()
    for content in (b"", b"\x00\x01binary\xff\xfe"):
        at.file_uploader(key="data_upload").set_value(("my notes.txt", content, "text/plain"))
        at.run()
        errors = texts(at, "error")
        assert len(errors) == 1 and "my notes.txt" in errors[0], errors
        at.button(key="run").click().run()
        errors = texts(at, "error")
        assert errors and all("my notes.txt" in e for e in errors), errors
        assert not any(".uploads" in e or "_my notes" in e for e in errors)
    # a readable upload with fewer passages than N: refused, by its name, before the model
    five = "\n\n".join(f"Passage number {i} of a small file." for i in range(5)).encode()
    at.file_uploader(key="data_upload").set_value(("five.txt", five, "text/plain")).run()
    assert not at.error
    at.button(key="run").click().run()
    errors = texts(at, "error")
    assert len(errors) == 1 and "five.txt" in errors[0] and "fewer than" in errors[0], errors
    assert ".uploads" not in errors[0]
    # a missing path, and N beyond BBC's 2,225 articles
    at.radio(key="data_source").set_value("Local file").run()
    at.text_input(key="data_path").set_value(str(cache_dir / "nowhere.jsonl")).run()
    at.button(key="run").click().run()
    assert any("nowhere.jsonl" in e for e in texts(at, "error"))
    at.radio(key="data_source").set_value("BBC news (offline)").run()
    at.number_input(key="n").set_value(5000).run()
    at.button(key="run").click().run()
    assert any("5000" in e or "5,000" in e for e in texts(at, "error")), texts(at, "error")
    assert no_model == []  # no model was ever loaded
    assert "_deff_job" not in at.session_state


def test_uploads_do_not_pile_up_and_foreign_files_stay(cache_dir):
    from explorer import uploads

    folder = cache_dir / ".uploads"
    folder.mkdir(exist_ok=True)
    foreign = folder / "0123456789abcdef_not-ours.txt"  # right shape, wrong hash: not provably ours
    foreign.write_text("a user's file")
    paths = [uploads.save_upload(f"f{i}.txt", f"text number {i}".encode()) for i in range(12)]
    ours = [p for p in folder.iterdir() if p.name != foreign.name]
    assert len(ours) <= uploads.MAX_UPLOADS
    assert Path(paths[-1]).exists() and not Path(paths[0]).exists()
    assert foreign.exists()


# ---------------------------------------------------------------------------------------------
# the trust badge on the first page
# ---------------------------------------------------------------------------------------------


def fake_run(n: int) -> Run:
    """A run of N passages at d = 576 whose S is the same under every metric (no bias)."""
    L = 30
    i = np.arange(L)
    S = 0.9 ** np.abs(i[:, None] - i[None, :])
    data = {
        "similarity": {p: dict.fromkeys(METRICS, S) for p in POOLINGS},
        "pos0_norm_ratio": np.ones(L + 1),
    }
    spec = {**RUN, "model": "smollm2-135m", "n": n}
    label, key = f"smollm2-135m · N={n}", f"fake{n}"
    return Run(spec, layers=L, d_model=576, n=n, source="measured", label=label, key=key, data=data)


@pytest.mark.parametrize(("n", "level"), [(8, "noise"), (512, "indicative"), (10_000, "solid")])
def test_first_page_trust_badge(n, level):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=600)
    at.session_state["deff_view"] = fake_run(n)
    at.run()
    assert not at.exception
    badges = [m.value for m in at.markdown if "Trust:" in m.value]
    assert len(badges) == 1 and f"Trust: {level}" in badges[0], badges
    assert not any("bias matters here" in w for w in texts(at, "warning"))  # bias not material


# ---------------------------------------------------------------------------------------------
# navigation, words, local paths
# ---------------------------------------------------------------------------------------------


def test_navigation_overview_first_and_every_page_in_order():
    at = new_app()
    pages = list(at._registered_pages.values())  # what st.navigation registered
    titles = [p.get("page_name") for p in pages]
    assert titles[0] == "Overview"
    files = [Path(str(p["script_path"])).name for p in pages if p.get("script_path")]
    numbers = [int(f.split("_")[0]) for f in files]
    # the eight listed pages first (browsing, teaching, the BOS check; Models and Depth use
    # where a visitor looks), then every other page, hidden, by number (tests/app/test_navigation)
    assert numbers[:8] == [0, 13, 16, 5, 4, 7, 17, 18] and titles[1:3] == ["Models", "Depth use"]
    assert numbers[8:] == sorted(numbers[8:]) and numbers[8:12] == [1, 2, 3, 6]
    assert len(files) == len(list((REPO / "pages").glob("[0-9]*.py")))


def test_run_panel_run_first_demo_models_grouped_glossary():
    at = new_app()
    assert any("Glossary" in e.proto.label for e in at.sidebar.expander)
    at.switch_page(RUNS).run()
    first_button = at.main.button[0]
    assert first_button.key == "run"  # Run before every setting: visible without scrolling
    options = at.selectbox(key="model_packaged").options
    from deffcore.inputs.model import PACKAGED_MODELS

    assert options[: len(PACKAGED_MODELS)] == [
        f"{m} — {d}" for m, d in PACKAGED_MODELS.items()
    ]  # packaged first
    demo = options[len(PACKAGED_MODELS) :]
    assert demo and all(o.startswith("demo · ") for o in demo) and len(demo) == 1
    at.checkbox(key="model_all_demo").check().run()
    assert len(at.selectbox(key="model_packaged").options) > 10
    assert at.selectbox(key="passages").options == ["documents", "windows", "packed"]
    assert any("Glossary" in e.proto.label for e in at.sidebar.expander)


@pytest.mark.parametrize("mode", ["windows", "packed"])
def test_windows_count_is_shown_before_run(mode):
    at = choose(new_app())
    at.selectbox(key="passages").set_value(mode).run()
    from deffcore.inputs.texts import count_windows

    n = count_windows("tiny-llama", "bbc-news", 32, "default", None, mode=mode)
    assert any(f"this choice yields {n:,} windows" in plain(c.value) for c in at.main.caption)


def test_local_paths_off_hides_and_refuses_them(monkeypatch, no_model):
    monkeypatch.setenv("DEFF_LOCAL_PATHS", "off")
    at = new_app().switch_page(RUNS).run()
    assert "Local path" not in at.radio(key="model_source").options
    assert "Local file" not in at.radio(key="data_source").options
    at.radio(key="model_source").set_value("Hugging Face id").run()
    at.text_input(key="model_hf").set_value(str(REPO / "deffcore")).run()  # a path in disguise
    at.button(key="run").click().run()
    errors = texts(at, "error")
    assert len(errors) == 1 and "DEFF_LOCAL_PATHS=off" in errors[0], errors
    at.radio(key="model_source").set_value("Packaged (offline)").run()
    at.radio(key="data_source").set_value("Hugging Face dataset").run()
    at.text_input(key="data_hf").set_value("/etc/passwd").run()
    at.button(key="run").click().run()
    assert any("starts with 'hf:'" in e for e in texts(at, "error"))
    assert no_model == []


@pytest.mark.parametrize("page", ["pages/0_Overview.py", "pages/1_Similarity.py", RUNS])
def test_a_page_file_still_runs_on_its_own(page):
    """AppTest of a single page file (no router): it draws the shared sidebar itself (and
    the Runs page its run panel); its row of page links shows as text."""
    at = AppTest.from_file(str(REPO / page), default_timeout=180).run()
    assert not at.exception and not at.error
    assert at.sidebar.radio(key="pooling") is not None and at.title
    if page == RUNS:
        assert at.button(key="run").label == "Run"
