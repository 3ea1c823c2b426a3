"""End-to-end checks of the page fixes in Debian's Chromium against `streamlit run app.py`.

The server (its own free port, an empty temporary cache) opens the generated stand-in for the
shipped default (tests/shipped_helpers.py: tiny-llama windows made by the CLI with its null
band, bootstrap, diagnostics and BOS on/off) as the current run (`deffcore app --run`'s
DEFF_APP_RUN), beside one small measured tiny-llama run for the lab pages. Checked as a
person sees it, with screenshots under test-artifacts/round4/ (gitignored):

- the projector layout at 1400 x 900 and 1280 x 720, every story step: the step's name, its
  six sliders, its chart (its axis title and legend included, the legend off the plot), its
  one-sentence lesson and its four numbers inside the window, the numbers beside the chart,
  every text of the step at projector size, the step and the layout kept by a reload;
- the normal story at 1280 x 720, every step: its name, the sliders and the chart together,
  the chart's first number beside it, the step kept by a reload;
- the BOS page complete at first visit (diagnostics and BOS on/off from the run's file, nothing
  to compute), a figure download there named by the run;
- the Overview's run as one HTML file: named by the run, opened with the network cut off, every
  figure drawn;
- the GW heatmap's colour bar drawn darker for larger distances;
- compared lag lines one dash each, and a gap legend naming only what is drawn.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser_helpers import ERRORS, chromium_browser, require_browser, streamlit_server
from test_browser import wait_idle

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "test-artifacts" / "round4"
SIZES = ({"width": 1400, "height": 900}, {"width": 1280, "height": 720})
#: Smallest font (CSS px) of any text of the projector's step; plotly's tick labels included.
PROJECTOR_MIN_PX = 18
LAB_RUN = ["--model", "tiny-llama", "--n", "32", "--max-tokens", "32"]


def _cli(env: dict, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "deffcore", *args], cwd=REPO, env=env, capture_output=True,
        text=True, timeout=900, check=True,
    )  # fmt: skip
    return done.stdout


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_browser()
    from shipped_helpers import measure_args

    folder = tmp_path_factory.mktemp("round4")
    cache, snap = folder / "cache", folder / "shipped.json"
    env = {**os.environ, "DEFF_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    made = {**env, "DEFF_CACHE_DIR": str(folder / "elsewhere")}  # the sender's machine:
    _cli(made, *measure_args(snap))  # the server has the file only, not its runs
    lab = json.loads(_cli(env, "measure", *LAB_RUN, "--json", "--no-progress"))
    code = (
        "import sys; from deffcore.views.sharing import share_file as f; "
        "print(f(sys.argv[1]).sha256)"
    )
    kept = subprocess.run([sys.executable, "-c", code, str(snap)], cwd=REPO, env=env,
                          capture_output=True, text=True, check=True)  # fmt: skip
    shared = kept.stdout.strip()[:16]  # the content id `deffcore app --run` names
    server_env = {**env, "DEFF_APP_RUN": shared}
    with streamlit_server(server_env, SHOTS / "streamlit_server.log") as url:
        yield {"url": url, "lab_key": lab["key"], "data": json.loads(snap.read_text())}


@pytest.fixture(scope="module")
def browser(server):
    with chromium_browser() as b:
        yield b


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport=SIZES[0], accept_downloads=True)
    pg = context.new_page()
    pg.set_default_timeout(120_000)
    yield pg
    context.close()


def go(page, url: str, nav: str | None = None) -> None:
    page.goto(url)
    wait_idle(page)
    if nav:  # a listed page by its link at the top, a lab by the Labs page's picker
        links = page.locator('[data-testid="stTopNav"] [data-testid="stTopNavLink"]')
        if not links.filter(has_text=nav).count():
            links.filter(has_text="Labs").first.click()
            wait_idle(page)
            links = page.locator('[data-testid="stMain"] [data-testid="stPageLink"] a')
        links.filter(has_text=nav).first.click()
        wait_idle(page, settle_ms=1000)
    assert page.locator(ERRORS).count() == 0, page.locator(ERRORS).all_inner_texts()


def box(locator) -> dict:
    b = locator.bounding_box()
    assert b is not None, "not drawn"
    return b


# ---------------------------------------------------------------------------------------------
# the projector
# ---------------------------------------------------------------------------------------------

_SMALL_TEXT = """(root) => {
    const small = [];
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
        const node = walker.currentNode, el = node.parentElement;
        if (!node.textContent.trim() || !el || !el.getClientRects().length) continue;
        if (el.closest('[data-testid="stTooltipIcon"], [data-testid="stTooltipHoverTarget"]'))
            continue;  // the (?) icons: no text to read
        const style = getComputedStyle(el);
        if (style.visibility === "hidden" || style.display === "none") continue;
        const px = parseFloat(style.fontSize);
        if (px < MIN) small.push(`${px}px: ${node.textContent.trim().slice(0, 40)}`);
    }
    return small;
}"""


def choose_step(page, title: str) -> None:
    """Pick a story step by its name in the step's selectbox."""
    page.locator(".st-key-syn_step input").click()
    page.get_by_role("option", name=title, exact=True).click()
    wait_idle(page)


def inside(b: dict, height: int) -> bool:
    return b["y"] >= 0 and b["y"] + b["height"] <= height


def legend_clear_of_the_plot(chart) -> None:
    """The legend's box and the plotting area's box (Plotly's drag rectangle) do not overlap."""
    legend = box(chart.locator(".legend").first)
    plot = box(chart.locator(".nsewdrag").first)
    apart = legend["y"] + legend["height"] <= plot["y"] + 1 or legend["y"] >= plot["y"] + plot[
        "height"] - 1  # fmt: skip
    assert apart, (legend, plot)


def story_checks(page, view, step: str, i: int, size: dict) -> dict:
    """What every layout shows at `size` for story step `step` (number i): its name in the
    step's box, the six sliders and the whole chart inside the window together, the legend
    off the plot, the step in the address. Returns the chart's box."""
    from deffcore.measures import teaching

    bottom = size["height"]
    assert view.locator(".st-key-syn_step input").input_value() == teaching.STEPS[step][0]
    chart = box(view.locator('[data-testid="stPlotlyChart"] .main-svg').first)
    assert inside(chart, bottom), (i, chart)
    sliders = [box(s) for s in view.locator('[data-testid="stSlider"]').all()]
    assert len(sliders) == 6 and all(inside(s, bottom) for s in sliders), (i, sliders)
    legend_clear_of_the_plot(view.locator('[data-testid="stPlotlyChart"]').first)
    assert f"step={i}" in page.url, page.url
    return chart


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s['width']}x{s['height']}")
def test_the_projector_fits_the_window_at_projector_size(server, page, size):
    from deffcore.measures import teaching

    page.set_viewport_size(size)
    go(page, server["url"], "Teach")
    page.get_by_text("Projector layout").first.click()
    wait_idle(page)
    view = page.locator(".st-key-syn_projector_view")
    tag = f"{size['width']}x{size['height']}"
    for i, step in enumerate(teaching.STEP_KEYS, start=1):
        choose_step(page, teaching.STEPS[step][0])
        page.screenshot(path=str(SHOTS / f"projector_{tag}_step{i}.png"))
        chart = story_checks(page, view, step, i, size)
        assert "layout=projector" in page.url, page.url
        lesson = box(view.get_by_text(teaching.LESSONS[step][:40]).first)
        numbers = [box(m) for m in view.locator('[data-testid="stMetric"]').all()]
        assert len(numbers) == 4
        bottom = size["height"]
        assert lesson["y"] + lesson["height"] <= chart["y"] + 1, (i, lesson)  # above the chart
        for m in numbers:  # beside the chart, inside the window
            assert m["x"] >= chart["x"] + chart["width"] - 2, (i, m, chart)
            assert m["y"] + m["height"] <= bottom, (i, m)
        small = view.evaluate(_SMALL_TEXT.replace("MIN", str(PROJECTOR_MIN_PX)))
        assert not small, (i, small[:8])
        inputs = view.locator('[data-testid="stSelectbox"] input').evaluate_all(
            "(xs) => xs.map(x => parseFloat(getComputedStyle(x).fontSize))"
        )
        assert inputs and min(inputs) >= PROJECTOR_MIN_PX, (i, inputs)  # the step's name
        svg_px = view.locator('[data-testid="stPlotlyChart"]').first.evaluate(
            "(c) => [...c.querySelectorAll(SEL)].map(t => parseFloat(getComputedStyle(t).fontSize))"
            .replace("SEL", json.dumps(".xtick text, .ytick text, .legendtext, .g-xtitle text, "
                                       ".g-ytitle text, .gtitle"))
        )  # fmt: skip
        assert svg_px and min(svg_px) >= PROJECTOR_MIN_PX, (i, sorted(svg_px)[:5])
    # a reload keeps the step and the layout (they are in the address)
    page.reload()
    wait_idle(page)
    assert page.locator(".st-key-syn_projector_view").count() == 1
    last = teaching.STEPS["finite_sample"][0]
    assert page.locator(".st-key-syn_step input").input_value() == last


def test_the_story_fits_1280x720_with_its_sliders_beside_the_chart(server, page):
    from deffcore.measures import teaching

    size = SIZES[1]
    page.set_viewport_size(size)
    go(page, server["url"], "Teach")
    view = page.locator(".st-key-syn_story_view")
    for i, step in enumerate(teaching.STEP_KEYS, start=1):
        choose_step(page, teaching.STEPS[step][0])
        page.screenshot(path=str(SHOTS / f"story_1280x720_step{i}.png"))
        chart = story_checks(page, view, step, i, size)
        first = box(view.locator('[data-testid="stMetric"]').first)  # D_eff beside the chart
        assert first["x"] >= chart["x"] + chart["width"] - 2 and inside(first, size["height"])
    page.reload()
    wait_idle(page)
    last = teaching.STEPS["finite_sample"][0]
    assert page.locator(".st-key-syn_step input").input_value() == last
    assert page.locator(".st-key-syn_projector_view").count() == 0


# ---------------------------------------------------------------------------------------------
# the BOS page complete at first visit, the report
# ---------------------------------------------------------------------------------------------


def test_the_bos_page_is_whole_at_first_visit(server, page):
    go(page, server["url"], "BOS check")
    page.screenshot(path=str(SHOTS / "bos_first_visit.png"))
    main = page.locator('[data-testid="stMain"]')
    assert main.get_by_text("Massive activations per layer").count() >= 1
    assert main.get_by_text("Attention sinks").count() >= 1  # (a wrapped title: its start)
    assert main.get_by_text("read from the shared file").count() >= 1
    assert page.get_by_role("button", name=re.compile("Compute the diagnostics")).count() == 0
    assert page.get_by_role("button", name=re.compile("Compare bos=add")).count() == 0
    assert main.get_by_text("Conclusion:").count() == 1
    # the BOS on/off figure's download is named by the run, not by a hash
    chart = main.locator('[data-testid="stPlotlyChart"]').filter(has_text="BOS on or off").first
    chart.scroll_into_view_if_needed()
    buttons = main.get_by_role("button", name="Figure (HTML)")
    index = next(i for i in range(buttons.count())
                 if buttons.nth(i).bounding_box()["y"] > box(chart)["y"])  # fmt: skip
    with page.expect_download() as got:
        buttons.nth(index).click()
    name = got.value.suggested_filename
    assert name.startswith("tiny-llama_bbc-news_N16_T32_windows") and "bos-add-vs-none" in name
    assert not re.fullmatch(r"[0-9a-f]{32,}\.html", name)


def test_the_overview_sends_the_run_as_one_file_that_opens_offline(server, page, tmp_path):
    go(page, server["url"])
    with page.expect_download() as got:
        page.get_by_role("button", name="Download this run as one HTML file").click()
    download = got.value
    assert download.suggested_filename == (
        "tiny-llama_bbc-news_N16_T32_windows_seed0_default_cka_report.html"
    )
    path = tmp_path / download.suggested_filename
    download.save_as(path)
    fetched: list[str] = []
    page.context.route(
        re.compile(r"^https?://"), lambda route: (fetched.append(route.request.url), route.abort())
    )
    page.goto(path.as_uri())
    page.wait_for_function("() => document.querySelectorAll('.plotly-graph-div .main-svg').length")
    page.wait_for_timeout(1500)
    assert page.locator(".plotly-graph-div").count() == 7
    assert all(d.locator(".main-svg").count() for d in page.locator(".plotly-graph-div").all())
    assert fetched == []  # nothing asked for: the file holds everything it draws
    page.screenshot(path=str(SHOTS / "report_window.png"))
    page.set_viewport_size({"width": 1280, "height": 6000})
    page.wait_for_timeout(1500)
    page.screenshot(path=str(SHOTS / "report_full.png"), full_page=True)


# ---------------------------------------------------------------------------------------------
# GW colours, compared runs
# ---------------------------------------------------------------------------------------------


def _luminance(rgb: str) -> float:
    r, g, b = (int(x) for x in re.findall(r"\d+", rgb)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_the_gw_colour_bar_darkens_with_distance(server, page):
    go(page, f"{server['url']}/?run=cached:{server['lab_key']}", "Aggregations")
    button = page.get_by_role("button", name=re.compile("Compute Gromov"))
    if button.is_enabled():
        button.click()
        wait_idle(page)
    chart = page.locator('[data-testid="stPlotlyChart"]').filter(has_text="Gromov").first
    chart.scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    chart.screenshot(path=str(SHOTS / "gw_heatmaps.png"))
    stops = chart.evaluate(
        """(c) => [...c.querySelectorAll('linearGradient')].map(g =>
            [...g.querySelectorAll('stop')].map(s => [parseFloat(s.getAttribute('offset')),
             s.getAttribute('stop-color') || s.style.stopColor]))"""
    )
    gw = stops[-1]  # the second heatmap's colour bar
    lum = [_luminance(c) for _, c in sorted(gw)]
    assert all(a > b for a, b in itertools.pairwise(lum)), gw


def test_compared_runs_have_one_dash_each_and_the_legend_names_what_is_drawn(server, page):
    go(page, f"{server['url']}/?run=cached:{server['lab_key']}", "Runs")
    lag = page.locator('[data-testid="stPlotlyChart"]').filter(has_text="Lag profiles").first
    lag.scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    dashes = lag.evaluate(
        """(c) => [...c.querySelectorAll('.scatterlayer .trace .js-line')].map(l =>
            l.style.strokeDasharray || getComputedStyle(l).strokeDasharray || 'none')"""
    )
    assert len(dashes) == 2 and len(set(dashes)) == 2, dashes
    gaps = page.locator('[data-testid="stPlotlyChart"]').filter(has_text="Gap to the").first
    text = gaps.inner_text()
    assert "paper (published)" not in text and "black outline" not in text
    page.screenshot(path=str(SHOTS / "runs_window.png"))
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": 1400, "height": min(int(height), 12_000)})
    page.wait_for_timeout(1200)
    page.screenshot(path=str(SHOTS / "runs_full.png"), full_page=True)
