"""Every similarity measure against its own permutation null (SPEC section 17.3).

For each layer pair i < j the null is the measure with layer j's passages permuted (the
correspondence between the two layers broken, each layer's own geometry kept), at the run's
own N and d. B seeded permutations pi_1..pi_B of the N passages are drawn once; permutation b
is applied to the second layer of every pair (as Gröger et al.'s `calibrate_layers`), and each
layer is prepared once (`measures.similarity_measures.prepare_layers`), so a permutation costs
only the pair step.

Per pair, as `calibrated-similarity` 0.1.1's `calibrate` (Gröger et al. 2026, Algorithm 1):

    tau   = the ceil((1 - alpha)(B + 1))-th smallest of {S_obs, null_1..null_B}
    p     = (1 + #{null_b >= S_obs}) / (B + 1)
    S_cal = clip((S_obs - tau) / max(1 - tau, 1e-12), 0, 1)        (smax = 1)

Under exchangeability (independent layers) S_obs exceeds tau with probability at most alpha.
The diagonal of S_cal is 1 (a layer with itself), so D_eff of S_cal is defined (SPEC section 4);
the null mean and the rescaled (S - mean) / (1 - mean) are reported beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from deffcore.core.errors import InvalidArgumentError
from deffcore.measures.depth import effective_depth
from deffcore.measures.similarity_measures import (
    DEFAULT_MAX_BYTES,
    MeasureOptions,
    Permutation,
    pairs_matrix,
    prepare_layers,
)

#: calibrated-similarity's guard on 1 - tau.
EPSILON = 1e-12


@dataclass
class CalibratedSimilarity:
    """A measure's matrix beside its permutation null (SPEC section 17.3); all (L, L)."""

    measure: str
    S: np.ndarray  # observed
    null: np.ndarray  # (B, L, L), diagonal 1
    null_mean: np.ndarray
    threshold: np.ndarray  # tau, the null's (1 - alpha) critical value
    p_value: np.ndarray
    S_cal: np.ndarray
    S_centred: np.ndarray  # (S - null mean) / (1 - null mean), diagonal 1
    alpha: float
    permutations: int
    seed: int
    deff: float
    deff_cal: float


#: The most permutations a calibrated null draws: its (1 - alpha) threshold settles within a
#: few hundred (SPEC section 17.3), and each one recomputes every layer pair.
MAX_PERMUTATIONS = 10_000


def check_permutations(
    permutations: object, name: str = "permutations", *, n: int | None = None, layers: int = 0
) -> int:
    """`permutations` of a calibrated null, checked before any is drawn: a whole number from 1
    to `MAX_PERMUTATIONS` and, when the passages `n` (and `layers`) are known, its drawn
    permutations and (L, L) null matrices within this machine's memory. One sentence
    (InvalidArgumentError, OutOfMemoryError) naming `name`."""
    if (
        isinstance(permutations, bool)
        or not isinstance(permutations, int)
        or not 1 <= permutations <= MAX_PERMUTATIONS
    ):
        raise InvalidArgumentError(
            f"{name} must be a whole number from 1 to {MAX_PERMUTATIONS:,}, got {permutations!r}."
        )
    if n is not None:
        from deffcore.core.checks import check_memory
        from deffcore.inputs.model import host_memory_bytes

        memory = host_memory_bytes()
        each = 8 * n + 8 * layers * layers  # one permutation (int64) and its null (float64)
        check_memory(
            permutations * each,
            memory,
            f"{permutations:,} permutations of {n:,} passages and their {layers} x {layers} nulls",
            f"use {name} <= {max((memory or 0) // each, 1):,}",
        )
    return permutations


def permutations_for(n: int, permutations: int, seed: int) -> list[np.ndarray]:
    """The B seeded permutations of N passages the null uses (one generator, drawn in order)."""
    rng = np.random.default_rng(seed)
    return [rng.permutation(n) for _ in range(permutations)]


def calibrate_scores(s: np.ndarray, null: np.ndarray, alpha: float) -> tuple[np.ndarray, ...]:
    """Observed (L, L) and null (B, L, L) -> (tau, p, S_cal) as calibrated-similarity defines
    them (module docstring); diagonal of S_cal 1."""
    b = null.shape[0]
    combined = np.sort(np.concatenate([s[None], null], axis=0), axis=0)
    idx = min(max(math.ceil((1.0 - alpha) * (b + 1)) - 1, 0), b)
    tau = combined[idx]
    p = (1.0 + np.sum(null >= s[None], axis=0)) / (b + 1)
    s_cal = np.clip((s - tau) / np.maximum(1.0 - tau, EPSILON), 0.0, 1.0)
    np.fill_diagonal(s_cal, 1.0)
    return tau, p, s_cal


def calibrated_similarity(
    states: Any,
    measure: str = "cka",
    *,
    permutations: int = 200,
    alpha: float = 0.05,
    seed: int = 0,
    k: int = 10,
    rsa_method: str = "spearman",
    variance: float = 0.99,
    cca_summary: str = "mean",
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> CalibratedSimilarity:
    """`measure`'s all-pairs matrix, its permutation null of B = `permutations` seeded
    permutations, the null's (1 - alpha) threshold, S_cal and D_eff of S and of S_cal
    (SPEC section 17.3). Cost: B + 1 times the measure's pair step (each layer prepared once).
    """
    check_permutations(permutations)
    if not 0.0 < float(alpha) < 1.0:
        raise InvalidArgumentError(f"alpha must be in (0, 1); got {alpha!r}.")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidArgumentError(f"seed must be a non-negative integer; got {seed!r}.")
    opts = MeasureOptions(k=k, rsa_method=rsa_method, variance=variance, cca_summary=cca_summary)
    prepared = prepare_layers(states, measure, opts, max_bytes=max_bytes)
    s = pairs_matrix(prepared, measure, opts)
    n = _passages(states)
    check_permutations(permutations, n=n, layers=len(s))  # before the null is drawn
    null = np.stack(
        [
            pairs_matrix(prepared, measure, opts, Permutation(pi))
            for pi in permutations_for(n, permutations, seed)
        ]
    )
    tau, p, s_cal = calibrate_scores(s, null, alpha)
    mean = null.mean(axis=0)
    centred = (s - mean) / np.maximum(1.0 - mean, EPSILON)
    np.fill_diagonal(centred, 1.0)
    return CalibratedSimilarity(
        measure=measure,
        S=s,
        null=null,
        null_mean=mean,
        threshold=tau,
        p_value=p,
        S_cal=s_cal,
        S_centred=centred,
        alpha=float(alpha),
        permutations=permutations,
        seed=seed,
        deff=effective_depth(s),
        deff_cal=effective_depth(s_cal),
    )


def _passages(states: Any) -> int:
    shape = getattr(states, "shape", None)
    if shape is not None:
        return int(shape[1])
    return int(np.asarray(states[0]).shape[0])
