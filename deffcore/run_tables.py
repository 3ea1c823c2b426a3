"""Tables of one run's numbers that the pages show beside their charts (DataFrames, no Streamlit).

A *view* is a `deffcore.snapshot.RunView`: a measured run or a shipped snapshot, both answering
`headline(pooling, metric, K)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd

from deffcore.constants import POOLINGS
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


def cached_model_row(meta: dict[str, Any], metric: str = "cka") -> dict[str, Any]:
    """One cached run (its cache meta) as a Models-table row, numbers computed from its states.

    Raises DeffError when the entry cannot be read (corrupt, missing).
    """
    from deffcore import cache
    from deffcore.cache import RunSpec
    from deffcore.measurement import Measurement
    from deffcore.models_overview import model_family

    spec = RunSpec(**meta["spec"])
    found = cache._read_entry(meta["key"])  # by key: the stored spec's key may predate a change
    if found is None:
        raise DeffError(f"The cached run {meta['key']} has no states.")
    m = Measurement(spec=spec, pooled=found[0], metric=metric)
    row: dict[str, Any] = {
        "source": "cached",
        "model": spec.model,
        "family": model_family(spec.model),
        "weights": "random" if spec.model.startswith("random:") else "trained",
        "layers": m.layers,
        "d_model": m.d_model,
        "n": m.n,
        "max_tokens": spec.max_tokens,
        "dataset": spec.dataset,
        "intervention": spec.intervention,
        "passages": spec.passages,
        "revision": spec.revision,
        "key": meta["key"],
        "created": meta.get("created"),
    }
    for p in POOLINGS:
        s = m.summary(p)
        row[f"gap_{p}"] = s.gap_pct
        if p == "default":
            row["deff_over_L"], row["gap_pct"] = s.deff_over_L, s.gap_pct
    return row
