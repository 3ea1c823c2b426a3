"""AppTest of `explorer.background.follow_task`, the one way a page follows a background task:
its bar while the task runs, the page run again exactly once when it lands (never on every
poll, never again for a job that landed on an earlier run), a failure in one sentence.

The script counts its own runs in the session; the tasks are real `jobs.start_task` tasks
held by an event, so the test decides when each lands.
"""

from __future__ import annotations

import threading
import uuid

from apptest_helpers import plain
from streamlit.testing.v1 import AppTest

from deffcore.core.errors import DeffError
from deffcore.work import jobs

#: A landed task that reruns the page on every run would loop until this timeout.
TIMEOUT_S = 20


def _page(name: str, failed: str) -> None:
    import streamlit as st

    from explorer.background import follow_task

    st.session_state["runs"] = st.session_state.get("runs", 0) + 1
    follow_task(name, "Testing the helper", failed=failed)


def _held_task(fail: bool = False) -> tuple[str, threading.Event]:
    gate = threading.Event()

    def work(progress, should_stop):
        progress(1, 4, "counting")
        gate.wait(60)
        if fail:
            raise DeffError("The test task found nothing to count.")
        return {"ok": True}

    name = f"follow-test:{uuid.uuid4().hex}"
    jobs.start_task(name, work)
    return name, gate


def _land(name: str, gate: threading.Event) -> None:
    gate.set()
    assert jobs.wait(jobs.task_job(name).job_id, timeout=60).finished


def _runs(at: AppTest) -> int:
    before = at.session_state.get("runs", 0)
    at.run(timeout=TIMEOUT_S)
    assert not at.exception, at.exception
    return at.session_state["runs"] - before


def test_a_landed_task_reruns_the_page_once_and_never_again():
    name, gate = _held_task()
    at = AppTest.from_function(_page, args=(name, ""), default_timeout=TIMEOUT_S)
    try:
        assert _runs(at) == 1  # running: one run, its bar
        assert next(p.text for p in at.get("progress")).startswith("Testing the helper: ")
    finally:
        _land(name, gate)
    assert _runs(at) == 2  # landed: this run, then the page once more
    assert not at.get("progress")
    assert _runs(at) == 1  # landed on an earlier run: never rerun for again
    assert _runs(at) == 1


def test_a_failure_is_one_sentence_and_no_rerun():
    name, gate = _held_task(fail=True)
    at = AppTest.from_function(_page, args=(name, "The test task"), default_timeout=TIMEOUT_S)
    _runs(at)
    _land(name, gate)
    assert _runs(at) == 1  # said here: a rerun would start the task again
    assert [plain(e.value) for e in at.error] == [
        "The test task failed: The test task found nothing to count."
    ]


def test_a_failure_without_its_subject_reruns_once_for_the_page_to_say_it():
    name, gate = _held_task(fail=True)
    at = AppTest.from_function(_page, args=(name, ""), default_timeout=TIMEOUT_S)
    _runs(at)
    _land(name, gate)
    assert _runs(at) == 2 and not at.error
    assert _runs(at) == 1
