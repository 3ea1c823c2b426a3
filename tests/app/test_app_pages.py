"""AppTest of the explorer: every page renders, a tiny run completes, figures hold its numbers.

One module-scoped app runs the tiny random-init model `tiny-llama` (4 blocks, d = 64) on 16
BBC passages in a temporary DEFF_CACHE_DIR; the expected values come from `measure` called
directly with the same arguments (a cache hit), so the app is checked against the library.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import assert_clean, chart, plain, plotly_array, trace
from streamlit.testing.v1 import AppTest

from deffcore.measures.depth import lag_profile

REPO = Path(__file__).resolve().parents[2]
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 16, "max_tokens": 32, "seed": 0}
PAGES = [
    "pages/1_Similarity.py",
    "pages/2_Lag_decay.py",
    "pages/3_Gap_to_F_L.py",
    "pages/4_BOS_and_controls.py",
    "pages/5_Synthetic_lab.py",
    "pages/6_Baselines.py",
    "pages/7_Runs.py",
]


# ---------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def new_app() -> AppTest:
    return AppTest.from_file(str(REPO / "app.py"), default_timeout=180)


def press_run(at: AppTest, **overrides) -> AppTest:
    """Set the run panel (the Runs page: the one place it lives) and press Run."""
    run = {**RUN, **overrides}
    at.switch_page(RUNS).run()
    at.radio(key="model_source").set_value("Packaged (offline)")
    at.run()
    at.selectbox(key="model_packaged").set_value(run["model"])
    at.number_input(key="n").set_value(run["n"])
    at.number_input(key="max_tokens").set_value(run["max_tokens"])
    at.number_input(key="seed").set_value(run["seed"])
    at.selectbox(key="passages").set_value("documents")  # the panel starts at the shipped run's
    at.button(key="run").click()
    return at.run()


@pytest.fixture(scope="module")
def app(cache_dir, measurement):
    at = new_app().run()
    press_run(at)
    assert_clean(at)
    return at


OVERVIEW = "pages/0_Overview.py"  # the first page (app.py is the st.navigation router)
RUNS = "pages/7_Runs.py"  # the run panel's one page


def goto(at: AppTest, page: str | None) -> AppTest:
    at.switch_page(page or OVERVIEW)
    return at.run()


# ---------------------------------------------------------------------------------------------
# entry page
# ---------------------------------------------------------------------------------------------


def test_entry_page_has_the_sidebar_and_shows_a_result_before_any_run(cache_dir):
    at = new_app().run()
    assert_clean(at)
    assert at.sidebar.radio(key="pooling") is not None
    offered = at.sidebar.selectbox(key="metric").options  # the CKA family first (SPEC 17.5)
    assert offered[:3] == ["linear CKA (CKA family)", "unbiased CKA (CKA family)",
                           "cosine (CKA family)"]  # fmt: skip
    assert at.sidebar.selectbox(key="metric").value == "cka"
    runs = new_app().run().switch_page(RUNS).run()  # the run panel: on the Runs page
    assert_clean(runs)
    for key in ("model_source", "data_source"):
        assert runs.radio(key=key) is not None
    for key in ("n", "max_tokens", "seed"):
        assert runs.number_input(key=key) is not None
    assert runs.button(key="run").label == "Run"
    from deffcore.views.run import load_snapshot

    snap = load_snapshot()
    assert snap is not None, "the shipped snapshot deffcore/data/default_run.json is missing"
    assert any("Precomputed with `python -m deffcore measure" in i.value for i in at.info)
    assert at.slider(key=f"K_L{snap.layers}").value == snap.layers - 1  # maximum lag K
    h = snap.headline("default", "cka")
    assert metric(at, "D_eff") == f"{h.deff:.3f}"
    assert metric(at, "N") == str(snap.n)
    fig = chart(at, "Layer similarity")
    np.testing.assert_allclose(plotly_array(fig["data"][0]["z"]), snap.similarity("default", "cka"))


def test_run_completes_and_headline_matches_measure(app, measurement):
    at = goto(app, None)
    assert_clean(at)
    s = measurement.summary("default", "cka")
    assert metric(at, "D_eff") == f"{s.deff:.3f}"
    assert metric(at, "D_eff / L") == f"{s.deff_over_L:.4f}"
    assert metric(at, "Gap to F_L") == f"{s.gap_pct:+.1f}%"
    assert metric(at, "ρ̂(1)") == f"{s.rho1:.4f}"
    assert metric(at, "N") == str(measurement.n)
    ratio, _ = measurement.pos0_peak()
    assert metric(at, "Pos-0 norm ratio") == f"{ratio:.1f}×"
    assert metric(at, "CKA bias d/(N+d)") == f"{64 / (16 + 64):.3f}"
    # the trust badge: N = 16 passages is noise; the bias warning only when the bias matters.
    # The Overview draws the run's paired bootstrap in the background (its BOS answer's, of
    # every pooling, SPEC 11.6), so once it lands the trust reads the run's measured spread
    # (SPEC 15): the same replicates, drawn here by the library with the answer's B and seed
    from deffcore.statistics.bos_answer import ANSWER_B
    from deffcore.statistics.trust_rule import trust_badge
    from deffcore.work import jobs

    status = jobs.task_job(f"paired:{measurement.spec.key()}:cka:{ANSWER_B}")
    assert status is not None, "the Overview drew no paired bootstrap for its BOS answer"
    assert jobs.wait(status.job_id, timeout=300).state == "done"
    at.run()
    assert_clean(at)
    pb = measurement.answer_bootstrap(metric="cka", B=ANSWER_B, seed=measurement.spec.seed)

    def badge(pooling: str, metric: str):
        res = pb.result(pooling, metric)
        unbiased = measurement.summary(pooling, "unbiased_cka").deff_over_L
        return trust_badge(
            measurement.n, 64, metric=metric, value=res.point, ci=(res.low, res.high),
            bootstrap_mean=res.mean, unbiased_value=unbiased if metric == "cka" else None,
            layers=measurement.layers,  # the app judges the gap's regime too
        )  # fmt: skip

    t = badge("default", "cka")
    assert t.level == "noise"
    assert any("Trust: noise" in m.value for m in at.markdown)
    said = [c.value for c in at.caption if c.value.startswith(t.sentence().removesuffix("."))]
    assert said, [c.value for c in at.caption]
    warned = any("bias matters here" in w.value for w in at.warning)
    assert warned == t.bias_material
    # the rule's action checked against the data (SPEC 15): where it asks more passages than
    # bbc-news has (unbiased CKA's top1_pc here), the caption says what would give them
    at.radio(key="pooling").set_value("top1_pc")
    at.selectbox(key="metric").set_value("unbiased_cka")
    at.run()
    t = badge("top1_pc", "unbiased_cka")
    said = [c.value for c in at.caption if c.value.startswith(t.sentence().removesuffix("."))]
    assert said and "bbc-news gives 2,225 documents here" in said[0], [c.value for c in at.caption]
    at.radio(key="pooling").set_value("default")
    at.selectbox(key="metric").set_value("cka")
    at.run()
    assert not any("Precomputed" in i.value for i in at.info)
    fig = chart(at, "Layer similarity")
    np.testing.assert_allclose(
        plotly_array(fig["data"][0]["z"]), measurement.similarity("default", "cka"), rtol=1e-12
    )


def test_switching_pooling_changes_numbers_without_running_the_model(app, measurement, monkeypatch):
    import deffcore.inputs.model

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded again")

    monkeypatch.setattr(deffcore.inputs.model, "load_model", no_model)
    at = goto(app, None)
    before = metric(at, "D_eff")
    at.radio(key="pooling").set_value("first_non_bos").run()
    assert_clean(at)
    s = measurement.summary("first_non_bos", "cka")
    assert metric(at, "D_eff") == f"{s.deff:.3f}" != before
    at.selectbox(key="metric").set_value("cosine").run()
    assert metric(at, "D_eff") == f"{measurement.summary('first_non_bos', 'cosine').deff:.3f}"
    L = measurement.layers
    at.slider(key=f"K_L{L}").set_value(1).run()
    assert metric(at, "D_eff") == f"{measurement.summary('first_non_bos', 'cosine', K=1).deff:.3f}"
    at.radio(key="pooling").set_value("default")
    at.selectbox(key="metric").set_value("cka")
    at.slider(key=f"K_L{L}").set_value(L - 1)
    at.run()
    assert metric(at, "D_eff") == before


# ---------------------------------------------------------------------------------------------
# pages
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES)
def test_every_page_renders_without_error(app, page):
    at = goto(app, page)
    assert_clean(at)
    assert at.title


def test_similarity_page_heatmap_and_row(app, measurement):
    at = goto(app, "pages/1_Similarity.py")
    S = measurement.similarity("default", "cka")
    np.testing.assert_allclose(plotly_array(chart(at, "Layer similarity")["data"][0]["z"]), S)
    at.slider(key=f"similarity_layer_L{measurement.layers}").set_value(3).run()
    row = trace(chart(at, "selected layer"), "layer 3")
    np.testing.assert_allclose(plotly_array(row["y"]), S[2])
    assert [d.label for d in at.get("download_button")][:2] == ["Figure (HTML)", "Data (CSV)"]


def test_lag_decay_page(app, measurement):
    at = goto(app, "pages/2_Lag_decay.py")
    fig = chart(at, "Lag decay")
    rho = lag_profile(measurement.similarity("default", "cka"))
    np.testing.assert_allclose(plotly_array(trace(fig, "this run")["y"]), rho)
    floor = next(t for t in fig["data"] if t["name"].startswith("iid-bias floor"))
    np.testing.assert_allclose(plotly_array(floor["y"]), 64 / (16 + 64))
    byK = chart(at, "maximum lag K")
    L = measurement.layers
    np.testing.assert_allclose(
        plotly_array(trace(byK, "D_eff(K)/L")["y"])[-1], measurement.summary().deff_over_L
    )
    assert list(plotly_array(trace(byK, "D_eff(K)/L")["x"])) == list(range(1, L))


def test_gap_page_shows_run_and_paper_separately(app, measurement):
    at = goto(app, "pages/3_Gap_to_F_L.py")
    fig = chart(at, "Gap to the orthogonal-update reference")
    mine = trace(fig, "this run")
    np.testing.assert_allclose(plotly_array(mine["x"]), [measurement.summary().gap_pct])
    paper = trace(fig, "paper")
    assert all(label.endswith("(paper)") for label in paper["y"])
    assert "Pythia-70M (paper)" in paper["y"]
    np.testing.assert_allclose(
        plotly_array(paper["x"])[list(paper["y"]).index("Pythia-70M (paper)")], 28.2
    )


def test_gap_page_without_the_paper_file_says_so(app, monkeypatch, tmp_path):
    import deffcore.views.paper

    monkeypatch.setattr(deffcore.views.paper, "paper_reference_path", lambda: tmp_path / "none.csv")
    at = goto(app, "pages/3_Gap_to_F_L.py")
    assert_clean(at)
    assert any("published values were not found" in i.value for i in at.info)
    names = {t["name"] for t in chart(at, "Gap to the")["data"]}
    assert "this run" in names and "paper" not in names  # (the gallery may add "precomputed")


def test_controls_page_has_every_pooling_and_a_verdict(app, measurement):
    at = goto(app, "pages/4_BOS_and_controls.py")
    fig = chart(at, "Pooling controls")
    for pooling in ("default", "first_non_bos", "token_normed", "top1_pc", "top3_pc"):
        t = trace(fig, pooling)
        mine = [
            x for x, s in zip(plotly_array(t["x"]), t["customdata"], strict=True) if s == "this run"
        ]
        np.testing.assert_allclose(mine, [measurement.summary(pooling).gap_pct])
    answers = [e.value for e in (*at.success, *at.warning, *at.info) if "artefact?" in e.value]
    verdicts = [e.value for e in at.markdown if "Pooling controls and diagnostics" in e.value]
    assert len(answers) == len(verdicts) == 1
    ratios = plotly_array(chart(at, "Position-0 norm ratio")["data"][0]["y"])
    np.testing.assert_allclose(ratios, measurement.pooled.pos0_norm_ratio, rtol=1e-6)


def test_synthetic_lab_known_answers(app):
    at = goto(app, "pages/5_Synthetic_lab.py")
    at.select_slider(key="syn_n").set_value(128)
    at.select_slider(key="syn_d").set_value(32)
    at.slider(key="syn_L").set_value(10)
    at.run()
    assert_clean(at)
    # orthogonal column spaces: CKA(i != j) = 0 exactly, so D_eff/L = 1
    assert metric(at, "orthogonal states: D_eff/L at L = 10") == "1.0000"
    fig = chart(at, "Synthetic constructions")
    iid = next(t for t in fig["data"] if t["name"].startswith("iid reference"))
    b = 32 / (128 + 32)
    np.testing.assert_allclose(plotly_array(iid["y"])[-1], 1 / (1 + b * 9))
    assert at.get("latex")


def test_baselines_null_bootstrap_and_references(app, measurement):
    at = goto(app, "pages/6_Baselines.py")
    at.button(key="run_null").click().run()
    assert_clean(at)
    band = chart(at, "random-weight null")
    assert len(plotly_array(trace(band, "random seeds")["y"])) == 3
    at.select_slider(key="bootstrap_B").set_value(20)
    at.button(key="run_bootstrap").click().run()
    assert_clean(at)
    hist = chart(at, "bootstrap")
    assert len(plotly_array(hist["data"][0]["x"])) == 20
    refs = measurement.matched_references("default", "cka")
    bars = chart(at, "Matched references")
    np.testing.assert_allclose(
        plotly_array(bars["data"][0]["y"]), [refs.F_L, refs.F_norm, refs.F_h0_norm, refs.F_h0_corr]
    )


def test_runs_page_compare_open_and_delete(app, cache_dir):
    from deffcore.extraction import cache
    from deffcore.extraction import cache as entries

    at = goto(app, "pages/7_Runs.py")
    assert_clean(at)
    keys = [m["key"] for m in entries.list_runs()]
    # the run and its three random-weight seeds (Baselines test)
    assert len(keys) >= 4, [(m["spec"]["model"], m["status"]) for m in entries.list_runs()]
    fig = chart(at, "Lag profiles of the selected runs")
    assert len(fig["data"]) == 2
    victim = next(k for k in keys if "random:" in cache.load_meta(k)["spec"]["model"])
    at.selectbox(key="runs_open").set_value(victim)
    at.button(key="runs_open_button").click().run()
    assert_clean(at)
    assert any("Opened random:tiny-llama:" in plain(e.value) for e in at.success)
    assert any(plain(c.value).startswith("Current run (measured): random:") for c in at.caption)
    at.selectbox(key="runs_delete").set_value(victim)
    at.button(key="runs_delete_button").click().run()
    assert any("cannot be recovered" in w.value for w in at.warning)
    assert victim in [m["key"] for m in entries.list_runs()]  # nothing deleted before confirming
    at.button(key="runs_delete_confirm").click().run()
    assert_clean(at)
    assert victim not in [m["key"] for m in entries.list_runs()]
    assert len(entries.list_runs()) == len(keys) - 1
    # the deleted run was the current one: the session falls back to another run, not an error
    assert not any(plain(c.value).startswith("Current run (measured): random:") for c in at.caption)
    at.switch_page("pages/1_Similarity.py").run()
    assert_clean(at)


# ---------------------------------------------------------------------------------------------
# bad input: a clear message, the app stays usable, the current run is kept
# ---------------------------------------------------------------------------------------------


def _errors_then_still_usable(at: AppTest, deff_before: str) -> list[str]:
    """The Run panel's errors; then the Overview still shows the previous run; back on Runs."""
    errors = [plain(e.value) for e in at.error]
    assert not at.exception
    goto(at, OVERVIEW)
    assert metric(at, "D_eff") == deff_before  # the previous run is still shown
    goto(at, RUNS)
    return errors


def _before(at: AppTest) -> str:
    """The Overview's D_eff, then the Runs page (its run panel) opened."""
    before = metric(goto(at, None), "D_eff")
    goto(at, RUNS)
    return before


def test_unknown_model_is_a_clear_error(app, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = app
    before = _before(at)
    at.radio(key="model_source").set_value("Hugging Face id").run()
    at.text_input(key="model_hf").set_value("no-such-org/no-such-model-xyz")
    at.button(key="run").click().run()
    errors = _errors_then_still_usable(at, before)
    assert len(errors) == 1 and "no-such-org/no-such-model-xyz" in errors[0]
    at.radio(key="model_source").set_value("Packaged (offline)").run()


def test_empty_file_and_short_passages_are_clear_errors(app, tmp_path):
    at = app
    before = _before(at)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    at.radio(key="data_source").set_value("Local file").run()
    at.text_input(key="data_path").set_value(str(empty))
    at.button(key="run").click().run()
    errors = _errors_then_still_usable(at, before)
    assert len(errors) == 1 and "empty.txt" in errors[0]

    short = tmp_path / "short.txt"
    short.write_text("\n".join("abcdefghij"))  # ten one-character passages
    at.text_input(key="data_path").set_value(str(short))
    at.checkbox(key="model_all_demo").check().run()  # the other demo models are one tick away
    at.selectbox(key="model_packaged").set_value("tiny-llama-nobos")
    at.number_input(key="n").set_value(8)
    at.button(key="run").click().run()
    errors = _errors_then_still_usable(at, before)
    assert len(errors) == 1, errors
    at.radio(key="data_source").set_value("BBC news (offline)")
    at.selectbox(key="model_packaged").set_value("tiny-llama")
    at.number_input(key="n").set_value(RUN["n"])
    at.run()
    at.checkbox(key="model_all_demo").uncheck().run()


def test_missing_model_path_is_a_clear_error(app, tmp_path):
    at = app
    before = _before(at)
    at.radio(key="model_source").set_value("Local path").run()
    at.text_input(key="model_path").set_value(str(tmp_path / "nothing-here"))
    at.button(key="run").click().run()
    errors = _errors_then_still_usable(at, before)
    assert len(errors) == 1 and "nothing-here" in errors[0]
    at.radio(key="model_source").set_value("Packaged (offline)").run()


@pytest.mark.parametrize(
    "error",
    [
        "NonFiniteActivationsError:The model produced NaN in its residual stream at layer 3.",
        "OutOfMemoryError:Even batch size 1 does not fit in memory.",
        "HubUnavailableError:The Hugging Face hub cannot be reached.",
        "RuntimeError:CUDA error: device-side assert triggered",
    ],
)
def test_pipeline_failures_are_messages_and_the_cache_is_kept(app, monkeypatch, error):
    import deffcore.core.errors
    import deffcore.runs.measure
    from deffcore.extraction import cache as entries

    name, text = error.split(":", 1)
    exc = getattr(deffcore.core.errors, name, None) or RuntimeError

    def failing(*args, **kwargs):
        raise exc(text)

    monkeypatch.setattr(deffcore.runs.measure, "measure_spec", failing)  # in the job's thread
    at = app
    before, runs = _before(at), {m["key"] for m in entries.list_runs()}
    at.button(key="run").click().run()
    errors = _errors_then_still_usable(at, before)
    assert len(errors) == 1 and text in errors[0]
    assert {m["key"] for m in entries.list_runs()} == runs
    at.run()  # the next rerun is clean again
    assert_clean(at)
