"""The stopping rule (deffcore.statistics.stopping): targets, the optional-stopping guard, its CLI
form."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from deffcore.core.constants import POOLINGS
from deffcore.core.errors import DeffError
from deffcore.statistics.stopping import CONFIRM, MIN_STOP_N, StopRule, parse_until


def est(n: int, level: str = "solid", settled: bool = False, **levels: str):
    poolings = {p: SimpleNamespace(level=levels.get(p, level)) for p in POOLINGS}
    return SimpleNamespace(n=n, poolings=poolings, verdict_settled=settled)


def test_solid_needs_confirm_estimates_in_a_row_and_min_n():
    rule = StopRule("solid", confirm=2, min_n=128)
    assert not rule.should_stop([est(64)])  # one look is not enough
    assert not rule.should_stop([est(64, "indicative"), est(128)])  # the first was not solid
    assert rule.should_stop([est(64), est(128)])
    assert not rule.should_stop([est(32), est(64)])  # below min_n
    assert StopRule("solid", confirm=1, min_n=64).should_stop([est(64)])


def test_solid_waits_for_every_chosen_pooling():
    rule = StopRule("solid", poolings=("default", "top1_pc"), confirm=1, min_n=1)
    assert not rule.should_stop([est(256, top1_pc="indicative")])
    assert rule.should_stop([est(256)])
    only_default = StopRule("solid", confirm=1, min_n=1)
    assert only_default.should_stop([est(256, top1_pc="noise")])


def test_verdict_target_reads_the_settled_flag_not_the_levels():
    rule = StopRule("verdict", confirm=2, min_n=128)
    trail = [est(64, "noise", settled=True), est(128, "noise", settled=True)]
    assert rule.should_stop(trail)
    assert not rule.should_stop([est(64, settled=False), est(128, settled=True)])


def test_defaults_are_the_calibrated_guard():
    rule = StopRule()
    assert (rule.target, rule.poolings, rule.confirm, rule.min_n) == (
        "solid",
        ("default",),
        CONFIRM,
        MIN_STOP_N,
    )
    assert "at 2 estimates in a row" in rule.describe() or CONFIRM == 1


def test_bad_rules_are_one_sentence():
    with pytest.raises(DeffError, match="stopping target"):
        StopRule("soon")
    with pytest.raises(DeffError, match="pooling controls"):
        StopRule("solid", poolings=("mean",))
    with pytest.raises(DeffError):
        StopRule("solid", confirm=0)


def test_parse_until():
    assert parse_until("solid", "all").poolings == POOLINGS
    assert parse_until("solid", "default, top1_pc").poolings == ("default", "top1_pc")
    assert parse_until("verdict").target == "verdict"


def test_calibration_harness_runs_on_its_tiny_slice():
    """benchmarks/bench_stopping.py's tiny grid: every table row is produced, the rule's
    stops are counted, and a settled verdict there is right (the full table is BENCHMARKS.md's)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_stopping.py"
    spec = importlib.util.spec_from_file_location("bench_stopping", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_stopping"] = bench
    spec.loader.exec_module(bench)
    runs = bench.run("tiny", None)
    table = bench.summarise(runs["unbiased_cka"])
    assert table["runs"] == len(bench.grid("tiny"))
    rows = table["rows"]
    assert "fixed N, solid" in rows and f"stopped verdict, confirm {CONFIRM}, N >= 128" in rows
    settled = rows["fixed N, settled verdict"]
    assert settled["cases"] > 0 and settled["right"] == 1.0
    assert "| numbers judged |" in bench.markdown(table, "tiny")


def test_estimate_bootstrap_defaults_per_target():
    from deffcore.statistics.stopping import DEFAULT_BOOTSTRAP, estimate_bootstrap

    assert estimate_bootstrap(StopRule("solid")) == (DEFAULT_BOOTSTRAP["solid"], ("default",))
    assert estimate_bootstrap(StopRule("verdict")) == (DEFAULT_BOOTSTRAP["verdict"], POOLINGS)
    assert estimate_bootstrap(StopRule("solid"), 0) == (None, ("default",))
    assert estimate_bootstrap(StopRule("verdict"), 40) == (40, POOLINGS)
    assert estimate_bootstrap(None) == (None, ("default",))
