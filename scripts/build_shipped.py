"""Build a shipped run whole: a snapshot file made again from its own run, reusing the cache.

    .venv/bin/python scripts/build_shipped.py deffcore/data/default_run.json
    .venv/bin/python scripts/build_shipped.py --random-seeds 1,2,3,4,5 FILE   # the null's seeds
    .venv/bin/python scripts/build_shipped.py --poolings default,no_pos0 FILE # the paired ones
    .venv/bin/python scripts/build_shipped.py --no-skip-effect FILE           # atlas, no skips
    .venv/bin/python scripts/build_shipped.py --no-extras FILE    # the command as it is (gallery)
    .venv/bin/python scripts/build_shipped.py --measures procrustes,rsa FILE  # SPEC 17 matrices
    .venv/bin/python scripts/build_shipped.py --measures-only FILE  # those alone, the rest kept
    .venv/bin/python scripts/build_shipped.py --digests   # record the shipped files' digests

For each snapshot file, the command it holds (the `deffcore measure ...` that made it) is run
by the CLI itself (`deffcore.cli.main.main`), completed with what a page would otherwise
compute on request: `--diagnostics` (massive activations and sinks) and `--bos-on-off` (the
run with bos=add and bos=none; `--no-extras`: neither, the command as it is). `--random-seeds
S` and `--poolings P` set the random-weight band's seeds and the paired bootstrap's poolings
(`--bootstrap-poolings`), else the command's own are kept. So the new file holds the run,
its random-weight band, its paired bootstrap (SPEC 15), its trust and BOS answer, its
diagnostics, its BOS on/off check and its depth-use atlas (SPEC 16) exactly as `measure
--snapshot` writes them; then the atlas's skip effect on the run's
first 64 passages (`lenses.atlas.atlas_of`; `--no-skip-effect`: none); then the point-estimate
matrices of the SPEC 17 measures `--measures` names for the default pooling (SPEC 17.5: what
the metric picker draws; `Measurement.measure_similarity`, one all-pairs pass each, not the
table's bootstrap): `all` (the default for the shipped default run), `none`, or a list; for
any other file, by default, the ones it holds. Every forward pass, diagnostic, skip pass and
measure matrix the cache ($DEFF_CACHE_DIR) holds is read back, not run again.

`--measures-only` adds those matrices to the file as it is, without running its command again
(the diagnostics, BOS on/off runs, random-weight band and skip effect can take long): the
file's run is read back from the cache (or extracted), its default metrics' matrices must equal
the file's, and every other key of the file is kept as it is.

The new file must be the file's own run: the file's key must be its spec's, and the new
file's key, spec, every similarity matrix and its stored bootstrap's replicates must equal the
file's (to the file's rounding; a measure's matrix it holds, too), so no number the file
shows moves (what the run took when the
file was made, `elapsed_s` and `cached`, is kept from the file); else the file is left alone and
the script exits 1. The result is checked by the one schema
(`views.run_schema.check_snapshot`) and replaced atomically (`core.files.write_output`).

After any build, and alone with `--digests` (after `make_gallery.sh`, say), every shipped
snapshot (deffcore/data/default_run.json and gallery/*.json) is checked by that schema again
and the sha256 of its bytes recorded in deffcore/data/checked_snapshots.json
(`views.run.CHECKED_DIGESTS`): the app opens exactly those bytes without checking them again
(its first screen then needs no pydantic); a file that differs is checked in full.
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


def measure_names(value: str) -> tuple[str, ...]:
    """The SPEC 17 measures `--measures` names (`all`, `none` or a comma list), in the table's
    order; ValueError for a name that is no SPEC 17 measure."""
    from deffcore.core.constants import METRICS
    from deffcore.statistics.measure_table import TABLE_MEASURES

    known = tuple(m for m in TABLE_MEASURES if m not in METRICS)
    chosen = {m.strip() for m in value.split(",") if m.strip()}
    if chosen == {"all"}:
        return known
    if chosen <= {"none"}:
        return ()
    if not chosen <= set(known):
        raise ValueError(f"--measures: all, none or some of {', '.join(known)}")
    return tuple(m for m in known if m in chosen)


def default_measures(path: Path) -> tuple[str, ...] | None:
    """The measures a build gives a file unless `--measures` says: all of them for the shipped
    default run (its first screen draws any the picker offers), else None (the file's own)."""
    from deffcore.views.run import DEFAULT_RUN_PATH

    return measure_names("all") if path.resolve() == DEFAULT_RUN_PATH.resolve() else None


def held_measures(snapshot: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Per pooling, the SPEC 17 measures whose matrices `snapshot` holds."""
    from deffcore.core.constants import METRICS

    held = {p: tuple(k for k in by if k not in METRICS) for p, by in snapshot["similarity"].items()}
    return {p: names for p, names in held.items() if names}


def with_measures(
    snapshot: dict[str, Any], m: Any, wanted: dict[str, tuple[str, ...]]
) -> dict[str, Any]:
    """`snapshot` whose similarity holds, beside each pooling's metrics, exactly the `wanted`
    SPEC 17 measures' matrices of the run `m` (`Measurement.measure_similarity`: read back from
    the cache or computed, one all-pairs pass each; each one's seconds printed), rounded as
    `Run.to_snapshot` rounds them."""
    from deffcore.core.constants import METRICS
    from deffcore.views.run import _rounded

    for pooling, by in snapshot["similarity"].items():
        mine = {k: v for k, v in by.items() if k in METRICS}
        for measure in wanted.get(pooling, ()):
            t0 = time.perf_counter()
            mine[measure] = _rounded(m.measure_similarity(pooling, measure))
            print(f"{pooling} {measure}: {time.perf_counter() - t0:.1f} s", flush=True)
        snapshot["similarity"][pooling] = mine
    return snapshot


def why_not_the_files(fresh: dict[str, Any], shipped: dict[str, Any]) -> str | None:
    """Why `fresh` (a snapshot dict made now) is not the run of `shipped`, or None."""
    if fresh["key"] != shipped["key"] or fresh["spec"] != shipped["spec"]:
        return f"not the file's run (the key is {fresh['key']}, the file's {shipped['key']})"
    for pooling, by_metric in shipped["similarity"].items():
        for metric, matrix in by_metric.items():
            if metric not in fresh["similarity"].get(pooling, {}):
                continue  # a measure the build was not asked for: dropped, not compared
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
    path: Path,
    *,
    seeds: str | None,
    poolings: str | None,
    skip_effect: bool,
    extras: bool = True,
    measures: tuple[str, ...] | None = None,
    measures_only: bool = False,
) -> None:
    """Make the snapshot at `path` again from its own run (module docstring); `measures`: the
    SPEC 17 measures of its default pooling (None: the ones the file holds)."""
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
    wanted = held_measures(shipped)
    if measures is not None:
        wanted = {p: names for p, names in {**wanted, "default": measures}.items() if names}
    if measures_only:
        add_measures(path, shipped, spec, wanted, t0)
        return
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
    m = measure_spec(RunSpec(**fresh["spec"]), metric=fresh["measurement"]["metric"])
    fresh = with_measures(fresh, m, wanted)
    why = why_not_the_files(fresh, shipped)
    if why is not None:
        sys.exit(f"{path}: {why}; the file is left alone")
    fresh = with_files_provenance(fresh, shipped)
    if skip_effect:
        atlas_of(m, skip_effect=True)
        fresh["atlas"] = Run.from_measurement(m).to_snapshot(command=fresh["command"])["atlas"]
    fresh = check_snapshot(fresh, str(path))
    body = json.dumps(fresh, separators=(",", ":")).encode()
    write_output(path, body, str(path))
    skip = (fresh.get("atlas") or {}).get("skip_effect") or {}
    held = [k for k in ("paired", "diagnostics", "bos_on_off", "atlas") if fresh.get(k)]
    print(
        f"{path}: built whole ({', '.join(held)}; skip effect on {skip.get('passages', 'no')} "
        f"passages; {_measures_line(fresh)}); {len(body) / 1024:.0f} kB, "
        f"{time.perf_counter() - t0:.0f} s"
    )


def add_measures(
    path: Path, shipped: dict[str, Any], spec: Any, wanted: dict[str, tuple[str, ...]], t0: float
) -> None:
    """`--measures-only`: the file as it is, its similarity holding the `wanted` measures'
    matrices of its own run (module docstring); else it is left alone and the script exits 1."""
    from deffcore.core.constants import METRICS
    from deffcore.core.files import write_output
    from deffcore.runs.measure import measure_spec
    from deffcore.views.run import _rounded
    from deffcore.views.run_schema import check_snapshot

    m = measure_spec(spec, metric=shipped["measurement"]["metric"])
    live = {
        "key": m.spec.key(),
        "spec": shipped["spec"],
        "similarity": {
            p: {k: _rounded(m.similarity(p, k)) for k in METRICS}
            for p in ("default", *(p for p in wanted if p != "default"))
        },
        "measurement": shipped["measurement"],  # its bootstrap is kept, not drawn again
    }
    live = with_measures(live, m, wanted)
    why = why_not_the_files(live, shipped)
    if why is not None:
        sys.exit(f"{path}: {why}; the file is left alone")
    new = json.loads(json.dumps(shipped))
    for pooling, by in new["similarity"].items():
        mine = live["similarity"].get(pooling, {})
        new["similarity"][pooling] = {
            **{k: v for k, v in by.items() if k in METRICS},
            **{k: v for k, v in mine.items() if k not in METRICS},
        }
    new = check_snapshot(new, str(path))
    body = json.dumps(new, separators=(",", ":")).encode()
    write_output(path, body, str(path))
    print(
        f"{path}: {_measures_line(new)}, the rest kept; {len(body) / 1024:.0f} kB, "
        f"{time.perf_counter() - t0:.0f} s"
    )


def record_digests() -> dict[str, str]:
    """Check every shipped snapshot with the one schema and record the sha256 of its bytes
    (module docstring); a file the schema refuses stops the script, nothing recorded."""
    import hashlib

    from deffcore.core.files import DATA_DIR, write_output
    from deffcore.views.run import CHECKED_DIGESTS, DEFAULT_RUN_PATH, GALLERY_DIR
    from deffcore.views.run_schema import check_snapshot, parse_snapshot_json

    digests = {}
    for path in [DEFAULT_RUN_PATH, *sorted(GALLERY_DIR.glob("*.json"))]:
        raw = path.read_bytes()
        try:
            check_snapshot(parse_snapshot_json(raw.decode("utf-8"), path.name), path.name)
        except ValueError as err:  # SnapshotError, not UTF-8, not JSON: each a ValueError
            sys.exit(f"{path}: {err}; no digest recorded")
        digests[path.relative_to(DATA_DIR).as_posix()] = hashlib.sha256(raw).hexdigest()
    body = (json.dumps(digests, indent=1, sort_keys=True) + "\n").encode()
    write_output(CHECKED_DIGESTS, body, str(CHECKED_DIGESTS))
    print(f"{CHECKED_DIGESTS}: {len(digests)} shipped snapshots checked, digests recorded")
    return digests


def _measures_line(snapshot: dict[str, Any]) -> str:
    """Which SPEC 17 measures' matrices `snapshot` holds, in a few words."""
    held = held_measures(snapshot)
    if not held:
        return "no SPEC 17 measure"
    return "; ".join(f"{p}: {', '.join(names)}" for p, names in held.items())


def main() -> None:
    from deffcore.cli._common import int_list
    from deffcore.core.constants import POOLINGS
    from deffcore.core.errors import DeffError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument(
        "--digests", action="store_true", help="only check the shipped files, record digests"
    )
    parser.add_argument("--random-seeds", help="the random-weight band's seeds, e.g. 1,2,3,4,5")
    parser.add_argument("--poolings", help="the paired bootstrap's poolings, e.g. default,no_pos0")
    parser.add_argument("--no-skip-effect", action="store_true", help="the atlas alone")
    parser.add_argument("--no-extras", action="store_true", help="no diagnostics, BOS on/off")
    parser.add_argument(
        "--measures",
        help="the SPEC 17 measures' matrices of the default pooling: all, none or a list "
        "(default: all for the shipped default run, else the ones the file holds)",
    )
    parser.add_argument(
        "--measures-only", action="store_true", help="add those alone; the file's rest kept"
    )
    args = parser.parse_args()
    if not args.files and not args.digests:
        parser.error("name the snapshot files to build, or --digests")
    seeds = poolings = measures = None
    if args.measures is not None:
        try:
            measures = measure_names(args.measures)
        except ValueError as err:
            sys.exit(str(err))
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
                measures=measures if measures is not None else default_measures(path),
                measures_only=args.measures_only,
            )
        except DeffError as err:  # a file that is no snapshot, a run that cannot be measured
            sys.exit(f"{path}: {err} (the file is left alone)")
    record_digests()


if __name__ == "__main__":
    main()
