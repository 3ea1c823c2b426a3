"""A run that stops when settled (deffcore.runs.anytime_run, `measure --until`): kept, resumable."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from run_helpers import assert_same_pooled, window_spec

import deffcore.runs.measure
from deffcore.core.errors import DeffError
from deffcore.extraction import cache, entries
from deffcore.runs.anytime_run import measure_live
from deffcore.runs.measure import measure_spec
from deffcore.statistics.stopping import StopRule


def test_until_solid_ends_early_and_resumes_to_a_larger_n(windows_dataset, every_batch, planted):
    spec = window_spec(windows_dataset, 512)
    rule = StopRule("solid")
    live = measure_live(spec, device="cpu", batch_size=32, until=rule, bootstrap=20)
    assert live.stopped
    k = live.measurement.n
    assert k < 512 and k == live.trajectory[-1].n
    assert live.measurement.elapsed_s >= live.trajectory[-1].elapsed_s > 0  # the time it took
    assert [e.n for e in live.trajectory] == [64, 128, 256][: len(live.trajectory)]
    assert rule.should_stop(live.trajectory)  # and not one estimate earlier
    assert not rule.should_stop(live.trajectory[:-1])
    head = live.trajectory[-1].poolings["default"]
    assert head.level == "solid"
    assert abs(head.deff_over_L - 1 / 4) < 0.05  # h_0 dominates: D_eff ~ 1 of L = 4 blocks
    # kept as a normal complete run of N = k; the 512-run's partial entry is gone
    kept = cache.load(replace(spec, n=k))
    assert kept is not None and kept.n == k
    runs = {r["key"]: r["status"] for r in entries.list_runs()}
    assert runs == {replace(spec, n=k).key(): "complete"}
    # a later run of a larger N resumes from it, bit-identical to an uninterrupted run
    larger = measure_spec(replace(spec, n=384), device="cpu", batch_size=32)
    assert larger.resumed_passages == k
    fresh = measure_spec(replace(spec, n=384), device="cpu", batch_size=32, use_cache=False)
    assert_same_pooled(larger, fresh)
    # and the stopped run itself is bit-identical to an uninterrupted run of N = k
    assert_same_pooled(
        deffcore.runs.measurement.Measurement(spec=replace(spec, n=k), pooled=kept),
        measure_spec(replace(spec, n=k), device="cpu", batch_size=32, use_cache=False),
    )


def test_without_a_rule_the_run_ends_at_n_with_every_estimate(windows_dataset, every_batch):
    spec = window_spec(windows_dataset, 256)
    seen = []
    live = measure_live(spec, device="cpu", batch_size=32, on_estimate=seen.append)
    assert not live.stopped and live.measurement.n == 256
    assert [e.n for e in live.trajectory] == [64, 128, 256] == [e.n for e in seen]
    # served from the cache: the trajectory comes from its rows, the same numbers
    again = measure_live(spec, device="cpu", batch_size=32)
    assert again.measurement.cached
    for a, b in zip(live.trajectory, again.trajectory, strict=True):
        da, db = a.to_dict(), b.to_dict()
        da.pop("elapsed_s"), db.pop("elapsed_s")
        assert da == db


def test_until_is_refused_before_the_model_loads_in_documents_mode(tiny_dataset, no_model):
    with pytest.raises(DeffError, match="documents mode"):
        measure_live(window_spec(tiny_dataset, 8, "documents"), device="cpu", until=StopRule())
    assert no_model == []


def test_cli_until_prints_estimates_and_the_trajectory(
    windows_dataset, every_batch, planted, capsys
):
    from deffcore.cli.main import main

    argv = ["measure", "--model", "tiny-llama", "--dataset", windows_dataset, "--n", "512"]
    argv += ["--max-tokens", "16", "--passages", "windows", "--batch-size", "32"]
    argv += ["--device", "cpu", "--until", "solid", "--estimate-bootstrap", "20"]
    assert main([*argv, "--json"]) == 0
    out, err = capsys.readouterr()
    d = json.loads(out)
    live = d["anytime"]
    assert live["stopped"] and d["n"] == live["n"] < 512 and d["n_requested"] == live["n"]
    assert isinstance(live["trajectory"], list) and live["trajectory"][-1]["n"] == d["n"]
    assert "N=    64" in err and "verdict" in err  # one line per estimate, on stderr
    assert main(argv) == 0  # the table names where it stopped
    out, _ = capsys.readouterr()
    assert f"Stopped at N = {d['n']:,} of 512" in out


def test_cli_until_in_documents_mode_is_one_sentence(tiny_dataset, no_model, capsys):
    from deffcore.cli.main import main

    argv = ["measure", "--model", "tiny-llama", "--dataset", tiny_dataset, "--n", "8"]
    assert main([*argv, "--until", "solid"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --until cannot stop this run early.") and err.count("\n") == 1
    assert no_model == []
