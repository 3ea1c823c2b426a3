"""rho(k) against k beside the orthogonal-update reference and the iid-bias floor; D_eff(K)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import streamlit as st

from deffcore import figures
from deffcore.core.constants import SENSITIVITY_LAGS
from deffcore.core.safe_text import md_escape  # user text shown as text, not Markdown
from deffcore.views.run import Run
from explorer.cards import show_run_figure
from explorer.page import OVERVIEW_TABS, require_view
from explorer.settings import Settings


def floor_note(view: Run, rho: np.ndarray, metric: str) -> str:
    """What the drawn bias floor means here (and why none is drawn for other metrics)."""
    floor = view.d_model / (view.n + view.d_model)
    if metric != "cka":
        return (
            f"No bias floor is drawn: d/(N+d) is linear CKA's finite-sample bias, and {metric} "
            "does not have it."
        )
    if bool(np.any(rho < floor)):
        return (
            f"Long-dashed: d/(N+d) = {floor:.3g}, what linear CKA gives two *unrelated* layers "
            f"of isotropic data at N = {view.n}, d = {view.d_model}. Part of the measured "
            "profile lies below it: real states are far from isotropic (a few directions carry "
            "most of the variance), so their bias is smaller, and d/(N+d) is only a rough upper "
            "bound here. More passages (N ≫ d) or the unbiased_cka metric remove the question."
        )
    return (
        f"Dotted: d/(N+d) = {floor:.3g}, the similarity linear CKA gives unrelated layers of "
        "isotropic data at this N and d (the finite-sample bias)."
    )


def lag_section(view: Run, settings: Settings) -> None:
    pooling, metric = settings.pooling, settings.metric
    rho = view.lag_profile(pooling, metric)
    # d/(N+d) is linear CKA's finite-sample bias for isotropic data: it means nothing for the
    # unbiased estimator or for cosine, so it is drawn for linear CKA only.
    biased = metric == "cka"
    show_run_figure(
        figures.lag_decay(rho, n=view.n if biased else None, d=view.d_model if biased else None),
        view.spec,
        "lag_decay",
        pooling=pooling,
        metric=metric,
    )
    st.caption(
        "Dashed grey: accumulated equal-size orthogonal updates, S(i, j) = min(i, j)/max(i, j), "
        "whose effective depth is F_L = 2L/(L+1). " + floor_note(view, rho, metric)
    )


def k_section(view: Run, settings: Settings) -> None:
    """D_eff/L against the maximum lag K, and its values at the usual lags."""
    pooling, metric = settings.pooling, settings.metric
    by_K = view.deff_over_L_by_K(pooling, metric)
    L = view.layers
    K_now = settings.K or L - 1
    show_run_figure(
        figures.deff_vs_K(by_K, L=L, K=K_now),
        view.spec,
        "deff_vs_K",
        pooling=pooling,
        metric=metric,
    )
    st.caption(
        f"Dotted: the maximum lag K = {K_now} of the headline cards (the sidebar's K slider). "
        "Dashed: F_L/L, which does not depend on K."
    )
    Ks = sorted({K for K in SENSITIVITY_LAGS if K < L} | {K_now, L - 1})
    table = pd.DataFrame(
        {
            "maximum lag K": Ks,
            "D_eff / L": [by_K[K] for K in Ks],
            "D_eff": [by_K[K] * L for K in Ks],
        }
    ).drop_duplicates("maximum lag K")
    st.dataframe(
        table,
        hide_index=True,
        column_config={
            "D_eff / L": st.column_config.NumberColumn(format="%.4f"),
            "D_eff": st.column_config.NumberColumn(format="%.3f"),
        },
    )


def main() -> None:
    ctx = require_view("Lag decay", tabs=OVERVIEW_TABS, measures=True)
    if ctx is None:
        st.stop()
    view, settings = ctx
    st.caption(f"{md_escape(view.label)} · {settings.metric} · pooling {settings.pooling}")
    st.latex(
        r"\rho(k) = \frac{1}{L-k}\sum_{i=1}^{L-k} S(i, i+k), \qquad "
        r"D_\mathrm{eff}(K) = \frac{L}{1 + 2\sum_{k=1}^{K} (1 - k/L)\,\rho(k)}"
    )
    lag_section(view, settings)
    k_section(view, settings)


main()
