"""The BOS answer on constructions whose truth is known: how often it is right and answers.

Stage: lenses (it reads constructions as run views; the claims it judges are
`deffcore.statistics.bos_answer`'s).

    outcomes = calibration_case(1024, 32, 16, pos0=2.0, onset=6, seed=3)
    summarise(outcomes)["unbiased_cka", "paired"]     # answers, claims, wrong, coverage ...

Each case is a `synthetic.position0_construction` (accumulated unit updates on an h_0, and a
position-0 component of squared size `pos0`, onset `onset` and spread over `dims` features
that only the `default` pooling carries), whose population similarity matrices are closed
forms: the population gaps, their difference Delta_pop and the tolerance T_pop are known. A
case is answered as the page answers a run (`bos_answer.position0_answer_for` on a view of its
two poolings), once with the paired bootstrap of both poolings (`paired.paired_bootstrap`, B
replicates shared by both poolings and both metrics) and once without (the unpaired rule),
under each metric; linear CKA is answered twice with the bootstrap, as the page answers it (by
unbiased CKA's replicates, "paired") and by its own ("paired_own"). Recorded per answer: the
verdict and whether its claim is right (`claim_is_right`), whether Delta's paired interval
covers Delta_pop (basic and percentile), and whether the truth is *clear*: Delta_pop lies more
than 2 sd from both boundaries -T_pop and +T_pop, sd the replicates' standard deviation of the
margin to that boundary (Delta_r -+ T_r), so a well-calibrated rule should answer there.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from deffcore.core.constants import REGIME_TOLERANCE
from deffcore.statistics.bos_answer import (
    POS0_MIN_POINTS,
    POS0_SHARE,
    position0_answer_for,
    tolerance,
)

#: How far (in replicate sd) Delta_pop must lie from +-T_pop for the truth to be clear.
CLEAR_SD = 2.0
#: "paired": as the page answers (linear CKA by unbiased CKA's replicates, `bos_answer.STAND_IN`);
#: "paired_own": each metric by its own replicates (linear CKA's before the stand-in); "unpaired".
RULES = ("paired", "paired_own", "unpaired")


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


def pooled_view(S: dict, layers: int, n: int, d: int) -> Any:
    """A construction's two poolings {(pooling, metric): S}, read as a page reads a run (a
    `Run` without states: no position-0 ratio, no spec)."""
    from deffcore.views.run import Run

    similarity: dict[str, dict[str, Any]] = {}
    for (pooling, metric), matrix in S.items():
        similarity.setdefault(pooling, {})[metric] = matrix
    data = {"similarity": similarity, "pos0_norm_ratio": np.ones(layers + 1)}
    return Run(
        {}, layers=layers, d_model=d, n=n, source="construction", label="construction", data=data
    )


@dataclass(frozen=True)
class CaseOutcome:
    """One answer on one construction (module docstring)."""

    metric: str
    rule: str
    verdict: str
    right: bool | None
    trust: str | None
    delta: float
    delta_pop: float
    tolerance_pop: float
    covers_basic: bool
    covers_percentile: bool
    clear: bool
    n: int
    layers: int
    d: int
    identical: bool = False


def _clear(delta_pop: float, T_pop: float, rd: np.ndarray, rn: np.ndarray) -> bool:
    """Delta_pop is more than CLEAR_SD replicate sd from both boundaries (module docstring)."""
    dr = rn - rd
    Tr = np.maximum(POS0_MIN_POINTS, POS0_SHARE * np.abs(rd))
    far_up = abs(delta_pop - T_pop) > CLEAR_SD * float(np.std(dr - Tr, ddof=1))
    far_down = abs(delta_pop + T_pop) > CLEAR_SD * float(np.std(dr + Tr, ddof=1))
    return far_up and far_down


def calibration_case(
    n: int,
    d: int,
    layers: int,
    *,
    pos0: float,
    onset: int,
    h0: float = 1.0,
    seed: int = 0,
    dims: int | None = None,
    metrics: tuple[str, ...] = ("cka", "unbiased_cka"),
    B: int = 100,
    rules: tuple[str, ...] = RULES,
) -> list[CaseOutcome]:
    """One `synthetic.position0_construction`, answered as a page would under each metric and
    rule (module docstring): one `CaseOutcome` per (metric, rule)."""
    from deffcore.measures.depth import effective_depth, gap_percent
    from deffcore.measures.similarity import similarity_matrix
    from deffcore.measures.synthetic import position0_construction
    from deffcore.statistics.paired import difference_of, paired_bootstrap

    c = position0_construction(n, d, layers, h0=h0, pos0=pos0, onset=onset, seed=seed, dims=dims)
    stacks = {"default": c.default, "no_pos0": c.no_pos0}
    S = {
        (p, m): similarity_matrix(x, m)
        for p, x in stacks.items()
        for m in {"unbiased_cka", *metrics}
    }
    view = pooled_view(S, layers, n, d)
    pops = [gap_percent(effective_depth(s), layers) for s in (c.S_default, c.S_no_pos0)]
    delta_pop, T_pop = pops[1] - pops[0], tolerance(pops[0])
    bootstrapped = any(r.startswith("paired") for r in rules)
    pb = paired_bootstrap(stacks, metrics=metrics, B=B, seed=seed) if bootstrapped else None
    out = []
    for metric in metrics:
        for rule in rules:
            paired = pb if rule.startswith("paired") else None
            a = position0_answer_for(view, metric, paired=paired, stand_in=rule == "paired")
            covers = {"basic": False, "percentile": False}
            clear = False
            if paired is not None:  # the replicates the answer's interval came from
                answered = a.answered_with or metric
                (gd, rd), (gn, rn) = pb.gap("default", answered), pb.gap("no_pos0", answered)
                for method in covers:
                    diff = difference_of(gn - gd, rn - rd, method=method)
                    covers[method] = diff.covers(delta_pop)
                clear = _clear(delta_pop, T_pop, rd, rn)
            row = (a.verdict, claim_is_right(a.verdict, *pops), a.trust, float(a.delta or 0.0))
            cover = (covers["basic"], covers["percentile"], clear)
            same = a.identical is not None
            out.append(
                CaseOutcome(metric, rule, *row, delta_pop, T_pop, *cover, n, layers, d, same)
            )
    return out


def summarise(outcomes: Iterable[CaseOutcome]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (metric, rule): answers; claims (definite verdicts) and their share; wrong claims;
    the answer rate where the truth is clear; and Delta's interval coverage (basic,
    percentile) over the cases where no_pos0 is its own control (a zero-size component makes
    the two poolings one: Delta = 0 exactly), and over those whose trust is not noise."""
    groups: dict[tuple[str, str], list[CaseOutcome]] = defaultdict(list)
    for o in outcomes:
        groups[(o.metric, o.rule)].append(o)
    table = {}
    for key, rows in groups.items():
        claims = [o for o in rows if o.right is not None]
        clear = [o for o in rows if o.clear and not o.identical]
        own = [o for o in rows if not o.identical]  # coverage: where no_pos0 is its own control
        usable = [o for o in own if o.trust != "noise"]
        wrong = sum(1 for o in claims if o.right is False)
        answered = sum(1 for o in clear if o.right is not None)
        table[key] = {
            "answers": len(rows),
            "claims": len(claims),
            "claim_rate": _share(len(claims), len(rows)),
            "wrong": wrong,
            "wrong_rate": _share(wrong, len(claims)),
            "clear": len(clear),
            "clear_answered": answered,
            "clear_rate": _share(answered, len(clear)),
            "coverage_basic": _mean(own, "covers_basic"),
            "coverage_percentile": _mean(own, "covers_percentile"),
            "coverage_basic_usable": _mean(usable, "covers_basic"),
            "coverage_percentile_usable": _mean(usable, "covers_percentile"),
            "verdicts": dict(sorted(Counter(o.verdict for o in rows).items())),
        }
    return table


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _mean(rows: list[CaseOutcome], flag: str) -> float:
    """The share of `rows` whose `flag` is true (NaN without rows)."""
    return float(np.mean([getattr(o, flag) for o in rows])) if rows else float("nan")
