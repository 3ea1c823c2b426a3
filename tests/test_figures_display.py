"""Figures as a page draws them: colours Streamlit's theme would swap, the gap
legend naming only what is drawn, one dash per compared run."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
from streamlit.testing.v1 import AppTest

from deffcore import figures
from deffcore.labs import lens_figures

PLACEHOLDER = "#000004"  # Magma's darkest stop, and Streamlit's CATEGORY_3 placeholder


def _gw_result(L: int = 4) -> dict:
    i, j = np.indices((L, L))
    return {"similarity": np.eye(L).tolist(), "gw": (np.abs(i - j) / 100).tolist(),
            "metric": "cka", "gw_metric": "euclidean", "model": "m", "n_gw": 8,
            "spearman_gw_cka": 0.1, "spearman_lag_gw": 0.2, "spearman_lag_cka": 0.3}  # fmt: skip


def _luminance(color: str) -> float:
    if color.startswith("#"):
        r, g, b = (int(color[k : k + 2], 16) for k in (1, 3, 5))
    else:
        r, g, b = (int(x) for x in color[color.index("(") + 1 : -1].split(","))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _shown_spec(fig) -> dict:
    def draw(f):
        from explorer.cards import show_figure

        show_figure(f, "x", {"view": "test"})

    at = AppTest.from_function(draw, args=(fig,)).run()
    assert not at.exception
    return json.loads(at.get("plotly_chart")[0].proto.spec)


def test_no_colour_reaches_the_page_that_the_chart_theme_would_swap():
    """The GW heatmap's scale as the page sends it: no "#0000NN" placeholder, and its
    luminance falls from 0 (pale) to the largest distance (black), whichever way it is set."""
    spec = _shown_spec(lens_figures.gw_heatmaps(_gw_result()))
    assert PLACEHOLDER not in json.dumps(spec).lower()
    trace = spec["data"][1]
    stops = [c for _, c in trace["colorscale"]]
    if trace.get("reversescale"):
        stops = stops[::-1]
    lum = [_luminance(c) for c in stops]
    assert all(a > b for a, b in itertools.pairwise(lum)), lum


def test_theme_safe_colors_keeps_every_other_colour_and_the_figure_itself():
    import plotly.io as pio
    import streamlit  # noqa: F401  (its template, all placeholders, becomes the default)

    assert "streamlit" in pio.templates.default
    fig = figures.similarity_heatmap(np.eye(3))
    assert figures.theme_safe_colors(fig) is fig  # nothing to change (the template is the theme's)
    marked = figures.similarity_heatmap(np.eye(3)).update_traces(
        colorscale=[[0, "#000004"], [0.5, "#000040"], [1, "#000041"]]
    )
    safe = figures.theme_safe_colors(marked)
    assert [c for _, c in safe.data[0].colorscale] == ["rgb(0, 0, 4)", "rgb(0, 0, 64)", "#000041"]
    assert marked.data[0].colorscale[0][1] == "#000004"  # the input is left alone


def _gaps(sources: list[str]) -> pd.DataFrame:
    labels = [f"r{i}" for i in range(len(sources))]
    gaps = np.linspace(-5, 5, len(sources))
    return pd.DataFrame({"label": labels, "family": "x", "gap_pct": gaps, "source": sources})


def _legend(fig) -> str:
    return next(a.text for a in fig.layout.annotations if "gap > 0" in a.text)


def test_the_gap_legend_names_only_what_is_drawn():
    only_runs = _legend(figures.gap_bars(_gaps(["cached", "precomputed"])))
    assert "paper (published)" not in only_runs and "black outline" not in only_runs
    assert "more redundant" in only_runs
    everything = _legend(figures.gap_bars(_gaps(["this run", "paper", "cached"])))
    assert "paper (published)" in everything and "black outline: this run" in everything
    paper_only = _legend(figures.gap_bars(_gaps(["cached", "paper"])))
    assert "paper (published)" in paper_only and "black outline" not in paper_only


def test_each_compared_run_has_its_own_dash():
    fig = figures.compare_lag_profiles({f"run {i}": np.linspace(0.9, 0.1, 5) for i in range(4)})
    dashes = [t.line.dash for t in fig.data]
    assert len(set(dashes)) == 4, dashes
    styles = [tuple(figures.run_style(i).values()) for i in range(28)]
    assert len(set(styles)) == 28
