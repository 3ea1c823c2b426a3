"""Coverage of the passage bootstrap's 95% interval on states with a known population D_eff/L.

    nice -n 10 .venv/bin/python benchmarks/bench_bootstrap_coverage.py [--B 50] [--seeds 3]

Datasets from the teaching constructions (`deffcore.measures.teaching`, population S in closed form)
over L in {6, 12}, N in {100, 400}, d in {4, 16}. For each: the unbiased-CKA bootstrap as it
is (the U-statistic over distinct passages, `deffcore.statistics.bootstrap`), the previous unbiased
replicates (the estimator of the literally resampled rows, duplicates included), and linear
CKA's percentile and basic intervals. Reports how often each covers the truth and the mean
|replicate mean - point|. The previous replicates are recomputed here, from the same draws.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deffcore.measures import teaching  # noqa: E402
from deffcore.measures.depth import effective_depth  # noqa: E402
from deffcore.measures.similarity import similarity_matrix  # noqa: E402
from deffcore.statistics.bootstrap import bootstrap_deff_over_L, resample_indices  # noqa: E402

CASES = {
    "independent": ("independent", {}),
    "h_0 = 1": ("h0", {"h0": 1.0, "growth": 1.0, "rho": 0.0}),
    "growing x1.5": ("growing", {"h0": 0.5, "growth": 1.5, "rho": 0.0}),
    "correlated rho 0.5": ("correlated", {"h0": 1.0, "growth": 1.1, "rho": 0.5}),
}


def old_unbiased(x: np.ndarray, B: int, seed: int, L: int) -> tuple[float, float, float]:
    """The previous replicates: unbiased CKA of the resampled rows, duplicates included."""
    vals = [
        effective_depth(similarity_matrix(x[:, idx], "unbiased_cka")) / L
        for idx in resample_indices(x.shape[1], B, seed)
    ]
    return float(np.quantile(vals, 0.025)), float(np.quantile(vals, 0.975)), float(np.mean(vals))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--B", type=int, default=50)
    p.add_argument("--seeds", type=int, default=3)
    args = p.parse_args()
    start = time.perf_counter()
    tally: dict[str, list[float]] = {}
    shift: dict[str, list[float]] = {}
    count = 0
    for (_name, (step, kw)), L, N, d, seed in itertools.product(
        CASES.items(), (6, 12), (100, 400), (4, 16), range(args.seeds)
    ):
        knobs = teaching.Knobs(L=L, **kw)
        truth = effective_depth(teaching.population_similarity(step, knobs)) / L
        x = teaching.sample_states(step, knobs, N, d, seed=500 + seed)
        count += 1
        u = bootstrap_deff_over_L(x, B=args.B, seed=seed, metric="unbiased_cka")
        lo, hi, mean = old_unbiased(x, args.B, seed, L)
        c = bootstrap_deff_over_L(x, B=args.B, seed=seed, metric="cka")
        rows = {
            "unbiased CKA, U-statistic over distinct passages (now)": (
                u.low,
                u.high,
                u.mean,
                u.point,
            ),
            "unbiased CKA, resampled rows with duplicates (before)": (lo, hi, mean, u.point),
            "linear CKA, percentile": (c.low, c.high, c.mean, c.point),
            "linear CKA, basic (bias-corrected)": (c.basic_low, c.basic_high, c.mean, c.point),
        }
        for key, (a, b, m, point) in rows.items():
            tally.setdefault(key, []).append(float(a <= truth <= b))
            shift.setdefault(key, []).append(abs(m - point))
    print(f"{count} datasets, B = {args.B}, nominal 95%\n")
    print("| interval | covers the population D_eff/L | mean \\|replicate mean - point\\| |")
    print("|---|---|---|")
    for key, hits in tally.items():
        print(f"| {key} | {sum(hits):.0f}/{len(hits)} ({100 * np.mean(hits):.0f}%) | "
              f"{np.mean(shift[key]):.4f} |")  # fmt: skip
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
