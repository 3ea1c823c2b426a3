"""Tables of one run's numbers that the pages show beside their charts (DataFrames, no Streamlit).

A *view* is a `deffcore.snapshot.RunView`: a measured run or a shipped snapshot, both answering
`headline(pooling, metric, K)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from deffcore.errors import DeffError

if TYPE_CHECKING:
    from deffcore.snapshot import RunView

#: The two similarity metrics the first page compares, with their names in words.
METRICS_COMPARED: tuple[tuple[str, str], ...] = (
    ("cka", "linear CKA"),
    ("unbiased_cka", "unbiased CKA"),
)


def metric_comparison(
    view: RunView, pooling: str = "default", K: int | None = None
) -> pd.DataFrame | None:
    """D_eff, D_eff/L, gap and rho_hat(1) under linear and unbiased CKA side by side (the first
    screen's answer to "is this the finite-sample bias?"); None when a snapshot lacks one."""
    rows = []
    for metric, name in METRICS_COMPARED:
        try:
            h = view.headline(pooling, metric, K)
        except (KeyError, DeffError):
            return None
        rows.append(
            {
                "similarity": name,
                "D_eff": round(h.deff, 3),
                "D_eff / L": round(h.deff_over_L, 4),
                "gap to F_L (%)": round(h.gap_pct, 1),
                "ρ̂(1)": round(h.rho1, 3),
            }
        )
    return pd.DataFrame(rows)
