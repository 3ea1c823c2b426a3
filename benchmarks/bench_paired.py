"""What one paired bootstrap costs per pooling and metric (`deffcore.statistics.paired`), as ratios.

    nice -n 10 .venv/bin/python benchmarks/bench_paired.py [--n 1024] [--B 50] [--repeat 2]
        [--memory] [--run smollm2-135m] [--only memory|run]

One run's bootstrap (SPEC section 15) streams each pooling's states once through the weighted
Gram sums, the B multisets shared by all of them. Timed in one process, each the best of
`--repeat`: the paired bootstrap of 1, 2 and 6 poolings under linear CKA; the same under
linear and unbiased CKA together (one pass gives both); and the run's layout the CLI and page
use by default for the BOS answer (default and no_pos0, the run's metric). Reported: each
extra pooling's cost as a multiple of the first, (t_k - t_1) / ((k - 1) t_1), and the second
metric's cost as a multiple of the first metric's. Shapes are SmolLM2's (L = 30, d = 576)
unless given; the states are an accumulated random walk (the cost does not depend on them).

Then memory (`--memory`): each count of poolings in a fresh process, its resident memory
sampled every 2 ms while the bootstrap runs; a pooling's cost is the peak above the memory the
process held when the bootstrap started (the states included), and each extra pooling's the
growth of that peak, (m_k - m_1) / ((k - 1) m_1). The poolings are streamed one after another,
so what one pooling's working memory held is free again for the next.

And in a run (`--run MODEL`): what a user waits for. The forward passes give every extracted
pooling in one pass, so a run's first pooling costs its extraction and its bootstrap, and an
extra pooling only its bootstrap; timed on the model's own states (the model loaded first, the
extraction uncached), with the ratio (t_2 - t_1) / (t_extract + t_1).

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
import json
import os
import platform
import subprocess
import sys
import threading
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


def random_walks(k: int, layers: int, n: int, d: int) -> dict[str, np.ndarray]:
    """k poolings' states (L, N, d): accumulated random walks (the cost does not read them)."""
    rng = np.random.default_rng(0)
    return {
        name: np.cumsum(rng.standard_normal((layers, n, d), dtype=np.float32), 0)
        for name in POOLINGS[:k]
    }


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_above_start(k: int, args: argparse.Namespace) -> int:
    """Bytes of resident memory the paired bootstrap of k poolings adds at its peak."""
    stacks = random_walks(k, args.layers, args.n, args.d)
    start, peak, done = rss_bytes(), [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes())
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        paired_bootstrap(stacks, metrics=tuple(args.metrics.split(",")), B=args.B)
    finally:
        done.set()
        sampler.join()
    return max(peak[0], rss_bytes()) - start


def memory_table(args: argparse.Namespace) -> None:
    """Each k in a fresh process (freed memory is then not already the process's own)."""
    mib = {}
    for k in (1, 2, 6):
        cmd = [sys.executable, __file__, "--memory-child", str(k), "--n", str(args.n),
               "--layers", str(args.layers), "--d", str(args.d), "--B", str(args.B),
               "--metrics", args.metrics]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        mib[k] = json.loads(out.strip().splitlines()[-1])["bytes"] / 2**20
    extra2 = (mib[2] - mib[1]) / mib[1]
    extra6 = (mib[6] - mib[1]) / (5 * mib[1])
    print(f"\nmemory above the start ({args.metrics}): 1 pooling {mib[1]:.0f} MiB, 2 poolings "
          f"{mib[2]:.0f} MiB, 6 poolings {mib[6]:.0f} MiB; each extra pooling / the first: "
          f"{extra2:.2f} (2 poolings), {extra6:.2f} (6)")  # fmt: skip


def run_table(args: argparse.Namespace) -> None:
    """A real run's extraction against its bootstrap of one and of two poolings."""
    from deffcore.inputs.model import load_model
    from deffcore.runs.measure import measure_spec, run_spec

    spec, device = run_spec(args.run, args.dataset, args.n, args.max_tokens, 0, "cka",
                            passages=args.passages)  # fmt: skip
    loaded = load_model(spec.model, device=device, dtype=spec.dtype)
    start = time.perf_counter()
    m = measure_spec(spec, loaded=loaded, use_cache=False, atlas=False)
    extract = time.perf_counter() - start
    stacks = {p: m.states(p) for p in ("default", "no_pos0")}
    one = best(lambda: paired_bootstrap({"default": stacks["default"]}, B=args.B), args.repeat)
    two = best(lambda: paired_bootstrap(stacks, B=args.B), args.repeat)
    ratio = (two - one) / (extract + one)
    print(f"\nin a run ({args.run}, {args.dataset}, N = {m.n} {args.passages} of "
          f"{args.max_tokens} tokens, B = {args.B}, linear CKA): extraction {extract:.1f} s, "
          f"bootstrap of default {one:.2f} s, of default and no_pos0 {two:.2f} s; the extra "
          f"pooling / the first (extraction + bootstrap): {ratio:.3f}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1024)
    p.add_argument("--layers", type=int, default=30)
    p.add_argument("--d", type=int, default=576)
    p.add_argument("--B", type=int, default=50)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--memory", action="store_true", help="also the peak memory per pooling")
    p.add_argument("--metrics", default="cka", help="for --memory: comma-separated")
    p.add_argument("--memory-child", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--run", default=None, help="also a real run of this model (e.g. smollm2-135m)")
    p.add_argument("--dataset", default="bbc-news")
    p.add_argument("--passages", default="windows")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--only", choices=("memory", "run"), default=None, help="just that part")
    args = p.parse_args()
    if args.memory_child:
        print(json.dumps({"bytes": peak_above_start(args.memory_child, args)}))
        return
    if args.only:
        (memory_table if args.only == "memory" else run_table)(args)
        return
    stacks = random_walks(len(POOLINGS), args.layers, args.n, args.d)

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
    if args.memory:
        memory_table(args)
    if args.run:
        run_table(args)


if __name__ == "__main__":
    main()
