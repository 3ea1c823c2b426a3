"""Every page walked with hostile labels: text is text everywhere.

The current run is a shared run whose model, dataset and command are markup a colleague could
send (Markdown image and link, emphasis, raw HTML, a LaTeX formula, a colour directive, a
Plotly template field, a spreadsheet formula), and the cache holds a run of a dataset file
named the same way. On every page, every string any element carries is checked:

- Markdown-bearing text (bodies, labels, help, radio options): wherever the payload appears
  it is `md_escape`d, so it renders as its characters (checked again with markdown-it);
- Plotly figures (titles, trace names, categories, hover texts, templates, customdata): the
  payload carries no `<`, `>` or `%` of its own (`plotly_text`: entities);
- nothing raises, and the Runs page still draws every control.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from deffcore.core.safe_text import md_escape

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted(p.name for p in (REPO / "pages").glob("*.py"))
#: Starts with EVIL and ends with END, so each occurrence can be found and judged whole.
#: No "/" in it: it is also a file name.
PAYLOAD = (
    "EVIL![b](x.png) *bold* <b>html <img src=x onerror=alert(1)> [link](x) $x^2$ "
    ":red[red] %{x} =HYPERLINK(1)END"
)
ESCAPED = md_escape(PAYLOAD)
#: Element fields that are plain text in the browser, never Markdown.
PLAIN_FIELDS = {"id", "form_id", "value", "default", "placeholder", "code_text", "data", "url"}
PLAIN_FIELDS |= {"file_name"}
#: Widgets whose options are plain text (a select box's list), by proto type.
PLAIN_OPTION_TYPES = ("Selectbox", "MultiSelect")


@pytest.fixture(scope="module")
def hostile(cache_dir):
    """A shared run with the payload in its spec (opened first by every session) and a cached
    run of a dataset file whose name is the payload."""
    import os

    from deffcore.runs.measure import measure
    from deffcore.views.run import DEFAULT_RUN_PATH
    from deffcore.views.sharing import APP_RUN_ENV, save_shared

    data = json.loads(DEFAULT_RUN_PATH.read_text())
    data["spec"].update(model=PAYLOAD, dataset=f"hf:{PAYLOAD}:train")
    data["measurement"].update(model=PAYLOAD)
    data["command"] = f"python -m deffcore measure --model '{PAYLOAD}'"
    view = save_shared(json.dumps(data).encode(), name="hostile.json")
    folder = cache_dir.parent / "data"
    folder.mkdir(exist_ok=True)
    path = folder / f"{PAYLOAD}.txt"
    path.write_text("\n\n".join(f"Passage {i} says something, {i * 7} times." for i in range(10)))
    measure(model="tiny-llama", dataset=str(path), n=8, max_tokens=16)
    os.environ[APP_RUN_ENV] = view.sha256[:16]
    yield view
    os.environ.pop(APP_RUN_ENV, None)


def _strings(node, path=()):
    """(path, string) of every string in a protobuf message or a JSON value."""
    if hasattr(node, "ListFields"):
        for field, value in node.ListFields():
            yield from _strings(value, (*path, field.name))
    elif isinstance(node, str):
        yield path, node
    elif isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, (*path, k))
    elif isinstance(node, list | tuple) or type(node).__name__.startswith("Repeated"):
        for i, v in enumerate(node):
            yield from _strings(v, (*path, i))


def _elements(node):
    """Every element of an AppTest tree (depth first)."""
    children = getattr(node, "children", None)
    if isinstance(children, dict):
        for child in children.values():
            yield from _elements(child)
    elif getattr(node, "proto", None) is not None:
        yield node


def _occurrences(text: str) -> list[str]:
    return [text[m.start() :] for m in re.finditer("EVIL", text)]


def markdown_violations(at: AppTest) -> list[str]:
    bad = []
    for el in _elements(at._tree):
        kind = type(el.proto).__name__
        if kind in ("PlotlyChart", "Arrow", "ArrowNamedDataFrame", "Code"):
            continue
        for path, text in _strings(el.proto):
            plain_options = kind in PLAIN_OPTION_TYPES and "options" in path
            if path and (path[-1] in PLAIN_FIELDS or plain_options):
                continue
            for rest in _occurrences(text):
                if not (rest.startswith(ESCAPED) or ESCAPED.startswith(rest)):
                    bad.append(f"{kind}.{'.'.join(map(str, path))}: {text[:200]!r}")
    return bad


def plotly_violations(at: AppTest) -> list[str]:
    bad = []
    for el in at.get("plotly_chart"):
        fig = json.loads(el.proto.spec)
        fig.get("layout", {}).pop("meta", None)  # the CSV's identity: never rendered
        for path, text in _strings(fig):
            for rest in _occurrences(text):
                shown = rest.split("END", 1)[0]
                if re.search(r"[<>%]", shown):
                    bad.append(f"figure {'.'.join(map(str, path))}: {text[:200]!r}")
    return bad


def rendered_markup(at: AppTest) -> list[str]:
    """Markdown bodies holding the payload, rendered as a browser would (markdown-it): no
    image, link, emphasis or tag may come of it."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    bad = []
    for kind in ("markdown", "caption", "error", "warning", "info", "success", "subheader"):
        for el in getattr(at, kind):
            if "EVIL" in el.value:
                html = md.render(el.value)
                if re.search(r"<img|<a |<em>|<b>html", html):
                    bad.append(f"{kind}: {html[:200]}")
    return bad


#: Pages that show the current run's label: the payload must be on them (the walk bites).
SHOWS_THE_RUN = {"0_Overview.py", "6_Baselines.py", "7_Runs.py", "13_Models.py"}


def shown_escaped(at: AppTest) -> int:
    return sum(ESCAPED in text for el in _elements(at._tree) for _, text in _strings(el.proto))


@pytest.mark.parametrize("page", PAGES)
def test_every_page_shows_hostile_labels_as_text(hostile, page):
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    at.run()
    at.switch_page(f"pages/{page}").run()
    assert not at.exception, [e.value for e in at.exception]
    if page in SHOWS_THE_RUN:
        assert shown_escaped(at) > 0
    assert markdown_violations(at) == []
    assert plotly_violations(at) == []
    assert rendered_markup(at) == []
    if page == "7_Runs.py":  # no page bricked: every section drew
        keys = {getattr(w, "key", None) for w in at.button}
        assert {"runs_open_button", "runs_shared_delete_button", "runs_delete_button"} <= keys


def test_an_error_naming_a_run_shows_its_label_as_text():
    """`guarded(what)` puts `what` (e.g. "Run <label>") in its error box: escaped too."""

    def script():
        import streamlit as st  # noqa: F401 (AppTest runs this function's body as the page)

        from explorer.guard import guarded
        from tests.app.test_hostile_labels import PAYLOAD

        with guarded(f"Run {PAYLOAD}"):
            raise RuntimeError(PAYLOAD)
        with guarded(f"Run {PAYLOAD}"):
            raise MemoryError

    at = AppTest.from_function(script).run()
    assert len(at.error) == 2 and not at.exception
    assert markdown_violations(at) == [] and rendered_markup(at) == []
    assert all(ESCAPED in e.value for e in at.error)
