"""Calibration of the BOS answer (`deffcore.statistics.bos_answer`) on constructions whose
truth is known: the paired rule beside the unpaired one.

    nice -n 10 .venv/bin/python benchmarks/bench_bos_answer_calibration.py [--size full|tiny]
        [--B 100]

Each case is a `deffcore.measures.synthetic.position0_construction`: pooled states without
position 0 (accumulated unit updates on an h_0) and with it (plus a passage-varying position-0
component of squared size `pos0` x L/4 from layer `onset` on, isotropic or in one feature),
whose population similarity matrices are closed forms, so the population gaps, their difference
Delta and the tolerance T are known. Every case is answered as the page answers a run
(`deffcore.lenses.bos_calibration.calibration_case`: with one paired bootstrap of both poolings,
and without it), with linear and with unbiased CKA, and judged against the population. With the
bootstrap, linear CKA is answered as the page answers it ("paired": by unbiased CKA's replicates)
and by its own replicates ("paired_own", the rule before the stand-in). The
table: per metric and rule, the definite answers (claims) and how many were wrong, the answer
rate where the truth is clear (Delta_pop more than 2 sd from both +-T_pop), and how often
Delta's paired 95% interval covers Delta_pop (basic / percentile). Goals (SPEC section
15): coverage >= 90%, wrong claims <= 1%, clear cases answered >= 80%.
"""

from __future__ import annotations

import argparse
import itertools
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deffcore.lenses.bos_calibration import calibration_case, summarise  # noqa: E402

GRIDS = {
    "full": {
        "L": (8, 16),
        "N": (64, 256, 1024),
        "d": (32,),
        "pos0": (0.0, 0.5, 4.0, 32.0),
        "onset": ("first", "third"),
        "h0": (0.0, 1.0),
        "dims": (None, 1),
    },
    "tiny": {
        "L": (8,),
        "N": (64, 512),
        "d": (16,),
        "pos0": (0.0, 8.0),
        "onset": ("first",),
        "h0": (1.0,),
        "dims": (None,),
    },
}


def grid(size: str) -> list[tuple]:
    g = GRIDS[size]
    keys = ("L", "N", "d", "pos0", "onset", "h0", "dims")
    return list(itertools.product(*(g[k] for k in keys)))


def run(size: str, B: int) -> list:
    outcomes = []
    for seed, (L, n, d, pos0, onset, h0, dims) in enumerate(grid(size)):
        first = 1 if onset == "first" else max(1, L // 3)
        outcomes += calibration_case(
            n, d, L, pos0=pos0 * L / 4, onset=first, h0=h0, seed=seed, dims=dims, B=B
        )
    return outcomes


def markdown(table: dict, cases: int, B: int) -> str:
    lines = [
        f"{cases} constructions × 2 metrics, B = {B} paired replicates each.",
        "",
        "| metric | rule | answers | definite (rate) | wrong | clear cases answered | "
        "Δ covered: basic | percentile | basic, trust not noise |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for metric in ("cka", "unbiased_cka"):
        for rule in ("unpaired", "paired_own", "paired"):
            r = table.get((metric, rule))
            if r is None:
                continue
            cover = (
                ("—", "—", "—")
                if rule == "unpaired"
                else (
                    f"{r['coverage_basic']:.1%}",
                    f"{r['coverage_percentile']:.1%}",
                    f"{r['coverage_basic_usable']:.1%}",
                )
            )
            lines.append(
                f"| {metric} | {rule} | {r['answers']} | {r['claims']} ({r['claim_rate']:.0%}) | "
                f"{r['wrong']} ({r['wrong_rate']:.1%}) | {r['clear_answered']} of "
                f"{r['clear']} ({r['clear_rate']:.0%}) | {' | '.join(cover)} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(GRIDS), default="full")
    parser.add_argument("--B", type=int, default=100)
    args = parser.parse_args()
    start = time.perf_counter()
    outcomes = run(args.size, args.B)
    seconds = time.perf_counter() - start
    table = summarise(outcomes)
    cases = len(grid(args.size))
    print(f"machine: {platform.machine()} {platform.processor() or ''}, {seconds:.0f} s\n")
    print(markdown(table, cases, args.B))
    print()
    for key, r in sorted(table.items()):
        print(key, r["verdicts"])


if __name__ == "__main__":
    main()
