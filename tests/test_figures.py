"""Figures carry exactly the numbers they are given, and the references they draw are right."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from deffcore import figures
from deffcore.measures.depth import lag_profile


def _sym(L: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.2, 0.9, size=(L, L))
    S = (a + a.T) / 2
    np.fill_diagonal(S, 1.0)
    return S


def test_the_package_reexports_each_modules_public_names_from_their_one_home():
    """`deffcore.figures.X` is the object its module defines; each name is listed by the one
    module that defines it (a style imported from `base` is not exported again)."""
    import importlib
    import pkgutil

    homes: dict[str, str] = {}
    for info in pkgutil.iter_modules(figures.__path__):
        module = importlib.import_module(f"deffcore.figures.{info.name}")
        for name in module.__all__:
            assert name not in homes, f"{name} exported by {homes[name]} and {info.name}"
            homes[name] = info.name
            value = getattr(module, name)
            assert getattr(figures, name) is value
            if callable(value) and hasattr(value, "__module__"):
                assert value.__module__ == module.__name__, name
    assert sorted(homes) == figures.__all__ and "similarity_heatmap" in homes
    assert homes["LAYOUT"] == "base" and homes["gap_vs_n"] == "anytime"


def test_heatmap_holds_the_matrix_and_one_based_layers():
    S = _sym(5)
    fig = figures.similarity_heatmap(S, metric="cosine", pooling="top1_pc")
    (trace,) = fig.data
    assert trace.type == "heatmap"
    np.testing.assert_array_equal(np.asarray(trace.z), S)
    assert list(trace.x) == [1, 2, 3, 4, 5] == list(trace.y)
    assert "cosine" in fig.layout.title.text and "top1_pc" in fig.layout.title.text


def test_similarity_rows_are_the_rows_of_S():
    S = _sym(6)
    fig = figures.similarity_rows(S, [2, 5])
    assert [t.name for t in fig.data] == ["layer 2", "layer 5"]
    np.testing.assert_array_equal(np.asarray(fig.data[1].y), S[4])


def test_reference_lag_profile_hand_computed_L3():
    # S = [[1, 1/2, 1/3], [1/2, 1, 2/3], [1/3, 2/3, 1]]: rho(1) = (1/2 + 2/3)/2, rho(2) = 1/3.
    np.testing.assert_allclose(figures.reference_lag_profile(3), [7 / 12, 1 / 3])


@pytest.mark.parametrize("L", [2, 7, 30])
def test_reference_lag_profile_matches_engine_on_min_over_max(L):
    i = np.arange(1, L + 1)
    S = np.minimum.outer(i, i) / np.maximum.outer(i, i)
    np.testing.assert_allclose(figures.reference_lag_profile(L), lag_profile(S), rtol=1e-12)


def test_lag_decay_traces_and_iid_floor():
    rho = np.array([0.9, 0.8, 0.7])
    fig = figures.lag_decay(rho, n=100, d=25)
    measured, reference, floor = fig.data
    np.testing.assert_array_equal(np.asarray(measured.y), rho)
    assert list(measured.x) == [1, 2, 3]
    np.testing.assert_allclose(np.asarray(reference.y), figures.reference_lag_profile(4))
    np.testing.assert_allclose(np.asarray(floor.y), [0.2] * 3)  # 25 / (100 + 25)
    assert len(figures.lag_decay(rho).data) == 2  # no floor without n and d


def test_deff_vs_K_reference_is_2_over_L_plus_1():
    fig = figures.deff_vs_K({3: 0.5, 1: 0.9, 2: 0.7}, L=4)
    assert list(fig.data[0].x) == [1, 2, 3]
    assert list(fig.data[0].y) == [0.9, 0.7, 0.5]
    np.testing.assert_allclose(np.asarray(fig.data[1].y), [0.4] * 3)


def test_gap_bars_separates_paper_from_measurements_and_colours_by_regime():
    table = pd.DataFrame(
        {
            "label": ["Pythia-70M (paper)", "Gemma-3-12B (paper)", "mine", "cached one"],
            "family": ["Pythia", "Gemma-3", "SmolLM2", "SmolLM2"],
            "gap_pct": [28.2, -17.0, -3.0, 12.5],
            "source": ["paper", "paper", "this run", "cached"],
        }
    )
    fig = figures.gap_bars(table)
    by_name = {t.name: t for t in fig.data}
    assert set(by_name) == {"paper", "this run", "cached"}
    assert list(by_name["paper"].y) == ["Gemma-3-12B (paper)", "Pythia-70M (paper)"]
    assert list(by_name["this run"].x) == [-3.0]
    assert by_name["this run"].marker.color == (figures.COLOR_ABOVE,)
    assert by_name["cached"].marker.color == (figures.COLOR_SUB,)
    assert set(by_name["paper"].marker.color) == {figures.COLOR_PAPER}
    # grouped by family: each family's bars are contiguous in the category order
    order = list(fig.layout.yaxis.categoryarray)
    fam = dict(zip(table["label"], table["family"], strict=True))
    families = [fam[label] for label in order]
    assert families == sorted(families, key=families.index)


def test_controls_dotplot_one_trace_per_pooling():
    table = pd.DataFrame(
        {
            "label": ["a", "a", "b", "b"],
            "pooling": ["default", "top1_pc", "default", "top1_pc"],
            "gap_pct": [1.0, 2.0, 3.0, 4.0],
            "source": ["this run", "this run", "paper", "paper"],
        }
    )
    fig = figures.controls_dotplot(table)
    assert [t.name for t in fig.data] == ["default", "top1_pc"]
    assert list(fig.data[1].x) == [2.0, 4.0]


def test_pos0_ratio_names_the_peak_layer():
    fig = figures.pos0_ratio(np.array([1.0, 3.0, 18.4, 2.0]))
    assert "18.4× at layer 2" in fig.layout.title.text
    assert list(fig.data[0].x) == [0, 1, 2, 3]


def test_synthetic_sweep_iid_reference_matches_paper_anchor():
    # SPEC section 7: N = 10,000, d = 1024, L = 32 gives D_eff/L = 0.258 for iid states.
    table = pd.DataFrame({"construction": ["iid"], "L": [32], "deff_over_L": [0.26]})
    fig = figures.synthetic_sweep(table, n=10_000, d=1024)
    iid = fig.data[-1]
    assert iid.y[0] == pytest.approx(0.258, abs=5e-4)
    assert fig.data[-2].y[0] == pytest.approx(2 / 33)


def test_null_baseline_two_sigma_band():
    values = [0.10, 0.12, 0.14]
    fig = figures.null_baseline(0.07, values, label="trained")
    band = next(t for t in fig.data if t.name == "random mean ± 2σ")
    assert band.y[0] == pytest.approx(0.12)
    assert band.error_y.array[0] == pytest.approx(2 * 0.02)  # sample std (ddof=1) = 0.02
    assert next(t for t in fig.data if t.name == "trained").y[0] == 0.07


def test_matched_references_gaps():
    fig = figures.matched_references_bars(1.0, {"F_L": 2.0, "F_norm": 1.25})
    np.testing.assert_allclose(np.asarray(fig.data[0].customdata), [50.0, 20.0])


def test_figure_data_and_csv_round_trip_heatmap():
    S = _sym(3)
    fig = figures.similarity_heatmap(S)
    data = figures.figure_data(fig)
    assert len(data) == 9
    row = data[(data.x == 3) & (data.y == 1)].iloc[0]
    assert row.z == S[0, 2]
    back = pd.read_csv(io.StringIO(figures.figure_csv(fig)))
    np.testing.assert_allclose(back["z"].to_numpy().reshape(3, 3), S, rtol=1e-12)


def test_figure_data_scatter_and_html():
    fig = figures.lag_decay(np.array([0.9, 0.8]), n=10, d=10)
    data = figures.figure_data(fig)
    assert set(data["trace"]) == {t.name for t in fig.data}
    assert list(data[data.trace == "this run"]["y"]) == [0.9, 0.8]
    html = figures.figure_html(fig)
    assert "<html>" in html and "Plotly.newPlot" in html and "0.9" in html


def test_selectable_heatmap_has_a_click_target_per_cell_that_exports_skip():
    # plotly heatmaps emit no selection events: the invisible scatter is what a click picks
    S = _sym(4)
    fig = figures.similarity_heatmap(S, selectable=True)
    heat, target = fig.data
    assert heat.type == "heatmap" and target.type == "scatter"
    assert target.meta == figures.CLICK_TARGET
    cells = {
        (int(x), int(y)): c for x, y, c in zip(target.x, target.y, target.customdata, strict=True)
    }
    assert len(cells) == 16 and cells[(3, 1)] == S[0, 2]  # x = layer j, y = layer i
    assert len(figures.figure_data(fig)) == 16  # only the heatmap's cells


def test_deff_vs_K_marks_the_headline_K():
    fig = figures.deff_vs_K({1: 0.9, 2: 0.7, 3: 0.5}, L=4, K=2)
    (line,) = [s for s in fig.layout.shapes if s.type == "line" and s.x0 == 2]
    assert line.x1 == 2
    assert "K = 2" in fig.layout.annotations[0].text and "0.7000" in fig.layout.annotations[0].text


def test_controls_dotplot_draws_paper_values_open():
    table = pd.DataFrame(
        {
            "label": ["mine", "Pythia-70M (paper)"],
            "pooling": ["default", "default"],
            "gap_pct": [1.0, 28.2],
            "source": ["this run", "paper: Table S4"],
        }
    )
    (trace,) = figures.controls_dotplot(table).data
    assert list(trace.marker.symbol) == ["circle", "circle-open"]


def test_intervention_plot_shows_the_paper_before_any_run():
    from deffcore.labs.figures import intervention_plot

    paper = [
        {"model": "Gemma-3-4B", "intervention": "no_qk", "pooling": "default", "gap_pct": -60.2},
        {"model": "Gemma-3-4B", "intervention": "no_post", "pooling": "default", "gap_pct": 48.1},
    ]
    fig = intervention_plot([], paper)
    names = [t.name for t in fig.data]
    assert names == ["no post (Gemma-3-4B, paper)", "no QK (Gemma-3-4B, paper)"]
    assert list(fig.data[1].y) == [-60.2]


# ---------------------------------------------------------------------------------------------
# chart fixes: colour-blind-safe regimes also said in words, legends that match, fitted axes


def test_regime_colours_are_colour_blind_safe_and_said_in_words():
    assert figures.COLOR_SUB == "#D55E00"  # Okabe-Ito vermillion, not red
    assert figures.COLOR_ABOVE == "#56B4E9"  # Okabe-Ito sky blue, not green
    assert figures.regime_label(5.0).startswith("more redundant than orthogonal updates")
    assert figures.regime_label(-5.0).startswith("less redundant than orthogonal updates")


def test_gap_bars_legend_matches_the_bar_colours():
    # a cached bar in the "more redundant" regime used to show a legend swatch of another colour
    table = pd.DataFrame(
        {
            "label": ["p (paper)", "mine", "cached up", "cached down"],
            "family": ["A", "B", "B", "B"],
            "gap_pct": [28.2, -3.0, 12.5, -4.0],
            "source": ["paper", "this run", "cached", "cached"],
        }
    )
    fig = figures.gap_bars(table)
    by_name = {t.name: t for t in fig.data}
    assert not any(t.showlegend for t in fig.data)  # no swatch can disagree with its bars
    cached = by_name["cached"]
    colours = dict(zip(cached.y, cached.marker.color, strict=True))
    assert colours == {"cached up": figures.COLOR_SUB, "cached down": figures.COLOR_ABOVE}
    assert list(cached.text) == ["-4.0%", "+12.5%"]  # the regime in text as well as colour
    assert "more redundant" in cached.customdata[1][2]
    legend = fig.layout.annotations[0].text
    assert f"color:{figures.COLOR_SUB}'>■</span> gap > 0: more redundant" in legend
    assert f"color:{figures.COLOR_ABOVE}'>■</span> gap < 0: less redundant" in legend


def test_hovers_show_four_significant_digits():
    S = _sym(4)
    figs = [
        figures.similarity_heatmap(S),
        figures.lag_decay(lag_profile(S), n=10, d=5),
        figures.deff_vs_K({1: 0.5, 2: 0.4, 3: 0.3}, L=4),
        figures.synthetic_sweep(
            pd.DataFrame({"construction": ["independent states"], "L": [4], "deff_over_L": [0.5]}),
            n=10,
            d=5,
        ),
    ]
    for fig in figs:
        for trace in fig.data:
            template = trace.hovertemplate or ""
            assert ".6f" not in template and (".4g" in template or not template), template


def test_controls_dotplot_gives_each_pooling_its_own_shape():
    table = pd.DataFrame(
        {
            "label": ["a", "a"],
            "pooling": ["default", "token_normed"],
            "gap_pct": [1.0, 2.0],
            "source": ["this run", "paper"],
        }
    )
    fig = figures.controls_dotplot(table)
    assert list(fig.data[0].marker.symbol) == ["circle"]
    assert list(fig.data[1].marker.symbol) == ["diamond-open"]


def test_synthetic_sweep_overlays_samples_and_fits_a_log_axis():
    lines = pd.DataFrame(
        {
            "construction": ["orthogonal updates on h_0"] * 2,
            "L": [4, 24],
            "deff_over_L": [0.3, 0.06],
        }
    )
    sampled = lines.assign(deff_over_L=[0.29, 0.058])
    fig = figures.synthetic_sweep(lines, n=256, d=64, sampled=sampled)
    names = [t.name for t in fig.data]
    assert names[1] == "orthogonal updates on h_0, sampled" and names[-1].startswith(
        "iid reference"
    )
    assert list(fig.data[1].y) == [0.29, 0.058]
    assert fig.layout.yaxis.type == "log"
    low, high = fig.layout.yaxis.range
    assert 10**low < 0.058 < 1.0 < 10**high < 1.2


def test_story_figures_hold_the_closed_forms():
    from deffcore.measures import teaching

    res = teaching.story_step("finite_sample", teaching.Knobs(L=6))
    fig = figures.story_lag_profiles({"this step": (res.rho, "closed")}, L=6, bias=res.bias)
    np.testing.assert_allclose(np.asarray(fig.data[0].y), res.rho)
    np.testing.assert_allclose(np.asarray(fig.data[1].y), figures.reference_lag_profile(6))
    np.testing.assert_allclose(np.asarray(fig.data[2].y), [res.bias] * 5)
    bars = figures.story_depth_bars(
        {"this step": res.deff, "F_L itself": res.F_L}, F_L=res.F_L, L=6
    )
    (trace,) = bars.data
    assert list(trace.x) == [res.deff, res.F_L]
    labels = list(trace.y)
    assert labels[0].endswith("(more redundant)") and labels[1].endswith("(= F_L)")
    # the values are in the bars' labels, left of the plot: the dashed F_L line never crosses
    assert not bars.layout.annotations and f"F_L = {res.F_L:.3f}" in bars.layout.xaxis.title.text
    assert bars.layout.xaxis.range[1] < 6  # fitted to the values, not to L


def test_the_story_legend_sits_above_the_plot_two_names_a_row():
    """Step 6 draws four curves: their legend goes between the title and the plot (never over
    a curve), two names a row, the top margin grown for its rows; short names keep the value
    of b, and every curve's hover keeps its full name."""
    from deffcore.measures import teaching

    res = teaching.story_step("finite_sample", teaching.Knobs())
    curves, _ = teaching.story_curves(res)
    for size in (None, 20):
        fig = figures.story_lag_profiles(curves, L=res.knobs.L, bias=res.bias)
        if size:
            figures.projector(fig, size)
        before = [t.hovertemplate for t in fig.data]
        figures.legend_above(fig, short=True)
        legend = fig.layout.legend
        assert legend.y >= 1 and legend.yanchor == "bottom"  # outside the plotting area
        assert legend.orientation == "h" and legend.entrywidth == 0.5
        assert [t.name for t in fig.data] == [
            "this step", "N → ∞", "F_L (orthogonal updates)", "bias floor b = 0.2"
        ]  # fmt: skip
        assert [t.hovertemplate for t in fig.data] == before
        font = size or fig.layout.font.size
        title = 2.2 * (fig.layout.title.font.size or font + 4)
        assert fig.layout.margin.t >= title + 2 * 1.6 * font  # two rows of two names
    few = figures.legend_above(figures.story_lag_profiles(dict(list(curves.items())[:1]), L=24))
    assert few.layout.margin.t < fig.layout.margin.t  # one row
    assert few.data[1].name.startswith("orthogonal updates, S = min/max")  # not shortened


def test_pruning_plot_caps_exploded_perplexity_and_fits_the_axis():
    from deffcore.labs.figures import PPL_CAP_FACTOR, pruning_plot

    result = {
        "model": "m",
        "layers": 8,
        "ppl0": 20.0,
        "ppl": {"bi": {"0": 20.0, "1": 21.0, "2": 1e63}, "local_deff": {"0": 20.0, "1": 30.0}},
        "k_1.10": {"bi": 1, "local_deff": 0},
    }
    fig = pruning_plot(result)
    bi = fig.data[0]
    cap = PPL_CAP_FACTOR * 20.0
    assert list(bi.y) == [20.0, 21.0, cap]
    assert list(bi.customdata) == [20.0, 21.0, 1e63]  # the true value stays in the hover
    assert bi.text[2] == f"> {cap:.3g}" and bi.marker.symbol[2] == "triangle-up"
    low, high = fig.layout.yaxis.range
    assert 10**low < 20.0 and cap < 10**high < 10 * cap  # never up to 1e63
    assert "%{customdata:.4g}" in bi.hovertemplate


def test_models_depth_scatter_styles_each_family_and_source():
    """The depth scatter's markers: one colour and legend group per family, shape by source,
    open and thicker-edged for random weights; the published null carries its min-max range."""
    table = pd.DataFrame(
        [
            {"model": "A", "family": "Pythia", "source": "paper", "weights": "trained",
             "layers": 6, "deff_over_L": 0.3, "random_mean": 0.5, "random_low": 0.45,
             "random_high": 0.55},
            {"model": "B", "family": "Llama", "source": "cached", "weights": "random",
             "layers": 4, "deff_over_L": 0.6, "n": 64, "max_tokens": 32},
            {"model": "B2", "family": "Llama", "source": "cached", "weights": "trained",
             "layers": 4, "deff_over_L": 0.4, "n": 64, "max_tokens": 32},
            {"model": "X", "family": "unheard-of", "source": "cached", "weights": "trained",
             "layers": 8, "deff_over_L": 0.2},
        ]
    )  # fmt: skip
    fig = figures.models_depth_scatter(table)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name) == [
        "Llama (cached, random)",
        "Llama (cached, trained)",
        "Pythia (paper, trained)",
        "unheard-of (cached, trained)",
        "Pythia (paper, random null)",
        "1/L (D_eff = 1)",
    ]
    random, trained = by_name["Llama (cached, random)"], by_name["Llama (cached, trained)"]
    assert random.marker.color == trained.marker.color == figures.FAMILY_COLORS["Llama"]
    assert random.legendgroup == trained.legendgroup == "Llama"
    assert (random.marker.symbol, trained.marker.symbol) == ("circle-open", "circle")
    assert (random.marker.line.width, trained.marker.line.width) == (2, 1)
    assert random.marker.size == 10 and random.marker.line.color == "#333"
    assert "N = 64, 32 tokens" in random.text[0]
    paper = by_name["Pythia (paper, trained)"]
    assert (paper.marker.symbol, paper.marker.size) == ("diamond", 12)
    assert by_name["unheard-of (cached, trained)"].marker.color == figures.COLOR_PAPER
    null = by_name["Pythia (paper, random null)"]
    assert null.legendgroup == "Pythia" and null.marker.color == figures.FAMILY_COLORS["Pythia"]
    assert (null.marker.symbol, null.marker.size, null.marker.line.width) == ("diamond-open", 12, 2)
    assert list(null.error_y.array) == pytest.approx([0.05])
    assert list(null.error_y.arrayminus) == pytest.approx([0.05])
    assert null.text == ("A random-weight null (paper)",)


# ---------------------------------------------------------------------------------------------
# layout for a page: titles clear of the toolbars, log axes fitted to the data


def test_for_display_puts_every_title_below_the_toolbar_strip():
    from deffcore.figures.base import TITLE_LINE_PX, TOOLBAR_PX

    fig = figures.for_display(figures.lag_decay(np.array([0.9, 0.8, 0.7])))
    t = fig.layout.title
    assert (t.xref, t.x, t.xanchor) == ("container", 0, "left")  # the whole width
    # its top just under the toolbar strip, the plot below its lines
    assert (t.yref, t.yanchor) == ("container", "top")
    assert (1 - t.y) * fig.layout.height == pytest.approx(TOOLBAR_PX)
    assert fig.layout.margin.t >= TOOLBAR_PX + TITLE_LINE_PX
    # text above the plot (subplot titles, the gap bars' legend line) makes room for itself
    side = figures.for_display(
        figures.side_by_side_heatmaps(np.eye(3), np.eye(3), label_a="a", label_b="b")
    )
    assert side.layout.margin.t > fig.layout.margin.t
    long = figures.for_display(figures.pos0_ratio(np.array([1.0, 3.0, 168.0])))
    assert long.layout.title.text.count("<br>") == 1  # a long title on two lines, not cut
    assert long.layout.margin.t >= TOOLBAR_PX + 2 * TITLE_LINE_PX


@pytest.mark.parametrize(
    ("values", "include", "ticks"),
    [
        ([5.0, 180.0], (100.0,), [5, 10, 20, 50, 100, 200]),  # 1-2-5 steps on a narrow range
        ([0.03, 0.5], (), [0.02, 0.05, 0.1, 0.2, 0.5]),
        ([1.0, 1e12], (), None),  # wide: powers of ten, never "2, 0.1, 9, 8"
    ],
)
def test_log_axis_is_fitted_with_readable_ticks(values, include, ticks):
    axis = figures.log_axis(values, include=include)
    lo, hi = axis["range"]
    assert lo < np.log10(min(values)) and hi > np.log10(max([*values, *include]))
    assert hi - lo < np.log10(max(values) / min(values)) + 1  # fitted, not 1 .. 1e108
    if ticks is not None:
        assert axis["tickvals"] == pytest.approx(ticks)
    else:
        assert all(np.log10(t) == round(np.log10(t)) for t in axis["tickvals"])
        assert 3 <= len(axis["tickvals"]) <= 9 and axis["ticktext"][-1].startswith("10<sup>")


def test_massive_ratio_axis_fits_the_data_and_its_label_sits_at_its_line():
    fig = figures.massive_ratio_figure([3.0, 8.0, 250.0, 8000.0], [0, 1, 0, 0], [5, 5, 7, 7])
    lo, hi = fig.layout.yaxis.range
    assert lo < np.log10(3.0) and np.log10(8000.0) < hi < 5  # was 1 .. 1e108
    (label,) = [a for a in fig.layout.annotations if "massive" in a.text]
    assert label.y == pytest.approx(2.0)  # log10(100): on a log axis annotations are in log10


def test_projector_enlarges_every_text():
    fig = figures.projector(figures.story_depth_bars({"a": 1.5, "b": 2.5}, F_L=1.9, L=6), 22)
    assert fig.layout.font.size == 22 and fig.layout.legend.font.size == 22
    assert fig.layout.xaxis.tickfont.size == 20 and fig.layout.yaxis.title.font.size == 22
    assert all(a.font.size == 20 for a in fig.layout.annotations)


HOSTILE = "<a href='http://127.0.0.1:9/x'>run</a> & <b>bold</b>"


def test_plain_text_labels_escapes_user_text_in_names_categories_and_ticks_only():
    fig = figures.gap_bars(
        pd.DataFrame(
            {"label": [HOSTILE, "plain"], "family": ["x", "y"], "gap_pct": [5.0, -3.0],
             "source": ["cached", "cached"]}
        )
    )  # fmt: skip
    fig.update_layout(title_text="ours<br>second line", xaxis_ticktext=[HOSTILE])
    fig.data[0].name = HOSTILE
    shown = figures.plain_text_labels(fig)
    escaped = "&lt;a href='http://127.0.0.1:9/x'&gt;run&lt;/a&gt; &amp; &lt;b&gt;bold&lt;/b&gt;"
    assert shown.data[0].name == escaped
    assert escaped in list(shown.data[0].y) and "plain" in list(shown.data[0].y)
    assert list(shown.layout.xaxis.ticktext) == [escaped]
    assert "<a" not in str(shown.to_plotly_json()["data"])
    assert shown.layout.title.text == "ours<br>second line"  # our own markup stays
    # the figure as made is untouched: the CSV download carries the user's text as typed
    assert fig.data[0].name == HOSTILE
    csv = figures.figure_csv(fig)
    assert HOSTILE in (csv.decode() if isinstance(csv, bytes) else csv)


def test_side_by_side_titles_show_run_labels_as_text():
    S = _sym(4)
    fig = figures.side_by_side_heatmaps(S, S, label_a=HOSTILE, label_b="b")
    titles = [a.text for a in fig.layout.annotations]
    assert titles[0].startswith("A: &lt;a href=") and "<a" not in titles[0]


def test_plain_text_labels_never_escapes_twice():
    import plotly.graph_objects as go

    fig = go.Figure(go.Bar(x=[1], y=["R&D"], name="a &lt;b&gt;"))  # the second already escaped
    shown = figures.plain_text_labels(figures.plain_text_labels(fig))
    assert list(shown.data[0].y) == ["R&amp;D"] and shown.data[0].name == "a &lt;b&gt;"
