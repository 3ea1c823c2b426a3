"""The BOS answer's box on a page, and its paired bootstrap in the background (SPEC 11.6, 15).

`answer_box(view, metric, K)` is what the BOS page and the Overview show: the run's one answer
(`deffcore.statistics.bos_answer.run_answer`, verdict first), its trust, "How this was
decided". A run measured here has no paired bootstrap until one is drawn: `ensure_paired`
starts it (`deffcore.work.jobs.start_task`) through the answer's own draw
(`bos_answer.answer_bootstrap_of`, of every pooling the run defines: `ANSWER_B` replicates,
the run's seed, the metric and its stand-in), memoised on the run and kept with its cache
entry, so the page's next run, the other page, the report, the CLI and the notebook read the
same replicates. Meanwhile the box shows the unpaired answer, said as such, and
`explorer.background.follow_task` its bar; a snapshot carries its own (or none:
`measure --bootstrap B --snapshot` stores one). A surface: no answer logic here.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from deffcore.core.safe_text import md_escape
from deffcore.statistics.bos_answer import (
    ANSWER_B,
    QUESTION,
    Position0Answer,
    answer_bootstrap_of,
    answer_method,
    answer_trust_line,
    held,
    run_answer,
)
from deffcore.work import jobs
from explorer.background import follow_task

#: The paired bootstrap's bar says what it draws.
PAIRING = f"Pairing the interval (one bootstrap of every pooling, B = {ANSWER_B})"
#: Answer boxes by verdict: a clear "no" is good news, a "yes" a warning, the rest neutral.
ANSWER_BOX = {"not_artefact": "success", "artefact": "warning"}


def answer_box(view: Any, metric: str, K: int | None) -> Position0Answer:
    """The run's BOS answer as a page shows it (module docstring); returns it, so the page's
    other lines say the same Δ. Paired when the run holds its bootstrap; a live run without
    one draws it in the background and the box is paired when it lands."""
    pairing = ensure_paired(view, metric)
    answer = run_answer(view, metric, K, draw=False)  # drawn in the background
    say = getattr(st, ANSWER_BOX.get(answer.verdict, "info"))
    say(f"**{QUESTION}** {md_escape(answer.sentence)}")  # a dataset's name may be in it
    if answer.trust:
        st.badge(answer_trust_line(answer.trust).rstrip("."))
    with st.expander("How this was decided"):
        st.caption(md_escape(answer_method(answer)))
    if pairing is not None:  # the page reruns once it lands, so the answer is paired
        follow_task(pairing, PAIRING, failed="The paired bootstrap")
    return answer


def _name(view: Any, metric: str) -> str:
    return f"paired:{view.measurement.spec.key()}:{metric}:{ANSWER_B}"


def ensure_paired(view: Any, metric: str) -> str | None:
    """The background task's name while the view's run lacks a paired bootstrap under
    `metric` (started here when needed); None when it has one or is not a live run."""
    m = view.measurement
    if m is None or held(view.paired_bootstrap(), metric, stand_in=True):  # SPEC 15
        return None
    name = _name(view, metric)
    last = jobs.task_job(name)
    if last is None or (last.finished and last.state != "done"):

        def work(progress: Any, should_stop: Any) -> dict[str, Any]:
            pb = answer_bootstrap_of(m, metric, every_pooling=True, progress=progress)
            return {"B": pb.B, "poolings": sorted({p for p, _ in pb.profiles})}

        jobs.start_task(name, work, model=m.spec.model)
    elif last.finished:  # done: the run holds it now (the same Measurement)
        answer_bootstrap_of(m, metric, every_pooling=True)  # memoised: the view's now
        return None
    return name
