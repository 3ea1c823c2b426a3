"""A run that stops when settled (deffcore.runs.anytime_run, `measure --until`): kept, resumable."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
from run_helpers import assert_same_pooled, window_spec

import deffcore.runs.measure
from deffcore.core.errors import DeffError
from deffcore.extraction import cache
from deffcore.extraction import cache as entries
from deffcore.runs.anytime_run import measure_live
from deffcore.runs.measure import measure_spec
from deffcore.statistics.stopping import CONFIRM, MIN_STOP_N, StopRule


def _first_stop(trajectory, met) -> int | None:
    """Where the calibrated guard stops, by hand: the first mark below N with at least
    MIN_STOP_N passages whose last CONFIRM estimates (in a row) all meet the target."""
    for i, e in enumerate(trajectory):
        last = trajectory[i - CONFIRM + 1 : i + 1] if i + 1 >= CONFIRM else []
        if e.n >= MIN_STOP_N and last and all(met(x) for x in last):
            return e.n
    return None


def test_until_solid_ends_early_and_resumes_to_a_larger_n(windows_dataset, every_batch, planted):
    spec = window_spec(windows_dataset, 512)
    live = measure_live(spec, device="cpu", batch_size=32, until=StopRule("solid"), bootstrap=20)
    assert live.stopped
    k = live.measurement.n
    assert k < 512 and k == live.trajectory[-1].n
    assert live.measurement.elapsed_s >= live.trajectory[-1].elapsed_s > 0  # the time it took
    assert [e.n for e in live.trajectory] == [32, 64, 128, 256][: len(live.trajectory)]
    # judged by hand, not by the rule under test: it stopped at the first mark where the
    # guard (CONFIRM solid looks in a row, >= MIN_STOP_N passages) holds, and no later
    levels = [e.poolings["default"].level for e in live.trajectory]
    assert k == _first_stop(live.trajectory, lambda e: e.poolings["default"].level == "solid")
    assert levels[-CONFIRM:] == ["solid"] * CONFIRM and k >= MIN_STOP_N
    head = live.trajectory[-1].poolings["default"]
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
        deffcore.runs.measure.Measurement(spec=replace(spec, n=k), pooled=kept),
        measure_spec(replace(spec, n=k), device="cpu", batch_size=32, use_cache=False),
    )


def test_until_verdict_stops_on_the_paired_answer(windows_dataset, every_batch, planted):
    # bos=none: windows start with varying tokens, so no_pos0 is its own control and the
    # answer comes from the paired bootstrap of both poolings at every mark
    spec = replace(window_spec(windows_dataset, 1024), bos="none")
    live = measure_live(spec, device="cpu", batch_size=32, until=StopRule("verdict"), bootstrap=30)
    answers = [e.position0 for e in live.trajectory]
    assert all(a is not None and a["paired"] and a["identical"] is None for a in answers)
    definite = ("not_artefact", "artefact", "masks")
    assert live.stopped, [a["verdict"] for a in answers]
    k = live.measurement.n
    same = [a["verdict"] for a in answers[-CONFIRM:]]
    assert k == _first_stop(
        live.trajectory,
        lambda e: (
            e.position0["verdict"] in definite
            and e.position0["verdict"] == live.trajectory[-1].position0["verdict"]
        ),
    )
    assert len(set(same)) == 1 and same[0] in definite and k < 1024


def test_a_stopped_run_shows_the_spread_and_the_paired_answer_of_its_last_estimate(
    windows_dataset, every_batch, planted
):
    """SPEC 15: the kept run of a stop holds its last estimate's paired bootstrap, so
    its displayed trust reads that measured spread (not the prior) and its BOS answer is paired
    without a second draw; the same run measured again reads that kept bootstrap back."""
    from deffcore.statistics.bos_answer import position0_answer_for

    spec = replace(window_spec(windows_dataset, 512), bos="none")  # no_pos0 its own control
    live = measure_live(spec, device="cpu", batch_size=32, until=StopRule("solid"), bootstrap=20)
    m, last = live.measurement, live.trajectory[-1]
    assert live.stopped and m.paired_latest() is last.paired
    res = last.paired.result("default", "cka")
    shown = m.trust()
    assert shown.interval == pytest.approx((res.low, res.high), rel=1e-12)
    asked = m.trust(ci=(res.low, res.high))
    assert (shown.level, shown.reasons) == (asked.level, asked.reasons)
    assert m.view().stored_bootstrap("top1_pc", "cka") is None  # not among the pairs: prior
    answer = position0_answer_for(m.view(), "cka")
    assert answer.paired and answer.B == 20
    # the same run measured again, without estimates, reads the bootstrap kept with the run
    # (SPEC 11.6, "one run, one answer"): the same spread and the same paired answer
    plain = measure_spec(replace(spec, n=m.n), device="cpu", batch_size=32)
    kept = plain.paired_latest()
    assert kept is not None and kept.B == 20
    assert plain.trust().interval == pytest.approx(shown.interval, rel=1e-12)


def test_documents_runs_show_estimates_before_the_end(windows_dataset, every_batch):
    """A 48-document run: the first look (32 passages, the sample's first 32) is estimated
    while it extracts, not only when it lands (no "No estimates before the end")."""
    spec = window_spec(windows_dataset, 48, "documents")
    seen = []
    live = measure_live(spec, device="cpu", batch_size=16, on_estimate=seen.append,
                        final_estimate=False, replay=False, bootstrap=12)  # fmt: skip
    assert [e.n for e in seen] == [32] and not live.stopped
    assert seen[0].position0 is not None and seen[0].position0["paired"]


def test_without_a_rule_the_run_ends_at_n_with_every_estimate(windows_dataset, every_batch):
    spec = window_spec(windows_dataset, 256)
    seen = []
    live = measure_live(spec, device="cpu", batch_size=32, on_estimate=seen.append)
    assert not live.stopped and live.measurement.n == 256
    assert [e.n for e in live.trajectory] == [32, 64, 128, 256] == [e.n for e in seen]
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
    # one line per estimate, on stderr; tiny-llama has no BOS, so no_pos0 is the default
    assert "N=    32" in err and "pos0 identical to default: Δ 0 exactly" in err
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


def test_cli_until_verdict_answers_with_the_paired_answer_it_stopped_on(
    windows_dataset, every_batch, planted, capsys
):
    """A `--until verdict` run stopped on a definite paired answer; its JSON answer is paired
    too (the live B, no --bootstrap asked), not the unpaired "cannot tell" that contradicts it."""
    from deffcore.cli.main import main

    argv = ["measure", "--model", "tiny-llama", "--dataset", windows_dataset, "--n", "1024"]
    argv += ["--max-tokens", "16", "--passages", "windows", "--batch-size", "32", "--bos"]
    argv += ["none", "--device", "cpu", "--until", "verdict", "--estimate-bootstrap", "30"]
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    stop = d["anytime"]["trajectory"][-1]["position0"]
    assert d["anytime"]["stopped"] and d["n"] < 1024
    answer = d["position0_answer"]
    assert answer["paired"] and d["bootstrap"]["B"] == 30
    assert answer["verdict"] == stop["verdict"] != "cannot_tell"


def test_cli_until_verdict_answers_from_the_bootstrap_it_stopped_on_without_redrawing_it(
    windows_dataset, every_batch, planted, capsys, monkeypatch
):
    """The stop's last estimate drew the paired bootstrap on the kept passages: the run's
    answer is read from it (one draw per estimate, none after), and its numbers are those a
    fresh bootstrap of the kept run with the same B and seed gives."""
    import deffcore.statistics.paired as paired
    from deffcore.cli.main import main

    draws: list[tuple[int, int]] = []
    real = paired.resample_indices

    def counted(n, B, seed=0):
        draws.append((n, B))
        return real(n, B, seed)

    monkeypatch.setattr(paired, "resample_indices", counted)
    argv = ["measure", "--model", "tiny-llama", "--dataset", windows_dataset, "--n", "1024"]
    argv += ["--max-tokens", "16", "--passages", "windows", "--batch-size", "32", "--bos"]
    argv += ["none", "--device", "cpu", "--until", "verdict", "--estimate-bootstrap", "30"]
    assert main([*argv, "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["anytime"]["stopped"]
    estimated = [e["n"] for e in d["anytime"]["trajectory"] if e["position0"] is not None]
    assert [n for n, _ in draws] == estimated  # the CLI drew nothing more
    kept = measure_spec(replace(window_spec(windows_dataset, n=d["n"]), bos="none"))
    fresh = kept.paired_bootstrap(("default", "no_pos0"), ("cka",), B=30, seed=0)
    res = fresh.result("default", "cka")
    assert (d["bootstrap"]["low"], d["bootstrap"]["high"]) == (res.low, res.high)


def test_a_run_adopts_only_a_bootstrap_of_its_own_passages(windows_dataset):
    """`Measurement.adopt_paired` keeps a bootstrap whose points are the run's own, and a
    bootstrap it covers is then read from it with the numbers a fresh draw gives; one of other
    passages (same n and L) is refused and changes nothing."""
    from deffcore.statistics.paired import paired_bootstrap

    spec = window_spec(windows_dataset, n=64)
    m, other = measure_spec(spec), measure_spec(replace(spec, seed=1))
    both = ("cka", "unbiased_cka")
    theirs = paired_bootstrap({p: other.states(p) for p in ("default", "no_pos0")},
                              metrics=both, B=12, seed=0)  # fmt: skip
    assert not m.adopt_paired(theirs) and m._covering(("default",), ("cka",), 12, 0) is None
    ours = paired_bootstrap({p: m.states(p) for p in ("default", "no_pos0")},
                            metrics=both, B=12, seed=0)  # fmt: skip
    assert m.adopt_paired(ours)
    assert {metric for _, metric in m._sim} == {"cka"}  # checked on linear CKA alone
    got = m.paired_bootstrap(("default",), ("cka",), B=12, seed=0)
    assert set(got.profiles) == {("default", "cka")}
    fresh = paired_bootstrap({"default": m.states("default")}, metrics=("cka",), B=12, seed=0)
    a, b = got.result("default", "cka"), fresh.result("default", "cka")
    assert (a.point, a.low, a.high) == (b.point, b.low, b.high)
    assert np.array_equal(a.samples, b.samples)
    assert m.paired_bootstrap(("default",), ("cka",), B=12, seed=1).seed == 1  # not covered
