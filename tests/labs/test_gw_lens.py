"""The GW lens's store: `stored_gw` reads a result without computing, keyed by every option."""

from __future__ import annotations

from dataclasses import replace

import pytest

from deffcore.labs import gw_lens
from deffcore.runs.measure import measure


def test_stored_gw_reads_without_computing(tiny_dataset, monkeypatch):
    m = measure("tiny-llama", dataset=tiny_dataset, n=10, max_tokens=16)
    eight = gw_lens.GwOptions(n_gw=8)
    assert gw_lens.stored_gw(m, eight) is None  # nothing stored yet, nothing computed
    computed = gw_lens.gw_lens(m, eight)
    assert computed["cached"] is False

    def no_compute(*args, **kwargs):
        raise AssertionError("a stored GW result is read, not computed")

    monkeypatch.setattr(gw_lens, "gw_matrix", no_compute)
    stored = gw_lens.stored_gw(m, eight)
    assert stored["cached"] is True and stored["gw"] == computed["gw"]
    assert gw_lens.gw_lens(m, eight) == stored
    for other in ({"n_gw": 6}, {"seed": 1}, {"pooling": "token_normed"}, {"init": "product"},
                  {"solver": "entropic"}):  # fmt: skip
        assert gw_lens.stored_gw(m, replace(eight, **other)) is None
    with pytest.raises(AssertionError, match="read, not computed"):
        gw_lens.gw_lens(m, replace(eight, seed=1))


def test_the_identity_names_epsilon_only_where_the_entropic_solver_reads_it():
    exact, entropic = gw_lens.GwOptions(), gw_lens.GwOptions(solver="entropic")
    assert exact.identity("k", "cka") == replace(exact, epsilon=0.5).identity("k", "cka")
    assert exact.identity("k", "cka")["epsilon"] is None
    assert entropic.identity("k", "cka") != replace(entropic, epsilon=0.5).identity("k", "cka")
    assert entropic.identity("k", "cka")["epsilon"] == gw_lens.EPSILON
    assert exact.identity("k", "cka") != exact.identity("k", "unbiased_cka")  # the run's metric
    assert exact.identity("k", "cka") != exact.identity("j", "cka")  # and the run
