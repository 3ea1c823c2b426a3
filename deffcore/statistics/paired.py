"""One passage bootstrap per run, shared by every pooling and metric (SPEC section 15).

Stage: statistics (beside `bootstrap`, whose streamed weighted Gram sums it reuses).

    pb = paired_bootstrap({"default": x_d, "no_pos0": x_n}, metrics=("cka",), B=100)
    d = pb.difference(("no_pos0", "cka"), ("default", "cka"))     # gap points, paired
    d.delta, d.interval, d.method                                  # Δ, its 95% interval, "basic"

**Why one bootstrap.** Two numbers computed on the same passages (two poolings of one run, two
metrics, an intervention and its baseline) have strongly correlated errors: a passage that
pulls one up pulls the other up too. The interval of their difference Δ = a - b is therefore
not the sum of their separate errors: it comes from replicates that draw *one* multiset of
passages and evaluate both numbers on it. Here a replicate is a row of `resample_indices`
(B, N), the same row for every pooling and metric of the run, i.e. one vector of
multiplicities w (sum w = N) that enters each pooling's streamed Gram sums
(`bootstrap._weighted_gram_sums`); linear CKA is the resampled stack's statistic and unbiased
CKA the distinct-passage U-statistic on the same weights, exactly as `bootstrap` defines them.
Nothing is copied per replicate: each pooling's states are streamed once, and the pass that
gives unbiased CKA also gives linear CKA (its first form w'Qw with the Gram diagonals is linear
CKA's sum), so the second metric of a pooling costs only the cheap centring terms.

Each replicate keeps its lag profile rho (L-1,) per (pooling, metric), so D_eff(K)/L, the gap
to F_L and any difference of them are available at every maximum lag K. A difference's
replicates are Δ_r = a_r - b_r; its interval is stated with its method:

    percentile  [q_lo, q_hi] of the Δ_r
    basic       [2Δ - q_hi, 2Δ - q_lo]   (the replicates' shift read as the estimator's bias)

`METHOD` (basic) is the one calibrated on the position-0 constructions
(`benchmarks/bench_bos_answer_calibration.py`, BENCHMARKS.md); both are kept.

**Unpaired.** Two runs that do not hold the same passages (another N, other windows) cannot
share replicates; `unpaired_difference` then takes Δ_r = a_r - b_r of two *independent*
bootstraps (valid for independent samples) and says `paired=False`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deffcore.core.constants import METRICS, POOLINGS
from deffcore.core.errors import DeffError
from deffcore.core.json_values import finite_number
from deffcore.core.lazy import torch  # imported on first use: a stored run never needs it
from deffcore.measures.depth import deff_from_profile, lag_profile
from deffcore.measures.similarity import (
    DEFAULT_BLOCK_ELEMENTS,
    _centred,
    _validated,
    similarity_matrix,
)
from deffcore.statistics.bootstrap import (
    BootstrapResult,
    _cosine_replicates,
    _counts,
    _linear_replicates,
    _unbiased_replicates,
    cheaper_method,
    check_b,
    check_metrics,
    percentile_interval,
    resample_indices,
)
from deffcore.statistics.trust_rule import gap_of

#: The interval a difference reports by default (calibrated: module docstring).
METHOD = "basic"
METHODS = ("basic", "percentile")
#: Decimals of the replicate lag profiles a snapshot keeps.
_DECIMALS = 6
#: The most replicates a stored (possibly shared) paired bootstrap may hold.
MAX_STORED_B = 2000


def replicate_similarities(
    states: Any, indices: np.ndarray, metrics: Sequence[str], method: str = "auto"
) -> dict[str, list[np.ndarray]]:
    """{metric: one (L, L) similarity per row of `indices`} for one stack (L, N, d).

    Linear and unbiased CKA together take one streamed pass (the unbiased pass gives linear
    CKA's sums too); each alone is `bootstrap.bootstrap_similarities`'s own pass; cosine sums
    per-passage cosines with the same weights.
    """
    check_metrics(metrics)
    x = _validated(states, min_passages=4 if "unbiased_cka" in metrics else 2)
    if not x.is_floating_point():
        x = x.to(torch.float64)
    n_layers, n, d = x.shape
    out: dict[str, list[np.ndarray]] = {}
    if "cosine" in metrics:
        out["cosine"] = _cosine_replicates(x, indices)
    cka = [m for m in metrics if m != "cosine"]
    if not cka:
        return out
    B = len(indices)
    if method == "auto":
        method = cheaper_method(
            n, d, n_layers, B, "unbiased_cka" if "unbiased_cka" in cka else "cka"
        )
    if method == "recompute" and "cka" in cka:
        out["cka"] = [similarity_matrix(x[:, torch.from_numpy(idx)], "cka") for idx in indices]
    xc = _centred(x)
    w = _counts(indices, n, x.device)
    route = "gram" if method == "gram" else "feature"
    if "unbiased_cka" in cka:
        linear: list[np.ndarray] | None = [] if "cka" in cka and "cka" not in out else None
        out["unbiased_cka"] = _unbiased_replicates(xc, w, DEFAULT_BLOCK_ELEMENTS, route, linear)
        if linear is not None:
            out["cka"] = linear
    elif "cka" not in out:
        out["cka"] = _linear_replicates(xc, w, DEFAULT_BLOCK_ELEMENTS)
    return out


@dataclass(frozen=True)
class PairedDifference:
    """Δ = a - b of two numbers, with the interval of its replicates Δ_r.

    a, b: what was compared (e.g. "no_pos0 · cka"); scale: "gap points" or "D_eff/L";
    delta: the point difference; samples: (B,) Δ_r; interval: (low, high) by `method`;
    percentile, basic: both intervals; paired: one bootstrap for both (False: independent
    bootstraps of different passages, `why_unpaired` says why).
    """

    a: str
    b: str
    scale: str
    delta: float
    samples: np.ndarray = field(repr=False)
    ci: float
    method: str
    percentile: tuple[float, float]
    basic: tuple[float, float]
    paired: bool = True
    #: why the two numbers could not be paired (None when paired)
    why_unpaired: str | None = None

    @property
    def interval(self) -> tuple[float, float]:
        return self.basic if self.method == "basic" else self.percentile

    @property
    def B(self) -> int:
        return len(self.samples)

    def covers(self, value: float) -> bool:
        lo, hi = self.interval
        return lo <= value <= hi

    def words(self) -> str:
        """`Δ = +1.85, 95% [+0.31, +3.50] (paired bootstrap, basic, B = 100)`."""
        lo, hi = self.interval
        how = "paired bootstrap" if self.paired else "unpaired: independent bootstraps"
        return (
            f"Δ = {self.delta:+.2f}, {self.ci:.0%} [{lo:+.2f}, {hi:+.2f}] ({how}, {self.method}, "
            f"B = {self.B})"
        )

    @classmethod
    def from_dict(cls, d: Any, *, a: str, b: str, scale: str) -> PairedDifference:
        """A stored `to_dict()` read back, every field checked (ValueError names the first one
        that is not well-formed). The replicates are not stored, only their count B: `samples`
        holds B NaN placeholders, so `.B` and the intervals are the stored ones."""
        if not isinstance(d, dict):
            raise ValueError("the stored difference is not an object")
        pairs = [d.get(k) for k in ("percentile", "basic")]
        for name, pair in zip(("percentile", "basic"), pairs, strict=True):
            if not (isinstance(pair, list) and len(pair) == 2 and all(map(finite_number, pair))):
                raise ValueError(f"its {name} interval is not two finite numbers")
        for name in ("delta", "ci"):
            if not finite_number(d.get(name)):
                raise ValueError(f"its {name} is not a finite number")
        B = d.get("B")
        if not (isinstance(B, int) and not isinstance(B, bool) and 2 <= B <= 100_000):
            raise ValueError("its replicate count B is not a count from 2 to 100,000")
        if d.get("method") not in ("basic", "percentile"):
            raise ValueError("its method is neither basic nor percentile")
        if not isinstance(d.get("paired"), bool):
            raise ValueError("it does not say whether it is paired")
        why = d.get("why_unpaired")
        if why is not None and not isinstance(why, str):
            raise ValueError("its why_unpaired is not text")
        return cls(
            a=a, b=b, scale=scale, delta=float(d["delta"]), samples=np.full(B, np.nan),
            ci=float(d["ci"]), method=d["method"], percentile=tuple(map(float, pairs[0])),
            basic=tuple(map(float, pairs[1])), paired=d["paired"], why_unpaired=why,
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {
            "a": self.a,
            "b": self.b,
            "scale": self.scale,
            "delta": self.delta,
            "interval": list(self.interval),
            "method": self.method,
            "percentile": list(self.percentile),
            "basic": list(self.basic),
            "ci": self.ci,
            "B": self.B,
            "paired": self.paired,
            "why_unpaired": self.why_unpaired,
        }


def difference_of(
    point: float,
    samples: Any,
    *,
    a: str = "a",
    b: str = "b",
    scale: str = "gap points",
    ci: float = 0.95,
    method: str = METHOD,
    paired: bool = True,
) -> PairedDifference:
    """A `PairedDifference` from a point difference and its replicates (B,)."""
    if method not in METHODS:
        raise DeffError(f"Unknown interval method {method!r}; choose one of {', '.join(METHODS)}.")
    s = np.asarray(samples, dtype=np.float64)
    q_lo, q_hi = percentile_interval(s, ci)
    point = float(point)
    return PairedDifference(
        a, b, scale, point, s, ci, method, (q_lo, q_hi), (2 * point - q_hi, 2 * point - q_lo),
        paired,
    )  # fmt: skip


Key = tuple[str, str]  # (pooling, metric)


@dataclass
class PairedBootstrap:
    """Replicate lag profiles of every (pooling, metric) of one run on shared passage draws.

    points: {(pooling, metric): rho (L-1,)} of the run itself; profiles: {(pooling, metric):
    (B, L-1)} of the replicates, row r of every key from the same multiset of passages.
    """

    layers: int
    n: int
    B: int
    seed: int
    points: dict[Key, np.ndarray]
    profiles: dict[Key, np.ndarray]
    ci: float = 0.95

    def has(self, pooling: str, metric: str) -> bool:
        return (pooling, metric) in self.profiles

    def _k(self, K: int | None) -> int:
        return self.layers - 1 if K is None else min(int(K), self.layers - 1)

    def deff_over_L(
        self, pooling: str, metric: str, K: int | None = None
    ) -> tuple[float, np.ndarray]:
        """(point, replicates (B,)) of D_eff(K)/L."""
        key = (pooling, metric)
        if key not in self.profiles:
            raise KeyError(f"The paired bootstrap has no {pooling} / {metric}.")
        K, L = self._k(K), self.layers
        point = deff_from_profile(self.points[key], L, K) / L
        reps = np.array([deff_from_profile(r, L, K) / L for r in self.profiles[key]])
        return point, reps

    def result(self, pooling: str, metric: str, K: int | None = None) -> BootstrapResult:
        """One number's `bootstrap.BootstrapResult` (percentile interval, replicate mean) from
        these replicates: the same numbers `bootstrap_deff_over_L` gives with the same seed."""
        return BootstrapResult.of(*self.deff_over_L(pooling, metric, K), self.ci)

    def gap(self, pooling: str, metric: str, K: int | None = None) -> tuple[float, np.ndarray]:
        """(point, replicates (B,)) of the gap to F_L in points (`trust_rule.gap_of`)."""
        point, reps = self.deff_over_L(pooling, metric, K)
        return float(gap_of(point, self.layers)), gap_of(reps, self.layers)

    def difference(
        self,
        a: Key,
        b: Key,
        K: int | None = None,
        *,
        scale: str = "gap points",
        method: str = METHOD,
    ) -> PairedDifference:
        """Δ = value(a) - value(b) with its paired interval; scale "gap points" or "D_eff/L"."""
        get = self.gap if scale == "gap points" else self.deff_over_L
        (pa, ra), (pb, rb) = get(*a, K), get(*b, K)
        return difference_of(
            pa - pb, ra - rb, a=" · ".join(a), b=" · ".join(b), scale=scale, ci=self.ci,
            method=method,
        )  # fmt: skip

    def restricted(self, poolings: Sequence[str], metrics: Sequence[str]) -> PairedBootstrap | None:
        """These replicates of `poolings` x `metrics` alone (the same multisets, so the same
        numbers a bootstrap of only those draws with this seed); None when one is missing."""
        keys = [(p, m) for p in dict.fromkeys(poolings) for m in dict.fromkeys(metrics)]
        if not keys or any(k not in self.profiles for k in keys):
            return None
        return PairedBootstrap(
            self.layers, self.n, self.B, self.seed, {k: self.points[k] for k in keys},
            {k: self.profiles[k] for k in keys}, self.ci,
        )  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (replicate profiles rounded to 1e-6): what a snapshot stores."""
        return {
            "layers": self.layers,
            "n": self.n,
            "B": self.B,
            "seed": self.seed,
            "ci": self.ci,
            "keys": [list(k) for k in self.profiles],
            "points": [np.round(self.points[k], _DECIMALS).tolist() for k in self.profiles],
            "profiles": [np.round(self.profiles[k], _DECIMALS).tolist() for k in self.profiles],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PairedBootstrap:
        """The inverse of `to_dict`, checked: a shared file is hostile until its shapes hold,
        its profiles are similarities (|rho| <= 1) and every replicate's D_eff is defined."""
        unreadable = DeffError(
            "The stored paired bootstrap is not readable (not finite numbers of the shapes it "
            "names)."
        )
        try:
            L, n, B = int(data["layers"]), int(data["n"]), int(data["B"])
            seed, ci = int(data.get("seed", 0)), float(data.get("ci", 0.95))
            keys = [tuple(str(x) for x in k) for k in data["keys"]]
            points = [np.asarray(p, dtype=np.float64) for p in data["points"]]
            profiles = [np.asarray(p, dtype=np.float64) for p in data["profiles"]]
        except (KeyError, TypeError, ValueError, OverflowError, AttributeError):
            raise unreadable from None
        ok = len(keys) == len(points) == len(profiles) and all(len(k) == 2 for k in keys)
        ok = ok and L >= 2 and 2 <= B <= MAX_STORED_B and n >= 2 and 0 < ci < 1
        ok = ok and all(p.shape == (L - 1,) for p in points)
        ok = ok and all(p.shape == (B, L - 1) for p in profiles)
        ok = ok and all(k[0] in POOLINGS and k[1] in METRICS for k in keys)
        if not ok or len(set(keys)) != len(keys):
            raise DeffError("The stored paired bootstrap's shapes do not match its L and B.")
        values = np.concatenate([np.ravel(p) for p in [*points, *profiles]])
        if not (np.isfinite(values).all() and (np.abs(values) <= 1 + 1e-6).all()):
            raise unreadable
        try:  # every number the pages read from it is defined, at every maximum lag K
            for p in _near_undefined([*points, *profiles], L):
                for K in range(1, L):
                    deff_from_profile(p, L, K)
        except DeffError:
            raise DeffError(
                "The stored paired bootstrap holds a profile whose effective depth is undefined."
            ) from None
        return cls(
            layers=L, n=n, B=B, seed=seed, ci=ci,
            points=dict(zip(keys, points, strict=True)),
            profiles=dict(zip(keys, profiles, strict=True)),
        )  # fmt: skip


def _near_undefined(arrays: Sequence[np.ndarray], L: int) -> np.ndarray:
    """The lag profiles among `arrays` (each (L-1,) or (B, L-1)) whose D_eff denominator
    1 + 2 sum_{k<=K} (1 - k/L) rho(k) (SPEC section 4) comes near 0 at some K: every K at once,
    as cumulative sums, so reading a stored bootstrap costs one array operation, not B x L
    calls; the rows it returns are then checked by `deff_from_profile` itself, so the rule at
    0 is exactly that function's."""
    rows = [np.reshape(a, (-1, L - 1)) for a in arrays]
    if not rows:
        return np.empty((0, L - 1))
    rho = np.concatenate(rows)
    denoms = 1.0 + 2.0 * np.cumsum((1.0 - np.arange(1, L) / L) * rho, axis=1)
    return rho[(denoms <= 1e-9).any(axis=1)]


def paired_bootstrap(
    stacks: Mapping[str, Any],
    *,
    metrics: Iterable[str] = ("cka",),
    B: int = 100,
    seed: int = 0,
    ci: float = 0.95,
    indices: np.ndarray | None = None,
    method: str = "auto",
    progress: Any = None,
) -> PairedBootstrap:
    """The shared bootstrap of every stack in `stacks` ({pooling: (L, N, d) h_1 .. h_L}) under
    every metric: one draw of B multisets (`resample_indices(N, B, seed)`, or `indices`) used
    by all of them (module docstring). progress(done, total, stage): after each stack."""
    metrics = tuple(dict.fromkeys(metrics))
    if not stacks:
        raise DeffError("A paired bootstrap needs at least one stack of states.")
    if not 0 < ci < 1:
        raise DeffError(f"The confidence level must lie strictly between 0 and 1; got {ci}.")
    shapes = {p: tuple(np.shape(x)) for p, x in stacks.items()}
    first = next(iter(shapes.values()))
    if len(first) != 3 or any(s[:2] != first[:2] for s in shapes.values()):
        raise DeffError(
            "Paired stacks must share their layers and passages (L, N, ·); got "
            + ", ".join(f"{p} {s}" for p, s in shapes.items())
            + "."
        )
    layers, n = int(first[0]), int(first[1])
    if indices is None:  # bounded before it is drawn: (B, N) indices, B (L, L) per stack
        B = check_b(B, n=n, layers=layers, matrices=len(stacks) * len(metrics))
        indices = resample_indices(n, B, seed)
    B = len(indices)
    points: dict[Key, np.ndarray] = {}
    profiles: dict[Key, np.ndarray] = {}
    for i, (pooling, states) in enumerate(stacks.items()):
        if progress is not None:
            progress(i, len(stacks), f"paired bootstrap: {pooling}")
        reps = replicate_similarities(states, indices, metrics, method)
        for metric in metrics:
            points[(pooling, metric)] = lag_profile(similarity_matrix(states, metric))
            profiles[(pooling, metric)] = np.stack([lag_profile(s) for s in reps[metric]])
    return PairedBootstrap(layers, n, B, seed, points, profiles, ci)


def unpaired_difference(
    a: tuple[float, np.ndarray],
    b: tuple[float, np.ndarray],
    *,
    names: tuple[str, str] = ("a", "b"),
    scale: str = "gap points",
    ci: float = 0.95,
    method: str = METHOD,
) -> PairedDifference:
    """Δ of two numbers from *independent* bootstraps (point, replicates) each, e.g. two runs
    on different passages: Δ_r = a_r - b_r over the first min(B_a, B_b) replicates;
    `paired=False` says so."""
    (pa, ra), (pb, rb) = a, b
    k = min(len(ra), len(rb))
    return difference_of(
        pa - pb, np.asarray(ra[:k]) - np.asarray(rb[:k]), a=names[0], b=names[1], scale=scale,
        ci=ci, method=method, paired=False,
    )  # fmt: skip
