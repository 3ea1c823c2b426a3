"""The progress numbers of background runs (deffcore.work.jobs): ETA, tokens per second, and which
finished jobs are kept. Driven with a fake clock and a fake
`measure_spec`, so every number is checked against a hand computation."""

from __future__ import annotations

import types

import pytest

from deffcore.inputs.run_spec import RunSpec
from deffcore.work import job_state, job_worker, jobs

SPEC = RunSpec("tiny-llama", None, "bbc-news", 100, 64, 0, "float32")
WINDOWS = RunSpec("tiny-llama", None, "bbc-news", 100, 64, 0, "float32", passages="windows")


class Clock:
    """A stand-in for the `time` module jobs reads: monotonic() is what the test sets."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    fake = Clock()
    for module in (jobs, job_state, job_worker):  # every module of the registry reads the clock
        monkeypatch.setattr(module, "time", fake)
    return fake


@pytest.fixture
def registry(monkeypatch) -> dict:
    """An empty job registry for the test (the real one may hold other tests' jobs)."""
    fresh: dict = {}
    monkeypatch.setattr(job_state, "JOBS", fresh)
    return fresh


def _job(spec: RunSpec = SPEC, **fields) -> job_state.Job:
    job = job_state.Job(job_id=fields.pop("job_id", "j"), spec=spec, metric="cka", device="cpu",
                    batch_size=None, names={}, seq=fields.pop("seq", 0))  # fmt: skip
    for name, value in fields.items():
        setattr(job, name, value)
    return job


def test_eta_is_the_remaining_passages_over_the_rate(clock, registry):
    job = _job(state="running", started=clock.now)
    progress = job_worker._progress(job)
    progress(0, 100, "loading tiny-llama")
    clock.now += 30.0  # a slow model load: not part of the rate
    progress(10, 100, "extract")
    clock.now += 10.0
    progress(30, 100, "extract")  # 20 passages in 10 s: 2 passages/s
    status = job_state.status_of(job)
    assert status.stage == "extracting" and (status.done, status.total) == (30, 100)
    assert status.eta_s == pytest.approx((100 - 30) / 2.0)  # not 100 / 2, not 30 / 2
    assert "ETA 35 s" in status.describe()
    # one batch seen: no rate yet, so no ETA and no tokens/s
    fresh = _job(state="running", started=clock.now)
    job_worker._progress(fresh)(10, 100, "extract")
    assert (
        job_state.status_of(fresh).eta_s is None and job_state.status_of(fresh).tokens_per_s is None
    )


@pytest.mark.parametrize(("spec", "exact"), [(SPEC, False), (WINDOWS, True)])
def test_tokens_per_second_while_running_is_the_rate_times_max_tokens(clock, registry, spec, exact):
    job = _job(spec, state="running", started=clock.now)
    progress = job_worker._progress(job)
    progress(0, 100, "extract")
    clock.now += 4.0
    progress(8, 100, "extract")  # 2 passages/s
    status = job_state.status_of(job)
    assert status.tokens_per_s == pytest.approx(2.0 * 64)  # the tokens factor is in it
    assert status.tokens_exact is exact  # documents may be shorter: an upper bound
    assert ("≤ 128 tokens/s" in status.describe()) is not exact


def test_tokens_per_second_of_a_finished_run_uses_its_exact_token_count(
    clock, registry, monkeypatch
):
    import deffcore.runs.measure

    def fake_measure_spec(spec, *, metric, device, batch_size, progress, should_stop, **_):
        progress(0, 100, "extract")
        clock.now += 10.0
        progress(50, 100, "extract")  # 5 passages/s
        clock.now += 10.0
        progress(100, 100, "extract")
        pooled = types.SimpleNamespace(tokens=4_000, meta={})  # 40 tokens per passage on average
        return types.SimpleNamespace(spec=spec, cached=False, n=100, pooled=pooled,
                                     resumed_passages=0)  # fmt: skip

    monkeypatch.setattr(deffcore.runs.measure, "measure_spec", fake_measure_spec)
    job = _job(state="running", started=clock.now)
    registry[job.job_id] = job
    job_worker._run(job)
    status = job_state.status_of(job)
    assert status.state == "done" and status.done == 100, status.error
    assert status.tokens_per_s == pytest.approx(40.0 * 5.0)  # exact mean tokens x the rate
    assert status.tokens_exact and status.eta_s is None
    assert "200 tokens/s" in status.describe()


def test_finished_jobs_are_kept_up_to_the_limit_newest_first(registry, monkeypatch):
    monkeypatch.setattr(job_state, "KEEP_FINISHED", 3)
    states = ["done", "failed", "cancelled", "done", "running", "done", "queued", "done"]
    for seq, state in enumerate(states):
        registry[f"j{seq}"] = _job(job_id=f"j{seq}", seq=seq, state=state)
    job_state.forget_old()
    # the 3 newest finished jobs stay, and every queued or running job (never forgotten)
    assert sorted(registry) == ["j3", "j4", "j5", "j6", "j7"]
    assert jobs.status("j7") is not None and jobs.status("j0") is None
    monkeypatch.setattr(job_state, "KEEP_FINISHED", 200)
    job_state.forget_old()
    assert len(registry) == 5  # under the limit nothing more goes
