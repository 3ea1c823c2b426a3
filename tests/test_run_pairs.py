"""Differences of two runs, paired by passage when they hold the same passages."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from deffcore.inputs.run_spec import RunSpec
from deffcore.lenses.bos_on_off import bos_on_off_conclusion
from deffcore.measures.synthetic import position0_construction
from deffcore.runs.run_pairs import run_difference, same_passages
from deffcore.statistics.paired import paired_bootstrap

BASE = RunSpec("tiny-llama", None, "bbc-news", 384, 32, 0, "float32", passages="windows")


def _run(spec: RunSpec, states: np.ndarray, kept=None):
    meta = {} if kept is None else {"kept_indices": kept}
    return SimpleNamespace(
        spec=spec, n=states.shape[1], pooled=SimpleNamespace(meta=meta), states=lambda p: states
    )


def test_which_runs_hold_the_same_passages():
    x = np.zeros((3, 384, 4), np.float32)
    a = _run(BASE, x)
    assert same_passages(a, _run(replace(BASE, intervention="post_norm"), x)) is None
    assert same_passages(a, _run(replace(BASE, model="random:tiny-llama:3"), x)) is None
    assert "windows differ" in same_passages(a, _run(replace(BASE, bos="none"), x))
    docs = replace(BASE, passages="documents")
    assert same_passages(_run(docs, x), _run(replace(docs, bos="none"), x)) is None
    assert "seed" in same_passages(a, _run(replace(BASE, seed=1), x))
    assert "tokenizers" in same_passages(a, _run(replace(BASE, model="tiny-gpt2"), x))
    assert "kept different" in same_passages(
        _run(docs, x, [0, 1, 2]), _run(replace(docs, bos="none"), x, [0, 1, 3])
    )


def test_same_passages_are_paired_by_passage_and_narrower_than_unpaired():
    c = position0_construction(384, 16, 6, h0=1.0, pos0=1.0, onset=2, seed=8)
    base, variant = _run(BASE, c.no_pos0), _run(replace(BASE, intervention="post_norm"), c.default)
    d = run_difference(base, variant, B=40, seed=2)
    assert d.paired and d.why_unpaired is None
    pb = paired_bootstrap({"a": c.no_pos0, "b": c.default}, B=40, seed=2)
    want = pb.difference(("b", "cka"), ("a", "cka"))
    assert d.delta == pytest.approx(want.delta) and d.interval == pytest.approx(want.interval)
    # the same two stacks as if on other passages (another seed): independent bootstraps
    other = _run(replace(BASE, seed=5, intervention="post_norm"), c.default)
    u = run_difference(base, other, B=40, seed=2)
    assert not u.paired and "seed" in u.why_unpaired and u.delta == pytest.approx(d.delta)
    width = lambda x: x.interval[1] - x.interval[0]  # noqa: E731
    assert width(d) < 0.5 * width(u)


def test_the_on_off_sentence_carries_the_moves_interval():
    c = position0_construction(384, 16, 6, pos0=0.5, onset=2, seed=1)
    d = run_difference(_run(BASE, c.no_pos0), _run(replace(BASE, bos="none"), c.default), B=20)
    s = bos_on_off_conclusion(
        {"pos0_ratio": 171.0, "gap": 9.5}, {"pos0_ratio": 165.0, "gap": 9.6}, d
    )
    assert "unpaired: bos=default and bos=none cut other windows" in s.sentence
    assert f"[{d.interval[0]:+.2f}, {d.interval[1]:+.2f}]" in s.sentence
