"""Outputs never overwrite inputs and are written whole: `measure --snapshot`, `report -o`.

Refused before any model loads, in one sentence with exit code 2, the user's files unchanged:
the `--dataset` file itself, through a symbolic or a hard link, the `--model` file, an
existing file that is not a snapshot, and the snapshot of another run. Replaced: this run's own
snapshot (the command that remakes it). A full disk while writing is one sentence too, and the
file that was there is left as it was, with no temp file beside it. `report -o` and `measure
--snapshot` share one rule (`core.files.check_output`): a path is replaced only when it is a
regular file deffcore wrote (a report, a snapshot), never a FIFO, device, folder or link, a
cache entry's files or the package's shipped data.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import pytest

from deffcore.cli.main import main
from deffcore.core import files
from deffcore.core.errors import InvalidArgumentError
from deffcore.core.files import DATA_DIR

RUN = ["--model", "tiny-llama", "--n", "8", "--max-tokens", "16", "--no-progress"]


@pytest.fixture
def dataset(tiny_dataset) -> Path:
    return Path(tiny_dataset)


def _refused(capsys, argv: list[str], said: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and "\n" not in err and "Traceback" not in err, err
    return err


@pytest.fixture
def no_model(monkeypatch):
    import deffcore.inputs.run_spec
    import deffcore.runs.measure

    def refuse(*args, **kwargs):
        pytest.fail("a model was loaded although the output is refused")

    monkeypatch.setattr(deffcore.inputs.run_spec, "load_model", refuse)


def test_the_dataset_file_is_never_the_snapshot(capsys, dataset, tmp_path, no_model):
    before = dataset.read_bytes()
    argv = ["measure", *RUN, "--dataset", str(dataset), "--snapshot"]
    _refused(capsys, [*argv, str(dataset)], "is the --dataset file")
    hard = tmp_path / "hard.txt"
    os.link(dataset, hard)
    _refused(capsys, [*argv, str(hard)], "is the --dataset file")
    link = tmp_path / "link.json"
    link.symlink_to(dataset)
    _refused(capsys, [*argv, str(link)], "is a symbolic link")
    column = tmp_path / "rows.csv"
    column.write_text("text\nOne passage here.\nAnother passage there.\n")
    _refused(
        capsys,
        ["measure", *RUN, "--dataset", f"{column}:text", "--snapshot", str(column)],
        "is the --dataset file",
    )
    assert dataset.read_bytes() == before and column.read_text().startswith("text\n")


def test_the_caches_own_folders_are_never_an_output(capsys, dataset, deff_cache_dir, no_model):
    entry = deff_cache_dir / ("a" * 20)
    entry.mkdir(parents=True)
    argv = ["measure", *RUN, "--dataset", str(dataset), "--snapshot"]
    for inside in (entry / "run.json", deff_cache_dir / ".shared" / "x.json"):
        _refused(capsys, [*argv, str(inside)], "is inside the cache's own folder")
    assert list(entry.iterdir()) == []


def test_the_model_file_is_never_the_snapshot(capsys, dataset, tmp_path, no_model):
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF not really")
    argv = ["measure", "--model", str(model), "--dataset", str(dataset), "--n", "8"]
    _refused(capsys, [*argv, "--snapshot", str(model)], "is the --model file")
    assert model.read_bytes() == b"GGUF not really"


def test_an_existing_file_is_replaced_only_when_it_is_this_runs_snapshot(capsys, dataset, tmp_path):
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}')
    argv = ["measure", *RUN, "--dataset", str(dataset), "--snapshot"]
    _refused(capsys, [*argv, str(notes)], "already exists and is not a run snapshot")
    assert notes.read_text() == '{"mine": true}'
    out = tmp_path / "run.json"
    assert main([*argv, str(out)]) == 0  # a new file
    first = json.loads(out.read_text())
    assert main([*argv, str(out)]) == 0  # the same run again: the command that remakes it
    again = out.read_bytes()
    assert json.loads(again)["key"] == first["key"]
    capsys.readouterr()
    other = ["measure", *RUN[:-1], "--seed", "3", "--no-progress", "--dataset", str(dataset)]
    said = "snapshot of another run (it differs in seed)"
    _refused(capsys, [*other, "--snapshot", str(out)], said)
    assert out.read_bytes() == again


def test_a_full_disk_is_one_sentence_and_leaves_the_old_file(capsys, dataset, tmp_path):
    out = tmp_path / "run.json"
    argv = ["measure", *RUN, "--dataset", str(dataset), "--snapshot", str(out)]
    assert main(argv) == 0
    before = out.read_bytes()
    capsys.readouterr()
    real = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    mp = pytest.MonkeyPatch()
    mp.setattr(files.os, "fsync", full)
    try:
        err = _refused(capsys, argv, "could not be written (the disk is full)")
    finally:
        mp.undo()
    assert os.fsync is real
    assert "the same command writes it at once" in err and err.count(". ") == 0
    assert out.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


# --- One rule for every output (`core.files.check_output`): `report -o` as `measure --snapshot`


@pytest.fixture
def in_cache(shipped_run, monkeypatch):
    monkeypatch.setenv("DEFF_CACHE_DIR", str(shipped_run["cache"]))
    return shipped_run


def _report(out: Path, run: Path) -> list[str]:
    return ["report", str(run), "-o", str(out), "--no-progress"]


def test_report_never_replaces_a_file_it_did_not_write(capsys, in_cache, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    _refused(capsys, _report(notes, in_cache["path"]), "already exists and is not a report")
    assert notes.read_text() == "my notes"
    out = tmp_path / "r.html"
    assert main(_report(out, in_cache["path"])) == 0  # a new file, then its own report again
    assert main(_report(out, in_cache["path"])) == 0
    assert files.has_mark(out, (files.REPORT,))
    looks_alike = tmp_path / "page.html"  # an HTML page of the user's that names us later on
    looks_alike.write_text(f"<!DOCTYPE html><html><head></head><body>{files.REPORT_MARK}")
    _refused(capsys, _report(looks_alike, in_cache["path"]), "is not a report deffcore wrote")


def test_report_never_writes_into_a_fifo_a_folder_or_a_link(capsys, in_cache, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    _refused(capsys, _report(fifo, in_cache["path"]), "is a FIFO (named pipe), not a file")
    assert os.path.exists(fifo) and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    _refused(capsys, _report(tmp_path, in_cache["path"]), "is a folder")
    link = tmp_path / "link.html"
    link.symlink_to(tmp_path / "absent.html")  # a dangling link: its target would be made
    _refused(capsys, _report(link, in_cache["path"]), "is a symbolic link")
    assert not (tmp_path / "absent.html").exists() and link.is_symlink()


def test_a_character_device_is_never_an_output():
    with pytest.raises(InvalidArgumentError, match="is a character device, not a file"):
        files.check_output("/dev/null", "--output", marks=(files.REPORT,))
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)


def test_report_never_writes_a_cache_entrys_files_or_the_packages_data(capsys, in_cache):
    entry = next(p for p in in_cache["cache"].iterdir() if (p / "meta.json").is_file())
    meta = (entry / "meta.json").read_bytes()
    said = "is inside the cache's own folder"
    _refused(capsys, _report(entry / "meta.json", in_cache["path"]), said)
    _refused(capsys, _report(entry / "new.html", in_cache["path"]), said)
    assert (entry / "meta.json").read_bytes() == meta and not (entry / "new.html").exists()
    shipped = DATA_DIR / "default_run.json"
    before = shipped.read_bytes()
    _refused(capsys, _report(shipped, in_cache["path"]), "is inside the deffcore package")
    _refused(capsys, _report(DATA_DIR / "new.html", in_cache["path"]), "inside the deffcore")
    assert shipped.read_bytes() == before and not (DATA_DIR / "new.html").exists()


def test_the_snapshot_follows_the_same_rule(capsys, dataset, tmp_path, no_model):
    argv = ["measure", *RUN, "--dataset", str(dataset), "--snapshot"]
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    _refused(capsys, [*argv, str(fifo)], "is a FIFO (named pipe), not a file")
    _refused(capsys, [*argv, str(DATA_DIR / "default_run.json")], "inside the deffcore package")
    report = tmp_path / "r.html"
    report.write_text(f'<!DOCTYPE html>\n<html lang="en"><head>{files.REPORT_MARK}</head>')
    _refused(capsys, [*argv, str(report)], "already exists and is not a run snapshot")


def test_the_write_looks_again_at_what_is_there(tmp_path):
    """A FIFO or a link put at the name after the check is refused by the write itself, never
    written into or replaced."""
    fifo = tmp_path / "out.html"
    os.mkfifo(fifo)
    with pytest.raises(InvalidArgumentError, match="is a FIFO"):
        files.write_output(fifo, b"page", "--output")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    link = tmp_path / "link.html"
    link.symlink_to(tmp_path / "target.html")
    with pytest.raises(InvalidArgumentError, match="symbolic link"):
        files.write_output(link, b"page", "--output")
    assert link.is_symlink() and not (tmp_path / "target.html").exists()


def test_the_carry_labs_records_follow_the_same_rule(capsys, tmp_path, deff_cache_dir, monkeypatch):
    """`carry --checkpoint-dir`: its records.json replaces only a lab's records, never a file
    of the user's, and never lands in a cache entry or the package (refused before training)."""
    from deffcore.labs import residual_carry

    def train(*args, **kwargs):
        pytest.fail("the lab trained although its output is refused")

    monkeypatch.setattr(residual_carry, "train_run", train)
    base = ["carry", "--preset", "tiny", "--no-progress", "--checkpoint-dir"]
    (tmp_path / "records.json").write_text("my records")
    _refused(capsys, [*base, str(tmp_path)], "is not a lab's records file deffcore wrote")
    assert (tmp_path / "records.json").read_text() == "my records"
    entry = deff_cache_dir / ("b" * 20)
    entry.mkdir(parents=True)
    _refused(capsys, [*base, str(entry)], "is inside the cache's own folder")
    _refused(capsys, [*base, str(DATA_DIR / "ck")], "is inside the deffcore package")
    assert not (DATA_DIR / "ck").exists() and list(entry.iterdir()) == []


def test_an_hf_prefixed_input_is_the_file_it_names(dataset, tmp_path):
    """`hf:path` names the local file `path` (the dataset spec's prefix), so an output at that
    path is the input itself and is refused like the bare path."""
    assert files.local_input(f"hf:{dataset}") == dataset
    assert files.local_input(f"hf:{dataset}:text") == dataset
    with pytest.raises(InvalidArgumentError, match="is the --dataset file"):
        files.check_output(dataset, "--snapshot", inputs={"--dataset": f"hf:{dataset}"})
    assert files.local_input(f"hf:{tmp_path / 'absent.jsonl'}") is None
