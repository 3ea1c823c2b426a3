"""The BOS answer on a real run, paired beside unpaired, and where `--until verdict` stops.

    nice -n 10 .venv/bin/python benchmarks/bench_bos_answer_real.py --entry cache/<key> \
        [--n 1024,4096] [--B 100] [--marks] [--live-B 50]

`--entry`: a cache entry, complete or still extracting (its checkpointed batches: a window
run's first k rows are the k-run, bit for bit, `deffcore.extraction.cache`). For each N in
`--n` (at most what has landed) the run of N windows is read from those rows, and the BOS
page's answer is computed as `measure --bootstrap B --json` computes it: the unpaired rule
(both errors added) and the paired one (`Measurement.paired_bootstrap` of default and no_pos0,
B replicates), with the time the bootstrap took. `--marks`: the live estimates a run of the
entry's N makes at 32, 64, ... (`anytime.estimate` with the paired bootstrap, B = `--live-B`)
and where `StopRule("verdict")` stops, with each estimate's time (the extraction is not timed
here: no model is run). Read-only: nothing is written to the cache.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_anytime import _read_batches  # noqa: E402

from deffcore.extraction.cache import PrefixRows, schedule  # noqa: E402
from deffcore.inputs.run_spec import RunSpec  # noqa: E402
from deffcore.runs.measure import Measurement  # noqa: E402
from deffcore.statistics.anytime import estimate  # noqa: E402
from deffcore.statistics.bos_answer import ANSWER_POOLINGS, position0_answer_for  # noqa: E402
from deffcore.statistics.stopping import StopRule  # noqa: E402


def _rows(entry: Path) -> tuple[RunSpec, PrefixRows]:
    manifest = entry / "partial" / "manifest.json"
    meta = json.loads((manifest if manifest.is_file() else entry / "meta.json").read_text())
    spec = RunSpec(**meta["spec"])
    rows = PrefixRows(spec.n)
    for batch in _read_batches(entry):
        rows.add(batch)
    return spec, rows


def answers(spec: RunSpec, rows: PrefixRows, n: int, B: int) -> dict:
    pooled = rows.pooled(n, max_tokens=spec.max_tokens)
    m = Measurement(spec=replace(spec, n=n), pooled=pooled, metric="cka")
    unpaired = position0_answer_for(m.view(), "cka").to_dict()
    start = time.perf_counter()
    pb = m.paired_bootstrap(ANSWER_POOLINGS, ("cka",), B=B, seed=spec.seed)
    seconds = time.perf_counter() - start
    paired = position0_answer_for(m.view(), "cka", paired=pb).to_dict()
    return {"n": n, "unpaired": unpaired, "paired": paired, "bootstrap_s": seconds}


def marks(spec: RunSpec, rows: PrefixRows, B: int, batch: int) -> dict:
    trajectory, stop, out = [], None, []
    for k in schedule(spec.n, batch):
        if k > rows.done:
            break
        start = time.perf_counter()
        est = estimate(rows.pooled(k, max_tokens=spec.max_tokens), bootstrap=B, seed=spec.seed,
                       bootstrap_poolings=ANSWER_POOLINGS, spec=spec)  # fmt: skip
        seconds = time.perf_counter() - start
        trajectory.append(est)
        a = est.position0
        keys = ("metric", "verdict", "delta", "interval", "trust")
        out.append({"n": k, "seconds": seconds, **{key: a[key] for key in keys}})
        print(f"N={k:>5} {a['metric']:<12} {a['verdict']:<13} Δ {a['delta']:+.2f} "
              f"{a['interval']} trust {a['trust']} ({seconds:.0f} s)", file=sys.stderr)  # fmt: skip
        if stop is None and k < spec.n and StopRule("verdict").should_stop(trajectory):
            stop = {"n": k, "verdict": a["verdict"]}
            break
    return {"marks": out, "stop": stop}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--entry", required=True)
    p.add_argument("--n", default="1024")
    p.add_argument("--B", type=int, default=100)
    p.add_argument("--marks", action="store_true")
    p.add_argument("--live-B", type=int, default=50)
    p.add_argument("--batch", type=int, default=32)
    args = p.parse_args()
    spec, rows = _rows(Path(args.entry))
    out = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        "spec": spec.__dict__,
        "landed": rows.done,
    }
    if args.marks:
        out["live"] = marks(spec, rows, args.live_B, args.batch)
    out["answers"] = []
    for n in (int(x) for x in args.n.split(",")):
        if n <= rows.done:
            out["answers"].append(answers(spec, rows, n, args.B))
            a = out["answers"][-1]
            print(f"N={n}: unpaired {a['unpaired']['sentence']}\n  paired {a['paired']['sentence']}"
                  f" ({a['bootstrap_s']:.0f} s)", file=sys.stderr)  # fmt: skip
    out["load_after"] = os.getloadavg()[0]
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
