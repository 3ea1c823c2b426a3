"""Training dynamics (paper Figure 3): gap to F_L and D_eff/L over checkpoints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from deffcore.core.errors import DeffError
from deffcore.core.files import cache_dir
from deffcore.core.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.inputs.serving import check_local_path
from deffcore.labs import figures
from deffcore.labs.dynamics import dynamics_sweep, hf_revisions, local_checkpoints
from deffcore.views.glossary import human_columns
from explorer.cards import show_figure
from explorer.page import page
from explorer.progress import run_in_page
from explorer.settings import Settings

SOURCES = ("Residual-carry checkpoints", "Local checkpoint folder", "Hugging Face revisions")


def carry_run_picker() -> str | None:
    """One of the residual-carry runs saved in the cache (None when there is none yet)."""
    carry_root = cache_dir() / "carry"
    runs = (
        sorted(str(p) for p in carry_root.glob("*/*") if p.is_dir()) if carry_root.exists() else []
    )
    if not runs:
        st.info("No residual-carry checkpoints yet: train on the Residual carry page first.")
        return None
    return st.selectbox(
        "Run",
        runs,
        key="dy_carry_run",
        format_func=lambda p: str(Path(p).relative_to(carry_root)),  # "tiny/gamma1_seed0"
        help="Residual-carry checkpoints saved by the Residual carry page (in the cache).",
    )


def checkpoints_of(source: str) -> Any:
    """The source's widgets -> a function that lists its checkpoints (run when measuring)."""
    if source == SOURCES[0]:  # one of our own residual-carry runs under the cache folder
        folder = carry_run_picker()
        return lambda: local_checkpoints(folder or "")
    if source == SOURCES[1]:  # a folder the user typed: the serving policy applies
        typed = st.text_input(
            "Folder of checkpoints (save_pretrained sub-folders)", key="dy_folder"
        )
        return lambda: local_checkpoints(
            check_local_path(typed or "", what="checkpoint folder") if typed else ""
        )
    model = st.text_input("Hugging Face id", "EleutherAI/pythia-160m", key="dy_model")
    revisions = st.text_input(
        "Revisions (comma-separated)", "step1000,step8000,step64000,step143000", key="dy_revs"
    )
    return lambda: hf_revisions(model, [r.strip() for r in revisions.split(",") if r.strip()])


def sweep_caption(checkpoints: Any, settings: Settings, n: int, max_tokens: int) -> None:
    """What measuring the checkpoints will take and write into the cache, said first (SPEC 14):
    each Hugging Face or folder checkpoint is a run with its cache entry."""
    from deffcore.inputs.model import resolve_device_dtype
    from deffcore.labs.dynamics import dynamics_cost

    try:
        listed = checkpoints()
    except DeffError:  # an empty or wrong folder: the button says why
        return
    if not settings.dataset or all(cp.kind == "carry" for cp in listed):
        return  # probed in memory: nothing written
    cost = dynamics_cost(
        listed, dataset=settings.dataset, n=n, max_tokens=max_tokens, seed=settings.seed,
        metric=settings.metric, device=resolve_device_dtype(None, None)[0],
    )  # fmt: skip
    st.caption(md_escape(f"The sweep: {cost.line()}."))


def measure_form(settings: Settings) -> bool:
    """Which checkpoints and how many passages; Measure runs the sweep. Returns log x."""
    source = st.radio("Checkpoints", SOURCES, key="dy_source", horizontal=True)
    checkpoints = checkpoints_of(source)
    c1, c2 = st.columns(2)
    n = c1.number_input("N passages / windows", 4, 10_000, 64, key="dy_n")
    max_tokens = c2.number_input("Max tokens", 2, 4096, 128, key="dy_max_tokens")
    log_x = st.checkbox("Log x axis", False, key="dy_logx")
    what = md_escape(
        f"{source} · {settings.dataset or '(no data)'} · N={int(n)} · T={int(max_tokens)} · "
        f"{settings.metric} · pooling {settings.pooling}"
    )
    sweep_caption(checkpoints, settings, int(n), int(max_tokens))
    if st.button(f"Measure checkpoints: {what}", type="primary", key="dy_run"):
        run_in_page(
            "The checkpoint sweep",
            "dy_result",
            lambda progress: dynamics_sweep(
                checkpoints(),
                dataset=settings.dataset,
                n=int(n),
                max_tokens=int(max_tokens),
                seed=settings.seed,
                metric=settings.metric,
                pooling=settings.pooling,
                progress=progress,
            ),
        )
    return log_x


def main() -> None:
    _, settings = page("Training dynamics")
    st.title("Training dynamics")
    st.markdown(
        "Measure a sequence of checkpoints and follow the gap to F_L and D_eff/L over training. "
        "Checkpoints that cannot be loaded are shown as **missing** (dotted lines), never "
        "interpolated."
    )
    log_x = measure_form(settings)
    result = st.session_state.get("dy_result")
    if result is None:
        st.info(
            "Pick the checkpoints above and press **Measure checkpoints**. Each checkpoint is "
            "measured with the sidebar's dataset, seed, metric and pooling; the gap to F_L and "
            "D_eff/L then appear here against training steps (or tokens)."
        )
        return
    chosen = result.get("settings") or {}
    identity = {
        "lab": "training-dynamics",
        "checkpoints": result.get("planned"),
        **{k: chosen.get(k) for k in ("dataset", "n", "max_tokens", "metric", "pooling")},
    }
    show_figure(figures.dynamics_plot(result, log_x=log_x), "dynamics", identity)
    table = pd.DataFrame(result["points"])[
        ["label", "step", "tokens", "status", "gap_pct", "deff_over_L", "rho1", "reason"]
    ]
    st.dataframe(human_columns(table), key="dy_table", hide_index=True)


main()
