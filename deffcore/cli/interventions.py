"""`python -m deffcore interventions`: every pooling control under Gemma norm interventions."""

from __future__ import annotations

import argparse

from deffcore.cli._common import add_run_args, check_args, run_kwargs, str_list
from deffcore.cli._output import Progress, add_output_args, answer, fmt
from deffcore.core.constants import POOLINGS


def add_parser(subparsers) -> None:
    from deffcore.inputs.interventions import INTERVENTIONS

    p = subparsers.add_parser(
        "interventions",
        help="gap to F_L per pooling with Gemma's post / QK norms replaced by identity",
        description="Paper Table S6: run the forward pass with Gemma-style post-sub-layer norms "
        "and/or query-key norms replaced by identity and measure every pooling control. "
        "Architectures without those norms are refused.",
    )
    add_run_args(p, model="gemma3-270m", n=128)
    p.add_argument(
        "--interventions",
        default=",".join(INTERVENTIONS),
        help=f"comma-separated subset of {', '.join(INTERVENTIONS)} (default: all)",
    )
    add_output_args(p)
    p.set_defaults(func=run)


def _table(d: dict) -> str:
    rows = d["rows"]
    names = list(dict.fromkeys(r["intervention"] for r in rows))
    head = f"{'gap% to F_L':<15}" + "".join(f"{n:>15}" for n in names)
    lines = [
        f"model {d['model']}  N={d['n']}  max_tokens={d['max_tokens']}  metric={d['metric']}",
        "",
        head,
    ]
    for pooling in POOLINGS:
        cells = []
        for name in names:
            match = [r for r in rows if r["intervention"] == name and r["pooling"] == pooling]
            cells.append(fmt(match[0]["gap_pct"], ".1f") if match else "—")
        lines.append(f"{pooling:<15}" + "".join(f"{c:>15}" for c in cells))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from deffcore.labs.interventions import intervention_table

    check_args(args)

    def compute(bar: Progress) -> dict:
        names = str_list(args.interventions)
        return intervention_table(**run_kwargs(args), interventions=names, progress=bar).to_dict()

    return answer(args, "intervention", compute, _table)
