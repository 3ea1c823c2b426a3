"""`python -m deffcore report RUN -o report.html`: a run as one self-contained HTML file.

RUN is a snapshot file (a shared run: checked like every file from someone else,
`sharing.open_snapshot`), a cached run's key (`deffcore runs` lists them) or the key of a run
shipped with the app. The page is `run_report.report_html` over `run_extras.report_parts`:
plotly.js inlined, nothing fetched, every label escaped. The output is written atomically
(a temporary file beside it, then renamed), never through a link, never onto RUN itself.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from deffcore.cli._output import add_output_args, answer
from deffcore.core.constants import METRICS, POOLINGS
from deffcore.core.errors import DeffError, InvalidArgumentError

_KEY = re.compile(r"[0-9a-f]{20}")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "report",
        help="write a run as one HTML file that opens offline (figures included)",
        description="Write one self-contained HTML page of a run: headline numbers, trust and "
        "what would make it solid, the BOS answer, the heatmap, lag decay, gap to F_L beside "
        "the paper's models, the pooling controls, the diagnostics when present, and the "
        "command that remakes it. plotly.js is inlined: the file opens in any browser, offline.",
    )
    p.add_argument("run", metavar="RUN", help="a snapshot file, or a cached run's key")
    p.add_argument("-o", "--output", type=Path, required=True, help="the HTML file to write")
    p.add_argument("--pooling", choices=POOLINGS, default="default")
    p.add_argument("--metric", choices=METRICS, default="cka")
    p.add_argument("--K", type=int, default=None, help="maximum lag (default L-1)")
    add_output_args(p)
    p.set_defaults(func=run)


def open_run(ref: str) -> Any:
    """The `Run` RUN names: a snapshot file, a cached run's key, a shipped run's key."""
    from deffcore.views.run import Run, load_gallery

    path = Path(ref).expanduser()
    if ref.strip() and path.exists():  # Path("") is ".", the working folder
        from deffcore.views.sharing import open_snapshot

        return open_snapshot(path)
    if _KEY.fullmatch(ref):
        from deffcore.extraction import cache as entries
        from deffcore.work import jobs

        if any(r.get("key") == ref and r.get("status") == "complete" for r in entries.list_runs()):
            return Run.from_measurement(jobs.load_result(ref))
        for view in load_gallery():
            if view.key == ref:
                return view
    raise InvalidArgumentError(
        f"RUN {ref!r} is neither a snapshot file nor the key of a complete cached run "
        "(`deffcore runs` lists them)."
    )


def check_output(output: Path, run_path: Path | None) -> Path:
    """The output path (`core.files.check_output`, the one rule of every output): refused
    when it is a folder, a link, a FIFO or a device, inside a cache entry or the package, RUN
    itself, or an existing file that is not a report deffcore wrote; an earlier report is
    replaced."""
    from deffcore.core.files import REPORT, check_output

    inputs = {"RUN": run_path} if run_path is not None else None
    return check_output(output, "--output", marks=(REPORT,), kind="report", inputs=inputs)


def run(args: argparse.Namespace) -> int:
    from deffcore.core.checks import check_int

    if args.K is not None:
        check_int(args.K, "--K", 1)
    view = open_run(args.run)
    output = check_output(args.output, getattr(view, "path", None))
    if args.K is not None and view.layers <= args.K:
        raise DeffError(f"--K must be below L = {view.layers} for this run.")
    try:
        view.similarity(args.pooling, args.metric)
    except KeyError as err:  # an older snapshot without this pooling or metric
        raise DeffError(str(err).strip("'\"")) from None
    return answer(args, "part", lambda bar: write_report(view, output, args), _line)


def write_report(view: Any, output: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The page of `view` written to `output`, and what was written (the JSON summary)."""
    from deffcore.core.files import write_output
    from deffcore.lenses.run_extras import report_parts
    from deffcore.views.run_report import report_html

    parts = report_parts(view, args.metric, args.K, args.pooling)
    page = report_html(view, **parts, pooling=args.pooling, metric=args.metric, K=args.K)
    check_output(output, getattr(view, "path", None))  # again now: nothing took the name since
    write_output(output, page.encode("utf-8"), "--output")
    return {
        "output": str(output),
        "bytes": output.stat().st_size,
        "run": view.label,
        "diagnostics": parts["diagnostics"] is not None,
        "bos_on_off": parts["bos_on_off"] is not None,
    }


def _line(summary: dict[str, Any]) -> str:
    return f"wrote {summary['output']} ({summary['bytes'] / 1e6:.1f} MB): {summary['run']}"
