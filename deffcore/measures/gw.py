"""Gromov–Wasserstein distance between layers (paper Table S22, SPEC section 13).

CKA compares two layers through the *same* passages (row i of one layer with row i of the
other). Gromov–Wasserstein (GW; Mémoli 2011) compares the two point clouds only through their
internal distances, with no correspondence given: it looks for the coupling T of the passages
of layer i with those of layer j that best preserves distances,

    GW^2(C1, C2) = min_T  sum_{a,b,c,e} (C1[a, c] - C2[b, e])^2 T[a, b] T[c, e],

T a coupling of the uniform weights (rows and columns of T sum to 1/n). We report this squared
value (`ot.gromov.gromov_wasserstein2`, square loss), as POT returns it.

Per layer (SPEC 13): a seeded subsample of `n` passages (the same passages for every layer),
the pairwise distance matrix of their pooled states under `metric` ("euclidean" by default;
"sqeuclidean" and "cosine" = 1 - cosine similarity are offered), divided by its mean
off-diagonal entry so that GW, like CKA, ignores the overall scale of a layer.

Decisions (the paper gives none):
- **Solver**: "exact" is POT's conditional-gradient solver of the non-convex GW problem
  (`gromov_wasserstein2`), which finds a local optimum. It is run from two starting couplings
  and the smaller value is kept (each is the cost of a valid coupling, so an upper bound of
  the global GW^2, and the smaller is the better estimate): the product coupling p q^T (POT's
  default, which knows nothing of passages) and the identity coupling I/n (passage a of layer
  i with passage a of layer j: the alignment CKA uses, so GW^2 never exceeds the cost of that
  alignment). `init` selects "both" (default), "product" or "identity".
- "entropic" is `entropic_gromov_wasserstein2` with POT's default projected-gradient solver
  (epsilon = EPSILON = 0.01 by default, on the mean-normalised matrices whose entries are about
  1), started from the product coupling. It smooths the coupling and is biased upwards: on
  256 Gaussian points in 32 dimensions a rotated, permuted copy gives 0.028 instead of 0 and a
  different cloud 0.035 (exact: 0.022), so entropic values are comparable with each other,
  not with exact ones. On this machine it was not faster than the exact solver up to n = 512
  (BENCHMARKS.md); smaller epsilon converges slowly (0.005: a minute per pair at n = 256).
- **Symmetry**: GW^2(C1, C2) = GW^2(C2, C1) for the global optimum; a local solver need not
  land on the same optimum both ways. Only pairs i < j are solved and mirrored, so the matrix
  is exactly symmetric with an exactly zero diagonal; `asymmetry` (tests, `check_pairs`)
  measures |GW(i, j) - GW(j, i)| on some pairs to show how far apart the two directions are.

Spearman rho over layer pairs i < j (Table S22): rho(GW, CKA), rho(|i - j|, GW),
rho(|i - j|, CKA) (`scipy.stats.spearmanr`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from deffcore.core.errors import DeffError, InvalidStatesError

#: Passages of the subsample per layer (SPEC 13 default).
N_GW = 512
#: Entropic regularisation of the entropic solver, on mean-normalised distance matrices.
EPSILON = 0.01
GW_METRICS: tuple[str, ...] = ("euclidean", "sqeuclidean", "cosine")
SOLVERS: tuple[str, ...] = ("exact", "entropic")
INITS: tuple[str, ...] = ("both", "product", "identity")

ProgressFn = Callable[[int, int, str], None]


def _ot():
    try:
        import ot  # POT, https://pythonot.github.io
    except ImportError as err:  # pragma: no cover - requirements.txt pins it
        raise DeffError(
            "Gromov–Wasserstein needs POT (Python Optimal Transport): pip install -r "
            "requirements.txt."
        ) from err
    return ot


def distance_matrix(X: np.ndarray, metric: str = "euclidean") -> np.ndarray:
    """X (n, d) -> (n, n) float64 distances divided by their mean off-diagonal entry.

    Zero diagonal, symmetric exactly. A cloud whose points all coincide has no scale: its
    matrix is all zeros (left as is).
    """
    if metric not in GW_METRICS:
        raise DeffError(f"Unknown GW metric {metric!r}; choose one of {', '.join(GW_METRICS)}.")
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 2:
        raise InvalidStatesError(f"A point cloud must be (n >= 2, d); got shape {X.shape}.")
    if metric == "cosine":
        norms = np.linalg.norm(X, axis=1, keepdims=True)
        U = X / np.where(norms > 0, norms, 1.0)
        D = 1.0 - U @ U.T
    else:
        sq = np.sum(X * X, axis=1)
        D = sq[:, None] + sq[None, :] - 2.0 * (X @ X.T)
        if metric == "euclidean":
            D = np.sqrt(np.clip(D, 0.0, None))
    D = np.clip((D + D.T) / 2.0, 0.0, None)
    np.fill_diagonal(D, 0.0)
    n = D.shape[0]
    mean = D.sum() / (n * (n - 1))
    return D / mean if mean > 0 else D


def _uniform(n: int) -> np.ndarray:
    return np.full(n, 1.0 / n)


def gw_distance(
    C1: np.ndarray,
    C2: np.ndarray,
    *,
    solver: str = "exact",
    epsilon: float = EPSILON,
    init: str = "both",
) -> float:
    """GW^2 between two clouds given by their (n, n) distance matrices, uniform weights,
    square loss (see the module docstring for the solver, `epsilon` and `init`)."""
    if solver not in SOLVERS:
        raise DeffError(f"Unknown GW solver {solver!r}; choose one of {', '.join(SOLVERS)}.")
    if init not in INITS:
        raise DeffError(f"Unknown GW init {init!r}; choose one of {', '.join(INITS)}.")
    ot = _ot()
    C1 = np.asarray(C1, dtype=np.float64)
    C2 = np.asarray(C2, dtype=np.float64)
    p, q = _uniform(C1.shape[0]), _uniform(C2.shape[0])
    starts = []
    if solver == "entropic":
        init = "product"  # the entropic solver starts from the product coupling
    if init in ("both", "product"):
        starts.append(None)  # POT's default: the product coupling p q^T
    if init in ("both", "identity"):
        if C1.shape != C2.shape:
            raise DeffError("The identity coupling needs the same number of points in both clouds.")
        starts.append(np.eye(C1.shape[0]) / C1.shape[0])
    values = []
    for G0 in starts:
        if solver == "exact":
            v = ot.gromov.gromov_wasserstein2(
                C1, C2, p, q, loss_fun="square_loss", symmetric=True, G0=G0
            )
        else:
            v = ot.gromov.entropic_gromov_wasserstein2(
                C1, C2, p, q, loss_fun="square_loss", epsilon=epsilon, symmetric=True
            )
        values.append(max(float(v), 0.0))  # round-off can give -1e-17 for identical clouds
    return min(values)


def subsample(N: int, n: int, seed: int) -> np.ndarray:
    """Indices of min(n, N) passages drawn without replacement with `seed`, sorted."""
    rng = np.random.default_rng(seed)
    take = min(int(n), int(N))
    return np.sort(rng.choice(N, size=take, replace=False))


def gw_matrix(
    states: np.ndarray,
    n: int = N_GW,
    seed: int = 0,
    metric: str = "euclidean",
    *,
    solver: str = "exact",
    epsilon: float = EPSILON,
    init: str = "both",
    progress: ProgressFn | None = None,
) -> np.ndarray:
    """states (L, N, d) -> (L, L) GW^2 matrix of the layers' point clouds.

    A seeded subsample of min(n, N) passages (the same rows in every layer); per layer the
    mean-normalised distance matrix under `metric`; GW^2 for pairs i < j, mirrored (exactly
    symmetric, zero diagonal). progress(done, total, stage) after each pair.
    """
    states = np.asarray(states)
    if states.ndim != 3 or states.shape[0] < 2 or states.shape[1] < 2:
        raise InvalidStatesError(
            f"GW needs states of shape (L >= 2, N >= 2, d); got {states.shape}."
        )
    if int(n) < 2:
        raise DeffError(f"The GW subsample needs at least 2 passages; got n = {n}.")
    L = states.shape[0]
    rows = subsample(states.shape[1], n, seed)
    C = [distance_matrix(states[layer][rows], metric) for layer in range(L)]
    G = np.zeros((L, L))
    pairs = [(i, j) for i in range(L) for j in range(i + 1, L)]
    for done, (i, j) in enumerate(pairs, 1):
        G[i, j] = G[j, i] = gw_distance(C[i], C[j], solver=solver, epsilon=epsilon, init=init)
        if progress is not None:
            progress(done, len(pairs), "Gromov–Wasserstein pairs")
    return G


def asymmetry(
    C: Sequence[np.ndarray], pairs: Sequence[tuple[int, int]], **solver_args: Any
) -> float:
    """max over `pairs` of |GW(C[i], C[j]) - GW(C[j], C[i])| (both directions solved)."""
    return max(
        abs(gw_distance(C[i], C[j], **solver_args) - gw_distance(C[j], C[i], **solver_args))
        for i, j in pairs
    )


def pair_spearman(G: np.ndarray, S: np.ndarray) -> dict[str, float]:
    """Spearman rho over layer pairs i < j: (GW, CKA), (|i - j|, GW), (|i - j|, CKA)."""
    from scipy.stats import spearmanr

    G = np.asarray(G, dtype=np.float64)
    S = np.asarray(S, dtype=np.float64)
    if G.shape != S.shape or G.ndim != 2 or G.shape[0] < 3:
        raise InvalidStatesError(
            f"The GW and similarity matrices must be the same square shape with at least 3 "
            f"layers; got {G.shape} and {S.shape}."
        )
    iu = np.triu_indices(G.shape[0], k=1)
    lag = (iu[1] - iu[0]).astype(np.float64)
    g, s = G[iu], S[iu]

    def rho(a: np.ndarray, b: np.ndarray) -> float:
        if np.ptp(a) == 0 or np.ptp(b) == 0:
            return math.nan
        return float(spearmanr(a, b)[0])

    return {
        "spearman_gw_cka": rho(g, s),
        "spearman_lag_gw": rho(lag, g),
        "spearman_lag_cka": rho(lag, s),
    }
