"""`python -m deffcore correlate`: a depth number across models against a per-model quantity."""

from __future__ import annotations

import argparse

from deffcore.cli._output import add_output_args, fmt, print_json, result_only_stdout


def add_parser(subparsers) -> None:
    from deffcore.core.constants import METRICS
    from deffcore.labs.correlation_lab import Y_BUILTIN
    from deffcore.labs.panels import X_QUANTITIES

    p = subparsers.add_parser(
        "correlate",
        help="correlation of D_eff/L across models with scores, pruning tolerance or geometry",
        description="Paper Tables S18, S20, S21 and Figure S6: Pearson r and Spearman rho "
        "(two-sided p: scipy's, and the exact permutation p for n <= 9) of a per-model "
        "quantity against D_eff/L, with leave-one-out and leave-one-family-out rows. Without "
        "--scores or --y: Table S18 recomputed from the paper's own Table S17 values.",
    )
    p.add_argument(
        "--scores",
        default=None,
        help="CSV with columns model, task, score (optional family): one correlation per task",
    )
    p.add_argument(
        "--y",
        choices=Y_BUILTIN,
        default=None,
        help="instead of scores: f_110 / k_110 of the stored pruning checks, or the geodesic / "
        "Euclidean efficiency of every cached run",
    )
    p.add_argument("--x", choices=X_QUANTITIES, default="deff_over_L", help="the depth number")
    p.add_argument(
        "--sources",
        default="cached,sweep,paper",
        help="model panel for --scores: cached runs, the --sweep file, the paper's models "
        "(first wins; default cached,sweep,paper)",
    )
    p.add_argument("--sweep", default=None, help="a sweep result (.json from `sweep --json`, .csv)")
    p.add_argument("--metric", choices=METRICS, default="cka", help="similarity of cached runs")
    p.add_argument(
        "--with-paper",
        action="store_true",
        help="--y f_110/k_110: add the paper's Table S17 models beside the stored checks",
    )
    p.add_argument(
        "--ignore-unknown",
        action="store_true",
        help="leave out scored models that the panel lacks (default: refuse)",
    )
    add_output_args(p)
    p.set_defaults(func=run)


def _check(args: argparse.Namespace):
    """Everything the user gave, checked before anything is computed; returns the scores."""
    from deffcore.core.checks import check_cache_dir
    from deffcore.core.errors import InvalidArgumentError
    from deffcore.labs.panels import check_sources
    from deffcore.labs.scores import read_scores

    if args.scores and args.y:
        raise InvalidArgumentError("Give either --scores or --y, not both.")
    args.sources = check_sources(args.sources)
    if args.sweep is not None:
        from deffcore.labs.panels import sweep_panel

        sweep_panel(args.sweep)  # parsed once here, so a bad file fails before any work
    check_cache_dir()
    return read_scores(args.scores) if args.scores else None


def _corr_lines(r: dict, name: str) -> list[str]:
    if "skipped" in r:
        return [f"{name}: {r['skipped']}"]
    lines = [
        f"{name}: n={r['n']}  Pearson r={fmt(r['pearson_r'], '+.3f')} (p={fmt(r['pearson_p'])})"
        f"  Spearman rho={fmt(r['spearman_rho'], '+.3f')} (p={fmt(r['spearman_p'])}, "
        f"{r['spearman_p_method']}; t p={fmt(r['spearman_p_t'])})"
    ]
    for row in r["loo"] + r["lofo"]:
        what = row.get("dropped_family", row["dropped"])
        if "skipped" in row:
            continue
        if "same_as_loo" in row:
            lines.append(f"    drop {what!s:<28} = drop {row['same_as_loo']} (its only model)")
            continue
        lines.append(
            f"    drop {what!s:<28} n={row['n']:<3} r={fmt(row['pearson_r'], '+.3f')} "
            f"(p={fmt(row['pearson_p'])})  rho={fmt(row['spearman_rho'], '+.3f')} "
            f"(p={fmt(row['spearman_p'])})"
        )
    lines += [f"    ! {w}" for w in r["warnings"]]
    return lines


def _s18_lines(check: dict) -> list[str]:
    lines = [
        f"Table S18 from the paper's Table S17 (+2 inferred models): {check['agree']} of "
        f"{check['total']} printed values agree to their printed precision",
        f"{'subset':<18}{'quantity':<24}{'published':>10}{'ours (8)':>10}{'six only':>10}",
    ]
    for r in check["rows"]:
        mark = "" if r["agrees"] else "  *"
        lines.append(
            f"{r['subset']:<18}{r['quantity']:<24}{r['published']:>10.3f}"
            f"{r['reconstructed']:>10.3f}{r['recomputed_six']:>10.3f}{mark}"
        )
    lines.append(check["note"])
    lines.append(f"! {check['conflict']['sentence']}")
    return lines


def _table(d: dict) -> str:
    if d["kind"] == "s18":
        return "\n".join(_s18_lines(d["paper"]))
    lines = [f"x = {d['x']}"]
    for r in d["results"]:
        lines += _corr_lines(r, r.get("task") or r["y"])
    if d["kind"] == "scores" and d["unknown_models"]:
        lines.append(f"left out (not in the panel): {', '.join(d['unknown_models'])}")
    if d["kind"] == "pruning":
        lines += ["", *_s18_lines(d["paper"])]
    if d["kind"] == "geometry":
        lines.append(f"paper, Figure S6: Pearson r = {d['paper']['figure_s6_pearson_r']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from deffcore.labs import correlation_lab

    scores = _check(args)
    with result_only_stdout():
        if scores is not None:
            d = correlation_lab.score_correlations(
                scores,
                x=args.x,
                sources=args.sources,
                sweep_file=args.sweep,
                metric=args.metric,
                ignore_unknown=args.ignore_unknown,
            )
        elif args.y in correlation_lab.PRUNING_Y:
            d = correlation_lab.pruning_correlations(x=args.x, with_paper=args.with_paper)
        elif args.y in correlation_lab.GEOMETRY_Y:
            d = correlation_lab.geometry_correlations(x=args.x, metric=args.metric)
        else:
            d = {"lab": "correlation", "kind": "s18", "paper": correlation_lab.s18_check()}
    print_json(d) if args.json else print(_table(d))
    return 0
