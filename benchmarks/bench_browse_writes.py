"""Benchmark: bytes the app writes to disk while a visitor browses every page on an empty cache.

    .venv/bin/python benchmarks/bench_browse_writes.py [--settle-ms 800] [--pages Models,Runs]

Starts `streamlit run app.py` on a free localhost port with every folder the app could write
to pointed into one fresh temporary folder: `DEFF_CACHE_DIR` (deffcore's cache, empty), `HOME`,
`XDG_CACHE_HOME` (~/.cache), `HF_HOME` (the hub's cache), `MPLCONFIGDIR` (matplotlib's),
`TMPDIR`; streamlit's own files live under `HOME`. Then it opens every page URL in the
system's Chromium (Playwright, as tests/e2e does): the navigation's listed pages (the Overview
at /), the Overview's tabs and every hidden page URL, one after the other in one browser,
waits for each to settle, and walks the folders (and the checkout, outside .git) before and
after each: a page's bytes written are the sizes of the files it created or changed. Last, on
the Runs page, it picks a packaged model (`--pick-model`, Gemma-3 by default, whose file ships
in parts) and presses nothing: picking must not write either.

Prints one row per page (bytes, files) and the total, then the files each page wrote. Goal:
browsing every page writes at most a few MB, and nothing large without the page saying so
first (BENCHMARKS.md, "Bytes written by browsing").
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from browser_helpers import (  # noqa: E402
    ERRORS,
    chromium_browser,
    find_chromium,
    streamlit_server,
    wait_idle,
)

#: Folders under the temporary root the server's environment points at.
ROOTS = {
    "cache": "DEFF_CACHE_DIR",
    "home": "HOME",
    "home/.cache": "XDG_CACHE_HOME",
    "home/hf": "HF_HOME",
    "home/mpl": "MPLCONFIGDIR",
    "tmp": "TMPDIR",
}
SKIP_DIRS = {".git", "__pycache__", "test-artifacts", ".pytest_cache", ".ruff_cache"}


def page_urls() -> list[tuple[str, str]]:
    """(title, URL path) for every page app.py registers: listed first (the Overview is /),
    then the hidden ones, each URL the file name without its number (streamlit's rule)."""
    sys.path.insert(0, str(REPO))
    text = (REPO / "app.py").read_text()
    files = re.findall(r'"(\d+_[A-Za-z0-9_]+\.py)",\s*"([^"]+)"', text)
    seen: set[str] = set()
    out = []
    for file, title in files:
        if file in seen:
            continue
        seen.add(file)
        path = "" if file == "0_Overview.py" else re.sub(r"^\d+_", "", Path(file).stem)
        out.append((title, path))
    return out


def snapshot(roots: list[Path]) -> dict[str, tuple[int, int]]:
    """path -> (size, mtime_ns) of every file under `roots` (SKIP_DIRS left out)."""
    files: dict[str, tuple[int, int]] = {}
    for root in roots:
        for folder, dirs, names in os.walk(root):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
            for name in names:
                path = os.path.join(folder, name)
                with contextlib.suppress(OSError):
                    st = os.lstat(path)
                    files[path] = (st.st_size, st.st_mtime_ns)
    return files


def written(before: dict, after: dict) -> dict[str, int]:
    """Files created or changed between two snapshots -> their size now."""
    return {p: s for p, (s, m) in after.items() if before.get(p) != (s, m)}


def mb(n: int) -> str:
    return f"{n / 1e6:9.3f} MB"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--settle-ms", type=int, default=800)
    ap.add_argument("--pages", default="", help="comma-separated titles (default: every page)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary folder")
    ap.add_argument(
        "--pick-model",
        default="gemma3-270m",
        help="then pick this packaged model on the Runs page, no button pressed ('' to skip)",
    )
    args = ap.parse_args()
    if find_chromium() is None:
        print("no chromium or chromium-browser on PATH", file=sys.stderr)
        return 2
    urls = page_urls()
    if args.pages:
        wanted = {t.strip() for t in args.pages.split(",")}
        urls = [u for u in urls if u[0] in wanted]
    root = Path(tempfile.mkdtemp(prefix="bench_browse_writes_"))  # under $TMPDIR
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    for sub, var in ROOTS.items():
        (root / sub).mkdir(parents=True, exist_ok=True)
        env[var] = str(root / sub)
    watched = [root, REPO]
    rows: list[tuple[str, str, float, dict[str, int], str]] = []
    base = snapshot(watched)
    log = root.with_name(root.name + ".log")  # beside the watched folder, not in it
    with streamlit_server(env, log) as server:
        started = snapshot(watched)
        rows.append(("(server start)", "", 0.0, written(base, started), ""))
        with chromium_browser() as browser:
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            page = context.new_page()
            page.set_default_timeout(300_000)
            for title, path in urls:
                before = snapshot(watched)
                t0 = time.perf_counter()
                page.goto(f"{server}/{path}")
                wait_idle(page, args.settle_ms, timeout_ms=300_000)
                secs = time.perf_counter() - t0
                after = snapshot(watched)
                h1 = page.locator("h1").first
                shown = h1.inner_text().strip()[:24] if h1.count() else "(no title)"
                errors = page.locator(ERRORS).count()
                note = f"{shown}" + (f"  {errors} ERROR(S)" if errors else "")
                rows.append((title, f"/{path}", secs, written(before, after), note))
            if args.pick_model:
                before = snapshot(watched)
                t0 = time.perf_counter()
                page.goto(f"{server}/Runs")
                wait_idle(page, args.settle_ms, timeout_ms=300_000)
                box = page.locator('[data-testid="stSelectbox"]').filter(has_text="Model").first
                box.click()
                page.get_by_role("option").filter(has_text=args.pick_model).first.click(
                    timeout=30_000
                )
                wait_idle(page, args.settle_ms, timeout_ms=300_000)
                secs = time.perf_counter() - t0
                after = snapshot(watched)
                errors = page.locator(ERRORS).count()
                note = f"picked {args.pick_model}" + (f"  {errors} ERROR(S)" if errors else "")
                rows.append(("Runs: pick model", "/Runs", secs, written(before, after), note))
            context.close()
    total_files: dict[str, int] = {}
    for _, _, _, files, _ in rows:
        total_files.update(files)
    print(f"{'page':<20} {'URL':<20} {'seconds':>7} {'written':>12} files  page shown")
    for title, url, secs, files, note in rows:
        size = mb(sum(files.values()))
        print(f"{title:<20} {url:<20} {secs:7.1f} {size} {len(files):5d}  {note}")
    print(f"{'total':<20} {'':<20} {'':>7} {mb(sum(total_files.values()))} {len(total_files):5d}")
    print("\nfiles written (largest first, > 10 kB):")
    for title, _, _, files, _ in rows:
        for p, size in sorted(files.items(), key=lambda kv: -kv[1]):
            if size > 10_000:
                shown = p.replace(str(root), "$TMP").replace(str(REPO), "<repo>")
                print(f"  {title:<20} {mb(size)}  {shown}")
    if args.keep:
        print(f"\nkept {root} and {log}")
    else:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
        log.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
