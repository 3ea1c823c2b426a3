"""Benchmark: all-pairs `similarity_matrix` against the per-pair float64 loop, same process.

    .venv/bin/python benchmarks/bench_similarity.py                    # both sizes + anchors
    .venv/bin/python benchmarks/bench_similarity.py --sizes small --no-anchors
    .venv/bin/python benchmarks/bench_similarity.py --sizes large --naive-pairs 16

Sizes: small = (N=2000, d=576, L=30) (SmolLM2-135M's shape), large = (N=10000, d=1024, L=32)
(the paper's synthetic anchor). States are an accumulated random walk (float32), so S is far
from trivial. Peak memory is the peak resident set size above the pre-call baseline, sampled
every 2 ms by a thread (covers numpy and torch allocations alike).

`--bmm-repeats R` (default 3) also times ONE batched float32 Gram product of the same
states, `torch.bmm(x, x.transpose(1, 2))` for the (L, N, d) stack, alternating R times with
`similarity_matrix` in the same process, and prints both times and their ratio (best of R
and median of R; goal <= 1.3). Skipped when the (L, N, N) product would not fit in memory.

`--naive-pairs P` times the naive loop on P random layer pairs only and extrapolates its time
to all L(L-1)/2 pairs (printed as "extrapolated"); agreement is then checked on those pairs.
The anchors print D_eff/L and rho_hat(1) of independent states at N=10000, d=1024, L=32
(paper: 0.258, 0.093) and the orthogonal-update sweep of Table S2 (`--sweep full` at the
paper's size takes ~7 full-size similarity matrices; the default runs it at the same d/N, L).

`--device cuda` (e.g. `--device cuda --sizes 8b --bmm-repeats 5`): the states are
drawn on the GPU and every metric of `similarity_matrix` is timed there against ONE batched
float32 Gram product (goal <= 1.3x for CKA) and against the same computation on float64 states
(goal: within 1e-8), alternating, synchronised; also with the CPU's cache-sized chunks
(`GPU_CHUNK_ELEMENTS` off), the GPU's old behaviour. Size `8b` is N=10,000, d=4,096,
L=32 (a Llama-3.1-8B-shaped run: 33 states of d=4,096, 32 compared).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import deffcore as dc
from deffcore.measures.similarity import _naive_pair, choose_route

SIZES = {"small": (2000, 576, 30), "large": (10_000, 1024, 32), "8b": (10_000, 4096, 32),
         "smoke": (300, 48, 6)}  # fmt: skip
TABLE_S2 = {0.01: 0.031, 0.05: 0.032, 0.10: 0.034, 0.30: 0.044, 0.50: 0.049, 1.00: 0.054}


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measured(fn):
    """Run fn() -> (result, seconds, peak RSS above baseline in bytes)."""
    base = rss_bytes()
    peak = [base]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.002)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    start = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - start
    done.set()
    t.join()
    peak[0] = max(peak[0], rss_bytes())
    return result, seconds, peak[0] - base


def walk_states(n: int, d: int, layers: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((layers, n, d), dtype=np.float32)
    np.cumsum(x, axis=0, out=x)
    x += 3.0
    return x


def bench_bmm(x: np.ndarray, repeats: int) -> None:
    """`similarity_matrix` against one batched float32 Gram product, alternating."""
    import torch

    layers, n, _ = x.shape
    if layers * n * n * 4 > 4 * 2**30:
        print("bmm reference skipped: its (L, N, N) output would exceed 4 GiB")
        return
    xt = torch.from_numpy(x)
    t_bmm, t_sim = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        gram = torch.bmm(xt, xt.transpose(1, 2))
        t_bmm.append(time.perf_counter() - start)
        del gram
        start = time.perf_counter()
        dc.similarity_matrix(x)
        t_sim.append(time.perf_counter() - start)
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"one float32 torch.bmm(x, x^T)   {min(t_bmm):9.2f} s   (best of {repeats}, load {load})")
    print(f"similarity_matrix               {min(t_sim):9.2f} s   (best of {repeats})")
    print(
        f"similarity / bmm: best {min(t_sim) / min(t_bmm):.2f}  median "
        f"{np.median(t_sim) / np.median(t_bmm):.2f}   (goal <= 1.3)"
    )


def bench_size(name: str, naive_pairs: int | None, bmm_repeats: int = 0) -> None:
    n, d, layers = SIZES[name]
    x = walk_states(n, d, layers)
    print(f"\n== {name}: N={n} d={d} L={layers}  route(auto)={choose_route(n, d, layers)}")
    if bmm_repeats:
        bench_bmm(x, bmm_repeats)
    fast, t_fast, mem_fast = measured(lambda: dc.similarity_matrix(x))
    print(f"similarity_matrix (all pairs)   {t_fast:9.2f} s   peak +{mem_fast / 2**20:8.1f} MiB")
    pairs = [(i, j) for i in range(layers) for j in range(i + 1, layers)]
    if naive_pairs is None or naive_pairs >= len(pairs):
        naive, t_naive, mem_naive = measured(lambda: dc.naive_similarity_matrix(x))
        diff = float(np.abs(naive - fast).max())
        label = "naive per-pair float64 loop"
    else:
        rng = np.random.default_rng(1)
        chosen = [pairs[k] for k in rng.choice(len(pairs), naive_pairs, replace=False)]
        layers64 = {}

        def run_subset() -> list[float]:
            out = []
            for i, j in chosen:
                for k in (i, j):
                    if k not in layers64:
                        layers64[k] = x[k].astype(np.float64)
                out.append(_naive_pair(layers64[i], layers64[j], "cka"))
            return out

        vals, t_sub, mem_naive = measured(run_subset)
        t_naive = t_sub * len(pairs) / len(chosen)
        diff = max(abs(v - fast[i, j]) for v, (i, j) in zip(vals, chosen, strict=True))
        label = f"naive loop, extrapolated from {len(chosen)}/{len(pairs)} pairs ({t_sub:.1f} s)"
    print(f"{label:<31} {t_naive:9.2f} s   peak +{mem_naive / 2**20:8.1f} MiB")
    print(f"speed-up {t_naive / t_fast:8.1f}x   max |S_fast - S_naive| = {diff:.2e}")


def _cuda_timed(fn, sync) -> tuple[object, float]:
    sync()
    start = time.perf_counter()
    out = fn()
    sync()
    return out, time.perf_counter() - start


def bench_cuda(name: str, repeats: int, device: str = "cuda") -> list[dict]:
    """Every metric on CUDA: against one float32 bmm, float64, and the CPU's chunk sizes
    (`device="cpu"` runs the same steps on the CPU: a smoke test of this function)."""
    import torch

    from deffcore.measures import similarity

    n, d, layers = SIZES[name]
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(layers, n, d, device=device, generator=g).cumsum(0).add_(3.0)
    cuda = device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    where = torch.cuda.get_device_name(0) if cuda else "cpu"
    print(f"\n== {name} on {where}: N={n} d={d} L={layers}, "
          f"route(auto)={choose_route(n, d, layers)}, {repeats} alternating repeats")  # fmt: skip

    def bmm():
        return torch.bmm(x, x.transpose(1, 2))

    def cpu_chunks(metric):
        old, similarity.GPU_CHUNK_ELEMENTS = similarity.GPU_CHUNK_ELEMENTS, 0
        try:
            return dc.similarity_matrix(x, metric)
        finally:
            similarity.GPU_CHUNK_ELEMENTS = old

    x64 = x.double()  # the float64 reference: the same states, every step in float64
    rows = []
    for metric in ("cka", "unbiased_cka", "cosine"):
        times = {"bmm": [], "similarity": [], "cpu_chunks": []}
        for _ in range(repeats):
            gram, t = _cuda_timed(bmm, sync)
            del gram
            times["bmm"].append(t)
            s32, t = _cuda_timed(lambda m=metric: dc.similarity_matrix(x, m), sync)
            times["similarity"].append(t)
        if metric == "cka":  # the GPU behaviour before the large chunks (cache-sized)
            times["cpu_chunks"].append(_cuda_timed(lambda m=metric: cpu_chunks(m), sync)[1])
        s64, t64 = _cuda_timed(lambda m=metric: dc.similarity_matrix(x64, m), sync)
        if cuda:
            torch.cuda.empty_cache()
        row = {"size": name, "N": n, "d": d, "L": layers, "metric": metric,
               "bmm_best_s": min(times["bmm"]), "similarity_best_s": min(times["similarity"]),
               "similarity_median_s": float(np.median(times["similarity"])),
               "over_bmm_best": min(times["similarity"]) / min(times["bmm"]),
               "over_bmm_median": float(np.median([a / b for a, b in zip(
                   times["similarity"], times["bmm"], strict=True)])),
               "cpu_chunks_s": times["cpu_chunks"][0] if times["cpu_chunks"] else None,
               "float64_s": t64,
               "max_abs_diff_vs_float64": float(np.abs(s32 - s64).max()),
               "symmetric": bool(np.array_equal(s32, s32.T))}  # fmt: skip
        rows.append(row)
        print(f"  {metric:<13} bmm {row['bmm_best_s']:.3f} s  similarity "
              f"{row['similarity_best_s']:.3f} s (x{row['over_bmm_best']:.2f} best, "
              f"x{row['over_bmm_median']:.2f} median; goal <= 1.3 for cka)  cpu-sized chunks "
              f"{row['cpu_chunks_s'] or float('nan'):.3f} s  float64 {t64:.3f} s  |S - S64| "
              f"{row['max_abs_diff_vs_float64']:.1e}  symmetric {row['symmetric']}")  # fmt: skip
    return rows


def bench_anchors(sweep: str) -> None:
    n, d, layers = SIZES["large"]
    print(f"\n== anchors at N={n} d={d} L={layers} (paper values in brackets)")
    syn = dc.independent_states(n, d, layers, seed=0)
    t0 = time.perf_counter()
    s = dc.depth_summary(dc.similarity_matrix(syn.states))
    iid = dc.iid_reference_depth(n, d, layers) / layers
    print(
        f"independent states: D_eff/L = {s.deff_over_L:.4f} [0.258]  rho1 = {s.rho1:.4f} [0.093]"
        f"  iid formula {iid:.4f}  ({time.perf_counter() - t0:.1f} s)"
    )
    del syn
    if sweep == "none":
        return
    if sweep == "scaled":  # same d/N and L as the paper, 5x fewer passages: ~25x cheaper
        n, d = 2000, 205
    print(
        f"orthogonal updates (Table S2) at N={n} d={d} L={layers}: "
        "scale  D_eff(h)/L [paper]  D_eff(f)/L  rho1(h)"
    )
    deff_f = None
    for scale, paper in TABLE_S2.items():
        t0 = time.perf_counter()
        syn = dc.orthogonal_updates(n, d, layers, scale=scale, seed=0)
        s = dc.depth_summary(dc.similarity_matrix(syn.states))
        if deff_f is None:  # CKA is scale invariant: the updates' depth is the same at every s
            deff_f = dc.effective_depth(dc.similarity_matrix(syn.updates)) / layers
        print(
            f"  {scale:5.2f}  {s.deff_over_L:.4f} [{paper:.3f}]  {deff_f:.4f} [0.258]  "
            f"{s.rho1:.4f}  ({time.perf_counter() - t0:.1f} s)"
        )
        del syn


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="small,large", help="comma list of: small, large, 8b")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (see the module docstring)")
    p.add_argument("--naive-pairs", type=int, default=None, help="naive loop on P pairs only")
    p.add_argument("--no-anchors", action="store_true", help="skip the N=10000 anchors")
    p.add_argument("--bmm-repeats", type=int, default=3, help="bmm reference repeats (0: skip)")
    p.add_argument(
        "--sweep",
        choices=("none", "scaled", "full"),
        default="scaled",
        help="Table S2 sweep: none, scaled (N=2000, d=205, L=32; default) or full (N=10000)",
    )
    args = p.parse_args()
    import torch

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, numpy {np.__version__}")
    if args.device.startswith("cuda"):
        for name in args.sizes.split(","):
            bench_cuda(name.strip(), max(1, args.bmm_repeats))
        return
    for name in args.sizes.split(","):
        name = name.strip()
        bench_size(name, args.naive_pairs, args.bmm_repeats)
    if not args.no_anchors:
        bench_anchors(sweep=args.sweep)


if __name__ == "__main__":
    main()
