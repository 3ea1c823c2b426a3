"""What a page action will take, said before it starts (deffcore.runs.action_costs), and when the
next live estimate lands (explorer.live.next_look): hand-computed from the prior, the plan's
parts and the schedule."""

from __future__ import annotations

import pytest

from deffcore.inputs.model import model_size
from deffcore.inputs.run_spec import RunSpec
from deffcore.runs import action_costs as ac
from deffcore.runs.stage_times import estimate


@pytest.fixture(autouse=True)
def no_measured_prior(monkeypatch):
    """These tests price by this module's own prior: the packaged models' measured priors
    (`deffcore.runs.priors`, which the planner uses first) are set aside."""
    from deffcore.runs import priors

    monkeypatch.setattr(priors, "_table", dict)


def _spec(**kw) -> RunSpec:
    base = dict(model="smollm2-135m", revision=None, dataset="bbc-news", n=4096, max_tokens=128,
                seed=0, dtype="float32", passages="windows")  # fmt: skip
    return RunSpec(**{**base, **kw})


def test_with_nothing_measured_the_prior_prices_a_forward_pass():
    """No calibration in this fresh cache: SmolLM2's prior rate, plus its load estimate."""
    tokens = 64 * 128
    cost = ac.forward_cost("smollm2-135m", tokens, "cpu")
    load = estimate("loading model", "smollm2-135m")
    assert cost.seconds == pytest.approx(load + tokens / ac.PRIOR_TOKENS_PER_S)
    assert "a prior" in cost.line() and cost.line().startswith("about ")


def test_the_prior_scales_by_block_parameters():
    tokens = 10_000
    small, big = model_size("smollm2-135m"), model_size("gemma3-270m")
    ratio = small.block_params / big.block_params
    load = estimate("loading model", "gemma3-270m")
    cost = ac.forward_cost("gemma3-270m", tokens, "cpu")
    assert cost.seconds == pytest.approx(load + tokens / (ac.PRIOR_TOKENS_PER_S * ratio))


def test_the_diagnostic_pass_is_a_load_and_64_eager_passages():
    plain = ac.forward_cost("smollm2-135m", 64 * 128, "cpu").seconds
    load = estimate("loading model", "smollm2-135m")
    cost = ac.diagnostics_cost(_spec(), "cpu")
    assert cost.seconds == pytest.approx(load + ac.EAGER_FACTOR * (plain - load))
    small = ac.diagnostics_cost(_spec(n=16), "cpu")  # min(N, 64) passages
    assert small.seconds == pytest.approx(load + ac.EAGER_FACTOR * 16 * 128 / 600)


def test_runs_share_one_load_and_cached_runs_cost_nothing(monkeypatch):
    specs = ac.with_variants(_spec(n=256), "bos", ("add", "none"))
    assert [s.bos for s in specs] == ["add", "none"]
    load = estimate("loading model", "smollm2-135m")
    two = ac.runs_cost(specs, "cpu")
    assert two.seconds == pytest.approx(load + 2 * 256 * 128 / ac.PRIOR_TOKENS_PER_S)
    assert two.long
    monkeypatch.setattr(ac, "_cached", lambda spec: spec.bos == "add")
    one = ac.runs_cost(specs, "cpu")
    assert one.seconds == pytest.approx(load + 256 * 128 / ac.PRIOR_TOKENS_PER_S)
    monkeypatch.setattr(ac, "_cached", lambda spec: True)
    done = ac.runs_cost(specs, "cpu")
    assert done.cached and not done.long and done.line() == "seconds: read from the cache"


def test_a_calibration_prices_the_load_and_the_extraction(monkeypatch):
    from types import SimpleNamespace

    from deffcore.runs import planner

    plan = SimpleNamespace(seconds=99.0, time_parts={"load": 7.0, "extract": 30.0, "numbers": 62.0},
                           time_source="calibrated: 1,000 tokens/s")  # fmt: skip
    monkeypatch.setattr(planner, "plan_run", lambda *a, **k: plan)
    cost = ac.diagnostics_cost(_spec(), "cpu")
    assert cost.seconds == pytest.approx(7.0 + ac.EAGER_FACTOR * 30.0)  # no analysis passes
    assert "calibrated" in cost.line()


def test_an_unknown_model_says_so():
    cost = ac.forward_cost("no-such-model-here", 1000, "cpu")
    assert cost.seconds is None and cost.long and cost.line().startswith("time unknown here")


def test_the_live_panel_says_when_the_next_estimate_lands():
    """Cards at the 128-passage estimate while 192 of 512 are in: the next estimate at 256,
    64 passages on at the job's rate (320 left in 32 s: 10 per second)."""
    from apptest_helpers import plain  # noqa: F401  (tests/ on sys.path)

    from deffcore.work import job_state
    from explorer.live import next_look

    spec = RunSpec("tiny-llama", None, "x.txt", 512, 16, 0, "float32", passages="windows")
    status = job_state.JobStatus(
        job_id="j", spec=spec, state="running", stage="extracting", done=192, total=512,
        tokens_per_s=None, tokens_exact=True, eta_s=32.0, elapsed_s=1.0, stage_elapsed_s=1.0,
        error=None, result_key=None, from_cache=False, resumed=0, cancel_requested=False,
        ahead=0,
    )  # fmt: skip
    text = next_look(status, {"n": 128})
    assert "Estimated at N = 128 (192 passages extracted so far)" in text
    assert "next estimate comes at N = 256 in about 6 s" in text
    assert "the last, at N = 512" in text
    assert "last estimate" in next_look(status, {"n": 512})
