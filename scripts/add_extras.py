"""Give a shipped snapshot the BOS page's extras of its own run, nothing else.

    .venv/bin/python scripts/add_extras.py deffcore/data/default_run.json
    .venv/bin/python scripts/add_extras.py --random-seeds 1,2,3,4,5 FILE   # and the null band

For the file's run (the spec in the file): its diagnostics (massive activations and sinks,
`diagnostics_store.diagnose(spec)`, on the run's first 64 passages) and its BOS on/off check
(`bos_answer.bos_on_off(spec, metric)`: the same run with bos=add and bos=none, each cached)
are computed or read back from the cache, and the file's `diagnostics` and `bos_on_off` fields
become what `deffcore measure ... --diagnostics --bos-on-off --snapshot` would write there
(`run_extras.with_extras`); a section the file already holds and the pages would use (its
checks pass: `run_extras.snapshot_diagnostics`, `snapshot_bos_on_off`) is kept as it is.
Both depend on the spec alone, not on the run's states, so the
run itself is not re-extracted: the file's key must be its spec's key, else the file is left
alone and the script exits 1. The file's `command` gains `--diagnostics --bos-on-off`, so it
still remakes the file whole (scripts/make_default_run.sh). The result is checked by the one
schema (`views.run_schema.check_snapshot`) and replaced atomically (`core.files.write_output`).

`--random-seeds S`: the file's random-weight band also comes to hold exactly the seeds S
(`measure --random-seeds`): a seed the file holds keeps its stored values, each other seed's
run `random:<model>:<seed>` of the same spec is measured (or read from the cache), and the band
is recomputed from the per-seed values (`measurement.null_band`; the stored ones are rounded
to 1e-6, so the band may differ from a fresh `measure` in its 7th decimal).
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


def with_seeds(command: str, seeds: list[int]) -> str:
    """`command` with its `--random-seeds` value set to `seeds` (added when absent)."""
    words, value = command.split(), ",".join(map(str, seeds))
    if "--random-seeds" in words:
        words[words.index("--random-seeds") + 1] = value
        return " ".join(words)
    return f"{command} --random-seeds {value}"


def with_null_seeds(data: dict, spec, seeds: list[int]) -> dict:
    """`data` (a checked snapshot dict) whose random-weight band holds exactly `seeds`."""
    from dataclasses import replace

    from deffcore.core.constants import POOLINGS
    from deffcore.runs.measure import measure_spec
    from deffcore.runs.measurement import null_band
    from deffcore.views.snapshot import json_ready

    measurement = data["measurement"]
    metric = measurement["metric"]
    stored = measurement.get("random_null") or {"models": [], "cached": [], "results": {}}
    known = {name.rpartition(":")[2] for name in stored["models"]}
    poolings = [p for p in POOLINGS if stored["results"].get(p)] or list(POOLINGS)
    per_seed: dict[str, dict[str, float]] = {}
    for s in map(str, seeds):
        if s in known:
            per_seed[s] = {p: _stored(stored["results"][p], s) for p in poolings}
            continue
        run = measure_spec(replace(spec, model=f"random:{spec.model}:{s}"), metric=metric)
        per_seed[s] = {p: round(run.summary(p, metric).deff_over_L, 6) for p in poolings}
    names = [f"random:{spec.model}:{s}" for s in per_seed]
    results = {p: null_band(list(per_seed), [v[p] for v in per_seed.values()]) for p in poolings}
    measurement["random_null"] = {
        "models": names, "cached": [True] * len(names),
        "results": json_ready(results),
    }  # fmt: skip
    data["command"] = with_seeds(data["command"], seeds)
    return data


def _stored(band: dict, seed: str) -> float:
    """One seed's stored D_eff/L in a band of the file."""
    return band["deff_over_L"][band["seeds"].index(seed)]


def add_extras(path: Path, seeds: list[int] | None = None) -> None:
    from deffcore.cli._output import Progress
    from deffcore.core.files import write_output
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.lenses.bos_answer import bos_on_off
    from deffcore.lenses.diagnostics_store import diagnose
    from deffcore.lenses.run_extras import snapshot_bos_on_off, snapshot_diagnostics, with_extras
    from deffcore.views.run_schema import check_snapshot
    from deffcore.views.snapshot import SnapshotView

    t0 = time.perf_counter()
    shipped = check_snapshot(json.loads(path.read_text()), str(path))
    spec = RunSpec(**shipped["spec"])
    if spec.key() != shipped["key"]:
        sys.exit(
            f"{path}: not the file's run (its spec's key is {spec.key()}, the file's "
            f"{shipped['key']}); the file is left alone"
        )
    metric = shipped["measurement"]["metric"]
    view = SnapshotView(shipped)
    out = dict(shipped)
    with Progress("passage") as progress:
        if snapshot_diagnostics(view) is None:  # a sound section the file holds is kept
            with_extras(out, diagnostics=diagnose(spec, progress=progress))
        if snapshot_bos_on_off(view, metric, None) is None:
            with_extras(out, bos_on_off=bos_on_off(spec, metric=metric, progress=progress),
                        metric=metric)  # fmt: skip
    out["command"] = with_flags(shipped["command"])
    if seeds:
        out = with_null_seeds(out, spec, seeds)
    out = check_snapshot(out, str(path))
    body = json.dumps(out, separators=(",", ":")).encode()
    write_output(path, body, str(path))
    print(
        f"{path}: diagnostics of {out['diagnostics']['n_passages']} passages, BOS on/off "
        f"({out['bos_on_off']['kind']}); {len(body) / 1024:.0f} kB, "
        f"{time.perf_counter() - t0:.0f} s"
    )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    from deffcore.cli._common import int_list
    from deffcore.core.errors import DeffError

    args = sys.argv[1:]
    seeds = None
    if "--random-seeds" in args:
        i = args.index("--random-seeds")
        try:
            seeds = list(int_list(args[i + 1], "--random-seeds"))
        except IndexError:
            sys.exit("--random-seeds takes a comma-separated list of integers, e.g. 1,2,3,4,5")
        except DeffError as err:
            sys.exit(str(err))
        del args[i : i + 2]
    for arg in args:
        try:
            add_extras(Path(arg), seeds)
        except DeffError as err:  # a file that is no snapshot, a run that cannot be measured
            sys.exit(f"{arg}: {err} (the file is left alone)")
