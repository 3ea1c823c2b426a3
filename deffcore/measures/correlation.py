"""Correlation of a per-model quantity with a depth number (paper Tables S18, S20, S21).

    dc.correlate(x, y, families=None, labels=None) -> Correlation

x and y are one value per model (e.g. D_eff/L and a benchmark score). Reported:

- **Pearson r** with scipy's two-sided p (`scipy.stats.pearsonr`: exact under bivariate
  normality, from the beta distribution of r).
- **Spearman rho** (Pearson r of the mid-ranks, ties averaged) with two p-values:
  `spearman_p_t`, scipy's (`scipy.stats.spearmanr`: Student t with n - 2 degrees of freedom,
  an approximation that papers usually print), and `spearman_p_exact`, the exact permutation
  p: the share of all n! pairings of the y ranks with the x ranks whose |rho| is at least the
  observed |rho| (ties kept as mid-ranks, so it is exact with ties too). `spearman_p` is the
  exact one for n <= EXACT_MAX_N and scipy's t otherwise; `spearman_p_method` says which.
- **n** always, and a warning when n < SMALL_N (one model can then move r a lot).
- **Leave-one-out rows**: the same numbers with each model left out in turn (Table S18 drops
  the extreme-D_eff/L models; every one is dropped here, and `extremes` names the two ends).
- **Leave-one-family-out rows** when `families` is given (Table S21): each family dropped in
  turn; a family whose removal leaves fewer than MIN_N models is not dropped. A family of one
  model gives the same numbers as that model's leave-one-out row: the row is kept (Table S21
  lists such families) and marked `same_as_loo` with the model's label.
- The least-squares line y = slope x + intercept, for a scatter.

Non-finite pairs are an error, not silently dropped: the caller decides which models count.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from deffcore.core.errors import DeffError

#: Up to this n the Spearman p is the exact permutation p (9! = 362,880 pairings, ~1 s with
#: the leave-one-out rows on one core).
EXACT_MAX_N = 9
#: Below this n a warning says that one model can change the correlation.
SMALL_N = 10
#: The fewest models a correlation is computed for.
MIN_N = 3


class CorrelationInputError(DeffError):
    """x and y that cannot be correlated (lengths differ, too few, not finite)."""


@dataclass
class Correlation:
    """Pearson and Spearman correlation of y with x over n models, with robustness rows."""

    n: int
    pearson_r: float
    pearson_p: float
    spearman_rho: float
    spearman_p: float
    spearman_p_method: str
    spearman_p_t: float
    spearman_p_exact: float | None
    slope: float
    intercept: float
    labels: list[str] = field(default_factory=list)
    extremes: dict[str, str] = field(default_factory=dict)
    loo: list[dict[str, Any]] = field(default_factory=list)
    lofo: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _mid_ranks(v: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(v, method="average")


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a = a - a.mean()
    b = b - b.mean()
    denom = math.sqrt(float(a @ a) * float(b @ b))
    return float(a @ b) / denom if denom > 0 else math.nan


def spearman_exact_p(x: Sequence[float], y: Sequence[float]) -> float:
    """Two-sided exact permutation p of Spearman's rho: the share of the n! orderings of y's
    mid-ranks whose |rho| >= the observed |rho| (a relative tolerance of 1e-9 counts ties of
    the statistic as 'at least'). n <= EXACT_MAX_N."""
    rx = _mid_ranks(np.asarray(x, dtype=np.float64))
    ry = _mid_ranks(np.asarray(y, dtype=np.float64))
    n = len(rx)
    if n > EXACT_MAX_N:
        raise CorrelationInputError(
            f"The exact permutation p enumerates n! orderings; n = {n} is above {EXACT_MAX_N}."
        )
    observed = abs(_pearson(rx, ry))
    if math.isnan(observed):
        return math.nan
    cx = rx - rx.mean()
    cy = ry - ry.mean()
    scale = math.sqrt(float(cx @ cx) * float(cy @ cy))
    hits = total = 0
    perms = itertools.permutations(cy)
    while True:
        chunk = np.array(list(itertools.islice(perms, 200_000)), dtype=np.float64)
        if chunk.size == 0:
            break
        rho = np.abs(chunk @ cx) / scale
        hits += int(np.count_nonzero(rho >= observed * (1 - 1e-9)))
        total += len(chunk)
    return hits / total


def _core(x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """r, rho and their p-values for one set of models (no robustness rows)."""
    from scipy.stats import pearsonr, spearmanr

    n = len(x)
    constant = np.ptp(x) == 0 or np.ptp(y) == 0
    if constant:
        nan = math.nan
        return {"n": n, "pearson_r": nan, "pearson_p": nan, "spearman_rho": nan,
                "spearman_p": nan, "spearman_p_t": nan, "spearman_p_exact": None,
                "spearman_p_method": "undefined (a constant variable)"}  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns about n < 3 and near-constant input
        r, p = pearsonr(x, y)
        rho, p_t = spearmanr(x, y)
    exact = spearman_exact_p(x, y) if n <= EXACT_MAX_N else None
    return {
        "n": n,
        "pearson_r": float(r),
        "pearson_p": float(p),
        "spearman_rho": float(rho),
        "spearman_p": float(exact) if exact is not None else float(p_t),
        "spearman_p_t": float(p_t),
        "spearman_p_exact": exact,
        "spearman_p_method": (
            f"exact permutation over {math.factorial(n):,} orderings"
            if exact is not None
            else "t distribution with n - 2 degrees of freedom (scipy)"
        ),
    }


def _check(x: Sequence[float], y: Sequence[float], labels: Sequence[str] | None) -> tuple:
    try:
        xa = np.asarray(x, dtype=np.float64).ravel()
        ya = np.asarray(y, dtype=np.float64).ravel()
    except (TypeError, ValueError):  # text, ragged lists, objects: numpy's message is no sentence
        raise CorrelationInputError(
            "x and y must be sequences of numbers, one per model (a missing value is NaN)."
        ) from None
    if xa.shape != ya.shape:
        raise CorrelationInputError(
            f"x and y must have one value per model each; got {xa.size} and {ya.size} values."
        )
    if xa.size < MIN_N:
        raise CorrelationInputError(f"A correlation needs at least {MIN_N} models; got {xa.size}.")
    bad = [i for i in range(xa.size) if not (math.isfinite(xa[i]) and math.isfinite(ya[i]))]
    names = [str(s) for s in labels] if labels is not None else [str(i) for i in range(xa.size)]
    if len(names) != xa.size:
        raise CorrelationInputError(
            f"labels must name each of the {xa.size} models; got {len(names)} labels."
        )
    if bad:
        which = ", ".join(names[i] for i in bad[:5])
        raise CorrelationInputError(f"x or y is missing or not finite for: {which}.")
    return xa, ya, names


def _subset_row(x: np.ndarray, y: np.ndarray, keep: np.ndarray, **what: Any) -> dict[str, Any]:
    if keep.sum() < MIN_N:
        return {**what, "n": int(keep.sum()), "skipped": f"fewer than {MIN_N} models remain"}
    return {**what, **_core(x[keep], y[keep])}


def correlate(
    x: Sequence[float],
    y: Sequence[float],
    families: Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
) -> Correlation:
    """Pearson r / Spearman rho of y with x, their two-sided p, n, leave-one-out and
    leave-one-family-out rows (see the module docstring). x, y: one number per model."""
    xa, ya, names = _check(x, y, labels)
    n = xa.size
    core = _core(xa, ya)
    if np.ptp(xa) > 0:
        slope, intercept = (float(v) for v in np.polyfit(xa, ya, 1))
    else:
        slope = intercept = math.nan
    result = Correlation(**core, slope=slope, intercept=intercept, labels=names)
    result.extremes = {
        "largest_x": names[int(np.argmax(xa))],
        "smallest_x": names[int(np.argmin(xa))],
    }
    for i in range(n):
        keep = np.arange(n) != i
        result.loo.append(_subset_row(xa, ya, keep, dropped=names[i]))
    if families is not None:
        fam = [str(f) for f in families]
        if len(fam) != n:
            raise CorrelationInputError(
                f"families must name the family of each of the {n} models; got {len(fam)}."
            )
        for family in sorted(set(fam)):
            keep = np.array([f != family for f in fam])
            if keep.sum() >= MIN_N:
                row = _subset_row(xa, ya, keep, dropped_family=family, dropped=int(n - keep.sum()))
                if row["dropped"] == 1:  # the same numbers as that model's leave-one-out row
                    row["same_as_loo"] = names[int(np.flatnonzero(~keep)[0])]
                result.lofo.append(row)
    result.warnings = _warnings(result)
    return result


def _warnings(c: Correlation) -> list[str]:
    out = []
    if c.n < SMALL_N:
        out.append(
            f"Only n = {c.n} models: one model can move r a lot (see the leave-one-out rows), "
            "and a p-value this small a sample gives is a rough guide."
        )
    if math.isnan(c.pearson_r):
        out.append("x or y is the same for every model, so the correlation is undefined.")
    return out
