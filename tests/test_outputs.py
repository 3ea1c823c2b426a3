"""Outputs never overwrite inputs and are written whole: `measure --snapshot`.

Refused before any model loads, in one sentence with exit code 2, the user's files unchanged:
the `--dataset` file itself, through a symbolic or a hard link, the `--model` file, an
existing file that is not a snapshot, and the snapshot of another run. Replaced: this run's own
snapshot (the command that remakes it). A full disk while writing is one sentence too, and the
file that was there is left as it was, with no temp file beside it.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from deffcore.cli.main import main
from deffcore.core import files

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
    import deffcore.inputs.run_inputs
    import deffcore.runs.measure

    def refuse(*args, **kwargs):
        pytest.fail("a model was loaded although the output is refused")

    monkeypatch.setattr(deffcore.inputs.run_inputs, "load_model", refuse)


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
