"""Give a shipped snapshot its run's paired bootstrap (SPEC 15), nothing else recomputed.

    .venv/bin/python scripts/add_paired.py deffcore/data/default_run.json [--poolings P,...]

A snapshot made before the paired bootstrap existed carries a bootstrap of its default pooling
alone, so its BOS answer adds the two gaps' errors ("unpaired"). This draws the run's one paired
bootstrap as `measure --bootstrap B --bootstrap-poolings P` draws it today (the file's B, seed
and metric; `--poolings`, default `default,no_pos0`: the two the BOS answer compares) from the
run's own states (a cache hit, or one extraction), and checks that it is the file's bootstrap:
its default-pooling replicates must equal the file's stored samples (the same passage
multisets, the same statistic), so every number the file already shows stays as it is. Only
then are the file's `paired` field and its command's `--bootstrap-poolings` written (checked
by the one schema, replaced atomically); else the file is left alone and the script exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _why_not_the_files(pb, shipped: dict, metric: str) -> str | None:
    """Why the paired bootstrap's default replicates are not the file's bootstrap, or None."""
    stored = shipped["measurement"].get("bootstrap") or {}
    samples = np.asarray(stored.get("samples") or [], dtype=float)
    mine = np.asarray(pb.result("default", metric).samples, dtype=float)
    if samples.shape != mine.shape:
        return f"the file stores {samples.size} replicates, the paired bootstrap has {mine.size}"
    if not np.allclose(mine, samples, rtol=0, atol=2e-6):
        return "its default replicates differ from the file's stored bootstrap"
    return None


def add_paired(path: Path, poolings: tuple[str, ...]) -> None:
    from deffcore.core.files import write_output
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.runs.measure import measure_spec
    from deffcore.views.run_schema import check_snapshot

    t0 = time.perf_counter()
    shipped = check_snapshot(json.loads(path.read_text()), str(path))
    metric = shipped["measurement"]["metric"]
    stored = shipped["measurement"].get("bootstrap") or {}
    if not stored.get("B"):
        sys.exit(f"{path}: the file has no bootstrap to pair; the file is left alone")
    spec = RunSpec(**shipped["spec"])
    m = measure_spec(spec, metric=metric)
    # as `measure --bootstrap` draws it: the metric and its BOS answer's stand-in (SPEC 15)
    pb = m.answer_bootstrap(poolings, metric, B=int(stored["B"]), seed=spec.seed)
    why = _why_not_the_files(pb, shipped, metric)
    if why is not None:
        sys.exit(f"{path}: not the file's bootstrap ({why}); the file is left alone")
    command = shipped["command"].split(" --bootstrap-poolings ")[0]
    out = {**shipped, "paired": pb.to_dict(), "command": f"{command} --bootstrap-poolings "
           f"{','.join(poolings)}"}  # fmt: skip
    out = check_snapshot(out, str(path))
    body = json.dumps(out, separators=(",", ":")).encode()
    write_output(path, body, str(path))
    print(f"{path}: paired bootstrap of {', '.join(poolings)} (B = {pb.B}); "
          f"{len(body) / 1024:.0f} kB, {time.perf_counter() - t0:.0f} s")  # fmt: skip


def main() -> None:
    from deffcore.core.constants import POOLINGS
    from deffcore.core.errors import DeffError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--poolings", default="default,no_pos0")
    args = parser.parse_args()
    poolings = tuple(p.strip() for p in args.poolings.split(",") if p.strip())
    if "default" not in poolings or not set(poolings) <= set(POOLINGS):
        sys.exit(f"--poolings: default and some of {', '.join(POOLINGS)}")
    for path in args.files:
        try:
            add_paired(path, poolings)
        except DeffError as err:
            sys.exit(f"{path}: {err} (the file is left alone)")


if __name__ == "__main__":
    main()
