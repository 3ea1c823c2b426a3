"""The depth-use atlas across models (SPEC 16): the correlation lab's atlas panel and
correlations, the `correlate --y` atlas columns, and the sweep's atlas column."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deffcore.extraction.atlas import read_rows
from deffcore.inputs.model import Kind
from deffcore.labs import correlation_lab, panels
from deffcore.measures.atlas import ATLAS_COLUMNS, columns_of

MODELS = ("tiny-llama", "tiny-gpt2", "tiny-qwen2")


@pytest.fixture
def tiny_counts_as_trained(monkeypatch):
    """The tiny test models stand in for trained ones here (panels leave them out otherwise),
    and the panel holds this machine's runs alone (the shipped runs carry atlases too: they
    are the subject of `test_the_shipped_trained_models_are_in_the_atlas_panel`)."""
    from deffcore.views import run

    monkeypatch.setattr(panels, "RANDOM_WEIGHTS", (Kind.RANDOM,))
    monkeypatch.setattr(run, "load_gallery", lambda *a, **k: [])


def test_the_shipped_trained_models_are_in_the_atlas_panel():
    """Both packaged models' shipped runs carry their atlas (SPEC 16): points of the panel,
    their columns the files' own; a random-weight null never is one."""
    from deffcore.views.run import load_gallery

    rows = {r["model"]: r for r in panels.atlas_panel()}
    assert {"smollm2-135m", "gemma3-270m"} <= set(rows)
    assert not [m for m in rows if m.startswith("random:")]
    for view in load_gallery():
        model = view.spec["model"]
        if model in ("smollm2-135m", "gemma3-270m"):
            assert rows[model]["source"] == "precomputed" and rows[model]["n"] == view.n
            want = view.atlas().columns()
            assert {k: rows[model][k] for k in ATLAS_COLUMNS} == pytest.approx(want)


def test_the_atlas_panel_pairs_each_models_atlas_with_its_own_run(
    tiny_dataset, tiny_counts_as_trained
):
    from deffcore.runs.measure import measure, measure_spec

    runs = {m: measure(m, dataset=tiny_dataset, n=8, max_tokens=16) for m in MODELS}
    measure("tiny-llama", dataset=tiny_dataset, n=6, max_tokens=16)  # smaller: not the point
    measure("random:tiny-llama:1", dataset=tiny_dataset, n=8, max_tokens=16)  # never a point
    old = measure_spec(
        runs["tiny-gpt2"].spec.__class__(
            **{**runs["tiny-gpt2"].spec.__dict__, "model": "tiny-qwen3"}
        ),
        atlas=False,
    )
    rows = {r["model"]: r for r in panels.atlas_panel()}
    assert set(rows) == set(MODELS)  # tiny-qwen3 has no atlas; the random null never counts
    assert old.cached is False and "tiny-qwen3" not in rows
    for model, m in runs.items():
        row = rows[model]
        assert row["source"] == "cached" and row["n"] == m.n == 8
        assert row["deff_over_L"] == pytest.approx(m.summary().deff_over_L)
        want = columns_of(read_rows(m.spec))
        assert {k: row[k] for k in ATLAS_COLUMNS} == pytest.approx(want)
    out = correlation_lab.atlas_correlations()
    assert [r["y"] for r in out["results"]] == list(ATLAS_COLUMNS)
    for result in out["results"]:
        if "skipped" in result:  # a column constant over the panel cannot correlate
            continue
        assert result["n"] == 3
        got = {p["model"]: (p["x"], p["y"]) for p in result["points"]}
        for model in MODELS:
            assert got[model] == pytest.approx(
                (rows[model]["deff_over_L"], rows[model][result["y"]])
            )


def test_too_few_models_are_reported_with_their_points(tiny_dataset, tiny_counts_as_trained):
    from deffcore.runs.measure import measure

    measure("tiny-llama", dataset=tiny_dataset, n=8, max_tokens=16)
    out = correlation_lab.atlas_correlations(ys=("bi_second_half",))
    (result,) = out["results"]
    assert result["n"] == 1 and "at least 3" in result["skipped"]
    assert [p["model"] for p in result["points"]] == ["tiny-llama"]
    with pytest.raises(Exception, match="Unknown atlas column"):
        correlation_lab.atlas_correlations(ys=("nope",))


def test_shipped_runs_with_an_atlas_are_points_after_the_cached_ones(
    tiny_dataset, monkeypatch, tiny_counts_as_trained
):
    """A precomputed snapshot that carries an atlas is a point (`precomputed`), unless the same
    model was measured here."""
    from deffcore.lenses.atlas import atlas_of
    from deffcore.runs.measure import measure
    from deffcore.views import run

    m = measure("tiny-gpt2", dataset=tiny_dataset, n=8, max_tokens=16)
    atlas_of(m)
    shipped = run.Run.from_snapshot(run.Run.from_measurement(m).to_snapshot())
    monkeypatch.setattr(run, "load_gallery", lambda *a, **k: [shipped])
    rows = panels.precomputed_atlas_rows()
    assert [r["source"] for r in rows] == ["precomputed"]
    assert rows[0]["phase_share"] == pytest.approx(shipped.atlas().columns()["phase_share"])
    panel = {r["model"]: r for r in panels.atlas_panel()}
    assert panel["tiny-gpt2"]["source"] == "cached"  # this machine's own run first


def test_correlate_cli_takes_an_atlas_column(capsys, tiny_dataset, tiny_counts_as_trained):
    from deffcore.cli.main import main
    from deffcore.runs.measure import measure

    for model in MODELS:
        measure(model, dataset=tiny_dataset, n=8, max_tokens=16)
    assert main(["correlate", "--y", "r_late_over_early", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kind"] == "atlas" and [r["y"] for r in out["results"]] == ["r_late_over_early"]
    assert out["results"][0]["n"] == 3
    assert main(["correlate", "--y", "r_late_over_early"]) == 0
    assert "r_late_over_early: n=3" in capsys.readouterr().out


def test_the_sweep_has_an_atlas_column(tiny_dataset):
    from deffcore.work.sweep.cells import Cell
    from deffcore.work.sweep.runner import CELL_KEYS, run_sweep

    cells = [
        Cell(model="tiny-llama", dataset=tiny_dataset),
        Cell(model="tiny-gpt2", dataset=tiny_dataset),
    ]
    first = run_sweep(cells, n=8, max_tokens=16, engine="serial")
    keys = list(first.to_dict()["cells"][0])
    assert keys == list(CELL_KEYS) and set(ATLAS_COLUMNS) <= set(keys)
    for row in first.rows:
        assert row["status"] == "done" and row["atlas_status"] == "done"
        from deffcore.runs.measure import measure

        m = measure(row["model"], dataset=tiny_dataset, n=8, max_tokens=16)
        assert {k: row[k] for k in ATLAS_COLUMNS} == pytest.approx(columns_of(read_rows(m.spec)))
    again = run_sweep(cells, n=8, max_tokens=16, engine="serial")
    assert [r["status"] for r in again.rows] == ["cached", "cached"]
    assert [r["atlas_status"] for r in again.rows] == ["stored", "stored"]
    assert np.isfinite([again.rows[0][k] for k in ATLAS_COLUMNS]).all()


def test_a_sweep_cell_cached_before_the_atlas_says_missing(tiny_dataset):
    from deffcore.runs.measure import measure_spec, run_spec
    from deffcore.work.sweep.cells import Cell
    from deffcore.work.sweep.runner import run_sweep

    spec, _ = run_spec("tiny-qwen3", tiny_dataset, 8, 16, 0, "cka")
    measure_spec(spec, atlas=False)
    (row,) = run_sweep(
        [Cell(model="tiny-qwen3", dataset=tiny_dataset)], n=8, max_tokens=16, engine="serial"
    ).rows
    assert row["status"] == "cached" and row["atlas_status"] == "missing"
    assert all(row[k] is None for k in ATLAS_COLUMNS)


def test_the_pruning_lab_ranks_by_the_atlas_token_weighted_bi(tiny_dataset, tiny_model):
    """Passages of different lengths: the check's BI is ShortGPT's token-weighted one (the
    atlas's `block_influence_tokens`), not the passage-weighted mean."""
    from deffcore.inputs.texts import load_passages
    from deffcore.labs.pruning import block_influence, pruning_check
    from deffcore.measures.atlas import summarize

    loaded = tiny_model("llama")
    out = pruning_check(
        "tiny-llama", tiny_dataset, n=6, n_heldout=4, max_tokens=64, loaded=loaded, store=False
    ).to_dict()
    measured = load_passages(tiny_dataset, 6, seed=0)
    direct = block_influence(loaded.model, loaded.tokenizer, measured, max_tokens=64)
    np.testing.assert_allclose(out["block_influence"], direct, rtol=1e-6)
    a = summarize(_rows_of(loaded, measured))
    np.testing.assert_allclose(out["block_influence"], a.block_influence_tokens, rtol=1e-6)
    assert not np.allclose(out["block_influence"], a.block_influence, rtol=1e-4)


def _rows_of(loaded, texts):
    from deffcore.extraction.atlas import AtlasTap
    from deffcore.extraction.forward import extract_pooled

    tap = AtlasTap()
    pooled = extract_pooled(loaded, texts, max_tokens=64, taps=[tap])
    return tap.rows(pooled.lengths)
