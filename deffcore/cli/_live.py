"""The `measure` command's live estimates, `--until` and `--plan` (SPEC 14).

    python -m deffcore measure --passages windows --n 4096 --until verdict
    python -m deffcore measure --passages windows --n 4096 --plan --max-memory 8GiB

Live estimates (on by default; `--no-anytime` turns them off): a line on stderr at each mark
of `prefix.schedule` (32, 64, 128, ... passages), written above the progress bar
(`tqdm.write`), with the BOS answer's paired Δ; `--json` adds them as `anytime.trajectory`, a
list. `--until solid|verdict` (window modes) ends the run once the stopping rule
(`deffcore.statistics.stopping`) says so and keeps a run of that N. A `--until verdict` run
stopped on a paired answer, so without `--bootstrap` it is given one of the live estimates' B
(`verdict_bootstrap`): its `position0_answer` is paired, the answer it stopped on, not the
unpaired one that would contradict it.
`--plan` prints the planner's line (`deffcore.runs.planner`) and exits without running: 0 when the
run fits, 3 when it is refused (the sentence says why), before any model loads.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from deffcore.core.errors import DeffError
from deffcore.inputs.model import ModelSpec

#: Exit code of `--plan` for a run that does not fit.
REFUSED = 3


def add_live_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("answers in minutes (window modes)")
    g.add_argument(
        "--until",
        choices=("solid", "verdict"),
        default=None,
        help="stop extracting once the --until-poolings numbers are solid by the calibrated "
        "trust rule (solid) or the BOS answer (default vs no_pos0, paired interval) is "
        "definite (verdict), at two estimates in a row; what was extracted is kept as a "
        "normal cached run of that N",
    )
    g.add_argument(
        "--until-poolings",
        default="default",
        metavar="A,B",
        help="the numbers --until solid waits for: pooling controls, or 'all' (default: default)",
    )
    g.add_argument(
        "--estimate-bootstrap",
        type=int,
        default=None,
        metavar="B",
        help="replicates of the live estimates' one paired bootstrap (default and no_pos0, "
        "plus the numbers --until solid waits for): default 50 (30 for --until solid); 0: "
        "none, and then no BOS answer per estimate; each estimate costs about B similarity "
        "passes more",
    )
    g.add_argument(
        "--no-anytime",
        action="store_true",
        help="no estimates while the run extracts (window modes show them by default)",
    )
    g.add_argument(
        "--plan",
        action="store_true",
        help="print what the run will cost (time on this device, peak memory, disk) and exit",
    )
    g.add_argument(
        "--max-memory",
        default=None,
        metavar="SIZE",
        help="memory the run may use, e.g. 8GiB (default: what this machine has available)",
    )
    g.add_argument(
        "--no-calibrate",
        action="store_true",
        help="--plan never loads the model: use a cached calibration (or one of another "
        "model scaled by parameters)",
    )


def check_live_args(args: argparse.Namespace) -> None:
    """The live options' own checks (cheap, before anything loads)."""
    from deffcore.core.checks import check_int
    from deffcore.runs.planner import parse_bytes
    from deffcore.statistics.bootstrap import check_b
    from deffcore.statistics.stopping import parse_until

    if args.estimate_bootstrap:
        check_b(args.estimate_bootstrap, "--estimate-bootstrap", n=getattr(args, "n", None))
    elif args.estimate_bootstrap is not None:
        check_int(args.estimate_bootstrap, "--estimate-bootstrap", 0)
    if args.max_memory is not None:
        parse_bytes(args.max_memory)
    if args.until is not None:
        parse_until(args.until, args.until_poolings)
        if args.no_anytime:
            raise DeffError("--until needs the live estimates; drop --no-anytime.")
        if args.until == "verdict" and args.estimate_bootstrap == 0:
            raise DeffError(
                "--until verdict stops on the BOS answer's paired interval, which needs the "
                "live bootstrap; drop --estimate-bootstrap 0 (or give B >= 2)."
            )


def spec_of(args: argparse.Namespace):
    """(RunSpec, device) of the command's run (every argument checked, nothing loaded)."""
    from deffcore.cli._common import run_kwargs
    from deffcore.runs.measure import run_spec

    return run_spec(**run_kwargs(args), intervention=args.intervention, batch_size=args.batch_size)


def verdict_bootstrap(args: argparse.Namespace) -> int | None:
    """The `--bootstrap` a finished `--until verdict` run is answered with: the one asked for,
    else the live estimates' B (the paired answer the rule stopped on needs its replicates)."""
    from deffcore.statistics.stopping import estimate_bootstrap, parse_until

    if args.bootstrap is not None or args.until != "verdict" or args.no_anytime:
        return args.bootstrap
    return estimate_bootstrap(parse_until(args.until), args.estimate_bootstrap)[0]


def plan_command(args: argparse.Namespace) -> int:
    """`measure --plan`: print the plan's line (or its JSON) and exit 0, or REFUSED."""
    from deffcore.cli._output import print_json
    from deffcore.runs.planner import plan_run
    from deffcore.statistics.stopping import estimate_bootstrap, parse_until

    spec, device = spec_of(args)
    rule = None if args.until is None else parse_until(args.until, args.until_poolings)
    B, boot_poolings = estimate_bootstrap(rule, args.estimate_bootstrap)
    plan = plan_run(
        spec,
        device,
        batch_size=args.batch_size,
        bootstrap=args.bootstrap,
        live=not args.no_anytime,
        max_memory=args.max_memory,
        calibrate="cached" if args.no_calibrate else "auto",
        live_bootstrap=(B, len(boot_poolings)) if B else None,
    )
    if rule is not None:
        plan.notes.append(f"With --until, the run {rule.describe()}: the time is at most this.")
    if args.json:
        print_json({"plan": plan.to_dict()})
    else:
        print(plan.line())
        for note in plan.notes:
            print(f"  {note}")
    return 0 if plan.fits else REFUSED


def estimate_line(est: Any) -> str:
    """One line for an estimate: N, the headline with its band and trust, the verdict."""
    e = est.headline()
    band = "" if e.low is None else f" [{e.low:.4f}, {e.high:.4f}]"
    shown = "" if e.metric == est.run_metric else f" ({e.metric.replace('_', ' ')} shown)"
    verdict = (
        "regimes settled" if est.verdict_settled else f"regimes open ({', '.join(est.unsettled)})"
    )
    gaps = " ".join(f"{p}={x.gap_pct:+.1f}" for p, x in est.poolings.items() if p != "default")
    answer = ""
    if est.position0 is not None:
        answer = f"  |  pos0 {_answer_words(est.position0)}"
    return (
        f"N={est.n:>6,}  D_eff/L {e.deff_over_L:.4f}{band} gap {e.gap_pct:+.1f}%{shown} "
        f"{e.level}  |  {gaps}  |  {verdict}{answer}"
    )


def _answer_words(a: dict) -> str:
    """The BOS answer of a live line: Δ with its interval, or why there is none to show (the
    two poolings are one for this run: identical; no interval yet)."""
    if a.get("identical"):
        return f"identical to default: Δ 0 exactly, {a['verdict']}"
    if a.get("interval") is None or a.get("delta") is None:
        return (
            f"Δ {'?' if a.get('delta') is None else format(a['delta'], '+.2f')} (no interval) "
            f"{a['verdict']}"
        )
    lo, hi = a["interval"]
    return f"Δ {a['delta']:+.2f} [{lo:+.2f}, {hi:+.2f}] {a['verdict']}"


class EstimatePrinter:
    """on_estimate(est) -> one line on stderr, above the progress bar of `bar`."""

    def __init__(self, bar: Any, enabled: bool = True) -> None:
        self.bar, self.enabled = bar, enabled

    def __call__(self, est: Any) -> None:
        if not self.enabled:
            return
        line = estimate_line(est)
        if getattr(self.bar, "bar", None) is not None:
            from tqdm import tqdm

            tqdm.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr)


def measure_with_estimates(args: argparse.Namespace, bar: Any, seeds: tuple[int, ...]):
    """The command's run with live estimates: (Measurement, LiveRun), random nulls at the
    N that was kept; (Measurement, None) when the estimates are off or impossible."""
    from dataclasses import replace

    from deffcore.extraction.cache import prefix_refusal
    from deffcore.runs.anytime_run import measure_live
    from deffcore.runs.measure import measure_spec
    from deffcore.statistics.stopping import estimate_bootstrap, parse_until

    spec, device = spec_of(args)
    refusal = prefix_refusal(spec.passages, spec.dataset_spec)
    if args.until is not None and refusal is not None:
        raise DeffError(f"--until cannot stop this run early. {refusal}")
    if args.no_anytime:
        return None
    rule = None if args.until is None else parse_until(args.until, args.until_poolings)
    B, boot_poolings = estimate_bootstrap(rule, args.estimate_bootstrap)
    live = measure_live(
        spec,
        metric=args.metric,
        device=device,
        batch_size=args.batch_size,
        progress=bar,
        until=rule,
        on_estimate=EstimatePrinter(bar, enabled=not args.no_progress),
        bootstrap=B,
        bootstrap_poolings=boot_poolings,
        use_cache=not args.no_cache,
    )
    m = live.measurement
    options = {"metric": args.metric, "device": device, "batch_size": args.batch_size}
    for s in seeds:
        rspec = replace(m.spec, model=ModelSpec.random(spec.model, s).text)
        m.random_null.append(
            measure_spec(rspec, progress=bar, use_cache=not args.no_cache, **options)
        )
    return m, live


def live_lines(live: Any) -> list[str]:
    """The table's lines about the live run: where it stopped, or that it ran to the end."""
    if live is None:
        return []
    lines = [""]
    lines += list(live.notes) or [
        f"Ran to N = {live.requested_n:,} ({len(live.trajectory)} estimates)."
    ]
    return lines
