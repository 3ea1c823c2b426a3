"""Top-PC controls against a direct SVD construction."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import deffcore as dc
from deffcore.core.errors import DeffError, InvalidStatesError
from deffcore.measures.controls import apply_pc_control, remove_top_pcs


def spiked(n: int = 80, d: int = 6, seed: int = 0) -> np.ndarray:
    """Data with three strong known directions (the first three axes) and a mean offset."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d)) * np.array([20.0, 10.0, 5.0, 1.0, 0.9, 0.8])
    return x + 3.0


def test_removes_exactly_the_top_directions() -> None:
    x = spiked()
    xc = x - x.mean(axis=0)
    _, s, vt = np.linalg.svd(xc, full_matrices=False)
    for k in (1, 3):
        out = remove_top_pcs(x, k)
        np.testing.assert_allclose(out.mean(axis=0), 0.0, atol=1e-10)
        np.testing.assert_allclose(out @ vt[:k].T, 0.0, atol=1e-9)  # removed directions gone
        np.testing.assert_allclose(out @ vt[k:].T, xc @ vt[k:].T, atol=1e-9)  # rest untouched
        # the remaining singular values are exactly the tail of the original spectrum
        np.testing.assert_allclose(np.linalg.svd(out, compute_uv=False)[: 6 - k], s[k:], rtol=1e-9)


def test_k_zero_is_centring_and_k_is_capped_at_rank() -> None:
    x = spiked()
    np.testing.assert_allclose(remove_top_pcs(x, 0), x - x.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(remove_top_pcs(x[:, :2], 3), 0.0, atol=1e-9)


def test_apply_pc_control_per_layer_and_types() -> None:
    states = np.stack([spiked(seed=i) for i in range(3)]).astype(np.float32)
    out = apply_pc_control(states, "top3_pc")
    assert out.shape == states.shape and out.dtype == np.float32
    for i in range(3):
        np.testing.assert_allclose(out[i], remove_top_pcs(states[i], 3), atol=1e-5)
    t = apply_pc_control(torch.from_numpy(states), "top1_pc")
    assert isinstance(t, torch.Tensor)
    np.testing.assert_allclose(t.numpy(), apply_pc_control(states, "top1_pc"), atol=1e-6)
    # a shared dominant direction inflates CKA; removing it lowers it
    rng = np.random.default_rng(5)
    common = rng.standard_normal((200, 1)) * 30 @ rng.standard_normal((1, 8))
    layers = np.stack([common + rng.standard_normal((200, 8)) for _ in range(4)])
    before = dc.effective_depth(dc.similarity_matrix(layers))
    after = dc.effective_depth(dc.similarity_matrix(apply_pc_control(layers, "top1_pc")))
    assert after > before + 1.0


def test_bad_control_and_input() -> None:
    with pytest.raises(DeffError, match="Unknown PC control 'top2_pc'"):
        apply_pc_control(np.zeros((2, 4, 3)), "top2_pc")
    with pytest.raises(InvalidStatesError, match="one \\(N, d\\) pooled matrix"):
        remove_top_pcs(np.zeros((2, 4, 3)), 1)
    with pytest.raises(DeffError, match=">= 0"):
        remove_top_pcs(np.zeros((4, 3)), -1)


def test_wide_matrix_takes_the_gram_branch_and_matches_svd() -> None:
    # N < d: the directions come from the N x N Gram matrix; they must equal the SVD's.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((12, 40)) * np.linspace(9.0, 0.5, 40)
    xc = x - x.mean(axis=0)
    _, _, vt = np.linalg.svd(xc, full_matrices=False)
    for k in (1, 3):
        expected = xc - xc @ vt[:k].T @ vt[:k]
        np.testing.assert_allclose(remove_top_pcs(x, k), expected, atol=1e-9)
