"""The lab result store: keyed by identity, atomic, and nothing read is trusted."""

from __future__ import annotations

import json

import pytest

from deffcore.core.errors import DeffError
from deffcore.labs import store


def test_round_trip_and_identity_keying(deff_cache_dir):
    ident = {"model": "m", "n": 8}
    path = store.write_result("gw", ident, {"value": 1.5, "nan": float("nan")})
    assert path.parent == deff_cache_dir / "labs" / "gw" and path.stem == store.result_key(ident)
    assert store.read_result("gw", ident) == {"value": 1.5, "nan": None}
    assert store.read_result("gw", {"model": "m", "n": 9}) is None
    assert store.read_result("pruning", ident) is None  # another lab
    assert [r["result"]["value"] for r in store.list_results("gw")] == [1.5]


def test_damaged_or_mismatched_files_are_absent(deff_cache_dir):
    ident = {"model": "m"}
    path = store.write_result("gw", ident, {"value": 1})
    data = json.loads(path.read_text())
    data["identity"] = {"model": "other"}  # key no longer matches the identity
    path.write_text(json.dumps(data))
    assert store.read_result("gw", ident) is None and store.list_results("gw") == []
    path.write_text("{not json")
    assert store.read_result("gw", ident) is None and store.list_results("gw") == []


def test_never_writes_through_a_link(deff_cache_dir, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (deff_cache_dir / "labs").mkdir(parents=True)
    (deff_cache_dir / "labs" / "gw").symlink_to(elsewhere)
    with pytest.raises(DeffError, match="is a link or a file"):
        store.write_result("gw", {"a": 1}, {"b": 2})
    assert list(elsewhere.iterdir()) == []
    assert store.list_results("gw") == []


def test_unknown_lab_is_refused():
    with pytest.raises(DeffError, match="Unknown lab store"):
        store.lab_folder("nope")
