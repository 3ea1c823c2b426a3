"""End-to-end: `streamlit run app.py` in real headless Chromium (Debian /usr/bin/chromium).

The fixture starts the server on a free port with a temporary DEFF_CACHE_DIR and stops it. The
test runs the default model and dataset (smollm2-135m + bbc-news) with N and max tokens lowered
to 32 / 64 in the sidebar, checks the headline against `measure` (a cache hit in this process),
switches the pooling control, and visits every page looking for error elements. Screenshots go
to test-artifacts/ (gitignored).

Never `playwright install`: the browser is the system's Chromium.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
RUN = {"model": "smollm2-135m", "dataset": "bbc-news", "n": 32, "max_tokens": 64}
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with code {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise TimeoutError(f"streamlit did not become healthy at {url} within {timeout} s")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed")
    cache = tmp_path_factory.mktemp("e2e_cache")
    port = _free_port()
    env = {**os.environ, "DEFF_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "streamlit_server.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamlit",
            "run",
            "app.py",
            "--server.port",
            str(port),
            "--server.address",
            "127.0.0.1",
            "--server.headless",
            "true",
            "--browser.gatherUsageStats",
            "false",
        ],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield {"url": url, "cache": cache}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.fixture(scope="module")
def page(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1500, "height": 1100})
        pg = context.new_page()
        pg.set_default_timeout(60_000)
        yield pg
        context.close()
        browser.close()


def wait_idle(page, settle_ms: int = 600) -> None:
    """Wait until the script run has finished and every element has drawn (no skeletons)."""
    page.wait_for_timeout(settle_ms)
    page.wait_for_function(
        """() => {
            const app = document.querySelector('[data-testid="stApp"]');
            const state = app && app.getAttribute("data-test-script-state");
            // lazily loaded element bundles show skeletons until they arrive
            return state === "notRunning" &&
                !document.querySelector('[data-testid="stStatusWidgetRunningIcon"]') &&
                !document.querySelector('[data-testid^="stSkeleton"]') &&
                [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
                    .every((c) => c.querySelector(".main-svg"));
        }""",
        timeout=600_000,
    )
    page.wait_for_timeout(settle_ms)


def metrics(page) -> dict[str, str]:
    labels = page.locator('[data-testid="stMetricLabel"]').all_inner_texts()
    values = page.locator('[data-testid="stMetricValue"]').all_inner_texts()
    return {label.strip(): value.strip() for label, value in zip(labels, values, strict=False)}


def no_errors(page, where: str) -> None:
    errors = page.locator(ERRORS)
    assert errors.count() == 0, f"{where}: {errors.all_inner_texts()}"


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_run_switch_pooling_and_visit_every_page(server, page):
    from deffcore.measurement import measure

    page.goto(server["url"])
    page.get_by_role("heading", name="Effective Depth Explorer").wait_for()
    wait_idle(page)
    no_errors(page, "first screen")
    shot(page, "01_first_screen")
    if (REPO / "deffcore" / "data" / "default_run.json").exists():
        # the shipped default summary, before any run
        assert "D_eff" in metrics(page)
        assert page.get_by_text("Precomputed with").count() == 1

    sidebar = page.locator('[data-testid="stSidebar"]')
    sidebar.get_by_label("N passages").fill(str(RUN["n"]))
    sidebar.get_by_label("N passages").press("Enter")
    wait_idle(page)
    sidebar.get_by_label("Max tokens").fill(str(RUN["max_tokens"]))
    sidebar.get_by_label("Max tokens").press("Enter")
    wait_idle(page)
    sidebar.get_by_role("button", name="Run", exact=True).click()
    done = f"Current run (measured): smollm2-135m · bbc-news · N={RUN['n']} · T={RUN['max_tokens']}"
    sidebar.get_by_text(done).wait_for(timeout=900_000)
    wait_idle(page)
    no_errors(page, "after run")
    shot(page, "02_after_run")

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DEFF_CACHE_DIR", str(server["cache"]))
        m = measure(**RUN)  # the server's cache entry: no forward pass here
    assert m.cached
    got = metrics(page)
    s = m.summary("default")
    assert got["D_eff"] == f"{s.deff:.3f}"
    assert got["D_eff / L"] == f"{s.deff_over_L:.4f}"
    assert got["Gap to F_L"] == f"{s.gap_pct:+.1f}%"
    assert got["N"] == str(m.n)
    svgs = page.locator('[data-testid="stPlotlyChart"] .main-svg')
    svgs.first.wait_for()  # plotly.js draws after the element arrives
    assert svgs.count() >= 2

    sidebar.get_by_text("first_non_bos", exact=True).click()
    page.wait_for_function(
        """(before) => {
            const v = document.querySelector('[data-testid="stMetricValue"]');
            return v && v.innerText.trim() !== before;
        }""",
        arg=got["D_eff"],
    )
    wait_idle(page)
    switched = metrics(page)
    assert switched["D_eff"] == f"{m.summary('first_non_bos').deff:.3f}" != got["D_eff"]
    no_errors(page, "after switching pooling")
    shot(page, "03_first_non_bos")

    more = page.locator('[data-testid="stSidebarNavViewButton"]')
    if more.count() and "more" in more.inner_text().lower():
        more.click()
        page.wait_for_timeout(500)
    links = page.locator('[data-testid="stSidebarNav"] a')
    names = [t.strip() for t in links.all_inner_texts()]
    assert len(names) >= 8, names  # the entry page and pages 1-7
    for i, name in enumerate(names):
        links.nth(i).click()
        wait_idle(page, settle_ms=1000)
        page.locator("h1").first.wait_for()
        no_errors(page, f"page {name}")
        assert page.locator("h1").count() >= 1
        # every page keeps the run: the sidebar still names it
        assert sidebar.get_by_text(done).count() == 1, name
        slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
        shot(page, f"page_{i:02d}_{slug}")
