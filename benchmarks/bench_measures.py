"""Benchmark: each SPEC section 17 measure's all-pairs matrix against linear CKA's, same process;
with --model, the table across measures of a packaged model (the rows of docs/lenses.md).

    .venv/bin/python benchmarks/bench_measures.py [--layers 30] [--n 4096] [--d 576]
                                                  [--measures procrustes,...] [--null 1]
    .venv/bin/python benchmarks/bench_measures.py --model gemma3-270m [--n 128]
                                                  [--max-tokens 64] [--B 10] [--permutations 19]

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

--model NAME: `measure(NAME, n, max_tokens)` on BBC documents (cached) and its
`measure_table("default", B=..., permutations=...)` (every measure; kept beside the run, so a
second call prints at once), printed as the Markdown rows of docs/lenses.md ("Across similarity
measures") with the extraction's and each row's seconds and the load average. Defaults: the
settings of those rows (N = 128 documents of 64 tokens, B = 10, 19 permutations).
"""

from __future__ import annotations

import argparse
import os
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


#: The docs' row labels (the table's own, with the settings the docs name).
DOC_LABELS = {"mutual_knn": "mutual kNN (k = 10)", "svcca": "SVCCA (99%)"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--n", type=int, default=None, help="4096 states; with --model 128 passages")
    p.add_argument("--d", type=int, default=576)
    p.add_argument("--measures", default=",".join(m for m in MEASURES if m != "cka"))
    p.add_argument("--null", type=int, default=0, help="permutations of the pair step to time")
    p.add_argument("--model", default=None, help="a packaged model: its table across measures")
    p.add_argument("--max-tokens", type=int, default=64, help="with --model: tokens per passage")
    p.add_argument("--B", type=int, default=10, help="with --model: bootstrap replicates")
    p.add_argument("--permutations", type=int, default=19, help="with --model: permutations")
    p.add_argument("--device", default=None, help="with --model: cpu or cuda (default: auto)")
    return p


def markdown_rows(table) -> list[str]:
    """The table as the Markdown rows of docs/lenses.md (head, rule, one row per measure)."""
    from deffcore.statistics.measure_table import MEASURE_LABELS

    lines = [
        "| measure | D_eff/L | 95% interval | gap to F_L | regime | calibrated D_eff/L |",
        "|---|---|---|---|---|---|",
    ]
    for r in table.rows:
        name = DOC_LABELS.get(r.measure, MEASURE_LABELS.get(r.measure, r.measure))
        if r.undefined is not None:
            lines.append(f"| {name} | undefined: {r.undefined} | | | | |")
            continue
        cal = "—" if r.cal is None else f"{r.cal:.4f}"
        gap = f"{r.gap_pct:+.1f}%".replace("-", "\u2212")  # the pages' minus sign
        lines.append(
            f"| {name} | {r.deff_over_L:.4f} | [{r.low:.4f}, {r.high:.4f}] | "
            f"{gap} | {r.regime} | {cal} |"
        )
    return lines


def model_table(args: argparse.Namespace) -> None:
    """The table across measures of a packaged model, as docs/lenses.md shows it."""
    from deffcore.runs.measure import measure

    n = 128 if args.n is None else args.n
    load = f"load average {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    start = time.perf_counter()
    m = measure(args.model, n=n, max_tokens=args.max_tokens, passages="documents",
                device=args.device)  # fmt: skip
    took = time.perf_counter() - start
    how = "cached" if m.cached else f"extraction {m.elapsed_s:.0f} s"
    print(f"{args.model}: L = {m.layers}, N = {m.n} documents of {args.max_tokens} tokens, "
          f"{how} ({took:.0f} s here), {load} at the start", flush=True)  # fmt: skip
    start = time.perf_counter()
    table = m.measure_table("default", B=args.B, permutations=args.permutations)
    took = time.perf_counter() - start
    print(table.text())
    print()
    print("\n".join(markdown_rows(table)))
    print()
    rows = ", ".join(f"{r.measure} {r.seconds:.1f} s" for r in table.rows)
    print(f"table {sum(r.seconds for r in table.rows):.0f} s when computed ({took:.0f} s here): "
          f"{rows}", flush=True)  # fmt: skip
    if hasattr(os, "getloadavg"):
        print(f"load average {os.getloadavg()[0]:.1f} at the end")


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.model is not None:
        model_table(args)
        return
    args.n = 4096 if args.n is None else args.n
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
