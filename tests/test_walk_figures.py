"""Figures and words of the explorer walk read right: the atlas's log axis names its decades,
a phase point at the last block is "none found"."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from deffcore.figures import atlas as atlas_figures
from deffcore.views.atlas_read import phase_words


def _atlas_dict(r: list[float], phase_point: int) -> dict:
    L = len(r)
    return {
        "layers": L,
        "relative_contribution": r,
        "alignment": [0.1] * L,
        "phase_point": phase_point,
        "intervals": {},
        "sublayers": None,
    }


def test_contribution_log_axis_labels_its_ticks_whole():
    fig = atlas_figures.contribution_figure(_atlas_dict([10.0, 3.0, 0.5, 0.2, 0.15, 0.1], 6))
    y = fig.layout.yaxis
    assert y.type == "log"
    # every tick written out with its decade (plotly's own labels read "2, 10, 5, 2, 1, 0.1")
    assert list(y.ticktext) == ["0.1", "0.2", "0.5", "1", "2", "5", "10"]
    np.testing.assert_allclose(y.tickvals, [0.1, 0.2, 0.5, 1, 2, 5, 10])
    wide = atlas_figures.contribution_figure(_atlas_dict([3000.0, 1.0, 0.01], 3)).layout.yaxis
    assert "10<sup>3</sup>" in wide.ticktext or "1,000" in wide.ticktext


def _fake_atlas(L: int, p: int, band: tuple[float, float]) -> SimpleNamespace:
    return SimpleNamespace(
        layers=L,
        phase_point=p,
        intervals={"phase_point": (np.float64(band[0]), np.float64(band[1]))},
        columns=lambda: {"phase_share": (L - p) / L},
    )


def test_a_phase_point_at_the_last_block_is_none_found():
    words = phase_words(_fake_atlas(30, 30, (28, 30)))
    assert words["value"] == "none found" and words["share"] == "none found"
    assert "after block 30" not in " ".join(words.values())
    assert "0%" not in " ".join(words.values())
    assert "no block is past a phase point" in words["help"]


def test_a_phase_point_inside_the_model_is_said_with_its_share():
    words = phase_words(_fake_atlas(30, 21, (19, 24)))
    assert words == {
        "value": "after block 21",
        "help": "95% interval: blocks 19–24; 9 of 30 blocks past it",
        "share": "30%",
    }


def test_the_bias_floor_note_sits_above_the_plot_area():
    from deffcore.figures import for_display, lag_decay

    L = 12
    rho = np.linspace(0.9, 0.3, L - 1)  # at N = 16, d = 64 the floor 0.8 lies above most of it
    fig = lag_decay(rho, n=16, d=64)
    (note,) = [a for a in fig.layout.annotations if "rough bound" in a.text]
    assert note.yref == "paper" and note.y >= 1 and note.yanchor == "bottom"
    before = fig.layout.margin.t or 0
    assert for_display(fig).layout.margin.t > before  # room made for its lines


def test_a_heatmap_keeps_its_colour_bar_beside_the_map():
    from deffcore.figures import similarity_heatmap

    fig = similarity_heatmap(np.eye(5))
    assert fig.layout.xaxis.constrain == "domain" and fig.layout.xaxis.constraintoward == "right"
    assert fig.layout.yaxis.constraintoward == "top"
    (bar,) = [t.colorbar for t in fig.data if t.type == "heatmap"]
    assert bar.x is None or bar.x >= 1  # the bar right of the plot area, which hugs it
