"""The browser tests' shared parts: finding Chromium, a `streamlit run` server, one browser.

Used by test_browser.py (the first-time visitor's app) and test_round4.py (the page fixes' checks).
The browser is `chromium` or `chromium-browser` on PATH (`scripts/setup.sh --test` installs
Debian's); never `playwright install`. Without a browser (or Playwright) the tests skip, except
under `CI=true`, where they fail: CI must never pass by skipping them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
ERRORS = '[data-testid="stException"], [data-testid="stAlertContentError"]'


def find_chromium() -> str | None:
    """The system's Chromium: `chromium` (Debian) or `chromium-browser` (Ubuntu, others)."""
    return next(filter(None, (shutil.which(n) for n in ("chromium", "chromium-browser"))), None)


def missing(reason: str) -> None:
    """Skip, or under CI=true fail: a CI run must not go green by skipping the browser tests."""
    if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
        pytest.fail(f"{reason}; CI=true, so the browser tests must run (scripts/setup.sh --test)")
    pytest.skip(reason)


def require_browser() -> None:
    """Skip (or fail under CI) unless Chromium and Playwright are both here."""
    if find_chromium() is None:
        missing("no chromium or chromium-browser on PATH")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing("playwright is not installed (requirements-dev.txt)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(
    url: str, proc: subprocess.Popen, timeout: float = 120.0, poll: float = 0.5
) -> None:
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
        time.sleep(poll)
    raise TimeoutError(f"streamlit did not become healthy at {url} within {timeout} s")


@contextlib.contextmanager
def streamlit_server(
    env: dict,
    log_path: Path,
    *,
    script: Path | str = "app.py",
    cwd: Path = REPO,
    timeout: float = 120.0,
    poll: float = 0.5,
) -> Iterator[str]:
    """`streamlit run script` (the app by default) in `cwd` on a free localhost port with
    `env`; yields its URL once healthy (polled every `poll` s, at most `timeout` s), then stops it.

    The server's output goes to `log_path` (under test-artifacts/, gitignored)."""
    port = _free_port()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(script), "--server.port", str(port),
             "--server.address", "127.0.0.1", "--server.headless", "true",
             "--browser.gatherUsageStats", "false"],
            cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_healthy(url, proc, timeout, poll)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextlib.contextmanager
def chromium_browser() -> Iterator[object]:
    """One headless Chromium (the system's), closed at the end: a Playwright `Browser`."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=find_chromium(), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def wait_idle(page, settle_ms: int = 800, timeout_ms: int = 240_000) -> None:
    """Until the script has stopped running and no skeleton is left, with `settle_ms` before
    and after (a rerun that starts late is waited for too)."""
    page.wait_for_timeout(settle_ms)
    page.wait_for_function(
        """() => {
            const app = document.querySelector('[data-testid="stApp"]');
            return app && app.getAttribute("data-test-script-state") === "notRunning" &&
                !document.querySelector('[data-testid="stStatusWidgetRunningIcon"]') &&
                !document.querySelector('[data-testid^="stSkeleton"]');
        }""",
        timeout=timeout_ms,
    )
    page.wait_for_timeout(settle_ms)
