"""Benchmark: a sweep of 8 tiny cells on Ray against a serial loop of `measure`, same process.

    .venv/bin/python benchmarks/bench_sweep.py                 # 8 tiny cells, N=64, 64 tokens
    .venv/bin/python benchmarks/bench_sweep.py --n 128 --num-cpus 2

Each path starts from its own empty cache folder (nothing is read from a cache):

- loop:          `measure(...)` once per cell, one after the other (the baseline: what one
                 writes without sweeps; torch uses every core of this process);
- sweep serial:  `run_sweep(engine="serial")` (same work, plus keeping one model between cells);
- ray cold:      `run_sweep(engine="ray")`, local runtime of `--num-cpus` CPUs started and shut
                 down inside the timing (what `python -m deffcore sweep --engine ray` costs);
- ray warm:      the same sweep in a runtime that is already running (a cluster you joined);
- ray start:     starting the local runtime alone (`ray.init`).

Reported: wall seconds of each path, speed-up loop / ray (cold and warm), and Ray's per-cell
overhead = (workers x warm wall - sum of the cells' own compute seconds in the workers) / cells:
the worker time per cell not spent extracting (scheduling, moving states to the driver, the
driver storing them, a new worker importing torch). One run per path (the machine is shared:
other processes only ever slow a run down, so compare paths run back to back).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deffcore.sweep import Cell, ray_runtime, run_sweep

CELLS = [
    Cell("tiny-llama"),
    Cell("tiny-gpt2"),
    Cell("tiny-qwen2"),
    Cell("tiny-qwen3"),
    Cell("tiny-olmo2"),
    Cell("tiny-gptneox"),
    Cell("tiny-gemma3"),
    Cell("tiny-llama", seed=1),
]


def fresh_cache() -> None:
    os.environ["DEFF_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-sweep-")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--num-cpus", type=int, default=2)
    args = ap.parse_args()
    kw = {"n": args.n, "max_tokens": args.max_tokens}
    from deffcore.measurement import measure

    # warm the imports and the dataset for every path alike
    fresh_cache()
    measure(model="tiny-llama", n=8, max_tokens=16)

    times: dict[str, float] = {}
    fresh_cache()
    t = time.perf_counter()
    for c in CELLS:
        measure(model=c.model_spec, **kw)
    times["loop"] = time.perf_counter() - t

    fresh_cache()
    t = time.perf_counter()
    serial = run_sweep(CELLS, **kw, engine="serial")
    times["sweep serial"] = time.perf_counter() - t

    fresh_cache()
    t = time.perf_counter()
    cold = run_sweep(CELLS, **kw, engine="ray", num_cpus=args.num_cpus)
    times["ray cold"] = time.perf_counter() - t

    t = time.perf_counter()
    with ray_runtime(num_cpus=args.num_cpus):
        times["ray start"] = time.perf_counter() - t
        fresh_cache()
        t = time.perf_counter()
        warm = run_sweep(CELLS, **kw, engine="ray")
        times["ray warm"] = time.perf_counter() - t

    for result in (serial, cold, warm):
        assert all(r["status"] == "done" for r in result.rows), [r["error"] for r in result.rows]
    for a, b in zip(serial.rows, warm.rows, strict=True):
        assert abs(a["deff_over_L"] - b["deff_over_L"]) < 1e-5, (a["label"], a, b)
    compute = sum(r["seconds"] for r in warm.rows)
    workers = len({r["worker"] for r in warm.rows})
    overhead = (args.num_cpus * times["ray warm"] - compute) / len(CELLS)

    print(f"{len(CELLS)} tiny cells, N={args.n}, {args.max_tokens} tokens, local Ray runtime of "
          f"{args.num_cpus} CPUs, os.cpu_count()={os.cpu_count()}")  # fmt: skip
    for name, secs in times.items():
        print(f"  {name:<13} {secs:7.1f} s")
    print(f"  speed-up loop/ray cold {times['loop'] / times['ray cold']:.2f}x, "
          f"loop/ray warm {times['loop'] / times['ray warm']:.2f}x, "
          f"loop/sweep serial {times['loop'] / times['sweep serial']:.2f}x")  # fmt: skip
    print(f"  warm: {workers} worker processes, cells' own compute {compute:.1f} s in total, "
          f"Ray overhead {overhead:.2f} s per cell")  # fmt: skip


if __name__ == "__main__":
    main()
