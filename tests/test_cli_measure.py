"""`python -m deffcore measure` and `runs`: JSON shape, cache hit, table, listing, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from deffcore.cli.main import main
from deffcore.core.constants import POOLINGS

REPO = Path(__file__).resolve().parent.parent


def _measure_json(capsys, dataset: str, *extra: str) -> dict:
    args = ["measure", "--model", "tiny-llama", "--dataset", dataset, "--n", "8",
            "--max-tokens", "32", "--json", "--no-progress", *extra]  # fmt: skip
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_measure_json_and_cache_hit(capsys, tiny_dataset):
    first = _measure_json(capsys, tiny_dataset)
    for key in ("model", "layers", "d_model", "n", "reference_FL", "pos0_norm_ratio", "results",
                "n_dropped", "cka_bias", "cached", "elapsed_s"):  # fmt: skip
        assert key in first
    assert (first["model"], first["layers"], first["d_model"], first["n"]) == (
        "tiny-llama",
        4,
        64,
        8,
    )
    assert set(first["results"]) == set(POOLINGS)
    for r in first["results"].values():
        assert {"deff", "deff_over_L", "gap_pct", "rho1"} <= set(r)
    assert first["cached"] is False
    second = _measure_json(capsys, tiny_dataset)
    assert second["cached"] is True and second["results"] == first["results"]


def test_random_seeds_add_the_null_band(capsys, tiny_dataset):
    d = _measure_json(capsys, tiny_dataset, "--random-seeds", "0,1")
    null = d["random_null"]
    assert null["models"] == ["random:tiny-llama:0", "random:tiny-llama:1"]
    band = null["results"]["default"]
    assert band["low"] <= band["mean"] <= band["high"] and len(band["deff_over_L"]) == 2


def test_table_output_and_runs(capsys, tiny_dataset):
    assert main(["measure", "--model", "tiny-gpt2", "--dataset", tiny_dataset, "--n", "8",
                 "--max-tokens", "16", "--no-progress"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "D_eff/L" in out and "token_normed" in out and "reference F_L" in out
    assert main(["runs", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert len(runs) == 1 and runs[0]["spec"]["model"] == "tiny-gpt2"
    key = runs[0]["key"]
    assert main(["runs"]) == 0
    assert key in capsys.readouterr().out
    assert main(["runs", "--delete", key]) == 0
    capsys.readouterr()
    assert main(["runs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["runs", "--delete", key]) == 2
    assert "No cached run" in capsys.readouterr().err


def test_bad_input_is_one_line_with_exit_code_2(capsys, tiny_dataset):
    args = ["measure", "--model", "tiny-nope", "--dataset", tiny_dataset, "--no-progress"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: Unknown tiny model") and err.count("\n") == 1
    assert main(["measure", "--model", "tiny-llama", "--dataset", tiny_dataset,
                 "--random-seeds", "a,b"]) == 2  # fmt: skip


def test_python_dash_m_entry_point(tiny_dataset, deff_cache_dir):
    env = {**os.environ, "DEFF_CACHE_DIR": str(deff_cache_dir)}
    cmd = [sys.executable, "-m", "deffcore", "measure", "--model", "tiny-qwen3", "--dataset",
           tiny_dataset, "--n", "6", "--max-tokens", "16", "--json"]  # fmt: skip
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    d = json.loads(res.stdout)
    assert d["model"] == "tiny-qwen3" and d["n"] == 6 and d["cached"] is False


def test_runs_lists_a_corrupt_entry_without_crashing(capsys, deff_cache_dir):
    key = "abc123" + "0" * 14  # a run entry's name: 20 hex digits
    (deff_cache_dir / key).mkdir(parents=True)
    (deff_cache_dir / key / "meta.json").write_text("{truncated")
    assert main(["runs"]) == 0
    assert key in capsys.readouterr().out
    assert main(["runs", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["corrupt"] is True


@pytest.mark.parametrize("mode", ["windows", "packed"])
def test_windows_mode_through_measure(capsys, tiny_dataset, tiny_passages, tiny_model, mode):
    """`--passages windows|packed`: N windows of exactly max_tokens ids, sampled with the seed,
    the mode in the key; the states are those of an extraction of the same windows by hand."""
    import numpy as np

    from deffcore.extraction.forward import extract_pooled
    from deffcore.inputs.texts import cut_windows, sample_windows
    from deffcore.runs.measure import measure

    windows_run = _measure_json(capsys, tiny_dataset, "--passages", mode)
    documents_run = _measure_json(capsys, tiny_dataset)
    other = "packed" if mode == "windows" else "windows"
    assert windows_run["n"] == 8 and windows_run["n_dropped"] == 0
    assert windows_run["passages"] == mode and documents_run["passages"] == "documents"
    assert windows_run["key"] != documents_run["key"]
    assert windows_run["key"] != _measure_json(capsys, tiny_dataset, "--passages", other)["key"]
    m = measure(model="tiny-llama", dataset=tiny_dataset, n=8, max_tokens=32, passages=mode)
    assert m.cached and m.spec.key() == windows_run["key"]
    lm = tiny_model("llama")
    chosen = sample_windows(cut_windows(lm.tokenizer, tiny_passages, 32, mode=mode), 8, seed=0)
    assert all(len(w) == 32 and w[0] == lm.tokenizer.bos_token_id for w in chosen)
    direct = extract_pooled(lm, None, token_ids=chosen, max_tokens=32)
    for pooling, states in direct.pooled.items():
        np.testing.assert_array_equal(m.pooled.pooled[pooling], states)
    other_seed = measure(
        model="tiny-llama", dataset=tiny_dataset, n=8, max_tokens=32, passages=mode, seed=1
    )
    assert not np.array_equal(other_seed.pooled.pooled["default"], m.pooled.pooled["default"])


def test_too_few_windows_is_one_sentence(capsys, tiny_dataset):
    args = ["measure", "--model", "tiny-llama", "--dataset", tiny_dataset, "--n", "500",
            "--max-tokens", "32", "--passages", "windows", "--no-progress"]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "windows of this length, fewer than n=500" in err and err.count("\n") == 1


def test_bos_option_is_in_the_key_and_moves_exactly_one_token(capsys, tiny_dataset):
    """tiny-llama and tiny-llama-nobos share weights and byte ids, so `--bos add` on the
    tokenizer without BOS must reproduce tiny-llama's numbers exactly, and `--bos none` on
    tiny-llama those of tiny-llama-nobos; each option is a different cache entry."""
    with_bos = _measure_json(capsys, tiny_dataset)
    added = _measure_json(capsys, tiny_dataset, "--model", "tiny-llama-nobos", "--bos", "add")
    without = _measure_json(capsys, tiny_dataset, "--model", "tiny-llama-nobos")
    removed = _measure_json(capsys, tiny_dataset, "--bos", "none")
    assert added["results"] == with_bos["results"] and added["bos"] == "add"
    assert removed["results"] == without["results"] and removed["bos"] == "none"
    assert added["results"] != without["results"]
    explicit = _measure_json(capsys, tiny_dataset, "--bos", "add")  # tiny-llama adds one already
    assert explicit["results"] == with_bos["results"]
    keys = {d["key"] for d in (with_bos, added, without, removed, explicit)}
    assert len(keys) == 5


def test_snapshot_command_remakes_a_windows_run(capsys, tiny_dataset, tmp_path):
    path = tmp_path / "new" / "snap.json"
    d = _measure_json(capsys, tiny_dataset, "--passages", "windows", "--bos", "none",
                      "--snapshot", str(path))  # fmt: skip
    snap = json.loads(path.read_text())
    assert "--passages windows --bos none" in snap["command"]
    assert "--intervention" not in snap["command"] and d["passages"] == "windows"
    assert snap["measurement"]["trust"] == d["trust"]  # the badge travels with the snapshot


def test_measure_reports_trust_and_bootstrap_adds_the_interval(capsys, tiny_dataset):
    import deffcore as dc
    from deffcore.runs.measure import measure
    from deffcore.statistics.bos_answer import ANSWER_B

    d = _measure_json(capsys, tiny_dataset)
    t = d["trust"]
    # without --bootstrap the run is given the BOS answer's paired bootstrap (ANSWER_B, the
    # run's seed), and its trust the interval of those replicates: the page's, the report's
    m = measure(model="tiny-llama", dataset=tiny_dataset, n=8, max_tokens=32)
    res = m.bootstrap("default", B=ANSWER_B, seed=0)
    assert t["interval"] == pytest.approx([res.low, res.high], rel=1e-9)
    assert d["bootstrap"]["B"] == ANSWER_B
    assert t["point"] == d["results"]["default"]["deff_over_L"] and t["metric"] == "cka"
    assert t["level"] == "noise" and "far too few" in t["sentence"]  # N = 8
    want = dc.trust(m.states_with_h0("default"), "cka", bootstrap=res)
    assert (t["level"], t["reasons"]) == (want.level, list(want.reasons))
    # the action asks what the data can give: 12 documents cannot give thousands (SPEC 15)
    assert t["action"].startswith(want.action + ": tiny_passages.txt gives 12 documents here")
    assert "a larger corpus (an hf: dataset" in t["action"]
    assert t["bias_corrected"] == pytest.approx(want.bias_corrected, rel=1e-9)
    boot = _measure_json(capsys, tiny_dataset, "--bootstrap", "20")
    res = m.bootstrap("default", B=20, seed=0)
    assert boot["trust"]["interval"] == pytest.approx([res.low, res.high], rel=1e-9)
    assert boot["bootstrap"]["B"] == 20 and len(boot["bootstrap"]["samples"]) == 20
    assert boot["bootstrap"]["bias_corrected"] == pytest.approx(2 * res.point - res.mean)
    assert main(["measure", "--model", "tiny-llama", "--dataset", tiny_dataset, "--n", "8",
                 "--max-tokens", "32", "--no-progress", "--bootstrap", "20"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "trust (default pooling, D_eff/L): ○ noise. N = 8 passages is far too few" in out
    assert "bootstrap (B = 20)" in out


def test_bad_bootstrap_is_one_line_before_loading(capsys, tiny_dataset):
    code = main(["measure", "--model", "tiny-llama", "--dataset", tiny_dataset, "--n", "8",
                 "--bootstrap", "1", "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "--bootstrap must be an integer >= 2" in err and "Traceback" not in err


def test_measure_json_carries_the_page_answer_paired_with_a_bootstrap(capsys, tiny_dataset):
    from deffcore.runs.measure import measure
    from deffcore.statistics.bos_answer import ANSWER_B, position0_answer_for, run_answer

    opts = ("--passages", "windows", "--bos", "none", "--n", "24", "--max-tokens", "16")
    plain = _measure_json(capsys, tiny_dataset, *opts)["position0_answer"]
    assert {"verdict", "delta", "interval", "tolerance", "paired", "sentence"} <= set(plain)
    m = measure(model="tiny-llama", dataset=tiny_dataset, n=24, max_tokens=16,
                passages="windows", bos="none")  # fmt: skip
    # without --bootstrap: paired all the same (ANSWER_B), and kept with the run, so the run
    # read back gives the very same answer (every number, not only its words)
    assert plain == run_answer(m.view(), "cka").to_dict()
    assert (
        plain["paired"] is True and plain["B"] == ANSWER_B and "unpaired" not in plain["sentence"]
    )
    d = _measure_json(capsys, tiny_dataset, *opts, "--bootstrap", "20")
    a = d["position0_answer"]
    # linear CKA's answer is the calibrated one: from unbiased CKA's replicates of the same
    # passages, which the run's one bootstrap draws without being asked (SPEC 15)
    pb = m.paired_bootstrap(("default", "no_pos0"), ("cka", "unbiased_cka"), B=20, seed=0)
    assert a == position0_answer_for(m.view(), "cka", paired=pb).to_dict()
    assert a["answered_with"] == "unbiased_cka" and a["delta_asked"] is not None
    own = m.paired_bootstrap(("default", "no_pos0"), ("cka",), B=20, seed=0)
    assert a != position0_answer_for(m.view(), "cka", paired=own).to_dict()
    assert a["paired"] is True and a["B"] == 20 and a["method"] == "basic"
    assert "of one paired bootstrap: both gaps on the same B = 20 multisets" in a["how"]
    # the run's one bootstrap: the default pooling's interval is that of a bootstrap alone
    res = m.bootstrap("default", B=20, seed=0)
    assert d["bootstrap"]["samples"] == pytest.approx(res.samples.tolist(), rel=1e-9)
    assert main(["measure", "--model", "tiny-llama", "--dataset", tiny_dataset, *opts,
                 "--no-progress", "--bootstrap", "20"]) == 0  # fmt: skip
    assert "BOS answer (is the gap a position-0 artefact?): " in (capsys.readouterr().out)


def test_bad_bootstrap_poolings_are_one_line(capsys, tiny_dataset):
    for flag, value, needle in (
        ("--bootstrap-poolings", "no_pos0", "must include default"),
        ("--bootstrap-poolings", "default,mean", "takes default"),
        ("--bootstrap-metrics", "cos", "takes cka"),
    ):
        code = main(["measure", "--model", "tiny-llama", "--dataset", tiny_dataset, "--n", "8",
                     "--bootstrap", "5", flag, value, "--no-progress"])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and needle in err and "Traceback" not in err, err


def test_a_live_run_answers_and_judges_from_the_bootstrap_it_already_drew(capsys, tiny_dataset):
    """SPEC 15: a plain `measure` (live estimates on) holds the last estimate's
    paired bootstrap of its own passages, so its BOS answer is paired and its trust reads the
    measured spread, the same numbers `--bootstrap 50` draws; `--no-anytime` has neither."""
    from deffcore.statistics.stopping import LIVE_BOOTSTRAP

    opts = ("--passages", "windows", "--bos", "none", "--n", "48", "--max-tokens", "16")
    live = _measure_json(capsys, tiny_dataset, *opts)
    asked = _measure_json(capsys, tiny_dataset, *opts, "--bootstrap", str(LIVE_BOOTSTRAP))
    assert live["position0_answer"]["paired"] is True
    assert live["position0_answer"]["B"] == LIVE_BOOTSTRAP
    assert live["position0_answer"] == asked["position0_answer"]
    assert live["trust"]["interval"] is not None and live["trust"] == asked["trust"]
    assert live["bootstrap"]["samples"] == asked["bootstrap"]["samples"]
    # the same run again without live estimates: the paired bootstrap kept with it answers
    off = _measure_json(capsys, tiny_dataset, *opts, "--no-anytime")
    assert off["position0_answer"] == live["position0_answer"] and off["trust"] == live["trust"]


def test_measure_table_across_measures_in_json_and_text(capsys, tiny_dataset, tmp_path):
    """--metric <a SPEC 17 measure> measures the run under cka and adds the table (SPEC 17.4),
    whose linear-CKA interval is the run's own bootstrap (one set of resamples); the snapshot
    carries it and its command remakes it."""
    snap = tmp_path / "run.json"
    d = _measure_json(
        capsys, tiny_dataset, "--metric", "procrustes", "--measures", "cka,rsa",
        "--bootstrap", "3", "--snapshot", str(snap),
    )  # fmt: skip
    data = json.loads(snap.read_text())
    kept = data["measures"]["default"]["rows"]  # rounded as every number of a snapshot
    assert [r["measure"] for r in kept] == ["cka", "procrustes", "rsa"]
    assert kept[1]["deff_over_L"] == pytest.approx(
        d["measures"]["rows"][1]["deff_over_L"], abs=1e-6
    )
    assert "--measures cka,procrustes,rsa" in data["command"]
    assert d["metric"] == "cka"
    table = d["measures"]
    assert [r["measure"] for r in table["rows"]] == ["cka", "procrustes", "rsa"]
    assert table["B"] == 3 and table["n"] == d["n"] and table["layers"] == d["layers"]
    cka = table["rows"][0]
    assert cka["deff_over_L"] == pytest.approx(d["results"]["default"]["deff_over_L"], rel=1e-9)
    assert (cka["low"], cka["high"]) == pytest.approx(
        (d["bootstrap"]["low"], d["bootstrap"]["high"]), rel=1e-9
    )
    args = ["measure", "--model", "tiny-llama", "--dataset", tiny_dataset, "--n", "8",
            "--max-tokens", "32", "--no-progress", "--metric", "all",
            "--measures-b", "2"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "orthogonal Procrustes" in out and "PWCCA" in out and "calibrated against 19" in out


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--metric", "cca"], "--metric 'cca' is not a similarity measure"),
        (["--measures", "cka,knn"], "--measures 'knn' is not a similarity measure"),
        (["--measures", ","], "--measures names no measure"),
    ],
)
def test_unknown_measure_is_exit_2_and_one_sentence(capsys, flags, said):
    assert main(["measure", "--model", "tiny-llama", "--n", "8", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {said}") and err.count("\n") == 1
