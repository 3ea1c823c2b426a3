"""`python -m deffcore carry`: train residual-carry character GPTs and track D_eff."""

from __future__ import annotations

import argparse

from deffcore.cli._common import check_args, float_list, int_list
from deffcore.cli._output import Progress, add_output_args, answer, fmt


def add_parser(subparsers) -> None:
    from deffcore.labs.residual_carry import PRESETS

    p = subparsers.add_parser(
        "carry",
        help="residual-carry lab: h_l = gamma h_{l-1} + block(h_{l-1}) on BBC characters",
        description="Paper Table S14 / Figure S7: train small character GPTs whose blocks scale "
        "the carried residual by gamma, for several gamma and seeds, and record validation loss, "
        "D_eff(h)/L, D_eff(update)/L, rho_hat(1) and ||f||/||h|| during training. The cpu preset "
        "finishes in minutes here; gpu is nanoGPT shakespeare_char scale.",
    )
    p.add_argument("--preset", choices=tuple(PRESETS), default="cpu", help="default: cpu")
    p.add_argument("--gammas", default=None, help="comma-separated, e.g. 1,0.75,0.5,0.25")
    p.add_argument("--seeds", default=None, help="comma-separated, e.g. 0,1")
    p.add_argument("--iters", type=int, default=None)
    p.add_argument("--eval-interval", type=int, default=None)
    p.add_argument("--layers", type=int, default=None, help="blocks (default 12)")
    p.add_argument("--n-embd", type=int, default=None)
    p.add_argument("--n-head", type=int, default=None)
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--max-chars", type=int, default=None, help="characters of BBC text used")
    p.add_argument("--device", default=None, help="cpu or cuda")
    p.add_argument("--checkpoint-dir", default=None, help="save a checkpoint at every evaluation")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads during training")
    add_output_args(p)
    p.set_defaults(func=run)


def _table(d: dict) -> str:
    s = d["settings"]
    lines = [
        f"{s['n_layer']}-layer char GPT, d={s['n_embd']}, {s['iters']} iters, "
        f"seeds {s['seeds']}, {d['seconds']:.0f} s",
        "",
        f"{'gamma':>6}{'val loss':>20}{'D_eff(h)/L':>22}{'D_eff(upd)/L':>14}{'rho1':>7}"
        f"{'|f|/|h|':>9}",
    ]
    for r in d["final"]:
        lines.append(
            f"{r['gamma']:>6.2f}"
            f"{fmt(r['val_loss'], '.2f'):>8} [{fmt(r['val_loss_min'], '.2f')}, "
            f"{fmt(r['val_loss_max'], '.2f')}]"
            f"{fmt(r['deff_h_over_L']):>8} [{fmt(r['deff_h_over_L_min'])}, "
            f"{fmt(r['deff_h_over_L_max'])}]"
            f"{fmt(r['deff_upd_over_L']):>14}{fmt(r['rho1'], '.2f'):>7}"
            f"{fmt(r['f_over_h'], '.2f'):>9}"
        )
    return "\n".join(lines)


def _check_settings(settings) -> None:
    """What the preset brings in (its device, its width and heads) is checked like an argument."""
    from deffcore.core.errors import InvalidArgumentError
    from deffcore.inputs.model import check_device

    if settings.device is not None:
        check_device(settings.device)
    if settings.n_embd % settings.n_head:
        raise InvalidArgumentError(
            f"The width --n-embd ({settings.n_embd}) must be a multiple of the number of heads "
            f"--n-head ({settings.n_head})."
        )


def run(args: argparse.Namespace) -> int:
    from deffcore.labs.residual_carry import run_carry_sweep, settings_from

    check_args(args, uses_cache=False)
    settings = settings_from(
        args.preset,
        gammas=float_list(args.gammas, "--gammas") if args.gammas else None,
        seeds=int_list(args.seeds, "--seeds") if args.seeds else None,
        iters=args.iters,
        eval_interval=args.eval_interval,
        n_layer=args.layers,
        n_embd=args.n_embd,
        n_head=args.n_head,
        block_size=args.block_size,
        batch_size=args.batch_size,
        max_chars=args.max_chars,
        device=args.device,
        checkpoint_dir=args.checkpoint_dir,
        threads=args.threads,
    )
    _check_settings(settings)

    def compute(bar: Progress) -> dict:
        return run_carry_sweep(settings, progress=bar).to_dict()

    return answer(args, "step", compute, _table)
