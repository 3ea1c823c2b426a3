"""`python -m deffcore aggregations`: D_eff beside other aggregations, under every metric."""

from __future__ import annotations

import argparse

from deffcore.cli import print_json
from deffcore.commands._common import (
    Progress,
    add_output_args,
    add_run_args,
    check_args,
    result_only_stdout,
    run_kwargs,
)
from deffcore.constants import POOLINGS


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "aggregations",
        help="one run's similarity matrix aggregated several ways, under each metric",
        description="Paper Figure S4 / Table S11: D_eff beside the Geyer-truncated effective "
        "sample size, the participation ratio and spectral-entropy rank of S, and an "
        "exponential lag fit, each for linear CKA, unbiased CKA and cosine.",
    )
    add_run_args(p, model="smollm2-135m", n=512)
    p.add_argument("--pooling", choices=POOLINGS, default="default")
    add_output_args(p)
    p.set_defaults(func=run)


def _table(d: dict) -> str:
    from deffcore.labs.aggregations import AGGREGATIONS

    metrics = list(d["xi"])
    lines = [
        f"model {d['model']}  L={d['layers']}  pooling={d['pooling']}  (values / L)",
        "",
        f"{'aggregation':<22}" + "".join(f"{m:>14}" for m in metrics),
    ]
    for name in AGGREGATIONS:
        cells = [
            next(
                r["value_over_L"]
                for r in d["rows"]
                if r["metric"] == m and r["aggregation"] == name
            )
            for m in metrics
        ]
        lines.append(f"{name:<22}" + "".join(f"{c:>14.3f}" for c in cells))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from deffcore.labs.aggregations import aggregation_table
    from deffcore.measurement import measure

    check_args(args)
    with result_only_stdout(), Progress("passage", enabled=not args.no_progress) as bar:
        m = measure(**run_kwargs(args), progress=bar)
    d = {"model": args.model, **aggregation_table(m, pooling=args.pooling)}
    print_json(d) if args.json else print(_table(d))
    return 0
