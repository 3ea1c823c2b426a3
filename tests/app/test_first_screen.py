"""The first screen at Streamlit's speed: the Overview's first script run reads the shipped
snapshot (deffcore/data/default_run.json, schema-checked) and imports no model stack.

What it must not import: torch (a second or more), transformers, tokenizers and gguf (a
tokenizer loaded to count the data's passages took ~15 s on a 2-core machine), scipy,
pydantic (the shipped file opens by the digest of its checked bytes: `views.run.load_snapshot`)
and pandas (the linear-vs-unbiased table is a Markdown table). The
snapshot stores what its data can give (`supply`: token counts per document, SPEC 15), so the
trust badge's action is checked against the data without a tokenizer; a test below checks that
stored payload against the tokenizer itself, so it cannot drift.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Modules the first screen never needs (each seconds to import, or a model's tokenizer).
HEAVY = ("torch", "transformers", "tokenizers", "gguf", "scipy", "pydantic", "pandas")

_FIRST_RUN = """
import json, sys
from streamlit.delta_generator import DeltaGenerator
from streamlit.testing.v1 import AppTest
sent = []  # what the page sends, in the order the browser receives it
enqueue = DeltaGenerator._enqueue
def logged(self, delta_type, element, *args, **kwargs):
    text = getattr(element, "body", "") if delta_type == "markdown" else ""
    math = "math" if "$" in text.replace("\\\\$", "") else delta_type  # KaTeX typesets it
    sent.append("glossary" if "**residual stream**" in text else math)
    return enqueue(self, delta_type, element, *args, **kwargs)
DeltaGenerator._enqueue = logged
at = AppTest.from_file(sys.argv[1], default_timeout=300)
at.run()
print(json.dumps({
    "exceptions": [str(e.value) for e in at.exception],
    "metrics": [m.label for m in at.metric],
    "charts": len(at.get("plotly_chart")),
    "heavy": sorted(m for m in sys.argv[2:] if m in sys.modules),
    "sent": sent,
    "glossary": [e.proto.label for e in at.sidebar.expander],
}))
"""


def test_the_overviews_first_run_imports_no_model_stack(tmp_path):
    """A fresh process (a cold server) runs app.py once: the Overview shows its headline and
    charts, and not one of HEAVY was imported."""
    env_cache = tmp_path / "cache"
    out = subprocess.run(
        [sys.executable, "-c", _FIRST_RUN, str(ROOT / "app.py"), *HEAVY],
        capture_output=True, text=True, cwd=ROOT, timeout=600, check=True,
        env={**os.environ, "DEFF_CACHE_DIR": str(env_cache)},
    )  # fmt: skip
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["exceptions"] == []
    assert "D_eff" in got["metrics"] and got["charts"] >= 2  # the headline and both charts
    assert got["heavy"] == [], f"the first screen imported {got['heavy']}"
    # the sidebar's glossary (~20 kB of text) is sent after both charts: drawn first
    sent = got["sent"]
    assert any("Glossary" in label for label in got["glossary"]) and "glossary" in sent
    charts = [i for i, t in enumerate(sent) if t == "plotly_chart"]
    assert len(charts) >= 2 and sent.index("glossary") > charts[1]
    # nothing before the charts is typeset: KaTeX is loaded after they are drawn
    assert "math" not in sent[: charts[1]], sent[: charts[1]]


def test_the_shipped_default_stores_what_its_data_gives():
    """The stored supply is the tokenizer's own count of the run's data (what `measure
    --snapshot` writes): recomputed here, equal, so the first screen's actions cannot drift."""
    from deffcore.inputs.texts import window_source
    from deffcore.views.run import load_snapshot

    view = load_snapshot()
    assert view is not None and view.window_source() is not None
    spec = view.spec
    fresh = window_source(spec["model"], spec["dataset"], spec["bos"], spec["revision"])
    assert view.data["supply"] == fresh.to_dict()


def test_the_shipped_defaults_trust_reads_its_stored_supply(monkeypatch):
    """The headline's trust (its "use ≥ n passages" action included) needs no tokenizer: with
    loading one made impossible, it is the same sentence."""
    import deffcore.inputs.texts as texts
    from deffcore.views.run import load_snapshot

    view = load_snapshot()
    assert view is not None
    before = view.trust("default", "cka")

    def refuse(*args, **kwargs):
        raise AssertionError("the first screen loaded a tokenizer")

    monkeypatch.setattr(texts, "load_tokenizer", refuse)
    monkeypatch.setattr(texts, "_LENGTHS_MEMO", {})
    after = view.trust("default", "cka")
    assert after == before and after.action is not None  # the shipped run's N asks for more
