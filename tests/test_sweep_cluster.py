"""The sweep's Ray engine with a real Ray runtime (slow: each runtime takes ~10-30 s to start here).

1. A local runtime of 2 CPUs (the one `python -m deffcore sweep` starts, held for the module):
   cells run in more than one worker process, every cell equals `measure` on its spec, a rerun is
   all cached, a bad cell fails alone with its sentence.
2. A Ray head node started with `ray start --head` on a free localhost port, joined with
   `sweep --address`, then stopped by terminating exactly the processes of that node (found by
   the private `--temp-dir` in their command lines, plus their children); never `ray stop`,
   which would stop every Ray runtime on the machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from deffcore.core.constants import POOLINGS
from deffcore.runs.measure import measure
from deffcore.work.sweep import ray_runtime
from deffcore.work.sweep.cells import Cell
from deffcore.work.sweep.runner import run_sweep

pytest.importorskip("ray")
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
SMALL = {"n": 8, "max_tokens": 24}


def test_background_ray_sweep_starts_its_runtime_in_a_thread(tiny_dataset):
    """The Models page's path: start_sweep(engine="ray") inits Ray in a server thread."""
    import time

    import ray

    from deffcore.work.sweep import start_sweep, sweep_job

    assert not ray.is_initialized()
    job = start_sweep(
        [Cell("tiny-llama", dataset=tiny_dataset), Cell("tiny-gpt2", dataset=tiny_dataset)],
        **SMALL,
        engine="ray",
        num_cpus=2,
    )
    deadline = time.monotonic() + 400
    while sweep_job(job)["state"] in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.5)
    snap = sweep_job(job)
    assert snap["state"] == "done", snap["error"]
    assert snap["engine"] == "ray" and snap["address"].startswith("127.0.0.1:")
    assert [r["status"] for r in snap["rows"]] == ["done", "done"]
    assert not ray.is_initialized()  # the thread shut its runtime down


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray runtime with 2 CPUs for the module; shut down (all its processes) after."""
    import ray

    assert not ray.is_initialized()
    with ray_runtime(num_cpus=2) as address:
        assert address.startswith("127.0.0.1:")  # bound to the loopback address
        yield address
    assert not ray.is_initialized()


def _cells(dataset: str) -> list[Cell]:
    return [
        Cell("tiny-llama", dataset=dataset),
        Cell("tiny-gpt2", dataset=dataset),
        Cell("tiny-llama", seed=1, dataset=dataset),
        Cell("tiny-qwen2", dataset=dataset),
        Cell("tiny-olmo2", dataset=dataset),
        Cell("tiny-gemma3", intervention="no_qk", dataset=dataset),
        Cell("no-such-model-abc", dataset=dataset),
    ]


def test_ray_cells_run_in_two_workers_equal_measure_and_resume(local_ray, tiny_dataset):
    landed = []
    result = run_sweep(
        _cells(tiny_dataset),
        **SMALL,
        engine="ray",
        on_cell=lambda row, k, total: landed.append(row["status"]),
    )
    assert result.engine == "ray" and result.address == local_ray
    assert len(landed) == 7
    rows = result.rows
    assert [r["status"] for r in rows] == ["done"] * 6 + ["failed"]
    assert "no-such-model-abc" in rows[-1]["error"] and "\n" not in rows[-1]["error"]
    pids = {r["worker"].split(":")[1] for r in rows if r["status"] == "done"}
    assert str(os.getpid()) not in pids  # computed in Ray workers, not in this process
    assert len(pids) >= 2, f"all cells ran in one worker: {pids}"
    for row in rows[:-1]:
        m = measure(
            model=row["model_spec"],
            dataset=tiny_dataset,
            intervention=row["intervention"],
            **SMALL,
        )
        assert m.cached  # the driver stored the worker's states under measure's key
        for p in POOLINGS:
            assert row["results"][p]["deff_over_L"] == m.summary(p).deff_over_L
            assert row["results"][p]["gap_pct"] == m.summary(p).gap_pct

    again = run_sweep(_cells(tiny_dataset), **SMALL, engine="ray")
    assert [r["status"] for r in again.rows] == ["cached"] * 6 + ["failed"]
    assert [r["deff_over_L"] for r in again.rows] == [r["deff_over_L"] for r in rows]


def test_worker_states_equal_in_process_extraction(local_ray, tiny_dataset):
    """Independent of the cache: the states a Ray worker returns equal this process's."""
    import numpy as np
    import ray

    from deffcore.runs.measure import extract_spec, run_spec
    from deffcore.work.sweep.runner import compute_cell

    spec, device = run_spec("tiny-qwen3", tiny_dataset, 8, 24, 0, "cka", intervention="none")
    remote = ray.get(ray.remote(compute_cell).options(num_cpus=1).remote(spec, device))
    local = extract_spec(spec, device=device)
    assert remote["error"] is None and remote["worker"].split(":")[1] != str(os.getpid())
    for name, states in local.pooled.items():
        np.testing.assert_allclose(remote["pooled"].pooled[name], states, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# A head node on a free localhost port


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _node_processes(temp_dir: str):
    """Processes of the Ray node whose --temp-dir is `temp_dir`, and all their children."""
    import psutil

    found = {}
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if any(temp_dir in arg for arg in proc.info["cmdline"] or ()):
                found[proc.pid] = proc
                for child in proc.children(recursive=True):
                    found[child.pid] = child
        except psutil.Error:
            continue
    return list(found.values())


def _stop_node(temp_dir: str) -> None:
    import psutil

    procs = _node_processes(temp_dir)
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=15)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=5)


def _alive(procs) -> list:
    return [p for p in procs if p.is_running() and p.status() != "zombie"]


def test_join_a_head_node_with_address_then_stop_exactly_it(tiny_dataset, deff_cache_dir):
    ray_bin = Path(sys.executable).parent / "ray"
    port = _free_port()
    # short path: Ray's unix sockets live under it (108-byte limit)
    temp_dir = tempfile.mkdtemp(prefix="dr", dir="/tmp")
    env = {
        **os.environ,
        # a private token for this node: only this test's processes can join it
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "DEFF_CACHE_DIR": str(deff_cache_dir),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    env.pop("RAY_ADDRESS", None)
    try:
        subprocess.run(
            [str(ray_bin), "start", "--head", "--port", str(port), "--node-ip-address",
             "127.0.0.1", "--num-cpus", "2", "--include-dashboard=false", "--temp-dir", temp_dir,
             "--disable-usage-stats"],
            env=env, check=True, capture_output=True, timeout=240,
        )  # fmt: skip
        node = _node_processes(temp_dir)
        assert node, "ray start left no processes under its temp dir"
        out = subprocess.run(
            [sys.executable, "-m", "deffcore", "sweep", "--models", "tiny-llama,tiny-gpt2",
             "--random-seeds", "2", "--dataset", tiny_dataset, "--n", "8", "--max-tokens", "24",
             "--address", f"127.0.0.1:{port}", "--json", "--no-progress"],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=400,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        d = json.loads(out.stdout)
        assert d["engine"] == "ray" and d["address"].endswith(f":{port}")
        assert [c["status"] for c in d["cells"]] == ["done"] * 4
        node_pids = {p.pid for p in _node_processes(temp_dir)}
        worker_pids = {int(c["worker"].split(":")[1]) for c in d["cells"]}
        assert worker_pids and worker_pids.isdisjoint({os.getpid()})
        # the cells ran in that node's workers (children of its raylet), if they are still alive
        assert not {p for p in worker_pids if Path(f"/proc/{p}").exists()} - node_pids
    finally:
        procs = _node_processes(temp_dir)
        _stop_node(temp_dir)
    assert not _alive(procs), "processes of the test's Ray node survived"
    assert not _node_processes(temp_dir) or not _alive(_node_processes(temp_dir))
