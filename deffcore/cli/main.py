"""`deffcore <command>` (or `python -m deffcore <command>`): every measurement from the
command line. The installed console script `deffcore` calls `main` (pyproject.toml).

Each subcommand lives in its own module of `deffcore/cli/`, which defines
`add_parser(subparsers)` (registering its arguments, with `func=run`) and `run(args) -> int`.
Errors meant for people (`DeffError`) are printed as one line on stderr with exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from deffcore.cli import (
    aggregations,
    app,
    atlas,
    bos,
    carry,
    correlate,
    dynamics,
    gw,
    interventions,
    measure,
    pretrain,
    pruning,
    report,
    runs,
    sweep,
    synthetic,
)
from deffcore.cli._common import OneLineArgumentParser
from deffcore.core.errors import DeffError

#: Subcommand modules, in the order `--help` lists them; each registers its own arguments.
COMMANDS = (
    synthetic,
    measure,
    runs,
    report,
    interventions,
    pruning,
    carry,
    dynamics,
    aggregations,
    gw,
    atlas,
    correlate,
    pretrain,
    bos,
    sweep,
    app,
)


def program_name() -> str:
    """How the user started us: `deffcore` (the installed console script) or
    `python -m deffcore` (a clone or any install); usage lines and hints say the same."""
    return "deffcore" if Path(sys.argv[0]).name == "deffcore" else "python -m deffcore"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineArgumentParser(
        prog=program_name(),
        description="Effective depth (D_eff) of a transformer's residual stream.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(subparsers)
    return parser


#: Optional dependencies -> the pyproject extra that installs each (`pip install deffcore[x]`).
EXTRAS: dict[str, str] = {"ray": "sweep", "streamlit": "app"}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except DeffError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as err:
        top = (err.name or "").partition(".")[0]
        if top not in EXTRAS:
            raise
        print(
            f"error: `{args.command}` needs the optional package {top!r}, which is not "
            f"installed: pip install 'deffcore[{EXTRAS[top]}]'.",
            file=sys.stderr,
        )
        return 2
    except KeyboardInterrupt:
        # finished batches of an extraction are kept in the cache (deffcore.extraction.cache
        # partials)
        print(
            "interrupted: finished batches are kept; rerun the same command to resume.",
            file=sys.stderr,
        )
        return 130
