"""Shared test fixtures (every test module may use them).

Environment, set once for the whole session before transformers/datasets are imported:
    HF_HUB_OFFLINE=1, HF_DATASETS_OFFLINE=1, TRANSFORMERS_OFFLINE=1: no test ever touches the
    network; a hub id that is not on the machine fails fast.

Fixtures:
    deff_cache_dir     (autouse) a fresh, empty cache folder per test: `DEFF_CACHE_DIR` points at
                       `tmp_path/cache`, so no test reads or writes the repo's cache/.
    loaded_models      (autouse) a fresh, empty process cache of loaded models per test
                       (`deffcore.inputs.model.MODELS`; its `.MODELS.loads` counts loads).
    tiny_model         factory `tiny_model(arch="llama", bos=True) -> LoadedModel`: a tiny
                       from_config model (4 blocks, d=64, seeded weights, CPU float32) with the
                       built-in byte tokenizer; `bos=False` gives the tokenizer that adds no BOS
                       (same weights). Memoised per session: do not change its weights; use
                       `deffcore.inputs.model.load_model("tiny-<arch>")` for a private copy.
    tiny_arch          parametrised over TINY_ARCHS (every tested architecture): a test taking
                       it runs once per architecture.
    tiny_passages      12 short English passages of different lengths (6 to 30 words).
    cache_dir          (module scope) one cache folder for a whole test module (AppTest pages).
    tiny_dataset       a .txt dataset file of `tiny_passages` (blank-line separated); its path
                       is a dataset spec for `measure(dataset=...)`.
    windows_dataset    a .txt dataset with ~1,900 windows of 16 byte tokens (anytime tests).
    every_batch        every extraction batch is checkpointed (`extract._clock` driven).
    cancel_after_first_batch
                       every background job is cancelled once its first extraction batch is
                       done (each batch kept); returns `stop()`, which restores the extraction
                       (a resumed job then runs to the end).
    planted            tiny-llama with near-zero block outputs, returned by every model load.
    shipped_run        (session) the generated stand-in for the shipped default (
                       tests/shipped_helpers.py): {"path": snapshot file, "cache": its cache
                       folder (the runs and diagnostics), "data": the parsed JSON}.

Constants:
    TINY_ARCHS         ("llama", "gemma3", "gpt2", "gptneox", "qwen2", "qwen3", "olmo2")
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

import pytest

TINY_ARCHS: tuple[str, ...] = ("llama", "gemma3", "gpt2", "gptneox", "qwen2", "qwen3", "olmo2")

TINY_PASSAGES: tuple[str, ...] = (
    "The committee met on Tuesday to discuss the budget.",
    "Rain is expected across the north of the country later this week, forecasters said.",
    "Shares in the company rose sharply after it reported record profits for the third "
    "quarter in a row.",
    "A new museum opened its doors to the public.",
    "The striker scored twice in the second half to secure a comfortable win for the "
    "visitors, who now lead the table by four points.",
    "Engineers are testing a faster way to charge electric cars.",
    "The film, which cost less than a million pounds to make, has already earned more than "
    "twenty times its budget at the box office and is tipped for several awards.",
    "Voters will go to the polls next month.",
    "Scientists said the discovery could change how we think about the early universe.",
    "The band announced a farewell tour.",
    "Local councils warned that rising costs would force them to cut services unless the "
    "government provided extra funding before the end of the financial year, a report said.",
    "Train services were delayed by a signal fault near the station this morning.",
)


@pytest.fixture(autouse=True)
def deff_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("DEFF_CACHE_DIR", str(path))
    return path


@pytest.fixture(autouse=True)
def loaded_models():
    """Each test starts with an empty process cache of loaded models (a test that patches the
    loader or a model's weights never leaks into the next); yields
    `deffcore.inputs.model`."""
    import deffcore.inputs.model as held

    held.MODELS = held.ModelCache()
    yield held
    held.MODELS = held.ModelCache()


_TINY_MEMO: dict[tuple[str, bool], object] = {}


@pytest.fixture(scope="session")
def tiny_model():
    from deffcore.inputs.model import load_model

    def factory(arch: str = "llama", bos: bool = True):
        key = (arch, bos)
        if key not in _TINY_MEMO:
            spec = f"tiny-{arch}" if bos else f"tiny-{arch}-nobos"
            _TINY_MEMO[key] = load_model(spec, device="cpu", dtype="float32")
        return _TINY_MEMO[key]

    return factory


@pytest.fixture(params=TINY_ARCHS)
def tiny_arch(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def tiny_passages() -> list[str]:
    return list(TINY_PASSAGES)


@pytest.fixture
def tiny_dataset(tmp_path: Path) -> str:
    path = tmp_path / "tiny_passages.txt"
    path.write_text("\n\n".join(TINY_PASSAGES) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    """One cache folder shared by a whole test module (`DEFF_CACHE_DIR`), for AppTest modules
    whose tests share one app session and so must see the same cache."""
    path = tmp_path_factory.mktemp("module_cache")
    old = os.environ.get("DEFF_CACHE_DIR")
    os.environ["DEFF_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("DEFF_CACHE_DIR", None)
    else:
        os.environ["DEFF_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def shipped_run(tmp_path_factory):
    """The generated stand-in for the shipped default (module docstring), made once."""
    from shipped_helpers import write_shipped

    folder = tmp_path_factory.mktemp("shipped")
    path, cache = folder / "default_run.json", folder / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DEFF_CACHE_DIR", str(cache))
        data = write_shipped(path)
    return {"path": path, "cache": cache, "data": data}


@pytest.fixture
def no_model(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """A model loader that must not be called: the checks run before any model loads."""
    import deffcore.inputs.run_spec
    import deffcore.runs.measure

    calls: list[tuple] = []

    def loader(*args, **kwargs):
        calls.append(args)
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(deffcore.inputs.run_spec, "load_model", loader)
    return calls


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch):
    """Hold every model load of a background job until `gate.set()` (released at teardown
    whatever happens, then the jobs still running are waited for)."""
    import threading

    import deffcore.inputs.run_spec
    import deffcore.runs.measure
    from deffcore.work import jobs

    event = threading.Event()
    real = deffcore.inputs.run_spec.load_model

    def loader(*args, **kwargs):
        assert event.wait(600), "the test never opened the gate"
        return real(*args, **kwargs)

    monkeypatch.setattr(deffcore.inputs.run_spec, "load_model", loader)
    yield event
    event.set()
    for job in jobs.active_jobs():
        jobs.wait(job.job_id, timeout=60)


# Anytime estimates (SPEC 14): a dataset of many token windows, and checkpoints every batch.
_WINDOW_WORDS = (
    "the a of to and in is was for on that with as by at from his her it an be this which or "
    "market team match film game season policy report minister company shares growth court"
)


@pytest.fixture
def windows_dataset(tmp_path: Path) -> str:
    """A .txt dataset of 60 documents of 120 words: ~1,900 windows of 16 byte tokens."""
    import numpy as np

    rng = np.random.default_rng(0)
    words = _WINDOW_WORDS.split()
    text = "\n\n".join(" ".join(rng.choice(words, size=120)) for _ in range(60))
    path = tmp_path / "words.txt"
    path.write_text(text + "\n")
    return str(path)


@pytest.fixture
def every_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each extraction batch is checkpointed (its rows reach the live estimates at once)."""
    from deffcore.extraction import forward

    ticks = iter(range(0, 10**9, 100))
    monkeypatch.setattr(forward, "_clock", lambda: next(ticks))


@pytest.fixture
def cancel_after_first_batch(monkeypatch: pytest.MonkeyPatch):
    """Every background job is cancelled as soon as its first batch is extracted; every batch
    is checkpointed, so the cancelled run leaves a partial entry. Returns `stop()`."""
    import deffcore.extraction.forward
    import deffcore.inputs.run_spec
    import deffcore.runs.measure
    from deffcore.work import jobs

    real = deffcore.runs.measure.extract_run

    def cancelling(*args, progress=None, **kwargs):
        def wrapped(done, total, stage):
            progress(done, total, stage)
            if stage == "extract":
                for job in jobs.active_jobs():
                    jobs.cancel(job.job_id)

        return real(*args, progress=wrapped, **kwargs)

    monkeypatch.setattr(deffcore.extraction.forward, "CHECKPOINT_EVERY_S", 0.0)  # keep every batch
    monkeypatch.setattr(deffcore.runs.measure, "extract_run", cancelling)
    return lambda: monkeypatch.setattr(deffcore.runs.measure, "extract_run", real)


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch):
    """tiny-llama whose blocks write almost nothing (output projections x 0.02): every state
    is h_0 plus a little, so its numbers settle at small N (the model every load returns)."""
    import torch

    import deffcore.inputs.run_spec
    import deffcore.runs.measure
    from deffcore.inputs.model import load_model

    model = load_model("tiny-llama", device="cpu", dtype="float32")
    with torch.no_grad():
        for block in model.model.model.layers:
            block.self_attn.o_proj.weight.mul_(0.02)
            block.mlp.down_proj.weight.mul_(0.02)
    monkeypatch.setattr(deffcore.inputs.run_spec, "load_model", lambda *a, **k: model)
    return model
