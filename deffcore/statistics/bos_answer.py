"""The BOS answer: is the gap to F_L a position-0 (BOS) artefact? (SPEC sections 11.6, 15)

Stage: statistics. The one module of the answer, read top to bottom as it is made:

    the data        `run_answer(view, metric, K)`: the run's two gaps (default, no_pos0), their
                    trust, and the paired bootstrap kept with the run (drawn and kept where the
                    run's states are at hand and it holds none: `answer_bootstrap_of`)
    the paired Δ    Δ = gap(no_pos0) - gap(default), its interval from the replicates
    the tolerance   T = max(POS0_MIN_POINTS, POS0_SHARE x |gap(default)|), per replicate too
    the verdict     `position0_answer`: the paired margins, else the unpaired rule
    the sentence    verdict first, then the numbers it was decided on (`_said`); the method
                    is `answer_method` (the page's "How this was decided"); no_pos0's move in
                    the BOS page's controls line is the answer's own (`answer_effect`)
    live            `live_answer`: the same decision at each mark of a live run

    a = run_answer(view, "cka")      # the answer every surface shows: pages, report, CLI, repr
    a.verdict, a.sentence, a.trust   # "not_artefact" | "artefact" | "masks" | ...

Every surface shows `run_answer`'s value (the pages, the report and notebook via
`answer_lines`, `measure` and `bos --json`, the live estimates via `live_answer`). A view is
read by its face (a `deffcore.views.run.Run`), never imported: statistics comes before views.

**The claim.** `default` pools every token, `no_pos0` the tokens after position 0, so their
gap difference Delta = gap(no_pos0) - gap(default) (points) is what position 0 does to the
headline. "Not a position-0 artefact" claims that the *population* Delta (N -> infinity) is
within the tolerance

    T = max(POS0_MIN_POINTS, POS0_SHARE x |gap(default)|)     (2 points, or half the gap)

i.e. position 0 carries less than half of the gap; "a position-0 artefact" claims it carries
more and pulls the gap towards 0 (or across it); "position 0 hides part of the gap" claims it
carries more and the gap grows without it.

**Paired** (SPEC 15; wherever the run's states are at hand or its file stores a bootstrap).
Both gaps are evaluated on the same B multisets of passages, so Delta's interval is that of the
replicates Delta_r = gap_r(no_pos0) - gap_r(default) (`paired.METHOD`, basic). The claim also
carries the tolerance's own uncertainty (T is half of an estimated gap): with T_r from each
replicate's default gap, the margins T - Delta and T + Delta (within), Delta - T and -Delta - T
(beyond) are paired quantities too, and a verdict is said only when the one-sided (1 + ci)/2
lower bound of every margin it needs is above 0 (basic bound 2 m - q_(1+ci)/2 of the m_r):
"not an artefact" needs both within-margins, a beyond-verdict its own. Linear CKA's Δ is
answered from unbiased CKA's replicates of the same passages (`STAND_IN`): its finite-sample
bias sits in every replicate.

**Unpaired** (a file without states and without a stored bootstrap, said so): each verdict is
said only when the whole interval lies on one side of T,

    Delta +- (e_default + e_no_pos0),   e = 100 x error x D_eff/L x (L+1)/2   (gap points)

where `error` is the trust rule's estimated relative error of D_eff/L (bias + spread,
`deffcore.statistics.trust_rule`); adding the two errors ignores that the two poolings share
their passages (their errors are correlated), so this interval is conservative (about 6x wider
on SmolLM2 at N = 1,024), and the sentence says "unpaired".

Otherwise, or when either number's trust level is "noise", the answer is "cannot tell yet"
with the action that would tell (more passages, sized from the interval's distance to T, and
checked against the run's data: `deffcore.inputs.supply.passages_action`). When no_pos0 is the
same control as default for the run (`no_pos0_identity`: position 0 is one vector in every
passage and centring removes it), the answer is certain.

Calibration (`deffcore.lenses.bos_calibration`, `benchmarks/bench_bos_answer_calibration.py`,
table in BENCHMARKS.md): states sampled from Gaussian constructions whose population similarity
is a closed form, over a grid of L, N, d and position-0 sizes; every claim is checked against
the population Delta and T, and Delta's paired interval against the population Delta.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from deffcore.core.constants import REGIME_TOLERANCE
from deffcore.core.errors import DeffError
from deffcore.inputs.supply import passages_action
from deffcore.statistics.paired import METHOD, PairedBootstrap, difference_of, paired_bootstrap
from deffcore.statistics.trust_rule import Trust, assess, with_supply

# ---------------------------------------------------------------------------------------------
# The question, its constants and its answer

#: The question every surface puts the answer under.
QUESTION = "Is the gap a position-0 artefact?"
#: The poolings the BOS answer compares.
ANSWER_POOLINGS: tuple[str, ...] = ("default", "no_pos0")
#: The tolerance of the position-0 test: the larger of this many points ...
POS0_MIN_POINTS = 2.0
#: ... and this share of |gap(default)|: position 0 may carry less than half of the gap.
POS0_SHARE = 0.5
#: The most passages "cannot tell yet" ever asks for.
MAX_PASSAGES_ASKED = 1_000_000

#: Replicates of the paired bootstrap a run's BOS answer is drawn with when it holds none: the
#: BOS page's and the Overview's background draw, `measure`, `bos` and `report` alike (SPEC 15).
ANSWER_B = 50

#: The metric whose paired replicates answer for linear CKA when a bootstrap holds it: the same
#: population similarity without linear CKA's finite-sample bias, about d/(N + d), which sits in
#: every replicate (SPEC section 15, "Linear CKA's Δ, answered by unbiased CKA").
STAND_IN = {"cka": "unbiased_cka"}

#: Without the run's pooled states (`guess_identical`), controls whose gaps agree to this many
#: points count as one control.
IDENTICAL_GAP_POINTS = 1e-3
#: `no_pos0_identity`: the centred default and (n-1)/n times the centred no_pos0 may differ by
#: this much (relative, per state) and still be one control (float32 pooled means differ by
#: ~1e-7; a first token that varies over passages differs by far more).
IDENTICAL_REL = 1e-4

VERDICTS = ("not_artefact", "artefact", "masks", "cannot_tell", "missing")


def answer_metrics(metric: str) -> tuple[str, ...]:
    """The metrics a paired bootstrap is drawn under so that its BOS answer for `metric` is the
    calibrated one: `metric` and its stand-in (`STAND_IN`), one pass per pooling for both."""
    return (metric, STAND_IN[metric]) if metric in STAND_IN else (metric,)


@dataclass(frozen=True)
class Position0Answer:
    """The answer to "is the gap a position-0 artefact?" and its sentence.

    verdict: one of VERDICTS; delta: gap(no_pos0) - gap(default) in points; interval: its
    uncertainty interval (None when identical or missing); tolerance: T in points; identical:
    why no_pos0 is default for this run (None when it is its own control); trust: the lower of
    the two numbers' trust levels; action: what would tell (cannot_tell only); paired: the
    interval is the paired bootstrap's (`method`, `B` replicates), else the summed errors.
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
    paired: bool = False
    method: str | None = None
    B: int | None = None
    #: the metric whose replicates gave the verdict when it is not the one asked (linear CKA is
    #: answered by unbiased CKA: `STAND_IN`), and the asked metric's own Δ
    answered_with: str | None = None
    delta_asked: float | None = None
    #: the interval's coverage
    ci: float = 0.95
    #: linear CKA's bias on the default gap (points), which a bootstrap cannot see
    bias_points: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, with `how`: the method in words (`answer_method`)."""
        out = asdict(self)
        out["interval"] = list(self.interval) if self.interval is not None else None
        out["how"] = answer_method(self)
        return out


# ---------------------------------------------------------------------------------------------
# The data: a run's two gaps, their trust and its paired bootstrap


def run_answer(
    view: Any, metric: str = "cka", K: int | None = None, *, draw: bool = True
) -> Position0Answer:
    """The run's BOS answer, as every surface shows it (module docstring): from the paired
    bootstrap the run keeps (`Measurement.paired_latest`, or a snapshot's `paired`); a live run
    holding none draws and keeps one (`answer_bootstrap_of`), so every later surface answers
    from the same replicates. draw=False (the pages, which draw it in the background:
    `explorer/answer_box.py`): meanwhile the unpaired answer, said so. Under a SPEC 17.1
    measure: DeffError (the answer is the CKA family's, SPEC 17.5)."""
    from deffcore.core.constants import METRICS
    from deffcore.statistics.trust_rule import cka_family_only

    if metric not in METRICS:
        raise DeffError(cka_family_only(metric, "The BOS answer"))
    m = view.measurement
    if m is not None and draw:
        answer_bootstrap_of(m, metric)
    answer = position0_answer_for(view, metric, K)
    if m is None and not answer.paired:
        return no_states(answer)
    return answer


def answer_bootstrap_of(
    m: Any, metric: str = "cka", *, every_pooling: bool = False, progress: Any = None
) -> Any:
    """The paired bootstrap the BOS answer of the live run `m` (a `Measurement`) is given from:
    the one kept with its cache entry when it holds default and no_pos0 under `metric`, else
    one drawn now and kept (`metric` and its stand-in, `ANSWER_B` replicates, the run's seed).
    every_pooling: of every pooling (the pages' background draw, whose control effects read
    them too), else of the two the answer compares, on the same multisets either way.
    progress(done, total, stage): after each pooling."""
    pb = m.paired_latest()
    if held(pb, metric, stand_in=every_pooling):
        return pb
    poolings = None if every_pooling else ANSWER_POOLINGS
    return m.answer_bootstrap(
        poolings, metric=metric, B=ANSWER_B, seed=m.spec.seed, progress=progress
    )


def held(pb: Any, metric: str, stand_in: bool = False) -> bool:
    """`pb` holds the answer's two poolings under `metric` (and its stand-in when asked)."""
    metrics = answer_metrics(metric) if stand_in else (metric,)
    return pb is not None and all(pb.has(p, x) for p in ANSWER_POOLINGS for x in metrics)


def position0_answer_for(
    view: Any,
    metric: str = "cka",
    K: int | None = None,
    identical: str | None = None,
    paired: Any = None,
    stand_in: bool = True,
) -> Position0Answer:
    """`position0_answer` of a run view (headlines and trust of default and no_pos0, from the
    similarity matrices alone: no model, no diagnostics). identical: the run's reason
    (`identical_controls`); None: read from the measurement when the view has one, else
    guessed from equal gaps (`guess_identical`, for snapshots). paired: a
    `paired.PairedBootstrap` of the run holding default and no_pos0 under `metric` (None: the
    view's own, `Run.paired_bootstrap`, when it has one): the paired decision; without one
    the unpaired rule, said as such. stand_in: linear CKA's Δ is answered from the same
    bootstrap's unbiased-CKA replicates when it holds them (`STAND_IN`), its own Δ said beside
    (`answered_with`, `delta_asked`)."""
    h_d = view.headline("default", metric, K)
    pb = paired if paired is not None else _view_paired(view)
    has_pair = held(pb, metric)
    other = STAND_IN.get(metric) if stand_in and has_pair else None
    if other and held(pb, other):
        asked = position0_answer_for(view, metric, K, identical, pb, stand_in=False)
        return _stood_in(asked, pb, other, K, view)
    ci_d = _replicate_interval(pb, "default", metric, K) if has_pair else None
    t_d = view.trust("default", metric, K, ci_d)
    try:
        h_n = view.headline("no_pos0", metric, K)
    except KeyError:  # an older snapshot without the control
        return position0_answer(h_d.gap_pct, None, trust_default=t_d.level)
    t_n = view.trust(
        "no_pos0", metric, K, _replicate_interval(pb, "no_pos0", metric, K) if has_pair else None
    )
    if identical is None:
        m = view.measurement
        same = (
            identical_controls(m, metric)
            if m is not None
            else guess_identical({"default": h_d.gap_pct, "no_pos0": h_n.gap_pct})
        )
        identical = same.get("no_pos0")
    L = h_d.layers
    band_d = gap_error_points(t_d.error, h_d.deff_over_L, L)
    band_n = gap_error_points(t_n.error, h_n.deff_over_L, L)
    total = (t_d.error or 0.0) + (t_n.error or 0.0)
    bias = _bias_part(t_d, h_d.deff_over_L) + _bias_part(t_n, h_n.deff_over_L)
    replicates = None
    if has_pair:
        replicates = (pb.gap("default", metric, K)[1], pb.gap("no_pos0", metric, K)[1])
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
        bias_default=gap_error_points(_bias_part(t_d, h_d.deff_over_L), h_d.deff_over_L, L),
        replicates=replicates,
        ci=pb.ci if has_pair else 0.95,
        spec=getattr(view, "spec", None) or None,
        source=view.window_source() if hasattr(view, "window_source") else None,
    )


def _stood_in(
    asked: Position0Answer, pb: Any, metric: str, K: int | None, view: Any
) -> Position0Answer:
    """The answer from `pb`'s `metric` replicates in place of `asked` (linear CKA's own paired
    answer), with linear CKA's Δ said beside (`stood_in`). An identical control stays as asked
    (certain)."""
    if asked.identical is not None or asked.delta is None:
        return asked
    own = _replicates_answer(
        pb, metric, view.d_model, K=K, n=pb.n, spec=view.spec or None, source=view.window_source()
    )
    return stood_in(own, metric, asked.delta)


def _replicates_answer(
    pb: Any,
    metric: str,
    d: int,
    *,
    n: int,
    K: int | None = None,
    identical: str | None = None,
    spec: Any = None,
    source: Any = None,
) -> Position0Answer:
    """The paired answer from `pb`'s `metric` replicates alone, each number's trust as
    `answer_trust` judges it (d: the residual width)."""
    t = {p: answer_trust(pb, p, metric, d, K=K, spec=spec, source=source) for p in ANSWER_POOLINGS}
    (gd, rd), (gn, rn) = (pb.gap(p, metric, K) for p in ANSWER_POOLINGS)
    noisy = t["default"] if t["default"].level == "noise" else t["no_pos0"]
    return position0_answer(
        gd, gn, replicates=(rd, rn), trust_default=t["default"].level,
        trust_no_pos0=t["no_pos0"].level, noise_action=noisy.action, identical=identical, n=n,
        ci=pb.ci, spec=spec, source=source,
    )  # fmt: skip


def _view_paired(view: Any) -> Any:
    get = getattr(view, "paired_bootstrap", None)
    return get() if callable(get) else None


def _replicate_interval(pb: Any, pooling: str, metric: str, K: int | None) -> tuple[float, float]:
    """The percentile interval of one pooling's D_eff/L from the paired replicates (what the
    trust rule takes as its bootstrap interval; `PairedBootstrap.result`'s, as `answer_trust`
    reads it)."""
    res = pb.result(pooling, metric, K)
    return res.low, res.high


def _bias_part(trust: Any, point: float) -> float:
    """The bias part of a trust's relative error: |point - bias-corrected| / |corrected|."""
    corrected = trust.bias_corrected
    if trust.corrected_by is None or not corrected:
        return 0.0
    return abs(point - corrected) / abs(corrected)


def answer_trust(
    paired: PairedBootstrap,
    pooling: str,
    metric: str,
    d: int,
    *,
    K: int | None = None,
    spec: Any = None,
    source: Any = None,
) -> Trust:
    """The trust rule on one of the BOS answer's numbers, as every answer judges it: the paired
    replicates' point and percentile interval of D_eff(K)/L, the "use ≥ n passages" action
    checked against what `spec`'s data can give (`trust_rule.with_supply`). d: the residual
    width. No bias check (the numbers are unbiased CKA's where held, `STAND_IN`) and no
    random-weight band (it never sets the level or the action the answer reads)."""
    point = paired.deff_over_L(pooling, metric, K)[0]
    res = paired.result(pooling, metric, K)
    t = assess(
        paired.n, d, metric=metric, point=point, layers=paired.layers,
        interval=(res.low, res.high),
    )  # fmt: skip
    return with_supply(t, spec, source)


def no_pos0_identity(pooled: Any, metric: str = "cka") -> str | None:
    """Why `no_pos0` is the same control as `default` for this run, or None (SPEC 11.5).

    When every passage has the same length n and h_l[0] is one vector v_l for all passages
    (one first token id: under causal attention h_l[0] depends on it alone), each passage's
    default pooling is v_l / n + (n-1)/n times its no_pos0 pooling; centring removes v_l / n,
    so linear and unbiased CKA (invariant to scale) give exactly the same S. Checked on the
    pooled states themselves (`PooledStates`: pooled h_0..h_L and lengths):
    ||centred default - (n-1)/n centred no_pos0|| <= IDENTICAL_REL ||centred default|| at
    every state. Cosine is not translation invariant: never identical.
    """
    lengths = getattr(pooled, "lengths", None)
    if metric == "cosine" or lengths is None or len(lengths) == 0:
        return None
    lengths = np.asarray(lengths)
    if not (lengths == lengths[0]).all() or "no_pos0" not in pooled.pooled:
        return None
    n = int(lengths[0])
    for layer in range(pooled.pooled["default"].shape[0]):
        full = np.asarray(pooled.pooled["default"][layer], dtype=np.float64)
        rest = np.asarray(pooled.pooled["no_pos0"][layer], dtype=np.float64)
        full = full - full.mean(axis=0)
        rest = (rest - rest.mean(axis=0)) * (n - 1) / n
        if np.linalg.norm(full - rest) > IDENTICAL_REL * np.linalg.norm(full):
            return None
    return (
        f"every passage has {n} tokens and starts with the same token, so h_l[0] is one vector "
        "for all passages and centring removes it"
    )


def identical_controls(measurement: Any, metric: str | None = None) -> dict[str, str]:
    """{control: why it equals `default`} for this run (so far only `no_pos0`, see
    `no_pos0_identity`); empty when every control is its own."""
    reason = no_pos0_identity(measurement.pooled, metric or measurement.metric)
    return {"no_pos0": reason} if reason else {}


def guess_identical(gaps: Mapping[str, float]) -> dict[str, str]:
    """Without the run's structure: no_pos0 counts as default when their gaps agree to
    IDENTICAL_GAP_POINTS (see `no_pos0_identity` for when they are exactly equal)."""
    if "no_pos0" in gaps and abs(gaps["no_pos0"] - gaps["default"]) <= IDENTICAL_GAP_POINTS:
        return {
            "no_pos0": f"its gap equals default's to {IDENTICAL_GAP_POINTS:g} points, as when "
            "every passage has the same length and first token, which makes h_l[0] one vector "
            "that centring removes"
        }
    return {}


# ---------------------------------------------------------------------------------------------
# The paired Δ and the tolerance


def tolerance(gap_default: float) -> float:
    """T = max(POS0_MIN_POINTS, POS0_SHARE x |gap(default)|), in points."""
    return max(POS0_MIN_POINTS, POS0_SHARE * abs(float(gap_default)))


def gap_error_points(error: float | None, deff_over_L: float, layers: int) -> float:
    """A relative error of D_eff/L as gap points: 100 x error x D_eff/L x (L+1)/2 (the gap is
    100 (1 - D_eff/L (L+1)/2)). None (no estimate) is an infinite error."""
    if error is None or not math.isfinite(error):
        return math.inf
    return 100.0 * abs(error) * abs(deff_over_L) * (layers + 1) / 2.0


def _lower_bound(point: float, reps: np.ndarray, ci: float, method: str) -> float:
    """The one-sided (1 + ci)/2 lower bound of a paired quantity from its replicates: basic
    2 m - q_(1+ci)/2, or percentile q_(1-ci)/2."""
    alpha = (1.0 - ci) / 2.0
    if method == "basic":
        return 2.0 * point - float(np.quantile(reps, 1.0 - alpha))
    return float(np.quantile(reps, alpha))


# ---------------------------------------------------------------------------------------------
# The verdict


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
    bias_default: float = 0.0,
    replicates: tuple[Any, Any] | None = None,
    method: str | None = None,
    ci: float = 0.95,
    spec: Any = None,
    source: Any = None,
) -> Position0Answer:
    """The decision of the module docstring on plain numbers.

    gap_default, gap_no_pos0: the two gaps to F_L (%); band_*: their errors in gap points
    (`gap_error_points`); trust_*: their trust levels; noise_action: the trust rule's action
    for a "noise" number; identical: why no_pos0 equals default for this run (then the answer
    is certain); n: passages (sizes the "cannot tell yet" action); bias_share: the part of the
    band that is linear CKA's bias (it shrinks as 1/N, the rest as 1/sqrt(N)); bias_default:
    that bias of the default gap in gap points, which a bootstrap cannot see (the paired
    decision's side of F_L must clear it).
    replicates: (gap_r(default), gap_r(no_pos0)), (B,) each from one paired bootstrap: the
    paired decision (then the bands are not used); method: its interval (`paired.METHOD`);
    spec: the run (a RunSpec or its fields), so an action asks only what its data can give
    (`source`: its `tokens.WindowSource` when held, see `supply.passages_action`).
    """
    if identical:
        return Position0Answer(
            "not_artefact", gap_default, gap_default, 0.0, None, None, identical,
            _worse(trust_default, trust_no_pos0), None,
            f"Not a BOS artefact: removing position 0 cannot move the gap ({gap_default:+.1f}%),"
            f" as no_pos0 is the same control as default for this run ({identical}).",
        )  # fmt: skip
    if gap_no_pos0 is None or not math.isfinite(gap_no_pos0):
        return Position0Answer(
            "missing", gap_default, None, None, None, None, None, trust_default, None,
            "Cannot answer: this run has no no_pos0 control, so the position-0 test cannot be "
            "made; press Run to measure it with every control.",
        )  # fmt: skip
    if replicates is not None:
        return _paired_answer(
            float(gap_default), float(gap_no_pos0), replicates,
            trust=_worse(trust_default, trust_no_pos0),
            noise_action=noise_action or "use more passages", n=n, ci=ci,
            method=method or METHOD, spec=spec, source=source, bias=bias_default,
        )  # fmt: skip
    return _unpaired_answer(
        float(gap_default), float(gap_no_pos0), band_default + band_no_pos0,
        trust=_worse(trust_default, trust_no_pos0), noise_action=noise_action, n=n,
        bias_share=bias_share, spec=spec, source=source,
    )  # fmt: skip


def _paired_answer(
    gap_default: float,
    gap_no_pos0: float,
    replicates: tuple[Any, Any],
    *,
    trust: str | None,
    noise_action: str,
    n: int | None,
    ci: float,
    method: str,
    spec: Any,
    source: Any = None,
    bias: float = 0.0,
) -> Position0Answer:
    """The paired decision of the module docstring: Delta's interval and the margins from one
    bootstrap of both gaps."""
    rd, rn = (np.asarray(r, dtype=np.float64) for r in replicates)
    delta, dr = gap_no_pos0 - gap_default, rn - rd
    diff = difference_of(delta, dr, a="no_pos0", b="default", ci=ci, method=method)
    T = tolerance(gap_default)
    Tr = np.maximum(POS0_MIN_POINTS, POS0_SHARE * np.abs(rd))
    within = [(T - delta, Tr - dr), (T + delta, Tr + dr)]
    up, down = (delta - T, dr - Tr), (-delta - T, -dr - Tr)
    bound = {k: _lower_bound(p, r, ci, method) for k, (p, r) in
             {"w0": within[0], "w1": within[1], "up": up, "down": down}.items()}  # fmt: skip
    lo, hi = diff.interval
    moves = _paired_moves(delta, (lo, hi), ci)
    parts = (gap_default, gap_no_pos0, delta, (lo, hi), T)
    extra = {"paired": True, "method": method, "B": diff.B, "ci": ci, "bias_points": bias}

    def said(verdict: str, action: str | None = None) -> Position0Answer:
        return _answer(verdict, moves, parts, trust, action, **extra)

    if trust == "noise":
        return said("noise", noise_action)
    if bound["w0"] > 0 and bound["w1"] > 0:
        return said("not_artefact")
    if bound["up"] > 0 or bound["down"] > 0:
        side = _settled_side(gap_default, delta, rd, ci, method, bias)
        if side is None:
            return said("side", passages_action(2 * n, spec, source) if n else "use more passages")
        return said(side)
    if abs(delta) <= T:
        need = _paired_need(n, [(within[0][0], bound["w0"]), (within[1][0], bound["w1"])])
    else:
        side = up if delta > 0 else down
        need = _paired_need(n, [(side[0], bound["up" if delta > 0 else "down"])])
    return said("straddles", passages_action(need, spec, source) if need else "use more passages")


def _answer(
    verdict: str, moves: str, parts: tuple, trust: str | None, action: str | None, **extra: Any
) -> Position0Answer:
    """The answer with `verdict` (a `_said` key; the "Cannot tell yet" ones are cannot_tell),
    parts (gap_default, gap_no_pos0, delta, interval, T) and its sentence."""
    kind = verdict if verdict in VERDICTS else "cannot_tell"
    tail = f"; {action}" if action else ""
    text = _said(verdict, moves, parts[4], parts[0], tail)
    return Position0Answer(kind, *parts, None, trust, action, text, **extra)


def _settled_side(
    gap_default: float, delta: float, rd: np.ndarray, ci: float, method: str, bias: float
) -> str | None:
    """Which claim a Delta beyond the tolerance makes, when the replicates settle it: "artefact"
    (the default gap on the far side of F_L from Delta: s gap < -REGIME_TOLERANCE, s Delta's
    sign), "masks" (s gap >= -REGIME_TOLERANCE), each only when its one-sided bound clears
    `bias` (the default gap's bias in points, which the replicates cannot see); else None."""
    s = 1.0 if delta > 0 else -1.0
    sides = {
        "masks": (s * gap_default + REGIME_TOLERANCE, s * rd + REGIME_TOLERANCE),
        "artefact": (-s * gap_default - REGIME_TOLERANCE, -s * rd - REGIME_TOLERANCE),
    }
    for verdict, (point, reps) in sides.items():
        if _lower_bound(point, reps, ci, method) > bias:
            return verdict
    return None


def _paired_need(n: int | None, margins: list[tuple[float, float]]) -> int | None:
    """Passages at which every margin's lower bound clears 0, its half-width (point - bound)
    shrinking as 1/sqrt(N): n (h/m)^2 for the slowest margin, doubled up from n."""
    if not n:
        return None
    worst = 1.0
    for point, bound in margins:
        if point <= 0:
            return MAX_PASSAGES_ASKED
        worst = max(worst, ((point - bound) / point) ** 2)
    m = n
    while m < MAX_PASSAGES_ASKED and m < n * worst:
        m *= 2
    return max(m, 2 * n) if m == n else min(m, MAX_PASSAGES_ASKED)


def _unpaired_answer(
    gap_default: float,
    gap_no_pos0: float,
    band: float,
    *,
    trust: str | None,
    noise_action: str | None,
    n: int | None,
    bias_share: float,
    spec: Any,
    source: Any,
) -> Position0Answer:
    """The unpaired rule (no bootstrap of both poolings): Delta +- the two errors added
    (`band`, gap points), said "unpaired" in the sentence."""
    delta = gap_no_pos0 - gap_default
    T = tolerance(gap_default)
    lo, hi = delta - band, delta + band
    pm = f" ± {band:.1f}" if math.isfinite(band) else ""
    moves = f"{_fmt(delta)}{pm} points (unpaired: its two errors added)"
    parts = (gap_default, gap_no_pos0, delta, (lo, hi) if math.isfinite(band) else None, T)

    def said(verdict: str, action: str | None = None) -> Position0Answer:
        return _answer(verdict, moves, parts, trust, action)

    if trust == "noise":
        return said("noise", noise_action or "use more passages")
    if lo >= -T and hi <= T:
        return said("not_artefact")
    if lo > T or hi < -T:
        towards = abs(gap_default) > REGIME_TOLERANCE and delta * gap_default < 0
        return said("artefact" if towards else "masks")
    need = _passages_to_tell(n or 0, delta, band, bias_share, T) if n else None
    return said("straddles", passages_action(need, spec, source) if need else "use more passages")


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


def _worse(a: str | None, b: str | None) -> str | None:
    order = ("solid", "indicative", "noise")
    known = [x for x in (a, b) if x in order]
    return max(known, key=order.index) if known else None


# ---------------------------------------------------------------------------------------------
# The sentence: the verdict first, then its numbers; the method in "How this was decided"

#: How every answer's sentence says Δ (after its verdict).
_MOVES = "removing position 0 moves the gap by"


def _fmt(x: float) -> str:
    return f"{x:+.1f}"


def _half(T: float, gap: float) -> str:
    """The tolerance in words: half the gap, or its floor."""
    g = abs(gap)
    if T > POS0_MIN_POINTS:
        return f"half of the {g:.0f}% gap" if g >= 10 else f"half of the {g:.1f}% gap"
    return f"the tolerance's {POS0_MIN_POINTS:.0f}-point floor"


def _said(verdict: str, moves: str, T: float, gap: float, tail: str = "") -> str:
    """The answer's sentence, verdict first, then the numbers it was decided on."""
    half = _half(T, gap)
    lead, rest = {
        "not_artefact": ("Not a BOS artefact", f"less than {half}"),
        "artefact": ("A BOS artefact", f"more than {half}: without position 0 the gap "
                     "shrinks towards F_L"),
        "masks": ("Not a BOS artefact, but position 0 hides part of the gap",
                  f"more than {half}: without position 0 the gap is further from F_L"),
        "noise": ("Cannot tell yet", "but the two numbers' trust is noise"),
        "straddles": ("Cannot tell yet", f"an interval that straddles {half}"),
        "side": ("Cannot tell yet", f"more than {half}, but the default gap's side of F_L is "
                 "not settled"),
    }[verdict]  # fmt: skip
    return f"{lead}: {_MOVES} {moves}, {rest}{tail}."


def _paired_moves(delta: float, interval: tuple[float, float], ci: float) -> str:
    """What the paired answer says of Delta and its interval (the method: `answer_method`)."""
    lo, hi = interval
    return f"{_fmt(delta)} points ({ci:.0%} {_fmt(lo)} to {_fmt(hi)})"


def _metric_name(metric: str) -> str:
    return {"cka": "linear CKA", "unbiased_cka": "unbiased CKA"}.get(metric, metric)


def stood_in(answer: Position0Answer, answered_with: str, delta_asked: float) -> Position0Answer:
    """`answer` (decided from `answered_with`'s replicates, `STAND_IN`) said as the answer for
    linear CKA, whose own Δ was `delta_asked` points. An identical control is returned as is."""
    if answer.identical is not None:
        return answer
    said, name = answer.sentence, _metric_name(answered_with)
    at = said.index(")", said.index(_MOVES))  # the clause goes inside the interval's brackets
    clause = f"; {name}'s numbers, on the same replicates: linear CKA's own Δ is {delta_asked:+.1f}"
    sentence = said[:at] + clause + said[at:]
    return replace(answer, sentence=sentence, answered_with=answered_with, delta_asked=delta_asked)


def no_states(answer: Position0Answer) -> Position0Answer:
    """`answer` (unpaired) said as the answer of a file without states: nothing could pair it."""
    if answer.paired or answer.identical is not None or answer.verdict == "missing":
        return answer
    note = (
        " This file holds no states and no paired bootstrap, so the interval is unpaired "
        "(the run measured, or shared made with --bootstrap, pairs it)."
    )
    return replace(answer, sentence=answer.sentence + note)


def answer_method(a: Position0Answer) -> str:
    """How the answer was decided, in words (the pages' "How this was decided", the report's,
    the CLI JSON's `how`): Δ, the tolerance, the interval and its method, the stand-in."""
    if a.identical:
        return (
            "no_pos0 pools every token after position 0; for this run it is the same control "
            f"as default ({a.identical}), so Δ is 0 by construction and the answer is certain."
        )
    if a.delta is None or a.gap_no_pos0 is None or a.gap_default is None:
        return "The position-0 test compares the default pooling with no_pos0: this run has none."
    said = (
        f"Δ = gap(no_pos0) − gap(default) = {a.gap_no_pos0:+.2f}% − ({a.gap_default:+.2f}%) = "
        f"{a.delta:+.2f} points. The tolerance T = {a.tolerance:.2f} points is half the gap, at "
        f"least {POS0_MIN_POINTS:.0f}: position 0 may carry less than half of the gap."
    )
    if a.paired and a.interval is not None:
        lo, hi = a.interval
        said += (
            f" Δ's {a.ci:.0%} interval [{lo:+.2f}, {hi:+.2f}] is the {a.method} interval of one "
            f"paired bootstrap: both gaps on the same B = {a.B} multisets of the run's passages, "
            "so their shared errors cancel. T is uncertain too (half an estimated gap), so each "
            "replicate has its own, and a verdict is said only when the one-sided lower bound of "
            "every margin it needs is above 0 (T − Δ and T + Δ for not an artefact, Δ − T or "
            "−Δ − T beyond)."
        )
        if a.bias_points > 0:
            said += (
                f" Linear CKA's bias, about {a.bias_points:.1f} points on the default gap, is not "
                "in the replicates: the default gap's side of F_L must clear it."
            )
    else:
        said += (
            " Without a paired bootstrap Δ's interval adds the two numbers' estimated errors "
            "(bias + spread, from the trust rule): they share their passages, so this overstates "
            "it, and a verdict is said only when the whole interval lies on one side of T."
        )
    if a.answered_with and a.delta_asked is not None:
        said += (
            f" The numbers are {_metric_name(a.answered_with)}'s on the same replicates, in "
            f"place of linear CKA's (whose own Δ is {a.delta_asked:+.2f}): linear CKA's "
            "finite-sample bias, about d/(N + d), sits in every replicate, so its own paired "
            "interval covered the population Δ in 38% of the calibration's cases, against 98% "
            "for unbiased CKA."
        )
    return said + " The rule is checked on constructions with a known answer (glossary)."


def answer_trust_line(level: str | None) -> str:
    """The answer's trust in words: the lower of its two numbers' levels."""
    return f"Trust of the two numbers: {level or 'not rated'}."


def answer_lines(view: Any, metric: str = "cka", K: int | None = None) -> tuple[str, str, str]:
    """(the question, the answer's sentence, its trust line) of `run_answer`: what the report
    and the notebook show under the pages' words."""
    a = run_answer(view, metric, K)
    return QUESTION, a.sentence, answer_trust_line(a.trust)


def answer_line(sentence: str) -> str:
    """The CLI table's line for the answer."""
    return f"BOS answer ({QUESTION[0].lower()}{QUESTION[1:]}): {sentence}"


def answer_effect(answer: Position0Answer) -> str | None:
    """no_pos0's move of the gap as the controls' effect line says it, when the answer has a
    paired interval: the answer's own Δ and interval (2 decimals, as "How this was decided"),
    named as the answer's, so the page shows one Δ for one comparison; else None."""
    if not answer.paired or answer.interval is None or answer.delta is None:
        return None
    lo, hi = answer.interval
    whose = f", {_metric_name(answer.answered_with)}'s replicates" if answer.answered_with else ""
    return f"no_pos0 {answer.delta:+.2f} [{lo:+.2f}, {hi:+.2f}] (the BOS answer's Δ{whose})"


# ---------------------------------------------------------------------------------------------
# Live: the same answer at each mark of a live run (SPEC section 14)


def shared_bootstrap(
    states: Mapping[str, Any], poolings: Sequence[str], metric: str, B: int, seed: int = 0
) -> PairedBootstrap | None:
    """The live estimates' one paired bootstrap at a mark: `poolings` ({pooling: (L+1, N, d)
    h_0 .. h_L} in `states`) under `metric` and its stand-in, on the same B multisets of the
    k passages; None when there is nothing to pair or a pooling has no similarity here (a
    degenerate control: judged from N alone)."""
    if not poolings or B is None or B < 2:
        return None
    metrics = answer_metrics(metric)
    stacks = {p: states[p][1:] for p in dict.fromkeys(poolings)}
    try:
        return paired_bootstrap(stacks, metrics=metrics, B=int(B), seed=seed)
    except DeffError:  # an undefined control, too few distinct passages for a replicate
        return None


def live_answer(
    paired: PairedBootstrap,
    states: Mapping[str, Any],
    estimates: Mapping[str, Any],
    metric: str,
    identical: str | None,
    n: int,
    spec: Any = None,
) -> dict[str, Any] | None:
    """The BOS answer at a mark of a live run, as a dict with its "metric"; None when the
    bootstrap does not hold both poolings. Linear CKA's Δ from unbiased CKA's replicates,
    which `shared_bootstrap` always holds beside it (`STAND_IN`), each number's trust as the
    run's answer judges it (`answer_trust`). `--until verdict` and the app's "Stop when
    settled" stop on it (`stopping.StopRule`)."""
    if any(p not in estimates for p in ANSWER_POOLINGS):
        return None
    other = STAND_IN.get(metric)
    used = other if other and held(paired, other) else metric
    if not held(paired, used):
        return None
    d = int(states["default"].shape[2])
    a = _replicates_answer(paired, used, d, n=n, identical=identical, spec=spec)
    if used != metric and held(paired, metric):
        asked = paired.gap("no_pos0", metric)[0] - paired.gap("default", metric)[0]
        a = stood_in(a, used, float(asked))
    return {**a.to_dict(), "metric": used}
