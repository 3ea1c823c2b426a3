"""A run in a notebook (deffcore.views.notebook): its HTML summary and the explorer's figures, and
docs/quickstart.ipynb, executed as a user runs it (nbclient + ipykernel) and committed
without outputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import deffcore as dc
from deffcore.core.constants import POOLINGS
from deffcore.measures.depth import lag_profile
from deffcore.statistics.trust_rule import trust_badge
from deffcore.views.notebook import FIGURE_NAMES, heatmap_svg
from deffcore.views.run import Run

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = REPO / "docs" / "quickstart.ipynb"
HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run with a random-weight null, named by a hostile cache_id (it must never render)."""
    import os

    from deffcore.inputs.model import load_model

    old = os.environ.get("DEFF_CACHE_DIR")
    os.environ["DEFF_CACHE_DIR"] = str(tmp_path_factory.mktemp("nb_cache"))
    try:
        lm = load_model("tiny-llama")
        topics = ["rain", "markets", "music", "football", "trains", "films"] * 2
        texts = [f"{w.title()} was news again on day {i}." for i, w in enumerate(topics)]
        yield dc.measure(
            lm.model, lm.tokenizer, texts, max_tokens=32, random_seeds=(1, 2, 3), cache_id=HOSTILE
        )
    finally:
        if old is None:
            os.environ.pop("DEFF_CACHE_DIR")
        else:
            os.environ["DEFF_CACHE_DIR"] = old


def test_html_shows_headline_trust_and_heatmap_and_escapes_everything(run):
    page = run._repr_html_()
    s = run.summary()
    assert f"{s.deff:.3f}" in page and f"{s.gap_pct:+.1f}%" in page
    assert f"{s.deff_over_L:.4f}" in page
    t = run.trust()
    assert f"Trust: {t.badge}" in page
    # user text is escaped, never markup; nothing is fetched or run
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;img" in page
    assert not re.search(r"<script|<img|<iframe|https?://(?!www\.w3\.org/2000/svg)", page)
    assert page.count("<rect ") == run.layers**2


def test_heatmap_svg_colours_follow_the_values():
    S = np.array([[1.0, 0.0], [0.0, 1.0]])
    svg = heatmap_svg(S)
    colours = re.findall(r'fill="(rgb\([^)]*\))"', svg)
    assert colours == ["rgb(253, 231, 37)", "rgb(68, 1, 84)", "rgb(68, 1, 84)", "rgb(253, 231, 37)"]
    assert "layer 1 vs 2: 0</title>" in svg


def test_trust_is_the_badge_of_the_headline(run):
    unbiased = run.summary("default", "unbiased_cka").deff_over_L
    band = run.random_band()
    # the notebook repr pairs the run's BOS answer (SPEC 11.6), and the trust reads the spread
    # of that paired bootstrap once the run holds one
    pb = run.paired_latest()
    res = pb.result("default", "cka") if pb is not None and pb.has("default", "cka") else None
    want = trust_badge(
        run.n,
        run.d_model,
        metric="cka",
        value=run.summary().deff_over_L,
        unbiased_value=unbiased,
        null_band=(band["low"], band["high"]),
        null_seeds=3,
        layers=run.layers,  # the regime is part of the claim
        ci=None if res is None else (res.low, res.high),
        bootstrap_mean=None if res is None else res.mean,
    )
    assert run.trust() == want
    assert run.trust(metric="cosine") == Run.from_measurement(run).trust("default", "cosine")


def test_figures_draw_this_runs_numbers(run):
    heat = run.figure("heatmap", pooling="token_normed")
    np.testing.assert_array_equal(np.asarray(heat.data[0].z), run.similarity("token_normed"))
    lag = run.figure("lag")
    np.testing.assert_allclose(lag.data[0].y, lag_profile(run.similarity()))
    assert any("d/(N+d)" in (t.name or "") for t in lag.data)  # linear CKA: the floor is drawn
    assert not any("d/(N+d)" in (t.name or "") for t in run.figure("lag", metric="cosine").data)
    gap = run.figure("gap")
    bars = {(t.name, y): x for t in gap.data for x, y in zip(t.x, t.y, strict=True)}
    mine = [x for (src, y), x in bars.items() if src == "this run"]
    assert mine == [pytest.approx(run.summary().gap_pct)]
    assert sum(src == "cached" for src, _ in bars) == 3  # the random-weight seeds
    assert any(src == "paper" for src, _ in bars)
    assert not any(t.name == "paper" for t in run.figure("gap", paper=False).data)
    controls = run.figure("controls", K=2)
    got = {t.name: t.x[0] for t in controls.data}
    assert got == {p: pytest.approx(run.summary(p, K=2).gap_pct) for p in POOLINGS}
    assert heat.layout.meta["run"]["pooling"] == "token_normed"  # tagged for downloads


def test_a_control_undefined_for_the_run_is_named_on_the_figure():
    from deffcore.inputs.model import load_model

    lm = load_model("tiny-llama")
    alike = [f"The same start, then passage {i} about {w}." for i, w in enumerate("abcdefgh")]
    m = dc.measure(lm.model, lm.tokenizer, alike, max_tokens=64)  # position 1 is "T" in all
    fig = m.figure("controls")
    assert "first_non_bos" not in {t.name for t in fig.data} and len(fig.data) == 5
    assert "Undefined here: first_non_bos (Layer 0" in fig.layout.annotations[-1].text
    same = dc.measure(lm.model, lm.tokenizer, alike, max_tokens=24)  # truncated: all identical
    with pytest.raises(dc.DeffError, match="No pooling control is defined for this run"):
        same.figure("controls")


def test_unknown_figure_or_option_gets_one_sentence(run):
    with pytest.raises(dc.DeffError, match="choose one of heatmap, lag, gap, controls"):
        run.figure("histogram")
    with pytest.raises(dc.DeffError, match="pooling"):
        run.figure("heatmap", pooling="max")
    assert FIGURE_NAMES == ("heatmap", "lag", "gap", "controls")


def test_a_shared_snapshot_shows_and_plots_like_the_live_run(run):
    live = Run.from_measurement(run)._repr_html_()  # pairs the BOS answer; the snapshot carries it
    view = Run.from_snapshot(json.loads(json.dumps(Run.from_measurement(run).to_snapshot())))
    assert view._repr_html_() == live.replace("· measured", "· precomputed")
    for name in FIGURE_NAMES:
        a, b = view.figure(name), run.figure(name)
        assert [t.name for t in a.data] == [t.name for t in b.data], name


# ---------------------------------------------------------------------------------------------
# docs/quickstart.ipynb


def test_committed_quickstart_has_no_outputs():
    nb = json.loads(QUICKSTART.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code and all(c["outputs"] == [] and c["execution_count"] is None for c in code)
    assert set(nb["metadata"]) <= {"kernelspec", "language_info"}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_quickstart_notebook_executes(tmp_path, monkeypatch):
    """Every cell runs in a fresh kernel (the repository on its path, as an install would be);
    the run shows its summary and the states measured by hand agree with `measure`."""
    import nbclient
    import nbformat

    monkeypatch.setenv("PYTHONPATH", str(REPO))  # the kernel imports this checkout's deffcore
    nb = nbformat.read(QUICKSTART, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any('class="deffcore-run"' in h and "Trust:" in h for h in html)
    figures = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) >= 4
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    found = dict(re.findall(r"(measure|measure_states):\s+D_eff = ([0-9.]+)", text))
    assert found["measure"] == found["measure_states"]


def test_a_deep_run_is_a_bounded_page_of_block_means():
    """L = 512 (a 1.1 MiB snapshot) once rendered 27 MiB of HTML: beyond MAX_CELLS layers a
    cell is the mean of a block of layers, so the page stays small and still reads true."""
    from deffcore.views.notebook import MAX_CELLS

    L = 512
    blocks = np.repeat(np.arange(4), L // 4)  # four blocks of 128 layers, 0.5 across blocks
    S = np.where(blocks[:, None] == blocks[None, :], 1.0, 0.5)
    S[np.arange(L), np.arange(L)] = 1.0
    svg = heatmap_svg(S)
    assert svg.count("<rect ") == MAX_CELLS**2 and len(svg) < 1_000_000
    assert "layer 1-8 vs 1-8: 1</title>" in svg and "layer 1-8 vs 505-512: 0.5</title>" in svg
    # a cell is its block's mean (naive), not one sampled layer: S(i, j) = 1 - |i - j| / L
    idx = np.arange(L)
    smooth = 1.0 - np.abs(idx[:, None] - idx[None, :]) / L
    want = smooth[:8, :8].mean()  # layers 1-8 against themselves: below 1 off the diagonal
    assert f"layer 1-8 vs 1-8: {want:.4g}</title>" in heatmap_svg(smooth) and want < 0.995
    small = heatmap_svg(S[:MAX_CELLS, :MAX_CELLS])  # up to MAX_CELLS: one cell per layer
    assert small.count("<rect ") == MAX_CELLS**2 and "layer 64 vs 64: 1</title>" in small
