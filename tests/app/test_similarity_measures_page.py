"""AppTest of the Similarity page's table across similarity measures (SPEC 17.4): nothing is
computed until asked; the button computes through deffcore and the table shows its numbers."""

from __future__ import annotations

from pathlib import Path

from apptest_helpers import assert_clean
from streamlit.testing.v1 import AppTest

import deffcore.statistics.measure_table as mt

REPO = Path(__file__).resolve().parents[2]
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 16, "max_tokens": 32, "seed": 0}
PAGE = "pages/1_Similarity.py"


def test_the_table_is_computed_only_when_asked(cache_dir, measurement, monkeypatch):
    calls = []
    real = mt.measure_table
    monkeypatch.setattr(
        mt, "measure_table", lambda x, ms, **kw: calls.append(ms) or real(x, ms, **kw)
    )
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).run()
    at.switch_page(PAGE)
    at.run()
    assert_clean(at)
    # the shipped snapshot (first screen): no table, no computation, a sentence why
    assert any("carries no table across measures" in i.value for i in at.info)
    assert calls == []
    from tests.app.test_app_pages import press_run  # the sidebar's Run, as the other pages

    press_run(at)
    at.switch_page(PAGE)
    at.run()
    assert_clean(at) and calls == []
    at.multiselect(key="sim_measures_pick").set_value(["cka", "procrustes"])
    at.number_input(key="sim_measures_B").set_value(3)
    at.button(key="sim_measures_go").click()
    at.run()
    assert_clean(at)
    assert calls == [("cka", "procrustes")]
    want = measurement.measure_table("default", ("cka", "procrustes"), B=3)
    shown = at.dataframe[-1].value
    assert list(shown["measure"]) == ["linear CKA", "orthogonal Procrustes"]
    assert list(shown["D_eff/L"]) == [f"{r.deff_over_L:.4f}" for r in want.rows]
    assert shown["95% interval (B = 3)"][1] == f"[{want.rows[1].low:.4f}, {want.rows[1].high:.4f}]"
