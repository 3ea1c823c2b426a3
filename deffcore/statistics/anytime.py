"""Estimates that sharpen as batches land: a run's headline numbers on its first k passages.

    rows = PrefixRows(n)                      # fed with each landed batch (SavedBatch)
    est = estimate(rows.pooled(256, ...))     # every pooling control, its trust, the verdict
    est.poolings["default"].gap_pct, est.poolings["default"].level, est.verdict_settled

Each estimate at k is the k-run's own numbers, not an approximation: a prefix of a window run
is that run (`deffcore.extraction.cache`).

**Which estimator is shown.** Linear CKA's finite-sample bias (about d/(N+d)) is large at small
N (N = 64 with d = 576: 0.9), so a linear-CKA number at small N says more about N than about the
model. Each pooling's estimate is the run's metric unless the calibrated trust rule's own bias
check (`Trust.bias_corrected`, from unbiased CKA) moves D_eff/L by more than SHOW_UNBIASED_REL:
then unbiased CKA is shown, with its own trust, and `PoolingEstimate.metric` says so (the
linear value stays in `run_metric_deff_over_L`). Every number's trust is `deffcore.trust` on
those states (public API only: level, reasons, action, point, interval, bias-corrected value,
error). The band is the bootstrap interval where one was computed (`bootstrap_poolings`), else
the rule's error band point x (1 +- error).

**The BOS verdict** (`deffcore.statistics.verdict.bos_verdict`) is taken on the shown gaps (massive
activations and sinks are a separate, fixed-N diagnosis). It is *settled* when no control's
regime can change within its band: each distinct control's gap band lies wholly above
+REGIME_TOLERANCE (below F_L), wholly below -REGIME_TOLERANCE (above F_L) or wholly inside
(at the reference), and no control reads "noise" (`regime_fixed`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from deffcore.core.constants import NOISE_MIN_N, PC_CONTROLS, POOLINGS, REGIME_TOLERANCE
from deffcore.core.errors import DeffError, UndefinedSimilarityError
from deffcore.extraction.cache import PrefixRows, finished_rows
from deffcore.extraction.forward import PooledStates
from deffcore.statistics.trust_rule import gap_of, trust

#: Linear CKA's bias (relative, by the trust rule's own check) above which unbiased CKA is
#: the estimate shown (the trust rule calls a bias above 2% material).
SHOW_UNBIASED_REL = 0.02


@dataclass(frozen=True)
class PoolingEstimate:
    """One pooling control's headline at k passages, with its trust.

    metric: the estimator shown (the run's metric, or "unbiased_cka" where linear CKA's bias
    is material); low/high: its D_eff/L band and `band` what it is ("bootstrap 95%" or "error
    band"); gap_low/gap_high: the same band as gaps to F_L (points); level, reasons, action,
    error: the trust rule on the shown estimator; run_metric_deff_over_L: the run's metric's
    value (the same number unless unbiased CKA is shown); settle_gap_low/high: the gap band
    point x (1 +- error) the verdict is settled against; regime_fixed: that band lies in one
    regime and the level is not "noise".
    """

    pooling: str
    metric: str
    deff: float
    deff_over_L: float
    gap_pct: float
    low: float | None
    high: float | None
    gap_low: float | None
    gap_high: float | None
    band: str
    level: str
    error: float | None
    reasons: tuple[str, ...]
    action: str | None
    run_metric_deff_over_L: float
    settle_gap_low: float | None = None
    settle_gap_high: float | None = None
    regime_fixed: bool = False

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["reasons"] = list(self.reasons)
        return out


@dataclass(frozen=True)
class Estimate:
    """Every headline number of a run at its first n passages.

    poolings: {pooling: PoolingEstimate}; verdict: the BOS verdict's sentence on the shown
    gaps; regimes: each control's regime; identical: {control: why it is `default`};
    verdict_settled: no control's regime can change within its band; unsettled: the controls
    whose band still spans a regime boundary (or read noise); elapsed_s: since the run began.
    """

    n: int
    layers: int
    d_model: int
    run_metric: str
    poolings: dict[str, PoolingEstimate]
    verdict: str
    regimes: dict[str, str]
    identical: dict[str, str]
    verdict_settled: bool
    unsettled: tuple[str, ...]
    elapsed_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: the BOS answer on these passages (`bos_answer.Position0Answer.to_dict()` plus its
    #: "metric"), paired when the estimate has a paired bootstrap of default and no_pos0
    position0: dict[str, Any] | None = None
    #: the paired bootstrap these numbers came from (`paired.PairedBootstrap`; not in
    #: `to_dict`): a run that ends on these passages answers from it instead of redrawing it
    paired: Any = field(default=None, repr=False, compare=False)

    def headline(self, pooling: str = "default") -> PoolingEstimate:
        return self.poolings[pooling]

    @property
    def answer(self) -> str | None:
        """The BOS answer's verdict at this estimate (None: not made)."""
        return None if self.position0 is None else self.position0["verdict"]

    def to_dict(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "layers": self.layers,
            "d_model": self.d_model,
            "run_metric": self.run_metric,
            "elapsed_s": self.elapsed_s,
            "poolings": {p: e.to_dict() for p, e in self.poolings.items()},
            "verdict": self.verdict,
            "regimes": dict(self.regimes),
            "identical": dict(self.identical),
            "verdict_settled": self.verdict_settled,
            "unsettled": list(self.unsettled),
            "position0": self.position0,
            **self.extra,
        }


def regime_fixed(gap_low: float | None, gap_high: float | None) -> bool:
    """True when every gap in [gap_low, gap_high] has the same regime (SPEC 11.5): all above
    +REGIME_TOLERANCE (below F_L), all below -REGIME_TOLERANCE (above F_L) or all within it."""
    if gap_low is None or gap_high is None:
        return False
    if not (math.isfinite(gap_low) and math.isfinite(gap_high)):
        return False
    tol = REGIME_TOLERANCE
    return gap_low > tol or gap_high < -tol or (gap_low >= -tol and gap_high <= tol)


def _band(t: Any) -> tuple[float | None, float | None, str]:
    """(low, high, kind) of D_eff/L: the bootstrap interval, else point x (1 +- error)."""
    if t.interval is not None:
        lo, hi = sorted(float(v) for v in t.interval)
        return lo, hi, "bootstrap 95%"
    if t.point is None or t.error is None:
        return None, None, "none"
    half = abs(t.point) * float(t.error)
    return t.point - half, t.point + half, "error band"


def _settle_band(t: Any, layers: int) -> tuple[float | None, float | None]:
    """The gap band the verdict is settled against: point x (1 +- error), the rule's own error
    (bias + spread), which contains the bootstrap interval's half-width when there is one."""
    if t.point is None or t.error is None:
        return None, None
    half = abs(t.point) * float(t.error)
    return gap_of(t.point + half, layers), gap_of(t.point - half, layers)


def shown_where_defined(states: Mapping[str, Any], metric: str) -> dict[str, tuple[str, Any]]:
    """`shown_metric` of each pooling's states (L+1, N, d), leaving out a control that has no
    similarity (`UndefinedSimilarityError`: e.g. states that do not vary across passages), as
    the measured run leaves it out (`Measurement.undefined`); the default's failure is the
    run's and is raised."""
    out: dict[str, tuple[str, Any]] = {}
    for pooling, x in states.items():
        try:
            out[pooling] = shown_metric(x, metric)
        except UndefinedSimilarityError:
            if pooling == "default":
                raise
    return out


def states_with_h0(pooled: PooledStates, pooling: str) -> np.ndarray:
    """h_0 .. h_L of one pooling control (L+1, N, d) float32, PC controls applied per layer
    (as `Measurement.states_with_h0`)."""
    from deffcore.measures.controls import apply_pc_control

    if pooling in PC_CONTROLS:
        return np.asarray(apply_pc_control(pooled.pooled["default"], pooling), dtype=np.float32)
    if pooling not in pooled.pooled:
        raise DeffError(f"Unknown pooling {pooling!r}; choose one of {', '.join(POOLINGS)}.")
    return pooled.pooled[pooling]


def _bias_material(point: float, corrected: float | None) -> bool:
    """Linear CKA's bias moves D_eff/L by more than SHOW_UNBIASED_REL (relative)."""
    return bool(corrected) and abs(point - corrected) / abs(corrected) > SHOW_UNBIASED_REL


def pooling_estimate(
    states: Any,
    *,
    pooling: str = "default",
    metric: str = "cka",
    bootstrap: int | None = None,
    seed: int = 0,
    paired: Any = None,
    shown: tuple[str, Any] | None = None,
) -> PoolingEstimate:
    """The shown estimate of one pooling's states (L+1, N, d) h_0 .. h_L, with its trust and
    bands (module docstring: which estimator, which band). `paired`: the estimate's
    `paired.PairedBootstrap` holding this pooling under the shown estimator (its interval then
    comes from those shared replicates); else `bootstrap` B replicates of its own. `shown`:
    `shown_metric(states, metric)` when the caller has it already."""
    shown, t = shown or shown_metric(states, metric)
    run_value = float(t.point)
    if paired is not None and paired.has(pooling, shown):
        t = trust(states, metric=shown, bootstrap=paired.result(pooling, shown))
    elif bootstrap or shown != metric:
        t = trust(states, metric=shown, bootstrap=bootstrap, seed=seed)
    layers = int(np.shape(states)[0]) - 1
    lo, hi, kind = _band(t)
    settle_lo, settle_hi = _settle_band(t, layers)
    return PoolingEstimate(
        pooling=pooling,
        metric=shown,
        deff=float(t.point) * layers,
        deff_over_L=float(t.point),
        gap_pct=gap_of(float(t.point), layers),
        low=lo,
        high=hi,
        gap_low=None if hi is None else gap_of(hi, layers),
        gap_high=None if lo is None else gap_of(lo, layers),
        band=kind,
        level=t.level,
        error=None if t.error is None else float(t.error),
        reasons=tuple(t.reasons),
        action=t.action,
        run_metric_deff_over_L=run_value,
        settle_gap_low=settle_lo,
        settle_gap_high=settle_hi,
        regime_fixed=t.level != "noise" and regime_fixed(settle_lo, settle_hi),
    )


def estimate(
    pooled: PooledStates,
    *,
    metric: str = "cka",
    bootstrap: int | None = None,
    bootstrap_poolings: Sequence[str] = ("default", "no_pos0"),
    seed: int = 0,
    poolings: Sequence[str] = POOLINGS,
    elapsed_s: float | None = None,
    spec: Any = None,
) -> Estimate:
    """Every pooling control's headline, trust and band on `pooled`, and the BOS verdict.

    `bootstrap` B replicates (seeded by `seed`) give an interval to the poolings in
    `bootstrap_poolings` (the others are judged from N alone: cheaper, and the rule's spread
    model is calibrated for that); None: no interval anywhere. The bootstrapped poolings
    share one paired bootstrap (the same B passage multisets: `deffcore.statistics.paired`),
    and when it holds default and no_pos0 the estimate carries the BOS answer with its paired
    interval (`Estimate.position0`, `deffcore.statistics.bos_answer.live_answer`); `spec`: the
    run, so its action asks only what the data can give.
    """
    from deffcore.statistics.bos_answer import live_answer, no_pos0_identity, shared_bootstrap
    from deffcore.statistics.verdict import bos_verdict

    if "default" not in poolings:
        raise DeffError("An estimate needs the default pooling (the verdict compares with it).")
    states = {p: states_with_h0(pooled, p) for p in poolings}
    shown = shown_where_defined(states, metric)  # an undefined control is left out
    states = {p: states[p] for p in shown}
    paired = None
    if pooled.n < NOISE_MIN_N:  # noise whatever its interval (and too few passages for the
        bootstrap = None  # U-statistic's replicates): a tiny run's one estimate has none
    if bootstrap:
        paired = shared_bootstrap(
            states, [p for p in bootstrap_poolings if p in states], metric, bootstrap, seed
        )
    out: dict[str, PoolingEstimate] = {}
    for p in states:
        B = bootstrap if p in bootstrap_poolings else None
        out[p] = pooling_estimate(
            states[p], pooling=p, metric=metric, bootstrap=B, seed=seed, paired=paired,
            shown=shown[p],
        )  # fmt: skip
    same = no_pos0_identity(pooled, metric)  # as `bos_answer.identical_controls` decides
    identical = {"no_pos0": same} if same else {}
    answer = live_answer(paired, states, out, metric, same, pooled.n, spec) if paired else None
    verdict = bos_verdict({p: e.gap_pct for p, e in out.items()}, identical=identical)
    unsettled = tuple(p for p in out if p not in verdict.identical and not out[p].regime_fixed)
    return Estimate(
        n=pooled.n,
        layers=pooled.layers,
        d_model=pooled.d_model,
        run_metric=metric,
        poolings=out,
        verdict=verdict.sentence,
        regimes=dict(verdict.regimes),
        identical=dict(verdict.identical),
        verdict_settled=not unsettled,
        unsettled=unsettled,
        elapsed_s=elapsed_s,
        position0=answer,
        paired=paired,
    )


def trajectory(
    pooled: PooledStates, marks: Sequence[int], *, max_tokens: int, **options: Any
) -> list[Estimate]:
    """Estimates at each of `marks` from a whole run's states (its prefixes): what the run
    showed, or would have shown, as it extracted (`estimate` options)."""
    rows = PrefixRows(pooled.n)
    rows.add(finished_rows(pooled))
    return [estimate(rows.pooled(k, max_tokens=max_tokens), **options) for k in marks]


def shown_metric(states: Any, metric: str = "cka") -> tuple[str, Any]:
    """(the estimator shown for these states (L+1, N, d), the run metric's trust without an
    interval): unbiased CKA where linear CKA's bias is material (module docstring)."""
    t = trust(states, metric=metric)
    material = metric == "cka" and _bias_material(t.point, t.bias_corrected)
    return ("unbiased_cka" if material else metric), t
