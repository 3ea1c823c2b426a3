"""Benchmark: the diagnostic pass against extraction of the same passages (EAGER_FACTOR).

    nice -n 10 .venv/bin/python benchmarks/bench_action_costs.py [--model smollm2-135m]
        [--passages 64] [--max-tokens 128] [--repeats 2]

`deffcore.runs.action_costs.diagnostics_cost` prices the BOS diagnostic pass as a model load plus
its passages at EAGER_FACTOR times the extraction rate. This measures that factor in one
process, the model loaded once: `extract.extract_pooled` of `--passages` BBC windows, then
`diagnostics.bos_diagnostics` (eager attention returning every block's probabilities, the
|h| medians) on the very same token ids, alternating, `--repeats` times each; it prints both
medians and their ratio beside EAGER_FACTOR. Times depend on the machine and its load: the
output records the load average.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--passages", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    from deffcore.extraction.forward import extract_pooled
    from deffcore.inputs.model import load_model
    from deffcore.inputs.texts import all_documents, cut_windows, sample_windows
    from deffcore.lenses.diagnostics import bos_diagnostics
    from deffcore.runs.action_costs import EAGER_FACTOR

    loaded = load_model(args.model, device="cpu", dtype="float32")
    docs = all_documents("bbc-news", args.passages, seed=0)
    windows = cut_windows(loaded.tokenizer, docs, args.max_tokens, "default", "windows")
    ids = sample_windows(windows, args.passages, 0)
    extract_s, eager_s = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        extract_pooled(loaded, None, max_tokens=args.max_tokens, token_ids=ids)
        extract_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        bos_diagnostics(loaded, token_ids=ids)
        eager_s.append(time.perf_counter() - start)
    a, b = statistics.median(extract_s), statistics.median(eager_s)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{args.model}, {len(ids)} passages x {args.max_tokens} tokens: extraction {a:.1f} s, "
        f"diagnostic pass {b:.1f} s, ratio {b / a:.2f} (EAGER_FACTOR = {EAGER_FACTOR}); "
        f"load average {load:.1f}, {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
