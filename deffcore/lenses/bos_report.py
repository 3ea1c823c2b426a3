"""The `bos` command's JSON object: a run's controls, its diagnostics, the verdict and the trust."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from deffcore.statistics.verdict import verdict_for


def bos_report(
    measurement: Any,
    diagnostics: Mapping[str, Any],
    metric: str | None = None,
    bootstrap: int | None = None,
) -> dict[str, Any]:
    """The `bos` command's JSON object (see `python -m deffcore bos --help`).

    Each result names the control it is identical to for this run (`identical_to`, else None);
    `trust` is the default pooling's trust (`deffcore.statistics.trust_rule.measurement_trust`,
    with a `bootstrap`-replicate interval when given).
    """
    from deffcore.core.constants import POOLINGS
    from deffcore.measures.depth import reference_depth
    from deffcore.statistics.trust_rule import measurement_trust

    metric = metric or measurement.metric
    verdict = verdict_for(measurement, diagnostics, metric)
    results = {}
    for p in POOLINGS:
        s = measurement.summary(p, metric)
        results[p] = {
            "deff": s.deff,
            "deff_over_L": s.deff_over_L,
            "gap_pct": s.gap_pct,
            "rho1": s.rho1,
            "identical_to": "default" if p in verdict.identical else None,
        }
    ratio, layer = measurement.pos0_peak()
    spec = measurement.spec
    keys = ("massive_ratio", "massive_position", "massive_dim", "massive_onset", "sun_share")
    keys += ("sun_position", "sun_onset", "sink_fraction", "sink_baseline", "sink_passages")
    keys += ("sink_min_length", *GU_REPORT_KEYS)
    return {
        "model": spec.model,
        "dataset": spec.dataset,
        "n": measurement.n,
        "n_requested": spec.n,
        "max_tokens": spec.max_tokens,
        "seed": spec.seed,
        "passages": spec.passages,
        "bos": spec.bos,
        "adds_bos": (diagnostics.get("meta") or {}).get("adds_bos"),
        "metric": metric,
        "key": spec.key(),
        "layers": measurement.layers,
        "reference_FL": float(reference_depth(measurement.layers)),
        "diagnostic_passages": diagnostics["n_passages"],
        **{k: diagnostics.get(k) for k in keys},
        "pos0_norm_ratio": {
            "max": ratio,
            "layer": layer,
            "per_layer": np.asarray(measurement.pooled.pos0_norm_ratio, dtype=float).tolist(),
        },
        "results": results,
        "verdict": verdict.sentence,
        "verdict_detail": verdict.to_dict(),
        "trust": measurement_trust(measurement, "default", metric, bootstrap=bootstrap).to_dict(),
        "cached": {"run": bool(measurement.cached), "diagnostics": bool(diagnostics["cached"])},
    }


#: Gu et al.'s fields `bos --json` carries (the (L, H) rates stay in the diagnostics file).
GU_REPORT_KEYS: tuple[str, ...] = (
    "gu_sink_fraction", "gu_sink_metric", "gu_baseline", "gu64_sink_fraction",
    "gu64_sink_metric", "gu64_baseline", "gu_passages", "gu_threshold", "gu_min_length",
)  # fmt: skip
