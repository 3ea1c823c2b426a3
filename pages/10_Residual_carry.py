"""Residual-carry lab (paper Table S14, Figure S7): train small char GPTs with gamma-carry."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st
import torch

from deffcore.core.files import cache_dir
from deffcore.labs import figures
from deffcore.labs.residual_carry import (
    PRESETS,
    carry_cost,
    paper_carry_rows,
    run_carry_sweep,
    settings_from,
)
from deffcore.views.glossary import human_columns
from explorer.cards import show_figure
from explorer.page import page
from explorer.progress import run_in_page

#: How long each preset takes as shipped (BENCHMARKS.md, the 2-core reference machine).
PRESET_TIME = {"tiny": "seconds", "cpu": "a few minutes on 2 cores",
               "gpu": "nanoGPT shakespeare_char scale, on a GPU"}  # fmt: skip


def train_form() -> None:
    """The preset and its knobs; Train runs the carry sweep in this script run."""
    presets = [p for p in PRESETS if p != "gpu" or torch.cuda.is_available()]
    c1, c2, c3 = st.columns(3)
    preset = c1.selectbox(
        "Preset",
        presets,
        index=presets.index("tiny"),
        key="rc_preset",
        help="tiny: seconds · cpu: a few minutes (12 layers) · gpu: nanoGPT shakespeare_char scale",
    )
    base = PRESETS[preset]
    gammas = c2.multiselect("γ", [1.0, 0.75, 0.5, 0.25], default=list(base.gammas), key="rc_gammas")
    seeds = c3.number_input("Seeds", 1, 8, len(base.seeds), key="rc_seeds")
    c4, c5, c6 = st.columns(3)
    iters = c4.number_input("Training steps", 2, 100_000, base.iters, key="rc_iters")
    n_layer = c5.number_input("Layers", 2, 48, base.n_layer, key="rc_layers")
    eval_interval = c6.number_input("Evaluate every", 1, 10_000, base.eval_interval, key="rc_eval")
    what = (
        f"{len(gammas)} γ × {int(seeds)} seed(s), {int(n_layer)} layers, {int(iters)} steps "
        f"({preset} preset)"
    )  # what it trains (its own small GPTs, not the current run): said in the button
    work = len(gammas) * int(seeds) * int(iters) * int(n_layer)
    shipped = len(base.gammas) * len(base.seeds) * base.iters * base.n_layer
    s = settings_from(
        preset,
        gammas=tuple(sorted(gammas, reverse=True)),
        seeds=tuple(range(int(seeds))),
        iters=int(iters),
        n_layer=int(n_layer),
        eval_interval=int(eval_interval),
        checkpoint_dir=str(cache_dir() / "carry" / preset),
    )
    writes = carry_cost(s).writes()  # its checkpoints, said first (SPEC 14)
    st.caption(
        f"Estimate: {work / shipped:.2g}× the work of the {preset} preset as shipped "
        f"({PRESET_TIME.get(preset, 'time not measured')})" + (f"; {writes}." if writes else ".")
    )
    if st.button(f"Train: {what}", type="primary", key="rc_run"):
        run_in_page(
            "Training",
            "rc_result",
            lambda progress: run_carry_sweep(s, progress=progress),
            done=lambda result: f"done in {result.seconds:.0f} s",
        )


def results_section(result: dict[str, Any]) -> None:
    s = result["settings"]
    folder = Path(s["checkpoint_dir"])
    with contextlib.suppress(ValueError):  # short: relative to the cache folder when inside it
        folder = Path("<cache>") / folder.relative_to(cache_dir())
    st.caption(
        f"{s['n_layer']}-layer char GPT, d = {s['n_embd']}, {s['iters']} steps of "
        f"{s['batch_size']}×{s['block_size']} characters, {len(s['seeds'])} seed(s) · "
        f"{result['seconds']:.0f} s · checkpoints in {folder}",
        help=f"Full path: {s['checkpoint_dir']}",
    )
    identity = {
        "lab": "residual-carry",
        "L": s["n_layer"],
        "d": s["n_embd"],
        "steps": s["iters"],
        "seeds": len(s["seeds"]),
    }
    show_figure(figures.carry_trajectories(result["records"]), "carry_trajectories", identity)
    st.subheader("Final step: mean [min, max] across seeds")
    st.dataframe(figures.carry_table(result["final"]), key="rc_table", hide_index=True)


def main() -> None:
    page("Residual carry", uses_metric=False)
    st.title("Residual carry")
    st.markdown(
        "A small character-level GPT whose blocks compute **h_l = γ·h_{l−1} + block(h_{l−1})**, "
        "trained on BBC-news characters for several γ and seeds. γ = 1 is the ordinary residual "
        "stream; smaller γ forgets the accumulated past. During training the lab records the "
        "validation loss, D_eff(h)/L, D_eff(update)/L, ρ̂(1) and ||f||/||h||. Checkpoints are "
        "saved for the Training dynamics page."
    )
    train_form()
    result = st.session_state.get("rc_result")
    if result is None:
        st.info("Press **Train**. The paper's Table S14 (12-layer nanoGPT, 5000 steps) is below.")
    else:
        results_section(result)
    st.subheader("Paper, Table S14 (display only)")
    st.dataframe(human_columns(pd.DataFrame(paper_carry_rows())), key="rc_paper", hide_index=True)


main()
