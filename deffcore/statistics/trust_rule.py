"""How far to trust a headline D_eff/L: a calibrated, checkable claim (SPEC section 8).

    import deffcore as dc
    t = dc.trust(states)                       # (L+1, N, d) h_0 .. h_L; linear CKA
    t.level, t.reasons, t.action               # "solid" | "indicative" | "noise"
    t.point, t.interval, t.bias_corrected      # D_eff/L, its bootstrap CI, the corrected value
    dc.trust(states, bootstrap=100)            # with the passage bootstrap's interval

**"solid" is a claim that can be checked**: the number lies within 2% (relative) of its
population value (N -> infinity) and its regime (D_eff below, at or above F_L) is right. The
rule estimates the number's relative error from what a run holds,

    error = bias + spread
    bias   = |D/L(linear) - D/L(unbiased)| / D/L(unbiased)        (linear CKA; 0 for unbiased)
             and, with a bootstrap, |point - bias_corrected| / point (the larger of the two)
    spread = INTERVAL_SAFETY x the bootstrap interval's half-width / point, or
             SPREAD_C / sqrt(N) without one

and says

    noise       N < NOISE_MIN_N, or error > NOISE_ERROR (10%)
    solid       error <= SOLID_ERROR, the interval (when computed) contains the point, the
                regime's sign is outside the error band, and the metric is calibrated
                (linear or unbiased CKA; cosine is never solid: its population value on the
                constructions has no closed form)
    indicative  everything else

Calibration (`benchmarks/bench_trust_calibration.py`, table in BENCHMARKS.md): states
sampled from the teaching constructions (`deffcore.measures.teaching`, population S in closed form)
over a grid of L, N, d, update sizes, h_0 and update correlations, with both metrics; goals
"solid" within 2% of the truth in >= 95% of cases and never off by more than 5%, and "noise"
wherever the error exceeds 10%. The constructions are Gaussian; real residual streams
(few effective directions, a few massive features) spread more: the shipped default's
bootstrap half-width is 2.2% at N = 4,096, where the constructions never exceed
0.65 / sqrt(N) = 1.0% (99th percentile). SPREAD_C = 1.5 covers both; the bootstrap interval,
when computed, replaces the prior by the run's own spread, widened by INTERVAL_SAFETY = 1.5
(SPEC 8): on heavy-tailed passages (multivariate t, 3 degrees of freedom) the 95% interval
of B = 40 replicates understates the error, and "solid" from the bare half-width was within
2% in only 13 of 16 datasets; 1.5 (the smallest of 1, 1.25, 1.5, 2 that meets the goal on the
Gaussian and both heavy-tailed grids) brings every grid to 100% (BENCHMARKS.md).

The regime (SPEC section 11.5): the gap's interval containing 0, or |gap| <= REGIME_TOLERANCE
points without an interval, is "at the reference"; otherwise the gap's sign.

**The null is a separate statement** beside the badge, never part of it: "differs from
random weights" only when the bootstrap interval does not overlap the random-weight band
and that band comes from at least MIN_NULL_SEEDS seeds; fewer seeds say "too few seeds to
tell", no interval says so too.

`trust_badge(n, d, ...)` is the same rule for callers that hold only the numbers (the app).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from deffcore.core.constants import METRICS, NOISE_MIN_N, REGIME_TOLERANCE
from deffcore.core.errors import DeffError, InvalidArgumentError

# NOISE_MIN_N (core.constants): fewer passages than this are noise whatever else.
#: Spread of D_eff/L without an interval: SPREAD_C / sqrt(N), relative (module docstring:
#: the larger of the constructions' 0.65 and the shipped default's 1.4, rounded up).
SPREAD_C = 1.5
#: The bootstrap interval's half-width is widened by this before it counts as the spread
#: (module docstring: calibrated on heavy-tailed constructions).
INTERVAL_SAFETY = 1.5
#: A solid number's estimated relative error is at most this (it promises 2%).
SOLID_ERROR = 0.02
#: An estimated relative error above this is noise.
NOISE_ERROR = 0.10
#: Linear CKA's bias is *material* (the app warns) when it moves D_eff/L by more than this.
BIAS_MATERIAL_REL = 0.02
#: A random-weight band from fewer seeds has no usable width.
MIN_NULL_SEEDS = 5

LEVELS = ("solid", "indicative", "noise")
#: Shape + word, never colour alone (colour-blind readers).
BADGE = {"solid": "● solid", "indicative": "◐ indicative", "noise": "○ noise"}
#: The regimes in symbols.
REGIME_WORDS = {"below": "D_eff < F_L", "above": "D_eff > F_L", "at the reference": "D_eff at F_L"}
#: The null statement's verdicts.
NULL_VERDICTS = ("differs", "overlaps", "too_few_seeds", "no_interval")


@dataclass(frozen=True)
class NullBand:
    """The random-weight band of D_eff/L: mean +- 2 sd over `seeds` seeds."""

    low: float
    high: float
    seeds: int


@dataclass(frozen=True)
class Trust:
    """A trust verdict on one headline D_eff/L.

    level: one of LEVELS; reasons: why (sentences); action: the one step that would make it
    solid (None when solid); point: D_eff/L under `metric`; interval: (low, high) percentile
    bootstrap CI or None; bias_corrected: the best estimate of the population value (linear
    CKA: D_eff/L under unbiased CKA, or 2 point - bootstrap mean with a bootstrap; `corrected_by`
    says which; the point itself when nothing corrects it); error: the estimated relative
    error; regime: "below" / "at the reference" / "above" F_L (None without L); null: the
    null statement's verdict (NULL_VERDICTS, None without a band) and null_sentence.
    bias: linear CKA's d/(N+d); bias_material: the bias moves D_eff/L by more than
    BIAS_MATERIAL_REL; solid_n: passages a solid number needs at this bias and spread;
    action_n: the n of a "use ≥ n passages" action (`with_supply` checks it against the data).
    """

    level: str
    reasons: tuple[str, ...]
    action: str | None
    point: float | None
    interval: tuple[float, float] | None
    bias_corrected: float | None
    corrected_by: str | None
    error: float | None
    regime: str | None
    null: str | None
    null_sentence: str | None
    metric: str
    n: int
    d: int
    layers: int | None
    bias: float
    bias_material: bool
    solid_n: int
    #: the passages the action asks for when it is "use ≥ n passages" (None otherwise)
    action_n: int | None = None

    @property
    def badge(self) -> str:
        return BADGE[self.level]

    def sentence(self) -> str:
        """One line for a page: the level, the reasons, the action, the null statement."""
        text = f"{self.level.capitalize()}: " + " ".join(self.reasons)
        text += f" To make it solid: {self.action}." if self.action else ""
        return text + (f" {self.null_sentence}" if self.null_sentence else "")

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["reasons"] = list(self.reasons)
        out["interval"] = list(self.interval) if self.interval is not None else None
        out["badge"] = self.badge
        out["sentence"] = self.sentence()
        return out


def cka_bias(n: int, d: int) -> float:
    """Linear CKA's finite-sample floor d/(N+d) (see `similarity.cka_finite_sample_bias`)."""
    return d / (n + d)


def spread(n: int) -> float:
    """Relative spread of D_eff/L from N alone: SPREAD_C / sqrt(N)."""
    return SPREAD_C / math.sqrt(n)


def passages_needed(n: int, bias_rel: float, spread_rel: float) -> int:
    """The smallest N' >= n at which bias + spread falls to SOLID_ERROR, scaling the spread
    as 1/sqrt(N) and linear CKA's bias as 1/N (d/(N+d) for N >> d); both measured at n."""

    def fits(m: int) -> bool:
        return bias_rel * n / m + spread_rel * math.sqrt(n / m) <= SOLID_ERROR

    hi = n
    while not fits(hi):
        hi *= 2
    lo = max(n, hi // 2)
    if fits(lo):
        return lo
    while hi - lo > 1:  # fits(hi), not fits(lo)
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid, hi)
    return hi


def gap_of(deff_over_L: float, layers: int) -> float:
    """gap% = 100 (1 - D_eff / F_L) from D_eff/L: D_eff / F_L = (D_eff/L) (L+1) / 2."""
    return 100.0 * (1.0 - deff_over_L * (layers + 1) / 2.0)


def regime_of(gap: float, gap_range: tuple[float, float] | None = None) -> str:
    """ "below" (gap > 0: D_eff < F_L), "above" or "at the reference" (SPEC 11.5): the gap's
    interval contains 0, or |gap| <= REGIME_TOLERANCE points without an interval."""
    if gap_range is not None:
        lo, hi = sorted(gap_range)
        if lo <= 0.0 <= hi:
            return "at the reference"
    elif abs(gap) <= REGIME_TOLERANCE:
        return "at the reference"
    return "below" if gap > 0 else "above"


def null_band(band: Any) -> NullBand | None:
    """A random-weight band from a `Measurement.random_band()` mapping (its per-seed
    `deff_over_L` values, or `low`/`high` with `seeds`), a sequence of per-seed D_eff/L values
    (band: mean +- 2 sample sd), or a NullBand; None for None or an empty band."""
    if band is None or isinstance(band, NullBand):
        return band
    if isinstance(band, Mapping):
        values = list(band.get("deff_over_L") or [])
        seeds = band.get("seeds")
        count = len(seeds) if isinstance(seeds, Sequence) and not isinstance(seeds, str) else 0
        count = count or (int(seeds) if isinstance(seeds, int) else 0) or len(values)
        if "low" in band and "high" in band:
            low, high = sorted((float(band["low"]), float(band["high"])))
            return NullBand(low, high, count)
        if not values:
            return None
    else:
        values = [float(v) for v in band]
        count = len(values)
        if not values:
            return None
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if count > 1 else 0.0
    return NullBand(mean - 2 * sd, mean + 2 * sd, count)


def _null_statement(
    band: NullBand | None, interval: tuple[float, float] | None
) -> tuple[str | None, str | None]:
    """(verdict, sentence) of the random-weight comparison (module docstring)."""
    if band is None:
        return None, None
    if band.seeds < MIN_NULL_SEEDS:
        return "too_few_seeds", (
            f"Random weights: too few seeds to tell (the band comes from {band.seeds}; its width "
            f"needs at least {MIN_NULL_SEEDS})."
        )
    if interval is None:
        return "no_interval", (
            "Random weights: no bootstrap interval to compare with their band (compute one)."
        )
    lo, hi = interval
    if hi < band.low or lo > band.high:
        return "differs", (
            f"Differs from random weights: the interval [{lo:.4f}, {hi:.4f}] does not overlap "
            f"their band [{band.low:.4f}, {band.high:.4f}] ({band.seeds} seeds)."
        )
    return "overlaps", (
        f"Not told apart from random weights: the interval [{lo:.4f}, {hi:.4f}] overlaps their "
        f"band [{band.low:.4f}, {band.high:.4f}]."
    )


@dataclass(frozen=True)
class _Error:
    """The parts of the error estimate (relative to the point)."""

    bias: float | None  # None: linear CKA not compared with unbiased CKA
    spread: float
    corrected: float | None
    corrected_by: str | None
    measured: bool = False  # the spread is the run's own (a bootstrap interval), not the prior

    @property
    def total(self) -> float:
        return (self.bias or 0.0) + self.spread


def _error(
    n: int,
    metric: str,
    point: float | None,
    unbiased: float | None,
    interval: tuple[float, float] | None,
    bootstrap_mean: float | None,
) -> _Error:
    """Bias and spread of the point (module docstring); the best bias-corrected value."""
    if point is None or point == 0:
        return _Error(None if metric == "cka" else 0.0, spread(n), None, None, interval is not None)
    biases: list[float] = []
    corrected, by = point, None
    if metric != "cka":
        biases.append(0.0)
    elif unbiased is not None and unbiased != 0:
        biases.append(abs(point - unbiased) / abs(unbiased))
        corrected, by = unbiased, "unbiased_cka"
    width = spread(n)
    if interval is not None:
        width = INTERVAL_SAFETY * abs(interval[1] - interval[0]) / 2 / abs(point)
        if bootstrap_mean is not None:
            biases.append(abs(point - bootstrap_mean) / abs(point))  # |point - (2p - mean)|
            if by is None or biases[-1] > max(biases[:-1], default=0.0):
                corrected, by = 2 * point - bootstrap_mean, "bootstrap"
    measured = interval is not None
    return _Error(max(biases) if biases else None, width, corrected, by, measured)


def _regime(
    point: float | None, layers: int | None, interval: tuple[float, float] | None, error: float
) -> tuple[str | None, str | None]:
    """(the regime, a reason when its sign lies inside the error band) of the point."""
    if point is None or layers is None:
        return None, None
    gap = gap_of(point, layers)
    span = None if interval is None else (gap_of(interval[1], layers), gap_of(interval[0], layers))
    regime = regime_of(gap, span)
    band = 100.0 * error * point * (layers + 1) / 2  # the error in gap points
    if regime != "at the reference" and abs(gap) <= band:
        return regime, (
            f"The gap to F_L ({gap:+.1f} points) lies within its error band (±{band:.1f}), so "
            "the regime is not settled."
        )
    return regime, None


def cka_family_only(metric: str, what: str) -> str:
    """The sentence for `what` (the trust level, the BOS answer) asked under `metric`: defined
    for the section 3 metrics only; a SPEC 17.1 measure is named as one (SPEC 17.5)."""
    from deffcore.measures.similarity_measures import MEASURES

    if metric in MEASURES:
        return (
            f"{what} is defined for linear CKA, unbiased CKA and cosine only (its rule is "
            f"calibrated there, SPEC 8), not for the SPEC 17 measure {metric!r}: its "
            "bootstrap interval and regime are in the table across measures (SPEC 17.4)."
        )
    return f"Unknown similarity metric {metric!r}; choose one of {', '.join(METRICS)}."


def _check(n: Any, d: Any, metric: str, layers: Any) -> None:
    if not isinstance(n, int) or not isinstance(d, int) or n < 1 or d < 1:
        raise DeffError(f"A trust badge needs positive integers N and d, got N={n!r}, d={d!r}.")
    if metric not in METRICS:
        raise DeffError(cka_family_only(metric, "A trust level"))
    if layers is not None and (not isinstance(layers, int) or layers < 2):
        raise DeffError(f"A trust badge needs L >= 2 layers, got {layers!r}.")


def assess(
    n: int,
    d: int,
    *,
    metric: str = "cka",
    point: float | None = None,
    layers: int | None = None,
    unbiased: float | None = None,
    interval: tuple[float, float] | None = None,
    bootstrap_mean: float | None = None,
    band: Any = None,
) -> Trust:
    """The trust rule (module docstring) on plain numbers.

    n, d: kept passages and residual width; point: D_eff/L under `metric`; layers: L (for the
    regime); unbiased: D_eff/L under unbiased CKA (linear CKA's bias check); interval: the
    bootstrap (low, high) of the point and bootstrap_mean its replicates' mean; band: the
    random-weight null (`null_band` explains the accepted forms).
    """
    _check(n, d, metric, layers)
    if interval is not None:
        interval = (float(min(interval)), float(max(interval)))
    err = _error(n, metric, point, unbiased, interval, bootstrap_mean)
    regime, unsettled = _regime(point, layers, interval, err.total)
    noise, weak = _noise_reasons(n, err), _weak_reasons(metric, point, err, interval, unsettled)
    level = "noise" if noise else "indicative" if weak else "solid"
    if level == "solid":  # say what was checked
        weak = [
            f"The estimated error of D_eff/L is {_error_words(err)}, within {SOLID_ERROR:.0%}"
            + (f"; the regime ({REGIME_WORDS[regime]}) is settled." if regime else ".")
        ]
    need = passages_needed(n, err.bias or 0.0, err.spread)
    action = None if level == "solid" else _action(n, metric, point, err, interval, need)
    verdict, sentence = _null_statement(null_band(band), interval)
    return Trust(
        level=level,
        reasons=tuple(noise + weak),
        action=action,
        point=point,
        interval=interval,
        bias_corrected=err.corrected,
        corrected_by=err.corrected_by,
        error=err.total if point else None,
        regime=regime,
        null=verdict,
        null_sentence=sentence,
        metric=metric,
        n=n,
        d=d,
        layers=layers,
        bias=cka_bias(n, d),
        bias_material=metric == "cka" and (err.bias or 0.0) > BIAS_MATERIAL_REL,
        solid_n=max(n, need),
        action_n=_asked(action),
    )


def _asked(action: str | None) -> int | None:
    """n of an action "use ≥ n passages" (the one form `_action` writes it in), else None."""
    found = re.fullmatch(r"use ≥ ([0-9,]+) passages", action or "")
    return int(found.group(1).replace(",", "")) if found else None


def with_supply(t: Trust, spec: Any, source: Any = None) -> Trust:
    """`t` with its "use ≥ n passages" action checked against what `spec`'s data can give
    (`deffcore.inputs.supply.passages_action`: when n is more, what would give it); `source`: the
    data's `tokens.WindowSource` when the caller holds it (a snapshot stores it)."""
    if t.action_n is None or spec is None:
        return t
    from dataclasses import replace

    from deffcore.inputs.supply import passages_action

    return replace(t, action=passages_action(t.action_n, spec, source))


def _error_words(err: _Error) -> str:
    bias = "not checked" if err.bias is None else f"{err.bias:.1%}"
    source = "measured by the bootstrap" if err.measured else f"the prior {SPREAD_C:g}/√N"
    return f"{err.total:.1%} (bias {bias}, spread {err.spread:.1%}, {source})"


def _noise_reasons(n: int, err: _Error) -> list[str]:
    out = []
    if n < NOISE_MIN_N:
        out.append(f"N = {n} passages is far too few (fewer than {NOISE_MIN_N}).")
    if err.total > NOISE_ERROR:
        out.append(
            f"The estimated error of D_eff/L is {_error_words(err)}, above {NOISE_ERROR:.0%}."
        )
    return out


def _weak_reasons(
    metric: str,
    point: float | None,
    err: _Error,
    interval: tuple[float, float] | None,
    unsettled: str | None,
) -> list[str]:
    out = []
    if SOLID_ERROR < err.total <= NOISE_ERROR:
        out.append(
            f"The estimated error of D_eff/L is {_error_words(err)}; solid needs at most "
            f"{SOLID_ERROR:.0%}."
        )
    if metric == "cka" and err.bias is None:
        out.append("Linear CKA's finite-sample bias is not checked against unbiased CKA.")
    if interval is not None and point is not None and not interval[0] <= point <= interval[1]:
        corrected = (
            "" if err.corrected is None else f"; the bias-corrected value is {err.corrected:.4f}"
        )
        out.append(
            f"The bootstrap interval [{interval[0]:.4f}, {interval[1]:.4f}] excludes the point "
            f"{point:.4f}{corrected}."
        )
    if unsettled:
        out.append(unsettled)
    if metric == "cosine":
        out.append(
            "The trust rule is calibrated for linear and unbiased CKA; cosine has no closed-form "
            "population value to check it against."
        )
    return out


def _action(
    n: int,
    metric: str,
    point: float | None,
    err: _Error,
    interval: tuple[float, float] | None,
    need: int,
) -> str | None:
    """The one step that would make the number solid, the first that applies."""
    if metric == "cka" and err.bias is not None and err.bias > max(SOLID_ERROR / 2, err.spread):
        return "switch to unbiased CKA"
    if n < NOISE_MIN_N or err.total > SOLID_ERROR:
        return f"use ≥ {max(need, NOISE_MIN_N):,} passages"
    if metric == "cka" and err.bias is None:
        return "compare with unbiased CKA"
    if metric == "cosine":
        return "switch to linear or unbiased CKA"
    if interval is not None and point is not None and not interval[0] <= point <= interval[1]:
        return "switch to unbiased CKA" if metric == "cka" else f"use ≥ {2 * n:,} passages"
    return f"use ≥ {4 * n:,} passages"  # the regime's sign inside the error band


def trust_badge(
    n: int,
    d: int,
    *,
    metric: str = "cka",
    value: float | None = None,
    unbiased_value: float | None = None,
    ci: tuple[float, float] | None = None,
    null_band: Any = None,
    null_seeds: int = 0,
    layers: int | None = None,
    bootstrap_mean: float | None = None,
) -> Trust:
    """The trust rule for callers holding only the numbers (the app): `assess` with the
    older argument names. null_band (low, high) comes from `null_seeds` seeds."""
    band = None
    if null_band is not None:
        low, high = sorted(float(v) for v in null_band)
        band = NullBand(low, high, int(null_seeds))
    return assess(
        n,
        d,
        metric=metric,
        point=value,
        layers=layers,
        unbiased=unbiased_value,
        interval=ci,
        bootstrap_mean=bootstrap_mean,
        band=band,
    )


def trust(
    states: Any,
    metric: str = "cka",
    bootstrap: Any = None,
    null_band: Any = None,
    seed: int = 0,
    *,
    h0: bool = True,
    K: int | None = None,
) -> Trust:
    """Trust of the headline D_eff/L of a stack of states.

    states: (L+1, N, d) h_0 .. h_L (array, tensor or list; h_0 is dropped, as in every headline:
    SPEC section 1); pass h0=False for an (L, N, d) stack h_1 .. h_L. metric: "cka",
    "unbiased_cka" or "cosine"; bootstrap: B replicates of the passage bootstrap (None: no
    interval; seeded by `seed`), or a `BootstrapResult` already computed for these states;
    null_band: the random-weight band (`null_band`: per-seed D_eff/L values or a
    `Measurement.random_band()` mapping); K: maximum lag (default L-1).
    Returns a `Trust` (`to_dict()` for JSON).
    """
    from deffcore.measures.depth import effective_depth
    from deffcore.measures.similarity import _validated, similarity_matrix
    from deffcore.statistics.bootstrap import bootstrap_deff_over_L, check_metrics

    check_metrics((metric,))
    bootstrap = _bootstrap_arg(bootstrap)
    x = _validated(states, min_layers=3 if h0 else 2, min_passages=4)
    measured = x[1:] if h0 else x
    n_layers, n, d = (int(v) for v in measured.shape)
    point = effective_depth(similarity_matrix(measured, metric), K) / n_layers
    unbiased = None
    if metric == "cka":
        unbiased = effective_depth(similarity_matrix(measured, "unbiased_cka"), K) / n_layers
    if isinstance(bootstrap, int):  # else a BootstrapResult already computed, or None
        bootstrap = bootstrap_deff_over_L(measured, B=bootstrap, seed=seed, metric=metric, K=K)
    return _assess_with(
        bootstrap, n, d, metric=metric, point=point, layers=n_layers, unbiased=unbiased,
        band=null_band,
    )  # fmt: skip


def _bootstrap_arg(bootstrap: Any) -> Any:
    """`bootstrap` as None, a number of replicates B (an int; numpy's as the int it is) or a
    `BootstrapResult`; anything else is one sentence (InvalidArgumentError), never an
    AttributeError ('low') from reading it as a result."""
    from deffcore.core.checks import as_int
    from deffcore.statistics.bootstrap import BootstrapResult

    bootstrap = as_int(bootstrap)
    if bootstrap is None or isinstance(bootstrap, int | BootstrapResult):
        return bootstrap  # a bool goes on to B's own sentence
    raise InvalidArgumentError(
        f"bootstrap must be a number of replicates B (e.g. 200) or a BootstrapResult already "
        f"computed for these states; got {bootstrap!r}."
    )


def _assess_with(res: Any, n: int, d: int, **numbers: Any) -> Trust:
    """`assess` with the interval and replicate mean of a `BootstrapResult` (None: none)."""
    interval, mean = (None, None) if res is None else ((res.low, res.high), res.mean)
    return assess(n, d, interval=interval, bootstrap_mean=mean, **numbers)


def measurement_trust(
    measurement: Any,
    pooling: str = "default",
    metric: str | None = None,
    *,
    bootstrap: Any = None,
    seed: int = 0,
    K: int | None = None,
) -> Trust:
    """`trust` of one headline of a `Measurement`, from its memoised similarities (no second
    similarity pass), its random-weight null when measured with one, and the passage
    bootstrap's interval: `bootstrap` B replicates (seeded by `seed`), or a `BootstrapResult`
    already computed for this pooling, metric and K."""
    metric = metric or measurement.metric
    bootstrap = _bootstrap_arg(bootstrap)
    summary = measurement.summary(pooling, metric, K)
    unbiased = None
    if metric == "cka":
        unbiased = measurement.summary(pooling, "unbiased_cka", K).deff_over_L
    if isinstance(bootstrap, int):
        bootstrap = measurement.bootstrap(pooling, metric, B=bootstrap, seed=seed, K=K)
    t = _assess_with(
        bootstrap, int(measurement.n), int(measurement.d_model), metric=metric,
        point=summary.deff_over_L, layers=int(measurement.layers), unbiased=unbiased,
        band=measurement.random_band(pooling, metric) or None,
    )  # fmt: skip
    return with_supply(t, getattr(measurement, "spec", None))
