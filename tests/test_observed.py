"""What finished runs took (deffcore.runs.observed) prices the next plan: the same model at its
rate, another model scaled by block parameters; a damaged file is ignored."""

from __future__ import annotations

import pytest

from deffcore.core.files import cache_dir
from deffcore.inputs.run_spec import RunSpec
from deffcore.runs import observed
from deffcore.runs.planner import plan_run


def _spec(model: str, n: int = 64) -> RunSpec:
    return RunSpec(model=model, revision=None, dataset="bbc-news", n=n, max_tokens=32, seed=0,
                   dtype="float32")  # fmt: skip


def test_the_same_model_is_priced_at_its_observed_rate():
    observed.record_run(_spec("tiny-llama", n=32), "cpu", tokens_per_s=1000.0, numbers_s=4.0)
    plan = plan_run(_spec("tiny-llama", n=64), "cpu", calibrate="cached")
    assert plan.time_parts["extract"] == pytest.approx(64 * 32 / 1000.0)
    assert plan.time_parts["numbers"] == pytest.approx(8.0)  # 4 s at N=32, scaled to N=64
    assert "this machine's run of tiny-llama" in plan.time_source


def test_another_model_is_scaled_by_block_parameters():
    from deffcore.inputs.model import model_size

    observed.record_run(_spec("tiny-llama"), "cpu", tokens_per_s=1000.0, numbers_s=1.0)
    plan = plan_run(_spec("tiny-gpt2"), "cpu", calibrate="cached")
    factor = model_size("tiny-llama").block_params / model_size("tiny-gpt2").block_params
    assert plan.time_parts["extract"] == pytest.approx(64 * 32 / (1000.0 * factor))
    assert "scaled by block parameters" in plan.time_source
    assert plan_run(_spec("tiny-gpt2"), "cuda:0", calibrate="cached").seconds is None


def test_a_damaged_or_foreign_file_is_ignored():
    path = cache_dir() / observed.OBSERVED_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"tiny-llama|cpu|float32": {"model": "rm -rf /"}}')
    assert observed.latest("tiny-llama", "cpu", "float32") is None
    path.write_text("not json")
    assert observed.on_device("cpu", "float32") == []
    observed.record_run(_spec("tiny-llama"), "cpu", tokens_per_s=float("nan"), numbers_s=1.0)
    assert observed.latest("tiny-llama", "cpu", "float32") is None
