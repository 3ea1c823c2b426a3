"""Honest comparisons of runs: differences in their own units, and what makes runs unlike.

    headline_differences(a, b)   each headline number of run A and B and B - A, in its unit
                                 (points for a gap, passages for N, layers for L), never "% of A"
    comparison_caveats(rows)     one sentence per way the compared runs differ in how far their
                                 numbers can be trusted: trust level, N, max tokens, passages

A percent change of a percentage (the gap), of N or of L means nothing a reader can use, so
every difference is absolute. The caveats are what the Runs, Models and Interventions pages
show above any table or chart that puts runs (or a run and the paper) side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: The paper's setting (Figure 1: N = 10,000 FineWeb-Edu passages, K = L-1); its published
#: values are compared with runs measured here as "published" rows.
PAPER_N = 10_000
PAPER_DATASET = "FineWeb-Edu"
#: (row name, Headline field, unit, format of a difference)
HEADLINE_ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("D_eff", "deff", "layers", "{:+.3f}"),
    ("D_eff / L", "deff_over_L", "fraction of L", "{:+.4f}"),
    ("Gap to F_L (%)", "gap_pct", "points", "{:+.2f}"),
    ("ρ̂(1)", "rho1", "similarity", "{:+.4f}"),
    ("Position-0 norm ratio", "pos0_ratio", "× (ratio)", "{:+.1f}"),
    ("N (passages)", "n", "passages", "{:+,.0f}"),
    ("L (layers)", "layers", "layers", "{:+,.0f}"),
    ("CKA bias d/(N+d)", "cka_bias", "similarity", "{:+.4f}"),
)


def headline_differences(a: Any, b: Any) -> list[dict[str, Any]]:
    """One row per headline number of `run.Headline`s a and b: quantity, unit, run A,
    run B, the difference B - A (a float, in the unit) and that difference as text with its
    unit ("+1.75 points", "-4,032 passages")."""
    rows = []
    for name, attr, unit, fmt in HEADLINE_ROWS:
        x, y = float(getattr(a, attr)), float(getattr(b, attr))
        diff = y - x
        rows.append(
            {
                "quantity": name,
                "unit": unit,
                "run A": x,
                "run B": y,
                "B − A": diff,
                "difference": f"{fmt.format(diff).replace('-', '−')} {unit}",
            }
        )
    return rows


def _distinct(rows: Sequence[Mapping[str, Any]], key: str) -> list[Any]:
    return list(dict.fromkeys(r.get(key) for r in rows if r.get(key) is not None))


def _who(rows: Sequence[Mapping[str, Any]], key: str, value: Any) -> str:
    names = [str(r.get("label", "?")) for r in rows if r.get(key) == value]
    return names[0] if len(names) == 1 else f"{len(names)} runs"


def comparison_caveats(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Sentences naming how the compared rows differ: trust level, N, max tokens, passages.

    rows: label, and any of trust ("solid" / "indicative" / "noise", or "published" for the
    paper's values), n, max_tokens, passages (None where unknown). Empty when every known
    value agrees (or fewer than two rows).
    """
    out: list[str] = []
    levels = _distinct(rows, "trust")
    if len(levels) > 1:
        which = "; ".join(f"{lv}: {_who(rows, 'trust', lv)}" for lv in levels)
        noisy = " A noise number can be off by more than 10%." if "noise" in levels else ""
        out.append(f"The compared numbers differ in trust ({which}).{noisy}")
    ns = _distinct(rows, "n")
    if len(ns) > 1:
        shown = ", ".join(f"{int(n):,}" for n in sorted(ns))
        out.append(
            f"N differs ({shown} passages): linear CKA's bias d/(N+d) and the spread of D_eff "
            "shrink with N, so part of a difference can be N alone."
        )
    tokens = _distinct(rows, "max_tokens")
    if len(tokens) > 1:
        shown = ", ".join(str(int(t)) for t in sorted(tokens))
        out.append(f"Max tokens differ ({shown}): each passage's pooled mean covers more text.")
    modes = _distinct(rows, "passages")
    if len(modes) > 1:
        out.append(
            f"Passages are cut differently ({', '.join(map(str, modes))}): documents, token "
            "windows and packed windows sample different text."
        )
    return out
