"""A run's BOS answer, computed once, the same on every surface (SPEC sections 11.6 and 15).

Stage: views (a `RunView` read into the decision of `deffcore.statistics.position0`).

    a = run_answer(view, "cka")      # the answer every surface shows: page, report, CLI, repr
    a.verdict, a.sentence, a.trust   # "not_artefact" | "artefact" | "masks" | ...

The data -> the paired Δ -> the tolerance -> the verdict -> the sentence: `run_answer` takes the
run's paired bootstrap (the one kept with it: `Measurement.paired_latest`, which reads the
cache entry's `paired_store`, or a snapshot's `paired`); where the run's states are at hand and
it holds none, it draws one (`ANSWER_B` replicates, the run's seed: the draw the BOS page makes
in the background), which is kept with the run, so every later surface answers
from the same replicates. `position0_answer_for` reads the two gaps, their trust and the
replicates; `position0.position0_answer` decides and words it. Only a file without states and
without a stored bootstrap answers unpaired, and its sentence says so.
"""

from __future__ import annotations

from typing import Any

from deffcore.statistics.anytime_paired import ANSWER_POOLINGS
from deffcore.statistics.position0 import (
    ANSWER_B,
    STAND_IN,
    Position0Answer,
    answer_metrics,
    answer_trust,
    gap_error_points,
    no_states,
    position0_answer,
    stood_in,
)


def answer_bootstrap_of(m: Any, metric: str = "cka") -> Any:
    """The paired bootstrap the BOS answer of the live run `m` (a `Measurement`) is given from:
    the one it holds (drawn before, here or in another process, and kept with its cache
    entry) when it holds default and no_pos0 under `metric`, else one drawn now and kept
    (those two poolings, `metric` and its stand-in, `ANSWER_B` replicates, the run's seed: the
    page's draw of every pooling holds the same numbers for them, on the same multisets)."""
    pb = m.paired_latest()
    if held(pb, metric):
        return pb
    return m.answer_bootstrap(ANSWER_POOLINGS, metric=metric, B=ANSWER_B, seed=m.spec.seed)


def held(pb: Any, metric: str, stand_in: bool = False) -> bool:
    """`pb` holds the answer's two poolings under `metric` (and its stand-in when asked)."""
    metrics = answer_metrics(metric) if stand_in else (metric,)
    return pb is not None and all(pb.has(p, x) for p in ANSWER_POOLINGS for x in metrics)


def run_answer(
    view: Any, metric: str = "cka", K: int | None = None, *, draw: bool = True
) -> Position0Answer:
    """The run's BOS answer, as every surface shows it (module docstring). draw: a live run
    without a paired bootstrap draws one now (False: the page, which draws it in the
    background and meanwhile shows the unpaired answer, said so)."""
    m = view.measurement
    if m is not None and draw:
        answer_bootstrap_of(m, metric)
    answer = position0_answer_for(view, metric, K)
    if m is None and not answer.paired:
        return no_states(answer)
    return answer


#: The question every surface puts the answer under.
QUESTION = "Is the gap a position-0 artefact?"


def answer_lines(view: Any, metric: str = "cka", K: int | None = None) -> tuple[str, str, str]:
    """(the question, the answer's sentence, its trust line) of `run_answer`: what the report
    and the notebook show under the page's words."""
    a = run_answer(view, metric, K)
    return QUESTION, a.sentence, trust_line(a.trust)


def trust_line(level: str | None) -> str:
    """The answer's trust in words: the lower of its two numbers' levels."""
    return f"Trust of the two numbers: {level or 'not rated'}."


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
