"""Top-PC pooling controls: project the top principal directions out of pooled states.

SPEC section 2: for `top1_pc` / `top3_pc`, each layer's `default` pooled N x d matrix is
column-centred and its top-1 / top-3 right singular vectors are projected out:

    X_c = X - mean(X)          (N, d)
    X_c = U S V^T              V_k = first k columns of V   (d, k)
    out = X_c - X_c V_k V_k^T  (N, d)

Decision: the output stays centred (CKA re-centres anyway; cosine then compares centred,
PC-removed vectors). k is capped at min(N, d) - nothing is left to remove beyond the rank.

The top-k right singular vectors are the top-k eigenvectors of the smaller of the two
symmetric products, X_c^T X_c (d x d) or X_c X_c^T (N x N; then V_k = X_c^T U_k / s_k),
taken with `eigh` in float64. A full SVD of the N x d matrix gives the same directions but
was 40x slower on a 2-core CPU (5 s against 0.13 s per 512 x 576 layer) and only the top few
directions, the best-conditioned ones, are needed. The result has the input's floating dtype.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from deffcore.core.checks import check_choice
from deffcore.core.constants import PC_CONTROLS
from deffcore.core.errors import DeffError, InvalidStatesError
from deffcore.core.lazy import torch  # imported on first use
from deffcore.measures.similarity import _as_tensor, _validated


def remove_top_pcs(pooled: Any, k: int) -> np.ndarray | torch.Tensor:
    """pooled (N, d) -> (N, d): centred, with its top-k right singular vectors projected out.

    Returns the same kind (numpy / torch on the same device) as the input.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise DeffError(f"The number of principal directions to remove must be >= 0; got {k!r}.")
    x = _as_tensor(pooled)
    if x.ndim != 2:
        raise InvalidStatesError(
            f"remove_top_pcs takes one (N, d) pooled matrix; got shape {tuple(x.shape)}."
        )
    if not bool(torch.isfinite(x).all()):
        raise InvalidStatesError("The pooled matrix contains NaN or inf values.")
    out_dtype = x.dtype if x.is_floating_point() else torch.float64
    xc = x.to(torch.float64)
    xc = xc - xc.mean(dim=0, keepdim=True)
    k = min(k, *xc.shape)
    if k > 0:
        v = _top_right_singular_vectors(xc, k)  # (d, k)
        xc = xc - (xc @ v) @ v.T
    out = xc.to(out_dtype)
    return out.cpu().numpy() if isinstance(pooled, np.ndarray) else out


@contextmanager
def _one_cpu_thread(device: torch.device) -> Iterator[None]:
    """Run LAPACK on one thread: its multi-threaded CPU path spun for seconds per call on a
    busy 2-core machine (8 s against 0.03 s for one 576 x 576 eigh), and matrices this small
    gain nothing from threads."""
    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _top_right_singular_vectors(xc: torch.Tensor, k: int) -> torch.Tensor:
    """Centred float64 (N, d) -> its top-k right singular vectors as columns (d, k)."""
    n, d = xc.shape
    if d <= n:
        with _one_cpu_thread(xc.device):
            _, vecs = torch.linalg.eigh(xc.T @ xc)  # ascending eigenvalues
        return vecs[:, -k:].flip(1)
    with _one_cpu_thread(xc.device):
        vals, vecs = torch.linalg.eigh(xc @ xc.T)
    u = vecs[:, -k:].flip(1)  # (N, k)
    s = vals[-k:].flip(0).clamp_min(0).sqrt()
    v = xc.T @ u  # (d, k), columns of norm s
    keep = s > s.max() * 1e-12 if s.numel() else s > 0
    # directions with no variance carry nothing to project out
    return v[:, keep] / s[keep]


def apply_pc_control(states: Any, control: str) -> np.ndarray | torch.Tensor:
    """states (L, N, d) -> (L, N, d) with `remove_top_pcs` applied per layer.

    control: "top1_pc" or "top3_pc" (see `deffcore.core.constants.PC_CONTROLS`).
    """
    check_choice(control, PC_CONTROLS, "PC control")
    x = _validated(states, min_layers=1, min_passages=2)
    k = PC_CONTROLS[control]
    out = torch.stack([remove_top_pcs(x[i], k) for i in range(x.shape[0])])
    return out.cpu().numpy() if not isinstance(states, torch.Tensor) else out
