"""Give a shipped snapshot the BOS page's extras of its own run (issue 30), nothing else.

    .venv/bin/python scripts/add_extras.py deffcore/data/default_run.json

For the file's run (the spec in the file): its diagnostics (massive activations and sinks,
`diagnostics_store.diagnose(spec)`, on the run's first 64 passages) and its BOS on/off check
(`bos_answer.bos_on_off(spec, metric)`: the same run with bos=add and bos=none, each cached)
are computed or read back from the cache, and the file's `diagnostics` and `bos_on_off` fields
become what `deffcore measure ... --diagnostics --bos-on-off --snapshot` would write there
(`run_extras.with_extras`). Both depend on the spec alone, not on the run's states, so the
run itself is not re-extracted: the file's key must be its spec's key, else the file is left
alone and the script exits 1. The file's `command` gains `--diagnostics --bos-on-off`, so it
still remakes the file whole (scripts/make_default_run.sh). The result is checked by the one
schema (`views.run_schema.check_snapshot`) and replaced atomically (`core.checks.write_output`).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: The flags `deffcore measure` takes to write these extras (cli/measure.check_extras_args).
FLAGS = ("--diagnostics", "--bos-on-off")


def with_flags(command: str) -> str:
    """`command` with each of FLAGS it lacks appended."""
    words = command.split()
    return " ".join([command, *(f for f in FLAGS if f not in words)])


def add_extras(path: Path) -> None:
    from deffcore.core.checks import write_output
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.lenses.bos_answer import bos_on_off
    from deffcore.lenses.diagnostics_store import diagnose
    from deffcore.lenses.run_extras import with_extras
    from deffcore.views.run_schema import check_snapshot

    t0 = time.perf_counter()
    shipped = check_snapshot(json.loads(path.read_text()), str(path))
    spec = RunSpec(**shipped["spec"])
    if spec.key() != shipped["key"]:
        sys.exit(
            f"{path}: not the file's run (its spec's key is {spec.key()}, the file's "
            f"{shipped['key']}); the file is left alone"
        )
    metric = shipped["measurement"]["metric"]
    progress = _printer()
    diagnostics = diagnose(spec, progress=progress)
    on_off = bos_on_off(spec, metric=metric, progress=progress)
    out = with_extras(dict(shipped), diagnostics=diagnostics, bos_on_off=on_off, metric=metric)
    out["command"] = with_flags(shipped["command"])
    out = check_snapshot(out, str(path))
    body = json.dumps(out, separators=(",", ":")).encode()
    write_output(path, body, str(path))
    print(
        f"{path}: diagnostics of {out['diagnostics']['n_passages']} passages, BOS on/off "
        f"({out['bos_on_off']['kind']}); {len(body) / 1024:.0f} kB, "
        f"{time.perf_counter() - t0:.0f} s"
    )


def _printer():
    """A progress callback that prints a line per stage change and per tenth done."""
    last: dict[str, int] = {}

    def progress(done: int, total: int, stage: str = "") -> None:
        tenth = 10 * done // max(total, 1)
        if last.get(stage) != tenth:
            last[stage] = tenth
            print(f"  {stage or 'work'}: {done}/{total}", file=sys.stderr, flush=True)

    return progress


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    from deffcore.core.errors import DeffError

    for arg in sys.argv[1:]:
        try:
            add_extras(Path(arg))
        except DeffError as err:  # a file that is no snapshot, a run that cannot be measured
            sys.exit(f"{arg}: {err} (the file is left alone)")
