"""rho(k) against k beside the orthogonal-update reference and the iid-bias floor; D_eff(K)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

import ui_common as ui
from deffcore import figures
from deffcore.constants import SENSITIVITY_LAGS

ctx = ui.require_view("Lag decay")
if ctx is None:
    st.stop()
view, settings = ctx
st.caption(f"{view.label} · {settings.metric} · pooling {settings.pooling}")
st.latex(
    r"\rho(k) = \frac{1}{L-k}\sum_{i=1}^{L-k} S(i, i+k), \qquad "
    r"D_\mathrm{eff}(K) = \frac{L}{1 + 2\sum_{k=1}^{K} (1 - k/L)\,\rho(k)}"
)
rho = view.lag_profile(settings.pooling, settings.metric)
biased = settings.metric == "cka"  # the d/(N+d) floor is linear CKA's finite-sample bias
ui.show_figure(
    figures.lag_decay(rho, n=view.n if biased else None, d=view.d_model if biased else None),
    key="lag_decay",
)
st.caption(
    "Dashed: accumulated equal-size orthogonal updates, S(i, j) = min(i, j)/max(i, j), whose "
    "effective depth is F_L = 2L/(L+1). "
    + (
        "Dotted: the similarity linear CKA gives unrelated layers at this N and d, d/(N+d)."
        if biased
        else f"No bias floor is drawn: d/(N+d) is linear CKA's, not {settings.metric}'s."
    )
)
by_K = view.deff_over_L_by_K(settings.pooling, settings.metric)
L = view.layers
K_now = settings.K or L - 1
ui.show_figure(figures.deff_vs_K(by_K, L=L, K=K_now), key="deff_vs_K")
st.caption(
    f"Dotted: the maximum lag K = {K_now} of the headline cards (the sidebar's K slider). "
    "Dashed: F_L/L, which does not depend on K."
)
Ks = sorted({K for K in SENSITIVITY_LAGS if K < L} | {K_now, L - 1})
table = pd.DataFrame(
    {"K": Ks, "D_eff/L": [by_K[K] for K in Ks], "D_eff": [by_K[K] * L for K in Ks]}
).drop_duplicates("K")
st.dataframe(
    table,
    hide_index=True,
    column_config={
        "D_eff/L": st.column_config.NumberColumn(format="%.4f"),
        "D_eff": st.column_config.NumberColumn(format="%.3f"),
    },
)
