"""AppTest of the page fixes: the shipped default whole at first visit (its diagnostics,
BOS on/off, null band and bootstrap labelled as shipped), estimates said before long actions,
the projector layout, and the defects a walk found (Models' Gemma-3-12B, "None" cells, the
live estimates, the toast, the Overview's page list, Short pretraining, the reload mid-run).

The shipped default is the generated stand-in of tests/shipped_helpers.py (tiny-llama, 16
windows, made by the CLI with its extras), put where the app finds the shipped run
(`explorer.views.default_snapshot`); nothing here depends on deffcore/data/*.
"""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest
from apptest_helpers import assert_clean, charts, plain
from shipped_helpers import shipped_view
from streamlit.testing.v1 import AppTest

from deffcore.labs.pretrain import PRESETS
from deffcore.work import jobs

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def shipped(shipped_run, monkeypatch):
    """The stand-in as the app's shipped default (and only precomputed run)."""
    import explorer.views

    view = shipped_view(shipped_run["data"])
    monkeypatch.setattr(explorer.views, "default_snapshot", lambda: view)
    monkeypatch.setattr(explorer.views, "precomputed_runs", lambda: [view])
    jobs.forget_finished()
    return view


@pytest.fixture
def bare(shipped_run, monkeypatch):
    """The stand-in without its extras (an older snapshot): the pages offer them, costed."""
    import explorer.views

    data = {k: v for k, v in shipped_run["data"].items() if k not in ("diagnostics", "bos_on_off")}
    view = shipped_view(data)
    monkeypatch.setattr(explorer.views, "default_snapshot", lambda: view)
    monkeypatch.setattr(explorer.views, "precomputed_runs", lambda: [view])
    jobs.forget_finished()
    return view


def open_page(page: str) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300).run()
    at.switch_page(page)
    return at.run()


def titles(at: AppTest) -> list[str]:
    return [c["layout"]["title"]["text"] for c in charts(at)]


def captions(at: AppTest) -> str:
    return " ".join(plain(c.value) for c in at.caption)


def buttons(at: AppTest) -> set[str]:
    return {b.key for b in at.button if b.key}


# ---------------------------------------------------------------------------------------------
# the shipped default, whole at first visit
# ---------------------------------------------------------------------------------------------


def test_the_bos_page_shows_the_shipped_diagnostics_and_on_off_at_first_visit(shipped):
    at = open_page("pages/4_BOS_and_controls.py")
    assert_clean(at)
    shown = titles(at)
    assert any(t.startswith("Massive activations per layer") for t in shown), shown
    assert any(t.startswith("Attention sinks") for t in shown), shown
    assert any("BOS on or off" in t for t in shown), shown
    assert "shipped with the app, computed by the CLI" in captions(at)
    assert {"bos_diagnose", "bos_compare"}.isdisjoint(buttons(at))  # nothing to compute
    assert jobs.task_job(f"diagnostics:{shipped.key}") is None  # and nothing started
    conclusions = [plain(e.value) for e in (*at.success, *at.info) if "Conclusion" in e.value]
    assert len(conclusions) == 1
    verdict = next(plain(m.value) for m in at.markdown if "Pooling controls and" in m.value)
    assert "not computed" not in verdict  # the verdict reads the shipped diagnostics
    options = at.selectbox(key="inspect_passage").options
    assert options and not any("\\n" in o or "\n" in o for o in options)  # text, not repr
    assert all(re.fullmatch(r"#\d+: “.*”", o) for o in options), options


def test_without_extras_the_bos_page_says_what_computing_them_costs(bare):
    at = open_page("pages/4_BOS_and_controls.py")
    assert_clean(at)
    assert {"bos_diagnose", "bos_compare"} <= buttons(at)
    text = captions(at)
    assert re.search(r"passages computes them in the background .*: about .* here \(", text)
    assert re.search(r"Two runs of N = 16: (about .* here|seconds: read from the cache)", text)


def test_baselines_shows_the_shipped_band_and_bootstrap_labelled(shipped):
    at = open_page("pages/6_Baselines.py")
    assert_clean(at)
    assert "Passage bootstrap of D_eff/L" in titles(at)
    text = captions(at)
    assert "random-weight runs are shipped with the app" in text
    assert "bootstrap is shipped with the app" in text
    assert not [i for i in at.info if "press Run to measure this run here" in i.value]


def test_the_overview_offers_the_run_as_one_file_and_lists_every_page(shipped):
    at = open_page("pages/0_Overview.py")
    assert_clean(at)
    labels = [b.proto.label for b in at.get("download_button")]
    assert "Download this run as one HTML file" in labels
    import app

    note = next(plain(c.value) for c in at.caption if c.value.startswith("Pages, by who"))
    missing = [t for _, _, t in app.PAGES if t != "Overview" and t not in note]
    assert not missing, missing


# ---------------------------------------------------------------------------------------------
# tables without "None", Models' Gemma-3-12B
# ---------------------------------------------------------------------------------------------


def _shown(el) -> list[str]:
    """What a dataframe's cells read in the browser: a Styler's display values, else the
    values, a missing one as the element's placeholder ("None" when it has none)."""
    styler = el.proto.arrow_data.styler
    if styler.display_values:
        frame = pa.ipc.open_stream(styler.display_values).read_all().to_pandas()
    else:
        frame = el.value
    missing = el.proto.placeholder or "None"
    return [missing if v is None or v != v else str(v) for v in frame.to_numpy().ravel()]


def test_models_lists_gemma_3_12b_and_no_cell_reads_none(shipped):
    at = open_page("pages/13_Models.py")
    assert_clean(at)
    table = at.dataframe[0]
    assert "Gemma-3-12B (paper)" in set(table.value["label"])
    row = table.value[table.value["label"] == "Gemma-3-12B (paper)"].iloc[0]
    assert row["gap_default"] == -17.0
    assert (table.value["source"] == "paper").sum() == 18  # the CSV export's paper rows too
    for el in at.dataframe:
        assert "None" not in _shown(el)


def test_short_pretraining_says_the_trained_preset_with_the_papers_decimals(shipped):
    at = open_page("pages/15_Short_pretraining.py")
    assert "6 blocks, d = 64" in captions(at)  # before training: the chosen (cpu) preset
    at.number_input(key="pt_iters").set_value(77).run()  # a knob of the cpu preset, changed
    at.selectbox(key="pt_preset").set_value("tiny").run()
    # choosing a preset sets its knobs (a keyed widget would keep the cpu preset's 4 × 3 × 300
    # steps, and "tiny" would train 450 times its work)
    tiny = PRESETS["tiny"]
    assert at.multiselect(key="pt_variants").value == list(tiny.variants)
    assert at.number_input(key="pt_seeds").value == len(tiny.seeds)
    assert (at.number_input(key="pt_iters").value, at.number_input(key="pt_eval").value) == (
        tiny.iters,
        tiny.eval_interval,
    )
    assert "Estimate: 1× the work of the tiny preset as shipped" in captions(at)
    at.button(key="pt_run").click().run()
    assert_clean(at)
    text = captions(at)
    assert "3 blocks, d = 32" in text and "6 blocks" not in text
    (fig,) = [c for c in charts(at) if "Short pretraining" in c["layout"]["title"]["text"]]
    assert "gap_default" not in fig["layout"]["title"]["text"]
    assert fig["layout"]["yaxis"]["title"]["text"] == "default gap %"
    table = next(el for el in at.dataframe if "default gap %" in el.value.columns)
    cells = _shown(table)
    assert "None" not in cells
    gaps = [v for v in cells if re.fullmatch(r"-?\d+\.\d+", v)]
    assert gaps and all(len(v.split(".")[1]) <= 2 for v in gaps), gaps


# ---------------------------------------------------------------------------------------------
# estimates before long actions, the projector
# ---------------------------------------------------------------------------------------------


def test_pruning_says_its_estimate_not_a_minute_or_two(shipped):
    at = open_page("pages/9_Pruning_boundary.py")
    assert_clean(at)
    text = captions(at)
    assert re.search(r"The check: about .* here \(", text), text
    assert not [i for i in at.info if "a minute or two" in i.value]


def test_the_projector_shows_the_lesson_and_the_numbers_beside_the_chart(shipped):
    from deffcore.measures import teaching

    at = open_page("pages/5_Synthetic_lab.py")
    at.toggle(key="syn_projector").set_value(True).run()
    assert_clean(at)
    step = at.selectbox(key="syn_step").value
    lesson = [m for m in at.markdown if teaching.LESSONS[step] in plain(m.value)]
    assert len(lesson) == 1
    assert any("st-key-syn_projector_view" in h.proto.body for h in at.get("html"))
    (fig,) = [c for c in charts(at) if c["layout"]["title"]["text"].startswith("Lag profile")]
    assert fig["layout"]["height"] <= 400 and fig["layout"]["font"]["size"] >= 20
    assert [m.label for m in at.metric][:4] == ["D_eff", "D_eff / L", "F_L = 2L/(L+1)",
                                                 "Gap to F_L"]  # fmt: skip
    assert not [c for c in at.caption if "Constructions whose effective depth" in c.value]
    at.toggle(key="syn_projector").set_value(False).run()
    assert at.selectbox(key="syn_step").value == step  # the step survives the switch


def test_the_normal_story_puts_the_numbers_before_the_text(shipped):
    at = open_page("pages/5_Synthetic_lab.py")
    order = [type(e).__name__ for e in at.main if type(e).__name__ in ("Metric", "Markdown")]
    labels = [e.label if type(e).__name__ == "Metric" else e.value for e in at.main
              if type(e).__name__ in ("Metric", "Markdown")]  # fmt: skip
    first_metric = order.index("Metric")
    what = next(i for i, v in enumerate(labels) if "What changes" in str(v))
    assert first_metric < what


# ---------------------------------------------------------------------------------------------
# a reload mid-run, the notice
# ---------------------------------------------------------------------------------------------


def test_a_reload_mid_run_shows_the_runs_settings_in_the_run_panel(shipped, gate):
    from deffcore.inputs.run_spec import RunSpec

    spec = RunSpec(model="tiny-llama", revision=None, dataset="bbc-news", n=24, max_tokens=16,
                   seed=0, dtype="float32", passages="windows")  # fmt: skip
    job_id = jobs.start(spec)  # held at its model load by the gate
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    at.query_params["job"] = job_id  # the URL a reload keeps
    at.run()
    assert_clean(at)
    at.switch_page("pages/7_Runs.py").run()  # the run panel's one page
    assert_clean(at)
    assert at.number_input(key="n").value == 24
    assert at.number_input(key="max_tokens").value == 16
    passages = next(w for w in (*at.radio, *at.selectbox) if w.key == "passages")
    assert passages.value == "windows"
    jobs.cancel(job_id)
    gate.set()
    jobs.wait(job_id, timeout=120)


@pytest.mark.parametrize("page", ["pages/8_Interventions.py", "pages/12_Aggregations.py"])
def test_lab_tables_read_a_dash_where_a_value_is_missing(shipped, page):
    """Interventions' paper table (its "none" row), Aggregations' Euclidean geometry row."""
    at = open_page(page)
    assert_clean(at)
    assert at.dataframe
    for el in at.dataframe:
        assert "None" not in _shown(el), el.value


def test_the_runs_table_shows_each_run_name_whole(shipped):
    import json

    at = open_page("pages/7_Runs.py")
    assert_clean(at)
    table = at.dataframe[0]
    columns = json.loads(table.proto.columns)
    width = columns["run"]["width"]
    longest = max(len(str(v)) for v in table.value["run"])
    assert isinstance(width, int) and width >= 7 * longest + 24, (width, longest)
