"""The planner (deffcore.runs.planner, model_size, calibration, sweep_cost; `--plan`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from run_helpers import window_spec

import deffcore.inputs.model
import deffcore.inputs.run_spec
import deffcore.runs.measure
from deffcore.core.errors import DeffError
from deffcore.inputs.model import ModelSize, from_config, from_mapping, model_size
from deffcore.runs import calibration, planner
from deffcore.runs.planner import (
    device_bytes,
    extraction_bytes,
    gpu_time,
    numbers_seconds,
    parse_bytes,
    plan_run,
    pooled_bytes,
    similarity_bytes,
)

ROOT = Path(__file__).resolve().parents[1]
SMALL = ModelSize(layers=2, d_model=4, d_ff=8, heads=2, kv_heads=1, head_dim=2, vocab=10)


@pytest.fixture
def no_load(monkeypatch):
    """Every model loader fails if called (the plan must refuse before any model loads)."""
    calls = []

    def loader(*args, **kwargs):
        calls.append(args)
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(deffcore.inputs.run_spec, "load_model", loader)
    monkeypatch.setattr(deffcore.inputs.model, "load_model", loader)
    return calls


def test_parse_bytes():
    assert parse_bytes("8GiB") == parse_bytes("8G") == parse_bytes("8 gb") == 8 * 2**30
    assert parse_bytes("512MiB") == 512 * 2**20
    assert parse_bytes("2e9") == 2_000_000_000
    assert parse_bytes("1.5k") == 1536
    for bad in ("lots", "-1G", "0", "8 GiBs"):
        with pytest.raises(DeffError, match="--max-memory"):
            parse_bytes(bad)


def test_parameter_counts_by_hand_and_against_published_sizes():
    # blocks: 2 x [4 x (2 + 2) x 2 + 2 x 2 x 4 + 3 x 4 x 8] = 288; embeddings 10 x 4
    assert SMALL.block_params == 288 and SMALL.params == 328
    assert ModelSize(**{**SMALL.__dict__, "tied": False}).params == 368
    assert ModelSize(**{**SMALL.__dict__, "gated": False}).block_params == 288 - 2 * 32
    assert model_size("smollm2-135m").params == 134_479_872  # published: 134.5M
    assert model_size("gemma3-270m").params == 268_042_240  # published: 268M
    assert model_size("random:gemma3-270m:3") == model_size("gemma3-270m")
    tiny = model_size("tiny-llama")
    assert (tiny.layers, tiny.d_model, tiny.kv_heads) == (4, 64, 2)
    assert model_size("EleutherAI/not-on-this-machine") is None


def test_manifest_sizes_match_published_counts():
    from deffcore.work.sweep.cost import manifest_extras

    _settings, sizes, _about = manifest_extras(ROOT / "manifests" / "paper16.yaml")
    # published totals (norms and biases, which the count leaves out, are < 0.1%)
    published = {
        "meta-llama/Llama-3.1-8B": 8_030_261_248,
        "EleutherAI/pythia-70m": 70_426_624,
        "EleutherAI/pythia-1.4b": 1_414_647_808,
        "mistralai/Mistral-7B-v0.1": 7_241_732_096,
    }
    for model, count in published.items():
        assert sizes[model].params == pytest.approx(count, rel=1e-3), model


def test_from_config_and_from_mapping():
    cfg = {
        "text_config": {
            "hidden_size": 8,
            "num_attention_heads": 2,
            "num_hidden_layers": 3,
            "intermediate_size": 16,
            "vocab_size": 50,
            "model_type": "gpt2",
        }
    }
    size = from_config(cfg)
    assert (size.layers, size.d_model, size.head_dim, size.kv_heads, size.gated) == (
        3,
        8,
        4,
        2,
        False,
    )
    with pytest.raises(DeffError, match="layers, d_model"):
        from_mapping({"layers": 2})


def test_memory_by_hand():
    assert pooled_bytes(SMALL, 5) == 4 * 3 * 5 * 4 * 4 == 960
    # weights 328 x 4; activations 2 x 3 x (6 x 4 + 3 x 8) x 4 + 2 x 2 x 3^2 x 4; pooled
    assert device_bytes(SMALL, 5, 3, 2, "float32") == 1312 + 1152 + 144 + 960
    assert device_bytes(SMALL, 5, 3, 2, "bfloat16") == 656 + 576 + 144 + 960
    assert extraction_bytes(SMALL, 5, 3, 2, "float32", live=True) == 3568 + 960
    assert extraction_bytes(SMALL, 5, 3, 2, "float32", live=False) == 3568
    big_n = 10_000  # storing (3 pooled copies) dominates once the states outgrow the model
    assert extraction_bytes(SMALL, big_n, 3, 2, "float32", live=False) == 3 * pooled_bytes(
        SMALL, big_n
    )
    # 6 poolings + a centred copy and the updates + one strip (5 rows) + two float64 chunks
    from deffcore.measures.similarity import CONTRACT_ELEMENTS

    assert similarity_bytes(SMALL, 5) == 1440 + 320 + 200 + 2 * CONTRACT_ELEMENTS * 8


def test_a_plans_memory_is_each_step_at_its_own_shape():
    """memory_plan reads the plan's size, N, max tokens, batch and dtype, each in its place."""
    from deffcore.runs.planner import Plan, bootstrap_bytes, memory_plan

    plan = Plan("m", n=5, max_tokens=3, device="cpu", dtype="float32", batch=2, size=SMALL)
    assert memory_plan(plan, live=True, bootstrap=None, file_bytes=7) == {
        "extraction": 3568 + 7 + 960,  # test_memory_by_hand's, with a 7-byte file
        "similarity": similarity_bytes(SMALL, 5),
    }
    with_b = memory_plan(plan, live=False, bootstrap=4)
    assert with_b["bootstrap"] == bootstrap_bytes(SMALL, 5, 4)
    assert with_b["extraction"] == extraction_bytes(SMALL, 5, 3, 2, "float32", live=False)


def test_gpu_time_is_a_range_scaled_by_block_parameters():
    size = model_size("gemma3-270m")
    lo, hi = gpu_time(size, 198_637)
    assert hi == pytest.approx(1.0)  # the measured figure itself
    assert lo <= hi
    big = ModelSize(
        layers=32,
        d_model=4096,
        d_ff=14336,
        heads=32,
        kv_heads=8,
        head_dim=128,
        vocab=128256,
        tied=False,
    )
    lo8, hi8 = gpu_time(big, 10**6)
    assert hi8 == pytest.approx(10**6 * big.block_params / (198_637 * size.block_params))
    assert lo8 == pytest.approx(10**6 * 2 * big.block_params / (0.4 * 989e12))


def test_calibration_is_cached_keyed_and_goes_stale(windows_dataset, monkeypatch):
    key = calibration.calibration_key(
        "tiny-llama", revision=None, device="cpu", dtype="float32", max_tokens=16, batch=32
    )
    cal = calibration.calibrate("tiny-llama", device="cpu", max_tokens=16, batch=32)
    assert cal.key == key and cal.tokens_per_s > 0 and cal.similarity_rate > 0
    assert cal.estimate_fixed_s >= 0 and cal.estimate_s_per_madd >= 0
    assert cal.estimate_seconds(1e9) == cal.estimate_fixed_s + 1e9 * cal.estimate_s_per_madd
    assert calibration.cached(key) == cal
    assert calibration.cached({**key, "max_tokens": 32}) is None
    assert calibration.cached({**key, "threads": key["threads"] + 1}) is None
    later = time.time() + calibration.MAX_AGE_S + 1
    monkeypatch.setattr(calibration.time, "time", lambda: later)
    assert calibration.cached(key) is None


def test_plan_time_is_load_plus_extraction_plus_numbers(windows_dataset):
    spec = window_spec(windows_dataset, 256)
    first = plan_run(spec, "cpu", batch_size=32)
    assert first.time_source.startswith("calibrated now")
    plan = plan_run(spec, "cpu", batch_size=32, calibrate="cached")
    assert plan.time_source.startswith("calibrated:")
    cal = calibration.cached(
        calibration.calibration_key(
            "tiny-llama", revision=None, device="cpu", dtype="float32", max_tokens=16, batch=32
        )
    )
    numbers = numbers_seconds(plan.size, 256, cal, marks=[32, 64, 128, 256], bootstrap=None)
    # by hand: an estimate at each mark (from FIRST_ESTIMATE = 32 passages), 20/18 of one at N
    # (the numbers after extraction)
    by_hand = sum(
        cal.estimate_fixed_s + cal.estimate_s_per_madd * planner.pass_cost(plan.size, k)
        for k in (32, 64, 128, 256)
    )
    by_hand += (
        20
        / 18
        * (cal.estimate_fixed_s + cal.estimate_s_per_madd * planner.pass_cost(plan.size, 256))
    )
    assert numbers == pytest.approx(by_hand)
    assert plan.time_parts == pytest.approx(
        {"load": cal.load_s, "extract": 256 * 16 / cal.tokens_per_s, "numbers": numbers}
    )
    assert plan.seconds == pytest.approx(sum(plan.time_parts.values()))
    assert "256 passages x 16 tokens" in plan.line() and plan.fits


def test_a_model_without_calibration_is_scaled_by_block_parameters(windows_dataset, no_load):
    llama = model_size("tiny-llama")
    fake = calibration.Calibration(
        key=calibration.calibration_key(
            "tiny-llama", revision=None, device="cpu", dtype="float32", max_tokens=16, batch=32
        ),
        tokens_per_s=1000.0,
        load_s=2.0,
        similarity_rate=1e9,
        measured_at=time.time(),
        seconds=1,
        estimate_fixed_s=0.5,
        estimate_s_per_madd=1e-9,
    )
    calibration._store(fake)
    plan = plan_run(
        window_spec(windows_dataset, 256, model="tiny-gpt2"),
        "cpu",
        batch_size=32,
        calibrate="cached",
    )
    gpt2 = model_size("tiny-gpt2")
    assert plan.time_source.startswith("scaled from tiny-llama")
    tokens_per_s = 1000.0 * llama.block_params / gpt2.block_params
    assert plan.time_parts["extract"] == pytest.approx(256 * 16 / tokens_per_s)
    assert plan.time_parts["load"] == pytest.approx(2.0 * gpt2.block_params / llama.block_params)
    assert no_load == []


def test_plan_refuses_what_cannot_fit_before_any_model_loads(no_load, capsys):
    from deffcore.cli.main import main

    argv = ["measure", "--model", "smollm2-135m", "--passages", "windows", "--n", "4096"]
    assert main([*argv, "--plan", "--max-memory", "100MiB"]) == 3
    out = capsys.readouterr().out.strip()
    assert out.startswith("Refused: the extraction step of smollm2-135m at N = 4,096")
    assert "more than the 100.0 MiB allowed (--max-memory)" in out and out.count("\n") == 0
    assert main([*argv, "--plan", "--max-memory", "100MiB", "--json"]) == 3
    d = json.loads(capsys.readouterr().out)["plan"]
    assert not d["fits"] and d["memory_bytes"]["extraction"] > 100 * 2**20
    assert no_load == []
    assert main([*argv, "--plan", "--max-memory", "lots"]) == 2  # a bad size: one sentence
    assert "--max-memory must be a size" in capsys.readouterr().err


def test_plan_that_fits_prints_one_line(no_load, capsys):
    from deffcore.cli.main import main

    argv = ["measure", "--model", "smollm2-135m", "--passages", "windows", "--n", "512"]
    assert main([*argv, "--plan", "--max-memory", "64GiB", "--no-calibrate"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("Plan: smollm2-135m on 512 passages x 128 tokens")
    assert "peak memory" in line and "cache entry" in line and "of 64.0 GiB allowed" in line
    assert no_load == []


def test_the_paper_manifest_plans_offline(no_load, capsys):
    from deffcore.cli.main import main

    manifest = str(ROOT / "manifests" / "paper16.yaml")
    assert main(["sweep", "--manifest", manifest, "--plan", "--no-calibrate", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)["sweep_plan"]
    cells = d["cells"]
    trained = {c["plan"]["model"] for c in cells if "@" not in c["label"]}
    assert len(trained) == 16 and len(cells) > 16  # + the dynamics checkpoints
    assert all(c["plan"]["size"] is not None for c in cells)
    assert all(c["plan"]["n"] == 10_000 and c["plan"]["max_tokens"] == 128 for c in cells)
    assert d["totals"]["gpu_seconds"][0] <= d["totals"]["gpu_seconds"][1]
    llama = next(c for c in cells if c["plan"]["model"] == "meta-llama/Llama-3.1-8B")
    size = planner.model_size("meta-llama/Llama-3.1-8B", None, _sizes())
    assert llama["gpu_seconds"] == pytest.approx(list(gpu_time(size, 10_000 * 128)))
    assert no_load == []
    assert main(["sweep", "--manifest", manifest, "--plan", "--no-calibrate"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("Sweep plan:") and "Total on one NVIDIA H200" in text


def _sizes():
    from deffcore.work.sweep.cost import manifest_extras

    return manifest_extras(ROOT / "manifests" / "paper16.yaml")[1]


def test_manifest_settings_fill_unset_options_only(tmp_path, no_load, capsys):
    from deffcore.cli.main import main

    manifest = tmp_path / "m.yaml"
    manifest.write_text("settings: {n: 64, max_tokens: 32}\ncells: [tiny-llama]\n")
    assert main(["sweep", "--manifest", str(manifest), "--plan", "--no-calibrate", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)["sweep_plan"]["cells"][0]["plan"]
    assert (plan["n"], plan["max_tokens"]) == (64, 32)
    argv = ["sweep", "--manifest", str(manifest), "--plan", "--no-calibrate", "--json"]
    assert main([*argv, "--n", "128"]) == 0
    plan = json.loads(capsys.readouterr().out)["sweep_plan"]["cells"][0]["plan"]
    assert (plan["n"], plan["max_tokens"]) == (128, 32)
    manifest.write_text("settings: {N: 64}\ncells: [tiny-llama]\n")
    assert main(argv) == 2
    assert "'settings'" in capsys.readouterr().err


def test_a_refused_cell_is_named_in_the_sweep_plan_and_not_priced(no_load, tiny_dataset, tmp_path):
    from deffcore.work.sweep.cells import Cell
    from deffcore.work.sweep.cost import planned, sweep_cost

    missing = str(tmp_path / "no_such_passages.txt")
    cells = [Cell("tiny-llama", dataset=tiny_dataset), Cell("tiny-llama", dataset=missing)]
    plan, _ = planned(cells, n=8, max_tokens=16, engine="serial")
    assert plan.specs[1] is None  # the cell fails alone
    cost = sweep_cost(plan, calibrate="cached")
    assert len(cost.cells) == 1
    (note,) = [n for n in cost.notes if n.startswith("Refused, not priced")]
    assert "no_such_passages" in note


def test_the_planner_reads_the_same_host_memory_as_the_fit_check(monkeypatch):
    monkeypatch.setenv("DEFF_HOST_MEMORY_GIB", "3")  # the override models.check_fits honours
    assert planner.available_memory() == 3 * 2**30


def test_only_the_hubs_refusal_is_planned_around(no_load, monkeypatch):
    """Offline, an hf: cell is planned with a stand-in and a note; an hf: cell refused for its
    own fault (a malformed spec) keeps its refusal."""
    from deffcore.work.sweep.cells import Cell
    from deffcore.work.sweep.cost import planned, sweep_cost

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    good, bad = "hf:wikitext:wikitext-103-raw-v1:test", "hf:bad"
    plan, notes = planned([Cell("tiny-llama", dataset=good), Cell("tiny-llama", dataset=bad)],
                          n=8, max_tokens=16, engine="serial")  # fmt: skip
    assert plan.specs[0] is not None and plan.specs[0].dataset == good
    assert plan.specs[1] is None and "must look like" in plan.errors[1]
    assert any("the hub is off" in n and good in n for n in notes)
    cost = sweep_cost(plan, calibrate="cached")
    assert [c.label for c in cost.cells] == [plan.rows[0]["label"]]


def _run_spec(n: int):
    from deffcore.inputs.run_spec import RunSpec

    return RunSpec(
        model="org/unseen", revision=None, dataset="bbc-news", n=n, max_tokens=8, seed=0,
        dtype="float32",
    )  # fmt: skip


def _plan(n: int, **kwargs):
    return plan_run(_run_spec(n), "cpu", known={"org/unseen": SMALL}, calibrate="never", **kwargs)


def test_each_step_is_refused_on_its_own_memory(no_load):
    """Extraction fits, then the similarity step, then the bootstrap is the one too big: each
    refusal names its own step (the planner never refused those two)."""
    from deffcore.runs.planner import bootstrap_bytes

    plan = _plan(1000, bootstrap=2000, max_memory=10**12)
    mem = plan.memory
    assert plan.fits and set(mem) == {"extraction", "similarity", "bootstrap"}
    assert mem["extraction"] < mem["similarity"] < mem["bootstrap"]
    assert mem["bootstrap"] == bootstrap_bytes(SMALL, 1000, 2000)
    between = (mem["similarity"] + mem["bootstrap"]) // 2
    refused = _plan(1000, bootstrap=2000, max_memory=between)
    assert refused.refusal.startswith("the bootstrap step of org/unseen at N = 1,000")
    assert _plan(1000, bootstrap=None, max_memory=between).fits  # no bootstrap, no such step
    low = (mem["extraction"] + mem["similarity"]) // 2
    assert _plan(1000, bootstrap=2000, max_memory=low).refusal.startswith("the similarity step")
    at_edge = _plan(1000, bootstrap=2000, max_memory=mem["bootstrap"])
    assert at_edge.fits  # a step that needs exactly the limit fits
    assert no_load == []


def test_bootstrap_memory_holds_its_replicates():
    """The (B, L, N) float64 terms (twice), the six pooled stacks and a centred copy, at least;
    growing B grows it by at least those terms."""
    L, d = SMALL.layers, SMALL.d_model
    from deffcore.runs.planner import bootstrap_bytes

    for n, B in ((50, 10), (1000, 200), (4000, 2000)):
        floor = pooled_bytes(SMALL, n, poolings=6) + L * n * d * 4 + 2 * B * L * n * 8
        assert bootstrap_bytes(SMALL, n, B) >= floor
        assert bootstrap_bytes(SMALL, n, 2 * B) - bootstrap_bytes(SMALL, n, B) >= 2 * B * L * n * 8


def test_the_disk_check_needs_twice_the_entry_while_it_runs(no_load, monkeypatch):
    entry = planner.entry_bytes(SMALL, 1000)
    for free, fits in ((2 * entry, True), (2 * entry - 1, False), (entry, False)):
        monkeypatch.setattr(planner, "_disk_free", lambda free=free: free)
        plan = _plan(1000, max_memory=10**12)
        assert plan.disk == entry and plan.fits is fits, (free, plan.refusal)
        if not fits:
            assert plan.refusal.startswith("the cache entry of org/unseen at N = 1,000 needs")
    monkeypatch.setattr(planner, "_disk_free", lambda: None)  # unknown free space: no refusal
    assert _plan(1000, max_memory=10**12).fits
