"""Benchmark: extraction against a bare forward (and the naive path), same process, alternating.

    .venv/bin/python benchmarks/bench_extract.py                      # both packaged models, CPU
    .venv/bin/python benchmarks/bench_extract.py --models smollm2-135m --n 32 --max-tokens 64
    git show <rev>:deffcore/extraction/forward.py > /tmp/extract_before.py       # the code before
    a change
    .venv/bin/python benchmarks/bench_extract.py --baseline-extract /tmp/extract_before.py \
        --threads 1 --cpu-time --no-naive                             # before/after, shared CPU
    python3 benchmarks/bench_extract.py --device cuda --models random:llama-3.1-8b:0 \
        --texts windows --n 2048 --max-tokens 128 --batch-size 256 --no-naive   # a GPU

Paths, over the same token ids and the same batches (fixed batch size, right padding, attention
mask and position ids):

- extract:         `deffcore.extraction.forward.extract_pooled` (base model only, hooks pool every
layer).
- extract-before:  the same function from another copy of `deffcore/extraction/forward.py`
                   (`--baseline-extract FILE`), e.g. the code before a change.
- extract-nopool:  extraction with the pooling kernels left out (hooks, stages and transfers
                   kept; `--nopool`): what the pooling arithmetic itself costs.
- bare:            the base model's forward alone (no hooks, nothing kept): the floor.
- naive:           the causal-LM forward with `output_hidden_states=True` (so lm_head runs),
                   every hidden state kept on the host, pooled afterwards (`--no-naive` skips it;
                   skipped by default on CUDA, where N x L x T x d states do not fit).

Texts: `bbc` (BBC passages, the model's tokenizer, `--max-tokens` truncation: batches pad) or
`windows` (synthetic ids in 3..258, every passage exactly `--max-tokens` long, like token
windows: no padding; valid in every vocabulary; needs no dataset package).

Timing: every repeat runs each path once, in rotated order; best and median are reported (on a
shared machine other processes only ever slow a run down). On CUDA each path is synchronised
before the clock stops. `--cpu-time` reports the main thread's CPU seconds instead of wall time:
with `--threads 1` that is the work a path does, nearly independent of other processes' load.

Memory: on the CPU, peak RSS above the pre-call baseline (a sampling thread; the script
re-executes itself with MALLOC_MMAP_THRESHOLD_=65536 so freed memory returns to the OS); on CUDA,
`torch.cuda.max_memory_allocated` per path, against the weights, one batch's activations (the
bare forward's peak minus the weights) and extraction's device buffers (two batches' stages:
one filling, one being copied to the host, plus one float32 copy of a layer's state).
`--json FILE` writes every figure.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import importlib.util
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deffcore.extraction import forward
from deffcore.extraction import forward as stage
from deffcore.extraction.forward import extract_pooled, pad_batch, pool_states
from deffcore.inputs.architecture import base_model
from deffcore.inputs.model import load_model
from deffcore.inputs.texts import load_passages, tokenize

MB = 1024**2


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def trim() -> None:
    """Give freed heap memory back to the OS, so each measurement starts from a clean baseline."""
    gc.collect()
    with contextlib.suppress(OSError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class PeakMemory:
    """Peak memory above the baseline at entry: host RSS (a sampling thread) or, on CUDA, the
    allocator's peak of allocated bytes."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")

    def __enter__(self):
        trim()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            return self
        self.base = self.peak = rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(0.002)

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated()
        else:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, rss_bytes())
        self.delta = self.peak - self.base


def batches(ids: list[list[int]], batch_size: int, device: str):
    for start in range(0, len(ids), batch_size):
        yield pad_batch(ids[start : start + batch_size], 0, "right", device)


def naive_path(loaded, ids, batch_size: int) -> dict[str, np.ndarray]:
    """Full causal-LM forward, every hidden state kept, pooled afterwards."""
    kept = []
    with torch.inference_mode():
        for b_ids, b_mask, b_pos in batches(ids, batch_size, loaded.device):
            out = loaded.model(input_ids=b_ids, attention_mask=b_mask, position_ids=b_pos,
                               output_hidden_states=True, use_cache=False)  # fmt: skip
            kept.append(([h.cpu() for h in out.hidden_states], b_mask.cpu()))
    per_layer = []
    for layer in range(len(kept[0][0])):
        pooled = [pool_states(hs[layer], mask) for hs, mask in kept]
        per_layer.append({p: torch.cat([x[p] for x in pooled]) for p in pooled[0]})
    return {p: torch.stack([d[p] for d in per_layer]).numpy() for p in per_layer[0]}


def bare_path(loaded, ids, batch_size: int) -> None:
    base = base_model(loaded.model)
    with torch.inference_mode():
        for b_ids, b_mask, b_pos in batches(ids, batch_size, loaded.device):
            base(input_ids=b_ids, attention_mask=b_mask, position_ids=b_pos, use_cache=False)


def load_baseline(path: str):
    """Another copy of deffcore/extraction/forward.py as a module (it imports deffcore)."""
    spec = importlib.util.spec_from_file_location("extract_before", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["extract_before"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def no_pooling():
    """Extraction with the per-layer pooling kernels left out (everything else kept)."""
    real_pool, real_check = stage.pool_layer, forward.raise_if_nonfinite
    stage.pool_layer = lambda *a: None  # where the hook target looks it up
    forward.raise_if_nonfinite = lambda bad: None  # the stages hold no numbers
    try:
        yield
    finally:
        stage.pool_layer, forward.raise_if_nonfinite = real_pool, real_check


class HookTimer:
    """Wall time spent inside extraction's hooks (CPU only: on CUDA the hooks only queue work,
    so their wall time says nothing about the GPU's)."""

    def __init__(self):
        self.seconds = 0.0
        self.on = False
        original = stage.LayerPooler.__call__

        def wrapped(pooler, layer, hidden):
            start = time.perf_counter()
            try:
                return original(pooler, layer, hidden)
            finally:
                if self.on:
                    self.seconds += time.perf_counter() - start

        stage.LayerPooler.__call__ = wrapped


def timed(fn: Callable[[], Any], device: str, cpu_time: bool):
    clock = time.thread_time if cpu_time else time.perf_counter
    with PeakMemory(device) as mem:
        start = clock()
        result = fn()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        elapsed = clock() - start
    return result, elapsed, mem.delta


def token_ids(loaded, texts: str, n: int, max_tokens: int) -> list[list[int]]:
    if texts == "bbc":
        ids, _ = tokenize(loaded.tokenizer, load_passages("bbc-news", n, seed=0), max_tokens)
        return ids
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 259, size=(n, max_tokens))
    if loaded.adds_bos:
        ids[:, 0] = loaded.tokenizer.bos_token_id
    return ids.tolist()


def make_paths(loaded, ids, args, baseline) -> dict[str, Callable[[], Any]]:
    bs, T = args.batch_size, args.max_tokens

    def extract_with(module):
        return lambda: module.extract_pooled(loaded, None, token_ids=ids, max_tokens=T,
                                             batch_size=bs)  # fmt: skip

    def nopool():
        with no_pooling():
            return extract_pooled(loaded, None, token_ids=ids, max_tokens=T, batch_size=bs)

    paths = {"extract": extract_with(forward), "bare": lambda: bare_path(loaded, ids, bs)}
    if baseline is not None:
        paths["extract-before"] = extract_with(baseline)
    if args.nopool:
        paths["extract-nopool"] = nopool
    if args.naive:
        paths["naive"] = lambda: naive_path(loaded, ids, bs)
    return paths


def check_agreement(results: dict[str, Any], layers: int) -> dict[str, float]:
    """Max |difference| of extract's pooled states against the other paths that pool."""
    got = results["extract"].pooled
    out = {}
    if "extract-before" in results:
        ref = results["extract-before"].pooled
        out["max_abs_diff_vs_before"] = max(float(np.abs(got[p] - ref[p]).max()) for p in got)
    if "naive" in results:  # the naive last entry is after the final norm: compare h_0..h_{L-1}
        ref = results["naive"]
        out["max_abs_diff_vs_naive"] = max(
            float(np.abs(got[p][:layers] - ref[p][:layers]).max()) for p in got
        )
    return out


def device_budget(loaded, batch_size: int, max_tokens: int) -> dict[str, float]:
    """MB of the weights and of extraction's device buffers (two stages + one float32 state)."""
    weights = sum(p.numel() * p.element_size() for p in loaded.model.parameters())
    L1, d, B, T = loaded.layers + 1, loaded.d_model, batch_size, max_tokens
    stage = L1 * B * (3 * d + d + T + 2) * 4
    return {"weights_mb": weights / MB, "stages_mb": (2 * stage + B * T * d * 4) / MB}


def bench_model(spec: str, args, baseline) -> dict[str, Any]:
    t0 = time.perf_counter()
    loaded = load_model(spec, device=args.device, dtype=args.dtype)
    load_s = time.perf_counter() - t0
    print(f"\n== {spec}: L={loaded.layers}, d={loaded.d_model}, {loaded.dtype} on "
          f"{loaded.device}, loaded in {load_s:.0f} s")  # fmt: skip
    ids = token_ids(loaded, args.texts, args.n, args.max_tokens)
    tokens = sum(len(s) for s in ids)
    print(f"{len(ids)} passages ({args.texts}), {tokens} tokens, batch size {args.batch_size}")
    paths = make_paths(loaded, ids, args, baseline)
    bare_path(loaded, ids[: args.batch_size], args.batch_size)  # warm-up: kernels, allocator
    extract_pooled(loaded, None, token_ids=ids[: args.batch_size], max_tokens=args.max_tokens,
                   batch_size=args.batch_size)  # fmt: skip
    hooks = HookTimer() if not args.device.startswith("cuda") else None
    times: dict[str, list[float]] = {k: [] for k in paths}
    peaks = dict.fromkeys(paths, 0)
    results, hook_s = {}, []
    for r in range(args.repeats):
        names = list(paths)[r % len(paths) :] + list(paths)[: r % len(paths)]
        for name in names:
            if hooks is not None:
                hooks.seconds, hooks.on = 0.0, name == "extract"
            results[name], t, m = timed(paths[name], args.device, args.cpu_time)
            if hooks is not None and name == "extract":
                hook_s.append(hooks.seconds)
                hooks.on = False
            times[name].append(t)
            peaks[name] = max(peaks[name], m)
    row = {"model": spec, "layers": loaded.layers, "d_model": loaded.d_model,
           "device": loaded.device, "dtype": loaded.dtype, "n": len(ids), "tokens": tokens,
           "max_tokens": args.max_tokens, "batch_size": args.batch_size, "texts": args.texts,
           "load_s": load_s, "clock": "thread CPU" if args.cpu_time else "wall",
           "threads": torch.get_num_threads(), "repeats": args.repeats,
           **check_agreement(results, loaded.layers)}  # fmt: skip
    for name, ts in times.items():
        row[f"{name}_best_s"], row[f"{name}_median_s"] = min(ts), statistics.median(ts)
        row[f"{name}_tok_per_s"] = tokens / min(ts)
        row[f"{name}_peak_mb"] = peaks[name] / MB
    for name in paths:
        if name != "bare":
            row[f"{name}_over_bare_best"] = row[f"{name}_best_s"] / row["bare_best_s"]
            row[f"{name}_over_bare_median"] = statistics.median(
                a / b for a, b in zip(times[name], times["bare"], strict=True)
            )
    if "extract-before" in paths:
        row["extract_over_before_median"] = statistics.median(
            a / b for a, b in zip(times["extract"], times["extract-before"], strict=True)
        )
    if hook_s:
        row["hook_s_best_run"] = hook_s[int(np.argmin(times["extract"]))]
    if args.device.startswith("cuda"):
        row.update(device_budget(loaded, args.batch_size, args.max_tokens))
        row["activations_mb"] = row["bare_peak_mb"]  # peak above the weights already resident
    report(row, list(paths))
    del loaded, results
    if args.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return row


def report(row: dict[str, Any], names: list[str]) -> None:
    print(f"{'path':<16}{'best s':>9}{'median s':>10}{'tokens/s':>11}{'peak MB':>10}"
          f"   ({row['clock']} time, {row['repeats']} repeats)")  # fmt: skip
    for name in names:
        print(f"{name:<16}{row[f'{name}_best_s']:>9.3f}{row[f'{name}_median_s']:>10.3f}"
              f"{row[f'{name}_tok_per_s']:>11.0f}{row[f'{name}_peak_mb']:>10.0f}")  # fmt: skip
    for name in names:
        if name != "bare":
            print(f"{name} / bare: best {row[f'{name}_over_bare_best']:.3f}, median of "
                  f"per-repeat ratios {row[f'{name}_over_bare_median']:.3f}")  # fmt: skip
    if "extract_over_before_median" in row:
        print(f"extract / extract-before: median of per-repeat ratios "
              f"{row['extract_over_before_median']:.3f}")  # fmt: skip
    for key in ("max_abs_diff_vs_before", "max_abs_diff_vs_naive", "hook_s_best_run"):
        if key in row:
            print(f"{key}: {row[key]:.3g}")
    if "weights_mb" in row:
        print(f"GPU memory: weights {row['weights_mb']:.0f} MB; bare forward peak above them "
              f"(one batch's activations) {row['activations_mb']:.0f} MB; extraction peak "
              f"{row['extract_peak_mb']:.0f} MB against activations + stages "
              f"{row['activations_mb'] + row['stages_mb']:.0f} MB")  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="smollm2-135m,gemma3-270m")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, help="default: float32 on CPU, bfloat16 on CUDA")
    ap.add_argument("--texts", choices=("bbc", "windows"), default="bbc")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=1, help="runs per path (best and median)")
    ap.add_argument(
        "--baseline-extract", default=None, help="another deffcore/extraction/forward.py"
    )
    ap.add_argument("--nopool", action="store_true", help="add the extract-nopool path")
    ap.add_argument("--naive", action=argparse.BooleanOptionalAction, default=None)
    ap.add_argument("--cpu-time", action="store_true", help="thread CPU time, not wall time")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--json", default=None, help="write every figure to this file")
    args = ap.parse_args(argv)
    if args.naive is None:
        args.naive = not args.device.startswith("cuda")
    return args


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    # A fixed mmap threshold makes glibc return every large freed block to the OS at once, so
    # the RSS peak of one path is not hidden by memory an earlier path left in the heap.
    if argv is None and os.environ.get("MALLOC_MMAP_THRESHOLD_") is None:
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
        os.execve(sys.executable, [sys.executable, *sys.argv], env)
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    baseline = load_baseline(args.baseline_extract) if args.baseline_extract else None
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, os.cpu_count() "
          f"{os.cpu_count()}, load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    rows = [bench_model(spec, args, baseline) for spec in args.models.split(",")]
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    main()
