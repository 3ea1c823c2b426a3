"""The BOS verdict: one sentence from the pooling controls' gaps and the diagnostics (SPEC 11.5).

A control's regime is decided with a tolerance (a gap within ±REGIME_TOLERANCE points is at the
reference); controls that are the default in disguise for this run
(`deffcore.statistics.bos_answer.no_pos0_identity`, where the BOS answer finds it certain) are
counted once. The BOS answer itself (default vs no_pos0, paired) is `bos_answer.run_answer`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deffcore.core.constants import REGIME_TOLERANCE
from deffcore.core.errors import DeffError
from deffcore.measures.activations import (
    MASSIVE_THRESHOLD,
    SINK_THRESHOLD,
    massive_onset,
    sink_min_length,
)
from deffcore.measures.paper_massive import (
    SUN_MIN_ABS,
    SUN_MIN_RATIO,
    SUN_MOST,
    sun_most_runs,
    sun_onset,
)
from deffcore.measures.paper_sinks import GU_THRESHOLD
from deffcore.statistics.bos_answer import guess_identical, identical_controls
from deffcore.statistics.trust_rule import REGIME_WORDS as _REGIME_WORDS
from deffcore.statistics.trust_rule import regime_of


@dataclass
class BosVerdict:
    """What a researcher wants to know about BOS sensitivity, and one sentence saying it.

    regimes: each control's regime ("below", "at the reference", "above" F_L; SPEC 11.5, a gap
    within ±REGIME_TOLERANCE points is at the reference); regime_depends: the distinct
    controls include both signs; flipped: the controls whose sign is the opposite of
    `default`'s; at_reference: those at the reference; identical: {control: why it is
    `default` for this run}, counted once; distinct: how many controls are their own;
    gap_move: max - min gap over the controls (points). Massive activations, by the ratio
    (ours): massive_layer: the first state with a ratio > 100 *at position 0* (None: none);
    massive_onset/_position: the first state with a ratio > 100 and where its maximum sits;
    by Sun et al.'s criterion per activation (|a| > 100 and >= 1,000x its state's median):
    sun_onset (the first state where a passage has one), sun_onset_share (the share of
    passages that do there), sun_onset_position (None also when not evaluated, see
    sun_evaluated), sun_most (the runs (first, last) of states where most passages have one,
    `paper_massive.sun_most_runs`) and sun_peak_share (the largest share). Sinks, the
    project's score: sink_max (its layer) and sink_mean: share of sink heads over blocks
    1..L; sink_baseline: uniform attention's score on the diagnosed passages; sink_passages:
    how many were long enough. Gu et al.'s metric (whole passages): gu_sink_metric
    (mean over blocks), gu_sink_max (its layer).
    """

    gaps: dict[str, float]
    default_gap: float
    regime_depends: bool
    flipped: list[str]
    gap_move: float
    regimes: dict[str, str] = field(default_factory=dict)
    at_reference: list[str] = field(default_factory=list)
    identical: dict[str, str] = field(default_factory=dict)
    distinct: int = 0
    massive_layer: int | None = None
    massive_onset: int | None = None
    massive_onset_position: int | None = None
    massive_peak: float | None = None
    sun_evaluated: bool = False
    sun_onset: int | None = None
    sun_onset_position: int | None = None
    sun_onset_share: float | None = None
    sun_most: list[tuple[int, int]] = field(default_factory=list)
    sun_peak_share: float | None = None
    sink_max: float | None = None
    sink_max_layer: int | None = None
    sink_mean: float | None = None
    sink_baseline: float | None = None
    sink_passages: int | None = None
    gu_sink_metric: float | None = None
    gu_sink_max: float | None = None
    gu_sink_max_layer: int | None = None
    sentence: str = ""

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def finite_or_nan(values: Sequence[Any] | None) -> np.ndarray | None:
    if values is None:
        return None
    return np.asarray([np.nan if v is None else v for v in values], dtype=np.float64)


def _controls_part(v: BosVerdict) -> str:
    """The sentence about the pooling controls (regimes with the tolerance, identities)."""
    distinct = {p: g for p, g in v.gaps.items() if p not in v.identical}
    by = {r: [p for p in distinct if v.regimes[p] == r] for r in _REGIME_WORDS}
    default = v.regimes["default"]
    lo, hi = min(distinct.values()), max(distinct.values())
    count = f"{len(distinct)} {'distinct ' if v.identical else ''}controls"
    at = (
        f"; {_and(by['at the reference'])} {_is(by['at the reference'])} at the reference "
        f"(gap within ±{REGIME_TOLERANCE:g} point{'s' if REGIME_TOLERANCE != 1 else ''})"
        if by["at the reference"]
        else ""
    )
    if v.regime_depends and default != "at the reference":
        text = (
            f"the regime depends on the control: default gives {_REGIME_WORDS[default]} (gap "
            f"{v.default_gap:+.1f}%) but {_and(v.flipped)} {_give(v.flipped)} "
            f"{_REGIME_WORDS['above' if default == 'below' else 'below']}{at}, and the gap "
            f"moves by {v.gap_move:.1f} points across the {count}"
        )
    elif v.regime_depends:
        text = (
            f"the regime depends on the control: {_and(by['below'])} {_give(by['below'])} "
            f"D_eff < F_L but {_and(by['above'])} {_give(by['above'])} D_eff > F_L{at}, and the "
            f"gap moves by {v.gap_move:.1f} "
            f"points across the {count}"
        )
    else:
        sign = next((r for r in ("below", "above") if by[r]), None)
        gives = f"give {_REGIME_WORDS[sign]}" if sign else "are at the reference"
        every = "both" if len(distinct) == 2 else "all"
        which = f"{every} {count}" if not (sign and at) else f"{len(by[sign])} of the {count}"
        text = (
            f"the regime does not depend on the control: {which} {gives} (gaps {lo:+.1f}% to "
            f"{hi:+.1f}%, a {v.gap_move:.1f}-point move){at if sign else ''}"
        )
    for control, why in v.identical.items():
        text += f"; {control} is the same control as default here ({why}), counted once"
    return text


def _massive_part(
    v: BosVerdict,
    ratio: np.ndarray,
    position: Sequence[int],
    share: np.ndarray | None,
    sun_position: Sequence[int] | None,
    threshold: float,
) -> str:
    """The sentence about massive activations: the ratio's onset, then Sun et al.'s (per
    activation: the share of passages with one, `deffcore.measures.paper_massive`)."""
    pos = list(position)
    v.massive_peak = float(np.nanmax(ratio))
    v.massive_onset = massive_onset(ratio, threshold)
    if v.massive_onset is not None:
        v.massive_onset_position = int(pos[v.massive_onset])
    at0 = [i for i, r in enumerate(ratio) if np.isfinite(r) and r > threshold and pos[i] == 0]
    v.massive_layer = at0[0] if at0 else None
    peak_layer = int(np.nanargmax(ratio))
    if v.massive_layer is not None:
        text = (
            f"a massive activation sits at position 0 from layer {v.massive_layer} by the ratio "
            f"(> {threshold:.0f}x the median; peak ratio {v.massive_peak:,.0f}x at layer "
            f"{peak_layer})"
        )
    elif v.massive_onset is not None:
        text = (
            f"a massive activation appears from layer {v.massive_onset}, at position "
            f"{v.massive_onset_position}, not position 0, by the ratio (> {threshold:.0f}x)"
        )
    else:
        text = (
            f"no massive activation (peak ratio {v.massive_peak:,.1f}x at layer "
            f"{peak_layer}, below {threshold:.0f}x)"
        )
    if share is None or sun_position is None:
        return text + "; Sun et al.'s criterion needs each passage's activations (not given)"
    v.sun_evaluated = True
    v.sun_onset = sun_onset(share)
    sun = (
        f"Sun et al.'s criterion (an activation with |a| > {SUN_MIN_ABS:.0f} and "
        f"≥ {SUN_MIN_RATIO:,.0f}x its state's median)"
    )
    if v.sun_onset is None:
        return text + f"; by {sun} no passage has one in any state"
    v.sun_onset_share = float(share[v.sun_onset])
    v.sun_onset_position = int(sun_position[v.sun_onset])
    finite = [(float(s), i) for i, s in enumerate(share) if s is not None and np.isfinite(s)]
    v.sun_peak_share, peak_at = max(finite, key=lambda f: (f[0], -f[1]))
    v.sun_most = sun_most_runs(share)
    if v.sun_most:
        most = (
            f"most passages (≥ {100 * SUN_MOST:.0f}%) have one at {_layer_runs(v.sun_most)}, "
            f"up to {100 * v.sun_peak_share:.0f}%"
        )
    else:
        most = (
            f"no state has one in most passages (at most {100 * v.sun_peak_share:.0f}%, "
            f"at layer {peak_at})"
        )
    return text + (
        f"; by {sun} one first appears at layer {v.sun_onset}, in "
        f"{100 * v.sun_onset_share:.0f}% of the passages there, at position "
        f"{v.sun_onset_position}, and {most}"
    )


def _layer_runs(runs: Sequence[tuple[int, int]]) -> str:
    """Runs of consecutive layers in words: "layer 5", "layers 12–28", joined by commas."""
    return _and([f"layer {a}" if a == b else f"layers {a}–{b}" for a, b in runs])


def _sink_part(
    v: BosVerdict,
    frac: np.ndarray | None,
    baseline: float | None,
    passages: int | None,
    gu: np.ndarray | None = None,
) -> str:
    """The sentence about attention sinks, beside uniform attention's score, then Gu et al.'s
    metric."""
    v.sink_baseline, v.sink_passages = baseline, passages
    if frac is None or not len(frac):
        return "attention sinks not computed"
    if passages == 0 or np.isnan(frac).all():
        return (
            f"attention sinks not computed: no diagnosed passage has the {sink_min_length()} "
            f"tokens on which uniform attention stays below {SINK_THRESHOLD}"
        )
    v.sink_max = float(np.nanmax(frac))
    v.sink_max_layer = int(np.nanargmax(frac)) + 1
    v.sink_mean = float(np.nanmean(frac))
    uniform = "" if baseline is None else f"uniform attention would score {baseline:.2f}"
    if v.sink_max > 0:
        return (
            f"up to {100 * v.sink_max:.0f}% of a block's heads are attention sinks "
            f"(block {v.sink_max_layer}; {100 * v.sink_mean:.0f}% on average over blocks"
            f"{'; ' + uniform if uniform else ''})"
        ) + _gu_part(v, gu)
    return (
        "no head is an attention sink in any block"
        + (f" ({uniform})" if uniform else "")
        + _gu_part(v, gu)
    )


def bos_verdict(
    gaps: Mapping[str, float],
    *,
    massive_ratio: Sequence[float] | None = None,
    massive_position: Sequence[int] | None = None,
    sink_fraction: Sequence[float] | None = None,
    threshold: float = MASSIVE_THRESHOLD,
    sun_share: Sequence[float] | None = None,
    sun_position: Sequence[int] | None = None,
    sink_baseline: float | None = None,
    sink_passages: int | None = None,
    gu_sink_fraction: Sequence[float] | None = None,
    identical: Mapping[str, str] | None = None,
    intervals: Mapping[str, tuple[float, float]] | None = None,
) -> BosVerdict:
    """One verdict from the gap to F_L (%) of each pooling control and the diagnostics.

    gaps: {pooling: gap_pct}, `default` included; NaN gaps are left out. massive_ratio,
    massive_position, sun_share, sun_position: (L+1,) per state h_0..h_L; sink_fraction,
    gu_sink_fraction: (L,) per block 1..L (layer l = index + 1); sink_baseline,
    sink_passages: see `BosDiagnostics` (`verdict_inputs(diagnose(...))` gives all of these).
    Any may be None (not computed): the sentence then says so. identical: {control: why it
    equals default for this run} (`bos_answer.identical_controls`); None: guessed from equal
    gaps (`bos_answer.guess_identical`). intervals: {pooling: (low, high)} gap intervals from
    the run's one bootstrap (`control_effects.regime_intervals`): a regime is then read from
    its interval (SPEC 11.5), so a flip is claimed only when both gaps' intervals say so; None:
    the ±1-point tolerance.
    """
    clean = {p: float(g) for p, g in gaps.items() if g is not None and math.isfinite(g)}
    if "default" not in clean:
        raise DeffError("The verdict needs the default pooling's gap to F_L.")
    same = dict(guess_identical(clean) if identical is None else identical)
    same = {p: why for p, why in same.items() if p in clean and p != "default"}
    spans = intervals or {}
    regimes = {p: regime_of(g, spans.get(p)) for p, g in clean.items()}
    distinct = [p for p in clean if p not in same]
    signs = {regimes[p] for p in distinct} - {"at the reference"}
    default = regimes["default"]
    opposite = {"below": "above", "above": "below"}.get(default)
    v = BosVerdict(
        gaps=clean,
        default_gap=clean["default"],
        regime_depends=len(signs) == 2,
        flipped=[p for p in distinct if regimes[p] == opposite],
        gap_move=max(clean[p] for p in distinct) - min(clean[p] for p in distinct),
        regimes=regimes,
        at_reference=[p for p in distinct if regimes[p] == "at the reference"],
        identical=same,
        distinct=len(distinct),
    )
    parts = [_controls_part(v)]
    ratio = finite_or_nan(massive_ratio)
    if ratio is not None and massive_position is not None:
        share = finite_or_nan(sun_share)
        parts.append(_massive_part(v, ratio, massive_position, share, sun_position, threshold))
    else:
        parts.append("massive activations not computed")
    gu = finite_or_nan(gu_sink_fraction)
    parts.append(_sink_part(v, finite_or_nan(sink_fraction), sink_baseline, sink_passages, gu))
    sentence = "; ".join(parts) + "."
    v.sentence = sentence[0].upper() + sentence[1:]
    return v


def _and(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _is(items: Sequence[str]) -> str:
    return "is" if len(items) == 1 else "are"


def _give(items: Sequence[str]) -> str:
    return "gives" if len(items) == 1 else "give"


#: The `bos_verdict` keywords a `diagnose` dict holds under the same names.
_DIAGNOSTIC_INPUTS = (
    "massive_ratio", "massive_position", "sun_share", "sun_position", "sink_fraction",
    "sink_baseline", "sink_passages", "gu_sink_fraction",
)  # fmt: skip


def verdict_inputs(diagnostics: Mapping[str, Any] | None) -> dict[str, Any]:
    """The keyword arguments of `bos_verdict` held by a `diagnose` dict (None: not computed);
    keys an older or partial dict lacks stay None."""
    d = diagnostics or {}
    return {k: d.get(k) for k in _DIAGNOSTIC_INPUTS}


def verdict_for(
    measurement: Any,
    diagnostics: Mapping[str, Any] | None,
    metric: str | None = None,
    K: int | None = None,
) -> BosVerdict:
    """`bos_verdict` of a `Measurement` (every pooling control, maximum lag K, the controls
    identical for this run) and its `diagnose` dict (None: not computed)."""
    from deffcore.core.constants import POOLINGS

    gaps = {p: measurement.summary(p, metric, K).gap_pct for p in POOLINGS}
    return bos_verdict(
        gaps,
        identical=identical_controls(measurement, metric),
        **verdict_inputs(diagnostics),
    )


def _gu_part(v: BosVerdict, gu: np.ndarray | None) -> str:
    """Gu et al.'s metric (whole passages) after the project's sink sentence, or ""."""
    if gu is None or not len(gu) or np.isnan(gu).all():
        return ""
    v.gu_sink_metric = float(np.nanmean(gu))
    v.gu_sink_max = float(np.nanmax(gu))
    v.gu_sink_max_layer = int(np.nanargmax(gu)) + 1
    return (
        f"; by Gu et al.'s metric (query 0 included, > {GU_THRESHOLD} decided per passage) "
        f"{100 * v.gu_sink_metric:.0f}% of heads are sinks on average, up to "
        f"{100 * v.gu_sink_max:.0f}% in block {v.gu_sink_max_layer}"
    )
