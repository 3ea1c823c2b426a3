"""`python -m deffcore atlas`: the depth-use atlas of a run, beside its D_eff (SPEC 16).

Stage: cli.

python -m deffcore atlas --model smollm2-135m --n 512            # table
python -m deffcore atlas --model gemma3-270m --skip-effect --json
"""

from __future__ import annotations

import argparse

from deffcore.cli._common import add_run_args, check_args, run_kwargs
from deffcore.cli._output import Progress, add_output_args, answer, fmt


def add_parser(subparsers) -> None:
    from deffcore.inputs.interventions import INTERVENTIONS
    from deffcore.lenses.atlas_skip import SKIP_PASSAGES

    p = subparsers.add_parser(
        "atlas",
        help="depth-use atlas: relative contribution, alignment, Block Influence, angular "
        "distance, phase point, logit lens, skip effect, beside D_eff",
        description="The other papers' measures of how a model uses its depth, on the run's own "
        "passages (SPEC 16): Csordás et al.'s relative contribution and alignment (attention / "
        "MLP where known) and skip effect, ShortGPT's Block Influence, Gromov et al.'s angular "
        "distance and the block they would drop, the phase point, where predictions form (logit "
        "lens KL, top-1 agreement, prediction depth); each with a passage "
        "bootstrap interval. Taken during the run's extraction and kept beside its cache entry.",
    )
    add_run_args(p, model="smollm2-135m", n=512)
    p.add_argument("--intervention", choices=INTERVENTIONS, default="none")
    p.add_argument("--batch-size", type=int, default=None, help="fixed batch size (default: auto)")
    p.add_argument(
        "--skip-effect",
        action="store_true",
        help="also skip each block in turn (L + 1 forward passes of --skip-passages passages at "
        "most; kept beside the run)",
    )
    p.add_argument(
        "--skip-passages",
        type=int,
        default=SKIP_PASSAGES,
        help=f"passages of the skip effect: the run's first (default {SKIP_PASSAGES})",
    )
    p.add_argument(
        "--logit-lens",
        action="store_true",
        help="also where predictions form: the logit lens's KL, top-1 agreement and prediction "
        "depth per layer (one more extraction pass with L + 1 unembeddings per token, unless "
        "already kept beside the run)",
    )
    p.add_argument("--bootstrap", type=int, default=100, help="bootstrap resamples (default 100)")
    p.add_argument("--boot-seed", type=int, default=0, help="seed of the bootstrap resamples")
    add_output_args(p)
    p.set_defaults(func=run)


def _row(a: dict, i: int) -> str:
    def band(name: str) -> str:
        b = a["intervals"].get(name)
        return f"[{fmt(b['low'][i])}, {fmt(b['high'][i])}]" if b else ""

    line = (
        f"{i + 1:>5} {fmt(a['relative_contribution'][i]):>7} {band('relative_contribution'):>16}"
        f" {fmt(a['alignment'][i], '+.3f'):>7} {fmt(a['block_influence'][i], '.4f'):>8}"
    )
    sub = a.get("sublayers")
    if sub:
        line += (
            f" {fmt(sub['attention']['relative_contribution'][i]):>7}"
            f" {fmt(sub['mlp']['relative_contribution'][i]):>7}"
        )
    return line


def lens_lines(a: dict) -> list[str]:
    """Where predictions form (the logit lens, SPEC 16.2): one row per layer h_0 .. h_L and the
    prediction depth, or the sentence saying why the architecture has none."""
    lens = a.get("logit_lens")
    if not lens:
        refused = (a.get("meta") or {}).get("logit_lens_refused")
        return ["", f"where predictions form: {refused}"] if refused else []
    kl_band = a["intervals"].get("logit_lens_kl")
    depth_band = a["intervals"].get("prediction_depth")
    lines = [
        "",
        "where predictions form (logit lens; layer 0 = the embeddings):",
        f"{'layer':>5} {'KL(p_L||p_l)':>12} {'95% interval':>20} {'top-1 = final':>13}",
    ]
    for i, (kl, top) in enumerate(zip(lens["kl"], lens["top1_agreement"], strict=True)):
        band = f"[{fmt(kl_band['low'][i])}, {fmt(kl_band['high'][i])}]" if kl_band else ""
        lines.append(f"{i:>5} {fmt(kl, '.4f'):>12} {band:>20} {fmt(top, '.3f'):>13}")
    depth = f"prediction depth: {fmt(lens['prediction_depth'], '.2f')}"
    if depth_band:
        depth += f" (95% interval {fmt(depth_band['low'], '.2f')}-{fmt(depth_band['high'], '.2f')})"
    return [*lines, depth + f" of {a['layers']} layers"]


def geometry_lines(a: dict) -> list[str]:
    """Consecutive-layer geometry (SPEC 16.3): one row per block."""
    g = a.get("geometry")
    if not g:
        return []
    disp = g.get("displacement") or [None] * a["layers"]
    lines = [
        "",
        "consecutive-layer geometry (pooled states, default pooling; displacement per token):",
        f"{'block':>5} {'displacement':>12} {'rotation°':>9} {'Procrustes residual':>19}",
    ]
    for i, (r, angle, res) in enumerate(
        zip(disp, g["rotation_angle"], g["procrustes_residual"], strict=True)
    ):
        lines.append(f"{i + 1:>5} {fmt(r):>12} {fmt(angle, '.2f'):>9} {fmt(res, '.4f'):>19}")
    return lines


def atlas_table(a: dict) -> str:
    """The atlas as text: one row per block, then the derived numbers."""
    run, L = a["run"], a["layers"]
    head = f"{'block':>5} {'r_l':>7} {'95% interval':>16} {'c_l':>7} {'BI_l':>8}"
    if a.get("sublayers"):
        head += f" {'r attn':>7} {'r MLP':>7}"
    lines = [
        f"model {run['spec']['model']}  L={L}  N={a['n']}  D_eff={fmt(run['deff'])}  "
        f"D_eff/L={fmt(run['deff_over_L'], '.4f')}  gap={fmt(run['gap_pct'], '+.1f')}%",
        head,
        *(_row(a, i) for i in range(L)),
        "",
    ]
    p, band = a["phase_point"], a["intervals"]["phase_point"]
    g, cols = a["gromov"], a["columns"]
    lines += [
        f"phase point: block {p} (95% interval {fmt(band['low'], '.0f')}-{fmt(band['high'], '.0f')}"
        f"; {L - p} of {L} blocks past it)",
        f"Gromov et al. at a {g['budget']:.0%} angular budget: drop {g['n_drop']} block(s)"
        + (f" from block {g['first_dropped_block']}" if g["first_dropped_block"] else "")
        + f", keep {L - g['n_drop']}",
        "columns: " + "  ".join(f"{k}={fmt(v, '.3f')}" for k, v in cols.items()),
    ]
    lines += lens_lines(a) + geometry_lines(a)
    skip = a.get("skip_effect")
    if skip:
        kl = "  ".join(f"{s + 1}:{fmt(v, '.3g')}" for s, v in enumerate(skip["kl"]))
        lines.append(f"skip effect ({skip['passages']} passages), next-token KL per block: {kl}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from deffcore.core.checks import check_int
    from deffcore.lenses.atlas import atlas, check_atlas_options
    from deffcore.statistics.bootstrap import check_b

    check_int(args.skip_passages, "--skip-passages", 1)
    check_b(args.bootstrap, "--bootstrap", minimum=10, n=args.n)  # bounded before any draw
    check_args(args)
    check_atlas_options(args.bootstrap, args.boot_seed, 0.95, args.skip_passages)
    options = run_kwargs(args)
    model = options.pop("model")

    def compute(bar: Progress) -> dict:
        return atlas(
            model,
            **options,
            intervention=args.intervention,
            batch_size=args.batch_size,
            skip_effect=args.skip_effect,
            skip_passages=args.skip_passages,
            logit_lens=args.logit_lens,
            B=args.bootstrap,
            boot_seed=args.boot_seed,
            progress=bar,
        ).to_dict()

    return answer(args, "step", compute, atlas_table)
