"""A sweep's bad cell fails alone, a malformed grid is one sentence, a dead Ray address fails
fast and SIGTERM ends it (deffcore.work.sweep.checks)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deffcore.cli.main import main
from deffcore.work.sweep import checks
from deffcore.work.sweep.cells import Cell, grid_cells, manifest_cells
from deffcore.work.sweep.checks import SweepError
from deffcore.work.sweep.runner import run_sweep

REPO = Path(__file__).resolve().parent.parent
SMALL = {"n": 4, "max_tokens": 12}


@pytest.fixture
def corrupt_gguf(tmp_path) -> Path:
    path = tmp_path / "broken.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    return path


def test_a_manifest_with_bad_cells_fails_those_cells_alone(
    tmp_path, tiny_dataset, corrupt_gguf, capsys
):
    manifest = tmp_path / "cells.yaml"
    manifest.write_text(
        "cells:\n"
        f"  - {{model: tiny-llama, dataset: {tiny_dataset}}}\n"
        f"  - {{model: tiny-nope, dataset: {tiny_dataset}}}\n"
        f"  - {{model: {corrupt_gguf}, dataset: {tiny_dataset}}}\n"
        f"  - {{model: tiny-gpt2, dataset: {tmp_path / 'missing.txt'}}}\n"
    )
    result = run_sweep(manifest_cells(manifest), **SMALL, engine="serial")
    status = [r["status"] for r in result.rows]
    assert status == ["done", "failed", "failed", "failed"], result.rows
    errors = [r["error"] for r in result.rows[1:]]
    assert "Unknown tiny model" in errors[0]
    assert "not a valid GGUF file" in errors[1]
    assert "does not exist" in errors[2]
    assert all("\n" not in e for e in errors)
    argv = ["sweep", "--manifest", str(manifest), "--n", "4", "--max-tokens", "12", "--json",
            "--no-progress", "--engine", "serial"]  # fmt: skip
    assert main(argv) == 0  # the sweep ran; its rows say which cells failed
    cells = json.loads(capsys.readouterr().out)["cells"]
    assert [c["status"] for c in cells] == ["cached", "failed", "failed", "failed"]


def test_a_bad_shared_option_still_refuses_the_whole_sweep(tiny_dataset):
    from deffcore.core.errors import DeffError

    cells = [Cell("tiny-llama", dataset=tiny_dataset), Cell("tiny-nope", dataset=tiny_dataset)]
    for bad in ({"n": 2}, {"max_tokens": 1}, {"seed": -1}, {"dtype": "float8"}):
        with pytest.raises(DeffError):
            run_sweep(cells, **{**SMALL, **bad}, engine="serial")


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (["--cpus-per-cell", "nan"], "--cpus-per-cell must be a finite number > 0"),
        (["--cpus-per-cell", "inf"], "got inf and None"),
        (["--gpus-per-cell", "nan"], "--gpus-per-cell a finite number >= 0, got 1.0 and nan"),
        (["--num-cpus", "0"], "--num-cpus must be a positive integer, got 0."),
        (["--num-cpus", "-5"], "--num-cpus must be a positive integer, got -5."),
    ],
)
def test_a_resource_that_is_no_number_refuses_the_sweep_before_any_cell(
    capsys, monkeypatch, tiny_dataset, flags, match
):
    """NaN passed `cpus_per_cell <= 0`; a NaN GPU share made every cell ask for CUDA."""
    import deffcore.work.sweep.runner

    monkeypatch.setattr(deffcore.work.sweep.runner, "run_plan", lambda *a, **k: pytest.fail("ran"))
    argv = ["sweep", "--models", "tiny-llama", "--dataset", tiny_dataset, "--n", "8",
            "--max-tokens", "16", "--engine", "serial", "--no-progress", *flags]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and match in err, err


@pytest.mark.parametrize(
    ("grid", "match"),
    [
        ("{models: [[tiny-llama, tiny-gpt2]]}", "holds \\['tiny-llama', 'tiny-gpt2'\\]"),
        ("{models: [tiny-llama], interventions: [[none]]}", "'interventions' holds"),
        ("{models: [tiny-llama], random_seeds: [-1]}", "negative seed"),
        ("{models: [tiny-llama], random_seeds: [one]}", "integer seeds"),
        ("{models: [tiny-llama], datasets: [{a: 1}]}", "dataset specs"),
        ("{models: [tiny-llama], trained: maybe}", "true or false"),
    ],
)
def test_a_malformed_grid_axis_is_one_sentence(tmp_path, grid, match):
    path = tmp_path / "m.yaml"
    path.write_text(f"grid: {grid}\n")
    with pytest.raises(SweepError, match=match) as err:
        manifest_cells(path)
    assert "\n" not in str(err.value)


def test_a_string_axis_is_one_value_not_its_letters(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("grid: {models: tiny-llama, random_seeds: 3}\n")
    cells = manifest_cells(path)
    assert [c.model_spec for c in cells] == ["tiny-llama", "random:tiny-llama:3"]
    assert [c.model for c in grid_cells("tiny-gpt2")] == ["tiny-gpt2"]


def test_a_negative_manifest_seed_is_refused(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("cells:\n  - {model: tiny-llama, seed: -1}\n")
    with pytest.raises(SweepError, match="negative seed"):
        manifest_cells(path)
    with pytest.raises(SweepError, match="negative seed"):
        grid_cells(["tiny-llama"], random_seeds=[-2])
    with pytest.raises(SweepError, match=r"a seed beyond 2\^63 - 1"):
        grid_cells(["tiny-llama"], random_seeds=[2**63])


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again: nothing listens there


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:{port}", "no-port-here"])
def test_a_ray_address_where_nothing_answers_is_refused_at_once(address):
    address = address.format(port=_dead_port())
    start = time.monotonic()
    with pytest.raises(SweepError) as err:
        checks.probe_ray_address(address)
    assert time.monotonic() - start < 10 and "\n" not in str(err.value)


def test_a_cluster_that_never_answers_is_refused_by_the_deadline():
    gate = []

    def hangs() -> None:  # a stand-in for ray.init on an address that accepts and hangs
        while not gate:
            time.sleep(0.05)

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        address = f"127.0.0.1:{srv.getsockname()[1]}"
        start = time.monotonic()
        with pytest.raises(SweepError, match="did not answer within 1 s"):
            checks.join_ray(address, hangs, timeout=1.0)
        assert time.monotonic() - start < 5
    gate.append(True)
    with socket.socket() as srv, pytest.raises(ZeroDivisionError):  # ray.init's own error
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        checks.join_ray(f"127.0.0.1:{srv.getsockname()[1]}", lambda: 1 / 0)


def test_cli_sweep_at_a_dead_address_is_one_line_within_30_s(tiny_dataset):
    argv = [sys.executable, "-m", "deffcore", "sweep", "--models", "tiny-llama", "--dataset",
            tiny_dataset, "--n", "4", "--max-tokens", "12", "--address", "127.0.0.1:1",
            "--no-progress"]  # fmt: skip
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert time.monotonic() - start < 60  # ~30 s of it is importing torch and Ray here
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Nothing answers" in lines[-1], lines


def test_sigterm_ends_a_sweep_that_is_joining_a_silent_cluster(tiny_dataset):
    """A server that accepts connections and never answers: Ray would wait for ever; the
    main thread only waits for the joining thread, so SIGTERM ends the process at once."""
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(16)
        address = f"127.0.0.1:{srv.getsockname()[1]}"
        argv = [sys.executable, "-m", "deffcore", "sweep", "--models", "tiny-llama",
                "--dataset", tiny_dataset, "--n", "4", "--max-tokens", "12", "--address",
                address, "--no-progress"]  # fmt: skip
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            srv.settimeout(120)
            conn, _ = srv.accept()  # the probe (or Ray) connected: it is joining now
            conn.close()
            time.sleep(2.0)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode != 0
