"""`python -m deffcore sweep`: one measurement over a grid of cells, on Ray or serially.

    python -m deffcore sweep --models tiny-llama,tiny-gpt2 --random-seeds 0,1 --n 64
    python -m deffcore sweep --manifest cells.yaml --engine ray --address 10.0.0.5:6379
    python -m deffcore sweep --table-s7 --n 128 --max-tokens 64
    python -m deffcore sweep --models smollm2-135m,gemma3-270m --n 256 --pruning   # + k_1.10

Exit 0 when the sweep ran (even when some cells failed: their rows say why), 2 for a malformed
sweep (no models, an unknown intervention, an unreadable manifest, bad shared options).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from deffcore.cli._common import add_run_args, int_list, run_kwargs, str_list
from deffcore.cli._output import add_output_args, fmt, print_json, result_only_stdout
from deffcore.core.constants import POOLINGS


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="measure a grid of models/seeds/revisions/interventions as Ray tasks (cached)",
        description="Measure every cell of a grid (models x revisions x random seeds x "
        "interventions x datasets) or of a manifest file, each cell one `measure` run. Cells "
        "already in the cache are read, not recomputed; a failing cell is reported with its "
        "reason while the others finish. --engine auto runs cells in this process unless "
        "--address is given or at least 8 cells need computing on a machine of 4+ cores, then as "
        "Ray tasks on a local Ray runtime (bound to 127.0.0.1) or on the cluster at --address.",
    )
    add_run_args(p, model="smollm2-135m", n=512)
    p.set_defaults(model=None)  # --models is the sweep's axis; --model adds one model to it
    # a manifest's `settings` fill what the command line leaves unset (_apply_settings)
    p.set_defaults(**dict.fromkeys(_DEFAULTS))
    _grid_arguments(p.add_argument_group("grid (or --manifest)"))
    _pruning_arguments(p.add_argument_group("pruning column (Table S17; off by default: costly)"))
    _execution_arguments(p.add_argument_group("execution"))
    _cost_arguments(p.add_argument_group("cost"))
    add_output_args(p)
    p.set_defaults(func=run_command)


def _grid_arguments(grid: argparse._ArgumentGroup) -> None:
    grid.add_argument("--models", default="", help="comma-separated model specs")
    grid.add_argument(
        "--revisions", default="", help="comma-separated hub revisions (default: the default)"
    )
    grid.add_argument(
        "--checkpoints",
        default=None,
        metavar="DIR",
        help="also every save_pretrained checkpoint folder under DIR (training dynamics)",
    )
    grid.add_argument(
        "--random-seeds",
        default="",
        help="comma-separated seeds: adds the random-weight null random:<model>:<seed> per seed",
    )
    grid.add_argument(
        "--random-only", action="store_true", help="only the random nulls, not the trained model"
    )
    grid.add_argument(
        "--interventions",
        default="none",
        help="comma-separated norm interventions: none, no_post, no_qk, no_post_no_qk",
    )
    grid.add_argument("--datasets", default="", help="comma-separated datasets (default --dataset)")
    grid.add_argument(
        "--manifest",
        default=None,
        metavar="FILE",
        help="YAML or JSON file: a list of cells {model, revision, seed, intervention, "
        "dataset} and/or a 'grid' mapping of the axes above",
    )
    grid.add_argument(
        "--table-s7",
        action="store_true",
        help="paper Table S7: random:gemma3-270m:{0,1,2} x the four interventions, mean +- sd "
        "per pooling control beside the paper's Gemma-3-4B values",
    )


def _pruning_arguments(prune: argparse._ArgumentGroup) -> None:
    prune.add_argument(
        "--pruning",
        action="store_true",
        help="also run the pruning check of every trained cell without intervention (stored, "
        "read back when repeated) and add ppl0, k_110, f_110 to its row; a held-out "
        "perplexity pass per skip count. A manifest turns it on with `pruning: true`",
    )
    prune.add_argument(
        "--pruning-n", type=int, default=None, help="its measured passages (default 64; implies "
        "--pruning)",
    )  # fmt: skip
    prune.add_argument(
        "--pruning-heldout", type=int, default=None, help="its held-out passages (default 32; "
        "implies --pruning)",
    )  # fmt: skip


def _execution_arguments(run: argparse._ArgumentGroup) -> None:
    run.add_argument("--engine", choices=("auto", "ray", "serial"), default="auto")
    run.add_argument(
        "--address", default=None, help="join this Ray cluster (host:port of `ray start --head`)"
    )
    run.add_argument(
        "--num-cpus", type=int, default=None, help="CPUs of the local Ray runtime (default: all)"
    )
    run.add_argument("--cpus-per-cell", type=float, default=1.0, help="CPUs per cell (default 1)")
    run.add_argument(
        "--gpus-per-cell",
        type=float,
        default=None,
        help="GPUs per cell, fractions share a GPU (default: 1 with CUDA, else 0)",
    )
    run.add_argument(
        "--batch-size", type=int, default=None, help="fixed batch size (default: auto)"
    )
    run.add_argument(
        "--pooling", choices=POOLINGS, default="default", help="pooling control the table shows"
    )


def _cost_arguments(cost: argparse._ArgumentGroup) -> None:
    cost.add_argument(
        "--plan",
        action="store_true",
        help="print what every cell costs here and on one GPU (time, peak memory) and exit; "
        "offline: a manifest's `sizes` stand in for configs this machine lacks",
    )
    cost.add_argument(
        "--max-memory", default=None, metavar="SIZE", help="memory a cell may use, e.g. 8GiB"
    )
    cost.add_argument(
        "--no-calibrate",
        action="store_true",
        help="--plan never loads a model (cached calibrations only)",
    )


def cells_from_args(args: argparse.Namespace) -> list:
    """The sweep's cells from the grid flags, the manifest or --table-s7 (SweepError if none)."""
    from deffcore.work.sweep.cells import checkpoint_cells, grid_cells, manifest_cells
    from deffcore.work.sweep.checks import SweepError
    from deffcore.work.sweep.table_s7 import table_s7_cells

    if args.table_s7:
        return [replace(c, dataset=args.dataset) for c in table_s7_cells()]
    models = list(str_list(args.models))
    if args.model:
        models.append(args.model)
    axes = {
        "revisions": list(str_list(args.revisions)) or [args.revision],
        "random_seeds": int_list(args.random_seeds, "--random-seeds"),
        "trained": not args.random_only,
        "interventions": list(str_list(args.interventions)) or ["none"],
        "datasets": list(str_list(args.datasets)) or [args.dataset],
    }
    cells = []
    if args.manifest:
        cells += manifest_cells(args.manifest)
    if models:
        cells += grid_cells(models, **axes)
    if args.checkpoints:
        cells += checkpoint_cells(args.checkpoints, **axes)
    if not cells:
        raise SweepError(
            "Name the sweep's cells: --models a,b, --checkpoints DIR or --manifest FILE."
        )
    return cells


def pruning_from_args(args: argparse.Namespace):
    """The pruning column the flags and the manifest ask for (None: off); sizes from the
    flags, else the manifest's, else the defaults."""
    from deffcore.work.sweep.pruning_column import manifest_pruning, pruning_options

    from_manifest = manifest_pruning(args.manifest) if args.manifest else None
    flags = {"n": args.pruning_n, "n_heldout": args.pruning_heldout}
    if not (args.pruning or from_manifest or any(v is not None for v in flags.values())):
        return None
    sizes = from_manifest.to_dict() if from_manifest else {}
    sizes.update({k: v for k, v in flags.items() if v is not None})
    return pruning_options(sizes, "--pruning")


def _table(result) -> str:
    pooling = result.settings["pooling"]
    prune = bool(result.settings.get("pruning"))
    lines = [
        f"engine {result.engine}"
        + (f" at {result.address}" if result.address else "")
        + f"   N={result.settings['n']} max_tokens={result.settings['max_tokens']} "
        f"pooling={pooling}",
        "",
        f"{'cell':<44}{'status':>8}{'D_eff/L':>9}{'gap%':>8}"
        + (f"{'k_1.10':>7}{'f_1.10':>7}" if prune else "")
        + f"{'past-phase':>11}{'s':>7}  worker / error",
    ]
    for r in result.rows:
        tail = r["error"] if r["status"] == "failed" else (r["worker"] or "")
        if prune and r.get("pruning_status") == "failed":
            tail += f"  (pruning check failed: {r['pruning_error']})"
        pruned = f"{fmt(r.get('k_110'), 'd'):>7}{fmt(r.get('f_110'), '.3f'):>7}" if prune else ""
        lines.append(
            f"{r['label'][:43]:<44}{r['status']:>8}{fmt(r['deff_over_L']):>9}"
            f"{fmt(r['gap_pct'], '.1f'):>8}{pruned}{fmt(r.get('phase_share'), '.2f'):>11}"
            f"{fmt(r['seconds'], '.1f'):>7}  {tail}"
        )
    c = result.counts()
    lines += ["", f"{c['done']} done, {c['cached']} cached, {c['failed']} failed"]
    return "\n".join(lines)


def _s7_table(rows) -> str:
    lines = [
        "Table S7 (random init, norm probes): gap% mean +- sd over seeds; paper = Gemma-3-4B",
        f"{'intervention':<15}{'pooling':<16}{'seeds':>6}{'gap% mean':>11}{'sd':>6}"
        f"{'paper':>8}{'sd':>6}",
    ]
    for r in rows:
        lines.append(
            f"{r['intervention']:<15}{r['pooling']:<16}{r['seeds']:>6}"
            f"{fmt(r['gap_pct_mean'], '.2f'):>11}{fmt(r['gap_pct_sd'], '.2f'):>6}"
            f"{fmt(r['paper_gap_pct'], '.2f'):>8}{fmt(r['paper_sd'], '.1f'):>6}"
        )
    return "\n".join(lines)


class _CellBar:
    """A tqdm bar over cells on stderr; each landed cell's status is written above it."""

    def __init__(self, enabled: bool) -> None:
        self.enabled, self.bar = enabled, None

    def __call__(self, row: dict, landed: int, total: int) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=total, unit="cell", file=sys.stderr, leave=False)
        extra = row["error"] if row["status"] == "failed" else fmt(row["deff_over_L"])
        self.bar.write(f"[{landed}/{total}] {row['status']:<6} {row['label']}  {extra}", sys.stderr)
        self.bar.set_description(row["status"], refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


#: Built-in values of the shared options a manifest's `settings` may set.
_DEFAULTS: dict[str, object] = {
    "n": 512,
    "max_tokens": 128,
    "seed": 0,
    "passages": "documents",
    "bos": "default",
    "dtype": None,
}


def _apply_settings(args: argparse.Namespace) -> dict:
    """Fill the shared options the command line left unset from the manifest's `settings`,
    then the built-in defaults; returns the manifest's model sizes (for --plan)."""
    from deffcore.work.sweep.cost import manifest_extras

    settings, sizes = {}, {}
    if args.manifest:
        settings, sizes, _about = manifest_extras(args.manifest)
    for name, default in _DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, settings.get(name, default))
    return sizes


def _plan_command(args: argparse.Namespace, cells: list, kw: dict, sizes: dict) -> int:
    """`sweep --plan`: every cell's cost here and on one GPU; nothing runs."""
    from deffcore.work.sweep.cost import planned, sweep_cost

    plan, notes = planned(cells, **kw, batch_size=args.batch_size, pooling=args.pooling)
    cost = sweep_cost(
        plan,
        known=sizes,
        max_memory=args.max_memory,
        calibrate="cached" if args.no_calibrate else "auto",
    )
    cost.notes += notes
    if args.json:
        print_json({"sweep_plan": cost.to_dict()})
    else:
        print("\n".join(cost.lines()))
    return 0


def run_command(args: argparse.Namespace) -> int:
    from deffcore.work.sweep.runner import run_sweep
    from deffcore.work.sweep.table_s7 import table_s7_rows

    cells = cells_from_args(args)
    sizes = _apply_settings(args)
    kw = run_kwargs(args)
    for name in ("model", "revision", "dataset"):
        kw.pop(name, None)  # per cell
    if args.plan:
        return _plan_command(args, cells, kw, sizes)
    bar = _CellBar(enabled=not args.no_progress)
    try:
        with result_only_stdout():
            result = run_sweep(
                cells,
                **kw,
                batch_size=args.batch_size,
                pooling=args.pooling,
                engine=args.engine,
                address=args.address,
                num_cpus=args.num_cpus,
                cpus_per_cell=args.cpus_per_cell,
                gpus_per_cell=args.gpus_per_cell,
                pruning=pruning_from_args(args),
                on_cell=bar,
            )
    finally:
        bar.close()
    s7 = table_s7_rows(result) if args.table_s7 else None
    if args.json:
        out = result.to_dict()
        if s7 is not None:
            out["table_s7"] = s7
        print_json(out)
    else:
        print(_table(result))
        if s7 is not None:
            print()
            print(_s7_table(s7))
    return 0
