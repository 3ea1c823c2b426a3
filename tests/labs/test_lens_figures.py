"""Figures of the further lenses carry exactly the numbers they are given."""

from __future__ import annotations

import numpy as np
import pytest

from deffcore.labs import lens_figures


def test_gw_heatmaps_hold_both_matrices():
    S = np.array([[1.0, 0.8, 0.5], [0.8, 1.0, 0.7], [0.5, 0.7, 1.0]])
    G = np.array([[0.0, 0.1, 0.4], [0.1, 0.0, 0.2], [0.4, 0.2, 0.0]])
    gw = {"similarity": S.tolist(), "gw": G.tolist(), "metric": "cka", "gw_metric": "euclidean",
          "model": "m", "spearman_gw_cka": -1.0, "spearman_lag_gw": 0.5,
          "spearman_lag_cka": float("nan"), "n_gw": 64}  # fmt: skip
    fig = lens_figures.gw_heatmaps(gw)
    left, right = fig.data
    np.testing.assert_array_equal(np.asarray(left.z), S)
    np.testing.assert_array_equal(np.asarray(right.z), G)
    assert list(left.x) == [1, 2, 3]
    assert "ρ(GW, cka) = -1.00" in fig.layout.title.text and "—" in fig.layout.title.text


def _result():
    return {
        "x": "deff_over_L", "y": "score", "task": "MMLU", "n": 4, "pearson_r": -0.5,
        "pearson_p": 0.3, "spearman_rho": -0.4, "spearman_p": 0.6, "slope": 2.0,
        "intercept": 1.0,
        "points": [
            {"model": "a", "family": "F1", "x": 0.1, "y": 1.0},
            {"model": "b", "family": "F1", "x": 0.2, "y": 2.0},
            {"model": "c", "family": "F2", "x": 0.3, "y": 0.5},
            {"model": "d", "family": None, "x": 0.4, "y": 1.5},
        ],
    }  # fmt: skip


def test_correlation_scatter_points_labels_and_fit():
    fig = lens_figures.correlation_scatter(_result())
    traces = {t.name: t for t in fig.data}
    assert set(traces) == {"F1", "F2", "other", "least-squares fit"}
    assert list(traces["F1"].x) == [0.1, 0.2] and list(traces["F1"].text) == ["a", "b"]
    fit = traces["least-squares fit"]
    assert list(fit.x) == [0.1, 0.4]
    assert list(fit.y) == pytest.approx([2 * 0.1 + 1, 2 * 0.4 + 1])
    assert "n = 4" in fig.layout.title.text and "MMLU" in fig.layout.title.text


def test_pruning_bars_ours_beside_the_paper():
    rows = [
        {"model": "m", "source": "pruning", "f_110": 0.25, "k_110": 4, "layers": 16,
         "deff_over_L": 0.1},
        {"model": "OLMo-2-1B", "source": "Table S17", "f_110": 0.0, "k_110": 0, "layers": 16,
         "deff_over_L": 0.07},
    ]  # fmt: skip
    ours, paper = lens_figures.pruning_tolerance_bars(rows).data
    assert list(ours.y) == [0.25] and list(ours.text) == ["4/16"]
    assert list(paper.x) == ["OLMo-2-1B"] and paper.marker.pattern.shape == "/"


def test_pretrain_trajectories_one_line_per_run():
    records = [
        {"variant": v, "seed": s, "step": st, "tokens": st * 10, "gap_default": 40.0 + s + st}
        for v in ("none", "no_post") for s in (0, 1) for st in (0, 5)
    ]  # fmt: skip
    fig = lens_figures.pretrain_trajectories(records)
    assert len(fig.data) == 4 and list(fig.data[0].x) == [0, 50]
    assert fig.data[0].name == "no_post, seed 0" and list(fig.data[1].y) == [41.0, 46.0]


def test_user_text_reaches_plotly_as_text_not_html():
    result = _result()
    result["task"] = "<a href='http://x'>MMLU</a>"
    result["points"][0]["model"] = "<b>a</b>"
    result["points"][0]["family"] = "F<1>"
    fig = lens_figures.correlation_scatter(result)
    title = fig.layout.title.text
    assert "<a" not in title and "&lt;a href='http://x'&gt;" in title
    named = {t.name: t for t in fig.data}
    assert list(named["F&lt;1&gt;"].text) == ["&lt;b&gt;a&lt;/b&gt;"]


def test_crowded_points_get_different_label_spots():
    from deffcore.labs.lens_figures import _label_positions

    pts = [{"x": 0.036, "y": 0.031}, {"x": 0.0361, "y": 0.031}, {"x": 0.07, "y": 0.0}]
    where = _label_positions(pts)
    assert where[id(pts[0])] != where[id(pts[1])]  # two models on one spot: two spots
    assert where[id(pts[2])] == "top center"  # a point alone keeps the default
