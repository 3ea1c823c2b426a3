"""A run's own measured spread, read back for its trust level (stage: views).

A trust level uses the run's measured spread of D_eff/L when the run has one, never the prior
1.5 / sqrt(N) alone (SPEC 15). A run measured with `measure --bootstrap B --snapshot PATH`
carries its passage bootstrap in the snapshot's CLI JSON (`measurement.bootstrap`: point,
mean, low, high, B, samples; the default pooling under the run's metric at K = L-1). The
shipped default holds one (B = 100); a shared snapshot may hold one too, and is someone
else's file: every field is checked before it is used.

`stored_bootstrap(measurement, pooling=, metric=, point=)` returns that bootstrap when it is
the one of this headline (the pooling is `default`, the metric is the run's, and its point
agrees with the headline's D_eff/L recomputed from the similarity matrix to
`POINT_TOLERANCE`, so a bootstrap of another number is never used), else None.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deffcore.core.json_values import finite_number

#: The stored bootstrap's point must equal the headline's D_eff/L to this (relative; the
#: snapshot keeps 6 decimals of S, which moves D_eff/L by ~1e-7).
POINT_TOLERANCE = 1e-5
#: The numbers of a `BootstrapResult.to_dict()` the pages read.
NUMBERS = ("point", "mean", "low", "high", "basic_low", "basic_high", "bias", "ci")
#: The pooling `measure --bootstrap` resamples.
BOOTSTRAP_POOLING = "default"


def checked_bootstrap(boot: Any) -> dict[str, Any] | None:
    """`boot` as a plain dict when it is a well-formed bootstrap result (finite `NUMBERS`,
    low <= high, B >= 2; samples, when present, a list of finite numbers), else None."""
    if not isinstance(boot, Mapping):
        return None
    if not all(finite_number(boot.get(k)) for k in NUMBERS):
        return None
    B = boot.get("B")
    if not isinstance(B, int) or isinstance(B, bool) or B < 2 or boot["low"] > boot["high"]:
        return None
    samples = boot.get("samples")
    if samples is not None and not (isinstance(samples, list) and all(map(finite_number, samples))):
        return None
    return dict(boot)


def stored_bootstrap(
    measurement: Mapping[str, Any] | None, *, pooling: str, metric: str, point: float
) -> dict[str, Any] | None:
    """The bootstrap a run was stored with, when it is this headline's (module docstring).

    measurement: the snapshot's CLI JSON (`Run.data["measurement"]`); pooling,
    metric: the headline's; point: its D_eff/L at K = L-1.
    """
    if not isinstance(measurement, Mapping) or pooling != BOOTSTRAP_POOLING:
        return None
    if measurement.get("metric") != metric:
        return None
    boot = checked_bootstrap(measurement.get("bootstrap"))
    if boot is None or not finite_number(point):
        return None
    if abs(boot["point"] - point) > POINT_TOLERANCE * max(abs(point), 1e-12):
        return None
    return boot
