"""Calibration of the depth-use atlas's intervals (SPEC 16): how often each 95% interval holds
the population value, on a construction whose population values are known exactly.

    .venv/bin/python benchmarks/bench_atlas_coverage.py                  # N = 64, 1,000 samples
    .venv/bin/python benchmarks/bench_atlas_coverage.py --n 16,64,256 --samples 400

Construction: every passage's tokens are exactly orthogonal updates (h_0 = e_0, u_l = s a_l e_l
with orthonormal e), with the passage's scale s drawn from {0.5, 2} with probability 1/2 each.
Per passage r_l, BI_l and d(i, j) are closed forms of s, so the population mean of each is the
mean of its two closed forms; the derived numbers' population values are those of the
population means (the phase point of E r, Gromov et al.'s n_drop of E d, the columns). Each
sample draws N passages and `measures.atlas.summarize` (B resamples) gives every interval; an
interval "answers" always (it is never withheld), so the table reports coverage and width.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZES = np.array([1.0, 0.8, 1.2, 0.4, 0.3, 0.25, 0.2, 0.35])  # a_1 .. a_L (h_0 = e_0)
SCALES = (0.5, 2.0)


def closed_forms(scale: float) -> dict[str, np.ndarray]:
    a = np.concatenate([[1.0], scale * SIZES])
    A = np.cumsum(a**2)
    L = len(SIZES)
    i, j = np.meshgrid(np.arange(L + 1), np.arange(L + 1), indexing="ij")
    return {
        "r": a[1:] / np.sqrt(A[:-1]),
        "bi": 1 - np.sqrt(A[:-1] / A[1:]),
        "angular": np.arccos(np.sqrt(A[np.minimum(i, j)] / A[np.maximum(i, j)])) / np.pi,
    }


def population() -> dict[str, np.ndarray]:
    from deffcore.measures.atlas import _columns, gromov_drop, phase_point

    forms = [closed_forms(s) for s in SCALES]
    mean = {k: (forms[0][k] + forms[1][k]) / 2 for k in forms[0]}
    cols = _columns(mean["r"], mean["bi"], mean["angular"])
    return {
        "relative_contribution": mean["r"],
        "block_influence": mean["bi"],
        "angular_distance": mean["angular"],
        "phase_point": np.array(phase_point(mean["r"])),
        "gromov_n_drop": np.array(gromov_drop(mean["angular"])[0]),
        **{k: np.array(v) for k, v in cols.items()},
    }


def sample_rows(rng: np.random.Generator, n: int):
    from deffcore.extraction.atlas import AtlasRows

    forms = {s: closed_forms(s) for s in SCALES}
    picks = rng.choice(SCALES, size=n)
    r = np.stack([forms[s]["r"] for s in picks])
    return AtlasRows(
        r=r,
        c=np.zeros_like(r),
        bi=np.stack([forms[s]["bi"] for s in picks]),
        angular=np.stack([forms[s]["angular"] for s in picks]),
        lengths=np.ones(n, dtype=np.int64),
    )


def coverage(n: int, samples: int, B: int, seed: int) -> dict[str, dict[str, float]]:
    from deffcore.measures.atlas import summarize

    truth = population()
    rng = np.random.default_rng(seed)
    hits: dict[str, list[float]] = {k: [] for k in truth}
    widths: dict[str, list[float]] = {k: [] for k in truth}
    for rep in range(samples):
        atlas = summarize(sample_rows(rng, n), B=B, seed=rep)
        for name, want in truth.items():
            low, high = atlas.intervals[name]
            inside = (np.asarray(low) <= want + 1e-12) & (want - 1e-12 <= np.asarray(high))
            if name == "angular_distance":  # the diagonal is 0 exactly: not an estimate
                inside = inside[~np.eye(len(want), dtype=bool)]
            hits[name].append(float(np.mean(inside)))
            widths[name].append(float(np.mean(np.asarray(high) - np.asarray(low))))
    return {
        k: {"coverage": float(np.mean(hits[k])), "answers": 1.0, "width": float(np.mean(widths[k]))}
        for k in truth
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", default="64", help="passages per sample, comma-separated")
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--bootstrap", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    out = {}
    for n in (int(x) for x in args.n.split(",")):
        out[n] = coverage(n, args.samples, args.bootstrap, args.seed)
        print(
            f"N = {n}: " + ", ".join(f"{k} {v['coverage']:.3f}" for k, v in out[n].items()),
            flush=True,
        )
    text = json.dumps(out, indent=2)
    if args.json:
        args.json.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
