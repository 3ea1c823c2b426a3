"""Models load once per process (deffcore.inputs.model): every page action reuses a loaded
model, the cache stays within its budget by evicting the least recently used idle model, a
model in use is lent to one thread at a time, and a load reports its parts."""

from __future__ import annotations

import threading
import time
from dataclasses import replace

import pytest

from deffcore.inputs import model as loaded_models
from deffcore.inputs.model import load_model
from deffcore.inputs.run_spec import RunSpec
from deffcore.labs.interventions import intervention_table
from deffcore.lenses.bos_on_off import bos_on_off
from deffcore.lenses.diagnostics_store import diagnose
from deffcore.runs import stage_times
from deffcore.runs.measure import measure
from deffcore.work import jobs

RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 12, "max_tokens": 24, "seed": 0}


def _spec(**overrides) -> RunSpec:
    run = {**RUN, **overrides}
    return RunSpec(
        model=run["model"], revision=None, dataset=run["dataset"], n=run["n"],
        max_tokens=run["max_tokens"], seed=run["seed"], dtype="float32",
        passages=run.get("passages", "documents"), bos=run.get("bos", "default"),
    )  # fmt: skip


@pytest.fixture
def counted(monkeypatch):
    """Every call of the model loader, by spec (the cache's own count is checked beside it)."""
    import deffcore.inputs.model
    import deffcore.inputs.run_spec
    import deffcore.runs.measure

    calls: list[str] = []
    real = deffcore.inputs.model.load_model

    def loader(spec, **kwargs):
        calls.append(spec)
        return real(spec, **kwargs)

    monkeypatch.setattr(deffcore.inputs.model, "load_model", loader)
    monkeypatch.setattr(deffcore.inputs.run_spec, "load_model", loader)
    return calls


def test_a_run_its_diagnostics_bos_on_off_and_a_lab_share_one_load(counted):
    """What the pages start (a background run, then its diagnostics and the BOS on/off check
    as background tasks, then the interventions lab) loads tiny-gemma3 once."""
    spec = _spec(model="tiny-gemma3")
    st = jobs.wait(jobs.start(spec), timeout=600)
    assert st.state == "done", st.error
    diag = jobs.start_task("diagnostics", lambda p, s: diagnose(spec, progress=p)["n_passages"])
    assert jobs.wait(diag, timeout=600).state == "done"
    onoff = jobs.start_task("onoff", lambda p, s: bos_on_off(spec, progress=p, should_stop=s))
    assert jobs.wait(onoff, timeout=600).state == "done", jobs.status(onoff).error
    intervention_table("tiny-gemma3", "bbc-news", n=12, max_tokens=24)
    measure(**{**RUN, "model": "tiny-gemma3"}, random_seeds=())  # the baselines page: a hit
    assert counted == ["tiny-gemma3"]
    assert loaded_models.MODELS.loads == 1 and loaded_models.MODELS.hits >= 4


def test_the_second_job_on_a_loaded_model_skips_the_load_stage():
    first = jobs.wait(jobs.start(_spec()), timeout=600)
    assert first.state == "done"
    job_id = jobs.start(_spec(seed=1))
    stages = set()
    while (st := jobs.status(job_id)) and not st.finished:
        stages.add(st.stage)
    assert jobs.wait(job_id, timeout=600).state == "done"
    assert "loading model" not in stages
    assert loaded_models.MODELS.loads == 1


def _budget_cache(budget_bytes: int) -> loaded_models.ModelCache:
    return loaded_models.ModelCache(budget=lambda device: budget_bytes)


def test_lru_eviction_keeps_the_cache_within_its_budget(counted):
    one = loaded_models.model_bytes(load_model("tiny-llama").model)
    counted.clear()
    cache = _budget_cache(int(2.5 * one))  # room for two tiny models, not three
    for spec in ("tiny-llama", "tiny-qwen2", "tiny-llama", "tiny-olmo2", "tiny-llama"):
        with cache.lease(spec, device="cpu", dtype="float32") as lm:
            assert lm.spec == spec
    # llama was used last before olmo2 came: qwen2 (least recently used) made room for it
    assert counted == ["tiny-llama", "tiny-qwen2", "tiny-olmo2"]
    held = [h["model"] for h in cache.held()]
    assert (
        held == ["tiny-olmo2", "tiny-llama"] and sum(h["bytes"] for h in cache.held()) <= 2.5 * one
    )


def test_a_model_in_use_is_never_evicted(counted):
    cache = _budget_cache(1)  # nothing fits: every idle model goes before a load
    with cache.lease("tiny-llama", device="cpu", dtype="float32") as first:
        with cache.lease("tiny-qwen2", device="cpu", dtype="float32"):
            assert {h["model"] for h in cache.held()} == {"tiny-llama", "tiny-qwen2"}
        with cache.lease("tiny-llama", device="cpu", dtype="float32") as again:
            assert again is first  # the same thread may lease it again inside
    with cache.lease("tiny-olmo2", device="cpu", dtype="float32"):
        assert [h["model"] for h in cache.held()] == ["tiny-olmo2"]


def test_keys_hold_device_dtype_and_weights(counted, tmp_path):
    cache = loaded_models.ModelCache()
    for dtype in ("float32", "bfloat16", "float32"):
        with cache.lease("tiny-llama", device="cpu", dtype=dtype) as lm:
            assert lm.dtype == dtype
    with cache.lease("random:tiny-llama:3", device="cpu", dtype="float32"):
        pass
    assert counted == ["tiny-llama", "tiny-llama", "random:tiny-llama:3"]


def test_one_thread_at_a_time_and_one_load_for_two_waiting_threads(counted):
    cache = loaded_models.ModelCache()
    inside, order = threading.Event(), []

    def user(name: str, hold: float) -> None:
        with cache.lease("tiny-llama", device="cpu", dtype="float32"):
            order.append(f"{name} in")
            inside.set()
            time.sleep(hold)
            order.append(f"{name} out")

    a = threading.Thread(target=user, args=("a", 0.5))
    a.start()
    inside.wait(30)
    b = threading.Thread(target=user, args=("b", 0.0))
    b.start()
    a.join(60)
    b.join(60)
    assert order == ["a in", "a out", "b in", "b out"]
    assert counted == ["tiny-llama"]


def test_a_failed_load_is_not_kept(monkeypatch):
    cache = loaded_models.ModelCache()
    with pytest.raises(Exception, match="tiny model"), cache.lease("tiny-nope", device="cpu"):
        pass
    assert cache.held() == [] and cache.loads == 0


def test_a_load_reports_its_parts_in_order():
    seen = []
    with loaded_models.ModelCache().lease(
        "tiny-llama", device="cpu", progress=lambda d, t, stage: seen.append(stage), total=5
    ):
        pass
    assert seen == [
        "loading tiny-llama",
        "loading tiny-llama: reading",
        "loading tiny-llama: building",
        "loading tiny-llama: moving",
        "loaded tiny-llama",
    ]


def test_a_job_times_each_load_part_and_the_next_plan_has_a_time():
    """After one finished run: the load's parts and total are this machine's estimates, the
    job showed which part was going on, and the plan of the next run is priced from it."""
    from deffcore.runs.planner import plan_run

    spec = _spec(model="tiny-qwen3")
    before = plan_run(spec, "cpu", calibrate="cached")
    assert before.seconds is None
    job_id = jobs.start(spec)
    parts = set()
    while (st := jobs.status(job_id)) and not st.finished:
        if st.stage == "loading model" and st.load_part:
            parts.add(st.load_part)
            assert st.load_part in st.describe()
            assert all(f"{p} {s:.0f} s" in st.describe() for p, s in st.load_parts)
    assert jobs.wait(job_id, timeout=600).state == "done"
    assert parts <= {"reading", "building", "moving"}
    for part in ("reading", "building", "moving"):
        assert stage_times.estimate(f"loading model: {part}", "tiny-qwen3") is not None
    total = stage_times.estimate("loading model", "tiny-qwen3")
    part_sum = sum(
        stage_times.estimate(f"loading model: {p}", "tiny-qwen3")
        for p in ("reading", "building", "moving")
    )
    assert total is not None and part_sum <= total + 0.05
    after = plan_run(replace(spec, n=24), "cpu", calibrate="cached")
    assert after.seconds is not None and "this machine's run of tiny-qwen3" in after.time_source
    assert after.time_parts["load"] == total


# ---------------------------------------------------------------------------------------------
# The key and the budget on plain loads (a stand-in loader: no model is built, so these run in
# milliseconds). Devices are plain names here: a GPU's key is checked without a GPU.


class _Loaded:
    """What a loader returns, as far as the cache reads it: a `.model` whose bytes it counts."""

    def __init__(self, spec: str, device: str, dtype: str, number: int) -> None:
        import torch

        self.model = torch.nn.Linear(2, 2)  # 24 bytes of float32 weights and bias
        self.spec, self.device, self.dtype, self.number = spec, device, dtype, number


@pytest.fixture
def plain(monkeypatch):
    """(a loader counting its loads, the bytes of one load); devices taken as named."""
    import deffcore.inputs.model

    monkeypatch.setattr(deffcore.inputs.model, "resolve_device_dtype", lambda d, t: (d, t))
    loads: list[tuple[str, str, str]] = []

    def loader(spec, *, revision, device, dtype):
        loads.append((spec, device, dtype))
        return _Loaded(spec, device, dtype, len(loads))

    loader.loads = loads
    return loader


def _weights_folder(path, content: bytes):
    path.mkdir(exist_ok=True)
    (path / "model.safetensors").write_bytes(content)
    return str(path)


def test_a_changed_weights_file_is_loaded_again_and_its_stale_model_goes(
    plain, tmp_path, monkeypatch
):
    """The key holds the weights' identity (a folder's file sizes and mtimes): after the file
    changed, a lease loads the new weights instead of serving the stale model, and the stale
    entry of the same spec, device and dtype is dropped (not evicted for room: both fit)."""
    monkeypatch.setattr(loaded_models, "expected_bytes", lambda spec, dtype: 24)
    cache = loaded_models.ModelCache(budget=lambda device: None)
    spec = _weights_folder(tmp_path / "m", b"old weights")
    with cache.lease(spec, device="cpu", dtype="float32", loader=plain) as first:
        pass
    _weights_folder(tmp_path / "m", b"the new, longer weights")
    with cache.lease(spec, device="cpu", dtype="float32", loader=plain) as second:
        assert second is not first and second.number == 2
    assert len(plain.loads) == 2 and cache.loads == 2
    assert len(cache.held()) == 1  # the stale model is not kept beside the new one


def test_one_spec_on_two_devices_is_two_models_and_neither_pushes_out_the_other(plain):
    """The key holds the device: a model leased on a GPU is not the CPU's (each is loaded on
    its own device), and leasing one never drops the other."""
    cache = loaded_models.ModelCache(budget=lambda device: None)
    for device in ("cpu", "cuda:1", "cpu", "cuda:1"):
        with cache.lease("some/model", device=device, dtype="float32", loader=plain) as lm:
            assert lm.device == device
    assert plain.loads == [("some/model", "cpu", "float32"), ("some/model", "cuda:1", "float32")]
    assert sorted(h["device"] for h in cache.held()) == ["cpu", "cuda:1"]
    assert cache.hits == 2


def test_a_model_that_fits_the_budget_exactly_evicts_nothing(plain, monkeypatch):
    """Room is `used + need <= budget`: two 24-byte models fit a 48-byte budget."""
    monkeypatch.setattr(loaded_models, "expected_bytes", lambda spec, dtype: 24)
    cache = _budget_cache(48)
    for spec in ("a/model", "b/model"):
        with cache.lease(spec, device="cpu", dtype="float32", loader=plain):
            pass
    assert [h["model"] for h in cache.held()] == ["a/model", "b/model"]
    with cache.lease("c/model", device="cpu", dtype="float32", loader=plain):
        pass  # 72 > 48: the least recently used goes
    assert [h["model"] for h in cache.held()] == ["b/model", "c/model"]


def test_a_budget_is_per_device(plain, monkeypatch):
    """A load on one device never evicts a model held on another: each device's budget counts
    only its own models."""
    monkeypatch.setattr(loaded_models, "expected_bytes", lambda spec, dtype: 24)
    cache = _budget_cache(24)
    with cache.lease("a/model", device="cpu", dtype="float32", loader=plain):
        pass
    with cache.lease("b/model", device="cuda:0", dtype="float32", loader=plain):
        pass
    assert {(h["model"], h["device"]) for h in cache.held()} == {
        ("a/model", "cpu"),
        ("b/model", "cuda:0"),
    }
