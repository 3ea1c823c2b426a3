"""`python -m deffcore gw`: Gromov–Wasserstein distance between every pair of layers (S22)."""

from __future__ import annotations

import argparse
import math

from deffcore.cli._common import add_run_args, check_args, run_kwargs
from deffcore.cli._output import Progress, add_output_args, answer, fmt
from deffcore.core.constants import POOLINGS
from deffcore.labs.gw_lens import GwOptions


def add_gw_args(p: argparse.ArgumentParser) -> None:
    """--n-gw/--gw-seed/--gw-metric/--solver/--epsilon/--init (shared with `aggregations`)."""
    from deffcore.measures.gw import EPSILON, GW_METRICS, INITS, N_GW, SOLVERS

    g = p.add_argument_group("Gromov–Wasserstein")
    g.add_argument(
        "--n-gw", type=int, default=N_GW, help=f"passages subsampled per layer (default {N_GW})"
    )
    g.add_argument("--gw-seed", type=int, default=0, help="seed of the GW subsample")
    g.add_argument("--gw-metric", choices=GW_METRICS, default="euclidean")
    g.add_argument(
        "--solver",
        choices=SOLVERS,
        default="exact",
        help="exact (POT conditional gradient, a local optimum) or entropic",
    )
    g.add_argument(
        "--epsilon",
        type=float,
        default=EPSILON,
        help=f"entropic regularisation (solver entropic; default {EPSILON})",
    )
    g.add_argument(
        "--init",
        choices=INITS,
        default=INITS[0],
        help="starting coupling of the exact solver: both (product and identity, the smaller "
        "GW^2 kept; the default, shown beside the product start's figures), product (POT's "
        "default and the paper's), identity",
    )


def check_gw_args(args: argparse.Namespace) -> None:
    from deffcore.core.checks import check_int, check_seed
    from deffcore.core.errors import InvalidArgumentError

    check_int(args.n_gw, "--n-gw", 2)
    check_seed(args.gw_seed, "--gw-seed")
    if not (math.isfinite(args.epsilon) and args.epsilon > 0):
        raise InvalidArgumentError(f"--epsilon must be a positive number, got {args.epsilon}.")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "gw",
        help="Gromov–Wasserstein distance between every pair of layers, beside CKA",
        description="Paper Table S22: GW^2 between the layers' pooled point clouds (a seeded "
        "subsample, mean-normalised distances, uniform weights, square loss) and Spearman rho "
        "over layer pairs of GW vs CKA, |i-j| vs GW and |i-j| vs CKA. Stored under "
        "<cache>/labs/gw and read back when repeated.",
    )
    add_run_args(p, model="smollm2-135m", n=512)
    p.add_argument("--pooling", choices=POOLINGS, default="default")
    add_gw_args(p)
    add_output_args(p)
    p.set_defaults(func=run)


def gw_table(d: dict) -> str:
    from deffcore.labs.lens_tables import gw_paper_lines

    return "\n".join(
        [
            f"GW ({d['solver']}, {d['gw_metric']}, n_gw={d['n_gw']}, start={d['init']}): "
            f"{d['seconds']:.1f} s{'  [stored result]' if d['cached'] else ''}",
            f"  Spearman rho(GW, {d['metric']})   = {fmt(d['spearman_gw_cka'], '+.2f')}",
            f"  Spearman rho(|i-j|, GW)  = {fmt(d['spearman_lag_gw'], '+.2f')}",
            f"  Spearman rho(|i-j|, {d['metric']}) = {fmt(d['spearman_lag_cka'], '+.2f')}",
            *gw_paper_lines(d),
        ]
    )


def run(args: argparse.Namespace) -> int:
    from deffcore.labs.gw_lens import gw_lens
    from deffcore.runs.measure import measure

    check_args(args)
    check_gw_args(args)

    def compute(bar: Progress) -> dict:
        m = measure(**run_kwargs(args), progress=bar)
        return gw_lens(m, gw_options(args), progress=bar)

    return answer(args, "step", compute, _table)


def _table(d: dict) -> str:
    head = f"model {d['model']}  L={d['layers']}  N={d['n']}  pooling={d['pooling']}"
    return f"{head}\n{gw_table(d)}"


def gw_options(args: argparse.Namespace) -> GwOptions:
    """The GW lens's options from --pooling and the `add_gw_args` options."""
    return GwOptions(
        pooling=args.pooling,
        n_gw=args.n_gw,
        seed=args.gw_seed,
        gw_metric=args.gw_metric,
        solver=args.solver,
        epsilon=args.epsilon,
        init=args.init,
    )
