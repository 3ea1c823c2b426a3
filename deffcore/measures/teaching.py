"""Closed forms behind the Synthetic lab's teaching mode: a six-step story and its presets.

Every curve of the story is a closed form (no sampling), so a slider answers in milliseconds;
sampling is a separate, bounded call (`sample_states`) made only on request.

The story builds one construction step by step (each step keeps the knobs of the earlier ones):

    1 independent states          S = I                                D_eff = L
    2 accumulated orthogonal      a_m = 1, no h_0: S = min/max         D_eff = F_L = 2L/(L+1)
      updates
    3 a persistent h_0            a_0 = h0 (size of h_0 in units of one update)
    4 growing update norms        a_m = g^(m-1)
    5 correlated updates          r(k) = rho^k  (an AR(1) profile: a valid correlation for
                                  every 0 <= rho < 1, so the construction can be sampled)
    6 finite-sample bias          linear CKA measured on N passages of d features

Steps 2-5 are `deffcore.measures.references.accumulated_similarity(a, a0=, r=)` (SPEC section 5),
the
population ("N -> infinity") linear CKA of isotropic Gaussian constructions.

Finite-sample bias (step 6), derived here. Let the states be jointly Gaussian, independent
across passages and features, with cross-covariance G_ij per entry (G of SPEC section 5), and
let X_i be centred over N passages: X_i = H Z_i, H the centring projector of rank N-1, so the
centred data behave as n = N-1 iid rows. For the d x d matrix X_i^T X_j, an off-diagonal
entry has E[.^2] = n G_ii G_jj and a diagonal entry E[.^2] = n^2 G_ij^2 + n (G_ii G_jj + G_ij^2).
Summing,

    E ||X_i^T X_j||_F^2 = d n [ (n+1) G_ij^2 + d G_ii G_jj ],

and the ratio of these expectations (what linear CKA estimates, up to O(1/sqrt(N d))
fluctuations) is, with N = n + 1 passages,

    E[CKA_ij] ~= (N S_ij + d) / (N + d) = (1 - b) S_ij + b,     b = d / (N + d),

with S_ij = G_ij^2 / (G_ii G_jj) the population CKA and a unit diagonal. For independent
states (S = I) this is the iid bias b of SPEC section 3 and gives exactly the finite-sample
iid reference L / (1 + b (L-1)); as N -> infinity, b -> 0 and the bias vanishes. Every
off-diagonal similarity is pulled towards 1 by the same b, so D_eff falls: this is why a
sampled "orthogonal updates" curve sits below its own F_L line. The approximation is tested
against Monte Carlo sampling in tests/test_teaching.py. Unbiased CKA estimates S itself.

The metric of the story is linear CKA (the paper's, and the app's default metric).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from deffcore.core.checks import check_choice
from deffcore.core.errors import DeffError
from deffcore.measures.depth import effective_depth, lag_profile, reference_depth
from deffcore.measures.references import accumulated_similarity, iid_reference_depth
from deffcore.measures.similarity import cka_finite_sample_bias

#: The story's steps, in order: key -> (title, what this step adds, what to notice).
STEPS: dict[str, tuple[str, str, str]] = {
    "independent": (
        "1 · Independent states",
        "Every layer's state is drawn afresh, unrelated to the others.",
        "No two layers are alike, so every layer counts: D_eff = L (D_eff/L = 1). Real "
        "networks never look like this, because each layer adds to the previous one.",
    ),
    "orthogonal_updates": (
        "2 · Accumulated orthogonal updates (F_L)",
        "Each layer adds one new, unrelated update of the same size to a running sum: "
        "h_l = f_1 + ... + f_l.",
        "Neighbouring states share almost all their updates, so they are very similar even "
        "though every update is new. S(i, j) = min(i, j)/max(i, j) and D_eff = F_L = 2L/(L+1), "
        "below 2 for any depth. F_L is the yardstick every measurement is compared with.",
    ),
    "h0": (
        "3 · A persistent h_0",
        "The sum starts from an initial state h_0 (the embedding), which every later state keeps.",
        "A shared h_0 makes all states more alike, so D_eff falls below F_L: more redundant "
        "than orthogonal updates, without any layer repeating another.",
    ),
    "growing": (
        "4 · Growing update norms",
        "Later updates are larger: update m has squared size g^(m-1).",
        "Large late updates swamp what came before, so early and late states differ more "
        "and D_eff rises (above F_L when h_0 is small): less redundant than orthogonal updates.",
    ),
    "correlated": (
        "5 · Correlated updates",
        "Updates are no longer unrelated: updates k layers apart have correlation ρ^k.",
        "Layers that push in similar directions make the states more alike, so D_eff falls.",
    ),
    "finite_sample": (
        "6 · Finite-sample bias",
        "The similarity is now measured with linear CKA on N passages of d features.",
        "With N not much larger than d, linear CKA of even unrelated states is about "
        "b = d/(N+d), not 0. Every similarity is pulled towards 1 by b, so a sampled D_eff "
        "sits below its closed form, and a sampled 'orthogonal updates' curve below F_L. "
        "More passages (or unbiased CKA) remove it.",
    ),
}
STEP_KEYS: tuple[str, ...] = tuple(STEPS)


def step_for(text: str) -> str:
    """A story step from a link's text: its number "1".."6" or its key (`STEP_KEYS`)."""
    value = str(text).strip()
    if value in STEPS:
        return value
    if value.isdigit() and 1 <= int(value) <= len(STEP_KEYS):
        return STEP_KEYS[int(value) - 1]
    raise DeffError(
        f"The story has no step {value[:40]!r}: give its number, 1 to {len(STEP_KEYS)}."
    )


def step_number(step: str) -> int:
    """The step's number in the story, 1..6 (what a link carries)."""
    return STEP_KEYS.index(step_for(step)) + 1


#: Each step's lesson in one sentence: what a projector shows beside the step's chart.
LESSONS: dict[str, str] = {
    "independent": "Unrelated layers all count: D_eff = L.",
    "orthogonal_updates": "Adding new, unrelated updates to a running sum gives D_eff = F_L "
    "= 2L/(L+1), below 2 at any depth: the yardstick.",
    "h0": "A shared h_0 makes every state more alike, so D_eff falls below F_L.",
    "growing": "Larger late updates make early and late states differ more, so D_eff rises.",
    "correlated": "Updates that point the same way make the states more alike, so D_eff falls.",
    "finite_sample": "Linear CKA on few passages reads unrelated states as alike (about "
    "d/(N+d)), so a sampled D_eff sits below its closed form.",
}

#: The bounds of the knobs; values outside are clamped (with a note), never an error.
BOUNDS: dict[str, tuple[float, float]] = {
    "L": (2, 64),
    "h0": (0.0, 100.0),
    "growth": (0.5, 2.0),
    "rho": (0.0, 0.95),
    "n": (4, 1_000_000),
    "d": (1, 100_000),
}
#: Sampling budget: N * d * L numbers (float32), about a second or two of CKA on a laptop.
SAMPLE_BUDGET = 2**24


@dataclass(frozen=True)
class Knobs:
    """The story's settings. h0: ||h_0||^2 in units of one (first) update; growth: g, the
    ratio of successive update sizes a_{m+1}/a_m; rho: the lag-1 update correlation; n, d:
    passages and features of the finite-sample step."""

    L: int = 24
    h0: float = 1.0
    growth: float = 1.1
    rho: float = 0.3
    n: int = 256
    d: int = 64


#: Presets: name -> (story step, knobs). Projector-friendly defaults and the classic cases.
PRESETS: dict[str, tuple[str, Knobs]] = {
    "Textbook F_L (equal orthogonal updates, L = 24)": (
        "orthogonal_updates",
        Knobs(L=24, h0=0.0, growth=1.0, rho=0.0),
    ),
    "Embedding as large as 4 updates": ("h0", Knobs(L=24, h0=4.0, growth=1.0, rho=0.0)),
    "Updates growing 10% per layer": ("growing", Knobs(L=24, h0=1.0, growth=1.1, rho=0.0)),
    "Correlated updates (ρ = 0.5)": ("correlated", Knobs(L=24, h0=1.0, growth=1.1, rho=0.5)),
    "Old lab default (N = 256, d = 64, s = 1)": (
        "finite_sample",
        Knobs(L=24, h0=1.0, growth=1.0, rho=0.0, n=256, d=64),
    ),
    "Paper anchor: N = 10,000, d = 1024, L = 32": (
        "finite_sample",
        Knobs(L=32, h0=0.0, growth=1.0, rho=0.0, n=10_000, d=1024),
    ),
    "Extreme: N = 16, d = 512, L = 48": (
        "finite_sample",
        Knobs(L=48, h0=1.0, growth=1.0, rho=0.0, n=16, d=512),
    ),
}


def clamp_knobs(knobs: Knobs) -> tuple[Knobs, list[str]]:
    """Knobs within `BOUNDS` (non-finite values fall back to the defaults) and one note per
    value that was changed, so the page shows a safe bound instead of an error."""
    default = Knobs()
    changes: dict[str, Any] = {}
    notes = []
    for name, (lo, hi) in BOUNDS.items():
        value = getattr(knobs, name)
        if value is None or not np.isfinite(value):
            changes[name] = getattr(default, name)
            notes.append(f"{name} was not a number; using {changes[name]}.")
            continue
        clipped = min(max(value, lo), hi)
        if name in ("L", "n", "d"):
            clipped = int(np.rint(clipped))
        if clipped != value:
            notes.append(f"{name} = {value} is outside {lo:g}..{hi:g}; using {clipped:g}.")
        changes[name] = clipped
    return replace(knobs, **changes), notes


def update_sizes(L: int, growth: float) -> np.ndarray:
    """a_m = growth^(m-1), m = 1..L: (L,) float64 squared update sizes."""
    return np.power(float(growth), np.arange(L, dtype=np.float64))


def correlation_profile(L: int, rho: float) -> np.ndarray:
    """r(k) = rho^k, k = 0..L-1 (r(0) = 1): (L,) float64, positive definite for |rho| < 1."""
    return np.power(float(rho), np.arange(L, dtype=np.float64))


def active_knobs(step: str) -> set[str]:
    """The knobs a step uses: its own and every earlier step's."""
    check_choice(step, STEP_KEYS, "story step")
    order = STEP_KEYS.index(step)
    knobs = {"L"}
    for key, knob in (("h0", "h0"), ("growing", "growth"), ("correlated", "rho")):
        if STEP_KEYS.index(key) <= order:
            knobs.add(knob)
    if step == "finite_sample":
        knobs |= {"n", "d"}
    return knobs


def population_similarity(step: str, knobs: Knobs) -> np.ndarray:
    """S (L, L) float64 of a story step at N -> infinity (linear CKA's population value).

    The finite-sample step returns its population S too; see `finite_sample_similarity`.
    """
    active = active_knobs(step)
    L = int(knobs.L)
    if step == "independent":
        return np.eye(L)
    a = update_sizes(L, knobs.growth if "growth" in active else 1.0)
    a0 = float(knobs.h0) if "h0" in active else 0.0
    r = correlation_profile(L, knobs.rho) if "rho" in active and knobs.rho > 0 else None
    S = accumulated_similarity(a, a0=a0, r=r)
    return (S + S.T) / 2  # the cumulative sums round differently above and below the diagonal


def finite_sample_similarity(S: Any, n: int, d: int) -> np.ndarray:
    """Expected linear CKA on n passages of d features: (1 - b) S + b off the diagonal,
    b = d/(n+d), unit diagonal (derivation in the module docstring). S (L, L) -> (L, L)."""
    S = np.asarray(S, dtype=np.float64)
    b = cka_finite_sample_bias(n, d)
    out = (1.0 - b) * (S + S.T) / 2 + b  # exactly symmetric
    np.fill_diagonal(out, 1.0)
    return out


@dataclass
class StepResult:
    """One story step: its S, lag profile and D_eff beside F_L and the previous step's D_eff.

    S (L, L), rho (L-1,). deff_previous: D_eff with this step's new ingredient left out (None
    for the first step). deff_population: the N -> infinity value (differs only at step 6).
    """

    step: str
    title: str
    adds: str
    takeaway: str
    knobs: Knobs
    S: np.ndarray
    rho: np.ndarray
    deff: float
    F_L: float
    deff_previous: float | None
    deff_population: float
    bias: float | None = None
    deff_iid: float | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def lesson(self) -> str:
        """The step's lesson in one sentence (`LESSONS`)."""
        return LESSONS[self.step]

    @property
    def gap_pct(self) -> float:
        """100 (1 - D_eff / F_L): > 0 means more redundant than orthogonal updates."""
        return 100.0 * (1.0 - self.deff / self.F_L)

    def summary(self) -> str:
        """One plain-language sentence with the numbers of this step."""
        L = self.knobs.L
        gap = self.gap_pct
        if self.step == "independent":
            return (
                f"D_eff = {self.deff:.3f} = L: all {L} layers count. For comparison, "
                f"accumulating updates (the next step) gives at most F_L = {self.F_L:.3f}."
            )
        if abs(gap) < 0.05:
            verdict = "exactly the orthogonal-update reference F_L"
        elif gap > 0:
            verdict = f"{gap:.1f}% below F_L: more redundant than orthogonal updates"
        else:
            verdict = f"{-gap:.1f}% above F_L: less redundant than orthogonal updates"
        text = (
            f"D_eff = {self.deff:.3f} of L = {L} layers (D_eff/L = {self.deff / L:.3f}); "
            f"F_L = {self.F_L:.3f}. That is {verdict}."
        )
        if self.deff_previous is not None:
            text += f" At the previous step: D_eff = {self.deff_previous:.3f}."
        return text


def story_step(step: str, knobs: Knobs) -> StepResult:
    """The closed-form result of one story step (milliseconds for L <= 64)."""
    knobs, notes = clamp_knobs(knobs)
    S_pop = population_similarity(step, knobs)  # checks the step's name first
    title, adds, takeaway = STEPS[step]
    deff_pop = effective_depth(S_pop)
    bias = deff_iid = None
    S = S_pop
    if step == "finite_sample":
        S = finite_sample_similarity(S_pop, knobs.n, knobs.d)
        bias = cka_finite_sample_bias(knobs.n, knobs.d)
        deff_iid = iid_reference_depth(knobs.n, knobs.d, knobs.L)
        if knobs.n < 10 * knobs.d:
            notes.append(
                f"N = {knobs.n} is not much larger than d = {knobs.d}: unrelated states would "
                f"still have CKA ≈ {bias:.3f}."
            )
    index = STEP_KEYS.index(step)
    previous = None
    if step == "finite_sample":  # the previous step is this population S
        previous = deff_pop
    elif index > 0:
        previous = effective_depth(population_similarity(STEP_KEYS[index - 1], knobs))
    return StepResult(
        step=step,
        title=title,
        adds=adds,
        takeaway=takeaway,
        knobs=knobs,
        S=S,
        rho=lag_profile(S),
        deff=effective_depth(S),
        F_L=reference_depth(knobs.L),
        deff_previous=previous,
        deff_population=deff_pop,
        bias=bias,
        deff_iid=deff_iid,
        notes=notes,
    )


# ---------------------------------------------------------------------------------------------
# Sampling (on request only)


def sample_cost(knobs: Knobs, n: int, d: int) -> int:
    """Numbers a sample of the construction holds: L * N * d."""
    return int(knobs.L) * int(n) * int(d)


def sampling_refusal(knobs: Knobs, n: int, d: int) -> str | None:
    """None when (L, N, d) fits `SAMPLE_BUDGET`, else one sentence saying what to lower."""
    cost = sample_cost(knobs, n, d)
    if cost <= SAMPLE_BUDGET:
        return None
    return (
        f"Sampling L·N·d = {knobs.L}·{n}·{d} = {cost / 1e6:.1f} million numbers is beyond this "
        f"lab's classroom budget ({SAMPLE_BUDGET / 1e6:.1f} million, a second or two); the closed "
        "form above is exact in expectation. Lower N, d or L to sample."
    )


def sample_states(
    step: str,
    knobs: Knobs,
    n: int,
    d: int,
    seed: int = 0,
    *,
    scales: np.ndarray | None = None,
) -> np.ndarray:
    """Draw the step's construction: (L, N, d) float32 states h_1 .. h_L.

    Independent states: iid standard normal. Otherwise h_l = sqrt(a_0) z_0 + sum_{m<=l} f_m
    with f_m = sqrt(a_m) (C z)_m, C the Cholesky factor of the AR(1) correlation rho^|m-n|
    (applied along the layer axis), z iid standard normal: exactly the covariance the closed
    form assumes. Raises DeffError beyond `SAMPLE_BUDGET` (the page checks first).

    scales (L+1, N), optional: every passage's innovations multiplied by a random scale
    before anything is mixed, row 0 for z_0 and row m for z_m (the independent step: row l for
    layer l); independent of z with E[scale^2] the same for every row, they leave the
    population S unchanged (`deffcore.measures.synthetic.heavy_tailed_states` draws them).
    """
    knobs, _ = clamp_knobs(knobs)
    if n < 4 or d < 1:
        raise DeffError(f"Sampling needs N >= 4 passages and d >= 1 features; got {n}, {d}.")
    refusal = sampling_refusal(knobs, n, d)
    if refusal:
        raise DeffError(refusal)
    active = active_knobs(step)
    L = int(knobs.L)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((L, n, d), dtype=np.float32)
    if scales is not None:
        scales = np.asarray(scales, dtype=np.float32)
        if scales.shape != (L + 1, n):
            raise DeffError(f"scales must be (L+1, N) = {(L + 1, n)}; got {scales.shape}.")
        z *= scales[1:, :, None]
    if step == "independent":
        return z
    a = update_sizes(L, knobs.growth if "growth" in active else 1.0)
    rho = float(knobs.rho) if "rho" in active else 0.0
    if rho > 0:
        lags = np.abs(np.subtract.outer(np.arange(L), np.arange(L)))
        chol = np.linalg.cholesky(correlation_profile(L, rho)[lags]).astype(np.float32)
        z = (chol @ z.reshape(L, -1)).reshape(L, n, d)
    z *= np.sqrt(a).astype(np.float32)[:, None, None]
    states = np.cumsum(z, axis=0, dtype=np.float32)
    a0 = float(knobs.h0) if "h0" in active else 0.0
    if a0 > 0:
        z0 = rng.standard_normal((n, d), dtype=np.float32)
        if scales is not None:
            z0 *= scales[0][:, None]
        states += np.float32(np.sqrt(a0)) * z0
    return states


@dataclass
class SampledStep:
    """A sampled construction measured with linear and unbiased CKA, beside its closed forms.

    S_cka, S_unbiased (L, L); expected_cka: the finite-sample closed form at this N, d;
    population: the N -> infinity closed form.
    """

    n: int
    d: int
    S_cka: np.ndarray
    S_unbiased: np.ndarray
    expected_cka: np.ndarray
    population: np.ndarray

    def depths(self) -> dict[str, float]:
        return {
            "sampled, linear CKA": effective_depth(self.S_cka),
            "closed form with bias b = d/(N+d)": effective_depth(self.expected_cka),
            "sampled, unbiased CKA": effective_depth(self.S_unbiased),
            "closed form, N → ∞": effective_depth(self.population),
        }


def sample_step(step: str, knobs: Knobs, n: int, d: int, seed: int = 0) -> SampledStep:
    """Sample a step at (N, d) and measure it with linear and unbiased CKA."""
    from deffcore.measures.similarity import similarity_matrix

    knobs, _ = clamp_knobs(knobs)
    states = sample_states(step, knobs, n, d, seed)
    population = population_similarity(step, knobs)
    return SampledStep(
        n=n,
        d=d,
        S_cka=similarity_matrix(states, "cka"),
        S_unbiased=similarity_matrix(states, "unbiased_cka"),
        expected_cka=finite_sample_similarity(population, n, d),
        population=population,
    )


# ---------------------------------------------------------------------------------------------
# The free sweep over depth (closed forms of the three constructions of SPEC section 7)


#: The free sweep's update construction: unit-size h_0 plus updates of size s (SPEC section 7's
#: orthogonal updates). One name per construction: the story's step 2 ("accumulated orthogonal
#: updates", no h_0: exactly F_L) is another construction.
UPDATES_ON_H0 = "orthogonal updates on h_0"


def sweep_closed_form(n: int, d: int, depths: Any, scale: float = 1.0) -> list[dict[str, Any]]:
    """Expected linear-CKA D_eff/L and rho(1) of the three constructions at each depth.

    independent states: the finite-sample iid reference. orthogonal states: CKA(i != j) = 0
    exactly (orthogonal column spaces have no bias), D_eff/L = 1; needs N > L (else NaN).
    orthogonal updates on h_0 with scale s: h_0 and f_m iid, so a_m = s^2 and a_0 = 1, with the
    finite-sample bias. Rows: construction, L, deff_over_L, rho1.
    """
    if n < 2 or d < 1 or not np.isfinite(scale) or scale <= 0:
        raise DeffError(
            f"The sweep needs N >= 2, d >= 1 and a positive scale; got {n}, {d}, {scale}."
        )
    rows = []
    for L in depths:
        L = int(L)
        iid = finite_sample_similarity(np.eye(L), n, d)
        upd = finite_sample_similarity(accumulated_similarity(np.full(L, scale**2), a0=1.0), n, d)
        ok = n > L  # orthogonal states need one centred direction per layer at least
        for name, deff_over_L, rho1 in (
            ("independent states", effective_depth(iid) / L, float(lag_profile(iid)[0])),
            (UPDATES_ON_H0, effective_depth(upd) / L, float(lag_profile(upd)[0])),
            ("orthogonal states", 1.0 if ok else float("nan"), 0.0 if ok else float("nan")),
        ):
            rows.append({"construction": name, "L": L, "deff_over_L": deff_over_L, "rho1": rho1})
    return rows


def updates_vs_states(n: int, d: int, L: int, scale: float = 1.0) -> dict[str, Any]:
    """Expected linear-CKA lag profiles and D_eff of the orthogonal-updates construction at
    (N, d): the accumulated states h_1..h_L (a_0 = 1, a_m = s^2) and the updates themselves
    (independent states: every lag is the bias b). Keys: rho_states, rho_updates (L-1,),
    deff_states, deff_updates."""
    if L < 2:
        raise DeffError(f"The lag profile needs at least 2 layers; got L = {L}.")
    if not np.isfinite(scale) or scale <= 0:
        raise DeffError(f"The update scale must be a positive number; got {scale}.")
    S_h = finite_sample_similarity(accumulated_similarity(np.full(L, scale**2), a0=1.0), n, d)
    S_f = finite_sample_similarity(np.eye(L), n, d)
    return {
        "rho_states": lag_profile(S_h),
        "rho_updates": lag_profile(S_f),
        "deff_states": effective_depth(S_h),
        "deff_updates": effective_depth(S_f),
    }


def story_curves(
    res: StepResult, sampled: SampledStep | None = None
) -> tuple[dict[str, tuple[np.ndarray, str]], dict[str, float]]:
    """What the story's charts draw for a step: (lag curves, D_eff bars).

    curves: name -> (rho (L-1,), style) with style one of "closed", "previous", "population",
    "sampled", "sampled_unbiased" (`deffcore.figures.STORY_STYLES`); depths: name -> D_eff.
    The previous step is drawn for comparison (at step 6: the same construction at N -> oo;
    not at step 3, whose previous step is the F_L reference every chart draws anyway);
    samples, when given, with linear and unbiased CKA.
    """
    curves: dict[str, tuple[np.ndarray, str]] = {"this step (closed form)": (res.rho, "closed")}
    depths: dict[str, float] = {"this step (closed form)": res.deff}
    index = STEP_KEYS.index(res.step)
    prev = STEP_KEYS[index - 1] if index > 0 else None
    # step 2 against step 1 (D_eff = L) would only squash the chart; step 3's previous step is
    # the orthogonal-update reference itself, which the charts always draw (once)
    if index > 1 and prev != "orthogonal_updates":
        final = res.step == "finite_sample"
        label = "same construction, N → ∞" if final else f"previous step ({STEPS[prev][0]})"
        curves[label] = (
            lag_profile(population_similarity(prev, res.knobs)),
            "population" if final else "previous",
        )
        depths[label] = float(res.deff_previous)
    if res.deff_iid is not None:
        depths["independent states at this N, d (iid reference)"] = res.deff_iid
    if sampled is not None:
        curves["sampled, linear CKA"] = (lag_profile(sampled.S_cka), "sampled")
        curves["sampled, unbiased CKA"] = (lag_profile(sampled.S_unbiased), "sampled_unbiased")
        depths |= {k: v for k, v in sampled.depths().items() if k.startswith("sampled")}
    return curves, depths
