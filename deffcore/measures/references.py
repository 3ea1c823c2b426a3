"""Matched references, update-based depth and the finite-sample iid reference (SPEC 5-7).

Closed form (SPEC section 5). Updates m = 1..L with sizes a_m, an optional persistent initial
state of size a_0 (index 0, uncorrelated with the updates), and update correlations
r(|m-n|) (r(0) = 1):

    G_ij = a_0 + sum_{m<=i, n<=j} r(|m-n|) sqrt(a_m a_n)       S(i, j) = G_ij^2 / (G_ii G_jj)

With r = delta this is A_min/A_max, A_l = a_0 + sum_{m<=l} a_m; equal a_m and a_0 = 0 give
min(i,j)/max(i,j), whose effective depth is F_L = 2L/(L+1).

Matched references from measured states h_0 .. h_L (all pooled the same way):

    F_norm      a_m = ||f_m||_F^2 of the centred pooled updates f_m = h_m - h_{m-1}, a_0 = 0
    F_h0+norm   the same with a_0 = ||h_0||_F^2 (centred pooled)
    F_h0+corr   also r(k) = sqrt(max(rho_upd(k), 0)), rho_upd the lag profile of the
                similarity matrix of the updates (same metric as the states)

Decision: the references are computed with the same closed form whatever the metric
(the form is exact for linear CKA of isotropic updates); only rho_upd and D_eff follow the
chosen metric.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from deffcore.core.errors import DeffError
from deffcore.core.lazy import torch  # imported on first use
from deffcore.measures.depth import effective_depth, gap_percent, lag_profile, reference_depth
from deffcore.measures.similarity import _validated, cka_finite_sample_bias, similarity_matrix


def accumulated_similarity(a: Any, *, a0: float = 0.0, r: Any = None) -> np.ndarray:
    """Closed-form similarity of accumulated isotropic updates. a (L,) -> S (L, L) float64.

    a: update sizes a_1..a_L (>= 0); a0: size of the initial state (>= 0);
    r: update lag correlations r[0..], r[0] = 1, length >= L (None: uncorrelated updates).
    """
    from deffcore.core.checks import is_real

    try:  # text or objects: numpy's ValueError, or "1" read as 1.0, is no answer
        given = [np.asarray(v) for v in ((a,) if r is None else (a, r))]
    except (TypeError, ValueError):
        given = []
    if not given or any(v.dtype.kind not in "iuf" for v in given) or not is_real(a0):
        raise DeffError(
            "Update sizes a, the initial size a0 and the lag correlation r must be numbers."
        )
    a = given[0].astype(np.float64)
    if a.ndim != 1 or a.size < 1:
        raise DeffError(
            f"Update sizes must be a 1-D sequence of L >= 1 values; got shape {a.shape}."
        )
    if not np.all(np.isfinite(a)) or np.any(a < 0) or not np.isfinite(a0) or a0 < 0:
        raise DeffError("Update sizes a_m and the initial size a0 must be finite and >= 0.")
    n_layers = a.size
    if r is None:
        corr = np.eye(n_layers)
    else:
        r = np.asarray(r, dtype=np.float64)
        if r.ndim != 1 or r.size < n_layers:
            raise DeffError(
                f"The lag correlation r needs at least L = {n_layers} values (lags 0..L-1); "
                f"got shape {r.shape}."
            )
        if not np.isclose(r[0], 1.0) or not np.all(np.isfinite(r)):
            raise DeffError(
                f"The lag correlation r must be finite with r[0] = 1; got r[0] = {r[0]}."
            )
        lags = np.abs(np.subtract.outer(np.arange(n_layers), np.arange(n_layers)))
        corr = r[lags]
    s = np.sqrt(a)
    g = a0 + np.cumsum(np.cumsum(corr * np.outer(s, s), axis=0), axis=1)  # G_ij, i, j = 1..L
    diag = np.diag(g)
    if np.any(diag <= 0):
        bad = int(np.nonzero(diag <= 0)[0][0]) + 1
        raise DeffError(
            f"The accumulated state at layer {bad} has zero size (a0 and a_1..a_{bad} are all "
            "zero), so its similarity is undefined."
        )
    return g**2 / np.outer(diag, diag)


def iid_reference_depth(n: int, d: int, L: int) -> float:
    """Finite-sample iid reference: D = L / (1 + b (L-1)), b = d/(N+d) (SPEC section 7)."""
    from deffcore.core.checks import is_real

    numbers = all(is_real(v) for v in (n, d, L))
    if not (numbers and n >= 1 and d >= 1 and 1 <= L < np.inf and int(L) == L):
        raise DeffError(
            f"n, d and L must all be numbers >= 1 (L a whole number of layers); got n={n!r}, "
            f"d={d!r}, L={L!r}."
        )
    return L / (1.0 + cka_finite_sample_bias(n, d) * (L - 1))


def _with_h0(states_with_h0: Any) -> torch.Tensor:
    x = _validated(states_with_h0, min_layers=3)  # h_0 plus at least two measured states
    return x if x.is_floating_point() else x.to(torch.float64)


def update_states(states_with_h0: Any) -> np.ndarray | torch.Tensor:
    """h_0 .. h_L (L+1, N, d) -> updates f_1 .. f_L (L, N, d), f_l = h_l - h_{l-1}.

    Returns the input's kind (torch tensor stays a tensor on its device, otherwise numpy).
    """
    x = _validated(states_with_h0, min_layers=2)
    f = x[1:] - x[:-1]
    return f if isinstance(states_with_h0, torch.Tensor) else f.cpu().numpy()


def _centred_sq_norms(x: torch.Tensor) -> np.ndarray:
    """(L, N, d) -> (L,) squared Frobenius norms of the column-centred layers, float64."""
    out = []
    for layer in x:
        layer = layer.to(torch.float64)
        out.append(float((layer - layer.mean(dim=0, keepdim=True)).pow(2).sum()))
    return np.array(out)


@dataclass
class UpdateDepth:
    """Depth of the updates f_l = h_l - h_{l-1} (SPEC section 6)."""

    deff_upd: float
    deff_upd_over_L: float
    rho1_upd: float
    update_to_state_norm: float
    rho_upd: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def update_depth(states_with_h0: Any, metric: str = "cka") -> UpdateDepth:
    """h_0 .. h_L (L+1, N, d) -> D_eff of the updates, rho_upd(1) and mean ||f_l|| / ||h_l||.

    The norm ratio uses centred pooled matrices: mean over l = 1..L of ||f_l||_F / ||h_l||_F.
    """
    x = _with_h0(states_with_h0)
    f = x[1:] - x[:-1]
    s_upd = similarity_matrix(f, metric)
    n_layers = f.shape[0]
    deff = effective_depth(s_upd)
    ratio = np.sqrt(_centred_sq_norms(f) / _centred_sq_norms(x[1:]))
    rho = lag_profile(s_upd)
    return UpdateDepth(
        deff_upd=deff,
        deff_upd_over_L=deff / n_layers,
        rho1_upd=float(rho[0]),
        update_to_state_norm=float(ratio.mean()),
        rho_upd=rho.tolist(),
    )


@dataclass
class MatchedReferences:
    """The four references of SPEC section 5 and the gaps of one measured D_eff to each."""

    deff: float
    F_L: float
    F_norm: float
    F_h0_norm: float
    F_h0_corr: float
    gap_FL: float
    gap_Fnorm: float
    gap_Fh0norm: float
    gap_Fh0corr: float
    a0: float = 0.0
    update_sizes: list[float] = field(default_factory=list)
    rho_upd: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "deff": self.deff,
            "F_L": self.F_L,
            "F_norm": self.F_norm,
            "F_h0+norm": self.F_h0_norm,
            "F_h0+corr": self.F_h0_corr,
            "gap_pct_F_L": self.gap_FL,
            "gap_pct_F_norm": self.gap_Fnorm,
            "gap_pct_F_h0+norm": self.gap_Fh0norm,
            "gap_pct_F_h0+corr": self.gap_Fh0corr,
            "a0": self.a0,
            "update_sizes": list(self.update_sizes),
            "rho_upd": list(self.rho_upd),
        }


def _gap(deff: float, ref: float) -> float:
    return 100.0 * (1.0 - deff / ref)


def matched_references(
    states_with_h0: Any, deff: float | None = None, metric: str = "cka"
) -> MatchedReferences:
    """h_0 .. h_L (L+1, N, d) -> F_L, F_norm, F_h0+norm, F_h0+corr and the gaps of `deff`.

    deff: the measured D_eff to compare (default: D_eff of h_1 .. h_L with `metric`).
    """
    x = _with_h0(states_with_h0)
    states, f = x[1:], x[1:] - x[:-1]
    n_layers = states.shape[0]
    if deff is None:
        deff = effective_depth(similarity_matrix(states, metric))
    a = _centred_sq_norms(f)
    a0 = float(_centred_sq_norms(x[:1])[0])
    rho_upd = lag_profile(similarity_matrix(f, metric))
    r = np.concatenate([[1.0], np.sqrt(np.maximum(rho_upd, 0.0))])
    f_l = reference_depth(n_layers)
    f_norm = effective_depth(accumulated_similarity(a))
    f_h0_norm = effective_depth(accumulated_similarity(a, a0=a0))
    f_h0_corr = effective_depth(accumulated_similarity(a, a0=a0, r=r))
    return MatchedReferences(
        deff=float(deff),
        F_L=f_l,
        F_norm=f_norm,
        F_h0_norm=f_h0_norm,
        F_h0_corr=f_h0_corr,
        gap_FL=gap_percent(deff, n_layers),
        gap_Fnorm=_gap(deff, f_norm),
        gap_Fh0norm=_gap(deff, f_h0_norm),
        gap_Fh0corr=_gap(deff, f_h0_corr),
        a0=a0,
        update_sizes=a.tolist(),
        rho_upd=rho_upd.tolist(),
    )
