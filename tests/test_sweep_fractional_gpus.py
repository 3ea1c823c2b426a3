"""Fractional GPUs per sweep cell (`--gpus-per-cell 0.25`, four cells sharing a GPU),
checked on a CPU machine: a local Ray runtime that declares one GPU (Ray only counts it), cells
asking for a quarter of it each, computing on the CPU. Slow: a Ray runtime takes ~10-30 s here."""

from __future__ import annotations

import pytest

from deffcore.work.sweep import ray_runtime
from deffcore.work.sweep.cells import Cell
from deffcore.work.sweep.runner import run_sweep

pytest.importorskip("ray")
pytestmark = pytest.mark.slow


def test_quarter_gpu_cells_are_placed_and_equal_the_serial_sweep(
    tiny_dataset, tmp_path, monkeypatch
):
    import ray

    cells = [Cell("tiny-llama", seed=s, dataset=tiny_dataset) for s in range(4)]
    small = {"n": 8, "max_tokens": 16, "device": "cpu"}
    serial = run_sweep(cells, **small, engine="serial")
    assert not ray.is_initialized()
    monkeypatch.setenv("DEFF_CACHE_DIR", str(tmp_path / "second-cache"))  # computed again
    with ray_runtime(num_cpus=2, num_gpus=1) as gcs:
        assert ray.cluster_resources().get("GPU") == 1.0
        shared = run_sweep(cells, **small, engine="ray", address=gcs, gpus_per_cell=0.25,
                           cpus_per_cell=0.5)  # fmt: skip
        # the runtime this process holds serves a sweep without --address too (its GPU is
        # Ray's count, not CUDA: this machine has none)
        monkeypatch.setenv("DEFF_CACHE_DIR", str(tmp_path / "third-cache"))
        held = run_sweep(cells[:1], **small, engine="ray", gpus_per_cell=0.25, cpus_per_cell=0.5)
    assert held.rows[0]["status"] == "done", held.rows[0]["error"]
    assert shared.engine == "ray" and shared.settings["gpus_per_cell"] == 0.25
    assert [r["status"] for r in shared.rows] == ["done"] * 4, [r["error"] for r in shared.rows]
    for a, b in zip(serial.rows, shared.rows, strict=True):
        assert a["deff_over_L"] == pytest.approx(b["deff_over_L"], abs=1e-6)


def test_more_gpu_than_the_cluster_has_is_refused(tiny_dataset):
    from deffcore.work.sweep.checks import SweepError

    cells = [Cell("tiny-llama", dataset=tiny_dataset)]
    with ray_runtime(num_cpus=1, num_gpus=1) as gcs, pytest.raises(SweepError, match=r"1\.5 GPU"):
        run_sweep(cells, n=8, max_tokens=16, device="cpu", engine="ray", address=gcs,
                  gpus_per_cell=1.5)  # fmt: skip
