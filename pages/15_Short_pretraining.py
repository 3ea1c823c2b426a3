"""Short-pretraining norm probes (paper Table S8): a small Gemma-3 trained from random init."""

from __future__ import annotations

from typing import Any

import streamlit as st
import torch

from deffcore.inputs.interventions import PAPER_LABELS
from deffcore.labs import lens_figures, lens_tables
from deffcore.labs.pretrain import PRESETS, pretrain_probe, settings_from, stored_probes
from explorer.cards import show_figure
from explorer.guard import guarded
from explorer.page import page
from explorer.progress import run_in_page
from explorer.tables import show_table

VARIANTS = ("none", "no_post", "no_qk", "no_post_no_qk")


def differs(s: dict[str, Any]) -> str:
    """What differs from the paper's Table S8, for the probe settings `s` (a preset's or a
    trained probe's `settings`): its model, data, budget and loss units."""
    byte = s["tokenizer"] == "byte"
    vocabulary = "a byte vocabulary of 259" if byte else "Gemma-3's 262k vocabulary"
    tokens = s["iters"] * s["batch_size"] * s["block_size"]
    return (
        f"What differs from the paper: the model ({s['layers']} blocks, d = {s['hidden']}, "
        f"{vocabulary}; the paper: Gemma-3-270M, 18 blocks, d = 640, 262k vocabulary), the "
        f"data (BBC news, not FineWeb-Edu), the budget ({tokens / 1e6:.2g}M tokens per run; "
        "the paper's short budget is not stated)"
        + (
            " and the loss units (per byte, not per Gemma token: the validation loss columns "
            "do not compare)."
            if byte
            else "."
        )
        + " The `gpu` preset has Gemma-3-270M's shape and tokenizer."
    )


def describe(s: dict[str, Any]) -> str:
    """One line for a probe's settings."""
    return (
        f"{s['layers']}-block Gemma-3, d = {s['hidden']}, {s['tokenizer']} tokens · "
        f"{s['iters']} steps × {s['batch_size']} × {s['block_size']} tokens · "
        f"{len(s['seeds'])} seed(s) · {', '.join(s['variants'])}"
    )


def probe_label(result: dict[str, Any]) -> str:
    return f"{describe(result['settings'])} · {result['seconds']:.0f} s"


#: How long each preset takes as shipped (the 2-core reference machine).
PRESET_TIME = {"tiny": "seconds", "cpu": "several minutes on 2 cores, about 15 under load",
               "gpu": "Gemma-3-270M's shape, on a GPU"}  # fmt: skip


#: The knobs a preset sets (their widgets' keys).
KNOBS = ("pt_variants", "pt_seeds", "pt_iters", "pt_eval")


def _knobs_to_preset() -> None:
    """Choosing a preset sets its knobs: a keyed widget keeps its value when its default
    changes, so without this "tiny" would train the cpu preset's 4 × 3 × 300 steps."""
    for key in KNOBS:
        st.session_state.pop(key, None)


def train_form() -> None:
    """The preset and its knobs; Train runs the probes in this script run (stored after)."""
    presets = [p for p in PRESETS if p != "gpu" or torch.cuda.is_available()]
    c1, c2, c3 = st.columns(3)
    preset = c1.selectbox(
        "Preset", presets, index=presets.index("cpu"), key="pt_preset",
        on_change=_knobs_to_preset,
        help="tiny: seconds (a smoke test) · cpu: several minutes on 2 cores (about 15 under "
        "load) · gpu: Gemma-3-270M's shape, needs CUDA",
    )  # fmt: skip
    base = PRESETS[preset]
    variants = c2.multiselect("Norm interventions", VARIANTS, default=list(base.variants),
                              format_func=PAPER_LABELS.get, key="pt_variants")  # fmt: skip
    seeds = c3.number_input("Seeds", 1, 8, len(base.seeds), key="pt_seeds")
    c4, c5 = st.columns(2)
    iters = c4.number_input("Training steps", 2, 100_000, base.iters, key="pt_iters")
    every = c5.number_input("Evaluate every", 1, 10_000, base.eval_interval, key="pt_eval")
    st.caption(
        "Training runs in this page: stay here until it finishes (leaving stops it). A "
        "finished probe is stored and shown on every later visit, also one trained with "
        "`python -m deffcore pretrain`."
    )
    what = (
        f"{len(variants)} variant(s) × {int(seeds)} seed(s), {int(iters)} steps ({preset} "
        "preset)"
    )  # its own small Gemma-3s from random weights, not the current run: said in the button
    work = len(variants) * int(seeds) * int(iters)
    shipped = len(base.variants) * len(base.seeds) * base.iters
    st.caption(
        f"Estimate: {work / shipped:.2g}× the work of the {preset} preset as shipped "
        f"({PRESET_TIME.get(preset, 'time not measured')})."
    )
    if st.button(f"Train: {what}", type="primary", key="pt_run"):
        with guarded("The pretraining probe"):
            s = settings_from(preset, variants=tuple(v for v in VARIANTS if v in variants),
                              seeds=tuple(range(int(seeds))), iters=int(iters),
                              eval_interval=int(every))  # fmt: skip
            run_in_page(
                "The pretraining probe", "pt_result",
                lambda progress: pretrain_probe(s, progress=progress),
                done=lambda r: "read from the store" if r.cached else f"done in {r.seconds:.0f} s",
            )  # fmt: skip
            if st.session_state.get("pt_result") is not None:  # the stored list shows it
                st.session_state["pt_stored"] = probe_label(st.session_state["pt_result"])


def choose_result() -> dict[str, Any] | None:
    """A stored probe (the newest, or the one just trained, by default)."""
    trained = st.session_state.get("pt_result")
    stored = {probe_label(d): d for d in (r.to_dict() for r in stored_probes())}
    if not stored:
        return trained
    label = st.selectbox("Stored probes", list(stored), key="pt_stored")
    if trained is not None and probe_label(trained) == label:
        return trained  # as trained here: "trained in ... s", not "read from the store"
    return stored[label]


def results_section(result: dict[str, Any]) -> None:
    s = result["settings"]
    st.caption(
        describe(s)
        + f" · {result['tokens_per_run']:,} tokens per run · "
        + ("read from the store" if result["cached"] else f"trained in {result['seconds']:.0f} s")
    )
    identity = {"lab": "pretrain", "L": s["layers"], "d": s["hidden"], "steps": s["iters"],
                "seeds": len(s["seeds"])}  # fmt: skip
    show_figure(lens_figures.pretrain_trajectories(result["records"]), "trajectories", identity)
    st.subheader("Final step: mean over seeds, beside the paper's Table S8")
    frame = lens_tables.pretrain_beside_paper(result["final"])
    formats = {c: f for c, f in lens_tables.PRETRAIN_FORMATS.items() if c in frame}
    show_table(frame.style.format(formats, na_rep="—"), hide_index=True, key="pt_table")
    st.caption(differs(s))


def main() -> None:
    page("Short pretraining", uses_metric=False)
    st.title("Short pretraining (Table S8)")
    st.markdown(
        "Does a Gemma-style model trained briefly from random weights already show the "
        "pretrained Gemma's anomaly (a gap to F_L that flips sign between default and "
        "token-normed pooling)? A small Gemma-3 is trained under each norm variant (the norms "
        "removed throughout training and measurement) and several seeds; at every evaluation "
        "the gap to F_L of every pooling control, the position-0 norm ratio and the "
        "validation loss are measured on fixed probe windows."
    )
    train_form()
    result = choose_result()
    if result is None:
        st.info("No probe yet: press **Train** (the paper's Table S8 is below).")
        st.subheader("Paper, Table S8: Gemma-3-270M on FineWeb-Edu (display only)")
        show_table(lens_tables.paper_table_s8(), hide_index=True, key="pt_paper")
        preset = st.session_state.get("pt_preset", "cpu")
        st.caption(differs(PRESETS[preset].to_dict()))
        return
    results_section(result)


main()
