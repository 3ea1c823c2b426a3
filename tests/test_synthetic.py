"""Synthetic constructions against the finite-sample iid formula and the paper's anchors."""

from __future__ import annotations

import numpy as np
import pytest
from apptest_helpers import plotly_array

import deffcore as dc
from deffcore.core.errors import DeffError
from deffcore.measures.references import iid_reference_depth, update_depth
from deffcore.measures.synthetic import independent_states, orthogonal_states, orthogonal_updates


def test_independent_states_scaled_anchor() -> None:
    """Same d/N as the paper's anchor (N=10,000, d=1024, L=32: 0.258, rho1 0.093)."""
    n, d, L = 1000, 102, 32
    syn = independent_states(n, d, L, seed=0)
    assert syn.states.shape == (L, n, d) and syn.states.dtype == np.float32
    assert syn.updates is None and syn.h0 is None
    summary = dc.depth_summary(dc.similarity_matrix(syn.states))
    assert summary.deff_over_L == pytest.approx(iid_reference_depth(n, d, L) / L, abs=0.003)
    assert summary.rho1 == pytest.approx(dc.cka_finite_sample_bias(n, d), abs=0.002)
    assert round(summary.deff_over_L, 2) == 0.26 and round(summary.rho1, 2) == 0.09


def test_seeding() -> None:
    a = orthogonal_updates(20, 3, 4, seed=5)
    b = orthogonal_updates(20, 3, 4, seed=5)
    c = orthogonal_updates(20, 3, 4, seed=6)
    np.testing.assert_array_equal(a.states, b.states)
    assert not np.array_equal(a.states, c.states)
    np.testing.assert_array_equal(
        independent_states(9, 2, 3).states, independent_states(9, 2, 3).states
    )


def test_orthogonal_states_give_full_depth() -> None:
    syn = orthogonal_states(300, 40, 12, seed=0)
    s = dc.similarity_matrix(syn.states)
    off = s[~np.eye(12, dtype=bool)]
    np.testing.assert_allclose(off, 0.0, atol=1e-6)
    assert dc.effective_depth(s) / 12 == pytest.approx(1.0, abs=1e-4)


def test_orthogonal_updates_construction_and_trend() -> None:
    n, d, L = 400, 41, 12
    syn = orthogonal_updates(n, d, L, scale=0.5, seed=0)
    np.testing.assert_allclose(np.diff(syn.states_with_h0(), axis=0), syn.updates, atol=0)
    # the updates are independent states: their depth is the iid reference
    ud = update_depth(syn.states_with_h0())
    iid = independent_states(n, d, L, seed=1)
    iid_deff = dc.effective_depth(dc.similarity_matrix(iid.states)) / L
    assert ud.deff_upd_over_L == pytest.approx(iid_deff, abs=0.01)
    assert ud.deff_upd_over_L == pytest.approx(iid_reference_depth(n, d, L) / L, abs=0.01)
    # accumulated states: small and increasing with scale (Table S2 trend), 1/L at scale -> 0
    values = []
    for scale in (0.01, 0.1, 0.3, 1.0):
        states = orthogonal_updates(n, d, L, scale=scale, seed=0).states
        values.append(dc.effective_depth(dc.similarity_matrix(states)) / L)
    assert values == sorted(values)
    assert values[0] == pytest.approx(1 / L, rel=0.01)
    assert values[-1] < dc.reference_depth(L) / L


def test_bad_construction_arguments() -> None:
    with pytest.raises(DeffError, match="at least 2 layers"):
        independent_states(10, 3, 1)
    with pytest.raises(DeffError, match="positive"):
        orthogonal_updates(10, 3, 4, scale=0.0)
    with pytest.raises(DeffError, match="n > layers"):
        orthogonal_states(5, 3, 8)
    with pytest.raises(DeffError, match="no initial state"):
        independent_states(10, 3, 2).states_with_h0()


@pytest.mark.parametrize("build", [independent_states, orthogonal_states, orthogonal_updates])
def test_construction_sizes_and_seeds_are_checked_before_allocating(build, monkeypatch) -> None:
    """A float, a string, a size beyond memory or a negative seed is one sentence, before any
    array is drawn (never a TypeError, MemoryError or numpy's ValueError); numpy integers work."""
    monkeypatch.setenv("DEFF_HOST_MEMORY_GIB", "1")
    for bad in ({"n": 8.0}, {"d": "4"}, {"layers": 2.5}, {"seed": -1}, {"seed": 1.5}):
        with pytest.raises(DeffError, match=next(iter(bad))):
            build(**{"n": 8, "d": 4, "layers": 3, "seed": 0, **bad})
    for huge in ({"n": 10**12}, {"d": 10**12}, {"n": 10**5, "d": 10**5}):
        with pytest.raises(DeffError, match=r"memory|passages"):
            build(**{"n": 8, "d": 4, "layers": 3, **huge})
    states = build(np.int64(8), np.int64(4), np.int64(3), seed=np.int64(0)).states
    assert np.array_equal(states, build(8, 4, 3, seed=0).states)


def test_orthogonal_updates_refuses_a_scale_that_is_not_a_number() -> None:
    with pytest.raises(DeffError, match="scale"):
        orthogonal_updates(8, 4, 3, scale="1")


# ---------------------------------------------------------------------------------------------
# The Synthetic lab page (AppTest): every story step and preset renders, extremes stay safe


def _lab(cache_dir):
    import json
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(Path(__file__).resolve().parents[1] / "app.py"), default_timeout=120)
    at.run()
    at.switch_page("pages/5_Synthetic_lab.py")
    at.run()

    def charts():
        return {
            json.loads(el.proto.spec)["layout"]["title"]["text"]: json.loads(el.proto.spec)
            for el in at.get("plotly_chart")
        }

    return at, charts


def _clean(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


def _metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


@pytest.fixture
def lab(cache_dir, monkeypatch):
    monkeypatch.setenv("DEFF_CACHE_DIR", str(cache_dir))
    return _lab(cache_dir)


def test_lab_story_steps_show_the_closed_forms(lab):
    from deffcore.measures import teaching

    at, charts = lab
    _clean(at)
    assert any("in linear CKA" in c.value for c in at.caption)
    for step in teaching.STEP_KEYS:
        at.selectbox(key="syn_step").set_value(step)
        at.run()
        _clean(at)
        res = teaching.story_step(step, teaching.Knobs())
        assert _metric(at, "D_eff") == f"{res.deff:.3f}"
        assert _metric(at, "F_L = 2L/(L+1)") == f"{res.F_L:.3f}"
        shown = charts()
        heat = next(v for k, v in shown.items() if k.startswith("S(i, j), closed form"))
        np.testing.assert_allclose(plotly_array(heat["data"][0]["z"]), res.S)
        assert any(k.startswith("Lag profile") for k in shown)
        assert any(k.startswith("Effective depth beside F_L") for k in shown)
        # the bias note belongs to step 6 (or to samples) only
        noted = any("Why a sampled curve can sit below F_L" in c.value for c in at.caption)
        assert noted == (step == "finite_sample"), step
    # projector layout: the same three charts, larger text
    at.toggle(key="syn_projector").set_value(True)
    at.run()
    _clean(at)
    story = {k: v for k, v in charts().items() if not k.startswith(("Synthetic", "Updates"))}
    assert len(story) == 3
    # PROJECTOR_FONT_PX: 20 px keeps the chart and its lesson above the fold at 1280 x 720
    assert all(v["layout"]["font"]["size"] == 20 for v in story.values())
    # the last step explains the bias and draws its floor
    lag = next(v for k, v in charts().items() if k.startswith("Lag profile"))
    (floor,) = [t for t in lag["data"] if t["name"].startswith("bias floor b = 0.2")]
    np.testing.assert_allclose(plotly_array(floor["y"]), 64 / (256 + 64))  # b = d/(N+d)
    assert any("Why a sampled curve can sit below F_L" in c.value for c in at.caption)


def test_lab_presets_and_sampling_on_request(lab):
    from deffcore.measures import teaching

    at, charts = lab
    for name, (step, knobs) in teaching.PRESETS.items():
        at.selectbox(key="syn_preset").set_value(name)
        at.run()
        _clean(at)
        assert at.selectbox(key="syn_step").value == step
        assert at.slider(key="syn_t_L").value == knobs.L
        assert _metric(at, "D_eff") == f"{teaching.story_step(step, knobs).deff:.3f}"
    # extreme preset (N = 16, d = 512, L = 48): a note, no error; sampling is refused politely
    at.selectbox(key="syn_preset").set_value("Extreme: N = 16, d = 512, L = 48")
    at.run()
    assert any("not much larger" in i.value for i in at.info)
    at.button(key="syn_sample").click()
    at.run()
    _clean(at)  # 48 * 16 * 512 fits the budget: sampled
    lag = next(v for k, v in charts().items() if k.startswith("Lag profile"))
    assert {"sampled, linear CKA", "sampled, unbiased CKA"} <= {t["name"] for t in lag["data"]}
    # a size beyond the budget is refused in words, never an error
    at.slider(key="syn_t_L").set_value(64)
    at.select_slider(key="syn_t_n").set_value(100_000)
    at.select_slider(key="syn_t_d").set_value(1024)
    at.button(key="syn_sample").click()
    at.run()
    _clean(at)
    assert any("classroom budget" in i.value for i in at.info)


def test_lab_sweep_extremes_are_notes_not_errors(lab):
    at, charts = lab
    at.select_slider(key="syn_n").set_value(16)
    at.slider(key="syn_L").set_value(48)
    at.run()
    _clean(at)
    assert _metric(at, "orthogonal states: D_eff/L at L = 48") == "needs N > L"
    assert any("Orthogonal states need N > L" in i.value for i in at.info)
    at.button(key="syn_sweep_sample").click()
    at.run()
    _clean(at)
    sweep = next(v for k, v in charts().items() if k.startswith("Synthetic constructions"))
    names = {t["name"] for t in sweep["data"]}
    assert "independent states, sampled" in names and "orthogonal states, sampled" in names
    # a slider move drops the samples (they belong to the settings they were drawn for)
    at.slider(key="syn_L").set_value(47)
    at.run()
    sweep = next(v for k, v in charts().items() if k.startswith("Synthetic constructions"))
    assert not any(t["name"].endswith("sampled") for t in sweep["data"])
    # too large to sample: a note
    at.select_slider(key="syn_n").set_value(2048)
    at.select_slider(key="syn_d").set_value(512)
    at.button(key="syn_sweep_sample").click()
    at.run()
    _clean(at)
    assert any("classroom budget" in i.value for i in at.info)
    for table in at.dataframe:
        assert not any("_" in str(c) and str(c).islower() for c in table.value.columns)


# ---------------------------------------------------------------------------------------------
# heavy-tailed constructions (the trust rule beyond Gaussian passages)


def test_heavy_tails_are_the_gaussian_construction_times_student_scales():
    from deffcore.measures import teaching
    from deffcore.measures.synthetic import heavy_tailed_states

    knobs = teaching.Knobs(L=5, h0=1.0, growth=1.1, rho=0.5)
    n, d, seed = 300, 4, 7
    gauss = teaching.sample_states("correlated", knobs, n, d, seed=seed)
    # the scales, drawn independently here: sqrt(3 / chi^2_3) from default_rng([seed, 1])
    s = np.sqrt(3.0 / np.random.default_rng([seed, 1]).chisquare(3.0, size=n))
    passage = heavy_tailed_states("correlated", knobs, n, d, "passage", seed=seed)
    np.testing.assert_allclose(passage, gauss * s[None, :, None], rtol=1e-5, atol=1e-4)
    rows = np.sqrt(3.0 / np.random.default_rng([seed, 1]).chisquare(3.0, size=(6, n)))
    multi = heavy_tailed_states("correlated", knobs, n, d, "multivariate_t", seed=seed)
    want = teaching.sample_states("correlated", knobs, n, d, seed=seed, scales=rows)
    np.testing.assert_array_equal(multi, want)
    # by hand: each innovation z_m scaled *before* the AR(1) mixing (scaling after it would
    # change the update correlations, E[s_m s_k] != E[s^2]), then sizes, sums and h_0
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((5, n, d), dtype=np.float32).astype(np.float64) * rows[1:, :, None]
    lags = np.abs(np.subtract.outer(np.arange(5), np.arange(5)))
    f = np.einsum("mk,knd->mnd", np.linalg.cholesky(0.5**lags), z)
    f *= np.sqrt(1.1 ** np.arange(5))[:, None, None]
    z0 = rng.standard_normal((n, d), dtype=np.float32).astype(np.float64) * rows[0][:, None]
    np.testing.assert_allclose(multi, np.cumsum(f, axis=0) + z0, rtol=1e-4, atol=1e-4)
    assert not np.allclose(multi, passage)
    # with unit scales the sampler is the Gaussian one exactly
    ones = teaching.sample_states("correlated", knobs, n, d, seed=seed, scales=np.ones((6, n)))
    np.testing.assert_array_equal(ones, gauss)


def test_student_scales_follow_the_inverse_chi_square_law():
    from scipy.stats import chi2, kstest

    from deffcore.measures.synthetic import student_scales

    s = student_scales((20_000,), 3.0, np.random.default_rng(0))
    assert kstest(3.0 / s**2, chi2(3).cdf).pvalue > 0.01  # 3 / s^2 ~ chi^2_3
    # E[s^2] = df / (df - 2) = 3: the median of s^2 is 3 / chi^2_3's median
    assert np.median(s**2) == pytest.approx(3.0 / chi2(3).median(), rel=0.03)


def test_heavy_tails_refuse_bad_options():
    from deffcore.measures import teaching
    from deffcore.measures.synthetic import heavy_tailed_states

    knobs = teaching.Knobs(L=4)
    with pytest.raises(DeffError, match="Unknown heavy tails"):
        heavy_tailed_states("h0", knobs, 10, 2, "cauchy")
    with pytest.raises(DeffError, match="df > 2"):
        heavy_tailed_states("h0", knobs, 10, 2, "passage", df=2.0)
    with pytest.raises(DeffError, match="scales must be"):
        teaching.sample_states("h0", knobs, 10, 2, scales=np.ones((4, 10)))


# ---------------------------------------------------------------------------------------------
# The story on a projector: step names, the sliders beside or above the chart, the link


def _legend_clear_of_the_plot(fig: dict) -> bool:
    """The legend sits outside the plotting area (above or below it), so no curve is under
    it: Plotly's legend y is in the plot's own coordinates, 0..1 being the plotting area."""
    legend = fig["layout"].get("legend", {})
    y, anchor = legend.get("y", 1.0), legend.get("yanchor", "auto")
    return (y >= 1 and anchor == "bottom") or (y <= 0 and anchor == "top")


KNOB_KEYS = ("syn_t_L", "syn_t_h0", "syn_t_growth", "syn_t_rho", "syn_t_n", "syn_t_d")


def _rows(at) -> list[list[str]]:
    """The story's rows, top to bottom (the children of its keyed container), each as the
    names of what it holds: sliders by key, charts by title, metrics by label, "text"."""
    import json

    def story(node):
        if getattr(node, "type", "") == "flex_container" and getattr(node, "key", None) in (
            "syn_story_view",
            "syn_projector_view",
        ):
            return node
        return next(filter(None, map(story, getattr(node, "children", {}).values())), None)

    def leaves(node):
        kids = getattr(node, "children", None)
        if kids:
            for kid in kids.values():
                yield from leaves(kid)
        elif node.type in ("slider", "select_slider"):
            yield f"slider {node.key}"
        elif node.type == "plotly_chart":
            yield "chart " + json.loads(node.proto.spec)["layout"]["title"]["text"]
        elif node.type == "metric":
            yield f"metric {node.label}"
        elif node.type == "markdown":
            yield "text"

    block = story(at._tree[0])
    return [list(leaves(row)) for row in block.children.values()]


@pytest.mark.parametrize("projector", [False, True], ids=["normal", "projector"])
def test_the_story_names_every_step_and_draws_its_sliders_with_the_chart(lab, projector):
    from deffcore.measures import teaching

    at, charts = lab
    if projector:
        at.toggle(key="syn_projector").set_value(True).run()
    _clean(at)
    box = at.selectbox(key="syn_step")  # one compact control, its options by their names
    assert box.options == [teaching.STEPS[s][0] for s in teaching.STEP_KEYS]
    for step in teaching.STEP_KEYS:
        at.selectbox(key="syn_step").set_value(step).run()
        _clean(at)
        assert at.selectbox(key="syn_step").value == step
        rows = _rows(at)
        where = {name: i for i, row in enumerate(rows) for name in row}
        lag = next(i for i, row in enumerate(rows) if any("chart Lag profile" in n for n in row))
        sliders = {where[f"slider {key}"] for key in KNOB_KEYS}
        assert len(sliders) == 1, rows  # the six sliders together
        (knobs,) = sliders
        assert all(f"metric {m}" in rows[lag] for m in ("D_eff", "D_eff / L")), rows
        if projector:  # the sliders right above the lesson and the chart
            assert knobs < lag and all(r == ["text"] for r in rows[knobs + 1 : lag]), rows
        else:  # the sliders beside the chart
            assert knobs == lag, rows
        fig = next(v for k, v in charts().items() if k.startswith("Lag profile"))
        assert _legend_clear_of_the_plot(fig), (step, fig["layout"]["legend"])
    # step 6 draws the most curves: every one named in the legend, above the plot
    names = [t["name"] for t in fig["data"] if t.get("showlegend", True)]
    assert len(names) == 4 and any(n.startswith("bias floor") for n in names)


def test_the_link_keeps_the_step_and_the_layout(cache_dir, monkeypatch):
    """A reload (a new session on the same address) opens the same step and layout; a link
    to a step that does not exist says so in one sentence and opens step 1."""
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    from deffcore.measures import teaching

    monkeypatch.setenv("DEFF_CACHE_DIR", str(cache_dir))
    page = str(Path(__file__).resolve().parents[1] / "pages" / "5_Synthetic_lab.py")
    at = AppTest.from_file(page, default_timeout=120).run()
    _clean(at)
    assert at.query_params["step"] == "1" and "layout" not in at.query_params
    at.selectbox(key="syn_step").set_value("correlated").run()
    at.toggle(key="syn_projector").set_value(True).run()
    assert at.query_params["step"] == "5" and at.query_params["layout"] == "projector"
    again = AppTest.from_file(page, default_timeout=120)  # the reload: the same address
    again.query_params.update({"step": "5", "layout": "projector"})
    again.run()
    _clean(again)
    assert again.selectbox(key="syn_step").value == "correlated"
    assert again.toggle(key="syn_projector").value is True
    assert any(teaching.LESSONS["correlated"] in m.value for m in again.markdown)
    again.toggle(key="syn_projector").set_value(False).run()
    assert "layout" not in again.query_params and again.query_params["step"] == "5"
    wrong = AppTest.from_file(page, default_timeout=120)
    wrong.query_params["step"] = "9"
    wrong.run()
    _clean(wrong)
    assert wrong.selectbox(key="syn_step").value == "independent"
    assert [i.value for i in wrong.info if "no step '9'" in i.value]


def test_a_link_names_a_step_by_number_or_key():
    from deffcore.core.errors import DeffError
    from deffcore.measures import teaching

    assert teaching.step_for("6") == teaching.step_for(" finite_sample ") == "finite_sample"
    assert [teaching.step_number(s) for s in teaching.STEP_KEYS] == [1, 2, 3, 4, 5, 6]
    for bad in ("0", "7", "-1", "h_0", ""):
        with pytest.raises(DeffError, match="give its number, 1 to 6"):
            teaching.step_for(bad)


@pytest.mark.parametrize("build", [independent_states, orthogonal_states, orthogonal_updates])
def test_a_construction_beyond_memory_is_one_sentence_before_allocating(build, monkeypatch):
    from deffcore.core.errors import OutOfMemoryError

    monkeypatch.setenv("DEFF_HOST_MEMORY_GIB", "1")
    # 4 copies x 4 bytes x 8 x 1000 x 10^4 = 1.19 GiB > 1 GiB: refused, nothing allocated
    with pytest.raises(OutOfMemoryError, match=r"need 1\.2 GiB of memory.*\(1\.0 GiB\)"):
        build(1000, 10_000, 8)
    with pytest.raises(DeffError, match=r"at most 1,000 layers \(.*\), got layers=1,001\."):
        build(4, 1, 1001)
