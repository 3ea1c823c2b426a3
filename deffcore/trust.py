"""How far to trust a headline number: "solid", "indicative" or "noise", and the ONE action
that would make it solid.

    t = trust_badge(n=512, d=576, metric="cka", value=0.2229, unbiased_value=0.2238)
    t.level   -> "indicative"
    t.action  -> "use ≥ 2,304 passages"
    t.reasons -> ("N = 512 passages is below the 2,304 a solid number needs (N ≥ max(2,000,
                  4d) with d = 576).",)

Three things decide it (issue 12.2):

1. N against d. Linear CKA of unrelated layers is about d/(N+d) (SPEC section 3), and the
   passage-to-passage spread of a mean over N passages falls like 1/sqrt(N). A number is
   solid only from N >= max(SOLID_MIN_N, 4 d) passages (bias d/(N+d) <= SOLID_MAX_BIAS); it
   is noise below NOISE_MIN_N passages whatever d.
2. The bootstrap interval's width, when one was computed: relative width (hi - lo)/|value| at
   most SOLID_CI_REL for solid; wider than NOISE_CI_REL is noise.
3. The random-weight band, when one exists: fewer than MIN_NULL_SEEDS seeds give no usable
   width (action "add random seeds"); a value inside the band does not tell the model from
   random weights (indicative, and no passage count changes that).

The CKA bias is *material* only when it moves the number: for linear CKA, when D_eff/L under
unbiased CKA differs by more than BIAS_MATERIAL_REL (relative); without that comparison, when
the bias itself exceeds SOLID_MAX_BIAS. For unbiased CKA and cosine it is never material (no
d/(N+d) floor). Material bias above NOISE_BIAS (N < d) makes the number noise.

Actions, the first that applies: "use ≥ <solid N> passages" (N too small), "switch to
unbiased CKA" (the bias is material although N is large), "use ≥ <2N> passages" (the interval
is still too wide), "add random seeds" (band from too few seeds).
"""

from __future__ import annotations

from dataclasses import dataclass

from deffcore.errors import DeffError

#: Fewer passages than this: noise whatever d (a handful of passages pins down nothing).
NOISE_MIN_N = 32
#: Smallest N for a solid number: relative spread ~ 1/sqrt(N) is about 2% here, the paper's
#: runs use 2,000 to 10,000 passages.
SOLID_MIN_N = 2000
#: A solid number needs N >= SOLID_N_OVER_D * d, i.e. a linear-CKA bias d/(N+d) of at most
#: SOLID_MAX_BIAS = 1/(1 + SOLID_N_OVER_D) = 0.2.
SOLID_N_OVER_D = 4
SOLID_MAX_BIAS = 1 / (1 + SOLID_N_OVER_D)
#: Material bias above this (N < d: unrelated layers look more than half alike) is noise.
NOISE_BIAS = 0.5
#: Linear vs unbiased CKA D_eff/L differing by more than this (relative) is a material bias:
#: larger than the sampling spread of D_eff/L at SOLID_MIN_N passages.
BIAS_MATERIAL_REL = 0.02
#: Bootstrap interval width relative to the value: solid at most 5%, noise beyond 25%.
SOLID_CI_REL = 0.05
NOISE_CI_REL = 0.25
#: A random-weight band from fewer seeds has no usable width.
MIN_NULL_SEEDS = 3

LEVELS = ("solid", "indicative", "noise")
#: Shape + word, never colour alone (colour-blind readers).
BADGE = {"solid": "● solid", "indicative": "◐ indicative", "noise": "○ noise"}


@dataclass(frozen=True)
class Trust:
    """A trust verdict: `level` in LEVELS, why, and the one action that would make it solid."""

    level: str
    reasons: tuple[str, ...]
    action: str | None
    bias: float
    bias_material: bool
    solid_n: int

    @property
    def badge(self) -> str:
        return BADGE[self.level]

    def sentence(self) -> str:
        """One line for a page: the level, the reasons, the action."""
        text = f"{self.level.capitalize()}: " + " ".join(self.reasons or ("enough data.",))
        return text + (f" To make it solid: {self.action}." if self.action else "")


def cka_bias(n: int, d: int) -> float:
    """Linear CKA's finite-sample floor d/(N+d) (see `similarity.cka_finite_sample_bias`)."""
    return d / (n + d)


def solid_n(d: int) -> int:
    """Passages a solid number needs: max(SOLID_MIN_N, N with d/(N+d) <= SOLID_MAX_BIAS)."""
    return max(SOLID_MIN_N, SOLID_N_OVER_D * d)


def bias_is_material(
    n: int, d: int, metric: str, value: float | None = None, unbiased_value: float | None = None
) -> bool:
    """Whether linear CKA's d/(N+d) bias actually moves this number (see the module doc)."""
    if metric != "cka":
        return False
    if value is not None and unbiased_value is not None and unbiased_value != 0:
        return abs(value - unbiased_value) / abs(unbiased_value) > BIAS_MATERIAL_REL
    return cka_bias(n, d) > SOLID_MAX_BIAS


def trust_badge(
    n: int,
    d: int,
    *,
    metric: str = "cka",
    value: float | None = None,
    unbiased_value: float | None = None,
    ci: tuple[float, float] | None = None,
    null_band: tuple[float, float] | None = None,
    null_seeds: int = 0,
) -> Trust:
    """Trust of a headline number (D_eff/L, or anything computed from the same S).

    n: kept passages; d: residual width; metric: the similarity used; value: the number
    (D_eff/L) under `metric`; unbiased_value: the same number under unbiased CKA (decides
    whether the bias is material); ci: the bootstrap interval (lo, hi) of `value` when
    computed; null_band: the random-weight band (low, high) of D_eff/L when one exists, from
    `null_seeds` seeds.
    """
    if not isinstance(n, int) or not isinstance(d, int) or n < 1 or d < 1:
        raise DeffError(f"A trust badge needs positive integers N and d, got N={n!r}, d={d!r}.")
    bias = cka_bias(n, d)
    need = solid_n(d)
    material = bias_is_material(n, d, metric, value, unbiased_value)
    noise: list[str] = []
    weak: list[str] = []
    actions: list[str] = []

    if n < NOISE_MIN_N:
        noise.append(f"N = {n} passages is far too few (fewer than {NOISE_MIN_N}).")
    if n < need:
        if n >= NOISE_MIN_N:
            weak.append(
                f"N = {n:,} passages is below the {need:,} a solid number needs "
                f"(N ≥ max({SOLID_MIN_N:,}, 4d) with d = {d})."
            )
        actions.append(f"use ≥ {need:,} passages")
    if material:
        why = f"linear CKA's finite-sample bias d/(N+d) = {bias:.2f} moves D_eff/L by " + (
            f"{abs(value - unbiased_value) / abs(unbiased_value):.1%} against unbiased CKA."
            if value is not None and unbiased_value
            else f"more than {BIAS_MATERIAL_REL:.0%}."
        )
        (noise if bias > NOISE_BIAS else weak).append(why[0].upper() + why[1:])
        actions.append("switch to unbiased CKA")
    if ci is not None and value:
        rel = abs(ci[1] - ci[0]) / abs(value)
        if rel > NOISE_CI_REL:
            noise.append(f"The bootstrap interval is {rel:.0%} of the value wide.")
        elif rel > SOLID_CI_REL:
            weak.append(
                f"The bootstrap interval is {rel:.0%} of the value wide (solid: at most "
                f"{SOLID_CI_REL:.0%})."
            )
        if rel > SOLID_CI_REL:
            actions.append(f"use ≥ {max(need, 2 * n):,} passages")
    if null_band is not None:
        low, high = sorted(null_band)
        if null_seeds < MIN_NULL_SEEDS:
            weak.append(
                f"The random-weight band comes from {null_seeds} seed(s); its width needs at "
                f"least {MIN_NULL_SEEDS}."
            )
            actions.append("add random seeds")
        elif value is not None and low <= value <= high:
            weak.append(
                "The value lies inside the random-weight band: it does not tell this model "
                "from random weights."
            )
    level = "noise" if noise else "indicative" if weak else "solid"
    return Trust(
        level=level,
        reasons=tuple(noise + weak),
        action=actions[0] if actions and level != "solid" else None,
        bias=bias,
        bias_material=material,
        solid_n=need,
    )
