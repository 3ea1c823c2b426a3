"""`python -m deffcore measure` and `runs`: JSON shape, cache hit, table, listing, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from deffcore.cli import main
from deffcore.constants import POOLINGS

REPO = Path(__file__).resolve().parent.parent


def _measure_json(capsys, dataset: str, *extra: str) -> dict:
    args = ["measure", "--model", "tiny-llama", "--dataset", dataset, "--n", "8",
            "--max-tokens", "32", "--json", "--no-progress", *extra]  # fmt: skip
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_measure_json_and_cache_hit(capsys, tiny_dataset):
    first = _measure_json(capsys, tiny_dataset)
    for key in ("model", "layers", "d_model", "n", "reference_FL", "pos0_norm_ratio", "results",
                "n_dropped", "cka_bias", "cached", "elapsed_s"):  # fmt: skip
        assert key in first
    assert (first["model"], first["layers"], first["d_model"], first["n"]) == (
        "tiny-llama",
        4,
        64,
        8,
    )
    assert set(first["results"]) == set(POOLINGS)
    for r in first["results"].values():
        assert {"deff", "deff_over_L", "gap_pct", "rho1"} <= set(r)
    assert first["cached"] is False
    second = _measure_json(capsys, tiny_dataset)
    assert second["cached"] is True and second["results"] == first["results"]


def test_random_seeds_add_the_null_band(capsys, tiny_dataset):
    d = _measure_json(capsys, tiny_dataset, "--random-seeds", "0,1")
    null = d["random_null"]
    assert null["models"] == ["random:tiny-llama:0", "random:tiny-llama:1"]
    band = null["results"]["default"]
    assert band["low"] <= band["mean"] <= band["high"] and len(band["deff_over_L"]) == 2


def test_table_output_and_runs(capsys, tiny_dataset):
    assert main(["measure", "--model", "tiny-gpt2", "--dataset", tiny_dataset, "--n", "8",
                 "--max-tokens", "16", "--no-progress"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "D_eff/L" in out and "token_normed" in out and "reference F_L" in out
    assert main(["runs", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert len(runs) == 1 and runs[0]["spec"]["model"] == "tiny-gpt2"
    key = runs[0]["key"]
    assert main(["runs"]) == 0
    assert key in capsys.readouterr().out
    assert main(["runs", "--delete", key]) == 0
    capsys.readouterr()
    assert main(["runs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["runs", "--delete", key]) == 2
    assert "No cached run" in capsys.readouterr().err


def test_bad_input_is_one_line_with_exit_code_2(capsys, tiny_dataset):
    args = ["measure", "--model", "tiny-nope", "--dataset", tiny_dataset, "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Unknown tiny model") and err.count("\n") == 1
    assert main(["measure", "--model", "tiny-llama", "--dataset", tiny_dataset,
                 "--random-seeds", "a,b"]) == 2  # fmt: skip


def test_python_dash_m_entry_point(tiny_dataset, deff_cache_dir):
    env = {**os.environ, "DEFF_CACHE_DIR": str(deff_cache_dir)}
    cmd = [sys.executable, "-m", "deffcore", "measure", "--model", "tiny-qwen3", "--dataset",
           tiny_dataset, "--n", "6", "--max-tokens", "16", "--json"]  # fmt: skip
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    d = json.loads(res.stdout)
    assert d["model"] == "tiny-qwen3" and d["n"] == 6 and d["cached"] is False


def test_runs_lists_a_corrupt_entry_without_crashing(capsys, deff_cache_dir):
    (deff_cache_dir / "abc123").mkdir(parents=True)
    (deff_cache_dir / "abc123" / "meta.json").write_text("{truncated")
    assert main(["runs"]) == 0
    assert "abc123" in capsys.readouterr().out
    assert main(["runs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["corrupt"] is True
