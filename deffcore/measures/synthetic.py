"""Seeded synthetic constructions with known effective depth (SPEC section 7).

    independent states   X_l iid standard normal (N, d), l = 1..L
    orthogonal states    X_l = sqrt(N) Q_l R_l: Q = [Q_1 .. Q_L] is one N x (L*b) matrix with
                         orthonormal, column-centred columns, Q_l its l-th block of b columns,
                         R_l a (b, d) standard normal mixing. Centred column spaces are
                         mutually orthogonal, so X_i^T X_j = 0 and CKA(i, j) = 0 for i != j.
                         Decision: b = min(d, (N-1)//L, 64); the cap keeps the QR cheap and
                         CKA does not depend on b.
    orthogonal updates   h_0, f_1..f_L iid standard normal (N, d); h_l = h_0 + s sum_{m<=l} f_m;
                         states are h_1..h_L, updates are h_l - h_{l-1} = s f_l.
    heavy tails          a teaching construction with t-distributed passages, 3 degrees of
                         freedom (`heavy_tailed_states`): one scale per passage for all its
                         layers, or one per component (h_0, each update); population S
                         unchanged (the trust rule's calibration beyond Gaussians).

All arrays are float32 numpy; the same seed gives the same arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from deffcore.core.checks import check_choice, is_real
from deffcore.core.errors import DeffError

if TYPE_CHECKING:
    from deffcore.measures.teaching import Knobs

#: Cap on the per-layer rank of the orthogonal-states construction.
ORTHOGONAL_RANK_CAP = 64


@dataclass
class SyntheticStates:
    """A construction's states (L, N, d), its updates (L, N, d) and h0 (N, d) where they exist."""

    states: np.ndarray
    updates: np.ndarray | None
    h0: np.ndarray | None
    name: str

    def states_with_h0(self) -> np.ndarray:
        """(L+1, N, d): h_0 .. h_L, for the update depth and matched references."""
        if self.h0 is None:
            raise DeffError(f"The {self.name!r} construction has no initial state h_0.")
        return np.concatenate([self.h0[None], self.states])


#: Copies of the (L, N, d) float32 states a construction and its measurement hold at once
#: (states, updates, their differences; the centred copy `similarity_matrix` makes).
STATE_COPIES = 4


def _check(n: int, d: int, layers: int, seed: int = 0) -> tuple[int, int, int, int]:
    """(n, d, layers, seed) as ints, checked before anything is drawn: integers (numpy's
    too), n >= 2, d >= 1, 2 to `MAX_LAYERS` layers, a seed >= 0, and the states
    (`STATE_COPIES` float32 copies, the (L, L) similarity) within the memory this machine can
    give; else one sentence (a DeffError), never numpy's MemoryError."""
    from deffcore.core.checks import (
        as_int,
        check_int,
        check_memory,
        check_passages,
        check_seed,
    )
    from deffcore.inputs.model import MAX_LAYERS, host_memory_bytes

    if all(isinstance(as_int(v), int) for v in (n, d, layers)) and (n < 2 or d < 1 or layers < 2):
        raise DeffError(
            f"A construction needs n >= 2 passages, d >= 1 features and at least 2 layers; "
            f"got n={n}, d={d}, layers={layers}."
        )
    n = check_passages(as_int(n), "n", 2)
    d = check_int(as_int(d), "d", 1)
    layers = check_int(as_int(layers), "layers", 2)
    seed = check_seed(as_int(seed))
    if layers > MAX_LAYERS:
        raise DeffError(
            f"A construction has at most {MAX_LAYERS:,} layers (deeper than any published "
            f"model), got layers={layers:,}."
        )
    check_memory(
        STATE_COPIES * 4 * layers * n * d + 8 * layers * layers,
        host_memory_bytes(),
        f"A construction of {layers:,} layers x {n:,} passages x {d:,} features (float32)",
        "ask for fewer passages, features or layers",
    )
    return n, d, layers, seed


def independent_states(n: int, d: int, layers: int, seed: int = 0) -> SyntheticStates:
    """X_l iid standard normal: the finite-sample iid reference D/L = 1/(1 + b(L-1))."""
    n, d, layers, seed = _check(n, d, layers, seed)
    rng = np.random.default_rng(seed)
    states = rng.standard_normal((layers, n, d), dtype=np.float32)
    return SyntheticStates(states=states, updates=None, h0=None, name="independent")


def centred_orthonormal(n: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """(n, k) float64 with orthonormal columns that are each orthogonal to the ones vector."""
    if k > n - 1:
        raise DeffError(
            f"Cannot build {k} orthonormal centred directions from only n = {n} passages "
            f"(at most n - 1 = {n - 1})."
        )
    g = rng.standard_normal((n, k))
    q, _ = np.linalg.qr(g - g.mean(axis=0))
    return q


def orthogonal_states(n: int, d: int, layers: int, seed: int = 0) -> SyntheticStates:
    """Layers with mutually orthogonal centred column spaces: CKA(i, j) = 0, D_eff/L ~ 1."""
    n, d, layers, seed = _check(n, d, layers, seed)
    b = min(d, (n - 1) // layers, ORTHOGONAL_RANK_CAP)
    if b < 1:
        raise DeffError(
            f"Orthogonal states need n > layers (one direction per layer at least); "
            f"got n={n}, layers={layers}."
        )
    rng = np.random.default_rng(seed)
    q = centred_orthonormal(n, layers * b, rng) * np.sqrt(n)
    mix = rng.standard_normal((layers, b, d))
    states = np.stack([q[:, i * b : (i + 1) * b] @ mix[i] for i in range(layers)])
    return SyntheticStates(
        states=states.astype(np.float32), updates=None, h0=None, name="orthogonal-states"
    )


def orthogonal_updates(
    n: int, d: int, layers: int, scale: float = 1.0, seed: int = 0
) -> SyntheticStates:
    """h_l = h_0 + scale * sum_{m<=l} f_m with h_0, f_m iid standard normal (Table S2)."""
    n, d, layers, seed = _check(n, d, layers, seed)
    if not is_real(scale) or not np.isfinite(scale) or scale <= 0:
        raise DeffError(f"The update scale must be a positive number; got {scale!r}.")
    rng = np.random.default_rng(seed)
    h0 = rng.standard_normal((n, d), dtype=np.float32)
    updates = rng.standard_normal((layers, n, d), dtype=np.float32)
    updates *= np.float32(scale)
    states = np.cumsum(updates, axis=0, dtype=np.float32)
    states += h0
    # the measured updates are exact differences of the stored float32 states
    updates = np.diff(np.concatenate([h0[None], states]), axis=0)
    return SyntheticStates(states=states, updates=updates, h0=h0, name="orthogonal-updates")


@dataclass
class Position0Construction:
    """The two poolings of one seeded construction (`position0_construction`) and their
    population similarity matrices (N -> infinity), `(L, L)` each."""

    default: np.ndarray  # (L, N, d) float32: the mean over every token, position 0 included
    no_pos0: np.ndarray  # (L, N, d) float32: the mean over the tokens after position 0
    S_default: np.ndarray
    S_no_pos0: np.ndarray


def position0_construction(
    n: int,
    d: int,
    layers: int,
    *,
    h0: float = 1.0,
    pos0: float = 0.0,
    onset: int = 1,
    seed: int = 0,
    dims: int | None = None,
) -> Position0Construction:
    """Pooled states with and without a position-0 component whose effect is known exactly.

    The tokens after position 0 pool to x_l = h_0 + f_1 + ... + f_l (h_0 of squared size `h0`
    per feature, unit updates, all iid standard normal (N, d) times their size): `no_pos0`.
    The position-0 token carries the same stream plus a passage-varying component s_l z that
    keeps one direction across layers (a massive activation from layer `onset` on), so the
    mean over all tokens is `default` = x_l + w_l z with w_l^2 = `pos0` for l >= onset, else 0
    (pos0: that component's squared size in the pooled mean, in units of one update).
    `dims`: z lives in the first k = dims features only, each of variance d/k (the same total
    size: a few massive features, as in real residual streams); None: all d (isotropic).
    Population linear CKA (SPEC section 5): with the cross-covariances C_ij = g_ij I + w_i w_j
    Sigma_z, g_ij = h0 + min(i, j) and Sigma_z = (d/k) on k features,

        S_ij = T_ij / sqrt(T_ii T_jj),  T_ij = tr(C_ij^2) = d g_ij^2 + 2 d g_ij w_i w_j
                                                            + (d^2 / k) w_i^2 w_j^2

    which for k = d is G^2 / (G_ii G_jj) with G = g + w w^T; no_pos0 is G_no^2 / (...).
    """
    n, d, layers, seed = _check(n, d, layers, seed)
    if not (h0 >= 0 and pos0 >= 0 and np.isfinite(h0) and np.isfinite(pos0)):
        raise DeffError(f"h0 and pos0 must be sizes >= 0; got {h0} and {pos0}.")
    k = d if dims is None else int(dims)
    if not 1 <= k <= d:
        raise DeffError(f"dims must be an integer in 1..d = {d}; got {dims!r}.")
    rng = np.random.default_rng(seed)
    x = np.cumsum(rng.standard_normal((layers, n, d)), axis=0)
    x += np.sqrt(h0) * rng.standard_normal((n, d))
    w = np.where(np.arange(1, layers + 1) >= onset, np.sqrt(pos0), 0.0)
    z = rng.standard_normal((n, d))
    if k < d:
        z[:, k:] = 0.0
        z *= np.sqrt(d / k)
    default = x + w[:, None, None] * z
    ell = np.arange(1, layers + 1, dtype=np.float64)
    g = h0 + np.minimum.outer(ell, ell)
    ww = np.outer(w, w)
    t_default = d * g**2 + 2 * d * g * ww + (d * d / k) * ww**2

    def population(t: np.ndarray) -> np.ndarray:
        diag = np.diag(t)
        return t / np.sqrt(np.outer(diag, diag))

    return Position0Construction(
        default=default.astype(np.float32),
        no_pos0=x.astype(np.float32),
        S_default=population(t_default),
        S_no_pos0=population(g**2),
    )


#: Heavy-tailed versions of the teaching constructions (`heavy_tailed_states`).
HEAVY_TAILS: tuple[str, ...] = ("passage", "multivariate_t")
#: Degrees of freedom of the heavy tails: 3, the fewest with a finite variance (E[s^2] =
#: df / (df - 2) = 3) and an infinite fourth moment (the sampling error of a covariance, and
#: so of CKA, then shrinks more slowly than 1/sqrt(N)).
HEAVY_DF = 3.0


def student_scales(shape: tuple[int, ...], df: float, rng: np.random.Generator) -> np.ndarray:
    """sqrt(df / chi^2_df) per entry: the scale that makes a standard normal vector a
    multivariate t with `df` degrees of freedom. E[s^2] = df / (df - 2) for df > 2."""
    return np.sqrt(df / rng.chisquare(df, size=shape))


def heavy_tailed_states(
    step: str,
    knobs: Knobs,
    n: int,
    d: int,
    tails: str,
    *,
    df: float = HEAVY_DF,
    seed: int = 0,
) -> np.ndarray:
    """(L, N, d) float32 states of a teaching construction
    (`deffcore.measures.teaching.sample_states`, the same z for the same seed) with
    heavy-tailed passages; the population S is the construction's closed form
    (`teaching.population_similarity`) unchanged.

    tails "passage": one scale s_b = sqrt(df / chi^2_df) per passage multiplies every layer's
    state (h_l[b] = s_b g_l[b]): the whole stream of a passage is one multivariate t vector,
    its norm power-law tailed (a few passages with huge states). Cov(h_i, h_j) = E[s^2] G_ij.
    tails "multivariate_t": each innovation vector (z_0 of h_0, z_m of update m, the d features
    of one passage) gets its own scale, so h_0 and every update are independent multivariate
    t vectors with `df` degrees of freedom. Every component's covariance is multiplied by the
    same df / (df - 2), so G, and S = G^2 / (G_ii G_jj), are unchanged.
    The scales come from a stream of their own (`numpy.random.default_rng([seed, 1])`).
    """
    from deffcore.measures.teaching import clamp_knobs, sample_states

    check_choice(tails, HEAVY_TAILS, "heavy tails")
    if not (np.isfinite(df) and df > 2):
        raise DeffError(f"Heavy tails need df > 2 (a finite variance); got {df}.")
    knobs, _ = clamp_knobs(knobs)
    L = int(knobs.L)
    rng = np.random.default_rng([int(seed), 1])
    if tails == "passage":
        scales = np.broadcast_to(student_scales((n,), df, rng), (L + 1, n))
    else:
        scales = student_scales((L + 1, n), df, rng)
    return sample_states(step, knobs, n, d, seed, scales=scales)


#: CLI names -> constructors (orthogonal-updates also takes `scale`).
CONSTRUCTIONS: dict[str, Callable[..., SyntheticStates]] = {
    "independent": independent_states,
    "orthogonal-states": orthogonal_states,
    "orthogonal-updates": orthogonal_updates,
}
