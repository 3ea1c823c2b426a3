"""The live estimates' one bootstrap and the BOS answer at every mark (SPEC section 15).

Stage: statistics (beside `anytime`, which calls it from `estimate`).

At a mark of k passages the poolings whose numbers get an interval share one paired
bootstrap (`paired.paired_bootstrap`: the same B multisets of the k passages for all of them;
with linear CKA the run's metric and unbiased CKA come from one pass, so the shown estimator
has its replicates whichever it is). When that bootstrap holds default and no_pos0, the
estimate carries the BOS answer (`position0.position0_answer` with the replicates of both
gaps): linear CKA's Delta from unbiased CKA's replicates, which the bootstrap always holds
beside it (`position0.STAND_IN`, as the page and the CLI answer it: the claim is about the
population Delta, and linear CKA's finite-sample bias sits in every replicate), with the
trust levels of those two numbers as the page and the CLI judge them
(`position0.answer_trust`: the paired replicates' interval, the action checked against the
run's data). `--until verdict` and the app's "Stop when settled" stop on that answer
(`stopping.StopRule`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from deffcore.core.errors import DeffError
from deffcore.statistics.paired import PairedBootstrap, paired_bootstrap
from deffcore.statistics.position0 import (
    STAND_IN,
    answer_metrics,
    answer_trust,
    position0_answer,
    stood_in,
)

#: The poolings the BOS answer compares.
ANSWER_POOLINGS = ("default", "no_pos0")


def shared_bootstrap(
    states: Mapping[str, Any], poolings: Sequence[str], metric: str, B: int, seed: int = 0
) -> PairedBootstrap | None:
    """One paired bootstrap of `poolings` ({pooling: (L+1, N, d) h_0 .. h_L} in `states`)
    under `metric` (and unbiased CKA beside linear CKA); None when there is nothing to pair
    or a pooling has no similarity here (a degenerate control: judged from N alone)."""
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
    """The BOS answer at this mark (module docstring) as a dict with its "metric"; None when
    the bootstrap does not hold both poolings."""
    if any(p not in estimates for p in ANSWER_POOLINGS):
        return None
    other = STAND_IN.get(metric)
    used = other if other and all(paired.has(p, other) for p in ANSWER_POOLINGS) else metric
    if not all(paired.has(p, used) for p in ANSWER_POOLINGS):
        return None
    levels, actions, gaps, reps = {}, {}, {}, {}
    for p in ANSWER_POOLINGS:
        t = answer_trust(paired, p, used, int(states[p].shape[2]), spec=spec)
        levels[p], actions[p] = t.level, t.action
        gaps[p], reps[p] = paired.gap(p, used)
    noisy = "default" if levels["default"] == "noise" else "no_pos0"
    a = position0_answer(
        gaps["default"], gaps["no_pos0"],
        trust_default=levels["default"], trust_no_pos0=levels["no_pos0"],
        noise_action=actions[noisy], identical=identical, n=n,
        replicates=(reps["default"], reps["no_pos0"]), ci=paired.ci, spec=spec,
    )  # fmt: skip
    if used != metric and paired.has("default", metric) and paired.has("no_pos0", metric):
        asked = paired.gap("no_pos0", metric)[0] - paired.gap("default", metric)[0]
        a = stood_in(a, used, float(asked))
    return {**a.to_dict(), "metric": used}
