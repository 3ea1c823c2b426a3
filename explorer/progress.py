"""In-page progress: a bar for a computation this script run waits for (the labs, the BOS
comparison, the random-weight null), unlike the background runs of `explorer.run_panel`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import streamlit as st

from explorer.guard import guarded

#: measure's progress(done, total, stage)
Progress = Callable[[int, int, str], None]


def progress_callback(bar: Any) -> Progress:
    """measure's progress(done, total, stage) -> the bar's fraction, stage and ETA."""
    start = time.monotonic()

    def progress(done: int, total: int, stage: str) -> None:
        frac = min(max(done / total, 0.0), 1.0) if total else 0.0
        elapsed = time.monotonic() - start
        eta = f" · ETA {elapsed * (total - done) / done:.0f} s" if done and total > done else ""
        bar.progress(frac, text=f"{stage}: {done}/{total}{eta}")

    return progress


def run_in_page(
    what: str,
    state_key: str,
    compute: Callable[[Progress], Any],
    *,
    done: Callable[[Any], str] = lambda result: "done",
) -> None:
    """Run `compute(progress)` under a progress bar and keep its `to_dict()` in the session
    under `state_key` (the page draws it from there on every rerun). A failure is one message
    (`guarded(what)`) and keeps nothing; `done(result)` is the bar's last text."""
    bar = st.progress(0.0, text="starting")
    with guarded(what):
        result = compute(progress_callback(bar))
        st.session_state[state_key] = result.to_dict()
        bar.progress(1.0, text=done(result))
