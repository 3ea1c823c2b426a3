"""The depth-use atlas: other papers' measures of how a model uses its depth, with intervals.

Stage: measures (per-passage rows from `deffcore.extraction.atlas` (and the skip effect's
from `deffcore.lenses.atlas_skip`) -> means, passage-bootstrap intervals and the derived numbers;
SPEC section 16).

Every measure is a mean over passages of a per-passage value (each passage weighs the same);
the per-passage value is a mean over the passage's real tokens (`AtlasRows`):

    relative_contribution r_l   mean ||u_l|| / ||h_{l-1}||        Csordás, Manning, Potts 2025 §3
    alignment c_l               mean cos(u_l, h_{l-1})            (same)
    block_influence BI_l        1 - mean cos(h_{l-1}, h_l)        Men et al. 2024 (ShortGPT)
    block_influence_tokens      the same, token-weighted over all tokens of all passages: ShortGPT's
                                E_{X,t}, the pruning lab's number (equal when all passages have
                                the same length, e.g. token windows)
    angular_distance d(i, j)    mean over passages of arccos cos(h_i^T, h_j^T) / π at the last
                                token T, (L+1) x (L+1) over h_0 .. h_L   Gromov et al. 2025
    phase_point p               the block after which r_l stays below half the median of r over
                                the first half (`phase_point`, SPEC 16.1 item 6)

Where predictions form (the logit lens, SPEC 16.2), over h_0 .. h_L (index 0 = the embeddings):

    logit_lens["kl"] (L+1,)           mean over passages of the passage's mean over real tokens
                                      of KL(p_L || p_l), p_l = softmax(W_U norm(h_l)) (nats)
    logit_lens["top1_agreement"]      the same of [argmax p_l = argmax p_L]
    logit_lens["prediction_depth"]    the same of the first layer from which the top-1 stays the
                                      final top-1 through layer L (0..L)

Consecutive-layer geometry (SPEC 16.3), per block l (h_{l-1} -> h_l), `geometry`:

    displacement (L,)          ||h_l - h_{l-1}|| / ||h_{l-1}||, token-level: the same number as
                               relative_contribution (the taps' r_l), repeated beside the others
    rotation_angle (L,)        degrees: arccos <Z_{l-1} R, Z_{l-1}>_F of the orthogonal
                               Procrustes rotation R of the run's centred pooled states
                               (Z = X̄ / ||X̄||_F, default pooling)
    procrustes_residual (L,)   min_R ||Z_{l-1} R - Z_l||_F^2 = 2 - 2 ||Z_{l-1}^T Z_l||_* in [0, 2]

Gromov et al.'s block to drop and `n_drop` at an angular budget β (default 0.10 of π):
`gromov_curve`, `gromov_drop` (SPEC 16.1 item 5); the depth they would keep is L - n_drop.

Intervals (SPEC 16.1 item 7): B seeded passage resamples (default 100), one resample for every
statistic so derived numbers are consistent; percentile intervals (default 95%), rounded
outwards for the integer statistics (the phase point, n_drop).

`columns()` are the per-run numbers the correlation lab correlates with D_eff/L:
phase_share (L - p)/L, bi_second_half (mean BI of blocks floor(L/2)+1 .. L),
gromov_keep_share (L - n_drop)/L at β = 0.10, r_late_over_early (mean r of the second half over
the first half).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deffcore.core.json_values import json_safe
from deffcore.extraction.atlas import LENS_QUANTITIES, SPLIT_QUANTITIES, AtlasRows

ATLAS_FORMAT = 1
#: Gromov et al.'s angular budget of the correlation lab's column (a share of π).
GROMOV_BUDGET = 0.10
#: The per-run numbers the correlation lab and the sweep read (`Atlas.columns`).
ATLAS_COLUMNS: tuple[str, ...] = (
    "phase_share",
    "bi_second_half",
    "gromov_keep_share",
    "r_late_over_early",
)
#: (attribute, per-passage array of AtlasRows): the length-L measures.
_PER_BLOCK = (
    ("relative_contribution", "r"),
    ("alignment", "c"),
    ("block_influence", "bi"),
)
#: The logit lens's stats and intervals, in `LENS_QUANTITIES`'s order.
_LENS_NAMES = ("logit_lens_kl", "logit_lens_top1", "prediction_depth")
_SPLIT_NAMES = {
    "r_attn": ("attention", "relative_contribution"),
    "c_attn": ("attention", "alignment"),
    "r_mlp": ("mlp", "relative_contribution"),
    "c_mlp": ("mlp", "alignment"),
}


# ---------------------------------------------------------------------------------------------
# Derived numbers of one set of means


def first_half(L: int) -> int:
    """Blocks 1 .. floor(L/2) are the first half (at least one block)."""
    return max(1, L // 2)


def phase_point(r: np.ndarray) -> int:
    """r (L,) block 1 first -> p in 0..L (module docstring): the smallest p such that every
    r_k with k > p is below half the median of r over the first half."""
    r = np.asarray(r, dtype=np.float64)
    threshold = float(np.median(r[: first_half(len(r))])) / 2
    p = len(r)
    while p > 0 and r[p - 1] < threshold:
        p -= 1
    return p


def gromov_curve(D: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """D (L+1, L+1) over h_0 .. h_L -> (best_distance (L,), best_start (L,)) for n = 1..L:
    min over l of d(l, l+n) and its l (ties: the smallest)."""
    D = np.asarray(D, dtype=np.float64)
    L = D.shape[0] - 1
    best = np.empty(L)
    start = np.empty(L, dtype=np.int64)
    for n in range(1, L + 1):
        diag = np.diagonal(D, offset=n)
        start[n - 1] = int(np.argmin(diag))
        best[n - 1] = float(diag[start[n - 1]])
    return best, start


def gromov_drop(D: np.ndarray, budget: float = GROMOV_BUDGET) -> tuple[int, int | None]:
    """(n_drop, first dropped block) at angular budget `budget`: the largest n whose best block
    has d <= budget (0 and None when no n does); the block dropped is first .. first + n - 1."""
    best, start = gromov_curve(D)
    ok = np.flatnonzero(best <= budget + 1e-12)
    if ok.size == 0:
        return 0, None
    n = int(ok[-1]) + 1
    return n, int(start[n - 1]) + 1


def _columns(r: np.ndarray, bi: np.ndarray, D: np.ndarray) -> dict[str, float]:
    L = len(r)
    half = first_half(L)
    n_drop, _ = gromov_drop(D)
    early = float(np.mean(r[:half]))
    return {
        "phase_share": (L - phase_point(r)) / L,
        "bi_second_half": float(np.mean(bi[half:])) if half < L else float("nan"),
        "gromov_keep_share": (L - n_drop) / L,
        "r_late_over_early": float(np.mean(r[half:])) / early if early > 0 else float("nan"),
    }


def columns_of(rows: AtlasRows) -> dict[str, float]:
    """The correlation lab's per-run numbers straight from the rows (the means, no bootstrap)."""
    return _columns(rows.r.mean(0), rows.bi.mean(0), rows.angular.mean(0))


# ---------------------------------------------------------------------------------------------
# The summary


@dataclass
class Atlas:
    """The depth-use measures of one run (see the module docstring); arrays are float64.

    relative_contribution, alignment, block_influence, block_influence_tokens: (L,), block 1
    first; angular_distance: (L+1, L+1) over h_0 .. h_L; phase_point: 0..L; sublayers:
    {"kind", "attention": {...}, "mlp": {...}} or None; intervals: {name: (low, high)} with the
    arrays' shapes; gromov: the budget, n_drop, first dropped block, the best-block curve.
    skip_effect: a `SkipEffect` when it was computed (on request), else None.
    logit_lens: {"kl", "top1_agreement": (L+1,) over h_0 .. h_L, "prediction_depth": float} or
    None (not taken; meta["logit_lens_refused"] says why when the architecture was refused).
    """

    layers: int
    n: int
    relative_contribution: np.ndarray
    alignment: np.ndarray
    block_influence: np.ndarray
    block_influence_tokens: np.ndarray
    angular_distance: np.ndarray
    phase_point: int
    gromov: dict[str, Any]
    intervals: dict[str, tuple[np.ndarray, np.ndarray]]
    sublayers: dict[str, Any] | None = None
    B: int = 100
    ci: float = 0.95
    seed: int = 0
    skip_effect: SkipEffect | None = None
    logit_lens: dict[str, Any] | None = None
    geometry: dict[str, np.ndarray] | None = None
    #: the run it belongs to (`deffcore.lenses.atlas.run_info`: key, spec, D_eff, lag profile)
    run: dict[str, Any] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def columns(self) -> dict[str, float]:
        """The correlation lab's per-run numbers (ATLAS_COLUMNS), from the means."""
        return _columns(self.relative_contribution, self.block_influence, self.angular_distance)

    def frame(self) -> Any:
        """One row per block (1..L): each measure with its interval's ends (a DataFrame)."""
        import pandas as pd

        cols: dict[str, Any] = {"block": np.arange(1, self.layers + 1)}
        named = {
            "relative_contribution": self.relative_contribution,
            "alignment": self.alignment,
            "block_influence": self.block_influence,
            "block_influence_tokens": self.block_influence_tokens,
        }
        for part in ("attention", "mlp"):
            for name, values in (self.sublayers or {}).get(part, {}).items():
                named[f"{part}_{name}"] = values
        for name, values in named.items():
            cols[name] = values
            if name in self.intervals:
                cols[f"{name}_low"], cols[f"{name}_high"] = self.intervals[name]
        return pd.DataFrame(cols)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: every measure, its interval, the columns (`from_dict` reads it back).
        NaN is null everywhere but in the columns (the correlation lab reads them as floats)."""
        out = {
            "format": ATLAS_FORMAT,
            "layers": self.layers,
            "n": self.n,
            "B": self.B,
            "ci": self.ci,
            "seed": self.seed,
            "relative_contribution": self.relative_contribution,
            "alignment": self.alignment,
            "block_influence": self.block_influence,
            "block_influence_tokens": self.block_influence_tokens,
            "angular_distance": self.angular_distance,
            "phase_point": int(self.phase_point),
            "gromov": self.gromov,
            "sublayers": self.sublayers,
            "intervals": {k: {"low": lo, "high": hi} for k, (lo, hi) in self.intervals.items()},
            "columns": self.columns(),
            "skip_effect": None if self.skip_effect is None else self.skip_effect.to_dict(),
            "logit_lens": self.logit_lens,
            "geometry": self.geometry,
            "run": self.run,
            "meta": self.meta,
        }
        return {k: v if k == "columns" else json_safe(v) for k, v in out.items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Atlas:
        """The inverse of `to_dict` (check a file from someone else with `check_atlas_dict`)."""
        arr = {
            k: np.asarray(d[k], dtype=np.float64)
            for k in (*(a for a, _ in _PER_BLOCK), "block_influence_tokens", "angular_distance")
        }
        skip = d.get("skip_effect")
        return cls(
            layers=int(d["layers"]),
            n=int(d["n"]),
            **arr,
            phase_point=int(d["phase_point"]),
            gromov={"first_dropped_block": None, **(d.get("gromov") or {})},  # optional in files
            intervals=_intervals(d.get("intervals")),
            sublayers=d.get("sublayers"),
            B=int(d.get("B", 100)),
            ci=float(d.get("ci", 0.95)),
            seed=int(d.get("seed", 0)),
            skip_effect=None if skip is None else SkipEffect.from_dict(skip),
            logit_lens=_lens_from_dict(d.get("logit_lens")),
            geometry=(
                {k: _array(v) for k, v in d["geometry"].items() if k in GEOMETRY}
                if isinstance(d.get("geometry"), dict)
                else None
            ),
            run=d.get("run"),
            meta=dict(d.get("meta") or {}),
        )


def _lens_from_dict(d: Any) -> dict[str, Any] | None:
    if not isinstance(d, dict):
        return None
    depth = d.get("prediction_depth")
    return {
        "kl": _array(d["kl"]),
        "top1_agreement": _array(d["top1_agreement"]),
        "prediction_depth": float("nan") if depth is None else float(depth),
    }


def _array(values: Any) -> np.ndarray:
    return np.asarray(
        [np.nan if v is None else v for v in np.ravel(np.asarray(values, dtype=object))],
        dtype=np.float64,
    ).reshape(np.shape(values))


def _intervals(d: dict[str, Any] | None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """`to_dict`'s {"name": {"low", "high"}} back to {name: (low, high)} arrays."""
    return {k: (_array(v["low"]), _array(v["high"])) for k, v in (d or {}).items()}


# ---------------------------------------------------------------------------------------------
# Consecutive-layer geometry (SPEC 16.3)

#: The per-block geometry (`Atlas.geometry`), each (L,).
GEOMETRY: tuple[str, ...] = ("displacement", "rotation_angle", "procrustes_residual")
#: Each one's range (a ratio >= 0, degrees, the residual of unit-norm matrices).
GEOMETRY_RANGES = {
    "displacement": (0, 1e6),
    "rotation_angle": (0, 180),
    "procrustes_residual": (0, 2),
}


def _unit_centred(x: np.ndarray) -> np.ndarray | None:
    xc = np.asarray(x, dtype=np.float64)
    xc = xc - xc.mean(0)
    norm = float(np.linalg.norm(xc))
    return xc / norm if norm > 0 else None


def procrustes_step(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Two layers' pooled states (N, d) -> (rotation angle in degrees, Procrustes residual) of
    the orthogonal Procrustes fit of centred, unit-Frobenius Z_x onto Z_y (module docstring):
    R = U V^T from Z_x^T Z_y = U S V^T; angle = arccos <Z_x R, Z_x>_F; residual = 2 - 2 sum S.
    NaN for both when a layer has no variance across passages. When 2N < d the fit is done in
    an orthonormal basis of the rows' span (the same R on the data, the same numbers)."""
    a, b = _unit_centred(x), _unit_centred(y)
    if a is None or b is None:
        return float("nan"), float("nan")
    n, d = a.shape
    if 2 * n < d:
        q, _ = np.linalg.qr(np.hstack([a.T, b.T]))  # (d, 2N): both layers' rows lie in it
        a, b = a @ q, b @ q
    u, sv, vt = np.linalg.svd(a.T @ b)
    rotated = a @ (u @ vt)
    cos = float(np.clip(np.sum(rotated * a), -1.0, 1.0))
    return float(np.degrees(np.arccos(cos))), float(max(0.0, 2.0 - 2.0 * sv.sum()))


def consecutive_geometry(
    pooled: np.ndarray, displacement: np.ndarray | None = None
) -> dict[str, np.ndarray]:
    """pooled (L+1, N, d) h_0 .. h_L -> {"rotation_angle", "procrustes_residual"} (L,) per
    block l = 1..L, with "displacement" (the taps' r_l, token-level) when given."""
    steps = [procrustes_step(pooled[i - 1], pooled[i]) for i in range(1, len(pooled))]
    out = {
        "rotation_angle": np.array([a for a, _ in steps], dtype=np.float64),
        "procrustes_residual": np.array([r for _, r in steps], dtype=np.float64),
    }
    if displacement is not None:
        out = {"displacement": np.asarray(displacement, dtype=np.float64), **out}
    return out


# ---------------------------------------------------------------------------------------------
# Bootstrap


def resample_weights(n: int, B: int, seed: int) -> np.ndarray:
    """(B, n) float64: each row a passage resample's weights (multiplicity / n), seeded."""
    rng = np.random.default_rng(seed)
    counts = rng.multinomial(n, np.full(n, 1.0 / n), size=B)
    return counts.astype(np.float64) / n


def percentile_interval(reps: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    """reps (B, ...) -> (low, high): the replicates' percentiles at (1-ci)/2 and (1+ci)/2."""
    tail = (1 - ci) / 2
    return np.quantile(reps, tail, axis=0), np.quantile(reps, 1 - tail, axis=0)


def _integer_interval(reps: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = percentile_interval(np.asarray(reps, dtype=np.float64), ci)
    return np.floor(lo), np.ceil(hi)


def _token_weighted(rows: AtlasRows, weights: np.ndarray) -> np.ndarray:
    """ShortGPT's token-weighted BI for passage weights (B, N) -> (B, L)."""
    tokens = weights * rows.lengths[None, :]
    return (tokens @ rows.bi) / tokens.sum(1, keepdims=True)


def token_weighted_bi(rows: AtlasRows) -> np.ndarray:
    """ShortGPT's BI (L,): 1 - mean cos(h_{l-1}, h_l) over every token of every passage (each
    token weighs the same; the pruning lab's ranking)."""
    return _token_weighted(rows, np.full((1, rows.n), 1.0 / rows.n))[0]


def summarize(
    rows: AtlasRows,
    *,
    B: int = 100,
    seed: int = 0,
    ci: float = 0.95,
    budget: float = GROMOV_BUDGET,
) -> Atlas:
    """`Atlas` of per-passage rows: means over passages and passage-bootstrap intervals."""
    N, L = rows.n, rows.layers
    ones = np.full((1, N), 1.0 / N)
    W = np.vstack([ones, resample_weights(N, B, seed)])  # row 0: the point estimate
    stats = {name: W @ getattr(rows, src) for name, src in _PER_BLOCK}
    stats["block_influence_tokens"] = _token_weighted(rows, W)
    ang = (W @ rows.angular.reshape(N, -1)).reshape(-1, L + 1, L + 1)
    stats["phase_point"] = np.array([phase_point(r) for r in stats["relative_contribution"]])
    drops = [gromov_drop(D, budget) for D in ang]
    stats["gromov_n_drop"] = np.array([n for n, _ in drops], dtype=np.float64)
    cols = [
        _columns(r, b, D)
        for r, b, D in zip(
            stats["relative_contribution"], stats["block_influence"], ang, strict=True
        )
    ]
    for name in ATLAS_COLUMNS:
        stats[name] = np.array([c[name] for c in cols])
    if rows.split is not None:
        for q in SPLIT_QUANTITIES:
            stats[q] = W @ rows.split[q]
    if rows.lens is not None:
        for q, name in zip(LENS_QUANTITIES, _LENS_NAMES, strict=True):
            stats[name] = W @ rows.lens[q]
    intervals = {k: percentile_interval(v[1:], ci) for k, v in stats.items()}
    for k in ("phase_point", "gromov_n_drop"):
        intervals[k] = _integer_interval(stats[k][1:], ci)
    intervals["angular_distance"] = percentile_interval(ang[1:], ci)
    out = _atlas_of(rows, stats, ang[0], intervals, drops[0], B=B, seed=seed, ci=ci, budget=budget)
    if rows.lens is not None:
        kl, top1, depth = (stats.pop(name)[0] for name in _LENS_NAMES)
        out.logit_lens = {"kl": kl, "top1_agreement": top1, "prediction_depth": float(depth)}
    elif rows.lens_refused:
        out.meta["logit_lens_refused"] = rows.lens_refused
    return out


def _atlas_of(rows, stats, D, intervals, drop, *, B, seed, ci, budget) -> Atlas:
    best, start = gromov_curve(D)
    sublayers = None
    if rows.split is not None:
        sublayers = {"kind": rows.split_kind, "attention": {}, "mlp": {}}
        for q, (part, name) in _SPLIT_NAMES.items():
            sublayers[part][name] = stats[q][0]
            intervals[f"{part}_{name}"] = intervals.pop(q)
    return Atlas(
        layers=rows.layers,
        n=rows.n,
        relative_contribution=stats["relative_contribution"][0],
        alignment=stats["alignment"][0],
        block_influence=stats["block_influence"][0],
        block_influence_tokens=stats["block_influence_tokens"][0],
        angular_distance=D,
        phase_point=int(stats["phase_point"][0]),
        gromov={
            "budget": budget,
            "n_drop": drop[0],
            "first_dropped_block": drop[1],
            "best_distance": best,
            "best_start": start,
        },
        intervals=intervals,
        sublayers=sublayers,
        B=B,
        ci=ci,
        seed=seed,
    )


# ---------------------------------------------------------------------------------------------
# The skip effect (Csordás et al. §3.2), summarised the same way


@dataclass
class SkipEffect:
    """Per skipped block s (rows) and later block l (columns), both 1-based in the arrays' order:

    later: (L, L) mean over passages of e_{s->l} = mean_t ||u_l^{skip s} - u_l|| / ||u_l||,
           NaN where l <= s; later_max: the same with the max over tokens and passages
           (Csordás et al.'s own aggregation); kl: (L,) mean over passages of the mean next-token
           KL(p || p^{skip s}); intervals: {"later", "kl"}: (low, high); passages: how many.
    """

    layers: int
    passages: int
    later: np.ndarray
    later_max: np.ndarray
    kl: np.ndarray
    intervals: dict[str, tuple[np.ndarray, np.ndarray]]
    B: int = 100
    ci: float = 0.95
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return json_safe(
            {
                "layers": self.layers,
                "passages": self.passages,
                "later": self.later,
                "later_max": self.later_max,
                "kl": self.kl,
                "intervals": {k: {"low": lo, "high": hi} for k, (lo, hi) in self.intervals.items()},
                "B": self.B,
                "ci": self.ci,
                "meta": self.meta,
            }
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SkipEffect:
        return cls(
            layers=int(d["layers"]),
            passages=int(d["passages"]),
            later=_array(d["later"]),
            later_max=_array(d["later_max"]),
            kl=_array(d["kl"]),
            intervals=_intervals(d.get("intervals")),
            B=int(d.get("B", 100)),
            ci=float(d.get("ci", 0.95)),
            meta=dict(d.get("meta") or {}),
        )


def summarize_skip(
    later: np.ndarray,
    later_max: np.ndarray,
    kl: np.ndarray,
    *,
    B: int = 100,
    seed: int = 0,
    ci: float = 0.95,
    meta: dict[str, Any] | None = None,
) -> SkipEffect:
    """Per-passage skip rows (P, L, L), (P, L, L), (P, L) -> `SkipEffect` with intervals."""
    P, L = kl.shape
    W = resample_weights(P, B, seed)
    filled = np.nan_to_num(later, nan=0.0).reshape(P, -1)
    upper = np.triu(np.ones((L, L), dtype=bool), k=1)  # l > s
    mask = np.where(upper, 1.0, np.nan)
    reps = (W @ filled).reshape(B, L, L) * mask
    return SkipEffect(
        layers=L,
        passages=P,
        later=filled.mean(0).reshape(L, L) * mask,
        later_max=np.where(upper, np.nan_to_num(later_max, nan=0.0).max(0), np.nan),
        kl=kl.mean(0),
        intervals={"later": percentile_interval(reps, ci), "kl": percentile_interval(W @ kl, ci)},
        B=B,
        ci=ci,
        meta=dict(meta or {}),
    )


# ---------------------------------------------------------------------------------------------
# A file from someone else (a shared snapshot's "atlas")


class AtlasFileError(ValueError):
    """An atlas in a file that is not one (one sentence why)."""


def finite_or_nan(value: Any, shape: tuple[int, ...], what: str, low: float, high: float) -> None:
    """`value`: nested lists of `shape` holding numbers in [low, high] or null."""
    try:
        a = _array(value)
    except (TypeError, ValueError):
        raise AtlasFileError(f"its {what} is not an array of numbers.") from None
    if a.shape != shape:
        raise AtlasFileError(f"its {what} has shape {a.shape}, not {shape}.")
    finite = a[np.isfinite(a)]
    if np.isinf(a).any() or (
        finite.size and (finite.min() < low - 1e-6 or finite.max() > high + 1e-6)
    ):
        raise AtlasFileError(f"its {what} holds values outside [{low:g}, {high:g}].")


def check_atlas_dict(d: Any, layers: int) -> dict[str, Any]:
    """`d` if it is an `Atlas.to_dict()` of a run with `layers` blocks whose every field the
    pages read has its type, shape and range; AtlasFileError (a sentence) otherwise."""
    if not isinstance(d, dict) or d.get("format") != ATLAS_FORMAT:
        raise AtlasFileError(f"it is not a depth-use atlas of format {ATLAS_FORMAT}.")
    L = layers
    if d.get("layers") != L or not isinstance(d.get("n"), int) or isinstance(d.get("n"), bool):
        raise AtlasFileError(f"its layer count is not the run's ({L}) or its n is not a count.")
    ranges = {
        "relative_contribution": (0, 1e6),
        "alignment": (-1, 1),
        "block_influence": (0, 2),
        "block_influence_tokens": (0, 2),
    }
    for name, (low, high) in ranges.items():
        finite_or_nan(d.get(name), (L,), name, low, high)
    finite_or_nan(d.get("angular_distance"), (L + 1, L + 1), "angular distance", 0, 1)
    p = d.get("phase_point")
    if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p <= L:
        raise AtlasFileError(f"its phase point is not a block index from 0 to {L}.")
    intervals = d.get("intervals")
    if not isinstance(intervals, dict):
        raise AtlasFileError("its intervals are not an object.")
    for name, band in intervals.items():
        if not isinstance(band, dict) or not {"low", "high"} <= set(band):
            raise AtlasFileError(f"its interval {str(name)[:40]!r} has no low and high.")
        for side in ("low", "high"):
            finite_or_nan(
                band[side], np.shape(_array(band[side])), f"interval {str(name)[:40]}", -2, 1e6
            )
    _check_skip(d.get("skip_effect"), L)
    _check_lens(d.get("logit_lens"), L)
    geometry = d.get("geometry")
    if geometry is not None:
        if not isinstance(geometry, dict):
            raise AtlasFileError("its consecutive-layer geometry is not an object.")
        for name, (low, high) in GEOMETRY_RANGES.items():
            if name in geometry:
                finite_or_nan(geometry[name], (L,), name.replace("_", " "), low, high)
    return d


def _check_lens(lens: Any, L: int) -> None:
    if lens is None:
        return
    if not isinstance(lens, dict):
        raise AtlasFileError("its logit lens is not an object.")
    finite_or_nan(lens.get("kl"), (L + 1,), "logit-lens KL", 0, 1e6)
    finite_or_nan(lens.get("top1_agreement"), (L + 1,), "logit-lens top-1 agreement", 0, 1)
    depth = lens.get("prediction_depth")
    if depth is not None:  # null: undefined (never stored as a number out of range)
        finite_or_nan(depth, (), "prediction depth", 0, L)


def _check_skip(skip: Any, L: int) -> None:
    if skip is None:
        return
    if not isinstance(skip, dict) or skip.get("layers") != L:
        raise AtlasFileError("its skip effect is not one of this run's blocks.")
    finite_or_nan(skip.get("later"), (L, L), "skip effect on later blocks", 0, 1e6)
    finite_or_nan(skip.get("later_max"), (L, L), "skip effect (max)", 0, 1e6)
    finite_or_nan(skip.get("kl"), (L,), "skip effect on the output", 0, 1e6)
