"""`python -m deffcore aggregations`: D_eff beside other aggregations, under every metric."""

from __future__ import annotations

import argparse
import math

from deffcore.cli._common import add_run_args, check_args, run_kwargs
from deffcore.cli._output import Progress, add_output_args, answer
from deffcore.cli.gw import add_gw_args, check_gw_args, gw_options, gw_table
from deffcore.core.constants import POOLINGS


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
    p.add_argument(
        "--gw",
        action="store_true",
        help="also the Gromov–Wasserstein matrix between layers and its Spearman correlations "
        "(paper Table S22; minutes: see BENCHMARKS.md)",
    )
    add_gw_args(p)
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
    lines.append(
        f"{'geodesic efficiency':<22}"
        + "".join(f"{d['geometry'][m]['efficiency']:>14.3f}" for m in metrics)
    )
    t = d["trajectory"]
    lines += [
        "",
        f"geodesic efficiency = arccos-S chord / path (orthogonal updates at this L: "
        f"{t['reference_efficiency']:.3f}); Euclidean chord/path of the pooled states "
        f"{t['euclidean_efficiency']:.3f}, mean turning angle "
        f"{math.degrees(t['euclidean_mean_turning']):.0f} deg",
    ]
    if "gw" in d:
        lines += ["", gw_table(d["gw"])]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from deffcore.labs.aggregations import aggregation_table
    from deffcore.runs.measure import measure

    check_args(args)
    check_gw_args(args)

    def compute(bar: Progress) -> dict:
        m = measure(**run_kwargs(args), progress=bar)
        d = {"model": args.model, **aggregation_table(m, pooling=args.pooling)}
        if args.gw:
            from deffcore.labs.gw_lens import gw_lens

            d["gw"] = gw_lens(m, gw_options(args), progress=bar)
        return d

    return answer(args, "passage", compute, _table)
