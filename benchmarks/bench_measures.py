"""Benchmark: each SPEC section 17 measure's all-pairs matrix against linear CKA's, same process.

    .venv/bin/python benchmarks/bench_measures.py [--layers 30] [--n 4096] [--d 576]
                                                  [--measures procrustes,...] [--null 1]

Random-walk states (L + 1 = 31 states of N passages, d features, float32, seeded; neighbouring
layers alike as in a model) are drawn once. In the same process:

  cka        `similarity_matrix(states, "cka")`: the baseline (its cost model picks the route)
  unbiased_cka, cosine  `similarity_matrix` under the run's other metrics (the table's rows of
             section 17.4), as ratios to the same baseline
  <measure>  `measure_matrix(states, measure)` for each measure: prepare every layer once, then
             all L(L+1)/2 pairs; printed as seconds, as a ratio to the baseline, and split into
             the per-layer step and the pair step
  null       with --null B: B permutations of the pair step (`pairs_matrix` with a
             `Permutation`), what `calibrated_similarity` adds per permutation

The baseline is timed again at the end (the load of a shared machine moves during a long run).
The default is the issue's full size (L = 30, N = 4,096, d = 576); on a loaded 2-core machine
run a reduced size (BENCHMARKS.md, "Similarity measures beside CKA" records which).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deffcore.measures.similarity import similarity_matrix  # noqa: E402
from deffcore.measures.similarity_measures import (  # noqa: E402
    MEASURES,
    MeasureOptions,
    Permutation,
    pairs_matrix,
    prepare_layers,
)


def states_of(layers: int, n: int, d: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    steps = rng.standard_normal((layers + 1, n, d)).astype(np.float32)
    return np.cumsum(steps, axis=0)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--n", type=int, default=4096)
    p.add_argument("--d", type=int, default=576)
    p.add_argument("--measures", default=",".join(m for m in MEASURES if m != "cka"))
    p.add_argument("--null", type=int, default=0, help="permutations of the pair step to time")
    args = p.parse_args()
    states = states_of(args.layers, args.n, args.d)
    print(f"states: {states.shape[0]} x N = {args.n} x d = {args.d} float32")

    start = time.perf_counter()
    similarity_matrix(states, "cka")
    base = time.perf_counter() - start
    print(f"{'cka (similarity_matrix)':28s} {base:8.2f} s   1.00x", flush=True)
    for metric in ("unbiased_cka", "cosine"):
        start = time.perf_counter()
        similarity_matrix(states, metric)
        took = time.perf_counter() - start
        name = f"{metric} (similarity_matrix)"
        print(f"{name:28s} {took:8.2f} s {took / base:6.2f}x", flush=True)
    opts = MeasureOptions()
    for measure in args.measures.split(","):
        start = time.perf_counter()
        prepared = prepare_layers(states, measure, opts)
        mid = time.perf_counter()
        pairs_matrix(prepared, measure, opts)
        end = time.perf_counter()
        total = end - start
        line = (
            f"{measure:28s} {total:8.2f} s {total / base:6.2f}x   "
            f"(layers {mid - start:.2f} s, pairs {end - mid:.2f} s)"
        )
        if args.null:
            rng = np.random.default_rng(1)
            t0 = time.perf_counter()
            for _ in range(args.null):
                pairs_matrix(prepared, measure, opts, Permutation(rng.permutation(args.n)))
            per = (time.perf_counter() - t0) / args.null
            line += f"   null {per:.2f} s per permutation"
        print(line, flush=True)
    # the baseline again at the end: on a shared machine the load moves during a long run, and
    # a ratio is only fair against a baseline timed under the same load
    start, cpu = time.perf_counter(), time.process_time()
    similarity_matrix(states, "cka")
    again, cpu = time.perf_counter() - start, time.process_time() - cpu
    print(f"{'cka again (end of run)':28s} {again:8.2f} s   (process CPU {cpu:.2f} s)", flush=True)


if __name__ == "__main__":
    main()
