"""Write docs/support.md: every transformers causal-LM type, verified or refused with why.

    .venv/bin/python scripts/support_table.py            # write docs/support.md (minutes)
    .venv/bin/python scripts/support_table.py --check    # exit 1 when it is out of date
    .venv/bin/python scripts/support_table.py llama mamba   # print those rows only

Each type is built from a tiny config and measured (`deffcore.lenses.support`); nothing is
downloaded. tests/test_support.py runs the same walk (slow) and compares with the file.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "support.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("types", nargs="*", help="only these model types (printed, not written)")
    parser.add_argument("--check", action="store_true", help="compare with docs/support.md")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT))
    from deffcore.lenses.support import support_markdown, support_rows

    if args.types:
        print(support_markdown(support_rows(args.types)))
        return 0
    text = support_markdown(support_rows())
    if args.check:
        current = TABLE.read_text() if TABLE.is_file() else ""
        if current != text:
            print(f"{TABLE} is out of date: run scripts/support_table.py", file=sys.stderr)
            return 1
        return 0
    TABLE.write_text(text)
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
