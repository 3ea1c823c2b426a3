"""`python -m deffcore measure`: effective depth of a model on a text sample (cached)."""

from __future__ import annotations

import argparse
import sys

from deffcore.cli import print_json
from deffcore.constants import METRICS, POOLINGS


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "measure",
        help="measure D_eff of a model on passages (cached on disk)",
        description="Measure the effective depth of a model's residual stream. A second "
        "identical call is served from the cache (see `python -m deffcore runs`).",
    )
    p.add_argument(
        "--model",
        default="smollm2-135m",
        help="smollm2-135m, gemma3-270m, tiny-<arch>, random:<model>:<seed>, a "
        "Hugging Face id, a local folder or .gguf file (default: smollm2-135m)",
    )
    p.add_argument("--revision", default=None, help="hub revision (branch, tag, commit)")
    p.add_argument(
        "--dataset",
        default="bbc-news",
        help="bbc-news, hf:<name>[:<config>]:<split>[:<column>], or a local "
        ".txt/.jsonl/.csv/.parquet path[:column] (default: bbc-news)",
    )
    p.add_argument("--n", type=int, default=512, help="number of passages (default 512)")
    p.add_argument("--max-tokens", type=int, default=128, help="tokens per passage, BOS counts")
    p.add_argument("--seed", type=int, default=0, help="passage sampling seed")
    p.add_argument("--metric", choices=METRICS, default="cka")
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda if present)")
    p.add_argument(
        "--dtype",
        default=None,
        choices=("float32", "bfloat16", "float16"),
        help="forward dtype (default: bfloat16 on CUDA, float32 on CPU)",
    )
    p.add_argument("--batch-size", type=int, default=None, help="fixed batch size (default: auto)")
    p.add_argument(
        "--intervention",
        default="none",
        help="norm intervention during extraction (see `interventions --help`)",
    )
    p.add_argument(
        "--random-seeds",
        default="",
        help="comma-separated seeds of the random-weight null, e.g. 0,1,2",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.set_defaults(func=run)


def _seeds(text: str) -> tuple[int, ...]:
    from deffcore.errors import DeffError

    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError as err:
        raise DeffError(f"--random-seeds must be comma-separated integers, got {text!r}.") from err


class _Bar:
    """measure's progress(done, total, stage) -> a tqdm bar on stderr, one per stage."""

    def __init__(self) -> None:
        self.bar = None
        self.stage = None

    def __call__(self, done: int, total: int, stage: str) -> None:
        from tqdm import tqdm

        if stage != self.stage:
            self.close()
            self.stage = stage
            self.bar = tqdm(total=total, desc=stage, unit="passage", file=sys.stderr, leave=False)
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _table(d: dict) -> str:
    ratio = d["pos0_norm_ratio"]
    lines = [
        f"model {d['model']}  layers L={d['layers']}  d={d['d_model']}  N={d['n']} "
        f"(dropped {d['n_dropped']})  max_tokens={d['max_tokens']}  metric={d['metric']}",
        f"reference F_L = {d['reference_FL']:.3f}   CKA finite-sample bias d/(N+d) = "
        f"{d['cka_bias']:.3f}   position-0 norm ratio {ratio['max']:.1f}x at layer "
        f"{ratio['layer']}",
        "",
        f"{'pooling':<15}{'D_eff':>8}{'D_eff/L':>9}{'gap%':>8}{'rho1':>7}"
        f"{'upd D/L':>9}{'F_h0+corr':>11}",
    ]
    for pooling in POOLINGS:
        r = d["results"][pooling]
        lines.append(
            f"{pooling:<15}{r['deff']:>8.3f}{r['deff_over_L']:>9.3f}{r['gap_pct']:>8.1f}"
            f"{r['rho1']:>7.3f}{r['update_depth']['deff_upd_over_L']:>9.3f}"
            f"{r['matched_references']['F_h0+corr']:>11.3f}"
        )
    if "random_null" in d:
        lines += ["", "random-weight null (D_eff/L mean, 2-sigma band):"]
        for pooling in POOLINGS:
            b = d["random_null"]["results"][pooling]
            lines.append(
                f"{pooling:<15}{b['mean']:>8.3f}  [{b['low']:.3f}, {b['high']:.3f}]  "
                f"trained {d['results'][pooling]['deff_over_L']:.3f}"
            )
    lines += [
        "",
        f"{'cached' if d['cached'] else 'computed'} in {d['elapsed_s']:.1f} s (key {d['key']})",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from deffcore.measure import measure

    bar = None if args.no_progress else _Bar()
    try:
        m = measure(
            model=args.model,
            dataset=args.dataset,
            n=args.n,
            max_tokens=args.max_tokens,
            seed=args.seed,
            metric=args.metric,
            revision=args.revision,
            device=args.device,
            dtype=args.dtype,
            progress=bar,
            random_seeds=_seeds(args.random_seeds),
            intervention=args.intervention,
            batch_size=args.batch_size,
        )
    finally:
        if bar is not None:
            bar.close()
    d = m.to_dict()
    if args.json:
        print_json(d)
    else:
        print(_table(d))
    return 0
