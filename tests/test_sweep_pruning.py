"""The sweep's optional pruning column (deffcore.work.sweep.pruning_column): off by default, each
trained cell's pruning check equal to `pruning_check` on the same settings, stored and read
back, skipped cells and failed checks said in the row, the CLI flag and the manifest key."""

from __future__ import annotations

import json

import pytest

from deffcore.cli.main import main
from deffcore.core.errors import DeffError
from deffcore.labs import pruning
from deffcore.work.sweep.cells import Cell, manifest_cells
from deffcore.work.sweep.pruning_column import (
    PRUNING_KEYS,
    PruningOptions,
    manifest_pruning,
    pruning_options,
)
from deffcore.work.sweep.runner import CELL_KEYS, run_sweep

SMALL = {"n": 8, "max_tokens": 24}
PRUNE = {"n": 6, "n_heldout": 4}


def test_off_by_default_no_columns_no_check(tiny_dataset, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("no pruning check without the option")

    monkeypatch.setattr(pruning, "pruning_check", forbidden)
    result = run_sweep([Cell("tiny-llama", dataset=tiny_dataset)], **SMALL, engine="serial")
    assert result.rows[0]["status"] == "done" and "k_110" not in result.rows[0]
    assert list(result.to_dict()["cells"][0]) == list(CELL_KEYS)


def test_trained_cells_get_the_pruning_check_others_say_why_not(tiny_dataset):
    cells = [
        Cell("tiny-llama", dataset=tiny_dataset),
        Cell("tiny-llama", seed=3, dataset=tiny_dataset),  # a random-weight null
        Cell("tiny-gemma3", intervention="no_post", dataset=tiny_dataset),
    ]
    result = run_sweep(cells, **SMALL, engine="serial", pruning=PRUNE)
    trained, null, intervened = result.rows
    assert [r["status"] for r in result.rows] == ["done"] * 3  # the measurement stands
    direct = pruning.pruning_check(
        "tiny-llama", tiny_dataset, **PRUNE, max_tokens=24, seed=0, metric="cka"
    ).to_dict()
    assert direct["cached"]  # the sweep stored it under the same identity
    assert trained["pruning_status"] == "done" and trained["pruning_error"] is None
    for key in ("ppl0", "k_110", "f_110"):
        assert trained[key] == direct[key]
    assert trained["f_110"] == trained["k_110"] / 4  # tiny-llama has 4 blocks
    for row, why in ((null, "random-weight null"), (intervened, "norm-intervention")):
        assert row["pruning_status"] == "skipped" and why in row["pruning_error"]
        assert row["k_110"] is None
    cells_json = result.to_dict()["cells"]
    assert list(cells_json[0]) == [*CELL_KEYS, *PRUNING_KEYS]
    assert cells_json[0]["k_110"] == direct["k_110"]

    again = run_sweep(cells[:1], **SMALL, engine="serial", pruning=PRUNE)
    (row,) = again.rows
    assert (row["status"], row["pruning_status"]) == ("cached", "stored")
    assert row["ppl0"] == trained["ppl0"]


def test_a_stored_check_is_read_without_loading_the_model(tiny_dataset, monkeypatch):
    run_sweep([Cell("tiny-llama", dataset=tiny_dataset)], **SMALL, engine="serial", pruning=PRUNE)

    def no_load(*args, **kwargs):
        raise AssertionError("a cached cell with a stored check loads no model")

    monkeypatch.setattr("deffcore.inputs.model.load_model", no_load)
    result = run_sweep(
        [Cell("tiny-llama", dataset=tiny_dataset)], **SMALL, engine="serial", pruning=PRUNE
    )
    assert result.rows[0]["pruning_status"] == "stored"


def test_a_failing_check_leaves_the_cell_landed(tiny_dataset):
    # 12 passages cannot give 8 measured + 8 held-out ones that do not overlap
    result = run_sweep(
        [Cell("tiny-llama", dataset=tiny_dataset)], **SMALL, engine="serial",
        pruning={"n": 8, "n_heldout": 8},
    )  # fmt: skip
    (row,) = result.rows
    assert row["status"] == "done" and row["deff_over_L"] is not None
    assert row["pruning_status"] == "failed" and "fewer than n=16" in row["pruning_error"]
    assert row["k_110"] is None


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ({"n": 2}, "n \\(measured passages\\) must be an integer >= 4"),
        ({"n_heldout": 0}, "n_heldout \\(held-out passages\\) must be a positive integer"),
        ({"k": 1}, "unknown key\\(s\\) k"),
        ("yes", "must be true, false or a mapping"),
    ],
)
def test_bad_pruning_options_refuse_the_sweep(value, match):
    with pytest.raises(DeffError, match=match):
        run_sweep([Cell("tiny-llama")], **SMALL, pruning=value)


def test_options_from_values():
    assert pruning_options(None) is None and pruning_options(False) is None
    assert pruning_options(True) == PruningOptions(64, 32)
    assert pruning_options({"n_heldout": 8}) == PruningOptions(64, 8)


def test_manifest_key(tmp_path):
    path = tmp_path / "cells.yaml"
    path.write_text("cells: [tiny-llama]\npruning: {n: 6, n_heldout: 4}\n")
    assert manifest_cells(path) == [Cell("tiny-llama")]  # the key is allowed
    assert manifest_pruning(path) == PruningOptions(6, 4)
    path.write_text("cells: [tiny-llama]\npruning: true\n")
    assert manifest_pruning(path) == PruningOptions()
    path.write_text("cells: [tiny-llama]\n")
    assert manifest_pruning(path) is None


def test_cli_flag_manifest_and_table(capsys, tiny_dataset, tmp_path):
    argv = ["sweep", "--models", "tiny-llama", "--dataset", tiny_dataset, "--n", "8",
            "--max-tokens", "24", "--engine", "serial", "--no-progress"]  # fmt: skip
    assert main([*argv, "--pruning-n", "6", "--pruning-heldout", "4", "--json"]) == 0
    (cell,) = json.loads(capsys.readouterr().out)["cells"]
    assert cell["pruning_status"] == "done" and isinstance(cell["k_110"], int)
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"cells": [{"model": "tiny-llama", "dataset": tiny_dataset}],
                                    "pruning": {"n": 6, "n_heldout": 4}}))  # fmt: skip
    assert main(["sweep", "--manifest", str(manifest), "--n", "8", "--max-tokens", "24",
                 "--engine", "serial", "--no-progress"]) == 0  # fmt: skip
    table = capsys.readouterr().out
    assert "k_1.10" in table and "f_1.10" in table and f"{cell['f_110']:.3f}" in table
    assert main([*argv, "--pruning-n", "2"]) == 2
    assert "must be an integer >= 4" in capsys.readouterr().err
