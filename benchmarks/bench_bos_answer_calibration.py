"""Calibration of the BOS page's one answer (`deffcore.lenses.bos_answer`) on constructions whose
truth
is known.

    nice -n 10 .venv/bin/python benchmarks/bench_bos_answer_calibration.py [--size full|tiny]

Each case is a `deffcore.measures.synthetic.position0_construction`: pooled states without position
0
(accumulated unit updates on an h_0) and with it (plus a passage-varying position-0 component
of squared size `pos0` x L/4 from layer `onset` on), whose population similarity matrices are
closed forms, so the population gaps, their difference Delta and the tolerance T are known.
Every case is answered as the page answers a run (`position0_answer_for`, with linear and with
unbiased CKA) and every claim is judged against the population (`claim_is_right`). The table:
per metric and verdict, how many cases got it and how many of those claims were right; the
goal is >= 95% right for every claim ("not an artefact", "a position-0 artefact", "hides part
of the gap"), with "cannot tell yet" as the honest remainder.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deffcore.lenses.bos_answer import calibration_case  # noqa: E402

GRIDS = {
    "full": {
        "L": (8, 16, 32),
        "N": (64, 256, 1024, 4096),
        "d": (32, 128),
        "pos0": (0.0, 0.5, 4.0, 32.0),
        "onset": ("first", "third"),
        "h0": (0.0, 1.0),
    },
    "tiny": {
        "L": (8,),
        "N": (64, 512),
        "d": (16,),
        "pos0": (0.0, 8.0),
        "onset": ("first",),
        "h0": (1.0,),
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(GRIDS), default="full")
    args = parser.parse_args()
    g = GRIDS[args.size]
    start = time.perf_counter()
    tally: Counter = Counter()
    cases = 0
    grid = itertools.product(g["L"], g["N"], g["d"], g["pos0"], g["onset"], g["h0"])
    for seed, (L, n, d, pos0, onset, h0) in enumerate(grid):
        first = 1 if onset == "first" else max(1, L // 3)
        for metric, verdict, right in calibration_case(
            n, d, L, pos0=pos0 * L / 4, onset=first, h0=h0, seed=seed
        ):
            tally[(metric, verdict, right)] += 1
            cases += 1
    seconds = time.perf_counter() - start
    print(f"{cases} answers ({cases // 2} constructions x 2 metrics) in {seconds:.0f} s\n")
    print(f"{'metric':<14}{'verdict':<14}{'cases':>7}{'right':>7}{'share right':>13}")
    for metric in ("cka", "unbiased_cka"):
        for verdict in ("not_artefact", "artefact", "masks", "cannot_tell"):
            n_all = sum(v for (m, vd, _), v in tally.items() if m == metric and vd == verdict)
            n_right = tally[(metric, verdict, True)]
            share = "—" if verdict == "cannot_tell" or not n_all else f"{n_right / n_all:.1%}"
            right = "—" if verdict == "cannot_tell" else n_right
            print(f"{metric:<14}{verdict:<14}{n_all:>7}{right!s:>7}{share:>13}")
    claims = sum(v for (_, vd, ok), v in tally.items() if ok is not None)
    wrong = sum(v for (_, _, ok), v in tally.items() if ok is False)
    print(f"\nclaims: {claims} of {cases} answers; wrong: {wrong}")


if __name__ == "__main__":
    main()
