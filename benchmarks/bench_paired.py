"""What one paired bootstrap costs per pooling and metric (`deffcore.statistics.paired`), as ratios.

    nice -n 10 .venv/bin/python benchmarks/bench_paired.py [--n 1024] [--B 50] [--repeat 2]

One run's bootstrap (SPEC section 15) streams each pooling's states once through the weighted
Gram sums, the B multisets shared by all of them. Timed in one process, each the best of
`--repeat`: the paired bootstrap of 1, 2 and 6 poolings under linear CKA; the same under
linear and unbiased CKA together (one pass gives both); and the run's layout the CLI and page
use by default for the BOS answer (default and no_pos0, the run's metric). Reported: each
extra pooling's cost as a multiple of the first, (t_k - t_1) / ((k - 1) t_1), and the second
metric's cost as a multiple of the first metric's. Shapes are SmolLM2's (L = 30, d = 576)
unless given; the states are an accumulated random walk (the cost does not depend on them).

Last, the part of one pooling's bootstrap that does not depend on its states, so that a second
pooling could share it: the B multisets drawn and turned into multiplicities
(`resample_indices`, then `_counts`). Everything else reads the pooling's own states (its
centring, its Gram strips, the B weighted forms of each pair of its layers), so an extra
pooling computed exactly from its own states costs at least (1 - shared) x the first. Only a
pooling whose states are a cheap function of another's could share more (the top-PC controls
are the default's states less a rank-1 or rank-3 projection); default and no_pos0, the pair
every BOS answer needs, are not.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deffcore.statistics.bootstrap import _counts, resample_indices  # noqa: E402
from deffcore.statistics.paired import paired_bootstrap  # noqa: E402

POOLINGS = ("default", "no_pos0", "first_non_bos", "token_normed", "top1_pc", "top3_pc")


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--d", type=int, default=576)
    p.add_argument("--B", type=int, default=50)
    p.add_argument("--repeat", type=int, default=2)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    stacks = {
        name: np.cumsum(rng.standard_normal((args.layers, args.n, args.d), dtype=np.float32), 0)
        for name in POOLINGS
    }

    def run(k: int, metrics: tuple[str, ...]) -> None:
        paired_bootstrap({q: stacks[q] for q in POOLINGS[:k]}, metrics=metrics, B=args.B)

    print(
        f"machine: {platform.machine()}, {platform.python_version()}; L = {args.layers}, "
        f"N = {args.n}, d = {args.d}, B = {args.B}, best of {args.repeat}\n"
    )
    print("| metrics | 1 pooling | 2 poolings | 6 poolings | each extra pooling / the first |")
    print("|---|---|---|---|---|")
    first = {}
    for metrics in (("cka",), ("cka", "unbiased_cka"), ("unbiased_cka",)):
        t = {k: best(lambda k=k, m=metrics: run(k, m), args.repeat) for k in (1, 2, 6)}
        first[metrics] = t[1]
        extra2 = (t[2] - t[1]) / t[1]
        extra6 = (t[6] - t[1]) / (5 * t[1])
        print(
            f"| {' + '.join(metrics)} | {t[1]:.1f} s | {t[2]:.1f} s | {t[6]:.1f} s | "
            f"{extra2:.2f} (2 poolings), {extra6:.2f} (6) |"
        )
    both, lone = first[("cka", "unbiased_cka")], first[("unbiased_cka",)]
    print(
        f"\nlinear CKA beside unbiased CKA (one pass): +{(both - lone) / lone:.2f} x the unbiased "
        "pass alone"
    )
    shared = best(lambda: _counts(resample_indices(args.n, args.B), args.n, "cpu"), args.repeat)
    for metrics, t1 in first.items():
        print(
            f"shared by the poolings ({' + '.join(metrics)}): {shared * 1e3:.1f} ms = "
            f"{shared / t1:.4f} of the first pooling, so an extra one from its own states "
            f"costs >= {1 - shared / t1:.4f} x the first"
        )


if __name__ == "__main__":
    main()
