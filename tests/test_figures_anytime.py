"""The gap-vs-N figure of a run's live estimates (deffcore.figures.gap_vs_n)."""

from __future__ import annotations

from deffcore import figures
from deffcore.core.constants import REGIME_TOLERANCE


def _row(n, gap, lo, hi, level="indicative", metric="unbiased_cka"):
    head = {
        "gap_pct": gap,
        "gap_low": lo,
        "gap_high": hi,
        "level": level,
        "metric": metric,
        "band": "error band",
    }
    return {"n": n, "poolings": {"default": head, "token_normed": {**head, "gap_pct": gap + 10}}}


def test_one_band_and_one_line_per_pooling_with_the_numbers_drawn():
    traj = [
        _row(64, 5.0, 1.0, 9.0, "noise"),
        _row(128, 6.0, 4.0, 8.0),
        _row(256, 6.5, 5.5, 7.5, "solid"),
    ]
    fig = figures.gap_vs_n(traj, poolings=("default", "token_normed"))
    bands = [t for t in fig.data if t.fill == "toself"]
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert [t.name for t in lines] == ["default", "token_normed"] and len(bands) == 2
    default = lines[0]
    assert list(default.x) == [64, 128, 256] and list(default.y) == [5.0, 6.0, 6.5]
    # the band: the high edge out, the low edge back (a closed area)
    assert list(bands[0].x) == [64, 128, 256, 256, 128, 64]
    assert list(bands[0].y) == [9.0, 8.0, 7.5, 5.5, 4.0, 1.0]
    # filled marker only where the trust rule says solid
    assert list(default.marker.symbol) == ["circle-open", "circle-open", "circle"]
    refs = sorted(s.y0 for s in fig.layout.shapes)
    assert refs == [-REGIME_TOLERANCE, 0.0, REGIME_TOLERANCE]
    assert fig.layout.xaxis.type == "log"


def test_a_pooling_without_bands_draws_its_line_only():
    traj = [_row(64, 5.0, None, None), _row(128, 6.0, None, None)]
    fig = figures.gap_vs_n(traj)
    assert [t.mode for t in fig.data] == ["lines+markers"]
    assert figures.figure_data(fig) is not None  # exports read the drawn numbers
