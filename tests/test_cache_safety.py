"""The cache never writes or deletes through a link or into anything not provably its own, and
every OS error of the cache is one sentence.

`deffcore.core.files` is the one mechanism (lstat checks, O_EXCL temp files, renames); these
tests attack it through the public paths a user takes: `measure`, `store`/`load`, the partial
runs of a resumable extraction, `list_runs`, `cleanup_stale`, `delete` and the CLI.
"""

from __future__ import annotations

import errno
import hashlib
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
from test_cache import SPEC, make_pooled  # one stand-in run for the cache tests

from deffcore.cli.main import main
from deffcore.core import files
from deffcore.core.errors import (
    CacheWriteError,
    DeffError,
    ForeignCacheEntryError,
    NonFiniteActivationsError,
)
from deffcore.extraction import cache
from deffcore.extraction import cache as entries
from deffcore.extraction import cache as partial
from deffcore.inputs.run_spec import RunSpec


def _digest(folder: Path) -> dict[str, str]:
    """Every file under `folder` (links not followed) -> sha256 of its bytes."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            out[str(path.relative_to(folder))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


@pytest.fixture
def users_folder(tmp_path) -> Path:
    """A user's folder holding files named like a run entry's."""
    folder = tmp_path / "my-project"
    (folder / "partial").mkdir(parents=True)
    (folder / "partial" / "notes.txt").write_text("my notes")
    (folder / "meta.json").write_text('{"mine": true}')
    (folder / "states.npz").write_bytes(b"my own npz")
    return folder


def _run_args(dataset: str) -> dict:
    return {"model": "tiny-llama", "dataset": dataset, "n": 8, "max_tokens": 16, "seed": 0}


def _spec(dataset: str) -> RunSpec:
    from deffcore.runs.measure import run_spec

    args = _run_args(dataset)
    return run_spec(args["model"], dataset, args["n"], args["max_tokens"], 0, "cka")[0]


def _cli(dataset: str) -> list[str]:
    return ["measure", "--model", "tiny-llama", "--dataset", dataset, "--n", "8",
            "--max-tokens", "16", "--no-progress"]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# a link named like a run's key


def test_measure_never_writes_through_a_key_named_link(
    tiny_dataset, users_folder, deff_cache_dir, capsys
):
    from deffcore.runs.measure import measure

    spec = _spec(tiny_dataset)
    before = _digest(users_folder)
    link = deff_cache_dir / spec.key()
    link.symlink_to(users_folder, target_is_directory=True)
    with pytest.raises(ForeignCacheEntryError, match="symbolic link") as err:
        measure(**_run_args(tiny_dataset))
    assert "\n" not in str(err.value)
    assert main(_cli(tiny_dataset)) == 2
    out = capsys.readouterr().err.strip().splitlines()
    assert len(out) == 1 and out[0].startswith("error: ") and "symbolic link" in out[0]
    # nothing was read as a run, written, or deleted: the user's files are all there, unchanged
    with pytest.warns(UserWarning, match="symbolic link"):
        assert cache.load(spec) is None
    for call in (entries.list_runs, entries.cleanup_stale):
        call()
    with pytest.raises(DeffError):
        entries.delete(spec.key())
    partial.PartialRun(spec).discard()
    with pytest.raises(ForeignCacheEntryError):
        cache.store(spec, make_pooled(), sources=spec.sources())
    assert _digest(users_folder) == before and link.is_symlink()


@pytest.mark.parametrize("where", ["foreign file", "partial link", "meta link"])
def test_a_real_entry_holding_something_foreign_is_refused(where, users_folder, deff_cache_dir):
    folder = cache.cache_dir() / SPEC.key()
    folder.mkdir()
    if where == "foreign file":
        (folder / "thesis.tex").write_text("mine")
    elif where == "partial link":
        (folder / "partial").symlink_to(users_folder / "partial", target_is_directory=True)
    else:
        (folder / "meta.json").symlink_to(users_folder / "meta.json")
    before = _digest(users_folder), _digest(folder)
    with pytest.raises(ForeignCacheEntryError):
        cache.get_or_compute(
            SPEC, lambda: pytest.fail("computed into a foreign entry"), sources=SPEC.sources()
        )
    with pytest.raises(ForeignCacheEntryError):
        partial.PartialRun(SPEC)._start({"n": 5, "layers": 3, "d_model": 4})
    partial.PartialRun(SPEC).discard()
    entries.cleanup_stale()
    assert (_digest(users_folder), _digest(folder)) == before


# ---------------------------------------------------------------------------------------------
# a folder where states.npz belongs; a lock that is a link


def test_states_npz_that_is_a_folder_is_one_sentence(tiny_dataset, deff_cache_dir, capsys):
    from deffcore.runs.measure import measure

    spec = _spec(tiny_dataset)
    (deff_cache_dir / spec.key() / "states.npz").mkdir(parents=True)
    (deff_cache_dir / spec.key() / "states.npz" / "inside.txt").write_text("kept")
    with pytest.raises(ForeignCacheEntryError, match=r"states\.npz as a folder"):
        measure(**_run_args(tiny_dataset))
    for _ in range(2):  # every rerun: the same sentence, never IsADirectoryError
        assert main(_cli(tiny_dataset)) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "states.npz as a folder" in err[0], err
    assert (deff_cache_dir / spec.key() / "states.npz" / "inside.txt").read_text() == "kept"
    with pytest.warns(UserWarning, match=r"states\.npz as a folder"):
        assert cache.load(spec) is None  # treated as corrupt by a plain load


@pytest.mark.parametrize("target", ["user file", "loop"])
def test_a_lock_that_is_a_link_is_one_sentence(target, tmp_path, deff_cache_dir, capsys):
    users_file = tmp_path / "diary.txt"
    users_file.write_text("dear diary")
    lock = cache.cache_dir() / f"{SPEC.key()}.lock"
    lock.symlink_to(users_file if target == "user file" else lock)
    with pytest.raises(ForeignCacheEntryError, match=r"lock file .* symbolic link") as err:
        cache.get_or_compute(SPEC, make_pooled, sources=SPEC.sources())
    assert "\n" not in str(err.value)
    entries.list_runs()  # no ELOOP from the listing or the stale-lock cleanup either
    assert entries.cleanup_stale() == 0
    assert lock.is_symlink() and users_file.read_text() == "dear diary"
    assert cache.load(SPEC) is None  # nothing was computed or stored under a link


def test_deleting_a_run_whose_lock_is_a_link_refuses(tmp_path, deff_cache_dir):
    cache.store(SPEC, make_pooled(), sources=SPEC.sources())
    users_file = tmp_path / "diary.txt"
    users_file.write_text("dear diary")
    lock = deff_cache_dir / f"{SPEC.key()}.lock"
    lock.symlink_to(users_file)
    with pytest.raises(cache.UnknownRunError, match="Nothing was deleted"):
        entries.delete(SPEC.key())
    assert users_file.read_text() == "dear diary" and cache.load(SPEC) is not None


# ---------------------------------------------------------------------------------------------
# every OS error of the cache is one sentence, nothing half-written is left


REAL_FSYNC = os.fsync


def _failing_fsync(monkeypatch, fail_on: int, code: int = errno.ENOSPC) -> list[int]:
    calls: list[int] = []
    real = REAL_FSYNC

    def fsync(fd):
        calls.append(fd)
        if len(calls) == fail_on:
            raise OSError(code, os.strerror(code))
        return real(fd)

    monkeypatch.setattr(files.os, "fsync", fsync)
    return calls


@pytest.mark.parametrize("fail_on", [1, 2])  # writing states.npz, writing meta.json
def test_a_full_disk_is_one_sentence_and_leaves_nothing_half_written(
    fail_on, monkeypatch, deff_cache_dir
):
    run = partial.PartialRun(SPEC)
    run._start({"n": 5, "layers": 3, "d_model": 4})  # an interrupted run to resume
    _failing_fsync(monkeypatch, fail_on)
    with pytest.raises(CacheWriteError) as err:
        cache.get_or_compute(SPEC, make_pooled, sources=SPEC.sources())
    text = str(err.value)
    assert "disk is full" in text and str(deff_cache_dir) in text and "\n" not in text
    folder = deff_cache_dir / SPEC.key()
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["partial"], names  # no temp file, no states without meta; partial kept
    assert cache.load(SPEC) is None
    monkeypatch.setattr(files.os, "fsync", REAL_FSYNC)  # (undo() would drop the cache dir)
    _, cached, _ = cache.get_or_compute(
        SPEC, make_pooled, sources=SPEC.sources()
    )  # a rerun with space works
    assert not cached and cache.load(SPEC) is not None


@pytest.mark.parametrize(
    ("code", "words"),
    [(errno.EACCES, "permission denied"), (errno.EROFS, "read-only"), (errno.EIO, "error")],
)
def test_other_os_errors_of_the_cache_are_one_sentence(code, words, monkeypatch, capsys):
    _failing_fsync(monkeypatch, 1, code)
    with pytest.raises(CacheWriteError, match=words):
        cache.store(SPEC, make_pooled(), sources=SPEC.sources())
    _failing_fsync(monkeypatch, 1, code)
    with pytest.raises(CacheWriteError):
        partial.PartialRun(SPEC)._start({"n": 5, "layers": 3, "d_model": 4})


def test_a_full_disk_during_measure_is_exit_2_in_one_line(tiny_dataset, monkeypatch, capsys):
    _failing_fsync(monkeypatch, 1)
    assert main(_cli(tiny_dataset)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "disk is full" in err[0], err


# ---------------------------------------------------------------------------------------------
# non-finite states are never stored, and a broken stored entry is corrupt


def test_states_that_overflow_float32_are_one_sentence_and_never_stored(
    tiny_dataset, deff_cache_dir
):
    import torch

    from deffcore.inputs.model import load_model
    from deffcore.runs.measure import measure_spec

    spec = _spec(tiny_dataset)
    loaded = load_model("tiny-llama")
    with torch.no_grad():
        loaded.model.model.embed_tokens.weight.mul_(1e30)  # norms overflow float32
    for use_cache in (True, False):
        with pytest.raises(NonFiniteActivationsError) as err:
            measure_spec(spec, loaded=loaded, use_cache=use_cache)
        text = str(err.value)
        assert "NaN or inf" in text and "All-NaN" not in text and "\n" not in text
        assert "try float32" not in text.lower()  # a float32 run is not told to try float32
    folder = deff_cache_dir / spec.key()
    assert not (folder / "meta.json").exists() and not (folder / "states.npz").exists()
    assert cache.load(spec) is None


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_store_refuses_non_finite_arrays_with_advice_for_the_dtype(dtype):
    bad = make_pooled()
    bad.pooled["no_pos0"][2, 1, 0] = np.inf
    spec = RunSpec(**{**SPEC.__dict__, "dtype": dtype})
    with pytest.raises(NonFiniteActivationsError, match="pooling 'no_pos0' at layer 2") as err:
        cache.store(spec, bad, sources=spec.sources())
    assert ("try float32" in str(err.value)) == (dtype != "float32")
    assert not (cache.cache_dir() / spec.key() / "meta.json").exists()


def test_a_broken_entry_already_in_the_cache_is_corrupt_and_recomputed(monkeypatch):
    bad = make_pooled()
    bad.pos0_norm_ratio[:] = np.nan  # what the 1e30 model stored before the fix
    real = cache.check_finite
    monkeypatch.setattr(cache, "check_finite", lambda *a, **k: None)
    cache.store(SPEC, bad, sources=SPEC.sources())
    monkeypatch.setattr(cache, "check_finite", real)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.load(SPEC) is None
    assert any("NaN or inf" in str(w.message) for w in caught)
    pooled, cached, _ = cache.get_or_compute(SPEC, make_pooled, sources=SPEC.sources())
    assert not cached and np.isfinite(pooled.pos0_norm_ratio).all()


def test_pos0_peak_ignores_nan_and_never_raises_all_nan():
    from deffcore.core.errors import InvalidStatesError
    from deffcore.runs.measure import Measurement

    pooled = make_pooled()
    pooled.pos0_norm_ratio = np.array([1.0, np.nan, 3.0, np.inf], dtype=np.float32)
    assert Measurement(spec=SPEC, pooled=pooled).pos0_peak() == (3.0, 2)
    pooled.pos0_norm_ratio = np.full(4, np.nan, dtype=np.float32)
    with pytest.raises(InvalidStatesError, match="position-0 norm ratio"):
        Measurement(spec=SPEC, pooled=pooled).pos0_peak()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_nan_advice_fits_the_runs_dtype(tiny_dataset, dtype):
    """A float32 run is never told to "try float32"."""
    import torch

    from deffcore.inputs.model import load_model
    from deffcore.runs.measure import measure_spec, run_spec

    spec, _ = run_spec("tiny-llama", tiny_dataset, 8, 16, 0, "cka", dtype=dtype)
    loaded = load_model("tiny-llama", dtype=dtype)
    with torch.no_grad():
        loaded.model.model.embed_tokens.weight[:] = float("nan")
    with pytest.raises(NonFiniteActivationsError) as err:
        measure_spec(spec, loaded=loaded)
    text = str(err.value)
    assert "NaN or inf" in text and "\n" not in text
    assert ("try float32" in text.lower()) == (dtype != "float32"), text


@pytest.mark.parametrize("fails", ["fsync", "replace"])
def test_a_failed_rewrite_keeps_the_old_file_whole(fails, monkeypatch, tmp_path):
    """Rewriting a file that exists (meta.json, diagnostics.json, a snapshot): when the write
    fails, at the fsync or at the rename, the old file is there, whole, and no temp file is
    left (a surviving mutation dropped the old file)."""
    path = tmp_path / "meta.json"
    path.write_bytes(b'{"old": true}')

    def fail(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(files.os, fails, fail)
    with pytest.raises(CacheWriteError, match="disk is full"):
        files.atomic_write(path, b'{"new": true}' * 1000)
    with pytest.raises(OSError):
        files.replace_file(path, b"new")
    assert path.read_bytes() == b'{"old": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json"]
    monkeypatch.undo()
    files.atomic_write(path, b'{"new": true}')  # with space: replaced whole
    assert path.read_bytes() == b'{"new": true}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json"]
