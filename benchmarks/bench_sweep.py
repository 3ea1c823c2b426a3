"""Benchmark: a sweep on Ray against a serial loop of `measure` over the same cells, same process.

    .venv/bin/python benchmarks/bench_sweep.py                 # 8 tiny cells, N=64, 64 tokens
    .venv/bin/python benchmarks/bench_sweep.py --n 128 --num-cpus 2
    python3 benchmarks/bench_sweep.py --cells shape --n-cells 16 --n 32    # 16 cores
    python3 benchmarks/bench_sweep.py --cells shape --n-cells 4 --n 2048 --device cuda \
        --gpus-per-cell 0.25 --paths loop,ray-cold                        # 4 cells share a GPU

Cells: `tiny` (tiny-llama, -gpt2, -qwen2, -qwen3, -olmo2, -gptneox, -gemma3, then random seeds
of tiny-llama up to `--n-cells`) or `shape` (`--n-cells` random seeds of the packaged SmolLM2's
shape, `random:smollm2-135m-shape:<seed>`: 135M parameters, byte tokenizer, no packaged file
needed). Each path starts from its own empty cache folder (nothing is read from a cache):

- loop:          `measure(...)` once per cell, one after the other (the baseline: what one
                 writes without sweeps; torch uses every core of this process, or the GPU);
- sweep serial:  `run_sweep(engine="serial")` (same work, plus keeping one model between cells);
- ray cold:      `run_sweep(engine="ray")`, local runtime of `--num-cpus` CPUs (and the GPUs,
                 with `--gpus-per-cell`) started and shut down inside the timing (what
                 `python -m deffcore sweep --engine ray` costs);
- ray warm:      the same sweep in a runtime that is already running (a cluster you joined);
- ray start:     starting the local runtime alone (`ray.init`).

CPU cells ask for 1 CPU each (Ray then runs that many at once, one torch thread each); GPU cells
(`--device cuda`) for `--gpus-per-cell` GPUs each, so 0.25 runs four at once on one GPU.

Reported: wall seconds of each path, speed-up loop / ray (cold and warm), and Ray's per-cell
overhead = (workers x warm wall - sum of the cells' own compute seconds in the workers) / cells:
the worker time per cell not spent extracting (scheduling, moving states to the driver, the
driver storing them, a new worker importing torch). One run per path (the machine is shared:
other processes only ever slow a run down, so compare paths run back to back). `--json FILE`
writes the figures.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deffcore.work.sweep import ray_runtime
from deffcore.work.sweep.cells import Cell
from deffcore.work.sweep.runner import run_sweep

TINY = ["tiny-llama", "tiny-gpt2", "tiny-qwen2", "tiny-qwen3", "tiny-olmo2", "tiny-gptneox",
        "tiny-gemma3"]  # fmt: skip
PATHS = ("loop", "sweep-serial", "ray-cold", "ray-warm")


def make_cells(kind: str, count: int, dataset: str = "bbc-news") -> list[Cell]:
    if kind == "shape":
        return [Cell("smollm2-135m-shape", seed=s, dataset=dataset) for s in range(count)]
    cells = [Cell(m, dataset=dataset) for m in TINY[:count]]
    cells += [Cell("tiny-llama", seed=s, dataset=dataset) for s in range(1, count - len(cells) + 1)]
    return cells


def synthetic_dataset(passages: int) -> str:
    """A .txt dataset of `passages` passages of pseudo-random words (a machine without the BBC
    package; a sweep's cost does not depend on what the text says)."""
    import numpy as np

    rng = np.random.default_rng(0)
    words = [
        "".join(rng.choice(list("etaoinshrdlucmfwyp"), size=k)) for k in rng.integers(2, 9, 500)
    ]
    blocks = [" ".join(rng.choice(words, size=60)) for _ in range(passages)]
    path = Path(tempfile.mkdtemp(prefix="bench-sweep-data-")) / "synthetic.txt"
    path.write_text("\n\n".join(blocks), encoding="utf-8")
    return str(path)


def fresh_cache() -> None:
    os.environ["DEFF_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-sweep-")


def run_paths(cells: list[Cell], args) -> dict[str, Any]:
    """Wall seconds of each asked-for path over `cells`, and the results to compare."""
    from deffcore.runs.measure import measure

    kw = {"n": args.n, "max_tokens": args.max_tokens, "device": args.device}
    ray_kw = {"num_cpus": args.num_cpus, "gpus_per_cell": args.gpus_per_cell}
    fresh_cache()  # warm the imports and the dataset for every path alike
    measure(model="tiny-llama", dataset=cells[0].dataset, n=8, max_tokens=16, device=args.device)
    times: dict[str, float] = {}
    results: dict[str, Any] = {}
    paths = args.paths.split(",")
    if "loop" in paths:
        fresh_cache()
        t = time.perf_counter()
        results["loop"] = [measure(model=c.model_spec, dataset=c.dataset, **kw) for c in cells]
        times["loop"] = time.perf_counter() - t
    if "sweep-serial" in paths:
        fresh_cache()
        t = time.perf_counter()
        results["sweep-serial"] = run_sweep(cells, **kw, engine="serial")
        times["sweep-serial"] = time.perf_counter() - t
    if "ray-cold" in paths:
        fresh_cache()
        t = time.perf_counter()
        results["ray-cold"] = run_sweep(cells, **kw, engine="ray", **ray_kw)
        times["ray-cold"] = time.perf_counter() - t
    if "ray-warm" in paths:
        t = time.perf_counter()
        gpus = None if not args.gpus_per_cell else _gpu_count()
        with ray_runtime(num_cpus=args.num_cpus, num_gpus=gpus) as gcs:
            times["ray-start"] = time.perf_counter() - t
            fresh_cache()
            t = time.perf_counter()
            results["ray-warm"] = run_sweep(cells, **kw, engine="ray", address=gcs,
                                            gpus_per_cell=args.gpus_per_cell)  # fmt: skip
            times["ray-warm"] = time.perf_counter() - t
    return {"times": times, "results": results}


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def summarise(cells: list[Cell], args, times: dict[str, float], results: dict[str, Any]):
    """Check every path's numbers agree; speed-ups against the loop; Ray's overhead per cell."""
    deff = {}
    for name, res in results.items():
        if name == "loop":
            deff[name] = [m.summary().deff_over_L for m in res]
            continue
        bad = [r["error"] for r in res.rows if r["status"] != "done"]
        assert not bad, (name, bad)
        deff[name] = [r["deff_over_L"] for r in res.rows]
    ref = next(iter(deff.values()))
    for name, values in deff.items():
        assert max(abs(a - b) for a, b in zip(ref, values, strict=True)) < 1e-5, name
    row: dict[str, Any] = {"cells": len(cells), "cell_kind": args.cells, "n": args.n,
                           "max_tokens": args.max_tokens, "device": args.device,
                           "num_cpus": args.num_cpus or os.cpu_count(),
                           "gpus_per_cell": args.gpus_per_cell, "cpu_count": os.cpu_count(),
                           **{f"{k}_s": v for k, v in times.items()}}  # fmt: skip
    for name in ("sweep-serial", "ray-cold", "ray-warm"):
        if "loop" in times and name in times:
            row[f"loop_over_{name}"] = times["loop"] / times[name]
    for name in ("ray-warm", "ray-cold"):
        if name in results:
            compute = sum(r["seconds"] for r in results[name].rows)
            workers = len({r["worker"] for r in results[name].rows})
            slots = _slots(args, len(cells))
            row.update({f"{name}_workers": workers, f"{name}_compute_s": compute,
                        f"{name}_overhead_per_cell_s":
                            (slots * times[name] - compute) / len(cells)})  # fmt: skip
    return row


def _slots(args, cells: int) -> int:
    """Cells Ray runs at once: one per CPU, or 1/gpus_per_cell per GPU."""
    if args.gpus_per_cell:
        return min(cells, round(_gpu_count() / args.gpus_per_cell))
    return min(cells, args.num_cpus or os.cpu_count() or 1)


def report(row: dict[str, Any]) -> None:
    print(f"{row['cells']} {row['cell_kind']} cells, N={row['n']}, {row['max_tokens']} tokens, "
          f"{row['device']}, Ray runtime of {row['num_cpus']} CPUs, gpus/cell "
          f"{row['gpus_per_cell']}, os.cpu_count()={row['cpu_count']}")  # fmt: skip
    for key, value in row.items():
        if key.endswith("_s") and not key.endswith(("overhead_per_cell_s", "compute_s")):
            print(f"  {key[:-2]:<13} {value:7.1f} s")
    for key, value in row.items():
        if key.startswith("loop_over_"):
            print(f"  speed-up loop / {key.removeprefix('loop_over_')}: {value:.2f}x")
    for name in ("ray-cold", "ray-warm"):
        if f"{name}_workers" in row:
            print(f"  {name}: {row[f'{name}_workers']} worker processes, cells' own compute "
                  f"{row[f'{name}_compute_s']:.1f} s in total, Ray overhead "
                  f"{row[f'{name}_overhead_per_cell_s']:.2f} s per cell")  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", choices=("tiny", "shape"), default="tiny")
    ap.add_argument("--n-cells", type=int, default=8)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--num-cpus", type=int, default=None, help="default: every core (tiny: 2)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--gpus-per-cell", type=float, default=None)
    ap.add_argument("--paths", default=",".join(PATHS), help=f"some of {', '.join(PATHS)}")
    ap.add_argument("--dataset", default="bbc-news",
                    help="a dataset spec, or synthetic:<passages> (generated text)")  # fmt: skip
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.num_cpus is None and args.cells == "tiny" and args.n_cells == 8:
        args.num_cpus = 2  # the original benchmark's setting
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    dataset = args.dataset
    if dataset.startswith("synthetic:"):
        dataset = synthetic_dataset(int(dataset.removeprefix("synthetic:")))
    cells = make_cells(args.cells, args.n_cells, dataset)
    ran = run_paths(cells, args)
    row = summarise(cells, args, ran["times"], ran["results"])
    report(row)
    if args.json:
        Path(args.json).write_text(json.dumps(row, indent=1))
    return row


if __name__ == "__main__":
    main()
