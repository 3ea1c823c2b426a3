"""Kept shared runs (deffcore.views.sharing): a file that no longer reads is listed with its reason
and stays deletable (page and `deffcore runs`), nothing is read, written or deleted through a
link, and the size bound is the real 16 MiB (no patched constant)."""

from __future__ import annotations

import hashlib
import json

import pytest

from deffcore.cli.main import main
from deffcore.views import sharing
from deffcore.views.run import DEFAULT_RUN_PATH
from deffcore.views.sharing import (
    MAX_SNAPSHOT_BYTES,
    SnapshotError,
    delete_shared,
    list_shared,
    open_shared,
    read_snapshot,
    save_shared,
    shared_dir,
    shared_entries,
)

GOOD = DEFAULT_RUN_PATH.read_bytes()


def _keep_as_an_older_deffcore_did(body: bytes):
    """A file in `.shared/` named by its hash, as `save_shared` writes it, but never checked
    by this schema (an older, looser one accepted it)."""
    folder = shared_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{hashlib.sha256(body).hexdigest()[:16]}.json"
    path.write_bytes(body)
    return path


def _surrogate_run() -> bytes:
    data = json.loads(GOOD)
    data["spec"]["model"] = "smollm2\ud800"
    return json.dumps(data).encode()  # JSON escapes it: "\ud800" in the file


def test_a_kept_file_that_no_longer_reads_is_listed_with_its_reason_and_deleted(capsys):
    good = save_shared(GOOD, name="good.json")
    bad = _keep_as_an_older_deffcore_did(_surrogate_run())
    entries = {e.sha256: e for e in shared_entries()}
    assert set(entries) == {good.sha256[:16], bad.name[:16]}
    damaged = entries[bad.name[:16]]
    assert damaged.view is None and damaged.deletable and "lone surrogate" in damaged.error
    assert entries[good.sha256[:16]].view.sha256 == good.sha256
    with pytest.warns(UserWarning, match="Skipped shared run"):
        assert [v.sha256 for v in list_shared()] == [good.sha256]
    # the command lists both, the damaged one with its reason, as text
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    assert f"shared:{good.sha256[:16]}" in out and "damaged" in out
    assert "\ud800" not in out and "lone surrogate" in out
    out.encode("utf-8")
    assert main(["runs", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["key"]: r["status"] for r in rows} == {
        f"shared:{good.sha256[:16]}": "shared",
        f"shared:{bad.name[:16]}": "damaged",
    }
    assert main(["runs", "--delete", f"shared:{bad.name[:16]}"]) == 0
    assert not bad.exists() and good.path.exists()
    assert main(["runs", "--delete", good.sha256[:16]]) == 0  # the bare id works too
    assert not good.path.exists()
    assert main(["runs", "--delete", f"shared:{good.sha256[:16]}"]) == 2
    assert "nothing was deleted" in capsys.readouterr().err


def test_a_shared_folder_that_is_a_link_is_never_read_written_or_deleted_through(tmp_path):
    elsewhere = tmp_path / "someone_elses"
    elsewhere.mkdir()
    name = f"{hashlib.sha256(GOOD).hexdigest()[:16]}.json"
    (elsewhere / name).write_bytes(GOOD)  # a valid kept run, named right, behind the link
    shared_dir().parent.mkdir(parents=True, exist_ok=True)
    shared_dir().symlink_to(elsewhere, target_is_directory=True)
    assert list_shared() == [] and shared_entries() == []
    with pytest.raises(SnapshotError, match="is kept here"):
        open_shared(name[:16])
    with pytest.raises(SnapshotError, match="nothing was deleted"):
        delete_shared(name[:16])
    with pytest.raises(SnapshotError, match="not a folder of ours"):
        save_shared(GOOD + b"\n")  # another file: a write through the link would add it
    assert (elsewhere / name).read_bytes() == GOOD and sorted(elsewhere.iterdir()) == [
        elsewhere / name
    ]


def test_a_kept_file_replaced_by_a_link_is_not_ours(tmp_path):
    kept = save_shared(GOOD)
    target = tmp_path / "their_file.json"
    target.write_bytes(GOOD)
    kept.path.unlink()
    kept.path.symlink_to(target)
    (entry,) = shared_entries()
    assert entry.view is None and not entry.deletable and "cannot be read" in entry.error
    with pytest.raises(SnapshotError, match="nothing was deleted"):
        delete_shared(kept.sha256)
    assert kept.path.is_symlink() and target.read_bytes() == GOOD


def test_a_kept_file_changed_since_is_not_deleted():
    kept = save_shared(GOOD)
    kept.path.write_bytes(GOOD + b" ")  # its name is no longer its hash
    (entry,) = shared_entries()
    assert entry.view is None and not entry.deletable and "changed since" in entry.error
    with pytest.raises(SnapshotError, match="nothing was deleted"):
        delete_shared(kept.sha256)
    assert kept.path.exists()


def _padded(size: int) -> bytes:
    """The default run padded with JSON whitespace to exactly `size` bytes."""
    return GOOD + b" " * (size - len(GOOD))


def test_the_size_bound_is_16_mib_and_checked_before_anything_is_parsed(tmp_path, monkeypatch):
    """No constant patched: a file of exactly 16 MiB reads, one byte more is refused before
    it is parsed, from bytes and from disk (where the open file's size is checked)."""
    assert MAX_SNAPSHOT_BYTES == 16 * 2**20
    at_limit = _padded(MAX_SNAPSHOT_BYTES)
    assert read_snapshot(at_limit, name="big.json").layers == 30
    (tmp_path / "at_limit.json").write_bytes(at_limit)
    assert sharing.open_snapshot(tmp_path / "at_limit.json").layers == 30
    over = _padded(MAX_SNAPSHOT_BYTES + 1)
    (tmp_path / "over.json").write_bytes(over)
    monkeypatch.setattr(json, "loads", lambda *_a, **_k: pytest.fail("parsed a too-large file"))
    for read in (
        lambda: read_snapshot(over, name="over.json"),
        lambda: sharing.open_snapshot(tmp_path / "over.json"),
        lambda: sharing.share_file(tmp_path / "over.json"),
    ):
        with pytest.raises(SnapshotError, match=r"over.json is 16.0 MiB, more than .* 16 MiB"):
            read()
    assert not shared_dir().exists() or list(shared_dir().iterdir()) == []


def test_a_large_file_is_refused_by_its_size_before_it_is_read(tmp_path):
    """The open file's size is checked first (fstat): a 1 GiB file is named with its own size
    (read first, it would be refused as the 16 MiB the reader takes of it)."""
    big = tmp_path / "huge.json"
    with open(big, "wb") as f:
        f.truncate(2**30)  # sparse: no disk used
    for read in (sharing.open_snapshot, sharing.share_file):
        with pytest.raises(SnapshotError, match=r"huge.json is 1024.0 MiB, more than"):
            read(big)


def test_the_runs_listing_never_prints_a_control_character(monkeypatch, capsys):
    """A name with a terminal escape (a file named so, a model id) is printed as text."""
    from deffcore.extraction import cache as entries

    row = {"key": "a" * 20, "status": "complete", "created": "2026-01-01T00:00:00",
           "spec": {"model": "evil\x1b[2Jmodel", "dataset": "data\x07.txt", "max_tokens": 8},
           "n": 4, "layers": 2}  # fmt: skip
    monkeypatch.setattr(entries, "list_runs", lambda: [row])
    assert main(["runs"]) == 0
    out = capsys.readouterr().out
    assert "evil?[2Jmodel" in out and "data?.txt" in out
    assert "\x1b" not in out and "\x07" not in out


@pytest.mark.parametrize("path", [None, 5, b"/tmp/run.json", ["run.json"]])
def test_a_path_that_is_not_one_is_one_sentence(path):
    """dc.open_snapshot(None) or a bytes path was a TypeError from pathlib."""
    for entry in (sharing.open_snapshot, sharing.share_file):
        with pytest.raises(SnapshotError, match="path to a snapshot file"):
            entry(path)
