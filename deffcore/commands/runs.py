"""`python -m deffcore runs`: list (or delete) the cached runs."""

from __future__ import annotations

import argparse

from deffcore.cli import print_json


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "runs",
        help="list or delete cached runs",
        description="List the runs stored in the cache folder.",
    )
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.add_argument("--delete", metavar="KEY", default=None, help="delete the run with this key")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from deffcore import cache

    if args.delete:
        cache.delete(args.delete)
        print(f"deleted {args.delete}")
        return 0
    runs = cache.list_runs()
    if args.json:
        print_json(runs)
        return 0
    if not runs:
        print(f"no cached runs in {cache.cache_dir()}")
        return 0
    print(f"{'key':<22}{'created':<22}{'model':<28}{'dataset':<16}{'N':>6}{'max_tok':>8}{'L':>4}")
    for r in runs:
        s = r.get("spec") or {}
        if r.get("corrupt") or not s:
            print(f"{r['key']:<22}(corrupt entry: delete it or rerun)")
            continue
        print(
            f"{r['key']:<22}{r.get('created', '?'):<22}{s.get('model', '?')[:27]:<28}"
            f"{s.get('dataset', '?')[:15]:<16}{r.get('n', '?'):>6}{s.get('max_tokens', '?'):>8}"
            f"{r.get('layers', '?'):>4}"
        )
    return 0
