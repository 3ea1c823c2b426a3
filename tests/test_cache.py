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

from deffcore.core.constants import EXTRACTED_POOLINGS
from deffcore.core.errors import CacheCorruptError, DeffError
from deffcore.extraction import cache
from deffcore.extraction import cache as entries
from deffcore.extraction import cache as partial
from deffcore.extraction.cache import UnknownRunError
from deffcore.extraction.forward import PooledStates
from deffcore.inputs import run_spec
from deffcore.inputs.run_spec import RunSpec

REPO = Path(__file__).resolve().parent.parent


def make_pooled(L: int = 3, n: int = 5, d: int = 4, seed: int = 0) -> PooledStates:
    rng = np.random.default_rng(seed)
    return PooledStates(
        pooled={p: rng.standard_normal((L + 1, n, d)).astype(np.float32)
                for p in EXTRACTED_POOLINGS},
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
    first, cached1, meta = cache.get_or_compute(SPEC, compute, sources=SPEC.sources())
    second, cached2, _ = cache.get_or_compute(SPEC, compute, sources=SPEC.sources())
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
    monkeypatch.setattr(run_spec, "CODE_VERSION", "999")  # RunSpec.key() hashes it
    key_999 = SPEC.key()
    monkeypatch.undo()
    assert key_999 != SPEC.key()
    path = tmp_path / "p.txt"
    path.write_text("one two\n\nthree four\n")
    spec = dataclasses.replace(SPEC, dataset=str(path))
    before = spec.key()
    path.write_text("one two\n\nthree fives\n")
    assert spec.key() != before


def entry_folder(spec: RunSpec) -> Path:
    return cache.cache_dir() / spec.key()


@pytest.mark.parametrize(
    "damage",
    ["truncate_npz", "flip_byte", "delete_npz", "garbage_meta", "empty_meta", "bad_shape"],
)
def test_corrupt_entry_is_detected_and_recomputed(damage):
    cache.store(SPEC, make_pooled(), sources=SPEC.sources())
    folder = entry_folder(SPEC)
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
        got, was_cached, _ = cache.get_or_compute(SPEC, lambda: fresh, sources=SPEC.sources())
    assert not was_cached
    assert_same(got, fresh)
    assert_same(cache.load(SPEC), fresh)


def test_no_temp_files_left_behind():
    cache.store(SPEC, make_pooled(), sources=SPEC.sources())
    names = sorted(p.name for p in entry_folder(SPEC).iterdir())
    assert names == ["meta.json", "states.npz"]


def test_failed_compute_leaves_no_entry():
    def boom():
        raise DeffError("the model could not be loaded.")

    with pytest.raises(DeffError):
        cache.get_or_compute(SPEC, boom, sources=SPEC.sources())
    assert cache.load(SPEC) is None and entries.list_runs() == []


def test_list_and_delete():
    other = dataclasses.replace(SPEC, seed=3)
    cache.store(SPEC, make_pooled(), sources=SPEC.sources())
    cache.store(other, make_pooled(), sources=other.sources(), elapsed_s=1.5)
    runs = entries.list_runs()
    assert {r["key"] for r in runs} == {SPEC.key(), other.key()}
    by_key = {r["key"]: r for r in runs}
    assert by_key[other.key()]["spec"]["seed"] == 3
    assert by_key[other.key()]["elapsed_s"] == 1.5
    assert by_key[SPEC.key()]["model_identity"]["source"] == "tiny"
    assert not by_key[SPEC.key()]["corrupt"] and by_key[SPEC.key()]["size_bytes"] > 0
    (cache.cache_dir() / "models").mkdir()  # assembled model files are not runs
    entries.delete(SPEC.key())
    assert [r["key"] for r in entries.list_runs()] == [other.key()]
    with pytest.raises(UnknownRunError, match="No cached run"):
        entries.delete(SPEC.key())
    with pytest.raises(UnknownRunError):
        entries.delete("models")
    with pytest.raises(UnknownRunError):
        entries.delete("../etc")


def test_corrupt_entry_is_listed_not_fatal():
    cache.store(SPEC, make_pooled(), sources=SPEC.sources())
    (entry_folder(SPEC) / "meta.json").write_text("{")
    (run,) = entries.list_runs()
    assert run["corrupt"] and run["key"] == SPEC.key()


WORKER = textwrap.dedent(
    """
    import sys, time, pathlib
    sys.path.insert(0, {repo!r})
    import numpy as np
    from deffcore.core.constants import EXTRACTED_POOLINGS
    from deffcore.extraction import cache
    from deffcore.extraction.cache import RunSpec
    from deffcore.extraction.forward import PooledStates

    tmp = pathlib.Path({tmp!r})
    (tmp / f"ready-{{sys.argv[1]}}").touch()
    while len(list(tmp.glob("ready-*"))) < 2:  # start both get_or_compute calls together
        time.sleep(0.01)

    def compute():
        with open(tmp / "computed.txt", "a") as f:
            f.write(sys.argv[1] + "\\n")
        time.sleep(1.5)
        x = np.ones((3, 4, 2), np.float32)
        return PooledStates({{p: x for p in EXTRACTED_POOLINGS}},
                            np.ones(3, np.float32), 0, 12, {{}}, np.full(4, 3))

    spec = RunSpec("tiny-llama", None, "bbc-news", 4, 8, 0, "float32")
    pooled, was_cached, _ = cache.get_or_compute(spec, compute, sources=spec.sources())
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


# ----------------------------------------------------------------------------------------------
# the cache trusts nothing it reads, and deletes only run entries


def _meta_of(spec: RunSpec) -> dict:
    return json.loads((entry_folder(spec) / "meta.json").read_text())


@pytest.mark.parametrize(
    "bad",
    [
        [],
        None,
        "a string",
        42,
        {},
        {"format": 1},
        "drop:layers",
        "drop:spec",
        "drop:states_sha256",
        "set:layers=3.0",
        "set:n=-1",
        "set:n=true",
        "set:spec=[]",
        "set:spec={}",
        "set:key=other",
        "set:extract_meta=[1]",
    ],
)
def test_meta_of_the_wrong_shape_is_a_corrupt_entry(bad, capsys):
    from deffcore.cli.main import main

    cache.store(SPEC, make_pooled(), sources=SPEC.sources())
    meta = _meta_of(SPEC)
    if isinstance(bad, str) and bad.startswith("drop:"):
        del meta[bad[5:]]
        bad = meta
    elif isinstance(bad, str) and bad.startswith("set:"):
        name, value = bad[4:].split("=")
        meta[name] = json.loads(value) if value not in ("other",) else value
        bad = meta
    (entry_folder(SPEC) / "meta.json").write_text(json.dumps(bad))
    with pytest.warns(UserWarning, match="recomputed"):
        assert cache.load(SPEC) is None
    (run,) = entries.list_runs()
    assert run["status"] == "corrupt" and run["corrupt"] and run["key"] == SPEC.key()
    assert main(["runs"]) == 0 and "corrupt" in capsys.readouterr().out
    with pytest.raises(UnknownRunError):
        cache.load_meta(SPEC.key())
    fresh = make_pooled(seed=4)
    with pytest.warns(UserWarning, match="Recomputing"):
        got, was_cached, _ = cache.get_or_compute(SPEC, lambda: fresh, sources=SPEC.sources())
    assert not was_cached
    assert_same(got, fresh)
    assert [r["status"] for r in entries.list_runs()] == ["complete"]


def test_only_run_entries_are_listed_or_deleted(deff_cache_dir, capsys):
    from deffcore.cli.main import main

    cache.store(SPEC, make_pooled(), sources=SPEC.sources())
    for name in ("carry", "models", "Documents", ".uploads"):
        (deff_cache_dir / name).mkdir()
        (deff_cache_dir / name / "precious.txt").write_text("keep me")
    lookalike = deff_cache_dir / ("f" * 20)  # key-named, but a user's folder
    lookalike.mkdir()
    (lookalike / "notes.txt").write_text("mine")
    mixed = deff_cache_dir / ("e" * 20)  # run files plus something foreign
    mixed.mkdir()
    (mixed / "meta.json").write_text("{}")
    (mixed / "thesis.tex").write_text("mine too")
    linked = deff_cache_dir / ("d" * 20)  # a link to a run entry is not a run entry
    linked.symlink_to(entry_folder(SPEC), target_is_directory=True)
    assert [r["key"] for r in entries.list_runs()] == [SPEC.key()]
    for name in ("Documents", "carry", "models", ".uploads", "f" * 20, "e" * 20, "d" * 20, ""):
        with pytest.raises(UnknownRunError, match=r"nothing was deleted|No cached run"):
            entries.delete(name)
        assert main(["runs", "--delete", name]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1
    for name in ("carry", "models", "Documents", ".uploads"):
        assert (deff_cache_dir / name / "precious.txt").read_text() == "keep me"
    assert (lookalike / "notes.txt").exists() and (mixed / "thesis.tex").exists()
    assert linked.is_symlink() and (entry_folder(SPEC) / "meta.json").exists()
    assert main(["runs", "--delete", SPEC.key()]) == 0
    assert not entry_folder(SPEC).exists() and entries.list_runs() == []


def test_runs_delete_refuses_a_users_folder_in_a_plain_cache_dir(tmp_path, monkeypatch):
    """DEFF_CACHE_DIR set to an ordinary folder: `runs --delete Documents` refuses (exit 2)."""
    home = tmp_path / "home"
    (home / "Documents").mkdir(parents=True)
    (home / "Documents" / "letter.txt").write_text("dear")
    monkeypatch.setenv("DEFF_CACHE_DIR", str(home))
    cmd = [sys.executable, "-m", "deffcore", "runs", "--delete", "Documents"]
    env = {**__import__("os").environ, "DEFF_CACHE_DIR": str(home)}
    res = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.startswith("error: ")
    assert "Traceback" not in res.stderr
    assert (home / "Documents" / "letter.txt").read_text() == "dear"
    assert entries.list_runs() == []


def test_cache_dir_that_is_a_file_is_one_sentence(tmp_path, monkeypatch, capsys):
    from deffcore.cli.main import main

    target = tmp_path / "a-file"
    target.write_text("x")
    monkeypatch.setenv("DEFF_CACHE_DIR", str(target))
    with pytest.raises(DeffError, match="is a file, not a folder"):
        cache.cache_dir()
    assert main(["runs"]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    monkeypatch.setenv("DEFF_CACHE_DIR", str(target / "below"))  # parent is a file
    with pytest.raises(DeffError, match="cannot be created"):
        cache.cache_dir()


def test_stale_locks_are_removed_held_ones_kept(deff_cache_dir):
    from filelock import FileLock

    # get_or_compute leaves no lock file behind
    cache.get_or_compute(SPEC, make_pooled, sources=SPEC.sources())
    assert sorted(p.name for p in deff_cache_dir.iterdir()) == [SPEC.key()]
    done_lock = deff_cache_dir / f"{SPEC.key()}.lock"  # a complete run's leftover lock
    done_lock.touch()
    orphan = deff_cache_dir / f"{'a' * 20}.lock"  # a lock nobody holds, no entry
    orphan.touch()
    foreign = deff_cache_dir / "notes.lock"  # not a key: not ours
    foreign.touch()
    held_key = "b" * 20
    held = FileLock(str(deff_cache_dir / f"{held_key}.lock"))
    held.acquire()
    try:
        partial.PartialRun(dataclasses.replace(SPEC, seed=9), key=held_key)._start({"n": 5})
        runs = {r["key"]: r for r in entries.list_runs()}
        assert not done_lock.exists() and not orphan.exists() and foreign.exists()
        assert (deff_cache_dir / f"{held_key}.lock").exists()  # a run in progress keeps it
        assert runs[held_key]["status"] == "partial" and runs[held_key]["running"]
        assert runs[held_key]["done_passages"] == 0 and runs[held_key]["total_passages"] == 5
        assert runs[SPEC.key()]["status"] == "complete" and not runs[SPEC.key()]["running"]
        with pytest.raises(cache.RunInUseError, match="being computed"):
            entries.delete(held_key)
    finally:
        held.release()
    assert entries.cleanup_stale() == 1  # now nobody holds it
    assert not (deff_cache_dir / f"{held_key}.lock").exists()
    entries.delete(held_key)  # a partial is a run entry: deletable
    assert [r["key"] for r in entries.list_runs()] == [SPEC.key()]


def test_leftover_partial_of_a_complete_entry_is_cleaned(deff_cache_dir):
    cache.store(SPEC, make_pooled(), sources=SPEC.sources())
    leftover = entry_folder(SPEC) / "partial"  # killed between the commit and the cleanup
    leftover.mkdir()
    (leftover / "manifest.json").write_text("{}")
    (run,) = entries.list_runs()
    assert run["status"] == "complete" and not leftover.exists()


def test_partial_folder_never_loads_as_complete():
    run = partial.PartialRun(SPEC)
    run._start({"n": 5, "layers": 3, "d_model": 4})
    assert cache.load(SPEC, strict=True) is None
    with pytest.raises(UnknownRunError, match="interrupted"):
        cache.load_meta(SPEC.key())
    (run,) = entries.list_runs()
    assert run["status"] == "partial" and run["spec"]["model"] == "tiny-llama"


def test_bos_diagnostics_beside_a_run_keep_it_listed_and_deletable(tmp_path):
    """diagnostics.json (deffcore.lenses.diagnostics) lives in the run's entry: the run stays a run,
    and a folder holding only diagnostics is not listed as a run."""
    import json as _json

    from deffcore.extraction import cache
    from deffcore.extraction import cache as entries
    from deffcore.inputs import run_spec

    spec = run_spec.RunSpec("tiny-llama", None, "bbc-news", 4, 8, 0, "float32")
    cache.store(spec, make_pooled(), sources=spec.sources())
    folder = cache.cache_dir() / spec.key()
    (folder / "diagnostics.json").write_text(_json.dumps({"layers": 2}))
    (folder / ".diagnostics.lock").write_text("")
    runs = [r for r in entries.list_runs() if r["key"] == spec.key()]
    assert len(runs) == 1 and runs[0]["status"] == "complete"
    lonely = cache.cache_dir() / ("ab" * 10)
    lonely.mkdir()
    (lonely / "diagnostics.json").write_text("{}")
    assert ("ab" * 10) not in {r["key"] for r in entries.list_runs()}
    entries.delete(spec.key())
    assert not folder.exists()
