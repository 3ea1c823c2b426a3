"""What each pooling control does to the gap, with paired intervals (SPEC sections 11.5, 15).

Stage: statistics (from a run's `paired.PairedBootstrap`; `diagnostics.bos_verdict` takes the
regime intervals).

    effects = control_effects(pb, "cka")            # {control: ControlEffect}
    effects["top1_pc"].delta, effects["top1_pc"].interval   # gap(top1_pc) - gap(default)

A control's effect is a difference on the same passages: Delta_X = gap(X) - gap(default),
its interval from the run's one bootstrap (`PairedBootstrap.difference`, basic). A regime
flip ("default gives D_eff < F_L but X gives D_eff > F_L") is a claim about both gaps at once,
so each control's regime is read from its own gap's interval out of the same replicates
(percentile, SPEC 11.5: an interval containing 0 is "at the reference"), and `regime_intervals`
hands those intervals to the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from deffcore.core.constants import POOLINGS
from deffcore.statistics.bootstrap import percentile_interval
from deffcore.statistics.bos_answer import answer_effect
from deffcore.statistics.trust_rule import regime_of


@dataclass(frozen=True)
class ControlEffect:
    """One control against default: its gap, the gap's interval and regime, and the move
    Delta = gap(control) - gap(default) with its paired interval (points)."""

    pooling: str
    gap: float
    gap_interval: tuple[float, float]
    regime: str
    delta: float
    interval: tuple[float, float]
    method: str
    B: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "pooling": self.pooling,
            "gap": self.gap,
            "gap_interval": list(self.gap_interval),
            "regime": self.regime,
            "delta": self.delta,
            "interval": list(self.interval),
            "method": self.method,
            "B": self.B,
            "paired": True,
        }


def regime_intervals(pb: Any, metric: str, K: int | None = None) -> dict[str, tuple[float, float]]:
    """{pooling: the percentile interval of its gap (points)} for every pooling `pb` holds
    under `metric`."""
    return {
        pooling: percentile_interval(pb.gap(pooling, metric, K)[1], pb.ci)
        for pooling in POOLINGS
        if pb.has(pooling, metric)
    }


def control_effects(pb: Any, metric: str, K: int | None = None) -> dict[str, ControlEffect]:
    """Every control `pb` holds beside default, under `metric` (module docstring); {} when it
    does not hold default."""
    if pb is None or not pb.has("default", metric):
        return {}
    spans = regime_intervals(pb, metric, K)
    out = {}
    for pooling in POOLINGS:
        if pooling == "default" or not pb.has(pooling, metric):
            continue
        gap = pb.gap(pooling, metric, K)[0]
        d = pb.difference((pooling, metric), ("default", metric), K)
        out[pooling] = ControlEffect(
            pooling, gap, spans[pooling], regime_of(gap, spans[pooling]), d.delta, d.interval,
            d.method, d.B,
        )  # fmt: skip
    return out


def effect_sentence(effects: dict[str, ControlEffect], ci: float = 0.95, answer: Any = None) -> str:
    """One line: each control's move of the gap with its paired interval. answer: the run's
    BOS answer (`bos_answer.Position0Answer`), whose Δ and interval are no_pos0's here when it
    is paired (`bos_answer.answer_effect`: one Δ for one comparison on a page, named as the
    answer's, e.g. unbiased CKA's in place of linear CKA's own)."""
    if not effects:
        return ""
    said = answer_effect(answer) if answer is not None else None
    parts = [
        said
        if said and e.pooling == "no_pos0"
        else f"{e.pooling} {e.delta:+.2f} [{e.interval[0]:+.2f}, {e.interval[1]:+.2f}]"
        for e in effects.values()
    ]
    B = next(iter(effects.values())).B
    return (
        f"Each control's move of the gap against default (points, {ci:.0%} paired intervals "
        f"from one bootstrap of the same passages, B = {B}): " + "; ".join(parts) + "."
    )
