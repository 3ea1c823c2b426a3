"""No page bricked by one entry: the Runs and Models pages with a kept shared
file that no longer reads (kept by a looser, older schema: a lone surrogate in its model name)
and with one entry whose row cannot be drawn. Each entry renders on its own, a bad one is a
one-line note, and every delete control is drawn, so the bad file is removed from the page.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from deffcore.views.run import DEFAULT_RUN_PATH
from deffcore.views.sharing import save_shared, shared_dir, shared_entries

REPO = Path(__file__).resolve().parents[2]
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 8, "max_tokens": 16, "seed": 0}
RUNS = "pages/7_Runs.py"


def keep_damaged() -> Path:
    """A hash-named file in `.shared/` that an older deffcore accepted and this one refuses."""
    data = json.loads(DEFAULT_RUN_PATH.read_text())
    data["spec"]["model"] = "smollm2\ud800"
    body = json.dumps(data).encode()
    shared_dir().mkdir(parents=True, exist_ok=True)
    path = shared_dir() / f"{hashlib.sha256(body).hexdigest()[:16]}.json"
    path.write_bytes(body)
    return path


def runs_page() -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300).run()
    at.switch_page(RUNS)
    return at.run()


def test_a_damaged_shared_file_is_a_note_and_is_deleted_from_the_page(measurement):
    good = save_shared(DEFAULT_RUN_PATH.read_bytes(), name="good.json")
    damaged = keep_damaged()
    at = runs_page()
    assert not at.exception and not at.error, [e.value for e in at.error]
    notes = [c.value for c in at.caption if "is damaged" in c.value]
    assert len(notes) == 1 and "lone surrogate" in notes[0] and "\ud800" not in notes[0]
    status = dict(zip(at.dataframe[0].value["run"], at.dataframe[0].value["status"], strict=True))
    assert "damaged" in status.values()
    box = at.selectbox(key="runs_shared_delete")
    assert f"shared:{damaged.name[:16]}" in box.options[-1] or any(
        damaged.name[:16] in o for o in box.options
    )
    box.set_value(f"shared:{damaged.name[:16]}")
    at.button(key="runs_shared_delete_button").click().run()
    assert not at.exception and not damaged.exists() and good.path.exists()
    assert [e.sha256 for e in shared_entries()] == [good.sha256[:16]]


def test_one_entry_that_cannot_be_drawn_leaves_the_rest_of_the_page(measurement, monkeypatch):
    """A listed entry whose fields no reader expects (a spec without a dataset, a size that is
    text): its row says so, the other rows, the open, share and delete controls are all
    there, and a section that cannot use it is one sentence."""
    from deffcore.extraction import cache as entries

    real = entries.list_runs
    odd = {"key": "f" * 20, "status": "complete", "spec": {"model": 5}, "size_bytes": "x"}
    monkeypatch.setattr(entries, "list_runs", lambda: [*real(), odd])
    at = runs_page()
    assert not at.exception, [e.value for e in at.exception]
    rows = at.dataframe[0].value
    assert list(rows["status"]).count("cannot be shown (KeyError)") == 1, rows
    assert any("tiny-llama" in r for r in rows["run"])  # the cached run's row is whole
    assert all(len(e.value) < 300 for e in at.error)  # at most a sentence per section
    keys = {b.key for b in at.button}
    assert {"runs_open_button", "runs_delete_button"} <= keys
    assert at.file_uploader(key="runs_share_upload") is not None


def test_a_section_that_fails_is_one_sentence_and_the_delete_controls_stay(
    measurement, monkeypatch
):
    """Whatever a section raises (here the comparison's caveats), it is one sentence where the
    section was, and the sections after it (resume, delete) are drawn."""
    import deffcore.views.comparisons

    def broken(rows):
        raise RuntimeError("a caveat no one expected")

    monkeypatch.setattr(deffcore.views.comparisons, "comparison_caveats", broken)
    at = runs_page()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith("Comparing runs failed unexpectedly"), errors
    assert "runs_delete_button" in {b.key for b in at.button}


@pytest.fixture(autouse=True)
def _no_shared_left(cache_dir):
    """Each test starts without kept shared runs (the module shares one cache)."""
    import shutil

    yield
    shutil.rmtree(cache_dir / ".shared", ignore_errors=True)
