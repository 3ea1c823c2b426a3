"""Take the README's screenshot: the explorer's first screen on an empty cache, 1400 x 900.

    .venv/bin/python scripts/screenshot_first_screen.py [OUT]   # docs/assets/first-screen.png

Starts `streamlit run app.py` on a free localhost port with a fresh temporary DEFF_CACHE_DIR
(what a first-time visitor sees: the shipped precomputed run), opens it in Debian's Chromium
(`chromium` or `chromium-browser` on PATH, driven by Playwright; never `playwright install`),
waits until every element has drawn, saves the window as a palette PNG (small enough to commit)
and stops the server. Not part of the test suite: the end-to-end test
(tests/e2e/test_browser.py) takes the same screenshots into test-artifacts/.
"""

from __future__ import annotations

import io
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "e2e"))  # the browser tests' one server and browser
from browser_helpers import chromium_browser, find_chromium, streamlit_server  # noqa: E402

WINDOW = {"width": 1400, "height": 900}
#: Every element drawn: the script finished, no skeletons, every Plotly chart has its SVG.
DRAWN = """() => {
    const app = document.querySelector('[data-testid="stApp"]');
    return app && app.getAttribute("data-test-script-state") === "notRunning" &&
        !document.querySelector('[data-testid="stStatusWidgetRunningIcon"]') &&
        !document.querySelector('[data-testid^="stSkeleton"]') &&
        document.querySelectorAll('[data-testid="stPlotlyChart"]').length > 0 &&
        [...document.querySelectorAll('[data-testid="stPlotlyChart"]')]
            .every((c) => c.querySelector(".main-svg"));
}"""


def _small_png(png: bytes) -> bytes:
    """The screenshot quantised to 256 colours (a UI of flat colours: no visible loss)."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=256, dither=0)
    out = io.BytesIO()
    image.save(out, format="PNG", optimize=True)
    return out.getvalue()


def shoot(out: Path) -> int:
    if find_chromium() is None:
        raise SystemExit("no chromium on PATH (scripts/setup.sh --test installs Debian's)")
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "DEFF_CACHE_DIR": cache, "HF_HUB_OFFLINE": "1"}
        log = Path(cache) / "streamlit.log"
        with streamlit_server(env, log) as url, chromium_browser() as browser:
            page = browser.new_page(viewport=WINDOW)
            page.goto(url)
            page.wait_for_function(DRAWN, timeout=300_000)
            page.wait_for_timeout(1500)  # plotly's transitions settle
            png = page.screenshot()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(_small_png(png))
    print(f"{out}: {out.stat().st_size / 1024:.0f} kB")
    return 0


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / "docs/assets/first-screen.png"
    sys.exit(shoot(target))
