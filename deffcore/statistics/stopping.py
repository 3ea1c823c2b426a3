"""When a growing run may stop: its chosen numbers are solid, or its BOS answer is definite.

    rule = StopRule("solid")                    # the headline D_eff/L solid
    rule = StopRule("verdict")                  # the BOS answer definite (paired interval)
    rule.should_stop(trajectory)                # trajectory: the run's `anytime.Estimate`s so far

Targets:

    solid     every pooling in `poolings` (default: the headline, `default`) reads "solid" by
              the calibrated trust rule (`deffcore.trust`) on its shown estimator
    verdict   the BOS answer (is the gap a position-0 artefact?, `anytime.Estimate.position0`,
              from one paired bootstrap of default and no_pos0 at that mark) is definite: not
              an artefact, an artefact, or position 0 hides part of the gap, and the same at
              every confirming estimate

**Optional stopping.** Looking at a number again and again and stopping the first time it
looks good picks the moments when chance made it look good: the chance of stopping on a
fluke grows with every look. The guard: a stop needs the target met at CONFIRM consecutive
estimates (k and 2k passages: the second one holds k new passages the first never saw; for
the verdict, the same verdict at both) and at least MIN_STOP_N passages. The stopping rule is
part of what is calibrated: `benchmarks/bench_stopping.py` simulates it on the closed-form
constructions (`deffcore.measures.teaching` for "solid", `synthetic.position0_construction` for the
paired answer) and compares how often a stopped claim is right (2% of the truth for "solid",
the population's position-0 verdict for the answer) with how often a fixed-N claim the rule
makes is (table in BENCHMARKS.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from deffcore.core.constants import POOLINGS
from deffcore.core.errors import DeffError
from deffcore.statistics.bos_answer import ANSWER_POOLINGS

#: What a run may stop on.
TARGETS: tuple[str, ...] = ("solid", "verdict")
#: Consecutive estimates (k, 2k, ...) that must meet the target before a stop. Calibrated
#: (BENCHMARKS.md, "Answers in minutes"): with a bootstrap interval, stopping at the first
#: solid look landed within 2% in 95.5% of runs against 98.1% at fixed N (linear CKA), and a
#: first settled verdict was right in 98.4% against 99.7%; two in a row: 100% in every arm.
CONFIRM = 2
#: No stop before this many passages: N = 64 read unsettled on both packaged models, and the
#: simulated shares did not change between 64 and 256.
MIN_STOP_N = 128
#: Bootstrap replicates the estimates of a target's numbers get by default: "solid" claims a
#: number within 2%, and on real states (SmolLM2, BBC windows) the bootstrap's spread is
#: 2-3x the N-only spread model's (BENCHMARKS.md), so a solid stop is judged with an interval;
#: the verdict is the BOS answer's paired interval (one bootstrap of default and no_pos0).
DEFAULT_BOOTSTRAP: dict[str, int | None] = {"solid": 30, "verdict": 50}
#: Replicates of the live estimates' paired bootstrap without a stopping rule (the BOS answer
#: at every mark; `--estimate-bootstrap 0` turns it off).
LIVE_BOOTSTRAP = 50
#: The BOS answer's definite verdicts (a stop on "verdict" needs one).
DEFINITE = ("not_artefact", "artefact", "masks")


@dataclass(frozen=True)
class StopRule:
    """Stop when `target` is met at `confirm` consecutive estimates, with >= `min_n` passages.

    poolings: the numbers that must be solid (target "solid"; ignored for "verdict").
    """

    target: str = "solid"
    poolings: tuple[str, ...] = ("default",)
    confirm: int = CONFIRM
    min_n: int = MIN_STOP_N

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise DeffError(
                f"Unknown stopping target {self.target!r}; choose one of {', '.join(TARGETS)}."
            )
        bad = [p for p in self.poolings if p not in POOLINGS]
        if bad or not self.poolings:
            raise DeffError(
                f"The numbers to settle must be pooling controls ({', '.join(POOLINGS)}); "
                f"got {', '.join(bad) or 'none'}."
            )
        if self.confirm < 1 or self.min_n < 1:
            raise DeffError("A stopping rule needs confirm >= 1 and min_n >= 1.")

    def met(self, est: Any) -> bool:
        """The target on one estimate (an `anytime.Estimate`), before the guard."""
        if self.target == "verdict":
            answer = getattr(est, "position0", None)
            return answer is not None and answer["verdict"] in DEFINITE
        return all(est.poolings[p].level == "solid" for p in self.poolings)

    def should_stop(self, trajectory: Sequence[Any]) -> bool:
        """True when the last `confirm` estimates all meet the target (for the verdict: the
        same verdict) and the last has at least `min_n` passages."""
        if len(trajectory) < self.confirm or trajectory[-1].n < self.min_n:
            return False
        last = trajectory[-self.confirm :]
        if not all(self.met(e) for e in last):
            return False
        return self.target != "verdict" or len({e.position0["verdict"] for e in last}) == 1

    def describe(self) -> str:
        what = (
            "the BOS answer is definite"
            if self.target == "verdict"
            else f"{', '.join(self.poolings)} D_eff/L {'is' if len(self.poolings) == 1 else 'are'}"
            " solid"
        )
        times = "" if self.confirm == 1 else f" at {self.confirm} estimates in a row"
        return f"stop when {what}{times} (at least {self.min_n:,} passages)"


def estimate_bootstrap(
    rule: StopRule | None, bootstrap: int | None = None
) -> tuple[int | None, tuple[str, ...]]:
    """(B, poolings) of the live estimates' one paired bootstrap under `rule`: `bootstrap` (0:
    none) or the target's DEFAULT_BOOTSTRAP (LIVE_BOOTSTRAP without a rule), shared by the
    numbers the rule waits for and the two the BOS answer compares (ANSWER_POOLINGS)."""
    if rule is None:
        B = LIVE_BOOTSTRAP if bootstrap is None else (bootstrap or None)
        return B, ANSWER_POOLINGS
    B = DEFAULT_BOOTSTRAP[rule.target] if bootstrap is None else (bootstrap or None)
    waits = rule.poolings if rule.target == "solid" else ()
    return B, tuple(dict.fromkeys((*ANSWER_POOLINGS, *waits)))


def parse_until(target: str, poolings: str | Sequence[str] = "default") -> StopRule:
    """A rule from the CLI's `--until TARGET` and `--until-poolings a,b` (or `all`)."""
    if isinstance(poolings, str):
        names = [p.strip() for p in poolings.split(",") if p.strip()]
        names = list(POOLINGS) if names == ["all"] else names
    else:
        names = list(poolings)
    return StopRule(target=target, poolings=tuple(names))
