"""A user's scores CSV: every malformed file is one sentence naming the problem."""

from __future__ import annotations

import pytest

from deffcore.core.errors import InvalidArgumentError
from deffcore.labs.scores import read_scores


def _write(tmp_path, text: str, name: str = "scores.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_good_file(tmp_path):
    path = _write(
        tmp_path,
        "Model,Task,Score,family\nA,MMLU,50\nB,MMLU,60.5\n\nA,ARC,0.3,Fam\n",
    )
    t = read_scores(path)
    assert t.scores == {"MMLU": {"A": 50.0, "B": 60.5}, "ARC": {"A": 0.3}}
    assert t.families == {"A": "Fam"} and t.models == ["A", "B"] and t.tasks == ["MMLU", "ARC"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty; it needs a header row"),
        ("model,task\nA,MMLU\n", "lacks the column(s) score"),
        ("model,task,score,notes\nA,MMLU,1,x\n", "unknown column(s) 'notes'"),
        ("model,task,score,score\n", "repeats a column"),
        ("model,task,score\n", "has a header but no scores"),
        ("model,task,score\nA,MMLU,abc\n", "line 2: the score 'abc' is not a number"),
        ("model,task,score\nA,MMLU,nan\n", "line 2: the score 'nan' is not a finite number"),
        ("model,task,score\nA,MMLU,1\nA,MMLU,2\n", "line 3 repeats the score of 'A' on 'MMLU'"),
        ("model,task,score\n,MMLU,1\n", "line 2: the model and the task must not be empty"),
        ("model,task,score\nA,MMLU\n", "line 2 has 2 fields; the header has 3"),
        ("model,task,score,family\nA,X,1,F\nA,Y,2,G\n", "gives 'A' the family 'G'"),
    ],
)
def test_bad_files(tmp_path, text, message):
    with pytest.raises(InvalidArgumentError) as err:
        read_scores(_write(tmp_path, text))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_json_file_given_as_scores_is_a_short_sentence(tmp_path):
    """A snapshot's one compact JSON line reads as hundreds of "columns": a few are named."""
    import json

    row = {f"key{i}": "v" * 60 for i in range(400)}
    with pytest.raises(InvalidArgumentError) as err:
        read_scores(_write(tmp_path, json.dumps(row) + "\n"))
    message = str(err.value)
    assert 'unknown column(s) \'{"key0": "' + "v" * 27 + "...', '\"key1\"" in message, message
    assert "and 397 more; the columns are model, task, score" in message
    assert len(message) < 400 and "\n" not in message


def test_missing_folder_binary_and_huge(tmp_path):
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        read_scores(tmp_path / "nope.csv")
    with pytest.raises(InvalidArgumentError, match="is not a file"):
        read_scores(tmp_path)
    (tmp_path / "bin.csv").write_bytes(b"model,task,score\n\xff\xfe\n")
    with pytest.raises(InvalidArgumentError, match="not UTF-8"):
        read_scores(tmp_path / "bin.csv")
    big = tmp_path / "big.csv"
    with big.open("wb") as fh:
        fh.truncate(6 * 2**20)
    with pytest.raises(InvalidArgumentError, match="under 5 MB"):
        read_scores(big)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"", "The uploaded scores file s.csv is empty"),
        (b"  \n", "is empty"),
        (b"model,task,score\n\x00\x01", "is not UTF-8 text"),
        (b"\xff\xfe model", "is not UTF-8 text"),
        (b"x" * 101, "more than the 0 MB"),
    ],
)
def test_an_upload_is_checked_before_it_is_stored(data, match):
    from deffcore.labs.scores import check_upload

    with pytest.raises(InvalidArgumentError, match=match):
        check_upload("s.csv", data, max_bytes=100 if len(data) > 100 else 5 * 2**20)


def test_a_good_upload_passes_its_check():
    from deffcore.labs.scores import check_upload

    check_upload("s.csv", "\ufeffmodel,task,score\nm,t,1\n".encode())  # a BOM is fine
