"""Synthetic constructions against the finite-sample iid formula and the paper's anchors."""

from __future__ import annotations

import numpy as np
import pytest

import deffcore as dc
from deffcore.errors import DeffError
from deffcore.references import iid_reference_depth, update_depth
from deffcore.synthetic import independent_states, orthogonal_states, orthogonal_updates


def test_independent_states_scaled_anchor() -> None:
    """Same d/N as the paper's anchor (N=10,000, d=1024, L=32: 0.258, rho1 0.093)."""
    n, d, L = 1000, 102, 32
    syn = independent_states(n, d, L, seed=0)
    assert syn.states.shape == (L, n, d) and syn.states.dtype == np.float32
    assert syn.updates is None and syn.h0 is None
    summary = dc.depth_summary(dc.similarity_matrix(syn.states))
    assert summary.deff_over_L == pytest.approx(iid_reference_depth(n, d, L) / L, abs=0.003)
    assert summary.rho1 == pytest.approx(dc.cka_finite_sample_bias(n, d), abs=0.002)
    assert round(summary.deff_over_L, 2) == 0.26 and round(summary.rho1, 2) == 0.09


def test_seeding() -> None:
    a = orthogonal_updates(20, 3, 4, seed=5)
    b = orthogonal_updates(20, 3, 4, seed=5)
    c = orthogonal_updates(20, 3, 4, seed=6)
    np.testing.assert_array_equal(a.states, b.states)
    assert not np.array_equal(a.states, c.states)
    np.testing.assert_array_equal(
        independent_states(9, 2, 3).states, independent_states(9, 2, 3).states
    )


def test_orthogonal_states_give_full_depth() -> None:
    syn = orthogonal_states(300, 40, 12, seed=0)
    s = dc.similarity_matrix(syn.states)
    off = s[~np.eye(12, dtype=bool)]
    np.testing.assert_allclose(off, 0.0, atol=1e-6)
    assert dc.effective_depth(s) / 12 == pytest.approx(1.0, abs=1e-4)


def test_orthogonal_updates_construction_and_trend() -> None:
    n, d, L = 400, 41, 12
    syn = orthogonal_updates(n, d, L, scale=0.5, seed=0)
    np.testing.assert_allclose(np.diff(syn.states_with_h0(), axis=0), syn.updates, atol=0)
    # the updates are independent states: their depth is the iid reference
    ud = update_depth(syn.states_with_h0())
    iid = independent_states(n, d, L, seed=1)
    iid_deff = dc.effective_depth(dc.similarity_matrix(iid.states)) / L
    assert ud.deff_upd_over_L == pytest.approx(iid_deff, abs=0.01)
    assert ud.deff_upd_over_L == pytest.approx(iid_reference_depth(n, d, L) / L, abs=0.01)
    # accumulated states: small and increasing with scale (Table S2 trend), 1/L at scale -> 0
    values = []
    for scale in (0.01, 0.1, 0.3, 1.0):
        states = orthogonal_updates(n, d, L, scale=scale, seed=0).states
        values.append(dc.effective_depth(dc.similarity_matrix(states)) / L)
    assert values == sorted(values)
    assert values[0] == pytest.approx(1 / L, rel=0.01)
    assert values[-1] < dc.reference_depth(L) / L


def test_bad_construction_arguments() -> None:
    with pytest.raises(DeffError, match="at least 2 layers"):
        independent_states(10, 3, 1)
    with pytest.raises(DeffError, match="positive"):
        orthogonal_updates(10, 3, 4, scale=0.0)
    with pytest.raises(DeffError, match="n > layers"):
        orthogonal_states(5, 3, 8)
    with pytest.raises(DeffError, match="no initial state"):
        independent_states(10, 3, 2).states_with_h0()
