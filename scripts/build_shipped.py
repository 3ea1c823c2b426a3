"""Build a shipped run whole: a snapshot file made again from its own run, reusing the cache.

    .venv/bin/python scripts/build_shipped.py deffcore/data/default_run.json
    .venv/bin/python scripts/build_shipped.py --random-seeds 1,2,3,4,5 FILE   # the null's seeds
    .venv/bin/python scripts/build_shipped.py --poolings default,no_pos0 FILE # the paired ones
    .venv/bin/python scripts/build_shipped.py --no-skip-effect FILE           # atlas, no skips
    .venv/bin/python scripts/build_shipped.py --no-extras FILE    # the command as it is (gallery)

For each snapshot file, the command it holds (the `deffcore measure ...` that made it) is run
by the CLI itself (`deffcore.cli.main.main`), completed with what a page would otherwise
compute on request: `--diagnostics` (massive activations and sinks) and `--bos-on-off` (the
run with bos=add and bos=none; `--no-extras`: neither, the command as it is). `--random-seeds
S` and `--poolings P` set the random-weight band's seeds and the paired bootstrap's poolings
(`--bootstrap-poolings`), else the command's own are kept. So the new file holds the run,
its random-weight band, its paired bootstrap (SPEC 15), its trust and BOS answer, its
diagnostics, its BOS on/off check and its depth-use atlas (SPEC 16) exactly as `measure
--snapshot` writes them; then the atlas's skip effect on the run's
first 64 passages (`lenses.atlas.atlas_of`; `--no-skip-effect`: none). Every forward pass,
diagnostic and skip pass the cache ($DEFF_CACHE_DIR) holds is read back, not run again.

The new file must be the file's own run: the file's key must be its spec's, and the new
file's key, spec, every similarity matrix and its stored bootstrap's replicates must equal the
file's (to the file's rounding), so no number the file shows moves (what the run took when the
file was made, `elapsed_s` and `cached`, is kept from the file); else the file is left alone and
the script exits 1. The result is checked by the one schema
(`views.run_schema.check_snapshot`) and replaced atomically (`core.files.write_output`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

#: The flags that put into the snapshot what a page would otherwise compute on request.
FLAGS = ("--diagnostics", "--bos-on-off")


def measure_args(
    command: str, seeds: str | None = None, poolings: str | None = None, extras: bool = True
) -> list[str]:
    """The CLI arguments (from `measure` on) of a file's `command`, completed: each of FLAGS it
    lacks appended (unless not `extras`), `--random-seeds` / `--bootstrap-poolings` set when
    given."""
    words = shlex.split(command)
    if "measure" not in words:
        raise ValueError(f"not a `deffcore measure` command: {command!r}")
    args = words[words.index("measure") :]
    args += [f for f in FLAGS if extras and f not in args]
    for option, value in (("--random-seeds", seeds), ("--bootstrap-poolings", poolings)):
        if value is None:
            continue
        if option in args:
            args[args.index(option) + 1] = value
        else:
            args += [option, value]
    return args


def why_not_the_files(fresh: dict[str, Any], shipped: dict[str, Any]) -> str | None:
    """Why `fresh` (a snapshot dict made now) is not the run of `shipped`, or None."""
    if fresh["key"] != shipped["key"] or fresh["spec"] != shipped["spec"]:
        return f"not the file's run (the key is {fresh['key']}, the file's {shipped['key']})"
    for pooling, by_metric in shipped["similarity"].items():
        for metric, matrix in by_metric.items():
            a = np.asarray(fresh["similarity"][pooling][metric], dtype=float)
            b = np.asarray(matrix, dtype=float)
            if a.shape != b.shape or not np.allclose(a, b, atol=2e-6, equal_nan=True):
                return f"not the file's run (its {pooling} {metric} similarity differs)"
    stored = (shipped["measurement"].get("bootstrap") or {}).get("samples")
    if stored is not None:
        mine = (fresh["measurement"].get("bootstrap") or {}).get("samples") or []
        a, b = np.asarray(mine, dtype=float), np.asarray(stored, dtype=float)
        if a.shape != b.shape or not np.allclose(a, b, rtol=0, atol=2e-6):
            return "not the file's bootstrap (its default replicates differ from the file's)"
    return None


def with_files_provenance(fresh: dict[str, Any], shipped: dict[str, Any]) -> dict[str, Any]:
    """`fresh` saying what its run took when the file was made: the file's `elapsed_s` and
    `cached`, and each random seed's `cached` the file holds (a build from the cache takes no
    time; the shipped file keeps the run's own cost)."""
    mine, theirs = fresh["measurement"], shipped["measurement"]
    for field in ("elapsed_s", "cached"):
        if field in theirs:
            mine[field] = theirs[field]
    null, old = mine.get("random_null"), theirs.get("random_null")
    if null and old:
        was = dict(zip(old["models"], old["cached"], strict=True))
        null["cached"] = [
            was.get(m, c) for m, c in zip(null["models"], null["cached"], strict=True)
        ]
    return fresh


def build(
    path: Path, *, seeds: str | None, poolings: str | None, skip_effect: bool, extras: bool = True
) -> None:
    """Make the snapshot at `path` again from its own run (module docstring)."""
    from deffcore.cli.main import main
    from deffcore.core.files import write_output
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.lenses.atlas import atlas_of
    from deffcore.runs.measure import measure_spec
    from deffcore.views.run import Run
    from deffcore.views.run_schema import check_snapshot

    t0 = time.perf_counter()
    shipped = check_snapshot(json.loads(path.read_text()), str(path))
    spec = RunSpec(**shipped["spec"])
    if spec.key() != shipped["key"]:
        sys.exit(
            f"{path}: not the file's run (its spec's key is {spec.key()}, the file's "
            f"{shipped['key']}); the file is left alone"
        )
    try:
        args = measure_args(shipped["command"], seeds, poolings, extras)
    except ValueError as err:
        sys.exit(f"{path}: {err}; the file is left alone")
    with tempfile.TemporaryDirectory(prefix="deff-shipped-") as tmp:
        out = Path(tmp) / path.name
        argv = [*args, "--no-anytime", "--snapshot", str(out)]
        with contextlib.redirect_stdout(io.StringIO()):  # the run's table: not this script's
            try:
                code = main(argv)
            except SystemExit as stop:  # the command's arguments refused by argparse
                code = stop.code
        if code != 0:
            sys.exit(f"{path}: its command did not run ({shlex.join(args)}); the file is left "
                     "alone")  # fmt: skip
        fresh = json.loads(out.read_text())
    why = why_not_the_files(fresh, shipped)
    if why is not None:
        sys.exit(f"{path}: {why}; the file is left alone")
    fresh = with_files_provenance(fresh, shipped)
    if skip_effect:
        m = measure_spec(RunSpec(**fresh["spec"]), metric=fresh["measurement"]["metric"])
        atlas_of(m, skip_effect=True)
        fresh["atlas"] = Run.from_measurement(m).to_snapshot(command=fresh["command"])["atlas"]
    fresh = check_snapshot(fresh, str(path))
    body = json.dumps(fresh, separators=(",", ":")).encode()
    write_output(path, body, str(path))
    skip = (fresh.get("atlas") or {}).get("skip_effect") or {}
    held = [k for k in ("paired", "diagnostics", "bos_on_off", "atlas") if fresh.get(k)]
    print(
        f"{path}: built whole ({', '.join(held)}; skip effect on {skip.get('passages', 'no')} "
        f"passages); {len(body) / 1024:.0f} kB, {time.perf_counter() - t0:.0f} s"
    )


def main() -> None:
    from deffcore.cli._common import int_list
    from deffcore.core.constants import POOLINGS
    from deffcore.core.errors import DeffError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--random-seeds", help="the random-weight band's seeds, e.g. 1,2,3,4,5")
    parser.add_argument("--poolings", help="the paired bootstrap's poolings, e.g. default,no_pos0")
    parser.add_argument("--no-skip-effect", action="store_true", help="the atlas alone")
    parser.add_argument("--no-extras", action="store_true", help="no diagnostics, BOS on/off")
    args = parser.parse_args()
    seeds = poolings = None
    try:
        if args.random_seeds is not None:
            seeds = ",".join(map(str, int_list(args.random_seeds, "--random-seeds")))
    except DeffError as err:
        sys.exit(str(err))
    if args.poolings is not None:
        chosen = [p.strip() for p in args.poolings.split(",") if p.strip()]
        if "default" not in chosen or not set(chosen) <= set(POOLINGS):
            sys.exit(f"--poolings: default and some of {', '.join(POOLINGS)}")
        poolings = ",".join(chosen)
    for path in args.files:
        try:
            build(
                path,
                seeds=seeds,
                poolings=poolings,
                skip_effect=not args.no_skip_effect,
                extras=not args.no_extras,
            )
        except DeffError as err:  # a file that is no snapshot, a run that cannot be measured
            sys.exit(f"{path}: {err} (the file is left alone)")


if __name__ == "__main__":
    main()
