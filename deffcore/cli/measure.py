"""`python -m deffcore measure`: effective depth of a model on a text sample (cached)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from deffcore.cli._common import add_run_args, check_args, int_list, run_kwargs
from deffcore.cli._live import (
    add_live_args,
    check_live_args,
    live_lines,
    measure_with_estimates,
    plan_command,
    verdict_bootstrap,
)
from deffcore.cli._output import Progress, add_output_args, print_json, result_only_stdout
from deffcore.cli._paired import add_paired_args, check_paired_args, paired_of
from deffcore.core.constants import POOLINGS, TABLE_MEASURES
from deffcore.core.errors import DeffError
from deffcore.statistics.bos_answer import answer_line, run_answer


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "measure",
        help="measure D_eff of a model on passages (cached on disk)",
        description="Measure the effective depth of a model's residual stream. A second "
        "identical call is served from the cache (see `python -m deffcore runs`).",
    )
    add_run_args(p, model="smollm2-135m", n=512)
    _widen_metric(p)
    p.add_argument(
        "--measures",
        default=None,
        metavar="LIST",
        help="also the table across similarity measures (SPEC 17.4): comma-separated names "
        "of cka, unbiased_cka, cosine, procrustes, mutual_knn, cknna, rsa, svcca, pwcca, or "
        "`all`; per measure D_eff/L, its passage-bootstrap interval, gap to F_L, regime and "
        "the calibrated D_eff/L (minutes at N in the thousands; kept with the run)",
    )
    p.add_argument(
        "--measures-b",
        type=int,
        default=None,
        metavar="B",
        help="bootstrap replicates of the table (default: --bootstrap when given, else 20)",
    )
    p.add_argument(
        "--measures-permutations",
        type=int,
        default=None,
        metavar="P",
        help="permutations of the table's calibrated column (default 19)",
    )
    p.add_argument("--batch-size", type=int, default=None, help="fixed batch size (default: auto)")
    p.add_argument(
        "--intervention",
        default="none",
        help="norm intervention during extraction (see `interventions --help`)",
    )
    p.add_argument(
        "--random-seeds",
        default="",
        help="comma-separated seeds of the random-weight null, e.g. 0,1,2",
    )
    p.add_argument(
        "--snapshot",
        type=Path,
        default=None,
        metavar="PATH",
        help="also write the explorer's JSON snapshot (every similarity matrix) to PATH; "
        "this is how deffcore/data/default_run.json, the app's first screen, is made",
    )
    p.add_argument(
        "--diagnostics",
        action="store_true",
        help="with --snapshot: also compute the BOS diagnostics (massive activations, sinks: "
        "one eager pass over the first min(N, 64) passages) and put them in the snapshot, so "
        "the BOS page shows them at once",
    )
    p.add_argument(
        "--bos-on-off",
        action="store_true",
        help="with --snapshot: also measure the run with bos=add and bos=none (two more runs, "
        "cached) and put the BOS on/off check in the snapshot",
    )
    p.add_argument(
        "--bootstrap",
        type=int,
        default=None,
        metavar="B",
        help="passage bootstrap with B replicates (e.g. 100), one for the run: the 95%% "
        "interval of the default pooling's D_eff/L, which the trust badge then uses (SPEC "
        "section 8), and the paired interval of every difference of the poolings it holds "
        "(--bootstrap-poolings), e.g. the BOS answer's default vs no_pos0 (SPEC section 15)",
    )
    add_paired_args(p)
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="recompute without reading or writing the cache (an interrupted run is otherwise "
        "resumed from its last finished batch)",
    )
    add_live_args(p)
    add_output_args(p)
    p.set_defaults(func=run)


def _widen_metric(p: argparse.ArgumentParser) -> None:
    """`--metric` here also takes the measures of SPEC 17 and `all` (checked in `run`, one
    sentence for an unknown name): those print the table across measures."""
    for action in p._actions:
        if action.dest == "metric":
            action.choices = None
            action.help = (
                "the run's metric: cka (default), unbiased_cka or cosine; or a measure of SPEC "
                "17 (procrustes, mutual_knn, cknna, rsa, svcca, pwcca) or `all`, which measures "
                "the run under cka and adds the table across those measures (as --measures)"
            )


def table_measures(args: argparse.Namespace) -> tuple[str, ...]:
    """The measures of the table across measures this command asks for (none: ()), from
    `--metric` beyond the run's metrics and `--measures`; `args.metric` becomes the run's
    metric (cka when --metric named another measure). One sentence for an unknown name."""
    from deffcore.core.constants import METRICS

    def names(text: str, flag: str) -> tuple[str, ...]:
        asked = tuple(s.strip() for s in text.split(",") if s.strip())
        if "all" in asked:
            return TABLE_MEASURES
        for name in asked:
            if name not in TABLE_MEASURES:
                raise DeffError(
                    f"{flag} {name!r} is not a similarity measure; choose from "
                    f"{', '.join(TABLE_MEASURES)} or all."
                )
        if not asked:
            raise DeffError(f"{flag} names no measure; choose from {', '.join(TABLE_MEASURES)}.")
        return asked

    wanted: tuple[str, ...] = ()
    if args.metric not in METRICS:
        wanted = names(args.metric, "--metric")
        args.metric = "cka"
    if args.measures is not None:
        wanted = (*wanted, *names(args.measures, "--measures"))
    return tuple(m for m in TABLE_MEASURES if m in wanted)


def _table(d: dict) -> str:
    ratio = d["pos0_norm_ratio"]
    lines = [
        f"model {d['model']}  layers L={d['layers']}  d={d['d_model']}  N={d['n']} "
        f"(dropped {d['n_dropped']})  max_tokens={d['max_tokens']}  metric={d['metric']}",
        f"reference F_L = {d['reference_FL']:.3f}   CKA finite-sample bias d/(N+d) = "
        f"{d['cka_bias']:.3f}   position-0 norm ratio {ratio['max']:.1f}x at layer "
        f"{ratio['layer']}",
        "",
        f"{'pooling':<15}{'D_eff':>8}{'D_eff/L':>9}{'gap%':>8}{'rho1':>7}"
        f"{'upd D/L':>9}{'F_h0+corr':>11}",
    ]
    for pooling in POOLINGS:
        r = d["results"][pooling]
        if r.get("undefined"):  # a degenerate control: no numbers, the reason instead
            lines.append(f"{pooling:<15}{'undefined':>8}  {r['undefined']}")
            continue
        lines.append(
            f"{pooling:<15}{r['deff']:>8.3f}{r['deff_over_L']:>9.3f}{r['gap_pct']:>8.1f}"
            f"{r['rho1']:>7.3f}{r['update_depth']['deff_upd_over_L']:>9.3f}"
            f"{r['matched_references']['F_h0+corr']:>11.3f}"
        )
    if "random_null" in d:
        lines += ["", "random-weight null (D_eff/L mean, 2-sigma band):"]
        for pooling in POOLINGS:
            b = d["random_null"]["results"][pooling]
            lines.append(
                f"{pooling:<15}{b['mean']:>8.3f}  [{b['low']:.3f}, {b['high']:.3f}]  "
                f"trained {d['results'][pooling]['deff_over_L']:.3f}"
            )
    lines += ["", *trust_lines(d["trust"], d.get("bootstrap"))]
    lines += ["", answer_line(d["position0_answer"]["sentence"])]
    lines += [
        "",
        f"{'cached' if d['cached'] else 'computed'} in {d['elapsed_s']:.1f} s (key {d['key']})",
    ]
    return "\n".join(lines)


def trust_lines(trust: dict, bootstrap: dict | None = None) -> list[str]:
    """The trust badge of the default pooling's D_eff/L in words (and its interval)."""
    why = trust["sentence"].split(": ", 1)[-1]  # the sentence without its "Level: " prefix
    lines = [f"trust (default pooling, D_eff/L): {trust['badge']}. {why}"]
    if bootstrap is not None:
        lines.append(
            f"bootstrap (B = {bootstrap['B']}): D_eff/L {bootstrap['point']:.4f}, 95% interval "
            f"[{bootstrap['low']:.4f}, {bootstrap['high']:.4f}], replicate mean "
            f"{bootstrap['mean']:.4f}, bias-corrected {bootstrap['bias_corrected']:.4f}"
        )
    return lines


def run(args: argparse.Namespace) -> int:
    from deffcore.runs.measure import measure
    from deffcore.statistics.bootstrap import check_b
    from deffcore.statistics.calibration import check_permutations
    from deffcore.statistics.trust_rule import measurement_trust

    measures = args.table_measures = table_measures(args)  # before anything loads
    if args.bootstrap is not None:  # bounded (and against memory) before anything is drawn
        check_b(args.bootstrap, "--bootstrap", n=args.n)
    measures_b = args.measures_b if args.measures_b is not None else args.bootstrap
    if measures and measures_b is not None:
        check_b(measures_b, "--measures-b", n=args.n)
    if args.measures_permutations is not None:  # bounded before anything loads
        check_permutations(args.measures_permutations, "--measures-permutations")
    check_paired_args(args)
    check_args(args)
    check_live_args(args)
    check_extras_args(args)
    if args.plan:
        return plan_command(args)
    seeds = int_list(args.random_seeds, "--random-seeds")
    with result_only_stdout(), Progress("passage", enabled=not args.no_progress) as bar:
        live = measure_with_estimates(args, bar, seeds)
        if live is not None:
            m, live = live
        else:
            m = measure(
                **run_kwargs(args),
                progress=bar,
                random_seeds=seeds,
                intervention=args.intervention,
                batch_size=args.batch_size,
                use_cache=not args.no_cache,
            )
        extras = measure_extras(m, args, bar)
        table = None
        if measures:  # one set of resamples: --bootstrap's B and seed 0, as the run's bootstrap
            table = m.measure_table(
                "default", measures, B=measures_b, permutations=args.measures_permutations
            )
    d = m.to_dict()
    if table is not None:
        d["measures"] = table.to_dict()
    boot = None
    args.bootstrap = verdict_bootstrap(args)  # the answer --until verdict stopped on is paired
    pb = paired_of(m, args)  # one bootstrap for the run: every pooling it pairs, same passages
    if pb is not None and pb.has("default", args.metric):
        boot = pb.result("default", args.metric)
        d["bootstrap"] = boot.to_dict()
    d["trust"] = measurement_trust(m, "default", bootstrap=boot).to_dict()
    d["position0_answer"] = run_answer(m.view(), args.metric).to_dict()  # from `pb`
    if args.snapshot is not None:
        extra = {k: d[k] for k in ("trust", "bootstrap", "position0_answer") if k in d}
        _write_snapshot(m, args, seeds, extra, extras, pb)
    if live is not None:
        d["anytime"] = live.to_dict()
    if args.json:
        print_json(d)
    else:
        tail = ["", table.text()] if table is not None else []
        print("\n".join([_table(d), *tail, *live_lines(live)]))
    return 0


def check_extras_args(args: argparse.Namespace) -> None:
    """--diagnostics and --bos-on-off go into a snapshot, and --bos-on-off measures through the
    cache: refused before anything loads when that cannot be."""
    wanted = _extras_flags(args)
    if wanted and args.snapshot is None:
        raise DeffError(f"{' and '.join(wanted)} go into the snapshot: add --snapshot PATH.")
    if args.bos_on_off and args.no_cache:
        raise DeffError("--bos-on-off measures two more runs through the cache; drop --no-cache.")


def _extras_flags(args: argparse.Namespace) -> list[str]:
    """The flags of the extras a snapshot carries: --diagnostics, --bos-on-off, as given."""
    return [
        f
        for f, on in (("--diagnostics", args.diagnostics), ("--bos-on-off", args.bos_on_off))
        if on
    ]


def measure_extras(m, args: argparse.Namespace, progress) -> dict:
    """The diagnostics and the BOS on/off check of the measured run, as asked (each cached)."""
    extras: dict = {}
    if args.diagnostics:
        from deffcore.lenses.diagnostics_store import diagnose

        extras["diagnostics"] = diagnose(m.spec, device=args.device, progress=progress)
    if args.bos_on_off:
        from deffcore.lenses.bos_on_off import bos_on_off

        extras["bos_on_off"] = bos_on_off(m.spec, metric=args.metric, progress=progress)
    return extras


def _write_snapshot(
    m, args: argparse.Namespace, seeds: tuple[int, ...], extra: dict, extras: dict, pb=None
) -> None:
    """The explorer's snapshot of this run, stamped with the command that reproduces it; its
    CLI JSON (`measurement`) also holds the trust object, the BOS answer (and the bootstrap,
    when run), and the snapshot the diagnostics and BOS on/off check when asked for
    (`run_extras`); `paired`: the run's paired bootstrap (every difference the pages show gets
    its interval from it); `supply`: what the run's data can give (`tokens.WindowSource`)."""
    from deffcore.cli._common import check_snapshot_output
    from deffcore.core.files import write_output
    from deffcore.lenses.run_extras import with_extras
    from deffcore.views.run import Run
    from deffcore.views.run_report import remake_command

    fields = {**m.spec.__dict__, "model": args.model, "dataset": args.dataset}
    flags = _extras_flags(args)
    if pb is not None and args.bootstrap is not None:  # its poolings and metrics remake it too
        flags.append(f"--bootstrap-poolings {','.join(dict.fromkeys(p for p, _ in pb.profiles))}")
        metrics = ",".join(dict.fromkeys(mt for _, mt in pb.profiles))
        flags += [f"--bootstrap-metrics {metrics}"] if metrics != args.metric else []
    if args.table_measures:  # the table across measures it carries
        flags.append(f"--measures {','.join(args.table_measures)}")
        flags += [f"--measures-b {args.measures_b}"] if args.measures_b is not None else []
        perms = args.measures_permutations
        flags += [f"--measures-permutations {perms}"] if perms is not None else []
    command = remake_command(fields, random_seeds=seeds, bootstrap=args.bootstrap, extras=flags)
    from deffcore.lenses.atlas import atlas_of

    atlas_of(m)  # the snapshot carries the run's depth-use atlas (one pass if it has none yet)
    data = Run.from_measurement(m).to_snapshot(command=command)
    data["measurement"].update(extra)
    with_extras(data, **extras, metric=args.metric)
    if pb is not None:
        data["paired"] = pb.to_dict()
    source = _window_source(m)
    if source is not None:
        data["supply"] = source.to_dict()
    check_snapshot_output(args)  # again now: nothing may have taken the name since
    body = json.dumps(data, separators=(",", ":")).encode()
    cached = "" if args.no_cache else ", and the run is cached: the same command writes it at once"
    write_output(args.snapshot, body, "--snapshot", then=cached)
    print(f"wrote {args.snapshot} ({len(body) / 1024:.0f} kB)", file=sys.stderr)


def _window_source(m):
    """The run's data as a `tokens.WindowSource` (tokenizer only), None when not countable."""
    from deffcore.inputs.texts import window_source

    spec = m.spec
    if spec.dataset_spec.streamed or spec.model_spec.external:
        return None
    try:
        return window_source(spec.model, spec.dataset, spec.bos, spec.revision)
    except Exception:  # not countable here: the snapshot then has no supply
        return None
