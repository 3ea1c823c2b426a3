"""A run as one HTML file (deffcore.views.run_report, `deffcore report`): self-contained, complete,
and a colleague's text in it stays text.

The file is parsed with the standard library's HTML parser: every tag that could fetch
something (script src, link, iframe, img/source/embed/object with a URL, CSS url()/@import)
is looked for outside plotly.js's own inlined code; the figures are counted as plotly divs.
"""

from __future__ import annotations

import copy
import html
import json
import re
import shlex
from html.parser import HTMLParser
from pathlib import Path

import pytest
from shipped_helpers import shipped_view

from deffcore.cli.main import build_parser, main
from deffcore.views.run_report import remake_command, report_html

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


class Fetches(HTMLParser):
    """Every URL the page would fetch by itself, and its plotly divs and scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.fetches: list[str] = []
        self.plots = 0
        self.scripts: list[dict] = []
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.scripts.append(a)
        if tag in ("link", "iframe", "frame", "embed", "object"):
            self.fetches.append(f"<{tag}>")
        for name in ("src", "href", "data", "srcset", "poster"):
            value = a.get(name) or ""
            if tag != "a" and re.match(r"\s*(https?:)?//", value):
                self.fetches.append(f"<{tag} {name}={value}>")
        if "plotly-graph-div" in (a.get("class") or ""):
            self.plots += 1
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.styles.append(data)


def figures_of(page: str) -> list[list]:
    """The (data, layout) of every `Plotly.newPlot("id", data, layout, config)` in the page."""
    decoder, out = json.JSONDecoder(), []
    for m in re.finditer(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*", page):
        data, end = decoder.raw_decode(page, m.end())
        layout, _ = decoder.raw_decode(page, re.match(r",\s*", page[end:]).end() + end)
        out.append([data, layout])
    return out


def strings(node, key: str = "") -> list[str]:
    """Every string plotly may draw in a figure's JSON (not its `meta` data)."""
    if key == "meta":
        return []
    if isinstance(node, dict):
        return [t for k, v in node.items() for t in strings(v, k)]
    if isinstance(node, list):
        return [t for v in node for t in strings(v, key)]
    return [node] if isinstance(node, str) else []


def parsed(page: str) -> Fetches:
    p = Fetches()
    p.feed(page)
    return p


@pytest.fixture
def in_cache(shipped_run, monkeypatch):
    monkeypatch.setenv("DEFF_CACHE_DIR", str(shipped_run["cache"]))
    return shipped_run


def _report(tmp_path: Path, run: str, *extra: str) -> tuple[int, str]:
    out = tmp_path / "report.html"
    code = main(["report", run, "-o", str(out), *extra])
    return code, out.read_text(encoding="utf-8") if out.exists() else ""


def test_the_report_fetches_nothing_and_holds_plotly_itself(in_cache, tmp_path):
    code, page = _report(tmp_path, str(in_cache["path"]))
    assert code == 0
    p = parsed(page)
    assert p.fetches == []  # no <script src>, <link>, iframe, no URL in src/href/data
    assert all("src" not in s for s in p.scripts)  # every script inline: plotly.js too
    assert not any(re.search(r"url\(|@import", css) for css in p.styles)
    assert "cdn.plot.ly/plotly" not in page and "Plotly.newPlot" in page
    assert re.search(r"plotly\.js v\d", page)  # the library's own banner: it is inlined
    # heatmap, lag, gap with the paper, controls, null band, massive, sinks
    assert p.plots == 7


def test_the_report_says_what_the_pages_say(in_cache, tmp_path):
    from deffcore.lenses.run_extras import snapshot_bos_on_off
    from deffcore.statistics.bos_answer import position0_answer_for

    view = shipped_view(in_cache["data"], "shared")
    _, page = _report(tmp_path, str(in_cache["path"]))
    text = html.unescape(re.sub(r"<[^>]+>", " ", page))
    h = view.headline("default", "cka")
    for number in (f"{h.deff:.3f}", f"{h.deff_over_L:.4f}", f"{h.gap_pct:+.1f}%"):
        assert number in text
    trust = view.trust("default", "cka")
    assert trust.sentence() in text and "To make it solid" in text
    assert position0_answer_for(view, "cka").sentence in text
    assert snapshot_bos_on_off(view, "cka", None)["conclusion"] in text
    assert "(paper)" in page  # the paper's models beside the run
    assert in_cache["data"]["command"] in text
    assert "Passage bootstrap" in text and "Random-weight null over seeds 1, 2" in text
    assert "From one eager-attention pass over the first 16 passages" in text


def test_a_colleagues_labels_and_command_are_text(shipped_run, tmp_path, monkeypatch):
    monkeypatch.setenv("DEFF_CACHE_DIR", str(tmp_path / "empty_cache"))
    data = copy.deepcopy(shipped_run["data"])
    data["spec"]["model"] = f"tiny-llama{HOSTILE}"
    data["spec"]["dataset"] = f"news{HOSTILE}.txt"
    data["command"] = f"python -m deffcore measure </pre>{HOSTILE}"
    sent = tmp_path / "from_a_colleague.json"
    sent.write_text(json.dumps(data))
    code, page = _report(tmp_path, str(sent))
    assert code == 0
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "onerror=alert(1)&gt;" in page  # shown, escaped
    p = parsed(page)
    assert p.fetches == [] and all("src" not in s for s in p.scripts)
    # in the figures too: plotly draws a label's HTML, so every text it draws is escaped (the
    # run's identity in `meta` is data for the downloads, never drawn)
    drawn = [t for fig in figures_of(page) for t in strings(fig)]
    assert any("&lt;script&gt;alert" in t for t in drawn)  # the label is there, as text
    assert not any("<script" in t or "<img" in t for t in drawn)


def test_a_cached_key_reports_the_stored_run(in_cache, tmp_path):
    key = in_cache["data"]["key"]
    code, page = _report(tmp_path, key)
    assert code == 0
    assert "stored beside the run" in page  # its diagnostics: read from its cache entry
    assert "--random-seeds" not in remake_command(in_cache["data"]["spec"])
    assert "python -m deffcore measure --model tiny-llama" in page


def test_refusals_are_one_sentence_and_touch_nothing(in_cache, tmp_path, capsys):
    snap = in_cache["path"]
    assert main(["report", "nothing-like-a-run", "-o", str(tmp_path / "r.html")]) == 2
    assert "neither a snapshot file nor" in capsys.readouterr().err
    assert main(["report", "", "-o", str(tmp_path / "r.html")]) == 2  # not '.', the folder
    assert "RUN '' is neither a snapshot file nor" in capsys.readouterr().err
    assert main(["report", str(snap), "-o", str(snap)]) == 2  # never over its input
    assert "is the RUN file" in capsys.readouterr().err
    target = tmp_path / "elsewhere.html"
    target.write_text("keep me")
    link = tmp_path / "link.html"
    link.symlink_to(target)
    assert main(["report", str(snap), "-o", str(link)]) == 2  # never through a link
    assert target.read_text() == "keep me"
    assert main(["report", str(snap), "-o", str(tmp_path)]) == 2  # a folder
    assert main(["report", str(snap), "-o", str(tmp_path / "r.html"), "--K", "99"]) == 2


def test_the_command_remakes_the_run_field_by_field():
    spec = {"model": "my model's/ft", "dataset": "hf:x:train:text", "n": 64, "max_tokens": 32,
            "seed": 3, "passages": "packed", "bos": "none", "intervention": "no_post",
            "revision": "v1.0", "dtype": "bfloat16"}  # fmt: skip
    command = remake_command(spec, random_seeds=(1, 2), bootstrap=10, extras=["--diagnostics"])
    words = shlex.split(command)
    assert words[:3] == ["python", "-m", "deffcore"]
    args = build_parser().parse_args(words[3:])
    for field, value in spec.items():
        assert getattr(args, field) == value, field
    assert (args.random_seeds, args.bootstrap, args.diagnostics) == ("1,2", 10, True)
    plain = remake_command({**spec, "passages": "documents", "bos": "default", "revision": None})
    assert "--passages" not in plain and "--bos" not in plain and "--revision" not in plain
    assert "--dtype bfloat16" in plain  # always: the CLI's default depends on the device


def test_report_html_without_extras_says_so(shipped_run):
    view = shipped_view({k: v for k, v in shipped_run["data"].items()
                         if k not in ("diagnostics", "bos_on_off")})  # fmt: skip
    page = report_html(view)
    assert "The BOS answer was not computed" in page and "Not computed for this run" in page
    assert parsed(page).plots == 5


def test_the_command_says_what_it_wrote(in_cache, tmp_path, capsys):
    """`report --json` is one JSON object on stdout (the file, its size, what it holds); without
    --json one line naming the file and the run (the result tail of every command)."""
    out = tmp_path / "r.html"
    assert main(["report", str(in_cache["path"]), "-o", str(out), "--json", "--no-progress"]) == 0
    said = json.loads(capsys.readouterr().out)
    assert said["output"] == str(out) and said["bytes"] == out.stat().st_size
    assert said["diagnostics"] is True and said["bos_on_off"] is True  # the stand-in has both
    assert main(["report", str(in_cache["path"]), "-o", str(out), "--no-progress"]) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"wrote {out} (") and line.endswith(f"MB): {said['run']}")
