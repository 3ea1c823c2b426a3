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


def est(n: int, level: str = "solid", answer: str | None = None, **levels: str):
    poolings = {p: SimpleNamespace(level=levels.get(p, level)) for p in POOLINGS}
    position0 = None if answer is None else {"verdict": answer}
    return SimpleNamespace(n=n, poolings=poolings, position0=position0)


def test_a_single_solid_look_never_stops_when_two_are_asked():
    """The confirm guard alone: min_n cannot mask it (min_n = 1)."""
    rule = StopRule("solid", confirm=2, min_n=1)
    assert not rule.should_stop([est(256)])  # one look, however solid
    assert not rule.should_stop([est(128, "indicative"), est(256)])  # the look before was not
    assert rule.should_stop([est(128), est(256)])
    assert not rule.should_stop([est(64), est(128, "noise"), est(256)])  # the last two count
    assert StopRule("solid", confirm=3, min_n=1).should_stop([est(64), est(128), est(256)])
    assert not StopRule("solid", confirm=3, min_n=1).should_stop([est(128), est(256)])


def test_min_n_alone_holds_a_stop_back():
    """The passages guard alone: confirm cannot mask it (confirm = 1)."""
    rule = StopRule("solid", confirm=1, min_n=128)
    assert not rule.should_stop([est(64)])
    assert not rule.should_stop([est(127)])
    assert rule.should_stop([est(128)])


def test_the_default_rule_is_the_calibrated_guard_in_action():
    """The defaults, by behaviour: with CONFIRM = 2 and MIN_STOP_N = 128 (BENCHMARKS.md,
    "Stopping with the paired answer"), a lone solid look never stops and no stop comes
    before 128 passages; setting either constant to 1 makes one of these fail."""
    rule = StopRule()
    assert (CONFIRM, MIN_STOP_N) == (2, 128)  # the calibrated values (bench_stopping.py)
    assert not rule.should_stop([est(4096)])  # CONFIRM: one look
    assert not rule.should_stop([est(32), est(64)])  # MIN_STOP_N: two looks, too few passages
    assert rule.should_stop([est(64), est(128)])
    assert "at 2 estimates in a row (at least 128 passages)" in rule.describe()


def test_solid_waits_for_every_chosen_pooling():
    rule = StopRule("solid", poolings=("default", "top1_pc"), confirm=1, min_n=1)
    assert not rule.should_stop([est(256, top1_pc="indicative")])
    assert rule.should_stop([est(256)])
    only_default = StopRule("solid", confirm=1, min_n=1)
    assert only_default.should_stop([est(256, top1_pc="noise")])


def test_verdict_target_reads_the_paired_answer_not_the_levels():
    rule = StopRule("verdict", confirm=2, min_n=128)
    assert rule.should_stop([est(64, "noise", "not_artefact"), est(128, "noise", "not_artefact")])
    assert not rule.should_stop([est(64, answer="cannot_tell"), est(128, answer="not_artefact")])
    # two definite looks that disagree are not settled
    assert not rule.should_stop([est(64, answer="artefact"), est(128, answer="not_artefact")])
    assert not rule.should_stop([est(64), est(128)])  # no answer made: never a verdict stop
    assert not StopRule("verdict", confirm=1, min_n=1).should_stop([est(64, answer="missing")])


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
    from deffcore.statistics.stopping import (
        ANSWER_POOLINGS,
        DEFAULT_BOOTSTRAP,
        LIVE_BOOTSTRAP,
        estimate_bootstrap,
    )

    pair = ("default", "no_pos0")
    assert pair == ANSWER_POOLINGS
    assert estimate_bootstrap(StopRule("solid")) == (DEFAULT_BOOTSTRAP["solid"], pair)
    assert estimate_bootstrap(StopRule("verdict")) == (DEFAULT_BOOTSTRAP["verdict"], pair)
    assert estimate_bootstrap(StopRule("solid", poolings=("top1_pc",)), 0) == (
        None,
        (*pair, "top1_pc"),
    )
    assert estimate_bootstrap(StopRule("verdict"), 40) == (40, pair)
    assert estimate_bootstrap(None) == (LIVE_BOOTSTRAP, pair)  # every live estimate pairs
    assert estimate_bootstrap(None, 0) == (None, pair)


def test_answer_stopping_harness_on_its_tiny_slice():
    """benchmarks/bench_stopping.py --answers: growing position-0 constructions measured by
    `anytime.estimate` with the paired bootstrap; the rule's stops are judged against the
    population (the full table is BENCHMARKS.md's)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_stopping.py"
    spec = importlib.util.spec_from_file_location("bench_stopping", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_stopping"] = bench
    spec.loader.exec_module(bench)
    runs = bench.run_answers("tiny", 20)
    assert [m["n"] for m in runs[0]["marks"]] == [32, 64, 128, 256]
    rows = bench.summarise_answers(runs)["rows"]
    assert rows["fixed N, definite answer"]["wrong"] == 0
    assert rows["fixed N, definite answer"]["claims"] >= 2  # a clear construction answers
    assert f"stopped answer, confirm {CONFIRM}, N >= {MIN_STOP_N}" in rows
    assert "| answers judged |" in bench.answers_markdown(bench.summarise_answers(runs), 20)
