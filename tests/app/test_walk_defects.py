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


SYNTHETIC = "pages/5_Synthetic_lab.py"


def open_lab(**params: str) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    for name, value in params.items():
        at.query_params[name] = value
    at.run()
    at.switch_page(SYNTHETIC)
    return at.run()


def _blocks_holding(node, wanted: set[str]):
    """Every element block under `node` whose direct children are all columns, with the types
    each column holds (a row of columns side by side)."""
    children = list(getattr(node, "children", {}).values())
    if children and all(type(c).__name__ == "Column" for c in children):
        yield [{type(e).__name__ for e in _leaves(c)} for c in children]
    for child in children:
        yield from _blocks_holding(child, wanted)


def _leaves(node):
    children = getattr(node, "children", None)
    if not isinstance(children, dict) or not children:
        yield node
        return
    for child in children.values():
        yield from _leaves(child)


def test_the_lab_opens_at_the_step_and_layout_its_url_names():
    at = open_lab(step="finite_sample", layout="projector")
    assert_clean(at)
    assert at.radio(key="syn_step").value == "finite_sample"
    assert at.toggle(key="syn_projector").value is True
    at.radio(key="syn_step").set_value("h0").run()
    assert at.query_params["step"] == "h0" and at.query_params["layout"] == "projector"
    at.toggle(key="syn_projector").set_value(False).run()
    assert at.query_params["layout"] == "standard"
    normal = open_lab(step="correlated")
    assert normal.radio(key="syn_step").value == "correlated"
    assert normal.toggle(key="syn_projector").value is False


def test_the_projector_names_its_steps_and_puts_the_sliders_beside_the_chart():
    from deffcore.measures import teaching

    at = open_lab(layout="projector")
    options = at.radio(key="syn_step").options
    assert options == [teaching.STEPS[s][0] for s in teaching.STEP_KEYS]  # names, not "1 … 6"
    assert "6 · Finite-sample bias" in options
    rows = list(_blocks_holding(at.main, set()))
    side_by_side = [
        row for row in rows
        if any("UnknownElement" in col for col in row) and any("Slider" in col for col in row)
    ]  # fmt: skip
    assert side_by_side, "the story's chart and its sliders are not in one row"
    chart_col = next(i for i, c in enumerate(side_by_side[0]) if "UnknownElement" in c)
    slider_col = next(i for i, c in enumerate(side_by_side[0]) if "Slider" in c)
    assert chart_col != slider_col
