"""The BOS on/off check: the same run with and without a BOS, in one sentence (SPEC 11.6).

Stage: lenses (it measures two runs).

    bos_on_off_conclusion(with_bos, without_bos).sentence   # the BOS on/off check, one line

A different comparison from the run's own BOS answer (default vs no_pos0 on the same passages,
`deffcore.statistics.bos_answer`): two runs, one with a BOS token and one without, whose gap
move is judged against the same tolerance (`bos_answer.tolerance`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deffcore.statistics.bos_answer import tolerance

#: A position-0 norm ratio above this is an outlier (the BOS on/off conclusion).
POS0_OUTLIER_RATIO = 10.0


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


def entries_conclusion(
    add: Mapping[str, Any], none: Mapping[str, Any], difference: Any = None
) -> OnOffConclusion:
    """`bos_on_off_conclusion` of the two runs' entries of `bos_on_off` ({"gaps", "pos0"})."""
    ratio_gap = [{"pos0_ratio": e["pos0"][0], "gap": e["gaps"]["default"]} for e in (add, none)]
    return bos_on_off_conclusion(*ratio_gap, difference)


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
    # of loaded models (deffcore.inputs.model)
    out: dict[str, Any] = {}
    runs: dict[str, Any] = {}
    for i, (bos, s) in enumerate(specs.items()):
        out[bos], runs[bos] = _on_off_run(s, i, metric, K, progress, should_stop)
    diff = None
    if B:
        if progress is not None:
            progress(2 * spec.n, 2 * spec.n, "bootstrap of the gap's move")
        diff = run_difference(runs["add"], runs["none"], metric=metric, K=K, B=B, seed=spec.seed)
    c = entries_conclusion(out["add"], out["none"], diff)
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
