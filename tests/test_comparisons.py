"""Honest comparisons (deffcore.views.comparisons): absolute differences in their units, caveats."""

from __future__ import annotations

import pytest

from deffcore.views.comparisons import comparison_caveats, headline_differences
from deffcore.views.run import Headline

A = Headline(30, 576, 4096, 29, 1.752, 0.0584, 9.50, 1.935, 0.93, 168.0, 6, 0.123)
B = Headline(18, 640, 64, 17, 2.5, 0.1389, -31.5, 1.895, 0.80, 12.0, 3, 0.909)


def test_differences_are_absolute_in_their_unit():
    rows = {r["quantity"]: r for r in headline_differences(A, B)}
    gap = rows["Gap to F_L (%)"]
    assert gap["B − A"] == pytest.approx(-41.0) and gap["unit"] == "points"
    assert gap["difference"] == "−41.00 points"  # not -432% of A
    assert rows["N (passages)"]["difference"] == "−4,032 passages"
    assert rows["L (layers)"]["difference"] == "−12 layers"
    assert rows["D_eff"]["difference"] == "+0.748 layers"
    assert all("%" not in r["unit"] for r in rows.values())


def row(label, trust, n, tokens=128, passages="windows"):
    return {"label": label, "trust": trust, "n": n, "max_tokens": tokens, "passages": passages}


def test_caveats_name_every_difference():
    same = [row("a", "solid", 4096), row("b", "solid", 4096)]
    assert comparison_caveats(same) == []
    assert comparison_caveats(same[:1]) == []
    mixed = [row("a", "solid", 4096), row("b", "noise", 64, tokens=64, passages="documents")]
    text = " ".join(comparison_caveats(mixed))
    assert "differ in trust (solid: a; noise: b)" in text and "more than 10%" in text
    assert "N differs (64, 4,096 passages)" in text
    assert "Max tokens differ (64, 128)" in text
    assert "documents" in text and "windows" in text
    assert len(comparison_caveats(mixed)) == 4


def test_unknown_values_do_not_warn():
    rows = [row("a", "solid", 4096), {"label": "paper", "trust": None, "n": None}]
    assert comparison_caveats(rows) == []
