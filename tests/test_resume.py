"""Resumable runs: finished batches survive an exception, a cancellation or a
SIGKILL, a rerun continues from the last finished batch and ends bit-identical to an
uninterrupted run; a partial never loads as complete; `use_cache=False` / `--no-cache` neither
reads nor writes the cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from deffcore.cli.main import main
from deffcore.core.constants import EXTRACTED_POOLINGS
from deffcore.core.errors import RunCancelled
from deffcore.extraction import cache
from deffcore.extraction import cache as entries
from deffcore.extraction import forward as extract
from deffcore.runs.measure import measure

REPO = Path(__file__).resolve().parent.parent
BS = 2  # 12 tiny passages -> 6 batches
REAL_FORWARD = extract._forward


@pytest.fixture(autouse=True)
def save_every_batch(monkeypatch):
    """Hand every finished batch to the checkpoint (the default groups ~10 s of batches)."""
    monkeypatch.setattr(extract, "CHECKPOINT_EVERY_S", 0.0)


def _kw(dataset: str, **extra) -> dict:
    return {"model": "tiny-llama", "dataset": dataset, "n": 12, "max_tokens": 32,
            "batch_size": BS, **extra}  # fmt: skip


def _fail_at(monkeypatch, k: int, exc: BaseException | None = None, oom_at: int | None = None):
    """Make forward call number k (1-based) raise; `oom_at`: call that raises an OOM first."""
    real, calls = extract._forward, [0]

    def forward(base, ids, mask, pos):
        calls[0] += 1
        if calls[0] == oom_at:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        if calls[0] == k:
            raise exc or RuntimeError(f"injected failure at forward {k}")
        real(base, ids, mask, pos)

    monkeypatch.setattr(extract, "_forward", forward)
    return calls


def assert_bit_identical(a, b) -> None:
    for p in EXTRACTED_POOLINGS:
        assert np.array_equal(a.pooled.pooled[p], b.pooled.pooled[p]), p
    assert np.array_equal(a.pooled.pos0_norm_ratio, b.pooled.pos0_norm_ratio)
    assert np.array_equal(a.pooled.lengths, b.pooled.lengths)
    assert a.summary().deff == b.summary().deff


@pytest.mark.parametrize("k", [1, 4])
def test_resume_after_injected_failure_is_bit_identical(tiny_dataset, monkeypatch, k):
    reference = measure(**_kw(tiny_dataset), use_cache=False)
    _fail_at(monkeypatch, k)
    with pytest.raises(RuntimeError, match="injected"):
        measure(**_kw(tiny_dataset))
    monkeypatch.setattr(extract, "_forward", REAL_FORWARD)  # (undo() would drop the env)
    spec_key = reference.spec.key()
    assert cache.load(reference.spec) is None  # a partial never loads as complete
    (run,) = entries.list_runs()
    assert run["key"] == spec_key and run["status"] == "partial" and not run["running"]
    assert (run["done_passages"], run["total_passages"]) == ((k - 1) * BS, 12)
    events = []
    resumed = measure(**_kw(tiny_dataset), progress=lambda d, t, s: events.append((d, t, s)))
    assert resumed.resumed_passages == (k - 1) * BS and not resumed.cached
    assert resumed.to_dict()["resumed_passages"] == (k - 1) * BS
    assert ("resume" in [s for _, _, s in events]) == (k > 1)
    if k > 1:  # after the load's stages ("loading ...", its parts, "loaded ...")
        at = [s for _, _, s in events].index("resume")
        assert events[at] == ((k - 1) * BS, 12, "resume")
        assert events[at + 1] == ((k - 1) * BS + BS, 12, "extract")
    assert_bit_identical(resumed, reference)
    # the complete entry replaced the partial; a third call reads it and resumes nothing
    # the depth-use atlas is kept when every passage ran in this extraction (SPEC 16): not
    # for a resumed run, whose first passages ran before (`dc.atlas` computes it on request)
    atlas = ["atlas.npz"] if k == 1 else []
    assert sorted(p.name for p in (cache.cache_dir() / spec_key).iterdir()) == [
        *atlas,
        "meta.json",
        "states.npz",
    ]
    again = measure(**_kw(tiny_dataset))
    assert again.cached and again.resumed_passages == 0
    assert [r["status"] for r in entries.list_runs()] == ["complete"]


def test_resume_keeps_the_oom_halved_batches(tiny_dataset, monkeypatch):
    """An OOM halving persists its batch cap, so the resumed run makes the same batches as an
    uninterrupted run that met the same OOM (and both equal the run without any OOM)."""
    kw = _kw(tiny_dataset, batch_size=4)
    plain = measure(**kw, use_cache=False)
    _fail_at(monkeypatch, k=0, oom_at=2)  # batch 2 (4 passages) -> OOM -> cap 2
    with_oom = measure(**kw, use_cache=False)
    assert with_oom.pooled.meta["oom_halvings"] == 1
    monkeypatch.setattr(extract, "_forward", REAL_FORWARD)  # (undo() would drop the env)
    _fail_at(monkeypatch, k=5, oom_at=2)  # forwards: 4 ok, OOM, 2 ok, 2 ok, fail
    with pytest.raises(RuntimeError, match="injected"):
        measure(**kw)
    monkeypatch.setattr(extract, "_forward", REAL_FORWARD)  # (undo() would drop the env)
    sizes = []
    real = extract._forward
    monkeypatch.setattr(
        extract, "_forward", lambda b, i, m, p: (sizes.append(i.shape[0]), real(b, i, m, p))
    )
    resumed = measure(**kw)
    assert resumed.resumed_passages == 8 and sizes == [2, 2]  # the halved cap was kept
    assert_bit_identical(resumed, with_oom)
    assert_bit_identical(resumed, plain)  # per-passage rows: batch sizes do not matter here


def test_cancel_between_batches_then_resume(tiny_dataset):
    reference = measure(**_kw(tiny_dataset), use_cache=False)
    asked = [0]

    def should_stop() -> bool:
        asked[0] += 1
        return asked[0] > 4  # 1 before loading, then one per batch: stop after 3 batches

    with pytest.raises(RunCancelled, match="stopped after 6 of 12 passages; rerun it"):
        measure(**_kw(tiny_dataset), should_stop=should_stop)
    assert cache.load(reference.spec) is None
    (run,) = entries.list_runs()
    assert run["status"] == "partial" and run["done_passages"] == 6
    with pytest.raises(cache.UnknownRunError, match="interrupted"):
        cache.load_meta(run["key"])
    resumed = measure(**_kw(tiny_dataset), should_stop=lambda: False)
    assert resumed.resumed_passages == 6
    assert_bit_identical(resumed, reference)


def test_cancel_without_cache_keeps_nothing(tiny_dataset, deff_cache_dir):
    with pytest.raises(RunCancelled, match="stopped before it started"):
        measure(**_kw(tiny_dataset), use_cache=False, should_stop=lambda: True)
    assert not deff_cache_dir.exists() or not any(deff_cache_dir.iterdir())


def test_damaged_batch_file_ends_the_resumed_prefix(tiny_dataset, monkeypatch):
    reference = measure(**_kw(tiny_dataset), use_cache=False)
    _fail_at(monkeypatch, 5)  # 4 batches finished
    with pytest.raises(RuntimeError):
        measure(**_kw(tiny_dataset))
    monkeypatch.setattr(extract, "_forward", REAL_FORWARD)  # (undo() would drop the env)
    partial = cache.cache_dir() / reference.spec.key() / "partial"
    batches = sorted(partial.glob("batch-*.npz"))
    assert len(batches) == 4
    batches[2].write_bytes(batches[2].read_bytes()[:50])  # torn by a disk fault
    (partial / ".batch-000004-000002.npz.x.tmp").write_bytes(b"half")  # a killed write
    resumed = measure(**_kw(tiny_dataset))
    assert resumed.resumed_passages == 2 * BS
    assert_bit_identical(resumed, reference)


def test_other_settings_discard_the_partial(tiny_dataset, monkeypatch):
    reference = measure(**_kw(tiny_dataset, batch_size=3), use_cache=False)
    _fail_at(monkeypatch, 3)
    with pytest.raises(RuntimeError):
        measure(**_kw(tiny_dataset))
    monkeypatch.setattr(extract, "_forward", REAL_FORWARD)  # (undo() would drop the env)
    with pytest.warns(UserWarning, match="other settings"):
        again = measure(**_kw(tiny_dataset, batch_size=3))
    assert again.resumed_passages == 0
    assert_bit_identical(again, reference)


def test_no_cache_neither_reads_nor_writes(tiny_dataset, deff_cache_dir):
    reference = measure(**_kw(tiny_dataset), use_cache=False)
    assert not deff_cache_dir.exists() or not any(deff_cache_dir.iterdir())
    # a planted corrupt entry for the same key: --no-cache must not read (nor repair) it
    entry = deff_cache_dir / reference.spec.key()
    entry.mkdir(parents=True)
    (entry / "meta.json").write_text("[]")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # reading the corrupt entry would warn
        again = measure(**_kw(tiny_dataset), use_cache=False)
    assert not again.cached and again.resumed_passages == 0
    assert_bit_identical(again, reference)
    assert sorted(p.name for p in deff_cache_dir.rglob("*")) == [entry.name, "meta.json"]
    assert (entry / "meta.json").read_text() == "[]"


def test_cli_no_cache(tiny_dataset, deff_cache_dir, capsys):
    args = ["measure", "--model", "tiny-llama", "--dataset", tiny_dataset, "--n", "12",
            "--max-tokens", "32", "--json", "--no-progress"]  # fmt: skip
    assert main([*args, "--no-cache"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["cached"] is False and d["resumed_passages"] == 0
    assert not deff_cache_dir.exists() or not any(deff_cache_dir.iterdir())
    assert main(args) == 0  # with the cache: written
    stored = json.loads(capsys.readouterr().out)
    assert (deff_cache_dir / stored["key"] / "meta.json").is_file()
    assert stored["results"] == d["results"]


KILLER = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, {repo!r})
    from deffcore.extraction import forward as extract
    from deffcore.runs.measure import measure

    real, calls = extract._forward, [0]

    def forward(base, ids, mask, pos):
        calls[0] += 1
        if calls[0] == {k}:  # killed mid-extraction, in the middle of a batch
            os.kill(os.getpid(), signal.SIGKILL)
        real(base, ids, mask, pos)

    extract._forward = forward
    extract.CHECKPOINT_EVERY_S = 0.0
    measure(model="tiny-llama", dataset={dataset!r}, n=12, max_tokens=32, batch_size={bs})
    print("not killed")
    """
)


def test_resume_after_sigkill(tiny_dataset, deff_cache_dir, tmp_path):
    script = tmp_path / "killer.py"
    script.write_text(KILLER.format(repo=str(REPO), k=4, dataset=tiny_dataset, bs=BS))
    env = {**os.environ, "DEFF_CACHE_DIR": str(deff_cache_dir)}
    res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True,
                         text=True, timeout=300)  # fmt: skip
    assert res.returncode == -9, (res.returncode, res.stdout, res.stderr[-2000:])
    (run,) = entries.list_runs()
    assert run["status"] == "partial" and run["done_passages"] == 3 * BS
    assert not run["running"]  # the kill released the lock
    reference = measure(**_kw(tiny_dataset), use_cache=False)
    resumed = measure(**_kw(tiny_dataset))
    assert resumed.resumed_passages == 3 * BS
    assert_bit_identical(resumed, reference)
    assert not (deff_cache_dir / f"{run['key']}.lock").exists()  # no stale lock left


def test_batches_are_saved_in_chunks_by_time(tiny_dataset, monkeypatch):
    """With the interval, one saved file holds every batch finished since the last save; a
    resume continues from the end of the last chunk, bit-identical."""
    reference = measure(**_kw(tiny_dataset), use_cache=False)
    ticks = iter(range(1000))
    monkeypatch.setattr(extract, "_clock", lambda: float(next(ticks)))  # +1 s per reading
    monkeypatch.setattr(extract, "CHECKPOINT_EVERY_S", 2.0)
    _fail_at(monkeypatch, 6)  # 5 batches finish; chunks saved after batches 2 and 4
    with pytest.raises(RuntimeError):
        measure(**_kw(tiny_dataset))
    monkeypatch.setattr(extract, "_forward", REAL_FORWARD)
    partial = cache.cache_dir() / reference.spec.key() / "partial"
    names = sorted(p.name for p in partial.glob("batch-*.npz"))
    assert names == ["batch-000000-000004.npz", "batch-000001-000004.npz"]
    resumed = measure(**_kw(tiny_dataset))
    assert resumed.resumed_passages == 8
    assert_bit_identical(resumed, reference)
    monkeypatch.setattr(extract, "CHECKPOINT_EVERY_S", float("inf"))  # never: nothing kept
    _fail_at(monkeypatch, 4)
    with pytest.raises(RuntimeError):
        measure(**_kw(tiny_dataset, seed=1))
    (run,) = [r for r in entries.list_runs() if r["status"] == "partial"]
    assert run["done_passages"] == 0
