"""End-to-end: the navigation a newcomer reads in a minute, in real headless Chromium.

At 1400 x 900: at most eight page links (one row at the top), the sidebar (the view controls,
the current run, the glossary) no taller than the window, the run panel on the Runs page
only; old page URLs (/Similarity, /Interventions, ...) typed in still open their page. The
AppTest side (app.py's structure, the panel's defaults) is tests/app/test_navigation.py.
Screenshots go to test-artifacts/ (gitignored): nav_overview.png is the first screen.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from browser_helpers import (
    ERRORS,
    chromium_browser,
    require_browser,
    streamlit_server,
    wait_idle,
)

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
WINDOW = {"width": 1400, "height": 900}
NAV = '[data-testid="stTopNav"] [data-testid="stTopNavLink"]'
#: Old URLs (the file name without its number) -> the title their page shows.
OLD_URLS = {
    "Similarity": "Similarity",
    "Lag_decay": "Lag decay",
    "Gap_to_F_L": "Gap to F_L",
    "BOS_and_controls": "BOS & controls",
    "Synthetic_lab": "Synthetic lab",
    "Baselines": "Baselines",
    "Interventions": "Norm interventions",
    "Correlation_lab": "Correlation lab",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require_browser()
    cache = tmp_path_factory.mktemp("e2e_nav_cache")
    env = {**os.environ, "DEFF_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    with streamlit_server(env, ARTIFACTS / "streamlit_server_nav.log") as url:
        yield url


@pytest.fixture(scope="module")
def page(server):
    with chromium_browser() as browser:
        context = browser.new_context(viewport=WINDOW)
        pg = context.new_page()
        pg.set_default_timeout(120_000)
        yield pg
        context.close()


def no_errors(page, where: str) -> None:
    errors = page.locator(ERRORS)
    assert errors.count() == 0, f"{where}: {errors.all_inner_texts()}"


def test_eight_links_and_a_sidebar_that_fits_the_window(server, page):
    ARTIFACTS.mkdir(exist_ok=True)
    page.goto(server)
    page.get_by_role("heading", name="Effective Depth Explorer").wait_for()
    wait_idle(page)
    no_errors(page, "first screen")
    page.screenshot(path=str(ARTIFACTS / "nav_overview.png"))
    # every page link wherever the navigation draws it (at the top, or in the sidebar)
    anywhere = f'{NAV}, [data-testid="stSidebarNav"] a'
    assert 1 <= page.locator(anywhere).count() <= 8, page.locator(anywhere).all_inner_texts()
    names = [t.strip() for t in page.locator(NAV).all_inner_texts()]
    assert names[0] == "Overview", names
    assert "BOS check" in names and "Teach" in names and "More" not in " ".join(names)
    sidebar_box = page.locator('[data-testid="stSidebarContent"]')
    height = sidebar_box.evaluate("(e) => e.scrollHeight")
    assert height <= WINDOW["height"], f"the sidebar is {height} px tall"
    bottom = page.locator('[data-testid="stSidebarUserContent"]').evaluate(
        "(e) => e.getBoundingClientRect().bottom"
    )
    assert bottom <= WINDOW["height"], f"the view controls end at {bottom} px"
    # the view controls are in the sidebar, the run panel is not
    sidebar = page.locator('[data-testid="stSidebar"]')
    assert sidebar.get_by_role("radiogroup", name="Pooling control").count() == 1
    assert sidebar.get_by_role("button", name="Run", exact=True).count() == 0
    # the Overview's tab-like row reaches Similarity, Lag decay and Gap to F_L
    row = page.locator('[data-testid="stMain"] [data-testid="stPageLink"]')
    assert {"Similarity", "Lag decay", "Gap to F_L"} <= {t.strip() for t in row.all_inner_texts()}


def test_the_run_panel_is_on_the_runs_page_only(server, page):
    page.goto(server)
    wait_idle(page)
    links = page.locator(NAV)
    links.filter(has_text="Teach").first.click()
    wait_idle(page)
    no_errors(page, "Teach")
    assert page.get_by_role("button", name="Run", exact=True).count() == 0
    assert page.get_by_label("N passages").count() == 0
    links.filter(has_text="Runs").first.click()
    wait_idle(page)
    no_errors(page, "Runs")
    main = page.locator('[data-testid="stMain"]')
    assert main.get_by_role("button", name="Run", exact=True).count() == 1
    assert main.get_by_label("N passages").input_value() == "4096"  # the shipped run's N
    page.screenshot(path=str(ARTIFACTS / "nav_runs.png"))


@pytest.mark.parametrize("path", list(OLD_URLS))
def test_an_old_page_url_still_opens_its_page(server, page, path):
    page.goto(f"{server}/{path}")
    wait_idle(page)
    no_errors(page, path)
    title = page.locator("h1").first.inner_text().strip()
    assert title == OLD_URLS[path], (path, title)
