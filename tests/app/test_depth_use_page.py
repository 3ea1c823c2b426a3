"""AppTest of the Depth use page (SPEC 16): the atlas beside the run's lag profile and D_eff,
its numbers equal to the library's and the CLI's (one test), computed on the page when a run
has none, the skip effect on request, the shipped snapshot without an atlas said in words."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from apptest_helpers import assert_clean, chart, plain, plotly_array
from streamlit.testing.v1 import AppTest

from deffcore.views.run import Run

REPO = Path(__file__).resolve().parents[2]
RUN = {"model": "tiny-gemma3", "dataset": "bbc-news", "n": 10, "max_tokens": 24, "seed": 0}
PAGE = "pages/16_Depth_use.py"


def open_page(view=None) -> AppTest:
    from explorer.views import VIEW_KEY

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    if view is not None:
        at.session_state[VIEW_KEY] = view
    at.run()
    at.switch_page(PAGE)
    return at.run()


def _table(at: AppTest):
    (frame,) = [d.value for d in at.dataframe if "Relative contribution r_l" in d.value.columns]
    return frame


def test_page_cli_and_library_agree(measurement, capsys):
    import deffcore as dc
    from deffcore.cli.main import main

    lib = dc.atlas(
        RUN["model"], n=RUN["n"], max_tokens=RUN["max_tokens"], logit_lens=True
    ).to_dict()
    argv = [
        "atlas",
        "--model",
        RUN["model"],
        "--n",
        "10",
        "--max-tokens",
        "24",
        "--json",
        "--no-progress",
        "--logit-lens",
    ]
    assert main(argv) == 0
    cli = json.loads(capsys.readouterr().out)
    at = open_page(Run.from_measurement(measurement))
    assert_clean(at)
    page = _table(at)
    for name, column in (
        ("relative_contribution", "Relative contribution r_l"),
        ("alignment", "Alignment c_l"),
        ("block_influence", "Block Influence (BI)"),
    ):
        np.testing.assert_allclose(page[column].to_numpy(), lib[name], rtol=1e-12)
        np.testing.assert_allclose(cli[name], lib[name], rtol=1e-12)
    low = page["relative contribution low"].to_numpy()
    np.testing.assert_allclose(low, lib["intervals"]["relative_contribution"]["low"])
    np.testing.assert_allclose(cli["intervals"]["relative_contribution"]["low"], low)
    metrics = {m.label: m.value for m in at.metric}
    assert (
        metrics["Phase point"]
        == f"after block {lib['phase_point']}"
        == (f"after block {cli['phase_point']}")
    )
    assert metrics["Mean BI, second half"] == f"{lib['columns']['bi_second_half']:.4f}"
    assert metrics["D_eff / L"] == f"{lib['run']['deff_over_L']:.4f}"
    heat = chart(at, "Angular distance")
    np.testing.assert_allclose(plotly_array(heat["data"][0]["z"]), lib["angular_distance"])
    np.testing.assert_allclose(plotly_array(heat["data"][0]["z"]), cli["angular_distance"])
    lag = chart(at, "Lag decay")
    np.testing.assert_allclose(plotly_array(lag["data"][0]["y"]), lib["run"]["lag_profile"])
    # where predictions form (SPEC 16.2): chart, metric and table equal the library's and CLI's
    lens = chart(at, "Where predictions form")
    np.testing.assert_allclose(plotly_array(lens["data"][0]["y"]), lib["logit_lens"]["kl"])
    np.testing.assert_allclose(cli["logit_lens"]["kl"], lib["logit_lens"]["kl"], rtol=1e-12)
    np.testing.assert_allclose(
        plotly_array(lens["data"][1]["y"]), lib["logit_lens"]["top1_agreement"]
    )
    depth = lib["logit_lens"]["prediction_depth"]
    assert metrics["Prediction depth"] == f"{depth:.2f} of {lib['layers']}"
    (table,) = [d.value for d in at.dataframe if "KL(p_L ‖ p_l)" in d.value.columns]
    np.testing.assert_allclose(table["Top-1 = final top-1"], lib["logit_lens"]["top1_agreement"])
    # the consecutive-layer geometry per block (SPEC 16.3)
    (geo,) = [d.value for d in at.dataframe if "Procrustes residual" in d.value.columns]
    np.testing.assert_allclose(
        geo["Procrustes rotation (degrees)"], lib["geometry"]["rotation_angle"], rtol=1e-9
    )
    np.testing.assert_allclose(cli["geometry"]["rotation_angle"], lib["geometry"]["rotation_angle"])


def test_the_glossary_names_each_measures_paper(measurement):
    at = open_page(Run.from_measurement(measurement))
    text = " ".join(plain(m.value) for m in at.markdown)
    for words in (
        "Csordás, Manning & Potts (2025)",
        "§3.2",
        "Men et al. (2024)",
        "Gromov et al. (ICLR 2025)",
        "phase point",
    ):
        assert words in text, words


def test_a_run_without_an_atlas_computes_it_then_the_skip_effect():
    from deffcore.extraction import atlas as atlas_store
    from deffcore.runs.measure import measure, measure_spec, run_spec

    spec, _ = run_spec("tiny-llama", "bbc-news", 8, 24, 1, "cka")
    m = measure_spec(spec, atlas=False)  # measured before the atlas existed
    at = open_page(Run.from_measurement(m))
    assert_clean(at)
    assert any("has none yet" in plain(i.value) for i in at.info)
    at.button(key="du_compute").click().run()
    assert_clean(at)
    assert atlas_store.read_rows(spec) is not None
    assert _table(at)["Block"].tolist() == [1, 2, 3, 4]
    at.button(key="du_skip").click().run()
    assert_clean(at)
    skip = chart(at, "Skipping one block")
    stored = atlas_store.read_skip(spec)
    np.testing.assert_allclose(plotly_array(skip["data"][1]["y"]), stored["kl"].mean(0))
    assert measure("tiny-llama", n=8, max_tokens=24, seed=1).cached  # the run itself untouched


def test_the_shipped_snapshot_shows_its_atlas_or_says_it_has_none():
    from deffcore.views.run import load_snapshot

    shipped = load_snapshot().atlas()
    at = open_page()
    assert_clean(at)
    assert chart(at, "Lag decay")  # the run's own lag profile is there either way
    if shipped is None:  # a snapshot made before the atlas existed: words, no compute button
        assert any("carries no depth-use atlas" in plain(i.value) for i in at.info)
        assert not [b for b in at.button if b.key == "du_compute"]
        return
    np.testing.assert_allclose(
        _table(at)["Relative contribution r_l"].to_numpy(), shipped.relative_contribution
    )


def test_each_button_says_first_what_it_writes_into_the_cache(monkeypatch):
    # SPEC 14, "Writes said first": a big run's atlas (its (N, L+1, L+1) angular distances)
    # is named beside the button; here the formula is made to say 100 MB
    from deffcore.extraction import atlas as atlas_store
    from deffcore.runs.measure import measure_spec, run_spec

    spec, _ = run_spec("tiny-llama", "bbc-news", 8, 24, 2, "cka")
    m = measure_spec(spec, atlas=False)
    monkeypatch.setattr(atlas_store, "rows_bytes", lambda *a, **k: 100_000_000)
    at = open_page(Run.from_measurement(m))
    assert_clean(at)
    said = [plain(c.value) for c in at.caption if plain(c.value).startswith("The pass:")]
    assert said and "writes about 95.4 MiB into the cache folder" in said[0], said
    monkeypatch.undo()
    at.button(key="du_compute").click().run()
    said = [plain(c.value) for c in at.caption if plain(c.value).startswith("The pass:")]
    assert len(said) == 2 and not any("writes" in s for s in said), said  # lens, skip: small
