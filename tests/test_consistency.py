"""One run, one answer: every surface says the same BOS answer and trust (SPEC section 11.6).

For six runs (the shipped default, a fresh tiny-model run measured by the CLI, a run whose
paired bootstrap the BOS page drew, one the Overview drew, opened there first, a shared file
with a stored bootstrap and one without), the BOS page's and the Overview's text, the HTML
report (`deffcore report`), `measure --json` / `bos --json` (where the run's states are at
hand) and the notebook repr carry the same verdict, Δ, interval and trust level: each
surface's answer sentence and trust are read off what it shows and compared, never
recomputed here.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from apptest_helpers import assert_clean, plain
from streamlit.testing.v1 import AppTest

from deffcore.cli.main import main
from deffcore.work import jobs

REPO = Path(__file__).resolve().parents[1]
PAGE = "pages/4_BOS_and_controls.py"
RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 16, "max_tokens": 32, "bos": "none"}
_ARGS = ["--model", "tiny-llama", "--dataset", "bbc-news", "--n", "16", "--max-tokens", "32"]
_ARGS += ["--bos", "none"]  # position 0 varies: no_pos0 is a control of its own
_QUESTION = "Is the gap a position-0 artefact?"


@pytest.fixture(autouse=True)
def _no_earlier_tasks():
    """Tasks are named by the run's key: each test starts from an empty registry."""
    jobs.forget_finished()


def _facts(sentence: str, trust: str | None) -> dict:
    """What an answer claims, read from its words: the verdict, Δ, the interval, paired or
    not, and the trust level of its numbers."""
    sentence = " ".join(sentence.split())
    verdicts = {
        "not_artefact": ("Not a BOS artefact", "not a position-0 artefact"),
        "masks": ("Position 0 hides part of the gap", "position 0 hides part"),
        "artefact": ("A BOS artefact", "a position-0 artefact"),
        "cannot_tell": ("Cannot tell yet", "cannot tell yet"),
    }
    said = [v for v, words in verdicts.items() if any(w in sentence for w in words)]
    numbers = re.findall(r"[+-]\d+\.\d+", sentence)
    return {
        "verdict": said[0] if said else None,
        "numbers": numbers[:3],
        "paired": "unpaired" not in sentence,
        "sentence": sentence,
        "trust": trust,
    }


def _page(ref: str | None, wait_paired: bool = False, page: str | None = PAGE) -> dict:
    """The BOS page's answer box and its trust badge, the run opened by its URL reference
    (page=None: the Overview's, the app's first page, never switched away from)."""
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300)
    if ref:
        at.query_params["run"] = ref
    at.run()
    if page is not None:
        at.switch_page(page)
        at.run()
    assert_clean(at)
    if wait_paired:
        from deffcore.statistics.bos_answer import ANSWER_B

        status = jobs.task_job(f"paired:{ref.split(':', 1)[1]}:cka:{ANSWER_B}")
        assert status is not None, "the page drew no paired bootstrap"
        done = jobs.wait(status.job_id, timeout=300)
        assert done.state == "done", done.error
        at.run()
        at.run()
        assert_clean(at)
    boxes = (*at.success, *at.warning, *at.info)
    (box,) = [plain(e.value) for e in boxes if _QUESTION in e.value]
    texts = [plain(e.value) for e in (*at.markdown, *at.caption)]
    texts += [str(getattr(e, "proto", "")) for e in at.get("badge")]
    trust = [m.group(1) for t in texts if (m := re.search(r"Trust of the two numbers: (\w+)", t))]
    return {**_facts(box.split(_QUESTION, 1)[1], trust[0] if trust else None), "text": texts}


def _report(ref: str, tmp_path: Path) -> dict:
    """`deffcore report RUN`'s answer box, read from the HTML."""
    out = tmp_path / "report.html"
    assert main(["report", ref, "-o", str(out), "--no-progress"]) == 0
    page = out.read_text()
    box = re.search(r'<div class="box[^"]*"><b>The BOS answer:</b>(.*?)</div>', page, re.S)
    assert box, "the report has no BOS answer"
    text = html.unescape(box.group(1))
    trust = re.search(r"Trust of the two numbers: (\w+)", text)
    return _facts(text.split("Trust of the two numbers")[0], trust.group(1) if trust else None)


def _cli(command: str, capsys: pytest.CaptureFixture, *extra: str) -> dict:
    """`deffcore measure|bos ... --json`'s position0_answer."""
    capsys.readouterr()
    assert main([command, *_ARGS, *extra, "--json", "--no-progress"]) == 0
    a = json.loads(capsys.readouterr().out)["position0_answer"]
    return _facts(a["sentence"], a["trust"])


def _notebook(view) -> dict:
    """The notebook repr's BOS answer line."""
    text = html.unescape(re.sub(r"<[^>]+>", " ", view._repr_html_()))
    m = re.search(re.escape(_QUESTION) + r"(.*?)Trust of the two numbers: (\w+)", text, re.S)
    assert m, "the notebook repr has no BOS answer"
    return _facts(m.group(1), m.group(2))


def _same(surfaces: dict[str, dict]) -> None:
    (first, want), *rest = surfaces.items()
    assert want["verdict"] is not None, want
    for name, got in rest:
        for field in ("verdict", "numbers", "paired", "trust"):
            assert got[field] == want[field], (field, first, want, name, got)


def _cached_view(key: str):
    from deffcore.views.run import Run

    return Run.from_measurement(jobs.load_result(key))  # a fresh Measurement: what is stored


def test_the_shipped_default_says_one_answer_everywhere(tmp_path):
    from deffcore.views.run import load_snapshot

    view = load_snapshot()
    surfaces = {
        "page": _page(None),
        "report": _report(view.key, tmp_path),
        "notebook": _notebook(load_snapshot()),
    }
    _same(surfaces)
    assert surfaces["page"]["paired"] and "the same control" not in surfaces["page"]["sentence"]


def test_a_fresh_run_says_one_paired_answer_everywhere(tmp_path, capsys):
    """measure --bootstrap 20 --json pairs the answer and keeps its bootstrap with the run:
    bos --json (no --bootstrap), the page, the report and the notebook, each reading the run
    back from the cache, answer from the same 20 replicates, not from a draw of their own."""
    from deffcore.extraction import cache as entries

    surfaces = {"measure": _cli("measure", capsys, "--no-anytime", "--bootstrap", "20")}
    (key,) = [r["key"] for r in entries.list_runs() if r.get("status") == "complete"]
    surfaces["bos"] = _cli("bos", capsys)
    surfaces["page"] = _page(f"cached:{key}")
    surfaces["report"] = _report(key, tmp_path)
    surfaces["notebook"] = _notebook(_cached_view(key))
    _same(surfaces)
    assert surfaces["measure"]["paired"] and "the same control" not in surfaces["bos"]["sentence"]
    assert any("same B = 20 multisets" in t for t in surfaces["page"]["text"])


def test_a_run_nobody_paired_says_one_paired_answer_everywhere(tmp_path, capsys):
    """A cached run without a paired bootstrap: the report (the first to ask) draws the
    answer's (ANSWER_B) and keeps it; bos --json, the page and the notebook say the same."""
    from deffcore.runs.measure import measure
    from deffcore.statistics.bos_answer import ANSWER_B

    key = measure(**RUN, seed=0).spec.key()
    surfaces = {"report": _report(key, tmp_path)}
    surfaces["bos"] = _cli("bos", capsys)
    surfaces["page"] = _page(f"cached:{key}")
    surfaces["notebook"] = _notebook(_cached_view(key))
    _same(surfaces)
    assert surfaces["report"]["paired"]
    assert any(f"same B = {ANSWER_B} multisets" in t for t in surfaces["page"]["text"])


def test_a_run_paired_by_the_page_keeps_its_answer(tmp_path, capsys):
    """The page draws the paired bootstrap in the background; a report, `bos --json` and the
    notebook made later (in another process: from the cache) carry the same answer."""
    from deffcore.runs.measure import measure

    m = measure(**RUN, seed=0)
    key = m.spec.key()
    surfaces = {"page": _page(f"cached:{key}", wait_paired=True)}
    surfaces["report"] = _report(key, tmp_path)
    surfaces["bos"] = _cli("bos", capsys)
    surfaces["notebook"] = _notebook(_cached_view(key))
    _same(surfaces)
    assert surfaces["page"]["paired"] and "the same control" not in surfaces["page"]["sentence"]


def test_a_run_opened_on_the_overview_first_says_one_paired_answer_everywhere(tmp_path, capsys):
    """A run measured and nobody paired, the Overview opened before the BOS page: the Overview
    draws the paired bootstrap (ANSWER_B, in the background) as the BOS page does and shows
    its paired answer; the BOS page, a report, `bos --json` and the notebook made later (from
    the cache) carry the same answer from the same replicates."""
    from deffcore.runs.measure import measure
    from deffcore.statistics.bos_answer import ANSWER_B

    key = measure(**RUN, seed=0).spec.key()
    surfaces = {"overview": _page(f"cached:{key}", wait_paired=True, page=None)}
    surfaces["page"] = _page(f"cached:{key}")
    surfaces["report"] = _report(key, tmp_path)
    surfaces["bos"] = _cli("bos", capsys)
    surfaces["notebook"] = _notebook(_cached_view(key))
    _same(surfaces)
    assert surfaces["overview"]["paired"], surfaces["overview"]
    assert any(f"same B = {ANSWER_B} multisets" in t for t in surfaces["overview"]["text"])


def _shared(data: dict, tmp_path: Path) -> dict:
    from deffcore.views.run import Run
    from deffcore.views.sharing import save_shared

    body = json.dumps(data).encode()
    path = tmp_path / "shared.json"
    path.write_bytes(body)
    view = save_shared(body)
    return {
        "page": _page(f"shared:{view.sha256[:16]}"),
        "report": _report(str(path), tmp_path),
        "notebook": _notebook(Run.from_snapshot(data)),
    }


def _snapshot(tmp_path: Path, capsys: pytest.CaptureFixture) -> dict:
    """A tiny run's snapshot made with a paired bootstrap (`measure --bootstrap 20 --snapshot`),
    its cache entry deleted: the app and the report know it only from the file."""
    from deffcore.extraction import cache as entries

    path = tmp_path / "made.json"
    args = ["--seed", "1", "--bootstrap", "20", "--no-anytime", "--snapshot", str(path)]
    assert main(["measure", *_ARGS, *args, "--no-progress"]) == 0
    capsys.readouterr()
    data = json.loads(path.read_text())
    entries.delete(data["key"])
    return data


def test_a_shared_file_with_a_bootstrap_says_its_paired_answer(tmp_path, capsys):
    data = _snapshot(tmp_path, capsys)
    assert data["paired"]["B"] == 20
    surfaces = _shared(data, tmp_path)
    _same(surfaces)
    assert surfaces["page"]["paired"]
    assert any("same B = 20 multisets" in t for t in surfaces["page"]["text"])  # its own B


def test_a_shared_file_without_a_bootstrap_says_unpaired_everywhere(tmp_path, capsys):
    data = _snapshot(tmp_path, capsys)
    data.pop("paired")
    data["measurement"].pop("bootstrap")
    surfaces = _shared(data, tmp_path)
    _same(surfaces)
    assert not surfaces["page"]["paired"], surfaces["page"]
    assert "holds no states" in surfaces["page"]["sentence"]


def test_a_notebook_asking_trust_first_gets_the_trust_its_view_shows():
    """In a notebook, `m.trust()` asked before the run is shown is the trust the view shows
    after (the answer's paired bootstrap is drawn once, by whichever asks first, and kept with
    the run); a snapshot written before either carries that bootstrap, so the file opened
    elsewhere answers and trusts as the run does."""
    from deffcore.runs.measure import measure
    from deffcore.views.run import Run

    m = measure(**RUN, seed=0)
    first = m.trust()
    shown = m._repr_html_()
    later = m.trust()
    assert first == later and first.interval is not None  # paired: the bootstrap interval
    assert f"Trust: {html.escape(first.badge)}" in shown

    m = measure(**RUN, seed=1)
    data = json.loads(json.dumps(m.view().to_snapshot()))  # written before anything asked
    assert "paired" in data
    opened = Run.from_snapshot(data)
    _same({"live": _notebook(m.view()), "file": _notebook(opened)})
    assert _notebook(opened)["paired"]
    assert opened.trust().level == m.trust().level
    assert opened.trust().error == pytest.approx(m.trust().error, abs=1e-5)
