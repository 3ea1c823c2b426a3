"""`python -m deffcore runs`: list (or delete) the cached runs and the kept shared runs."""

from __future__ import annotations

import argparse
import re

from deffcore.cli._output import print_json

#: A kept shared run's id, as this command and the Runs page show it.
_SHARED_ID = re.compile(r"(?:shared:)?([0-9a-f]{16})")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "runs",
        help="list or delete cached runs and shared runs",
        description="List the runs stored in the cache folder: complete ones, partial ones "
        "(interrupted; rerun the same settings to resume) and corrupt ones (recomputed when "
        "rerun), then the shared runs kept there (snapshot files someone sent: `deffcore app "
        "--run FILE` or the Runs page), a damaged one with its reason. Only run entries and "
        "kept shared files are listed or deleted, never other folders.",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.add_argument(
        "--delete",
        metavar="KEY",
        default=None,
        help="delete the cached run with this key, or the shared run with this id "
        "(shared:<16 hex digits>, as listed)",
    )
    p.set_defaults(func=run)


def shared_rows() -> list[dict]:
    """The kept shared runs as rows like the cache's: key `shared:<id>`, status shared or
    damaged (with the reason), spec, n, layers."""
    from datetime import datetime

    from deffcore.views.sharing import shared_entries

    rows = []
    for e in shared_entries():
        kept = datetime.fromtimestamp(e.path.lstat().st_mtime).isoformat(timespec="seconds")
        row = {"key": f"shared:{e.sha256}", "source": "shared", "path": str(e.path)}
        row["created"] = kept
        if e.view is None:
            rows.append({**row, "status": "damaged", "reason": e.error, "deletable": e.deletable})
            continue
        v = e.view
        rows.append({**row, "status": "shared", "spec": v.spec, "n": v.n, "layers": v.layers})
    return rows


def run(args: argparse.Namespace) -> int:
    from deffcore.extraction import cache
    from deffcore.extraction import cache as entries

    if args.delete is not None:
        shared = _SHARED_ID.fullmatch(args.delete)
        if shared is not None:
            from deffcore.views.sharing import delete_shared

            delete_shared(shared.group(1))
        else:
            entries.delete(args.delete)
        print(f"deleted {args.delete}")
        return 0
    runs = entries.list_runs()
    shared = shared_rows()
    if args.json:
        print_json(runs + shared)
        return 0
    if not runs and not shared:
        print(f"no cached runs in {cache.cache_dir()}")
        return 0
    print(
        f"{'key':<24}{'status':<10}{'created':<22}{'model':<28}{'dataset':<16}{'N':>6}"
        f"{'max_tok':>8}{'L':>4}"
    )
    for r in runs + shared:
        print(_line(r))
    if any(r.get("running") for r in runs):
        print("* being computed right now")
    if any(r["status"] == "partial" for r in runs):
        print("partial: interrupted; measure the same settings again to resume it")
    if any(r["status"] == "damaged" for r in shared):
        print("damaged: a kept shared file that no longer reads; `--delete shared:<id>` removes it")
    return 0


def _line(r: dict) -> str:
    """One run as a table line (a corrupt or damaged one: its reason instead)."""
    s = r.get("spec") or {}
    if r["status"] in ("corrupt", "damaged"):
        advice = "(rerun or delete it)" if r["status"] == "corrupt" else "(delete it)"
        return f"{r['key']:<24}{r['status']:<10}{_text(r.get('reason', ''), 150)}  {advice}"
    n = r.get("n", "?")
    if r["status"] == "partial":
        n = f"{r['done_passages']}/{r['total_passages']}"
    status = r["status"] + ("*" if r.get("running") else "")
    return (
        f"{r['key']:<24}{status:<10}{r.get('created', '?')!s:<22}"
        f"{_text(s.get('model', '?'), 27):<28}{_text(s.get('dataset', '?'), 15):<16}{n!s:>6}"
        f"{s.get('max_tokens', '?')!s:>8}{r.get('layers', '?')!s:>4}"
    )


def _text(value: object, width: int) -> str:
    """A field as terminal text: control characters (an escape sequence in a model name) and
    anything that is not printable shown as `?`, cut to `width`."""
    text = "".join(c if c.isprintable() else "?" for c in str(value))
    return text[:width]
