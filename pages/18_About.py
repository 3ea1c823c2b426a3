"""About and methods: what D_eff is in five sentences, and where the docs say the rest."""

from __future__ import annotations

import streamlit as st

from explorer.page import page

#: (document in docs/, what it says): named as text, never as a link the app would render.
DOCS: list[tuple[str, str]] = [
    ("docs/SPEC.md", "every number's definition: D_eff, F_L, ρ(k), the trust levels"),
    ("docs/guides/browsing-models.md", "this app, page by page, and measuring a model"),
    ("docs/guides/teaching.md", "the Teach page's story, step by step"),
    ("docs/guides/bos-sensitivity.md", "the BOS check: is the gap a position-0 artefact?"),
    ("docs/results.md", "the shipped numbers and how far they can be trusted"),
    ("docs/cli.md", "the same measurements from the command line"),
]

ABOUT = (
    "Effective depth asks how many independent layers a transformer's residual stream is "
    "worth. Each layer's states (one pooled vector per passage) are compared with every other "
    "layer's by linear CKA, giving an L × L similarity matrix S; D_eff = L² / Σ S_ij. Layers "
    "that all say the same thing give D_eff = 1, fully independent ones give L, and a residual "
    "stream built from equal-size orthogonal updates gives exactly F_L = 2L/(L+1) (SPEC "
    "section 4). A positive gap to F_L means more redundancy across depth than such "
    "updates; the BOS check asks whether that gap comes from the first token alone."
)


def main() -> None:
    page("About and methods", uses_metric=False)
    st.title("About and methods")
    st.text(ABOUT)
    st.subheader("The docs")
    st.dataframe(
        {"document": [d for d, _ in DOCS], "what it says": [w for _, w in DOCS]},
        hide_index=True,
    )
    st.caption(
        "The docs ship with the code (the repository's docs/ folder); `mkdocs serve` shows "
        "them as a site."
    )


main()
