"""scripts/add_paired.py: a snapshot gains its run's paired bootstrap, checked to be its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from shipped_helpers import write_shipped

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "add_paired.py"


def _run(path: Path, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(path), *flags], cwd=REPO, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip


def test_the_paired_bootstrap_is_the_one_measure_draws_and_nothing_else_changes(tmp_path):
    path = tmp_path / "shipped.json"
    made = write_shipped(path)  # today's CLI: --bootstrap B draws the paired bootstrap
    poolings = list(dict.fromkeys(pooling for pooling, _ in made["paired"]["keys"]))
    command = made["command"].split(" --bootstrap-poolings ")[0]
    older = {k: v for k, v in made.items() if k != "paired"}  # as an older CLI wrote it
    path.write_text(json.dumps({**older, "command": command}))
    done = _run(path, "--poolings", ",".join(poolings))
    assert done.returncode == 0, done.stderr
    got = json.loads(path.read_text())
    assert got["paired"] == made["paired"]
    assert got["command"] == f"{command} --bootstrap-poolings {','.join(poolings)}"
    assert {k: v for k, v in got.items() if k not in ("paired", "command")} == {
        k: v for k, v in older.items() if k != "command"
    }


def test_a_file_whose_bootstrap_is_another_is_left_alone(tmp_path):
    path = tmp_path / "shipped.json"
    made = write_shipped(path)
    data = {k: v for k, v in made.items() if k != "paired"}
    data["measurement"]["bootstrap"]["samples"][0] += 0.001  # not these passage multisets
    path.write_text(json.dumps(data))
    before = path.read_bytes()
    done = _run(path)
    assert done.returncode == 1 and "not the file's bootstrap" in done.stderr
    assert path.read_bytes() == before
