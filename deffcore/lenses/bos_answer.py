"""The BOS page's one answer: is the gap to F_L a position-0 artefact? (SPEC section 11.6)

    a = position0_answer_for(view, "cka")    # from the similarity matrices alone: no model
    a.verdict, a.sentence                    # "not_artefact" | "artefact" | "masks" | ...
    bos_on_off_conclusion(with_bos, without_bos).sentence   # the BOS on/off check, one line

**The claim.** `default` pools every token, `no_pos0` the tokens after position 0, so their
gap difference Delta = gap(no_pos0) - gap(default) (points) is what position 0 does to the
headline. "Not a position-0 artefact" claims that the *population* Delta (N -> infinity) is
within the tolerance

    T = max(POS0_MIN_POINTS, POS0_SHARE x |gap(default)|)     (2 points, or half the gap)

i.e. position 0 carries less than half of the gap; "a position-0 artefact" claims it carries
more and pulls the gap towards 0 (or across it); "position 0 hides part of the gap" claims it
carries more and the gap grows without it. Each is said only when the whole uncertainty
interval of Delta lies on one side of T:

    Delta +- (e_default + e_no_pos0),   e = 100 x error x D_eff/L x (L+1)/2   (gap points)

where `error` is the trust rule's estimated relative error of D_eff/L (bias + spread,
`deffcore.statistics.trust_rule`); adding the two errors ignores that the two poolings share their
passages (their errors are correlated), so the interval is conservative. Otherwise, or when
either number's trust level is "noise", the answer is "cannot tell yet" with the action that
would tell (more passages, sized from the interval's distance to T). When no_pos0 is the same
control as default for the run (`deffcore.statistics.verdict.no_pos0_identity`: position 0 is one
vector in every passage and centring removes it), the answer is certain: not an artefact.

Calibration (`tests/test_bos_answer.py`, `benchmarks/bench_bos_answer_calibration.py`, table
in BENCHMARKS.md): states sampled from Gaussian constructions whose population similarity is
a closed form (accumulated orthogonal updates, an h_0, and a position-0 component of chosen
size and onset that enters only the `default` pooling), over a grid of L, N, d and
position-0 sizes; every "not an artefact" / "artefact" / "hides" claim is checked against the
population Delta and T.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from deffcore.core.constants import REGIME_TOLERANCE

#: The tolerance of the position-0 test: the larger of this many points ...
POS0_MIN_POINTS = 2.0
#: ... and this share of |gap(default)|: position 0 may carry less than half of the gap.
POS0_SHARE = 0.5
#: A position-0 norm ratio above this is an outlier (the BOS on/off conclusion).
POS0_OUTLIER_RATIO = 10.0
#: The most passages "cannot tell yet" ever asks for.
MAX_PASSAGES_ASKED = 1_000_000
VERDICTS = ("not_artefact", "artefact", "masks", "cannot_tell", "missing")


@dataclass(frozen=True)
class Position0Answer:
    """The answer to "is the gap a position-0 artefact?" and its sentence.

    verdict: one of VERDICTS; delta: gap(no_pos0) - gap(default) in points; interval: its
    uncertainty interval (None when identical or missing); tolerance: T in points; identical:
    why no_pos0 is default for this run (None when it is its own control); trust: the lower of
    the two numbers' trust levels; action: what would tell (cannot_tell only).
    """

    verdict: str
    gap_default: float | None
    gap_no_pos0: float | None
    delta: float | None
    interval: tuple[float, float] | None
    tolerance: float | None
    identical: str | None
    trust: str | None
    action: str | None
    sentence: str

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["interval"] = list(self.interval) if self.interval is not None else None
        return out


def tolerance(gap_default: float) -> float:
    """T = max(POS0_MIN_POINTS, POS0_SHARE x |gap(default)|), in points."""
    return max(POS0_MIN_POINTS, POS0_SHARE * abs(float(gap_default)))


def gap_error_points(error: float | None, deff_over_L: float, layers: int) -> float:
    """A relative error of D_eff/L as gap points: 100 x error x D_eff/L x (L+1)/2 (the gap is
    100 (1 - D_eff/L (L+1)/2)). None (no estimate) is an infinite error."""
    if error is None or not math.isfinite(error):
        return math.inf
    return 100.0 * abs(error) * abs(deff_over_L) * (layers + 1) / 2.0


def _worse(a: str | None, b: str | None) -> str | None:
    order = ("solid", "indicative", "noise")
    known = [x for x in (a, b) if x in order]
    return max(known, key=order.index) if known else None


def _passages_to_tell(n: int, delta: float, band: float, bias_share: float, T: float) -> int:
    """The smallest N' (doubling from n) at which the interval clears T, scaling the spread
    part of the band as sqrt(n/N') and the bias part as n/N'."""
    room = abs(abs(delta) - T)
    if room <= 0:
        return MAX_PASSAGES_ASKED
    m = n
    while m < MAX_PASSAGES_ASKED:
        m *= 2
        scaled = band * (bias_share * n / m + (1 - bias_share) * math.sqrt(n / m))
        if scaled < room:
            return m
    return MAX_PASSAGES_ASKED


def _fmt(x: float) -> str:
    return f"{x:+.2f}"


def position0_answer(
    gap_default: float,
    gap_no_pos0: float | None,
    *,
    band_default: float = math.inf,
    band_no_pos0: float = math.inf,
    trust_default: str | None = None,
    trust_no_pos0: str | None = None,
    noise_action: str | None = None,
    identical: str | None = None,
    n: int | None = None,
    bias_share: float = 0.0,
) -> Position0Answer:
    """The decision of the module docstring on plain numbers.

    gap_default, gap_no_pos0: the two gaps to F_L (%); band_*: their errors in gap points
    (`gap_error_points`); trust_*: their trust levels; noise_action: the trust rule's action
    for a "noise" number; identical: why no_pos0 equals default for this run (then the answer
    is certain); n: passages (sizes the "cannot tell yet" action); bias_share: the part of the
    band that is linear CKA's bias (it shrinks as 1/N, the rest as 1/sqrt(N)).
    """
    head = "default vs no_pos0"
    if identical:
        return Position0Answer(
            "not_artefact", gap_default, gap_default, 0.0, None, None, identical,
            _worse(trust_default, trust_no_pos0), None,
            f"{head}: the same control for this run, so position 0 cannot move the gap "
            f"({gap_default:+.2f}%) → not a position-0 artefact ({identical}).",
        )  # fmt: skip
    if gap_no_pos0 is None or not math.isfinite(gap_no_pos0):
        return Position0Answer(
            "missing", gap_default, None, None, None, None, None, trust_default, None,
            f"{head}: this run has no no_pos0 control, so the position-0 test cannot be "
            "made; press Run to measure it with every control.",
        )  # fmt: skip
    delta = float(gap_no_pos0) - float(gap_default)
    T = tolerance(gap_default)
    band = band_default + band_no_pos0
    lo, hi = delta - band, delta + band
    trust = _worse(trust_default, trust_no_pos0)
    pm = f" ± {band:.2f}" if math.isfinite(band) else ""
    moves = f"Δ = {_fmt(delta)}{pm} pts (gap {gap_default:+.2f}% → {gap_no_pos0:+.2f}%)"
    why = "half the gap" if T > POS0_MIN_POINTS else "its floor"
    tol = f"the {T:.2f}-point tolerance ({why})"
    parts = (gap_default, gap_no_pos0, delta, (lo, hi) if math.isfinite(band) else None, T)
    if trust == "noise":
        action = noise_action or "use more passages"
        return Position0Answer(
            "cannot_tell", *parts, None, trust, action,
            f"{head}: {moves}, but the headline's trust is noise → cannot tell yet whether "
            f"position 0 makes the gap; {action}.",
        )  # fmt: skip
    if lo >= -T and hi <= T:
        return Position0Answer(
            "not_artefact", *parts, None, trust, None,
            f"{head}: {moves}, within {tol} → not a position-0 artefact: position 0 "
            "carries less than half of the gap.",
        )  # fmt: skip
    if lo > T or hi < -T:
        if abs(gap_default) > REGIME_TOLERANCE and delta * gap_default < 0:
            return Position0Answer(
                "artefact", *parts, None, trust, None,
                f"{head}: {moves}, beyond {tol} → a position-0 artefact: without position 0 "
                "the gap shrinks towards F_L, so position 0 makes much of it.",
            )  # fmt: skip
        return Position0Answer(
            "masks", *parts, None, trust, None,
            f"{head}: {moves}, beyond {tol} → not an artefact, but position 0 hides part "
            "of the gap: without it the gap is further from F_L.",
        )  # fmt: skip
    need = _passages_to_tell(n or 0, delta, band, bias_share, T) if n else None
    action = f"use ≥ {need:,} passages" if need else "use more passages"
    return Position0Answer(
        "cannot_tell", *parts, None, trust, action,
        f"{head}: {moves}; the interval straddles {tol} → cannot tell yet; {action}.",
    )  # fmt: skip


def position0_answer_for(
    view: Any, metric: str = "cka", K: int | None = None, identical: str | None = None
) -> Position0Answer:
    """`position0_answer` of a `RunView` (headlines and trust of default and no_pos0, from
    the similarity matrices alone: no model, no diagnostics). identical: the run's reason
    (`diagnostics.identical_controls`); None: read from the measurement when the view has
    one, else guessed from equal gaps (`diagnostics.bos_verdict`'s rule for snapshots)."""
    from deffcore.statistics import verdict as diagnostics

    h_d = view.headline("default", metric, K)
    t_d = view.trust("default", metric, K)
    try:
        h_n = view.headline("no_pos0", metric, K)
    except KeyError:  # an older snapshot without the control
        return position0_answer(h_d.gap_pct, None, trust_default=t_d.level)
    t_n = view.trust("no_pos0", metric, K)
    if identical is None:
        m = view.measurement
        same = (
            diagnostics.identical_controls(m, metric)
            if m is not None
            else diagnostics._guess_identical({"default": h_d.gap_pct, "no_pos0": h_n.gap_pct})
        )
        identical = same.get("no_pos0")
    L = h_d.layers
    band_d = gap_error_points(t_d.error, h_d.deff_over_L, L)
    band_n = gap_error_points(t_n.error, h_n.deff_over_L, L)
    total = (t_d.error or 0.0) + (t_n.error or 0.0)
    bias = _bias_part(t_d, h_d.deff_over_L) + _bias_part(t_n, h_n.deff_over_L)
    return position0_answer(
        h_d.gap_pct,
        h_n.gap_pct,
        band_default=band_d,
        band_no_pos0=band_n,
        trust_default=t_d.level,
        trust_no_pos0=t_n.level,
        noise_action=t_d.action if t_d.level == "noise" else t_n.action,
        identical=identical,
        n=h_d.n,
        bias_share=min(1.0, bias / total) if total else 0.0,
    )


def _bias_part(trust: Any, point: float) -> float:
    """The bias part of a trust's relative error: |point - bias-corrected| / |corrected|."""
    corrected = trust.bias_corrected
    if trust.corrected_by is None or not corrected:
        return 0.0
    return abs(point - corrected) / abs(corrected)


@dataclass(frozen=True)
class OnOffConclusion:
    """The BOS on/off check in one sentence. kind: "first_position" (the outlier stays without
    a BOS), "bos" (it goes with the BOS), "appears" (only without a BOS), "none" (no outlier
    either way); delta_gap: gap(bos=none) - gap(bos=add), points."""

    kind: str
    ratio_with: float
    ratio_without: float
    delta_gap: float
    sentence: str


def bos_on_off_conclusion(
    with_bos: Mapping[str, float], without_bos: Mapping[str, float]
) -> OnOffConclusion:
    """One sentence from the bos=add and bos=none runs: {"pos0_ratio": peak position-0 norm
    ratio, "gap": gap to F_L (%) of default pooling} each. An outlier is a peak ratio above
    POS0_OUTLIER_RATIO; the gap move is said beside it, against the tolerance of the
    position-0 test (`tolerance` of the bos=add gap)."""
    r_with, r_without = float(with_bos["pos0_ratio"]), float(without_bos["pos0_ratio"])
    g_with, g_without = float(with_bos["gap"]), float(without_bos["gap"])
    delta = g_without - g_with
    big_with, big_without = r_with > POS0_OUTLIER_RATIO, r_without > POS0_OUTLIER_RATIO
    ratios = f"{r_with:,.0f}× with a BOS, {r_without:,.0f}× without"
    kind = (
        ("first_position" if big_without else "bos")
        if big_with
        else ("appears" if big_without else "none")
    )
    text = {
        "first_position": "First-position effect: the position-0 outlier stays without a BOS "
        f"({ratios}), so it belongs to whatever token comes first, not to the BOS token",
        "bos": f"BOS effect: the position-0 outlier goes with the BOS token ({ratios})",
        "appears": f"The position-0 outlier appears only without a BOS ({ratios}): a "
        "first-position effect that the BOS token absorbs",
        "none": f"No position-0 outlier with or without a BOS ({ratios}, both ≤ "
        f"{POS0_OUTLIER_RATIO:.0f}×)",
    }[kind]
    T = tolerance(g_with)
    size = "within" if abs(delta) <= T else "beyond"
    text += (
        f"; removing the BOS moves the gap to F_L by {delta:+.2f} points ({g_with:+.1f}% → "
        f"{g_without:+.1f}%), {size} the {T:.1f}-point tolerance."
    )
    return OnOffConclusion(kind, r_with, r_without, delta, text)


def bos_on_off(
    spec: Any,
    *,
    metric: str = "cka",
    K: int | None = None,
    progress: Any = None,
    should_stop: Any = None,
) -> dict[str, Any]:
    """The BOS on/off check of the run `spec` (a `RunSpec`): the same run with `bos=add` and
    with `bos=none` (each cached like any run; one model load for both), then
    `bos_on_off_conclusion`. progress(done, total, stage) counts both runs' passages.

    Returns {"add": {...}, "none": {...}, "conclusion": sentence, "kind"}; each run's entry:
    key, spec (plain fields), gaps {pooling: gap %}, pos0 [peak ratio, layer].
    """
    from dataclasses import replace

    specs = {bos: replace(spec, bos=bos) for bos in ("add", "none")}
    # one load serves both runs: the second finds the first's model in the process's cache
    # of loaded models (deffcore.inputs.loaded_models)
    out = {bos: _on_off_run(s, i, metric, K, progress, should_stop)
           for i, (bos, s) in enumerate(specs.items())}  # fmt: skip
    c = bos_on_off_conclusion(
        {"pos0_ratio": out["add"]["pos0"][0], "gap": out["add"]["gaps"]["default"]},
        {"pos0_ratio": out["none"]["pos0"][0], "gap": out["none"]["gaps"]["default"]},
    )
    return {**out, "conclusion": c.sentence, "kind": c.kind}


def _on_off_run(s: Any, i: int, metric: str, K: int | None, progress: Any,
                should_stop: Any) -> dict[str, Any]:  # fmt: skip
    """Run `i` (0: bos=add, 1: bos=none) of the BOS on/off check, as its result entry."""
    from deffcore.core.constants import POOLINGS
    from deffcore.core.errors import UndefinedSimilarityError
    from deffcore.runs.measure import measure_spec

    def both(done: int, total: int, stage: str) -> None:
        if progress is not None:
            progress(i * s.n + done if stage == "extract" else done, 2 * s.n, stage)

    m = measure_spec(s, metric=metric, progress=both, should_stop=should_stop)
    gaps = {}
    for p in POOLINGS:
        try:
            gaps[p] = m.summary(p, metric, K).gap_pct
        except UndefinedSimilarityError:
            continue
    return {"key": s.key(), "spec": {**s.__dict__}, "gaps": gaps, "pos0": list(m.pos0_peak())}


def _complete(cache: Any, spec: Any) -> bool:
    try:
        cache.load_meta(spec.key())
    except Exception:  # not stored, or not readable: it will be measured
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Calibration: the answer on a construction whose truth is known


def claim_is_right(verdict: str, gap_default_pop: float, gap_no_pos0_pop: float) -> bool | None:
    """Whether a verdict is true of the population gaps (None: "cannot tell" claims nothing).
    not_artefact: |Delta| <= T; artefact: |Delta| > T and the gap shrinks towards F_L (or
    across it); masks: |Delta| > T and it does not (T from the population default gap)."""
    delta, T = gap_no_pos0_pop - gap_default_pop, tolerance(gap_default_pop)
    towards = abs(gap_default_pop) > REGIME_TOLERANCE and delta * gap_default_pop < 0
    if verdict == "not_artefact":
        return abs(delta) <= T
    if verdict == "artefact":
        return abs(delta) > T and towards
    if verdict == "masks":
        return abs(delta) > T and not towards
    return None


def _pooled_view(S: dict, layers: int, n: int, d: int) -> Any:
    from deffcore.views.run_view import RunView

    class PoolingsView(RunView):
        """A construction's two poolings, read as a page reads a run (no position-0 ratio)."""

        source, label = "construction", "construction"

        def __init__(self) -> None:
            self.spec, self.layers, self.n, self.d_model = {}, layers, n, d

        def similarity(self, pooling: str = "default", metric: str = "cka") -> Any:
            return S[(pooling, metric)]

        def pos0_norm_ratio(self) -> Any:
            import numpy as np

            return np.ones(layers + 1)

    return PoolingsView()


def calibration_case(
    n: int,
    d: int,
    layers: int,
    *,
    pos0: float,
    onset: int,
    h0: float = 1.0,
    seed: int = 0,
    metrics: tuple[str, ...] = ("cka", "unbiased_cka"),
) -> list[tuple[str, str, bool | None]]:
    """One `synthetic.position0_construction`, answered as a page would (`position0_answer_for`
    on a view of its two poolings) under each metric: [(metric, verdict, right)]."""
    from deffcore.measures.depth import effective_depth, gap_percent
    from deffcore.measures.similarity import similarity_matrix
    from deffcore.measures.synthetic import position0_construction

    c = position0_construction(n, d, layers, h0=h0, pos0=pos0, onset=onset, seed=seed)
    S = {
        (p, m): similarity_matrix(states, m)
        for p, states in (("default", c.default), ("no_pos0", c.no_pos0))
        for m in {"unbiased_cka", *metrics}
    }
    view = _pooled_view(S, layers, n, d)
    gaps = [gap_percent(effective_depth(S), S.shape[0]) for S in (c.S_default, c.S_no_pos0)]
    out = []
    for metric in metrics:
        verdict = position0_answer_for(view, metric).verdict
        out.append((metric, verdict, claim_is_right(verdict, *gaps)))
    return out
