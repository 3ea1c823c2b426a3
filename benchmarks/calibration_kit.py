"""What the calibration benchmarks share (`bench_trust_calibration.py`, `bench_stopping.py`):
the teaching constructions whose truth is a closed form, a case's population D_eff/L, shares
and percentages for the tables, and the `--save` / `--load` of measured cases.

Not a benchmark itself: the two scripts import it, with the repository and `benchmarks/` on
`sys.path`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from deffcore.measures import teaching
from deffcore.measures.depth import effective_depth

#: name -> (teaching step, knobs): the story's ingredients, each with a closed-form S.
CONSTRUCTIONS: dict[str, tuple[str, dict[str, float]]] = {
    "independent": ("independent", {}),
    "orthogonal updates (F_L)": ("orthogonal_updates", {"h0": 0.0, "growth": 1.0, "rho": 0.0}),
    "h_0 = 1": ("h0", {"h0": 1.0, "growth": 1.0, "rho": 0.0}),
    "h_0 = 4": ("h0", {"h0": 4.0, "growth": 1.0, "rho": 0.0}),
    "growing x1.3": ("growing", {"h0": 0.5, "growth": 1.3, "rho": 0.0}),
    "correlated rho 0.5": ("correlated", {"h0": 1.0, "growth": 1.1, "rho": 0.5}),
}


def construction(case: dict[str, Any]) -> tuple[str, teaching.Knobs, float]:
    """A case's (construction, L) -> (teaching step, its knobs, population D_eff/L): the truth
    its sampled states are judged against."""
    step, kw = CONSTRUCTIONS[case["construction"]]
    knobs = teaching.Knobs(L=case["L"], **kw)
    truth = effective_depth(teaching.population_similarity(step, knobs)) / case["L"]
    return step, knobs, truth


def share(flags: Iterable[Any]) -> float | None:
    """The share of true flags; None for no flags (a table cell with no cases)."""
    flags = list(flags)
    return sum(flags) / len(flags) if flags else None


def pct(v: float | None) -> str:
    """A share as a table cell: one decimal percent, "–" for none."""
    return "–" if v is None else f"{100 * v:.1f}%"


def parser(
    doc: str, sizes: Iterable[str], bootstrap: int, bootstrap_help: str
) -> argparse.ArgumentParser:
    """A calibration benchmark's command line (its docstring's first line as description):
    `--size` (one of `sizes`, default "full"), `--bootstrap B` (default `bootstrap`),
    `--save` / `--load` of the measurements; a benchmark may add its own options."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--size", choices=tuple(sizes), default="full")
    p.add_argument("--bootstrap", type=int, default=bootstrap, metavar="B", help=bootstrap_help)
    p.add_argument("--save", type=Path, default=None, help="write the measurements here")
    p.add_argument("--load", type=Path, default=None, help="judge saved measurements")
    return p


def parse_args(doc: str, sizes: Iterable[str], bootstrap: int, bootstrap_help: str) -> Any:
    """`parser(...)`'s arguments, parsed from the command line."""
    return parser(doc, sizes, bootstrap, bootstrap_help).parse_args()


def measured_or_loaded(args: argparse.Namespace, run: Callable[[str, int | None], Any]) -> Any:
    """`run(args.size, B)` (B = `args.bootstrap`, None for 0), or the measurements saved in
    `args.load`; written to `args.save` when given (so thresholds can be tried again)."""
    if args.load is not None:
        results = json.loads(args.load.read_text())
    else:
        results = run(args.size, args.bootstrap or None)
    if args.save is not None:
        args.save.write_text(json.dumps(results))
    return results
