"""cli/_live.estimate_line: the live line says the BOS answer it has, never a NaN interval."""

from __future__ import annotations

from dataclasses import replace

from run_helpers import window_spec

from deffcore.cli._live import estimate_line
from deffcore.runs.measure import measure_spec
from deffcore.statistics.anytime import estimate


def test_an_identical_control_reads_identical_and_an_interval_reads_as_numbers(windows_dataset):
    # default BOS: every window starts with the same token, so no_pos0 is default (identical)
    same = estimate(measure_spec(window_spec(windows_dataset, n=64)).pooled, bootstrap=10)
    assert same.position0["identical"]
    line = estimate_line(same)
    assert "pos0 identical to default: Δ 0 exactly, not_artefact" in line and "nan" not in line
    own = measure_spec(replace(window_spec(windows_dataset, n=64), bos="none"))
    paired = estimate(own.pooled, bootstrap=10)
    lo, hi = paired.position0["interval"]
    assert f"[{lo:+.2f}, {hi:+.2f}] {paired.position0['verdict']}" in estimate_line(paired)
