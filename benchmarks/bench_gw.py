"""Benchmark: what a Gromov–Wasserstein matrix between layers costs, against the CKA matrix.

    .venv/bin/python benchmarks/bench_gw.py [--shapes smollm2,gemma3] [--n-gw 64,128]
                                            [--pairs 20] [--threads 1]

States of the packaged models' shapes (SmolLM2-135M: L = 30, d = 576; Gemma-3-270M: L = 18,
d = 640; N = 512 random-walk states, so neighbouring layers are alike as in a model) are
drawn once; in the same process, for each n_gw:

  cka       `similarity_matrix(states, "cka")` over all N passages: the baseline
  exact     `gw_matrix` with the default init "both" (the lower of the product and identity starts)
  product   the same with only POT's product-coupling start
  entropic  the entropic solver (epsilon 0.01)

POT's first call (imports) is made before any timing. Each GW variant is timed on the first
`--pairs` layer pairs (i < j) and extrapolated to all
L(L-1)/2 pairs (every pair costs about the same: equal n and similar clouds); printed as
seconds for the whole matrix and as a ratio to the CKA matrix.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deffcore.measures.gw import distance_matrix, gw_distance, subsample  # noqa: E402
from deffcore.measures.similarity import similarity_matrix  # noqa: E402

SHAPES = {"smollm2": (30, 576), "gemma3": (18, 640)}


def states_of(L: int, d: int, N: int = 512, seed: int = 0) -> np.ndarray:
    steps = np.random.default_rng(seed).standard_normal((L, N, d)).astype(np.float32)
    return np.cumsum(steps, axis=0)


def time_pairs(states: np.ndarray, n_gw: int, pairs: int, **solver) -> float:
    """Seconds for the whole L x L matrix, extrapolated from the first `pairs` pairs."""
    L = states.shape[0]
    rows = subsample(states.shape[1], n_gw, 0)
    C = [distance_matrix(states[layer][rows]) for layer in range(L)]
    todo = [(i, j) for i in range(L) for j in range(i + 1, L)]
    start = time.perf_counter()
    for i, j in todo[:pairs]:
        gw_distance(C[i], C[j], **solver)
    per_pair = (time.perf_counter() - start) / min(pairs, len(todo))
    return per_pair * len(todo)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="smollm2,gemma3")
    p.add_argument("--n-gw", default="64,128")
    p.add_argument("--pairs", type=int, default=20)
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    warm = states_of(3, 8, 32)
    time_pairs(warm, 16, 3)  # POT's first call pays its imports; keep them out of the timings
    time_pairs(warm, 16, 3, solver="entropic")
    print("| shape | n_gw | CKA matrix | GW exact (init both) | exact, product init | "
          "entropic | exact / CKA |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name in args.shapes.split(","):
        L, d = SHAPES[name]
        states = states_of(L, d)
        start = time.perf_counter()
        similarity_matrix(states, "cka")
        cka = time.perf_counter() - start
        for n_gw in (int(v) for v in args.n_gw.split(",")):
            exact = time_pairs(states, n_gw, args.pairs)
            product = time_pairs(states, n_gw, args.pairs, init="product")
            entropic = time_pairs(states, n_gw, args.pairs, solver="entropic")
            print(
                f"| {name} L={L} d={d} N=512 | {n_gw} | {cka:.2f} s | {exact:.1f} s | "
                f"{product:.1f} s | {entropic:.1f} s | {exact / cka:.0f}x |"
            )


if __name__ == "__main__":
    main()
