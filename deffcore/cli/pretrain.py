"""`python -m deffcore pretrain`: short-pretraining norm probes of a small Gemma-3 (Table S8)."""

from __future__ import annotations

import argparse

from deffcore.cli._common import check_args, int_list, str_list
from deffcore.cli._output import Progress, add_output_args, answer, fmt


def add_parser(subparsers) -> None:
    from deffcore.labs.pretrain import PRESETS

    p = subparsers.add_parser(
        "pretrain",
        help="short-pretraining norm probes: a small Gemma-3 trained from random init",
        description="Paper Table S8: train a small Gemma-3-style model from random "
        "initialisation on BBC-news token windows under each norm variant (none, no_post, "
        "no_qk, no_post_no_qk) and several seeds, and record validation loss, the gap to F_L "
        "of every pooling control and the position-0 norm ratio at each evaluation. The cpu "
        "preset finishes in minutes here; gpu is Gemma-3-270M's shape and tokenizer.",
    )
    p.add_argument("--preset", choices=tuple(PRESETS), default="cpu", help="default: cpu")
    p.add_argument("--variants", default=None, help="comma-separated, e.g. none,no_post")
    p.add_argument("--seeds", default=None, help="comma-separated, e.g. 0,1,2")
    p.add_argument("--iters", type=int, default=None)
    p.add_argument("--eval-interval", type=int, default=None)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--block-size", type=int, default=None, help="tokens per window")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--n-probe", type=int, default=None, help="probe windows measured")
    p.add_argument("--device", default=None, help="cpu or cuda")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads during training")
    p.add_argument(
        "--no-store",
        action="store_true",
        help="train afresh and do not store the result (by default a probe is stored under "
        "<cache>/labs/pretrain and read back when repeated; the app shows stored probes)",
    )
    add_output_args(p)
    p.set_defaults(func=run)


def _table(d: dict) -> str:
    from deffcore.labs.pretrain import COLUMNS

    s = d["settings"]
    names = [c.removeprefix("gap_") for c in COLUMNS]
    lines = [
        f"{s['layers']}-block Gemma-3 (d={s['hidden']}, {s['tokenizer']} tokens), {s['iters']} "
        f"steps x {s['batch_size']} x {s['block_size']} tokens ({d['tokens_per_run']:,} per run), "
        f"seeds {s['seeds']}, {d['seconds']:.0f} s" + ("  [stored result]" if d["cached"] else ""),
        "gap% to F_L (and the paper's Table S8 below each, Gemma-3-270M on FineWeb-Edu)",
        f"{'variant':<15}" + "".join(f"{n:>15}" for n in names),
    ]
    for r in d["final"]:
        lines.append(
            f"{r['variant']:<15}"
            + "".join(f"{fmt(r[c], '.2f') + ' ±' + fmt(r[c + '_sd'], '.2f'):>15}" for c in COLUMNS)
        )
        lines.append(
            f"{'  paper':<15}" + "".join(f"{fmt(r['paper_' + c], '.2f'):>15}" for c in COLUMNS)
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from deffcore.core.errors import InvalidArgumentError
    from deffcore.inputs.model import check_device
    from deffcore.labs.pretrain import check_settings, pretrain_probe, settings_from

    check_args(args, uses_cache=False)
    if args.n_probe is not None and args.n_probe < 4:
        raise InvalidArgumentError(f"--n-probe must be an integer >= 4, got {args.n_probe}.")
    settings = settings_from(
        args.preset,
        variants=str_list(args.variants) if args.variants else None,
        seeds=int_list(args.seeds, "--seeds") if args.seeds else None,
        iters=args.iters,
        eval_interval=args.eval_interval,
        layers=args.layers,
        block_size=args.block_size,
        batch_size=args.batch_size,
        n_probe=args.n_probe,
        device=args.device,
        threads=args.threads,
    )
    check_device(settings.device)  # the preset's own device too (gpu: cuda)
    check_settings(settings)

    def compute(bar: Progress) -> dict:
        return pretrain_probe(settings, progress=bar, store=not args.no_store).to_dict()

    return answer(args, "step", compute, _table)
