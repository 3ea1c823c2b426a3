"""`python -m deffcore pruning`: skip blocks by BI vs local Delta D_eff, held-out perplexity."""

from __future__ import annotations

import argparse

from deffcore.cli._common import add_run_args, check_args, int_list, run_kwargs
from deffcore.cli._output import Progress, add_output_args, answer, fmt


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "pruning",
        help="boundary check: perplexity after skipping blocks ranked by BI or local dD_eff",
        description="Paper Tables S16-S18: rank blocks by Block Influence and by local "
        "Delta D_eff, skip the k lowest-ranked, and measure perplexity on held-out passages.",
    )
    add_run_args(p, model="smollm2-135m", n=64, passages=False)
    p.add_argument("--n-heldout", type=int, default=32, help="held-out passages for perplexity")
    p.add_argument("--ks", default="0,1,2,4,6,8", help="skip counts (those < L are used)")
    p.add_argument(
        "--no-store",
        action="store_true",
        help="compute afresh and do not store the result (by default a check is stored under "
        "<cache>/labs/pruning and read back when repeated; the correlation lab reads them)",
    )
    add_output_args(p)
    p.set_defaults(func=run)


def _table(d: dict) -> str:
    lines = [
        f"model {d['model']}  L={d['layers']}  D_eff/L={d['deff_over_L']:.3f}  "
        f"gap={d['gap_pct']:.1f}%  measured N={d['n']}  held-out={d['n_heldout']} "
        f"({d['heldout_tokens']} tokens)",
        "",
        f"{'k':>3}" + "".join(f"{r:>14}" for r in d["ppl"]),
    ]
    for k in d["ks"]:
        lines.append(
            f"{k:>3}" + "".join(f"{fmt(d['ppl'][r][str(k)], '.2f'):>14}" for r in d["ppl"])
        )
    lines += [
        "",
        "k_1.10: " + "  ".join(f"{r}={d['k_1.10'][r]} (f={d['f_1.10'][r]:.3f})" for r in d["ppl"]),
        f"Spearman(BI, local dD_eff) = {fmt(d['spearman_bi_vs_local_deff'])} "
        f"(p = {fmt(d['spearman_p'])})",
        f"pruning tolerance (Table S17, BI): PPL_0 = {fmt(d['ppl0'], '.2f')}  "
        f"k_1.10 = {d['k_110']}  f_1.10 = {d['f_110']:.3f}"
        + ("" if d["k_110_monotone"] else f"  (every k up to {d['k_110_contiguous']} qualifies)")
        + ("  [stored result]" if d["cached"] else ""),
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from deffcore.labs.pruning import pruning_check

    check_args(args)

    def compute(bar: Progress) -> dict:
        return pruning_check(
            **run_kwargs(args),
            n_heldout=args.n_heldout,
            ks=int_list(args.ks, "--ks"),
            progress=bar,
            store=not args.no_store,
        ).to_dict()

    return answer(args, "step", compute, _table)
