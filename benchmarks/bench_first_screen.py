"""Benchmark: the first screen in a real browser, the app beside a one-metric, one-heatmap page.

    .venv/bin/python benchmarks/bench_first_screen.py [--repeats 3] [--before DIR]

(also `benchmarks/bench_app.py --browser`). In one run, for each of two apps: the explorer
(`streamlit run app.py`, its Overview first) and a baseline written to a temporary folder (one
`st.metric` and one plotly heatmap of a 31 x 31 matrix, the least a Streamlit first screen
can be), each repeat:

  cold   a fresh `streamlit run` server with an empty cache (`$DEFF_CACHE_DIR` a new empty
         folder): from the page's request (the server healthy) to its first number
         (`stMetricValue`) and its first drawn chart (a plotly SVG), and from the server's
         launch to that chart;
  warm   the same server, a new browser tab (a new context: a new Streamlit session): from
         the request to the first chart.

`--before DIR`: also the explorer of another checkout (e.g. `git archive <commit> | tar -x -C
DIR`), in the same interleaved repeats: before and after under the same load.

Chromium is Debian's (`chromium` on PATH, as tests/e2e/browser_helpers.py launches it), driven
by Playwright. Prints the median and min of each, and the app's medians over the baseline's:
the goals are cold <= 1.5x and warm <= 1.2x (BENCHMARKS.md, "App responsiveness").
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))  # the browser tests' one server and browser
from browser_helpers import chromium_browser, find_chromium, streamlit_server  # noqa: E402

BASELINE = """import numpy as np
import plotly.graph_objects as go
import streamlit as st

S = np.random.default_rng(0).random((31, 31))
st.metric("D_eff", f"{1 / S.mean():.3f}")
st.plotly_chart(go.Figure(go.Heatmap(z=S)))
"""
NUMBER = '[data-testid="stMetricValue"]'
CHART = '[data-testid="stPlotlyChart"] .main-svg'
ERRORS = '[data-testid="stException"]'


def _visit(browser, url: str) -> tuple[float, float]:
    """A new tab (new context) opens `url`: seconds to the first number and the first chart."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    try:
        start = time.perf_counter()
        page.goto(url, wait_until="commit")
        page.wait_for_selector(NUMBER, timeout=300_000)
        number = time.perf_counter() - start
        page.wait_for_selector(CHART, timeout=300_000)
        chart = time.perf_counter() - start
        if page.locator(ERRORS).count():
            raise RuntimeError(f"{url}: the page shows an exception")
        return number, chart
    finally:
        context.close()


def measure(browser, script: Path, cwd: Path) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench_first_screen_") as root:
        cache = Path(root) / "cache"  # empty: the server's log goes beside it, not in it
        cache.mkdir()
        env = {**os.environ, "DEFF_CACHE_DIR": str(cache)}
        start = time.perf_counter()
        log = Path(root) / "server.log"
        # healthy polled every 0.05 s (the figure's resolution), with no time limit
        with streamlit_server(env, log, script=script, cwd=cwd, timeout=1e9, poll=0.05) as url:
            healthy = time.perf_counter() - start
            number, chart = _visit(browser, url)
            _, warm = _visit(browser, url)
    return {
        "server healthy": healthy,
        "cold: first number": number,
        "cold: first chart": chart,
        "cold: launch to chart": healthy + chart,
        "warm tab: first chart": warm,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--before", type=Path, help="another checkout's explorer, measured alike")
    args = p.parse_args(argv)
    if find_chromium() is None:
        sys.exit("No chromium on PATH (Debian's: scripts/setup.sh --test).")
    load = os.getloadavg()[0]
    folder = Path(tempfile.mkdtemp(prefix="bench_first_screen_base_"))
    (folder / "baseline.py").write_text(BASELINE)
    apps = {"app": REPO} | ({"before": args.before.resolve()} if args.before else {})
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in (*apps, "baseline")}
    try:
        with chromium_browser() as browser:
            for rep in range(args.repeats):  # interleaved: the same load for both
                for name, where in apps.items():
                    runs[name].append(measure(browser, where / "app.py", where))
                runs["baseline"].append(measure(browser, folder / "baseline.py", folder))
                for name, got in runs.items():
                    shown = ", ".join(f"{k} {v:.2f}" for k, v in got[-1].items())
                    print(f"repeat {rep + 1} {name}: {shown}", file=sys.stderr)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    end = os.getloadavg()[0]
    print(f"{args.repeats} repeats, 1-min load {load:.1f} at the start, {end:.1f} at the end")
    print(f"{'median (min), s':<24}" + "".join(f"{n:>16}" for n in runs) + "".join(
        f"{n + '/base':>14}" for n in apps
    ))  # fmt: skip
    for what in runs["baseline"][0]:
        times = {n: [r[what] for r in got] for n, got in runs.items()}
        cells = "".join(
            f"{statistics.median(t):>9.2f} ({min(t):.2f})".rjust(16) for t in times.values()
        )
        base = statistics.median(times["baseline"])
        ratios = "".join(f"{statistics.median(times[n]) / base:>13.2f}x" for n in apps)
        print(f"{what:<24}{cells}{ratios}")


if __name__ == "__main__":
    main()
