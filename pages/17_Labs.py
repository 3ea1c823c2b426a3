"""Labs: one picker leading to the seven labs (each its own page, registered hidden in app.py,
its URL kept): what each asks, and a link to it."""

from __future__ import annotations

import streamlit as st

from explorer.page import page, page_links

#: (page file, title, what it asks), in the order the picker lists them.
LABS: list[tuple[str, str, str]] = [
    ("8_Interventions.py", "Interventions", "Gemma's norms switched off: does D_eff move?"),
    ("9_Pruning_boundary.py", "Pruning boundary", "block influence against ΔD_eff per layer"),
    ("10_Residual_carry.py", "Residual carry", "train small γ-carry GPTs and measure them"),
    ("11_Training_dynamics.py", "Training dynamics", "D_eff over a model's checkpoints"),
    ("12_Aggregations.py", "Aggregations", "other ways to count a run's layers"),
    ("14_Correlation_lab.py", "Correlation lab", "D_eff/L against pruning and benchmarks"),
    ("15_Short_pretraining.py", "Short pretraining", "norm variants trained from scratch"),
]


def main() -> None:
    page("Labs", uses_metric=False)
    st.title("Labs")
    st.caption(
        "Each lab runs its own experiment with the model and data chosen on the Runs page "
        "(or the shipped run's); pick one."
    )
    for file, title, asks in LABS:
        with st.container(border=True):
            page_links([(f"pages/{file}", title)])
            st.caption(asks)


main()
