"""AppTest of the app's security promises: one resolved path is what gets opened,
`DEFF_LOCAL_PATHS=off` also covers `hf:` specs, visitors never see the
server's upload path and user text is never rendered as Markdown, and a degenerate control
is a sentence, not a traceback.

"Rendered as Markdown" is checked the way a browser would see it: every Markdown-bearing
element's body is rendered with markdown-it (CommonMark) and must hold no link, image, emphasis
or HTML tag that came from the user's text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from apptest_helpers import plain
from streamlit.testing.v1 import AppTest

REPO = Path(__file__).resolve().parents[2]
HOSTILE = "![b](http://127.0.0.1:9/x.png) *bold* <b>html</b> [link](http://x) $x^2$ :red[red]"
MARKDOWN_KINDS = ("error", "warning", "info", "success", "caption", "markdown", "subheader")


@pytest.fixture(autouse=True)
def deff_cache_dir(cache_dir, monkeypatch):
    monkeypatch.setenv("DEFF_CACHE_DIR", str(cache_dir))
    return cache_dir


def new_app() -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    at.session_state["_deff_run_wait_s"] = 0
    at.run()
    at.switch_page("pages/7_Runs.py").run()  # the run panel's one page
    at.radio(key="model_source").set_value("Packaged (offline)").run()
    at.selectbox(key="model_packaged").set_value("tiny-llama")
    at.number_input(key="n").set_value(8)
    at.number_input(key="max_tokens").set_value(16)
    return at.run()


def bodies(at: AppTest) -> list[str]:
    """The raw Markdown body of every element Streamlit renders as Markdown."""
    out = []
    for kind in MARKDOWN_KINDS:
        out += [e.value for e in getattr(at, kind)]
    out += [e.value for e in at.sidebar.caption] + [e.value for e in at.sidebar.error]
    return out


def rendered_tags(body: str) -> set[str]:
    """HTML tags markdown-it makes of `body` (besides the paragraph around it)."""
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").enable("strikethrough").render(body)
    return set(re.findall(r"<([a-z0-9]+)", html)) - {"p"}


def test_md_escape_leaves_no_markup_and_reads_as_the_text():
    from deffcore.core.safe_text import md_escape

    for text in (HOSTILE, "# heading", "1. item", "- item", "> quote", "`code`", "a\\b",
                 "x\n===", "<script>alert(1)</script>", "&amp; &lt;", "~~gone~~"):  # fmt: skip
        escaped = md_escape(text)
        assert rendered_tags(escaped) == set(), (text, escaped)
        assert plain(escaped) == text
    assert rendered_tags(HOSTILE) >= {"img", "em", "a"}  # without escaping it would render


def test_an_uploaded_csv_header_is_not_markdown_and_the_upload_path_is_never_shown(
    no_model, cache_dir
):
    at = new_app()
    at.radio(key="data_source").set_value("Upload a file").run()
    csv = f'"{HOSTILE}",other\n"one passage",1\n"two",2\n'.encode()
    at.file_uploader(key="data_upload").set_value(("bad.csv", csv, "text/csv")).run()
    at.button(key="run").click().run()
    shown = bodies(at)
    errors = [plain(e.value) for e in at.error]
    assert any("has no column 'text'" in e and "bad.csv" in e for e in errors), errors
    hostile = [body for body in shown if "127.0.0.1" in plain(body)]
    assert hostile, shown
    for body in hostile:  # the header is shown as the text it is: no image fetched, no link
        assert rendered_tags(body) == set(), body
    for body in shown:
        assert ".uploads" not in body and str(cache_dir) not in body, body
    assert no_model == []


def test_a_relative_path_is_opened_inside_the_allowed_folder_only(no_model, tmp_path, monkeypatch):
    cwd, allowed = tmp_path / "server-cwd", tmp_path / "allowed"
    cwd.mkdir()
    allowed.mkdir()
    (cwd / "leak.csv").write_text("SECRET_HEADER,x\nsecret,1\n")
    (cwd / "leak.txt").write_text("\n\n".join(f"Secret passage {i} of the cwd." for i in range(9)))
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("DEFF_LOCAL_PATHS", str(allowed))
    at = new_app()
    at.radio(key="data_source").set_value("Local file").run()
    for name in ("leak.csv", "leak.txt"):
        at.text_input(key="data_path").set_value(name).run()
        at.button(key="run").click().run()
        text = " ".join(plain(b) for b in bodies(at))
        assert "SECRET" not in text and "does not exist" in text, text
        assert str(allowed.resolve() / name) in text
    assert no_model == [] and "_deff_job" not in at.session_state


def test_paths_off_refuses_an_hf_spec_naming_a_local_folder(no_model, tmp_path, monkeypatch):
    monkeypatch.setenv("DEFF_LOCAL_PATHS", "off")
    (tmp_path / "data").mkdir()
    at = new_app()
    at.radio(key="data_source").set_value("Hugging Face dataset").run()
    for spec in (f"hf:{tmp_path / 'data'}:train", "hf:./data:train", "hf:csv:train"):
        at.text_input(key="data_hf").set_value(spec).run()
        errors = [plain(e.value) for e in at.main.error]  # the run panel: on the Runs page
        assert len(errors) == 1 and ("DEFF_LOCAL_PATHS=off" in errors[0] or
                                     "file readers" in errors[0]), errors  # fmt: skip
        at.button(key="run").click().run()
    assert no_model == [] and "_deff_job" not in at.session_state


def test_a_degenerate_control_is_a_sentence_on_the_pages(tmp_path):
    from deffcore.runs.measure import measure
    from deffcore.views.run import Run
    from explorer import views

    path = tmp_path / "the.txt"
    path.write_text("\n\n".join(f"The item {i} was in the news on day {i}." for i in range(10)))
    m = measure(model="tiny-llama", dataset=str(path), n=8, max_tokens=16)
    assert m.undefined("first_non_bos") is not None
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    at.session_state[views.VIEW_KEY] = Run.from_measurement(m)
    at.run()
    at.switch_page("pages/4_BOS_and_controls.py").run()
    assert not at.exception, [e.value for e in at.exception]
    captions = [plain(c.value) for c in at.caption]
    assert any("first_non_bos is undefined for this run" in c for c in captions), captions
    at.radio(key="pooling").set_value("first_non_bos").run()
    at.switch_page("pages/1_Similarity.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("undefined" in plain(w.value) for w in at.warning)


def test_the_runs_pages_shared_label_is_not_markdown(tmp_path, monkeypatch):
    """The Runs page's intro names what every listed run shares (here the dataset's file
    name, which the visitor chose): shown as its text, never as Markdown."""
    import explorer.views
    from deffcore.runs.measure import measure

    monkeypatch.setenv("DEFF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(explorer.views, "load_gallery", lambda: [])  # only the two runs below
    explorer.views.precomputed_runs.clear()
    name = "![b](x.png) *bold* <img src=x> [link](x).txt"  # no "/": a file name
    path = tmp_path / name
    path.write_text(
        "\n\n".join(f"Passage {i} says something else, {i * 7} times." for i in range(12))
    )
    for n in (8, 9):
        measure(model="tiny-llama", dataset=str(path), n=n, max_tokens=16)
    try:
        at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
        at.run()
        at.switch_page("pages/7_Runs.py").run()
        assert not at.exception, [e.value for e in at.exception]
        intro = [b for b in bodies(at) if "all of them" in b]
        assert intro and name in plain(intro[0]), bodies(at)
        assert rendered_tags(intro[0]) == {"strong"}, intro[0]  # the page's own **precomputed**
    finally:
        explorer.views.precomputed_runs.clear()
