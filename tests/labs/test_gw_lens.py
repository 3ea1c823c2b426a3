"""The GW lens's store: `stored_gw` reads a result without computing, keyed by every option."""

from __future__ import annotations

import pytest

from deffcore.labs import gw_lens
from deffcore.runs.measure import measure


def test_stored_gw_reads_without_computing(tiny_dataset, monkeypatch):
    m = measure("tiny-llama", dataset=tiny_dataset, n=10, max_tokens=16)
    assert gw_lens.stored_gw(m, n_gw=8) is None  # nothing stored yet, nothing computed
    computed = gw_lens.gw_lens(m, n_gw=8)
    assert computed["cached"] is False

    def no_compute(*args, **kwargs):
        raise AssertionError("a stored GW result is read, not computed")

    monkeypatch.setattr(gw_lens, "gw_matrix", no_compute)
    stored = gw_lens.stored_gw(m, n_gw=8)
    assert stored["cached"] is True and stored["gw"] == computed["gw"]
    assert gw_lens.gw_lens(m, n_gw=8) == stored
    for other in ({"n_gw": 6}, {"n_gw": 8, "seed": 1}, {"n_gw": 8, "pooling": "token_normed"},
                  {"n_gw": 8, "init": "product"}):  # fmt: skip
        assert gw_lens.stored_gw(m, **other) is None
    with pytest.raises(AssertionError, match="read, not computed"):
        gw_lens.gw_lens(m, n_gw=8, seed=1)
