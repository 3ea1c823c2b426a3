"""Benchmark: answers in minutes (SPEC 14) on the packaged models, BBC windows.

    nice -n 10 .venv/bin/python benchmarks/bench_anytime.py live [--models smollm2-135m,gemma3-270m]
        [--n 4096] [--plan-n 256] [--max-tokens 128] [--save out.json]
    .venv/bin/python benchmarks/bench_anytime.py replay --entry CACHE/<key> [--reference RUN.json]

`live` (the goals, one model after another, each in this process, on a fresh cache folder):

1. first headline on screen: seconds from the call until the first estimate lands (the BOS
   check's setup: `measure_live` on BBC windows, the model load included), goal <= 60 s;
2. BOS verdict settled: `measure_live(until=StopRule("verdict"))` at N = --n, seconds until it
   stops and the N it stops at, goal <= 600 s, and its regimes against a full N = 4,096 run
   (`--reference`: a snapshot or `measure --json` of that run; default: the shipped
   `deffcore/data/default_run.json` for SmolLM2, the gallery's run for Gemma-3 when its N is
   4,096, else "no reference");
3. planner vs actual: `planner.plan_run` (its short calibration measured first) against the
   wall time of the same run (`measure --plan-n` windows, fixed N, the CLI's own path: live
   estimates and the numbers after extraction; sample seed PLAN_SEED, so the cache cannot
   serve it from goal 2's run), goal within +-30%.

`plan` runs goal 3 alone (a fresh cache folder: the calibration is measured there first).

`replay` reads a run's batches (a complete entry, or the partial/ folder of one still running:
read-only) and prints the trajectory and where each stopping rule would stop, with the verdict
there against the reference: what a live run of that model computes at those marks, without
running the model (the prefix property, `deffcore.statistics.anytime`).

Absolute times depend on the machine and its load: the output records both (`load_average`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

REFERENCES = {
    "smollm2-135m": REPO / "deffcore" / "data" / "default_run.json",
    "gemma3-270m": REPO / "deffcore" / "data" / "gallery" / "gemma3-270m_N512_windows.json",
}


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 1)
    except OSError:
        return None


def reference_regimes(path: Path | None) -> dict[str, Any] | None:
    """{n, regimes} of a reference run (snapshot JSON or `measure --json`)."""
    from deffcore.statistics.verdict import bos_verdict

    if path is None or not Path(path).is_file():
        return None
    data = json.loads(Path(path).read_text())
    m = data.get("measurement", data)
    gaps = {p: r["gap_pct"] for p, r in m["results"].items()}
    return {"n": int(m["n"]), "regimes": bos_verdict(gaps).regimes, "source": str(path)}


def same_verdict(regimes: dict[str, str], reference: dict[str, Any] | None) -> bool | None:
    """The stopped verdict's regimes equal the reference's for every control both have."""
    if reference is None:
        return None
    shared = set(regimes) & set(reference["regimes"])
    return all(regimes[p] == reference["regimes"][p] for p in shared)


def _spec(model: str, n: int, max_tokens: int, seed: int = 0):
    from deffcore.runs.measure import run_spec

    return run_spec(model, "bbc-news", n, max_tokens, seed, "cka", passages="windows")


#: The planner check's sample seed: another sample than goals 1-2's, so its run is extracted
#: (a run of the same settings and a larger N would serve it from the cache).
PLAN_SEED = 1


def first_and_settled(model: str, n: int, max_tokens: int) -> dict[str, Any]:
    """Goals 1 and 2: one `measure_live(until=verdict)` call, timed from its start."""
    from deffcore.runs.anytime_run import measure_live
    from deffcore.statistics.stopping import StopRule

    start = time.perf_counter()
    seen: list[tuple[float, Any]] = []
    spec, device = _spec(model, n, max_tokens)
    live = measure_live(
        spec,
        device=device,
        until=StopRule("verdict"),
        on_estimate=lambda e: seen.append((time.perf_counter() - start, e)),
        final_estimate=False,
    )
    total = time.perf_counter() - start
    last = live.trajectory[-1] if live.trajectory else None
    return {
        "first_estimate_s": seen[0][0] if seen else None,
        "first_n": seen[0][1].n if seen else None,
        "stopped": live.stopped,
        "stop_n": int(live.measurement.n),
        "settled_s": total,
        "regimes": None if last is None else last.regimes,
        "verdict": None if last is None else last.verdict,
        "trajectory": [
            {"n": e.n, "at_s": t, "settled": e.verdict_settled, "unsettled": list(e.unsettled)}
            for t, e in seen
        ],
    }


def plan_vs_actual(model: str, n: int, max_tokens: int) -> dict[str, Any]:
    """Goal 3: the planner's time (after its short calibration) against the run's wall time
    (`python -m deffcore measure` in this process: live estimates and the numbers after)."""
    from deffcore.cli.main import main
    from deffcore.runs.planner import plan_run

    spec, device = _spec(model, n, max_tokens, PLAN_SEED)
    started = time.perf_counter()
    plan_run(spec, device)  # measures the calibration when none is cached
    calibration_s = time.perf_counter() - started
    plan = plan_run(spec, device, calibrate="cached")
    argv = ["measure", "--model", model, "--passages", "windows", "--n", str(n)]
    argv += ["--max-tokens", str(max_tokens), "--seed", str(PLAN_SEED), "--json", "--no-progress"]
    started = time.perf_counter()
    with open(os.devnull, "w") as sink:
        stdout, sys.stdout = sys.stdout, sink
        try:
            code = main(argv)
        finally:
            sys.stdout = stdout
    actual = time.perf_counter() - started
    return {
        "n": n,
        "calibration_s": calibration_s,
        "planned_s": plan.seconds,
        "planned_parts": plan.time_parts,
        "actual_s": actual,
        "ratio": None if not plan.seconds else actual / plan.seconds,
        "exit": code,
        "plan_line": plan.line(),
    }


def plan_only(args: argparse.Namespace) -> dict[str, Any]:
    """Goal 3 alone, on a fresh cache folder (the calibration measured there first)."""
    os.environ["DEFF_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_anytime_plan_")
    out: dict[str, Any] = {"load_average_start": _load_average(), "models": {}}
    for model in args.models.split(","):
        out["models"][model] = {"plan": plan_vs_actual(model, args.plan_n, args.max_tokens)}
        out["models"][model]["load_average_end"] = _load_average()
        print(json.dumps({model: out["models"][model]["plan"]}, default=str), file=sys.stderr)
    return out


def live(args: argparse.Namespace) -> dict[str, Any]:
    os.environ["DEFF_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_anytime_")
    out: dict[str, Any] = {"load_average_start": _load_average(), "models": {}}
    for model in args.models.split(","):
        ref = reference_regimes(Path(args.reference) if args.reference else REFERENCES.get(model))
        row = first_and_settled(model, args.n, args.max_tokens)
        row["same_verdict_as_reference"] = same_verdict(row["regimes"] or {}, ref)
        row["reference"] = ref
        row["plan"] = plan_vs_actual(model, args.plan_n, args.max_tokens)
        row["load_average_end"] = _load_average()
        out["models"][model] = row
        print(json.dumps({model: _summary(row)}, indent=1), file=sys.stderr)
    return out


def _summary(row: dict[str, Any]) -> dict[str, Any]:
    p = row["plan"]
    return {
        "first_estimate_s": row["first_estimate_s"],
        "verdict_settled_s": row["settled_s"],
        "stop_n": row["stop_n"],
        "same_verdict": row["same_verdict_as_reference"],
        "plan_ratio_actual_over_planned": p["ratio"],
    }


def _read_batches(entry: Path):
    """Landed batches of an entry: its partial/ batch files in order, or its states.npz."""
    from deffcore.extraction.forward import SavedBatch

    partial = entry / "partial"
    if partial.is_dir():
        for path in sorted(partial.glob("batch-*.npz")):
            with np.load(path, allow_pickle=False) as z:
                rows = {k: z[k] for k in z.files if k not in ("slots", "cap")}
                yield SavedBatch(z["slots"], rows, None)
        return
    from deffcore.extraction.cache import finished_rows
    from deffcore.extraction.forward import PooledStates

    with np.load(entry / "states.npz", allow_pickle=False) as z:
        pooled = PooledStates(
            pooled={k: z[k] for k in ("default", "first_non_bos", "token_normed", "no_pos0")},
            pos0_norm_ratio=z["pos0_norm_ratio"],
            n_dropped_short=0,
            tokens=0,
            lengths=z["lengths"],
        )
    yield finished_rows(pooled)


def replay(args: argparse.Namespace) -> dict[str, Any]:
    """The trajectory of a stored run's prefixes and where each rule stops (no model)."""
    from deffcore.extraction.cache import PrefixRows, schedule
    from deffcore.statistics.anytime import estimate
    from deffcore.statistics.stopping import StopRule

    entry = Path(args.entry)
    manifest = entry / "partial" / "manifest.json"
    meta = json.loads((manifest if manifest.is_file() else entry / "meta.json").read_text())
    spec = meta["spec"]
    rows = PrefixRows(int(spec["n"]))
    for batch in _read_batches(entry):
        rows.add(batch)
    ref_path = Path(args.reference) if args.reference else REFERENCES.get(spec["model"])
    ref = reference_regimes(ref_path)
    marks = [k for k in schedule(int(spec["n"]), args.batch) if k <= rows.done]
    trajectory, stops = [], {}
    for k in marks:
        started = time.perf_counter()
        est = estimate(rows.pooled(k, max_tokens=int(spec["max_tokens"])))
        trajectory.append(est)
        head = est.poolings["default"]
        print(
            f"N={k:>5}  {head.metric:<12} D/L {head.deff_over_L:.4f} gap {head.gap_pct:+6.2f} "
            f"{head.level:<10} settled={est.verdict_settled} open={list(est.unsettled)} "
            f"({time.perf_counter() - started:.0f} s)",
            file=sys.stderr,
        )
        for target in ("verdict", "solid"):
            rule = StopRule(target)
            if target not in stops and k < int(spec["n"]) and rule.should_stop(trajectory):
                stops[target] = {
                    "n": k,
                    "regimes": est.regimes,
                    "same_verdict_as_reference": same_verdict(est.regimes, ref),
                }
    return {
        "entry": str(entry),
        "spec": spec,
        "landed": rows.done,
        "reference": ref,
        "stops": stops,
        "trajectory": [e.to_dict() for e in trajectory],
        "load_average": _load_average(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="mode", required=True)
    lv = sub.add_parser("live")
    lv.add_argument("--models", default="smollm2-135m,gemma3-270m")
    lv.add_argument("--n", type=int, default=4096)
    lv.add_argument("--plan-n", type=int, default=256)
    lv.add_argument("--max-tokens", type=int, default=128)
    lv.add_argument("--reference", default=None)
    pl = sub.add_parser("plan")
    pl.add_argument("--models", default="smollm2-135m,gemma3-270m")
    pl.add_argument("--plan-n", type=int, default=256)
    pl.add_argument("--max-tokens", type=int, default=128)
    rp = sub.add_parser("replay")
    rp.add_argument("--entry", required=True)
    rp.add_argument("--reference", default=None)
    rp.add_argument("--batch", type=int, default=32)
    for q in (lv, pl, rp):
        q.add_argument("--save", type=Path, default=None)
    args = p.parse_args()
    out = {"live": live, "plan": plan_only, "replay": replay}[args.mode](args)
    if args.save is not None:
        args.save.write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps(out.get("models", out), default=str)[:4000])


if __name__ == "__main__":
    main()
