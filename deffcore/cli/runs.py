"""`python -m deffcore runs`: list (or delete) the cached runs."""

from __future__ import annotations

import argparse

from deffcore.cli._output import print_json


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "runs",
        help="list or delete cached runs",
        description="List the runs stored in the cache folder: complete ones, partial ones "
        "(interrupted; rerun the same settings to resume) and corrupt ones (recomputed when "
        "rerun). Only run entries are listed or deleted, never other folders.",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.add_argument("--delete", metavar="KEY", default=None, help="delete the run with this key")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from deffcore.extraction import cache, entries

    if args.delete is not None:
        entries.delete(args.delete)
        print(f"deleted {args.delete}")
        return 0
    runs = entries.list_runs()
    if args.json:
        print_json(runs)
        return 0
    if not runs:
        print(f"no cached runs in {cache.cache_dir()}")
        return 0
    print(
        f"{'key':<22}{'status':<10}{'created':<22}{'model':<28}{'dataset':<16}{'N':>6}"
        f"{'max_tok':>8}{'L':>4}"
    )
    for r in runs:
        s = r.get("spec") or {}
        if r["status"] == "corrupt":
            print(f"{r['key']:<22}{'corrupt':<10}{r.get('reason', '')}  (rerun or delete it)")
            continue
        n = r.get("n", "?")
        if r["status"] == "partial":
            n = f"{r['done_passages']}/{r['total_passages']}"
        status = r["status"] + ("*" if r.get("running") else "")
        print(
            f"{r['key']:<22}{status:<10}{r.get('created', '?')!s:<22}"
            f"{str(s.get('model', '?'))[:27]:<28}{str(s.get('dataset', '?'))[:15]:<16}{n:>6}"
            f"{s.get('max_tokens', '?'):>8}{r.get('layers', '?'):>4}"
        )
    if any(r.get("running") for r in runs):
        print("* being computed right now")
    if any(r["status"] == "partial" for r in runs):
        print("partial: interrupted; measure the same settings again to resume it")
    return 0
