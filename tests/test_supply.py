"""Actions the data can give (deffcore.inputs.supply, SPEC 15): one function for every
"use ≥ n passages", checked against the chosen data, length and mode."""

from __future__ import annotations

from dataclasses import replace

import pytest

from deffcore.inputs.run_spec import RunSpec
from deffcore.inputs.supply import LARGER_CORPUS, passages_action, supply
from deffcore.inputs.texts import WindowSource, count_windows, window_source
from deffcore.statistics.bos_answer import position0_answer
from deffcore.statistics.trust_rule import assess, with_supply


def _spec(dataset: str, passages: str = "windows", T: int = 16) -> RunSpec:
    return RunSpec("tiny-llama", None, dataset, 8, T, 0, "float32", passages=passages)


def test_the_source_counts_every_length_and_mode_as_count_windows(tiny_dataset):
    source = window_source("tiny-llama", tiny_dataset)
    for T in (8, 16, 33):
        for mode in ("windows", "packed"):
            assert source.count(T, mode) == count_windows("tiny-llama", tiny_dataset, T, mode=mode)
    assert WindowSource.from_dict(source.to_dict()) == source
    with pytest.raises(ValueError):
        WindowSource.from_dict({"bodies": [3, -1], "specials": 1, "separator": 2})


def test_an_action_the_data_can_give_is_the_plain_one(tiny_dataset):
    have = supply(_spec(tiny_dataset)).available
    assert have == count_windows("tiny-llama", tiny_dataset, 16)
    assert passages_action(have, _spec(tiny_dataset)) == f"use ≥ {have:,} passages"
    assert passages_action(10**6) == "use ≥ 1,000,000 passages"  # numbers alone: no data known


def test_more_than_the_data_gives_says_what_would_give_it(tiny_dataset):
    spec = _spec(tiny_dataset, T=32)
    source = window_source("tiny-llama", tiny_dataset)
    have, packed = source.count(32, "windows"), source.count(32, "packed")
    action = passages_action(have + 1, spec)
    assert action.startswith(f"use ≥ {have + 1:,} passages: tiny_passages.txt gives {have:,} ")
    assert "windows of 32 tokens here" in action and action.endswith("would give them")
    assert (f"packed windows of 32 tokens ({packed:,})" in action) == (packed >= have + 1)
    halved = source.count(16, "windows")  # the longest halving that gives them (>= 16 tokens)
    assert f"windows of 16 tokens ({halved:,})" in action
    assert LARGER_CORPUS in action
    huge = passages_action(10**7, spec)
    assert "windows of 16 tokens" not in huge and LARGER_CORPUS in huge
    docs = _spec(tiny_dataset, "documents")
    n_docs = supply(docs).available
    assert f"gives {n_docs:,} documents here" in passages_action(n_docs + 1, docs)
    assert supply(replace(spec, dataset="hf:org/name:train")).available is None
    assert passages_action(10**6, replace(spec, dataset="hf:org/name:train")) == (
        "use ≥ 1,000,000 passages"
    )


def test_the_trust_sentence_and_the_bos_answer_use_it(tiny_dataset):
    spec = _spec(tiny_dataset)
    t = assess(300, 64, metric="unbiased_cka", point=0.2, layers=4)
    assert t.action == f"use ≥ {t.action_n:,} passages" and t.action_n > 300
    checked = with_supply(t, spec)
    assert checked.action == passages_action(t.action_n, spec) != t.action
    a = position0_answer(9.5, 13.0, band_default=1.0, band_no_pos0=1.0, n=512, spec=spec)
    assert a.action == passages_action(2048, spec) and a.action in a.sentence
