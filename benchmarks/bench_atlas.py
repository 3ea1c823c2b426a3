"""Benchmark: the depth-use atlas's cost (SPEC 16), ratios in one process.

    .venv/bin/python benchmarks/bench_atlas.py                          # SmolLM2, N = 512, 64
    .venv/bin/python benchmarks/bench_atlas.py --models gemma3-270m --n 256 --skip-passages 32
    .venv/bin/python benchmarks/bench_atlas.py --threads 2 --wall        # wall clock instead

1. **Extraction with the atlas vs without** (goal <= 1.10x): `extract_pooled` over the same N
   BBC passages (the model's tokenizer, `--max-tokens`, the token budget's batches), once with
   `taps=[AtlasTap()]` and once without. The N passages go in `--blocks` blocks; each block runs
   both arms back to back, the order alternating from block to block, so a change of the
   machine's load falls on both arms alike; the ratio is of the arms' sums.
2. **The skip effect vs one forward** (goal <= L + 1): `atlas_skip.skip_rows` on the first
   `--skip-passages` passages, against one whole-model forward (logits included) of the same
   passages in the same batches, timed before and after it (their mean).

Timing: by default each arm's main-thread CPU seconds with torch on `--threads 1` (the work a
path does, nearly independent of other processes on a shared machine); `--wall` for wall time.
`--json FILE` writes every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _clock(wall: bool):
    return time.perf_counter if wall else time.thread_time


def extraction_ratio(loaded, texts, max_tokens: int, blocks: int, wall: bool) -> dict:
    from deffcore.extraction.atlas import AtlasTap
    from deffcore.extraction.forward import extract_pooled

    clock = _clock(wall)
    size = -(-len(texts) // blocks)
    totals = {"without": 0.0, "with": 0.0}
    for b in range(blocks):
        chunk = texts[b * size : (b + 1) * size]
        arms = ["without", "with"] if b % 2 == 0 else ["with", "without"]
        for arm in arms:
            taps = [AtlasTap()] if arm == "with" else []
            start = clock()
            extract_pooled(loaded, chunk, max_tokens=max_tokens, taps=taps)
            totals[arm] += clock() - start
            print(f"  block {b + 1}/{blocks} {arm:>7}: {clock() - start:.1f} s", flush=True)
    return {**totals, "ratio": totals["with"] / totals["without"]}


def _one_forward(loaded, seqs, batch: int, clock) -> float:
    from deffcore.extraction.forward import pad_batch

    pad = loaded.tokenizer.pad_token_id or 0
    start = clock()
    with torch.inference_mode():
        for i in range(0, len(seqs), batch):
            ids, mask, pos = pad_batch(seqs[i : i + batch], int(pad), "right", loaded.device)
            loaded.model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False)
    return clock() - start


def skip_ratio(loaded, texts, max_tokens: int, passages: int, wall: bool) -> dict:
    from deffcore.inputs.texts import tokenize
    from deffcore.lenses.atlas_skip import _batch_size, skip_rows

    clock = _clock(wall)
    seqs = tokenize(loaded.tokenizer, texts, max_tokens)[0][:passages]
    batch = _batch_size(loaded, max(len(s) for s in seqs))
    before = _one_forward(loaded, seqs, batch, clock)
    start = clock()
    skip_rows(loaded, seqs, batch_size=batch)
    skip = clock() - start
    after = _one_forward(loaded, seqs, batch, clock)
    forward = (before + after) / 2
    L = loaded.layers
    return {
        "passages": len(seqs),
        "batch": batch,
        "forward": forward,
        "forward_before": before,
        "forward_after": after,
        "skip": skip,
        "forwards": skip / forward,
        "goal": L + 1,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="smollm2-135m")
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--blocks", type=int, default=4)
    p.add_argument("--skip-passages", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--wall", action="store_true", help="wall time instead of CPU time")
    p.add_argument("--no-skip", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    from deffcore.inputs.model import load_model
    from deffcore.inputs.texts import load_passages

    texts = load_passages("bbc-news", args.n, seed=0)
    out = {
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "threads": args.threads,
            "clock": "wall" if args.wall else "cpu",
            "load": os.getloadavg(),
        },
        "models": {},
    }
    for name in args.models.split(","):
        loaded = load_model(name, device="cpu", dtype="float32")
        print(f"{name}: L = {loaded.layers}, N = {args.n}, {args.max_tokens} tokens", flush=True)
        row = {
            "extraction": extraction_ratio(loaded, texts, args.max_tokens, args.blocks, args.wall)
        }
        print(f"  atlas / no atlas: {row['extraction']['ratio']:.3f}x", flush=True)
        if not args.no_skip:
            row["skip"] = skip_ratio(loaded, texts, args.max_tokens, args.skip_passages, args.wall)
            s = row["skip"]
            print(
                f"  skip effect: {s['skip']:.1f} s = {s['forwards']:.1f} forwards "
                f"(goal <= {s['goal']})",
                flush=True,
            )
        out["models"][name] = row
    out["machine"]["load_after"] = os.getloadavg()
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
