"""AppTest of the five lab pages on tiny models: each runs and shows the library's numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from apptest_helpers import assert_clean
from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parents[2]
#: a lower-case snake_case column name (deff_h_over_L, val_loss): never shown to a person
SNAKE = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9.]+)+")
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 12, "max_tokens": 24, "seed": 0}


def titles(at: AppTest) -> list[str]:
    specs = [json.loads(el.proto.spec)["layout"] for el in at.get("plotly_chart")]
    return [layout.get("title", {}).get("text", "") for layout in specs]


def table_with(at: AppTest, column: str):
    """The first dataframe on the page that has `column` (AppTest exposes no dataframe keys)."""
    for el in at.dataframe:
        frame = el.value
        if column in frame.columns:
            return frame
    raise AssertionError(
        f"no table with column {column!r}; have {[list(d.value.columns) for d in at.dataframe]}"
    )


def metric(at: AppTest, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


@pytest.fixture(autouse=True)
def deff_cache_dir(cache_dir, monkeypatch):
    """Overrides tests/conftest.py's fresh cache per test: this module's tests share one app
    session (its run is read back from the cache), so they share its cache folder."""
    monkeypatch.setenv("DEFF_CACHE_DIR", str(cache_dir))
    return cache_dir


@pytest.fixture(scope="module")
def app(cache_dir):
    """The app with a tiny-llama run pressed in the run panel (the Runs page; the current run
    of the session, its settings what the labs read)."""
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300).run()
    at.switch_page("pages/7_Runs.py").run()
    at.radio(key="model_source").set_value("Packaged (offline)")
    at.run()
    at.selectbox(key="model_packaged").set_value(RUN["model"])
    at.number_input(key="n").set_value(RUN["n"])
    at.number_input(key="max_tokens").set_value(RUN["max_tokens"])
    at.selectbox(key="passages").set_value("documents")  # the panel starts at the shipped run's
    at.button(key="run").click()
    at.run()
    assert_clean(at)
    return at


def goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(page)
    return at.run()


def test_interventions_page_shows_paper_then_measures(app):
    from deffcore.labs.interventions import intervention_table

    at = goto(app, "pages/8_Interventions.py")
    assert_clean(at)
    table = table_with(at, "default (Gemma-3-4B, paper)")
    assert "default (this run)" not in table.columns  # paper values before any run
    at.selectbox(key="iv_model").set_value("tiny-gemma3")
    at.number_input(key="iv_n").set_value(8)
    at.number_input(key="iv_max_tokens").set_value(24)
    at.button(key="iv_run").click()
    at.run()
    assert_clean(at)
    shown = table_with(at, "default (this run)")
    direct = intervention_table("tiny-gemma3", n=8, max_tokens=24)  # cache hit
    from deffcore.inputs.interventions import PAPER_LABELS

    for name in ("none", "no_post", "no_qk", "no_post_no_qk"):
        row = PAPER_LABELS[name]  # the picker's words in the table too
        assert shown.loc[row, "default (this run)"] == pytest.approx(direct.value(name, "default"))
        assert shown.loc[row, "token_normed (this run)"] == pytest.approx(
            direct.value(name, "token_normed")
        )
    # beside the paper's values, the run says its trust and how it differs
    (caveat,) = [w.value for w in at.warning if "Beside the paper" in w.value]
    assert "noise" in caveat and "published" in caveat
    assert "Run interventions: tiny" in at.button(key="iv_run").label.replace("\\", "")
    assert any("norm interventions" in t for t in titles(at))


def test_interventions_page_refuses_clearly(app):
    at = goto(app, "pages/8_Interventions.py")
    at.selectbox(key="iv_model").set_value("tiny-qwen3")  # QK norms, no post norms
    at.number_input(key="iv_n").set_value(8)
    at.button(key="iv_run").click()
    at.run()
    assert not at.exception
    assert any("post" in e.value and "Qwen3ForCausalLM" in e.value for e in at.error)


def test_pruning_page(app):
    from deffcore.labs.pruning import pruning_check

    at = goto(app, "pages/9_Pruning_boundary.py")
    assert_clean(at)
    at.text_input(key="pr_model").set_value("tiny-llama")
    at.number_input(key="pr_n").set_value(8)
    at.number_input(key="pr_heldout").set_value(4)
    at.number_input(key="pr_max_tokens").set_value(24)
    at.button(key="pr_run").click()
    at.run()
    assert_clean(at)
    direct = pruning_check("tiny-llama", n=8, n_heldout=4, max_tokens=24).to_dict()
    assert metric(at, "PPL₀ (held-out)") == f"{direct['ppl0']:.2f}"
    assert metric(at, "k₁.₁₀ by BI") == str(direct["k_1.10"]["bi"])
    shown = table_with(at, "Block Influence")
    assert shown.loc[2, "Block Influence"] == pytest.approx(direct["ppl"]["bi"]["2"])
    assert any("Held-out perplexity" in t for t in titles(at))


def test_carry_then_dynamics_pages(app):
    from deffcore.core.files import cache_dir

    at = goto(app, "pages/10_Residual_carry.py")
    assert_clean(at)
    assert table_with(at, "D_eff(h)/L").shape[0] == 4  # human column names, not deff_h_over_L
    snake = [c for d in at.dataframe for c in d.value.columns if SNAKE.fullmatch(str(c))]
    assert not snake
    at.multiselect(key="rc_gammas").set_value([1.0, 0.5])
    at.number_input(key="rc_seeds").set_value(1)
    at.number_input(key="rc_iters").set_value(4)
    at.number_input(key="rc_layers").set_value(2)
    at.number_input(key="rc_eval").set_value(2)
    at.button(key="rc_run").click()
    at.run()
    assert_clean(at)
    table = table_with(at, "γ")
    assert list(table["γ"]) == [1.0, 0.5]
    assert any("Residual carry" in t for t in titles(at))
    root = cache_dir() / "carry" / "tiny"  # the page saves checkpoints under the cache
    run_dirs = sorted(root.iterdir())
    assert [p.name for p in run_dirs if p.is_dir()] == ["gamma0.5_seed0", "gamma1_seed0"]
    # the caption names the checkpoint folder short, relative to the cache folder
    assert any("checkpoints in <cache>/carry/tiny" in c.value for c in at.caption)
    assert not any(str(root) in c.value for c in at.caption)

    at = goto(at, "pages/11_Training_dynamics.py")
    assert_clean(at)
    at.selectbox(key="dy_carry_run").set_value(str(root / "gamma1_seed0"))
    at.number_input(key="dy_n").set_value(8)
    at.button(key="dy_run").click()
    at.run()
    assert_clean(at)
    assert at.selectbox(key="dy_carry_run").options == ["tiny/gamma0.5_seed0", "tiny/gamma1_seed0"]
    points = table_with(at, "Status")
    assert list(points["Step"]) == [0, 2, 4]
    assert (points["Status"] == "ok").all()
    assert "D_eff / L" in points.columns and "Gap to F_L (%)" in points.columns
    assert any("3 of 3 checkpoints landed" in t for t in titles(at))


def test_aggregations_page_matches_the_library(app):
    from deffcore.labs.aggregations import AGGREGATION_LABELS, aggregation_table
    from deffcore.runs.measure import measure
    from deffcore.views.glossary import COLUMN_LABELS

    at = goto(app, "pages/12_Aggregations.py")
    assert_clean(at)
    shown = table_with(at, "unbiased CKA")
    assert list(shown.columns) == ["linear CKA", "unbiased CKA", "cosine"]
    direct = aggregation_table(measure(**RUN))
    for row in direct["rows"]:
        got = shown.loc[AGGREGATION_LABELS[row["aggregation"]], COLUMN_LABELS[row["metric"]]]
        assert got == pytest.approx(row["value_over_L"])
    assert np.isfinite(shown.to_numpy()).all()
    assert "linear CKA (paper)" in table_with(at, "linear CKA (paper)").columns


def test_dynamics_folder_field_obeys_the_local_path_setting(cache_dir, monkeypatch, tmp_path):
    """DEFF_LOCAL_PATHS=off: a typed checkpoint folder is refused with the same sentence whether
    or not it exists, and nothing under it is listed."""
    from streamlit.testing.v1 import AppTest

    monkeypatch.setenv("DEFF_LOCAL_PATHS", "off")
    texts = []
    for folder in (tmp_path, tmp_path / "absent"):
        page = str(REPO / "pages/11_Training_dynamics.py")
        at = AppTest.from_file(page, default_timeout=120).run()
        at.radio(key="dy_source").set_value("Local checkpoint folder").run()
        at.text_input(key="dy_folder").set_value(str(folder)).run()
        at.button(key="dy_run").click().run()
        assert not at.exception
        texts.append(" ".join(e.value for e in at.error))
    assert texts[0] and texts[0].replace(str(tmp_path), "") == texts[1].replace(
        str(tmp_path / "absent"), ""
    )
    assert "does not exist" not in texts[1]


def test_the_carry_button_says_first_what_its_checkpoints_write(cache_dir):
    # SPEC 14, "Writes said first": the cpu preset keeps 56 checkpoints (about 80 MB)
    from deffcore.labs.residual_carry import carry_cost, settings_from
    from deffcore.runs.planner import human_bytes

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300).run()
    at = goto(at, "pages/10_Residual_carry.py")
    assert_clean(at)
    assert not any("writes about" in c.value for c in at.caption)  # tiny: about 1.4 MB
    at.selectbox(key="rc_preset").set_value("cpu")
    at.multiselect(key="rc_gammas").set_value([1.0, 0.75, 0.5, 0.25])
    at.number_input(key="rc_seeds").set_value(2)
    at.number_input(key="rc_iters").set_value(240)
    at.number_input(key="rc_layers").set_value(12)
    at.number_input(key="rc_eval").set_value(40)
    at.run()
    assert_clean(at)
    bytes_ = carry_cost(settings_from("cpu", checkpoint_dir=str(cache_dir / "carry"))).disk
    said = f"writes about {human_bytes(bytes_)} into the cache folder"
    assert any(said in c.value for c in at.caption), [c.value for c in at.caption]


def test_the_dynamics_button_says_first_what_its_runs_write(cache_dir, tmp_path):
    # SPEC 14: each folder checkpoint is a run of its own, its cache entry named first
    import json

    cfg = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 1024,
        "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
        "vocab_size": 32000, "max_position_embeddings": 2048,
    }  # fmt: skip
    # a config only, as save_pretrained leaves it: 4 x 25 x 64 x 1,024 x 4 bytes a checkpoint,
    # and its atlas
    root = tmp_path / "cps"
    for step in (1000, 8000):
        (root / f"step{step}").mkdir(parents=True)
        (root / f"step{step}" / "config.json").write_text(json.dumps(cfg))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300).run()
    at = goto(at, "pages/11_Training_dynamics.py")
    at.radio(key="dy_source").set_value("Local checkpoint folder").run()
    at.text_input(key="dy_folder").set_value(str(root)).run()
    at.number_input(key="dy_n").set_value(64).run()
    assert_clean(at)
    said = [c.value for c in at.caption if "The sweep" in c.value]
    assert said and "writes about 50\\.8 MiB into the cache folder" in said[0], said
    at.radio(key="dy_source").set_value("Hugging Face revisions").run()
    assert_clean(at)  # a model this machine cannot size: its time line says so, no write
