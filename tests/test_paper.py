"""The paper's published values ship inside the package; nothing reads outside the repository."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from deffcore.core.errors import DeffError
from deffcore.labs.residual_carry import paper_carry_rows
from deffcore.views import paper

REPO = Path(__file__).resolve().parents[1]


def test_packaged_copy_is_inside_the_repository_and_used_by_default(monkeypatch):
    monkeypatch.delenv("DEFF_PAPER_REFERENCE", raising=False)
    path = paper.paper_reference_path()
    assert path == paper.PACKAGED_PATH
    assert path.is_file() and REPO in path.resolve().parents


def test_every_row_names_its_source_table_and_has_a_number():
    rows = paper.paper_rows()
    assert len(rows) == 496
    assert all(r["source"].startswith(("Table ", "Figure ")) for r in rows)
    for r in rows:
        float(r["value"])  # every value parses
    sources = {r["source"] for r in rows}
    assert {"Table 2", "Table S6", "Table S7", "Table S14"} <= sources
    assert {"Table S17", "Table S18", "Table S20", "Table S21", "Table S22", "Figure S6"} <= sources


def test_pivot_and_norm_probe_accessors():
    s18 = paper.paper_pivot("Table S18")
    assert s18[("panel", "FineWeb-Edu", "drop both")]["k110_pearson_r"] == -0.92
    assert s18[("panel", "FineWeb-Edu", "full panel")]["n_models"] == 8
    s22 = paper.paper_pivot("Table S22")
    assert s22[("OLMo-2-7B", "FineWeb-Edu", "default")] == {
        "spearman_gw_cka": -0.47, "spearman_lag_gw": 0.44, "spearman_lag_cka": -0.82
    }  # fmt: skip
    s21 = paper.paper_pivot("Table S21")
    assert s21[("panel", "GSM8K-CoT", "drop Qwen3.5")]["pearson_r"] == -0.848
    s8 = paper.paper_norm_probe("Table S8")
    assert list(s8) == ["none", "no post", "no QK", "no post/no QK"]
    assert s8["no post"]["first_non_bos"] == {"value": 22.8, "sd": 1.7}
    assert s8["no post/no QK"]["val_loss"] == {"value": 5.09, "sd": None}
    assert paper.paper_norm_probe("Table S7")["no post"]["max_pos0_ratio"]["value"] == 1.2
    assert paper.note_intervention("no note") is None


def test_table_s7_and_s14_are_there():
    s7 = paper.paper_rows("Table S7")
    assert len(s7) == 24 and all(r["model"] == "Gemma-3-4B (random init)" for r in s7)
    none_default = [
        r
        for r in s7
        if r["setting"] == "default"
        and r["quantity"] == "gap_pct"
        and r["note"].startswith("intervention: none")
    ]
    assert [float(r["value"]) for r in none_default] == [43.7]
    rows = paper_carry_rows()
    assert [r["gamma"] for r in rows] == [1.0, 0.75, 0.5, 0.25]
    assert rows[3] == {
        "gamma": 0.25,
        "val_loss": 3.35,
        "deff_h_over_L": 0.268,
        "rho1": 0.52,
        "f_over_h": 1.25,
    }


def test_environment_variable_may_point_elsewhere(tmp_path, monkeypatch):
    other = tmp_path / "values.csv"
    with other.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(paper.COLUMNS)
        w.writerow(["Table 2", "X-1M", "2", "Web", "default", "gap_pct", "1.5", ""])
    monkeypatch.setenv("DEFF_PAPER_REFERENCE", str(other))
    assert paper.paper_reference_path() == other
    assert [r["model"] for r in paper.paper_rows()] == ["X-1M"]
    # a variable naming nothing falls back to the packaged copy
    monkeypatch.setenv("DEFF_PAPER_REFERENCE", str(tmp_path / "absent.csv"))
    assert paper.paper_reference_path() == paper.PACKAGED_PATH


def test_a_csv_without_the_columns_is_a_clear_error(tmp_path, monkeypatch):
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    monkeypatch.setenv("DEFF_PAPER_REFERENCE", str(bad))
    with pytest.raises(DeffError, match="lacks the column"):
        paper.paper_rows()


def test_no_code_reads_outside_the_repository():
    offenders = []
    for path in [
        *REPO.glob("deffcore/**/*.py"),
        *REPO.glob("pages/*.py"),
        REPO / "app.py",
        *REPO.glob("explorer/*.py"),
        *REPO.glob("scripts/*"),
        *REPO.glob("benchmarks/*"),
    ]:
        text = path.read_text(errors="replace")
        if "../shared" in text or '"shared" /' in text or 'parent / "shared"' in text:
            offenders.append(str(path.relative_to(REPO)))
    assert offenders == []
