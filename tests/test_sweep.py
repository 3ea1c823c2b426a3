"""deffcore.work.sweep and `python -m deffcore sweep` without Ray: cells, manifests, the serial
engine,
resumption, fault isolation, JSON shape, exit codes and Table S7's statistics.

The Ray engine (local runtime with 2 workers, a joined head node) is in test_sweep_cluster.py.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from deffcore.cli.main import main
from deffcore.core.constants import POOLINGS
from deffcore.core.errors import DeffError
from deffcore.extraction import cache
from deffcore.runs.measure import measure
from deffcore.work.sweep.cells import Cell, grid_cells, manifest_cells
from deffcore.work.sweep.checks import SweepError
from deffcore.work.sweep.runner import CELL_KEYS, SweepResult, run_sweep
from deffcore.work.sweep.table_s7 import paper_table_s7, table_s7_cells, table_s7_rows

SMALL = {"n": 8, "max_tokens": 24}


def test_grid_is_the_product_in_order_and_random_nulls_ignore_revisions():
    cells = grid_cells(
        ["a", "b"], revisions=["r1", "r2"], random_seeds=[0, 1], interventions=["none", "no_qk"]
    )
    # per model: 2 revisions x 2 interventions trained + 2 seeds x 2 interventions random
    assert len(cells) == 2 * (2 * 2 + 2 * 2)
    assert cells[0] == Cell("a", "r1", None, "none")
    assert cells[1] == Cell("a", "r1", None, "no_qk")
    assert Cell("a", None, 1, "no_qk") in cells
    assert not any(c.seed is not None and c.revision for c in cells)
    assert Cell("b", None, 0, "none").model_spec == "random:b:0"


def test_grid_reads_random_specs_and_validates():
    cells = grid_cells(["random:tiny-llama:7"], random_seeds=[1])
    assert cells == [Cell("tiny-llama", None, 7)]  # a random null has no random null
    assert grid_cells(["m"], random_seeds=[3], trained=False) == [Cell("m", None, 3)]
    with pytest.raises(SweepError, match="at least one model"):
        grid_cells([" "])
    with pytest.raises(SweepError, match="Unknown norm intervention 'no_mlp'"):
        grid_cells(["m"], interventions=["no_mlp"])
    with pytest.raises(SweepError, match="--random-only needs"):
        grid_cells(["m"], trained=False)


def test_manifest_yaml_and_json(tmp_path):
    y = tmp_path / "cells.yaml"
    y.write_text(
        "cells:\n  - model: tiny-llama\n  - {model: tiny-gpt2, seed: 2, intervention: no_qk}\n"
        "  - tiny-qwen2\n"
        "grid:\n  models: [tiny-olmo2]\n  random_seeds: [0]\n"
    )
    assert manifest_cells(y) == [
        Cell("tiny-llama"),
        Cell("tiny-gpt2", None, 2, "no_qk"),
        Cell("tiny-qwen2"),
        Cell("tiny-olmo2"),
        Cell("tiny-olmo2", None, 0),
    ]
    j = tmp_path / "cells.json"
    j.write_text(json.dumps([{"model": "tiny-llama", "dataset": "x.txt", "revision": "v1"}]))
    assert manifest_cells(j) == [Cell("tiny-llama", "v1", None, "none", "x.txt")]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("cells: [", "not valid YAML/JSON"),
        ("{}", "must be a list of cells"),
        ("cells:\n  - {revision: x}", "needs a 'model' string"),
        ("cells:\n  - {model: m, layers: 3}", "unknown field"),
        ("cells:\n  - {model: m, seed: one}", "seed must be an integer"),
        ("cells: []\nextra: 1", "unknown key"),
        ("grid:\n  modles: [a]", "must be a mapping of"),
    ],
)
def test_malformed_manifest_is_a_sweep_error(tmp_path, text, match):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    with pytest.raises(SweepError, match=match):
        manifest_cells(path)


def test_missing_manifest(tmp_path):
    with pytest.raises(SweepError, match="Cannot read the sweep manifest"):
        manifest_cells(tmp_path / "none.json")


def test_serial_cells_equal_measure_rerun_is_cached_and_bad_cell_fails_alone(tiny_dataset):
    cells = [Cell("tiny-llama"), Cell("no-such-model-xyz"), Cell("tiny-gpt2", seed=1)]
    landed = []
    result = run_sweep(
        [Cell(c.model, c.revision, c.seed, c.intervention, tiny_dataset) for c in cells],
        **SMALL,
        engine="serial",
        on_cell=lambda row, k, total: landed.append((row["status"], k, total)),
    )
    assert result.engine == "serial" and result.address is None
    status = [r["status"] for r in result.rows]
    assert status == ["done", "failed", "done"]
    assert [k for _, k, _ in landed] == [1, 2, 3] and {t for *_, t in landed} == {3}
    bad = result.rows[1]
    assert "no-such-model-xyz" in bad["error"] and bad["deff_over_L"] is None
    assert bad["error"].endswith(".") and "\n" not in bad["error"]
    for row, model in ((result.rows[0], "tiny-llama"), (result.rows[2], "random:tiny-gpt2:1")):
        m = measure(model=model, dataset=tiny_dataset, **SMALL)
        assert m.cached  # the sweep stored it: measure reads the same entry
        assert row["deff_over_L"] == m.summary("default").deff_over_L
        assert row["gap_pct"] == m.summary("default").gap_pct
        for p in POOLINGS:
            assert row["results"][p]["gap_pct"] == m.summary(p).gap_pct
        assert row["key"] == m.spec.key()
        assert row["worker"].split(":")[1].isdigit() and row["seconds"] > 0
    again = run_sweep(
        [Cell(c.model, c.revision, c.seed, c.intervention, tiny_dataset) for c in cells],
        **SMALL,
        engine="serial",
    )
    assert [r["status"] for r in again.rows] == ["cached", "failed", "cached"]
    assert again.rows[0]["deff_over_L"] == result.rows[0]["deff_over_L"]


def test_sweep_reads_what_measure_cached(tiny_dataset):
    m = measure(model="tiny-qwen3", dataset=tiny_dataset, **SMALL)
    result = run_sweep([Cell("tiny-qwen3", dataset=tiny_dataset)], **SMALL, engine="serial")
    assert result.rows[0]["status"] == "cached"
    assert result.rows[0]["gap_pct"] == m.summary().gap_pct


def test_unsupported_intervention_fails_its_cell_only(tiny_dataset):
    # tiny-llama has neither post norms nor QK norms; tiny-gemma3 has both
    cells = [
        Cell("tiny-llama", intervention="no_post"),
        Cell("tiny-gemma3", intervention="no_post"),
    ]
    cells = [Cell(c.model, None, None, c.intervention, tiny_dataset) for c in cells]
    result = run_sweep(cells, **SMALL, engine="serial")
    assert [r["status"] for r in result.rows] == ["failed", "done"]
    assert "post" in result.rows[0]["error"]


def test_malformed_sweeps_raise():
    with pytest.raises(SweepError, match="no cells"):
        run_sweep([])
    with pytest.raises(SweepError, match="Unknown sweep engine"):
        run_sweep([Cell("tiny-llama")], engine="dask")
    with pytest.raises(SweepError, match="Unknown pooling"):
        run_sweep([Cell("tiny-llama")], pooling="mean")
    with pytest.raises(SweepError, match="cpus-per-cell"):
        run_sweep([Cell("tiny-llama")], cpus_per_cell=0)


def _cli_json(capsys, *args: str) -> tuple[int, dict]:
    code = main(["sweep", *args, "--json", "--no-progress"])
    out = capsys.readouterr().out
    return code, (json.loads(out) if code == 0 else {})


def test_cli_json_shape_and_exit_codes(capsys, tiny_dataset):
    code, out = _cli_json(
        capsys, "--models", "tiny-llama,nope-model-q", "--dataset", tiny_dataset,
        "--n", "8", "--max-tokens", "24", "--engine", "serial",
    )  # fmt: skip
    assert code == 0  # the sweep ran although one cell failed
    assert list(out) == ["engine", "address", "cells"]
    assert out["engine"] == "serial" and out["address"] is None
    assert [list(c) for c in out["cells"]] == [list(CELL_KEYS)] * 2
    assert [c["status"] for c in out["cells"]] == ["done", "failed"]
    assert out["cells"][0]["seed"] is None and out["cells"][0]["dataset"] == tiny_dataset

    for bad in (["--models", ""], ["--models", "m", "--interventions", "zap"],
                ["--models", "m", "--random-seeds", "x"], ["--manifest", "/nonexistent.yaml"],
                ["--models", "m", "--n", "2"]):  # fmt: skip
        assert main(["sweep", *bad, "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1


def test_cli_table_output(capsys, tiny_dataset):
    code = main(["sweep", "--models", "tiny-llama", "--random-seeds", "0", "--dataset",
                 tiny_dataset, "--n", "8", "--max-tokens", "24", "--no-progress"])  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "random:tiny-llama:0" in out and "2 done, 0 cached, 0 failed" in out


def test_table_s7_grid_and_paper_values():
    cells = table_s7_cells()
    assert len(cells) == 12
    assert {c.model_spec for c in cells} == {f"random:gemma3-270m:{s}" for s in (0, 1, 2)}
    assert {c.intervention for c in cells} == {"none", "no_post", "no_qk", "no_post_no_qk"}
    paper = paper_table_s7()
    assert paper[("none", "default")]["value"] == 43.7
    assert paper[("none", "default")]["sd"] == 0.2
    assert paper[("no_post", "first_non_bos")]["value"] == 43.6
    assert paper[("no_post_no_qk", "max_pos0_ratio")]["value"] == 1.19
    assert len(paper) == 24


def test_table_s7_rows_mean_and_sample_sd():
    rng = np.random.default_rng(0)
    rows, truth = [], {}
    for seed in (0, 1, 2):
        for name in ("none", "no_qk"):
            results = {
                p: {"gap_pct": float(rng.normal(40, 2)), "deff_over_L": 0.3} for p in POOLINGS
            }
            truth.setdefault((name, "default"), []).append(results["default"]["gap_pct"])
            rows.append({"intervention": name, "status": "done", "results": results,
                         "pos0_ratio_max": 1.0 + seed})  # fmt: skip
    rows.append({"intervention": "none", "status": "failed", "results": {}})
    table = table_s7_rows(SweepResult("serial", None, rows, {}))
    got = {(r["intervention"], r["pooling"]): r for r in table}
    assert {k[0] for k in got} == {"none", "no_qk"}
    values = truth[("none", "default")]
    naive_mean = sum(values) / 3
    naive_sd = (sum((v - naive_mean) ** 2 for v in values) / 2) ** 0.5
    assert got[("none", "default")]["seeds"] == 3  # the failed cell is left out
    assert got[("none", "default")]["gap_pct_mean"] == pytest.approx(naive_mean, abs=1e-12)
    assert got[("none", "default")]["gap_pct_sd"] == pytest.approx(naive_sd, abs=1e-12)
    assert got[("none", "default")]["paper_gap_pct"] == 43.7
    assert got[("no_qk", "max_pos0_ratio")]["gap_pct_mean"] == pytest.approx(2.0)
    assert got[("no_qk", "no_pos0")]["paper_gap_pct"] is None  # not in the paper


def test_worker_result_is_stored_by_the_driver(tiny_dataset):
    """compute_cell returns pooled states and never writes the cache itself."""
    from deffcore.runs.measure import run_spec
    from deffcore.work.sweep.runner import compute_cell, release_models

    spec, device = run_spec("tiny-llama", tiny_dataset, 8, 24, 0, "cka")
    out = compute_cell(spec, device)
    release_models()
    assert out["error"] is None and out["pooled"].n == 8
    assert cache.load(spec) is None


def test_a_cell_the_cluster_cannot_place_is_refused():
    from deffcore.work.sweep.runner import _check_resources

    _check_resources({"CPU": 2.0}, 1, 0, "127.0.0.1:1")
    with pytest.raises(SweepError, match="asks for 1 GPU"):
        _check_resources({"CPU": 2.0}, 1, 1, "127.0.0.1:1")
    with pytest.raises(SweepError, match="asks for 4 CPU"):
        _check_resources({"CPU": 2.0}, 4, 0, "127.0.0.1:1")


def test_paper_models_and_families():
    from deffcore.views.models_overview import model_family, paper_models

    rows = {m["model"]: m for m in paper_models()}
    assert rows["Pythia-70M"]["deff_over_L"] == 0.205 and rows["Pythia-70M"]["layers"] == 6
    assert rows["Pythia-70M"]["gap_first_non_bos"] == -6.5  # Table S4
    assert rows["OLMo-2-1B"]["random_low"] == 0.0739 and rows["OLMo-2-1B"]["random_high"] == 0.0743
    assert rows["Gemma-3-4B"]["gap_default"] == 2.2 and rows["Gemma-3-4B"].get("layers") is None
    assert not any("(" in name for name in rows)  # random-init and carry rows are not models
    assert model_family("random:tiny-llama:0") == "random-weight null"
    assert model_family("EleutherAI/pythia-70m") == "Pythia"
    assert model_family("gemma3-270m") == "Gemma"
    assert model_family("/some/folder") == "other"


def test_background_sweep_job(tiny_dataset):
    import time

    from deffcore.work.sweep import start_sweep, sweep_job

    job = start_sweep([Cell("tiny-llama", dataset=tiny_dataset)], **SMALL, engine="serial")
    deadline = time.monotonic() + 120
    while sweep_job(job)["state"] in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.2)
    snap = sweep_job(job)
    assert snap["state"] == "done" and snap["landed"] == 1 and snap["engine"] == "serial"
    assert snap["rows"][0]["status"] == "done"
    assert sweep_job("nope") is None
    # a malformed sweep is refused when it is started, before it is queued (deffcore.work.jobs)
    with pytest.raises(DeffError, match="n must be"):
        start_sweep([Cell("tiny-llama", dataset=tiny_dataset)], n=2, engine="serial")


@pytest.mark.slow  # 8 cells on BBC: minutes on the shared 2-core machine
def test_table_s7_end_to_end_on_a_tiny_gemma():
    """table_s7 on tiny-gemma3 (post and QK norms, like Gemma-3): 2 seeds x 4 interventions,
    each mean/sd recomputed from `measure` on the same specs."""
    from deffcore.work.sweep import table_s7

    rows, result = table_s7(model="tiny-gemma3", seeds=(0, 1), **SMALL, engine="serial")
    assert [r["status"] for r in result.rows] == ["done"] * 8
    got = {(r["intervention"], r["pooling"]): r for r in rows}
    for name in ("none", "no_post", "no_qk", "no_post_no_qk"):
        gaps = [
            measure(model=f"random:tiny-gemma3:{s}", intervention=name, **SMALL)
            .summary("token_normed")
            .gap_pct
            for s in (0, 1)
        ]
        row = got[(name, "token_normed")]
        assert row["seeds"] == 2
        assert row["gap_pct_mean"] == pytest.approx((gaps[0] + gaps[1]) / 2, abs=1e-12)
        assert row["gap_pct_sd"] == pytest.approx(abs(gaps[0] - gaps[1]) / 2**0.5, abs=1e-12)
    # the interventions change the numbers (the hooks act): no_post differs from none
    assert got[("no_post", "default")]["gap_pct_mean"] != got[("none", "default")]["gap_pct_mean"]


def test_models_figures_carry_the_table_values():
    import pandas as pd

    from deffcore import figures

    df = pd.DataFrame(
        [
            {"model": "A", "family": "Pythia", "source": "paper", "weights": "trained",
             "layers": 6, "deff_over_L": 0.2, "gap_default": 28.0, "random_mean": 0.25,
             "random_low": 0.24, "random_high": 0.27},
            {"model": "B", "family": "Llama", "source": "cached", "weights": "random",
             "layers": 4, "deff_over_L": 0.3, "gap_default": -5.0, "gap_top1_pc": 10.0},
            {"model": "C", "family": "Gemma", "source": "paper", "weights": "trained",
             "layers": None, "deff_over_L": None, "gap_default": 2.2},
        ]
    )  # fmt: skip
    fig = figures.models_depth_scatter(df)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name["Pythia (paper, trained)"].y) == [0.2]
    assert by_name["Llama (cached, random)"].marker.symbol == "circle-open"
    null = by_name["Pythia (paper, random null)"]
    assert list(null.y) == [0.25]
    assert list(null.error_y.array) == pytest.approx([0.02])
    assert list(null.error_y.arrayminus) == pytest.approx([0.01])
    assert not any("Gemma" in t.name for t in fig.data)  # no L, no D_eff/L: not on this chart
    gap = figures.models_gap_by_pooling(df, POOLINGS)
    traces = {t.name: t for t in gap.data}
    assert set(traces) == {"default", "top1_pc"}
    assert list(traces["default"].x) == [28.0, -5.0, 2.2]
    assert list(traces["default"].y) == ["A", "B", "C"]
