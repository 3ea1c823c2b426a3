"""Cache: hit, miss, key sensitivity, corrupt entries, concurrent writers, listing, delete."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from deffcore import cache
from deffcore.cache import RunSpec, UnknownRunError
from deffcore.errors import CacheCorruptError, DeffError
from deffcore.extract import PooledStates

REPO = Path(__file__).resolve().parent.parent


def make_pooled(L: int = 3, n: int = 5, d: int = 4, seed: int = 0) -> PooledStates:
    rng = np.random.default_rng(seed)
    return PooledStates(
        pooled={p: rng.standard_normal((L + 1, n, d)).astype(np.float32)
                for p in ("default", "first_non_bos", "token_normed")},
        pos0_norm_ratio=rng.random(L + 1).astype(np.float32),
        n_dropped_short=2,
        tokens=40,
        meta={"model": "tiny-llama", "kept_indices": list(range(n))},
        lengths=np.full(n, 8),
    )  # fmt: skip


SPEC = RunSpec(
    model="tiny-llama", revision=None, dataset="bbc-news", n=5, max_tokens=16, seed=0,
    dtype="float32",
)  # fmt: skip


def assert_same(a: PooledStates, b: PooledStates) -> None:
    for p in a.pooled:
        np.testing.assert_array_equal(a.pooled[p], b.pooled[p])
    np.testing.assert_array_equal(a.pos0_norm_ratio, b.pos0_norm_ratio)
    np.testing.assert_array_equal(a.lengths, b.lengths)
    assert (a.n_dropped_short, a.tokens, a.meta) == (b.n_dropped_short, b.tokens, b.meta)


def test_cache_dir_follows_environment(deff_cache_dir):
    assert cache.cache_dir() == deff_cache_dir and deff_cache_dir.is_dir()


def test_miss_then_hit():
    calls = []

    def compute():
        calls.append(1)
        return make_pooled()

    assert cache.load(SPEC) is None
    first, cached1, meta = cache.get_or_compute(SPEC, compute)
    second, cached2, _ = cache.get_or_compute(SPEC, compute)
    assert calls == [1] and (cached1, cached2) == (False, True)
    assert_same(first, make_pooled())
    assert_same(second, make_pooled())
    assert meta["key"] == SPEC.key() and meta["layers"] == 3 and meta["n"] == 5
    assert_same(cache.load(SPEC), make_pooled())


@pytest.mark.parametrize(
    "change",
    [
        {"model": "tiny-gpt2"}, {"model": "random:tiny-llama:1"}, {"revision": "step1000"},
        {"dataset": "hf:wikitext:train"}, {"n": 6}, {"max_tokens": 17}, {"seed": 1},
        {"dtype": "bfloat16"}, {"intervention": "no_post"},
    ],
)  # fmt: skip
def test_key_changes_with_every_field(change):
    other = dataclasses.replace(SPEC, **change)
    assert other.key() != SPEC.key()
    assert dataclasses.replace(SPEC).key() == SPEC.key()


def test_key_changes_with_code_version_and_file_content(monkeypatch, tmp_path):
    monkeypatch.setattr(cache, "CODE_VERSION", "999")
    key_999 = SPEC.key()
    monkeypatch.undo()
    assert key_999 != SPEC.key()
    path = tmp_path / "p.txt"
    path.write_text("one two\n\nthree four\n")
    spec = dataclasses.replace(SPEC, dataset=str(path))
    before = spec.key()
    path.write_text("one two\n\nthree fives\n")
    assert spec.key() != before


def _entry(spec: RunSpec) -> Path:
    return cache.cache_dir() / spec.key()


@pytest.mark.parametrize(
    "damage",
    ["truncate_npz", "flip_byte", "delete_npz", "garbage_meta", "empty_meta", "bad_shape"],
)
def test_corrupt_entry_is_detected_and_recomputed(damage):
    cache.store(SPEC, make_pooled())
    folder = _entry(SPEC)
    npz, meta = folder / "states.npz", folder / "meta.json"
    if damage == "truncate_npz":
        npz.write_bytes(npz.read_bytes()[:100])
    elif damage == "flip_byte":
        data = bytearray(npz.read_bytes())
        data[len(data) // 2] ^= 0xFF
        npz.write_bytes(bytes(data))
    elif damage == "delete_npz":
        npz.unlink()
    elif damage == "garbage_meta":
        meta.write_text("{not json")
    elif damage == "empty_meta":
        meta.write_text("")
    elif damage == "bad_shape":
        m = json.loads(meta.read_text())
        m["n"] = 7  # checksum still fine, shapes disagree
        meta.write_text(json.dumps(m))
    with pytest.warns(UserWarning, match="recomputed"):
        assert cache.load(SPEC) is None
    with pytest.raises(CacheCorruptError):
        cache.load(SPEC, strict=True)
    fresh = make_pooled(seed=1)
    with pytest.warns(UserWarning, match="Recomputing"):
        got, was_cached, _ = cache.get_or_compute(SPEC, lambda: fresh)
    assert not was_cached
    assert_same(got, fresh)
    assert_same(cache.load(SPEC), fresh)


def test_no_temp_files_left_behind():
    cache.store(SPEC, make_pooled())
    names = sorted(p.name for p in _entry(SPEC).iterdir())
    assert names == ["meta.json", "states.npz"]


def test_failed_compute_leaves_no_entry():
    def boom():
        raise DeffError("the model could not be loaded.")

    with pytest.raises(DeffError):
        cache.get_or_compute(SPEC, boom)
    assert cache.load(SPEC) is None and cache.list_runs() == []


def test_list_and_delete():
    other = dataclasses.replace(SPEC, seed=3)
    cache.store(SPEC, make_pooled())
    cache.store(other, make_pooled(), elapsed_s=1.5)
    runs = cache.list_runs()
    assert {r["key"] for r in runs} == {SPEC.key(), other.key()}
    by_key = {r["key"]: r for r in runs}
    assert by_key[other.key()]["spec"]["seed"] == 3
    assert by_key[other.key()]["elapsed_s"] == 1.5
    assert by_key[SPEC.key()]["model_identity"]["source"] == "tiny"
    assert not by_key[SPEC.key()]["corrupt"] and by_key[SPEC.key()]["size_bytes"] > 0
    (cache.cache_dir() / "models").mkdir()  # assembled model files are not runs
    cache.delete(SPEC.key())
    assert [r["key"] for r in cache.list_runs()] == [other.key()]
    with pytest.raises(UnknownRunError, match="No cached run"):
        cache.delete(SPEC.key())
    with pytest.raises(UnknownRunError):
        cache.delete("models")
    with pytest.raises(UnknownRunError):
        cache.delete("../etc")


def test_corrupt_entry_is_listed_not_fatal():
    cache.store(SPEC, make_pooled())
    (_entry(SPEC) / "meta.json").write_text("{")
    (run,) = cache.list_runs()
    assert run["corrupt"] and run["key"] == SPEC.key()


WORKER = textwrap.dedent(
    """
    import sys, time, pathlib
    sys.path.insert(0, {repo!r})
    import numpy as np
    from deffcore import cache
    from deffcore.cache import RunSpec
    from deffcore.extract import PooledStates

    tmp = pathlib.Path({tmp!r})
    (tmp / f"ready-{{sys.argv[1]}}").touch()
    while len(list(tmp.glob("ready-*"))) < 2:  # start both get_or_compute calls together
        time.sleep(0.01)

    def compute():
        with open(tmp / "computed.txt", "a") as f:
            f.write(sys.argv[1] + "\\n")
        time.sleep(1.5)
        x = np.ones((3, 4, 2), np.float32)
        return PooledStates({{p: x for p in ("default", "first_non_bos", "token_normed")}},
                            np.ones(3, np.float32), 0, 12, {{}}, np.full(4, 3))

    spec = RunSpec("tiny-llama", None, "bbc-news", 4, 8, 0, "float32")
    pooled, was_cached, _ = cache.get_or_compute(spec, compute)
    print("cached" if was_cached else "computed", float(pooled.pooled["default"].sum()))
    """
)


def test_two_processes_compute_once(tmp_path, deff_cache_dir):
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(repo=str(REPO), tmp=str(tmp_path)))
    procs = [
        subprocess.Popen([sys.executable, str(script), str(i)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for i in range(2)
    ]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    assert len((tmp_path / "computed.txt").read_text().split()) == 1
    assert sorted(o[0].split()[0] for o in outs) == ["cached", "computed"]
    assert {o[0].split()[1] for o in outs} == {"24.0"}
