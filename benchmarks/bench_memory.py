"""Benchmark: time and peak memory of `similarity_matrix` and the passage bootstrap at scale.

    .venv/bin/python benchmarks/bench_memory.py                       # N=10000, d=1024, L=32
    .venv/bin/python benchmarks/bench_memory.py --n 2000 --d 256 --layers 16 --B 20

Each case runs in a fresh subprocess. Memory method: the child builds the (L, N, d) float32
input in place (no temporaries), reads its peak resident set size (`resource.getrusage`
ru_maxrss), runs the computation and reads the peak again; the difference is the peak
memory *beyond the input* (torch allocations included, which tracemalloc cannot see).

Cases:
- similarity: `similarity_matrix(states)` (CKA, auto route).
- bootstrap: `bootstrap_similarities(states, indices)` with the "gram" method for B
  replicates; then, in the same process, the "recompute" baseline (resample the stack,
  `similarity_matrix`) on the first `--recompute-replicates` replicates only, its time
  extrapolated to B (printed as such) and its values compared with the gram replicates.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def walk_states(n: int, d: int, layers: int) -> np.ndarray:
    """(L, N, d) float32 random walk with a common offset, built in place."""
    x = np.empty((layers, n, d), dtype=np.float32)
    rng = np.random.default_rng(0)
    for layer in range(layers):
        rng.standard_normal((n, d), dtype=np.float32, out=x[layer])
        if layer:
            x[layer] += x[layer - 1]
    x += 3.0
    return x


def child(args: argparse.Namespace) -> dict:
    import torch

    from deffcore.measures.similarity import similarity_matrix
    from deffcore.statistics.bootstrap import bootstrap_similarities, resample_indices

    x = walk_states(args.n, args.d, args.layers)
    base = peak_rss_bytes()
    out: dict = {"threads": torch.get_num_threads(), "input_bytes": x.nbytes, "base_bytes": base}
    if args.case == "similarity":
        start = time.perf_counter()
        similarity_matrix(x)
        out["seconds"] = time.perf_counter() - start
        out["peak_beyond_input_bytes"] = peak_rss_bytes() - base
        return out
    indices = resample_indices(args.n, args.B, seed=0)
    start = time.perf_counter()
    gram = bootstrap_similarities(x, indices, "cka", method="gram")
    out["gram_seconds"] = time.perf_counter() - start
    out["peak_beyond_input_bytes"] = peak_rss_bytes() - base
    k = args.recompute_replicates
    start = time.perf_counter()
    slow = bootstrap_similarities(x, indices[:k], "cka", method="recompute")
    t_rec = time.perf_counter() - start
    out["recompute_seconds_measured"] = t_rec
    out["recompute_replicates_measured"] = k
    out["recompute_seconds_extrapolated"] = t_rec * args.B / k
    out["recompute_peak_beyond_input_bytes"] = peak_rss_bytes() - base
    out["max_replicate_diff"] = float(
        max(np.abs(g - s).max() for g, s in zip(gram[:k], slow, strict=True))
    )
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--d", type=int, default=1024)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--B", type=int, default=100)
    p.add_argument("--recompute-replicates", type=int, default=2)
    p.add_argument("--cases", default="similarity,bootstrap")
    p.add_argument("--case", help=argparse.SUPPRESS)  # set in the child process
    args = p.parse_args()
    if args.case:
        print(json.dumps(child(args)))
        return
    gib = 2**30
    print(f"N={args.n} d={args.d} L={args.layers} B={args.B}")
    for case in args.cases.split(","):
        cmd = [sys.executable, __file__, "--case", case]
        for name in ("n", "d", "layers", "B", "recompute_replicates"):
            cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
        with open("/proc/loadavg") as f:
            load = f.read().split()[0]
        res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
        peak = res["peak_beyond_input_bytes"] / gib
        print(f"\n== {case} (input {res['input_bytes'] / gib:.2f} GiB, load at start {load})")
        if case == "similarity":
            print(f"similarity_matrix  {res['seconds']:8.1f} s   peak beyond input {peak:.2f} GiB")
            continue
        rec = res["recompute_seconds_extrapolated"]
        k = res["recompute_replicates_measured"]
        print(f"gram bootstrap     {res['gram_seconds']:8.1f} s   peak beyond input {peak:.2f} GiB")
        print(
            f"recompute          {rec:8.1f} s   (extrapolated from {k} replicates: "
            f"{res['recompute_seconds_measured']:.1f} s; peak beyond input "
            f"{res['recompute_peak_beyond_input_bytes'] / gib:.2f} GiB)"
        )
        print(
            f"speed-up {rec / res['gram_seconds']:.1f}x   max replicate difference "
            f"{res['max_replicate_diff']:.1e}"
        )


if __name__ == "__main__":
    main()
