"""AppTest of the further lenses' views (SPEC 13): the Correlation lab and Short pretraining
pages, the geometry and Gromov–Wasserstein sections of Aggregations, the pruning tolerance of
the Pruning boundary page and of the Models page.

Every number on a page is compared with the library called directly on the same cache and
store. Views that only read (a stored check, a stored GW matrix, a stored probe, the paper's
values) run with the model loader replaced by one that fails (`no_model_load`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import assert_clean, chart, plain, plotly_array
from streamlit.testing.v1 import AppTest

from deffcore.inputs.model import Kind
from deffcore.labs import correlation_lab, lens_tables, pretrain
from deffcore.labs.panels import paper_pruning_rows, stored_pruning_rows
from deffcore.views.run import Run

REPO = Path(__file__).resolve().parents[2]
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 12, "max_tokens": 24, "seed": 0}
CORRELATION = "pages/14_Correlation_lab.py"
PRETRAIN = "pages/15_Short_pretraining.py"


@pytest.fixture
def no_model_load(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("this view only reads: no model may be loaded")

    monkeypatch.setattr("deffcore.inputs.model.load_model", refuse)


def open_page(page: str, view=None) -> AppTest:
    from explorer.views import VIEW_KEY

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    if view is not None:
        at.session_state[VIEW_KEY] = view
    at.run()
    at.switch_page(page)
    return at.run()


def tables_with(at: AppTest, column: str) -> list:
    return [d.value for d in at.dataframe if column in d.value.columns]


def summaries(at: AppTest) -> list:
    return tables_with(at, "Spearman p from")


# ---------------------------------------------------------------------------------------------
# Correlation lab


def test_correlation_lab_pruning_beside_the_paper_and_table_s18(no_model_load):
    at = open_page(CORRELATION)
    assert_clean(at)
    direct = correlation_lab.pruning_correlations(
        with_paper=True
    )  # the stored checks (none) + Table S17
    shown = summaries(at)
    assert len(shown) == 2
    for frame, result in zip(shown, direct["results"], strict=True):
        row = frame.iloc[0]
        assert row["n (models)"] == result["n"] == 6
        assert row["Pearson r"] == pytest.approx(result["pearson_r"])
        assert row["p (Pearson)"] == pytest.approx(result["pearson_p"])
        assert row["Spearman ρ"] == pytest.approx(result["spearman_rho"])
        assert row["p (Spearman)"] == pytest.approx(result["spearman_p_exact"])  # n <= 9: exact
        assert row["Spearman p from"].startswith("exact permutation")
    assert any("Only n = 6 models" in plain(w.value) for w in at.warning)  # small n said
    scatter = chart(at, "f₁.₁₀: Pearson r")
    xs = sorted(float(v) for t in scatter["data"] if t["mode"] == "markers+text"
                for v in plotly_array(t["x"]))  # fmt: skip
    assert xs == sorted(p["x"] for p in direct["results"][0]["points"])
    loo = tables_with(at, "left out")[0]
    assert set(loo["extreme"]) == {"", "largest x", "smallest x"}
    s18 = tables_with(at, "recomputed (Table S17's 6 models)")[0]
    assert len(s18) == 32 and int(s18["agrees to the printed digits"].sum()) == 29
    full = s18.set_index(["subset", "quantity"]).loc[("full panel", "k₁.₁₀: Spearman ρ")]
    ours = full["reconstructed (8 models, 2 k₁.₁₀ inferred)"]
    assert full["published"] == -0.93 and round(ours, 2) == -0.93
    assert any("inferred, not published" in m.value for m in at.markdown)
    inferred = tables_with(at, "k₁.₁₀")
    assert any(set(t["Model"]) == {"Qwen3.5-4B", "Qwen3.5-27B"} for t in inferred)
    conflict = correlation_lab.s18_endpoint_conflict()[
        "sentence"
    ]  # the caption against the numbers
    assert any(plain(w.value) == conflict for w in at.warning)


def test_correlation_lab_scores_upload(no_model_load):
    at = open_page(CORRELATION)
    at.radio(key="cl_kind").set_value("scores").run()
    at.multiselect(key="cl_sc_sources").set_value(["paper"]).run()
    scores = {"Pythia-70M": 25.0, "Pythia-160M": 26.1, "Llama-3.1-8B": 66.7,
              "Qwen3.5-9B": 70.2, "Mistral-7B": 62.5}  # fmt: skip
    body = "model,task,score\n" + "".join(f"{m},<b>MMLU</b>,{s}\n" for m, s in scores.items())
    at.file_uploader(key="cl_scores").set_value(("my scores.csv", body.encode(), "text/csv"))
    at.run()
    assert_clean(at)
    (frame,) = summaries(at)
    from deffcore.labs.scores import ScoreTable

    table = ScoreTable(path="mine", scores={"<b>MMLU</b>": scores})
    direct = correlation_lab.score_correlations(table, sources=("paper",))["results"][0]
    assert frame.iloc[0]["Pearson r"] == pytest.approx(direct["pearson_r"])
    assert frame.iloc[0]["n (models)"] == 5
    (task,) = [h.value for h in at.subheader if "MMLU" in h.value]
    assert task.startswith("\\<b\\>") and plain(task) == "<b>MMLU</b>"  # escaped: text
    title = chart(at, "MMLU")["layout"]["title"]["text"]
    assert "<b>" not in title and "&lt;b&gt;MMLU&lt;/b&gt;" in title


@pytest.mark.parametrize(
    ("body", "sentence"),
    [
        (b"model,task\nA,MMLU\n", "lacks the column(s) score"),
        (b"model,task,score\nNobody-1B,MMLU,1\nA,MMLU,2\nB,MMLU,3\n", "Nobody-1B"),
        (b"", "is empty"),
    ],
)
def test_correlation_lab_refuses_a_bad_scores_file_in_one_sentence(no_model_load, body, sentence):
    at = open_page(CORRELATION)
    at.radio(key="cl_kind").set_value("scores").run()
    at.multiselect(key="cl_sc_sources").set_value(["paper"]).run()
    at.file_uploader(key="cl_scores").set_value(("bad [x](e).csv", body, "text/csv")).run()
    assert not at.exception
    (error,) = at.error
    text = plain(error.value)
    assert sentence in text and ".uploads" not in text  # the user's file name, not our path
    if "Nobody" not in sentence:  # the file's own errors name it, never as a Markdown link
        assert "\\[x\\]\\(e" in error.value


def test_correlation_lab_geometry_over_cached_runs(monkeypatch):
    from deffcore.labs import panels
    from deffcore.runs.measure import measure

    for n in (8, 10, 12):
        measure(**{**RUN, "n": n})
    monkeypatch.setattr("deffcore.inputs.model.load_model", None)  # the page only reads the cache
    at = open_page(CORRELATION)
    at.radio(key="cl_kind").set_value("geometry").run()
    assert_clean(at)  # tiny-llama is random weights, never a point: an info, not an error
    assert any("cached runs of trained weights" in plain(i.value) for i in at.info)
    monkeypatch.setattr(panels, "RANDOM_WEIGHTS", (Kind.RANDOM,))  # here it counts as trained
    at.run()
    assert_clean(at)
    direct = correlation_lab.geometry_correlations()
    for frame, result in zip(summaries(at), direct["results"], strict=True):
        assert frame.iloc[0]["n (models)"] == result["n"] >= 3
        assert frame.iloc[0]["Spearman ρ"] == pytest.approx(result["spearman_rho"])
    assert any("Figure S6: Pearson r = 0.65" in c.value for c in at.caption)


# ---------------------------------------------------------------------------------------------
# Aggregations: geometry and GW


@pytest.fixture(scope="module")
def view(measurement):
    return Run.from_measurement(measurement)


def test_aggregations_geometry_and_gw_of_a_measured_run(view, measurement, no_model_load):
    from deffcore.labs.aggregations import aggregation_table
    from deffcore.labs.gw_lens import GwOptions, gw_lens

    at = open_page("pages/12_Aggregations.py", view)
    assert_clean(at)
    direct = lens_tables.geometry_frame(aggregation_table(view, pooling="default"))
    shown = tables_with(at, "efficiency")[0]
    assert list(shown.index) == list(direct.index)
    assert shown["efficiency"].to_numpy() == pytest.approx(direct["efficiency"].to_numpy())
    assert chart(at, "Turning angle")
    run = at.button(key="ag_gw_run")
    assert not run.disabled
    at.number_input(key="ag_gw_n").set_value(8).run()
    at.button(key="ag_gw_run").click().run()
    assert_clean(at)
    stored = gw_lens(measurement, GwOptions(n_gw=8))  # read back from the store the page wrote
    assert stored["cached"]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["ρ(GW, CKA)"] == f"{stored['spearman_gw_cka']:+.2f}"
    assert metrics["ρ(|i−j|, GW)"] == f"{stored['spearman_lag_gw']:+.2f}"
    heat = chart(at, "ρ(GW, cka)")
    np.testing.assert_allclose(plotly_array(heat["data"][1]["z"]), stored["gw"], rtol=1e-12)
    assert "Pythia-410M (paper)" in set(tables_with(at, "ρ(GW, CKA)")[0]["Model"])
    # the default (the lower of two starts), with the paper's start's figures beside it
    assert stored["init"] == "both" and not at.info
    table = tables_with(at, "ρ(GW, CKA)")[0]
    assert list(table["starting coupling"][:2]) == ["both", "product (the paper's start)"]
    assert table["ρ(GW, CKA)"][1] == pytest.approx(stored["paper"]["spearman_gw_cka"])
    at.run()  # a later visit: shown from the store, the button off
    assert at.button(key="ag_gw_run").disabled
    assert any("Read from the lab store" in c.value for c in at.caption)
    # another start is a result of its own, never put beside Table S22
    at.selectbox(key="ag_gw_init").set_value("identity").run()
    assert not at.button(key="ag_gw_run").disabled  # nothing stored for this start
    at.button(key="ag_gw_run").click().run()
    assert_clean(at)
    ident = gw_lens(measurement, GwOptions(n_gw=8, init="identity"))
    assert ident["cached"] and ident["init"] == "identity"
    table = tables_with(at, "ρ(GW, CKA)")[0]
    assert list(table["Model"]) == [f"{ident['model']} (this run, n_gw = 8)"]
    assert list(table["starting coupling"]) == ["identity"]
    assert any("Not compared with Table S22" in plain(i.value) for i in at.info)


def test_aggregations_gw_is_off_for_a_snapshot(no_model_load):
    at = open_page("pages/12_Aggregations.py")  # the shipped snapshot: no pooled states
    assert_clean(at)
    assert at.button(key="ag_gw_run").disabled
    assert any("snapshot" in plain(i.value) for i in at.info)
    assert any("Euclidean path needs a measured run" in plain(c.value) for c in at.caption)


# ---------------------------------------------------------------------------------------------
# Pruning tolerance: the Pruning boundary page and the Models page


def press_pruning(at: AppTest, n_heldout: int) -> AppTest:
    at.text_input(key="pr_model").set_value("tiny-llama")
    at.number_input(key="pr_n").set_value(8)
    at.number_input(key="pr_heldout").set_value(n_heldout)
    at.number_input(key="pr_max_tokens").set_value(24)
    at.button(key="pr_run").click()
    return at.run()


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def test_pruning_page_shows_the_tolerance_and_says_when_it_was_stored():
    from deffcore.labs.pruning import pruning_check

    at = open_page("pages/9_Pruning_boundary.py")
    at = press_pruning(at, 4)
    assert_clean(at)
    direct = pruning_check("tiny-llama", n=8, n_heldout=4, max_tokens=24).to_dict()
    assert direct["cached"]
    assert metric(at, "k₁.₁₀ (BI)") == str(direct["k_110"])
    assert metric(at, "f₁.₁₀ = k₁.₁₀ / L") == f"{direct['f_110']:.3f}"
    assert metric(at, "Result") == "computed now"
    ppl_k = tables_with(at, "PPL_k / PPL₀")[0]
    assert ppl_k["PPL_k"].to_list() == pytest.approx([direct["ppl_k"][str(k)] for k in ppl_k.index])
    at = press_pruning(at, 4)
    assert metric(at, "Result") == "read from the store"


def test_pruning_page_flags_a_non_monotone_curve(no_model_load):
    from deffcore.labs.pruning import SKIP_COUNTS, PruningResult, PruningSetup
    from deffcore.labs.store import write_result

    setup = PruningSetup("tiny-llama", "bbc-news", n=8, n_heldout=3, max_tokens=24, seed=0,
                         ks=SKIP_COUNTS, metric="cka")  # fmt: skip
    identity = setup.identity(revision=None, device="cpu", dtype="float32")
    curve = {0: 10.0, 1: 12.0, 2: 10.5}  # k = 1 fails, k = 2 qualifies again
    planted = PruningResult(
        model="tiny-llama", layers=4, n=8, n_heldout=3, deff=1.5, bi=[0.1] * 4,
        local_deff=[0.0] * 4, order={"bi": [0, 1, 2, 3], "local_deff": [0, 1, 2, 3]},
        ks=[0, 1, 2], ppl={"bi": curve, "local_deff": curve}, heldout_tokens=40, max_tokens=24,
    )  # fmt: skip
    write_result("pruning", identity, planted.to_dict())
    at = press_pruning(open_page("pages/9_Pruning_boundary.py"), 3)
    assert_clean(at)
    assert metric(at, "Perplexity curve") == "not monotone"
    assert metric(at, "k₁.₁₀ (BI)") == "2"
    (warning,) = [w for w in at.warning if "Not monotone" in plain(w.value)]
    assert "every k up to 0 qualifies" in plain(warning.value)


def test_models_page_pruning_tolerance_per_model(no_model_load):
    at = open_page("pages/13_Models.py")
    assert_clean(at)
    stored = stored_pruning_rows()
    assert stored  # the checks of the tests above
    bars = chart(at, "Pruning tolerance")
    ours = next(t for t in bars["data"] if t["name"] == "this machine")
    assert list(ours["x"]) == [r["model"] for r in stored]
    assert plotly_array(ours["y"]).tolist() == pytest.approx([r["f_110"] for r in stored])
    paper = next(t for t in bars["data"] if t["name"] == "paper (Table S17)")
    assert list(paper["x"]) == [r["model"] for r in paper_pruning_rows()]
    table = tables_with(at, "f₁.₁₀")[-1]
    assert len(table) == len(stored) + len(paper_pruning_rows())


# ---------------------------------------------------------------------------------------------
# Short pretraining (Table S8)


def test_pretrain_page_shows_the_paper_then_a_stored_probe(monkeypatch):
    at = open_page(PRETRAIN)
    assert_clean(at)
    paper = tables_with(at, "first non-BOS gap %")[0]
    assert paper.set_index("variant").loc["no post", "first non-BOS gap %"] == 22.8

    s = replace(pretrain.PRESETS["tiny"], variants=("none",), iters=2, eval_interval=2)
    trained = pretrain.pretrain_probe(s)  # stored; the page must only read it

    def no_training(*args, **kwargs):
        raise AssertionError("the page shows a stored probe without training")

    monkeypatch.setattr(pretrain, "train_probe", no_training)
    at.run()
    assert_clean(at)
    frame = tables_with(at, "default gap %")[0]
    ours, published = frame.to_dict("records")
    (final,) = trained.final_table()
    assert ours["default gap %"] == pytest.approx(final["gap_default"])
    assert published["default gap %"] == 41.3 and published["source"] == "paper (Table S8)"
    assert any("read from the store" in c.value for c in at.caption)
    lines = chart(at, "Short pretraining")["data"]
    assert [t["name"] for t in lines] == ["none, seed 0"]


def test_pretrain_page_trains_the_tiny_preset():
    at = open_page(PRETRAIN)
    at.selectbox(key="pt_preset").set_value("tiny").run()
    at.multiselect(key="pt_variants").set_value(["none", "no_post"])
    at.number_input(key="pt_seeds").set_value(1)
    at.number_input(key="pt_iters").set_value(3)
    at.number_input(key="pt_eval").set_value(3)
    at.button(key="pt_run").click()
    at.run()
    assert_clean(at)
    s = replace(pretrain.PRESETS["tiny"], variants=("none", "no_post"), seeds=(0,), iters=3,
                eval_interval=3)  # fmt: skip
    again = pretrain.pretrain_probe(s)
    assert again.cached  # the page stored it
    frame = tables_with(at, "default gap %")[0]
    assert list(frame["variant"]) == ["none", "none", "no_post", "no_post"]
    got = frame[frame["source"].str.startswith("this machine")]["default gap %"].to_list()
    assert got == pytest.approx([r["gap_default"] for r in again.final_table()])
    assert any("trained in" in c.value for c in at.caption)
    assert json.dumps(at.selectbox(key="pt_stored").value).count("3 steps") == 1
