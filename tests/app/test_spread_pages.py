"""AppTest: the shipped default's stored bootstrap (B = 100) is what its pages show and what
its trust level uses, before anything is measured here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from apptest_helpers import assert_clean, chart, plain, plotly_array
from streamlit.testing.v1 import AppTest

from deffcore.views.run import load_snapshot

REPO = Path(__file__).resolve().parents[2]


def open_page(page: str) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180)
    at.run()
    at.switch_page(page)
    return at.run()


def test_baselines_shows_the_stored_bootstrap_of_the_shipped_run(cache_dir):
    snap = load_snapshot()
    boot = snap.data["measurement"]["bootstrap"]
    at = open_page("pages/6_Baselines.py")
    assert_clean(at)
    assert not any("press Run" in plain(i.value) for i in at.info)
    assert any(f"B = {boot['B']} resamples of its passages" in c.value for c in at.caption)
    words = f"[{boot['low']:.4f}, {boot['high']:.4f}]"
    assert any(words in m.value and "from B = 100 resamples" in m.value for m in at.markdown)
    hist = chart(at, "bootstrap")
    np.testing.assert_allclose(sorted(plotly_array(hist["data"][0]["x"])), sorted(boot["samples"]))


def test_the_first_screen_trust_level_uses_the_runs_measured_spread(cache_dir):
    snap = load_snapshot()
    want = snap.trust("default", "cka")
    assert want.interval is not None
    at = open_page("pages/0_Overview.py")
    assert_clean(at)
    sentences = [plain(c.value) for c in at.caption]
    assert plain(want.sentence()) in sentences or want.sentence() in sentences
    assert any("measured by the bootstrap" in s for s in sentences)
