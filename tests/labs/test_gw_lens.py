"""The GW lens's store: `stored_gw` reads a result without computing, keyed by every option."""

from __future__ import annotations

from dataclasses import replace

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
    stored = gw_lens.stored_gw(m, eight)
    assert stored["cached"] is True and stored["gw"] == computed["gw"]
    assert gw_lens.gw_lens(m, eight) == stored
    for other in ({"n_gw": 6}, {"seed": 1}, {"pooling": "token_normed"}, {"init": "both"},
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


def test_the_default_start_is_the_papers():
    assert gw_lens.GwOptions().init == "product" == gw_lens.PAPER_INIT


def test_the_start_is_recorded_and_part_of_the_key(tiny_dataset):
    m = measure("tiny-llama", dataset=tiny_dataset, n=10, max_tokens=16)
    eight = gw_lens.GwOptions(n_gw=8)
    product = gw_lens.gw_lens(m, eight)
    assert product["init"] == "product" and product["paper_start"] is True
    both = gw_lens.gw_lens(m, replace(eight, init="both"))
    assert both["init"] == "both" and both["paper_start"] is False and not both["cached"]
    assert gw_lens.stored_gw(m, eight)["init"] == "product"
    assert gw_lens.stored_gw(m, replace(eight, init="both"))["init"] == "both"
    # the entropic solver starts from the product coupling whatever is asked
    entropic = replace(eight, solver="entropic", epsilon=0.1, init="both")
    ent = gw_lens.gw_lens(m, entropic)
    assert ent["init"] == "product" and ent["paper_start"]


def test_a_result_stored_by_the_old_format_is_never_served(tiny_dataset):
    """Before GW_FORMAT 2 the default start was "both" and the identity had no format: such
    a result must not be read back as a product-start one (nor as anything)."""
    m = measure("tiny-llama", dataset=tiny_dataset, n=10, max_tokens=16)
    for init in ("both", "product"):
        options = gw_lens.GwOptions(n_gw=8, init=init)
        old = options.identity(m.spec.key(), m.metric)
        old.pop("gw_format")
        store.write_result("gw", old, {"gw": [[0.0]], "init": init, "lab": "gw"})
        assert gw_lens.stored_gw(m, options) is None
    assert gw_lens.stored_gw(m, gw_lens.GwOptions(n_gw=8)) is None


def test_a_failed_solve_stores_nothing(tiny_dataset):
    m = measure("tiny-llama", dataset=tiny_dataset, n=10, max_tokens=16)
    hopeless = gw_lens.GwOptions(n_gw=8, solver="entropic", epsilon=1e-300)
    with pytest.raises(GWSolverError, match="no valid coupling"):
        gw_lens.gw_lens(m, hopeless)
    assert store.list_results("gw") == []
    assert gw_lens.stored_gw(m, hopeless) is None
