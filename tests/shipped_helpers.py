"""A small generated stand-in for the shipped default run, for the tests of its pages.

`write_shipped(path)` makes what scripts/make_default_run.sh makes for SmolLM2, for tiny-llama
on a few BBC windows: one in-process `deffcore measure ... --random-seeds --bootstrap
--diagnostics --bos-on-off --snapshot PATH` into the current DEFF_CACHE_DIR (so the runs and the
diagnostics are also in that cache). Importable from every test folder (tests/ is on sys.path).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: The fixture run: a tiny model, a few windows (every passage long enough for the sinks).
RUN: dict[str, Any] = {"model": "tiny-llama", "n": 16, "max_tokens": 32, "passages": "windows"}
SEEDS = (1, 2)
BOOTSTRAP = 20


def measure_args(path: Path) -> list[str]:
    """The CLI arguments that make the fixture snapshot at `path`."""
    return [
        "measure", "--model", RUN["model"], "--n", str(RUN["n"]), "--max-tokens",
        str(RUN["max_tokens"]), "--passages", RUN["passages"], "--random-seeds",
        ",".join(map(str, SEEDS)), "--bootstrap", str(BOOTSTRAP), "--diagnostics",
        "--bos-on-off", "--no-anytime", "--no-progress", "--snapshot", str(path),
    ]  # fmt: skip


def write_shipped(path: Path) -> dict[str, Any]:
    """The fixture snapshot written at `path` (module docstring); its parsed JSON."""
    from deffcore.cli.main import main

    assert main(measure_args(path)) == 0
    return json.loads(path.read_text())


def run_script(name: str, path: Path, *flags: str) -> subprocess.CompletedProcess:
    """`python scripts/<name> *flags path` from the repository root, its output captured."""
    script = REPO / "scripts" / name
    return subprocess.run(
        [sys.executable, str(script), *flags, str(path)], cwd=REPO, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip


def shipped_view(data: dict[str, Any], source: str = "precomputed") -> Any:
    """A `Run` of `data` as the app holds a shipped (or shared) run."""
    from deffcore.views.run import Run

    view = Run.from_snapshot(data)
    view.source = source
    return view
