"""Benchmark: passage bootstrap, streamed weighted Gram sums ("gram") vs resample-and-recompute.

    .venv/bin/python benchmarks/bench_bootstrap.py [--n 512 --d 576 --layers 30 --B 20]

Both methods draw the same resampling indices; the script prints both times, the ratio and
the largest difference between the replicate D_eff/L values. For N=10,000 and peak memory
in a fresh process, see `bench_memory.py`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deffcore.statistics.bootstrap import bootstrap_deff_over_L


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--d", type=int, default=576)
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--B", type=int, default=20)
    p.add_argument("--metric", default="cka")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.layers, args.n, args.d), dtype=np.float32)
    np.cumsum(x, axis=0, out=x)
    print(f"N={args.n} d={args.d} L={args.layers} B={args.B} metric={args.metric}")
    times, results = {}, {}
    for method in ("gram", "recompute"):
        start = time.perf_counter()
        results[method] = bootstrap_deff_over_L(x, B=args.B, metric=args.metric, method=method)
        times[method] = time.perf_counter() - start
        r = results[method]
        ci = f"[{r.low:.4f}, {r.high:.4f}]"
        print(f"{method:>9}: {times[method]:7.2f} s  D_eff/L {r.point:.4f} {ci}")
    diff = np.abs(results["gram"].samples - results["recompute"].samples).max()
    print(
        f"speed-up {times['recompute'] / times['gram']:.1f}x   max replicate difference {diff:.1e}"
    )


if __name__ == "__main__":
    main()
