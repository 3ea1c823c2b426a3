"""`python -m deffcore dynamics`: gap to F_L and D_eff/L over training checkpoints."""

from __future__ import annotations

import argparse

from deffcore.cli._common import check_args, str_list
from deffcore.cli._output import Progress, add_output_args, answer, fmt
from deffcore.core.constants import METRICS, POOLINGS
from deffcore.core.errors import DeffError


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "dynamics",
        help="D_eff over a sequence of checkpoints (hub revisions or local checkpoints)",
        description="Paper Figure 3: measure each checkpoint and report gap to F_L and D_eff/L "
        "against training tokens (or steps). Checkpoints that cannot be loaded are reported as "
        "missing, never interpolated. Give --model with --revisions, or --checkpoints.",
    )
    p.add_argument("--model", default=None, help="Hugging Face id whose --revisions to measure")
    p.add_argument("--revisions", default="", help="comma-separated revisions, e.g. step1000,...")
    p.add_argument(
        "--checkpoints",
        default=None,
        help="a folder of checkpoints (save_pretrained sub-folders or residual-carry .pt files)",
    )
    p.add_argument("--dataset", default="bbc-news")
    p.add_argument("--n", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--metric", choices=METRICS, default="cka")
    p.add_argument("--pooling", choices=POOLINGS, default="default")
    p.add_argument("--device", default=None)
    add_output_args(p)
    p.set_defaults(func=run)


def _table(d: dict) -> str:
    lines = [
        f"{d['landed']} of {d['planned']} checkpoints landed; x axis: {d['x_axis']}",
        "",
        f"{'checkpoint':<32}{'step':>10}{'tokens':>12}{'gap%':>8}{'D_eff/L':>9}  status",
    ]
    for p in d["points"]:
        tokens = fmt(p["tokens"], ".3g") if p["tokens"] is not None else "—"
        lines.append(
            f"{p['label'][:31]:<32}{p['step'] if p['step'] is not None else '—':>10}{tokens:>12}"
            f"{fmt(p['gap_pct'], '.1f'):>8}{fmt(p['deff_over_L']):>9}  "
            + ("ok" if p["status"] == "ok" else f"missing: {p['reason']}")
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from deffcore.labs.dynamics import dynamics_sweep, hf_revisions, local_checkpoints

    check_args(args)
    if args.checkpoints:
        checkpoints = local_checkpoints(args.checkpoints)
    elif args.model and str_list(args.revisions):
        checkpoints = hf_revisions(args.model, str_list(args.revisions))
    else:
        raise DeffError("Give --checkpoints FOLDER, or --model ID with --revisions R1,R2,...")

    def compute(bar: Progress) -> dict:
        return dynamics_sweep(
            checkpoints,
            dataset=args.dataset,
            n=args.n,
            max_tokens=args.max_tokens,
            seed=args.seed,
            metric=args.metric,
            pooling=args.pooling,
            device=args.device,
            progress=bar,
        ).to_dict()

    return answer(args, "checkpoint", compute, _table)
