"""The planner's line under Run: what the run will cost here, before it starts (SPEC 14).

The sidebar calls `plan_caption(settings)` under Run: "cached — opens at once" when this
machine's cache holds the run already, else the planner's line
(`deffcore.runs.planner.plan_run` with a cached calibration only: drawing the sidebar never loads
a model), and a button that measures this machine's speed when no calibration exists yet. User
text (model names) is shown as plain text, never Markdown.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from deffcore.core.safe_text import md_escape

#: The line for settings this machine has measured already.
CACHED_LINE = "Plan: cached — opens at once"


@st.cache_data(ttl=30, show_spinner=False)
def _plan(fields: tuple, device: str) -> dict[str, Any] | None:
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.runs.planner import plan_run

    try:
        spec = RunSpec(*fields)
        return plan_run(spec, device, calibrate="cached").to_dict()
    except Exception:  # a half-typed model or dataset: the Run click says what is wrong
        return None


def _spec_fields(settings: Any) -> tuple[tuple, str] | None:
    from deffcore.inputs.model import resolve_device_dtype

    if not settings.model or not settings.dataset:
        return None
    try:
        device, dtype = resolve_device_dtype(None, None)
    except Exception:  # no device to plan for: no line
        return None
    fields = (
        settings.model,
        settings.revision,
        settings.dataset,
        int(settings.n),
        int(settings.max_tokens),
        int(settings.seed),
        dtype,
        "none",
        settings.passages,
        settings.bos,
    )
    return fields, device


def short_plan(plan: dict[str, Any]) -> str:
    """The plan in a sidebar's width: time here, peak memory, disk (the full line on hover)."""
    from deffcore.runs.planner import human_bytes, human_time

    if not plan["fits"]:
        return f"Will not fit: {plan['refusal']}"
    parts = [f"Plan: {plan['tokens']:,} tokens"]
    seconds = plan["seconds"]
    parts.append("time unknown" if seconds is None else f"about {human_time(seconds)} here")
    peaks = [b for b in (plan.get("memory_bytes") or {}).values() if b is not None]
    if peaks and plan.get("disk_bytes") is not None:
        parts += [f"peak {human_bytes(max(peaks))}", f"cache {human_bytes(plan['disk_bytes'])}"]
        if plan.get("assemble_bytes"):  # the packaged file joined into the cache first
            parts[-1] += f" + model file {human_bytes(plan['assemble_bytes'])}"
    else:  # a model whose size is not known before it loads (a hub id offline, say)
        parts.append("memory unknown")
    return " · ".join(parts)


def is_cached(fields: tuple) -> bool:
    """Whether this machine's cache holds the complete run of these settings (read afresh on
    every draw: a run that just landed says so at once)."""
    from deffcore.extraction import cache
    from deffcore.inputs.run_spec import RunSpec

    try:
        cache.load_meta(RunSpec(*fields).key())
    except Exception:  # absent, interrupted, damaged or a half-typed field: not cached
        return False
    return True


def plan_caption(settings: Any) -> None:
    """The planner's line under Run (module docstring)."""
    from deffcore.runs.planner import human_bytes

    found = _spec_fields(settings)
    if found and is_cached(found[0]):
        st.caption(
            CACHED_LINE,
            help="This machine's cache holds this run: Run reads it back, no model loads.",
        )
        return
    plan = _plan(*found) if found else None
    if plan is None:
        return
    st.caption(md_escape(short_plan(plan)), help=md_escape(plan["line"]))
    untimed = plan["fits"] and plan["seconds"] is None and plan["size"] is not None
    help_text = (
        "Loads the model and times a few small batches (seconds to a minute); the plan then "
        "says how long a run takes here."
    )
    if plan.get("assemble_bytes"):
        help_text += (
            f" It first joins the model's file ({human_bytes(plan['assemble_bytes'])}) "
            "into the cache folder."
        )
    if untimed and st.button("Measure this machine's speed", key="plan_calibrate", help=help_text):
        _calibrate(found[0], found[1])


def _calibrate(fields: tuple, device: str) -> None:
    from deffcore.extraction.cache import batch_rows
    from deffcore.runs import calibration

    model, revision, _, _, max_tokens, _, dtype = fields[:7]
    with st.spinner("Timing a few batches…"):
        try:
            calibration.calibrate(
                model,
                revision=revision,
                device=device,
                dtype=dtype,
                max_tokens=max_tokens,
                batch=batch_rows(max_tokens, device),
            )
        except Exception as err:  # the model cannot load here: say so, keep the page
            st.error(f"Could not time this model here ({type(err).__name__}): {err}")
            return
    _plan.clear()
    st.rerun()
