"""The BOS page's one answer: is the gap to F_L a position-0 artefact? (SPEC section 11.6)

Stage: lenses (a run's views read into the decision of `deffcore.statistics.position0`).

    a = position0_answer_for(view, "cka")    # from the similarity matrices alone: no model
    a.verdict, a.sentence                    # "not_artefact" | "artefact" | "masks" | ...
    bos_on_off_conclusion(with_bos, without_bos).sentence   # the BOS on/off check, one line

The decision, its tolerance, the paired interval (one bootstrap of both poolings on the same
passages: `deffcore.statistics.paired`, SPEC section 15) and the unpaired fallback are documented in
`deffcore.statistics.position0`; its calibration on constructions in
`deffcore.lenses.bos_calibration`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deffcore.statistics.position0 import (
    STAND_IN,
    Position0Answer,
    answer_trust,
    gap_error_points,
    position0_answer,
    stood_in,
    tolerance,
)

#: A position-0 norm ratio above this is an outlier (the BOS on/off conclusion).
POS0_OUTLIER_RATIO = 10.0


def position0_answer_for(
    view: Any,
    metric: str = "cka",
    K: int | None = None,
    identical: str | None = None,
    paired: Any = None,
    stand_in: bool = True,
) -> Position0Answer:
    """`position0_answer` of a `RunView` (headlines and trust of default and no_pos0, from
    the similarity matrices alone: no model, no diagnostics). identical: the run's reason
    (`diagnostics.identical_controls`); None: read from the measurement when the view has
    one, else guessed from equal gaps (`diagnostics.bos_verdict`'s rule for snapshots).
    paired: a `paired.PairedBootstrap` of the run holding default and no_pos0 under `metric`
    (None: the view's own, `RunView.paired_bootstrap`, when it has one): the paired decision;
    without one the unpaired rule, said as such.

    stand_in: linear CKA's Δ is answered from the same bootstrap's unbiased-CKA replicates
    when it holds them (`STAND_IN`; SPEC section 15): linear CKA's finite-sample bias, about
    d/(N + d), is shared by its replicates, so its own paired interval covered the population
    Δ in 38% of the calibration's cases, against 98% for unbiased CKA (BENCHMARKS.md). The
    answer says so and gives linear CKA's Δ beside (`answered_with`, `delta_asked`)."""
    from deffcore.statistics import verdict as diagnostics

    h_d = view.headline("default", metric, K)
    pb = paired if paired is not None else _view_paired(view)
    has_pair = pb is not None and pb.has("default", metric) and pb.has("no_pos0", metric)
    other = STAND_IN.get(metric) if stand_in and has_pair else None
    if other and pb.has("default", other) and pb.has("no_pos0", other):
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
    answer), with linear CKA's Δ said beside (`position0.stood_in`). An identical control stays
    as asked (certain)."""
    if asked.identical is not None or asked.delta is None:
        return asked
    (gd, rd), (gn, rn) = pb.gap("default", metric, K), pb.gap("no_pos0", metric, K)
    spec, source = view.spec or None, view.window_source()
    t_d, t_n = (
        answer_trust(pb, p, metric, view.d_model, K=K, spec=spec, source=source)
        for p in ("default", "no_pos0")
    )
    own = position0_answer(
        gd, gn, replicates=(rd, rn), trust_default=t_d.level, trust_no_pos0=t_n.level,
        ci=pb.ci, n=pb.n, noise_action=t_d.action if t_d.level == "noise" else t_n.action,
        spec=spec, source=source,
    )  # fmt: skip
    return stood_in(own, metric, asked.delta)


def _view_paired(view: Any) -> Any:
    get = getattr(view, "paired_bootstrap", None)
    return get() if callable(get) else None


def _replicate_interval(pb: Any, pooling: str, metric: str, K: int | None) -> tuple[float, float]:
    """The percentile interval of one pooling's D_eff/L from the paired replicates (what the
    trust rule takes as its bootstrap interval; `PairedBootstrap.result`'s, as
    `position0.answer_trust` reads it)."""
    res = pb.result(pooling, metric, K)
    return res.low, res.high


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
    with_bos: Mapping[str, float],
    without_bos: Mapping[str, float],
    difference: Any = None,
) -> OnOffConclusion:
    """One sentence from the bos=add and bos=none runs: {"pos0_ratio": peak position-0 norm
    ratio, "gap": gap to F_L (%) of default pooling} each. An outlier is a peak ratio above
    POS0_OUTLIER_RATIO; the gap move is said beside it, against the tolerance of the
    position-0 test (`tolerance` of the bos=add gap). `difference`: the move's
    `paired.PairedDifference` (`run_pairs.run_difference`: paired by passage when both runs
    hold the same passages, said unpaired otherwise); with it the move is within or beyond
    the tolerance only when its whole interval is, else "cannot tell"."""
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
    size, how = ("within" if abs(delta) <= T else "beyond"), ""
    if difference is not None:
        lo, hi = difference.interval
        inside, outside = lo >= -T and hi <= T, lo > T or hi < -T
        size = "within" if inside else "beyond" if outside else "cannot tell against"
        why = "paired by passage" if difference.paired else f"unpaired: {difference.why_unpaired}"
        how = f", {difference.ci:.0%} [{lo:+.2f}, {hi:+.2f}] ({why}, B = {difference.B})"
    text += (
        f"; removing the BOS moves the gap to F_L by {delta:+.2f} points{how} ({g_with:+.1f}% → "
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
    B: int | None = 50,
) -> dict[str, Any]:
    """The BOS on/off check of the run `spec` (a `RunSpec`): the same run with `bos=add` and
    with `bos=none` (each cached like any run; one model load for both), then
    `bos_on_off_conclusion` with the default gap's move and its interval from B bootstrap
    replicates (`run_pairs.run_difference`; None: no interval). progress(done, total, stage)
    counts both runs' passages.

    Returns {"add": {...}, "none": {...}, "conclusion": sentence, "kind", "difference"}; each
    run's entry: key, spec (plain fields), gaps {pooling: gap %}, pos0 [peak ratio, layer].
    """
    from dataclasses import replace

    from deffcore.runs.run_pairs import run_difference

    specs = {bos: replace(spec, bos=bos) for bos in ("add", "none")}
    # one load serves both runs: the second finds the first's model in the process's cache
    # of loaded models (deffcore.inputs.loaded_models)
    out: dict[str, Any] = {}
    runs: dict[str, Any] = {}
    for i, (bos, s) in enumerate(specs.items()):
        out[bos], runs[bos] = _on_off_run(s, i, metric, K, progress, should_stop)
    diff = None
    if B:
        if progress is not None:
            progress(2 * spec.n, 2 * spec.n, "bootstrap of the gap's move")
        diff = run_difference(runs["add"], runs["none"], metric=metric, K=K, B=B, seed=spec.seed)
    c = bos_on_off_conclusion(
        {"pos0_ratio": out["add"]["pos0"][0], "gap": out["add"]["gaps"]["default"]},
        {"pos0_ratio": out["none"]["pos0"][0], "gap": out["none"]["gaps"]["default"]},
        diff,
    )
    difference = None if diff is None else diff.to_dict()
    return {**out, "conclusion": c.sentence, "kind": c.kind, "difference": difference}


def _on_off_run(s: Any, i: int, metric: str, K: int | None, progress: Any,
                should_stop: Any) -> tuple[dict[str, Any], Any]:  # fmt: skip
    """Run `i` (0: bos=add, 1: bos=none) of the BOS on/off check: its result entry and its
    Measurement (the paired difference of the two runs reads both)."""
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
    entry = {"key": s.key(), "spec": {**s.__dict__}, "gaps": gaps, "pos0": list(m.pos0_peak())}
    return entry, m
