"""The GW lens's store: `stored_gw` reads a result without computing, keyed by every option."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from deffcore.core.errors import GWSolverError
from deffcore.labs import gw_lens, store
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
    monkeypatch.setattr(gw_lens, "gw_start_matrices", no_compute)
    stored = gw_lens.stored_gw(m, eight)
    assert stored["cached"] is True and stored["gw"] == computed["gw"]
    assert gw_lens.gw_lens(m, eight) == stored
    for other in ({"n_gw": 6}, {"seed": 1}, {"pooling": "token_normed"}, {"init": "product"},
                  {"init": "identity"}, {"solver": "entropic"}):  # fmt: skip
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
    assert exact.identity("k", "cka")["gw_format"] == gw_lens.GW_FORMAT


def test_the_default_start_is_the_lower_of_two_and_the_papers_is_kept_by_name():
    assert gw_lens.GwOptions().init == "both" and gw_lens.PAPER_INIT == "product"


def test_the_start_is_recorded_and_part_of_the_key(tiny_dataset):
    """The default ("both") result carries the paper's start's matrix and correlations, from
    the same solves: equal to a product-start result of the same options."""
    m = measure("tiny-llama", dataset=tiny_dataset, n=10, max_tokens=16)
    eight = gw_lens.GwOptions(n_gw=8)
    both = gw_lens.gw_lens(m, eight)
    assert both["init"] == "both" and both["paper_start"] is False
    product = gw_lens.gw_lens(m, replace(eight, init="product"))
    assert product["init"] == "product" and product["paper_start"] is True
    assert not product["cached"] and product["paper"] is None
    assert both["paper"]["init"] == "product" and both["paper"]["gw"] == product["gw"]
    for key in ("spearman_gw_cka", "spearman_lag_gw", "spearman_lag_cka"):
        assert both["paper"][key] == product[key]
    assert (np.asarray(both["gw"]) <= np.asarray(product["gw"])).all()
    assert gw_lens.stored_gw(m, eight)["init"] == "both"
    assert gw_lens.stored_gw(m, replace(eight, init="product"))["init"] == "product"
    # the entropic solver starts from the product coupling whatever is asked
    entropic = replace(eight, solver="entropic", epsilon=0.1, init="both")
    ent = gw_lens.gw_lens(m, entropic)
    assert ent["init"] == "product" and ent["paper_start"]


def test_a_result_stored_by_the_old_format_is_never_served(tiny_dataset):
    """A result stored before GW_FORMAT (no format, or format 2, whose "both" result has no
    paper-start figures) is never read back."""
    m = measure("tiny-llama", dataset=tiny_dataset, n=10, max_tokens=16)
    for init in ("both", "product"):
        options = gw_lens.GwOptions(n_gw=8, init=init)
        old = options.identity(m.spec.key(), m.metric)
        old.pop("gw_format")
        store.write_result("gw", old, {"gw": [[0.0]], "init": init, "lab": "gw"})
        store.write_result("gw", {**old, "gw_format": 2}, {"gw": [[0.0]], "init": init})
        assert gw_lens.stored_gw(m, options) is None
    assert gw_lens.stored_gw(m, gw_lens.GwOptions(n_gw=8)) is None


def test_a_failed_solve_stores_nothing(tiny_dataset):
    m = measure("tiny-llama", dataset=tiny_dataset, n=10, max_tokens=16)
    hopeless = gw_lens.GwOptions(n_gw=8, solver="entropic", epsilon=1e-300)
    with pytest.raises(GWSolverError, match="no valid coupling"):
        gw_lens.gw_lens(m, hopeless)
    assert store.list_results("gw") == []
    assert gw_lens.stored_gw(m, hopeless) is None
