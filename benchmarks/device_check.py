"""The GPU check in one run: `bash benchmarks/device_check.sh [OUT]` (see that script).

On a machine with a CUDA GPU it measures, within a time budget (default 420 s):

1. similarity on CUDA vs CPU: `similarity_matrix` of the same float32 states on both devices
   (the float32-hard L=6, N=3,000, d=512 with a large common offset, every metric; L=32,
   N=10,000, d=1024, every metric against float64 on the GPU, CKA also on the CPU):
   max |S_cuda - S_cpu|, max |S_cuda - S_float64|, exact symmetry, times;
2. bfloat16 vs float32 extraction on both packaged models (BBC windows): D_eff/L and gap% per
   pooling control in each dtype and their difference in points;
3. extraction throughput at N = 10,000 BBC windows of 64 tokens per packaged model, bfloat16:
   tokens/s and the ratio of extraction time to a bare base-model forward over the same batches;
4. the residual-carry lab's `gpu` preset for its first minutes (two gammas, one seed, a fixed
   number of steps): seconds per step and the records.

It writes `device_check.json` (every figure) and `device_check.md` (tables for BENCHMARKS.md)
into OUT. `--sections` picks some of the four (a short lease can take them in two runs).
`--device cpu --quick` runs the same code on tiny sizes on a CPU (a smoke test of this
script; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deffcore.constants import METRICS, POOLINGS
from deffcore.models import dist_version
from deffcore.similarity import similarity_matrix

PACKAGED = ("smollm2-135m", "gemma3-270m")


class Budget:
    """Seconds left of the whole check; a section that would overrun is skipped with a note."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def states(L: int, n: int, d: int, offset: float, seed: int = 0) -> torch.Tensor:
    """(L, N, d) float32 accumulated random states with a common offset (float32-hard data)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(L, n, d, generator=g).cumsum(0) + offset
    return x.float()


def similarity_section(device: str, quick: bool) -> list[dict[str, Any]]:
    sizes = (
        [(6, 300, 64, 100.0), (8, 400, 96, 0.0)]
        if quick
        else [
            (6, 3000, 512, 100.0),
            (32, 10_000, 1024, 0.0),
        ]
    )
    rows = []
    for i, (L, n, d, offset) in enumerate(sizes):
        x = states(L, n, d, offset)
        xd = x.to(device)
        # float64 reference on the device (the CPU's float64 pass at the large size costs minutes
        # of a lent machine); the CPU float32 route for every metric at the small size, for CKA
        # alone at the large one.
        x64 = xd.double()
        for metric in METRICS:
            _sync(device)
            t0 = time.perf_counter()
            s_dev = similarity_matrix(xd, metric)
            _sync(device)
            t_dev = time.perf_counter() - t0
            s64 = similarity_matrix(x64, metric)
            row = {
                "L": L,
                "N": n,
                "d": d,
                "offset": offset,
                "metric": metric,
                "max_abs_diff_device_vs_float64": float(np.abs(s_dev - s64).max()),
                "symmetric_exactly": bool(np.array_equal(s_dev, s_dev.T)),
                "seconds_device": t_dev,
                "max_abs_diff_device_vs_cpu": None,
                "seconds_cpu": None,
            }
            if i == 0 or metric == "cka":
                t0 = time.perf_counter()
                s_cpu = similarity_matrix(x, metric)
                row["seconds_cpu"] = time.perf_counter() - t0
                row["max_abs_diff_device_vs_cpu"] = float(np.abs(s_dev - s_cpu).max())
            rows.append(row)
            print(f"[device_check] similarity {row}", file=sys.stderr)
        del xd, x64
    return rows


def dtype_section(device: str, quick: bool, models: tuple[str, ...]) -> list[dict[str, Any]]:
    from deffcore.measurement import Measurement, extract_spec, run_spec

    n, tokens = (16, 32) if quick else (1024, 128)
    rows = []
    for model in models:
        got = {}
        for dtype in ("float32", "bfloat16"):
            spec, dev = run_spec(
                model,
                "bbc-news",
                n,
                tokens,
                0,
                "cka",
                device=device,
                dtype=dtype,
                passages="windows",
            )
            t0 = time.perf_counter()
            pooled = extract_spec(spec, device=dev)
            seconds = time.perf_counter() - t0
            m = Measurement(spec=spec, pooled=pooled)
            got[dtype] = ({p: m.summary(p) for p in POOLINGS}, seconds)
        for p in POOLINGS:
            a, b = got["float32"][0][p], got["bfloat16"][0][p]
            rows.append(
                {
                    "model": model,
                    "pooling": p,
                    "N": n,
                    "max_tokens": tokens,
                    "deff_over_L_float32": a.deff_over_L,
                    "deff_over_L_bfloat16": b.deff_over_L,
                    "gap_pct_float32": a.gap_pct,
                    "gap_pct_bfloat16": b.gap_pct,
                    "gap_diff_points": b.gap_pct - a.gap_pct,
                }
            )
    return rows


def bare_forward(base: Any, ids: list[list[int]], batch: int, pad: int, device: str) -> None:
    """The base model's forward over `ids` in batches, nothing kept: extraction's floor."""
    from deffcore.extract import _pad

    with torch.inference_mode():
        for i in range(0, len(ids), batch):
            b_ids, b_mask, b_pos = _pad(ids[i : i + batch], pad, "right", device)
            base(input_ids=b_ids, attention_mask=b_mask, position_ids=b_pos, use_cache=False)


def throughput_section(device: str, quick: bool, models: tuple[str, ...]) -> list[dict[str, Any]]:
    from deffcore.extract import extract_pooled
    from deffcore.models import base_model, load_model
    from deffcore.texts import all_documents
    from deffcore.tokens import cut_windows, sample_windows

    n, tokens, batch = (64, 32, 16) if quick else (10_000, 64, 256)
    dtype = "float32" if device == "cpu" else "bfloat16"
    rows = []
    for model in models:
        loaded = load_model(model, device=device, dtype=dtype)
        docs = all_documents("bbc-news", n)
        ids = sample_windows(cut_windows(loaded.tokenizer, docs, tokens), n, 0)
        base = base_model(loaded.model)
        pad = loaded.tokenizer.pad_token_id or 0

        bare_forward(base, ids, batch, pad, device)  # warm-up: kernels, allocator
        _sync(device)
        t0 = time.perf_counter()
        bare_forward(base, ids, batch, pad, device)
        _sync(device)
        t_bare = time.perf_counter() - t0
        t0 = time.perf_counter()
        extract_pooled(loaded, None, token_ids=ids, max_tokens=tokens, batch_size=batch)
        _sync(device)
        t_extract = time.perf_counter() - t0
        rows.append(
            {
                "model": model,
                "N": n,
                "max_tokens": tokens,
                "batch": batch,
                "dtype": dtype,
                "tokens": n * tokens,
                "extract_tokens_per_s": n * tokens / t_extract,
                "bare_tokens_per_s": n * tokens / t_bare,
                "extract_over_bare": t_extract / t_bare,
            }
        )
        del loaded, base
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return rows


def carry_section(device: str, quick: bool, steps: int) -> dict[str, Any]:
    from deffcore.labs.residual_carry import run_carry_sweep, settings_from

    if quick:
        s = settings_from("tiny", iters=10, eval_interval=5, device=device)
    else:
        s = settings_from(
            "gpu",
            gammas=(1.0, 0.25),
            seeds=(0,),
            iters=steps,
            eval_interval=max(steps // 4, 1),
            eval_batches=10,
            device=device,
        )
    t0 = time.perf_counter()
    result = run_carry_sweep(s)
    seconds = time.perf_counter() - t0
    runs = len(s.gammas) * len(s.seeds)
    return {
        "settings": s.to_dict(),
        "seconds": seconds,
        "seconds_per_step": seconds / (runs * s.iters),
        "records": result.records,
    }


def _num(value: float | None, fmt: str) -> str:
    return "not run" if value is None else format(value, fmt)


def _table(columns: list[str], rows: list[list[Any]]) -> list[str]:
    """A markdown table's lines, then a blank line."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return [*lines, ""]


def markdown(report: dict[str, Any]) -> str:
    out = [
        f"Device check on {report['device_name']} (torch {report['torch']}, transformers "
        f"{report.get('transformers', '?')}), {report['when']}",
        "",
    ]
    if report.get("similarity"):
        out += _table(
            ["L", "N", "d", "metric", "max diff CUDA vs CPU", "vs float64", "symmetric",
             "CPU s", "CUDA s"],
            [
                [r["L"], r["N"], r["d"], r["metric"],
                 _num(r["max_abs_diff_device_vs_cpu"], ".1e"),
                 f"{r['max_abs_diff_device_vs_float64']:.1e}", r["symmetric_exactly"],
                 _num(r["seconds_cpu"], ".2f"), f"{r['seconds_device']:.3f}"]
                for r in report["similarity"]
            ],
        )  # fmt: skip
    if report.get("dtype"):
        out += _table(
            ["model", "pooling", "gap% float32", "gap% bfloat16", "difference (points)"],
            [
                [r["model"], r["pooling"], f"{r['gap_pct_float32']:+.2f}",
                 f"{r['gap_pct_bfloat16']:+.2f}", f"{r['gap_diff_points']:+.2f}"]
                for r in report["dtype"]
            ],
        )  # fmt: skip
    if report.get("throughput"):
        out += _table(
            ["model", "N x tokens", "extraction tok/s", "bare tok/s", "extraction / bare"],
            [
                [r["model"], f"{r['N']} x {r['max_tokens']}",
                 f"{r['extract_tokens_per_s']:,.0f}", f"{r['bare_tokens_per_s']:,.0f}",
                 f"{r['extract_over_bare']:.3f}"]
                for r in report["throughput"]
            ],
        )  # fmt: skip
    if report.get("carry"):
        c = report["carry"]
        out.append(
            f"Residual carry (`gpu` preset, first {c['settings']['iters']} steps): "
            f"{c['seconds']:.0f} s, {c['seconds_per_step'] * 1000:.1f} ms/step."
        )
    for name, why in report.get("skipped", {}).items():
        out.append(f"- {name}: skipped ({why})")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default="device-check")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget-s", type=float, default=420.0)
    ap.add_argument("--carry-steps", type=int, default=400)
    ap.add_argument("--models", default=",".join(PACKAGED))
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test of the script)")
    ap.add_argument(
        "--sections",
        default="similarity,dtype,throughput,carry",
        help="which sections to run, comma-separated (a short lease may take them in two runs)",
    )
    args = ap.parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(
            "error: no CUDA device here; use --device cpu --quick for a smoke test.",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    models = tuple(m for m in args.models.split(",") if m)
    budget = Budget(args.budget_s)
    report: dict[str, Any] = {
        "device": args.device,
        "device_name": torch.cuda.get_device_name(0)
        if args.device.startswith("cuda")
        else platform.processor() or "cpu",
        "torch": torch.__version__,
        "transformers": dist_version("transformers"),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "quick": args.quick,
        "skipped": {},
    }
    # (name, minimum seconds it needs, function): cheapest evidence first
    sections = [
        ("similarity", 20, lambda: similarity_section(args.device, args.quick)),
        ("dtype", 60, lambda: dtype_section(args.device, args.quick, models)),
        ("throughput", 90, lambda: throughput_section(args.device, args.quick, models)),
        ("carry", 60, lambda: carry_section(args.device, args.quick, args.carry_steps)),
    ]
    wanted = set(args.sections.split(","))
    unknown = wanted - {name for name, _, _ in sections}
    if unknown:
        print(f"error: unknown section(s) {', '.join(sorted(unknown))}.", file=sys.stderr)
        return 2
    for name, need, run in sections:
        if name not in wanted:
            continue
        if budget.left() < need:
            report["skipped"][name] = f"{budget.left():.0f} s left of the budget, needs ~{need} s"
            continue
        t0 = time.perf_counter()
        try:
            report[name] = run()
        except Exception as err:  # one broken section must not lose the others' figures
            report["skipped"][name] = f"{type(err).__name__}: {err}"
            traceback.print_exc()
        print(f"[device_check] {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        (out / "device_check.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "device_check.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
