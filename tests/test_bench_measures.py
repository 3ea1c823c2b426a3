"""benchmarks/bench_measures.py --model: the command that rebuilds the packaged models' rows of
the table across measures (docs/lenses.md, "Across similarity measures"; BENCHMARKS.md)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
#: The bench's command as the pages name it, in backticks.
_COMMAND = re.compile(
    r"`(?:\.venv/bin/)?python benchmarks/bench_measures\.py (?P<args>--model [^`]+)`"
)


@pytest.fixture(scope="module")
def bench():
    path = REPO / "benchmarks" / "bench_measures.py"
    spec = importlib.util.spec_from_file_location("bench_measures", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_measures"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("page", ["docs/lenses.md", "BENCHMARKS.md"])
def test_the_pages_command_parses_to_the_rows_settings(bench, page):
    """Each packaged model's rows are named with the command that rebuilds them, and that
    command parses to the rows' settings (N = 128 documents of 64 tokens, B = 10, 19 perm.)."""
    text = (REPO / page).read_text(encoding="utf-8")
    found = [m["args"].split() for m in _COMMAND.finditer(text)]
    models = {bench.parser().parse_args(a).model for a in found}
    assert {"smollm2-135m", "gemma3-270m"} <= models, f"{page}: {found}"
    for argv in found:
        args = bench.parser().parse_args(argv)
        assert (args.n or 128, args.max_tokens, args.B, args.permutations) == (128, 64, 10, 19)


def test_model_table_prints_the_docs_rows(bench, capsys, monkeypatch, tmp_path):
    """On the tiny model: the Markdown head is the docs table's, one row per measure with the
    table's own numbers; a second call reads the kept table (no extraction, no recompute)."""
    monkeypatch.setenv("DEFF_CACHE_DIR", str(tmp_path))
    argv = ["--model", "tiny-llama", "--n", "16", "--max-tokens", "32", "--B", "3"]
    bench.main([*argv, "--permutations", "3"])
    out = capsys.readouterr().out
    docs = (REPO / "docs" / "lenses.md").read_text(encoding="utf-8")
    head = "| measure | D_eff/L | 95% interval | gap to F_L | regime | calibrated D_eff/L |"
    assert head in out and head in docs
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + 9  # the head and every measure of the table
    assert any(line.startswith("| mutual kNN (k = 10) | ") for line in rows)
    assert "table " in out and "cka " in out and "pwcca " in out

    import deffcore as dc

    m = dc.measure("tiny-llama", n=16, max_tokens=32)
    table = m.measure_table("default", B=3, permutations=3)
    assert bench.markdown_rows(table)[2:] == rows[1:]
    r = table.row("procrustes")
    assert f"| orthogonal Procrustes | {r.deff_over_L:.4f} | [{r.low:.4f}, {r.high:.4f}] | " in out

    bench.main([*argv, "--permutations", "3"])
    again = capsys.readouterr().out
    assert ", cached (" in again.splitlines()[0]
    assert [line for line in again.splitlines() if line.startswith("| ")] == [head, *[
        line for line in out.splitlines() if line.startswith("| ")][1:]]  # fmt: skip


def test_markdown_rows_write_the_pages_signs_and_labels(bench):
    """A gap above F_L with the pages' minus sign, the docs' labels, an undefined row's reason."""
    from deffcore.statistics.measure_table import MeasureRow, MeasureTable

    rows = [
        MeasureRow(
            "cka", 2.07, 0.11487, -9.127, 0.10473, 0.11139, regime="at the reference", cal=0.12823
        ),
        MeasureRow("mutual_knn", 1.0, 0.0556, 47.2, 0.0556, 0.0556, regime="below", cal=None),
        MeasureRow("cknna", undefined="Too few passages."),
    ]
    table = MeasureTable(18, 128, 640, 10, 0, 0.95, 19, 0.05, rows)
    assert bench.markdown_rows(table)[2:] == [
        "| linear CKA | 0.1149 | [0.1047, 0.1114] | \u22129.1% | at the reference | 0.1282 |",
        "| mutual kNN (k = 10) | 0.0556 | [0.0556, 0.0556] | +47.2% | below | — |",
        "| CKNNA | undefined: Too few passages. | | | | |",
    ]
