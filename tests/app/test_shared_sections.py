"""AppTest of a shared run's stored sections (the one schema, `deffcore.views.run_schema`):
every page that reads the depth-use atlas (SPEC 16), the paired bootstrap (SPEC 15) or the BOS
diagnostics (SPEC 11) opens without an exception box on schema-accepted variants of each
section, and a stored value in a caption is shown as text, never as Markdown.

The variants derive from the shipped default run (`deffcore/data/default_run.json`, every
section present); each is checked by the schema first, then opened as the current run.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from apptest_helpers import plain
from streamlit.testing.v1 import AppTest

from deffcore.views.run import DEFAULT_RUN_PATH, Run

REPO = Path(__file__).resolve().parents[2]
GOOD: dict = json.loads(DEFAULT_RUN_PATH.read_text())
#: The pages that read a shared run's stored sections.
PAGES = ("pages/4_BOS_and_controls.py", "pages/16_Depth_use.py", "pages/6_Baselines.py")
IMAGE = "![x](http://example.com/x.png)"
SCRIPT = "[click](javascript:alert(1))"


def _nulls(d: dict) -> None:
    """Undefined values where the schema allows null, the smallest counts and shares."""
    a = d["atlas"]
    for name in ("relative_contribution", "alignment", "block_influence"):
        a[name][0] = None
    a["angular_distance"][3] = [None] * len(a["angular_distance"][3])
    a["gromov"].update(n_drop=0, first_dropped_block=None)
    a["gromov"]["best_distance"][-1] = None
    a["intervals"]["phase_point"] = {"low": None, "high": None}
    a["intervals"]["alignment"]["low"][2] = None
    a.update(phase_point=0)
    g = d["diagnostics"]
    g["sun_share"][4] = None
    g["massive_ratio"][0] = None
    g.update(gu_sink_metric=0.0, gu64_sink_metric=1.0, gu_passages=0, gu_min_length=0)
    g["sink_fraction"] = [0.0] * len(g["sink_fraction"])


def _bare(d: dict) -> None:
    """Every optional part left out: no sublayers, skip effect, run or columns in the atlas;
    no Sun et al., Gu et al. or inspector in the diagnostics; no paired bootstrap."""
    for name in ("sublayers", "skip_effect", "run", "columns", "meta"):
        d["atlas"].pop(name)
    for name in list(d["diagnostics"]):
        if name.startswith(("sun_", "gu_", "gu64_", "massive_m")) or name == "inspector":
            d["diagnostics"].pop(name)
    d.pop("paired")


def _text(d: dict) -> None:
    """Links and images in every free text field a section holds."""
    d["command"] = f"deffcore measure {IMAGE} {SCRIPT}"
    d["diagnostics"]["meta"].update(model=IMAGE, architecture=SCRIPT)
    d["diagnostics"]["created"] = SCRIPT
    d["atlas"]["skip_effect"]["meta"]["passages_rule"] = IMAGE
    d["atlas"]["sublayers"]["kind"] = SCRIPT
    d["atlas"]["meta"] = {"note": IMAGE}


def _other(d: dict) -> None:
    """A stale diagnostics format (never read), a paired bootstrap of one key, digits as seeds."""
    d["diagnostics"]["format"] = 2
    d["diagnostics"]["sun_share"] = "not read: another format"
    p = d["paired"]
    for name in ("keys", "points", "profiles"):
        p[name] = p[name][:1]
    d["measurement"]["random_null"]["results"]["default"]["seeds"] = [1, "2", 3, "4", 5]


VARIANTS = {"nulls": _nulls, "bare": _bare, "text": _text, "other": _other}


def open_page(page: str, view: Run) -> AppTest:
    from explorer.views import VIEW_KEY

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    at.session_state[VIEW_KEY] = view
    at.run()
    at.switch_page(page)
    return at.run()


def variant(name: str) -> Run:
    data = copy.deepcopy(GOOD)
    VARIANTS[name](data)
    view = Run.from_snapshot(data, "their run.json")  # accepted by the schema
    view.source = "shared"
    return view


@pytest.mark.parametrize("name", list(VARIANTS))
def test_every_page_reads_an_accepted_variant_of_each_section(name, no_model):
    view = variant(name)
    shown = {}
    for page in PAGES:
        at = open_page(page, view)
        assert not at.exception, (name, page, [e.value for e in at.exception])
        shown[page] = at
    assert not no_model
    # each section is read, not skipped: the atlas's numbers, the diagnostics' caption
    assert "Phase point" in [m.label for m in shown["pages/16_Depth_use.py"].metric]
    bos = [plain(c.value) for c in shown["pages/4_BOS_and_controls.py"].caption]
    read = any("eager-attention pass over the first" in c for c in bos)
    assert read == (name != "other")  # a stale format is never read


def test_a_stored_value_in_a_bos_caption_is_text_not_markdown(no_model):
    """An image link and a `javascript:` link in a stored field reach the BOS page's captions
    as their literal text (`safe_text.md_escape`): the schema types Gu et al.'s counts, and
    the captions escape whatever they are handed."""
    view = variant("text")
    # past the schema (a field it might not type): the caption itself must not render it
    view.data["diagnostics"].update(gu_passages=IMAGE, gu_min_length=SCRIPT)
    at = open_page(PAGES[0], view)
    assert not at.exception, [e.value for e in at.exception]
    gu = [c.value for c in at.caption if "Sink₀.₃ over all blocks" in plain(c.value)]
    source = [c.value for c in at.caption if "eager-attention pass" in plain(c.value)]
    assert gu and source
    for shown in (gu[0], source[0]):
        assert IMAGE in plain(shown) and SCRIPT in plain(shown)
        assert IMAGE not in shown and SCRIPT not in shown  # escaped: no image, no link
        assert "\\!\\[x\\]\\(http" in shown and "\\[click\\]\\(javascript" in shown
