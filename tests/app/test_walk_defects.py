"""AppTests of the explorer walk's defects: nothing big written silently, the Synthetic lab's
step and layout in the URL, its step names shown."""

from __future__ import annotations

from pathlib import Path

from apptest_helpers import assert_clean
from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parents[2]


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_gap_page_on_an_empty_cache_writes_nothing_big(tmp_path, monkeypatch):
    cache = tmp_path / "empty-cache"
    monkeypatch.setenv("DEFF_CACHE_DIR", str(cache))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    at.switch_page("pages/3_Gap_to_F_L.py")
    at.run()
    assert_clean(at)
    written = folder_bytes(cache) if cache.exists() else 0
    big = (
        sorted(
            (p.stat().st_size, str(p.relative_to(cache))) for p in cache.rglob("*") if p.is_file()
        )[-3:]
        if cache.exists()
        else []
    )
    assert written < 10_000_000, f"{written:,} bytes written to the cache: {big}"
