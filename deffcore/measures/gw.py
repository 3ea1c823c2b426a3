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

Decisions (the paper gives none; SPEC 13 "GW solver" states them with their evidence):
- **Solver**: "exact" is POT's conditional-gradient solver (`gromov_wasserstein2`), a local
  optimum that depends on its start; `init` names the start and every stored number carries
  it. "both" (the default) keeps the lower GW^2 of the "product" start p q^T (POT's own
  default, taken as the paper's: `PAPER_INIT`; `gw_start_matrices` computes both starts once)
  and the "identity" start I/n (passage a with passage a, the alignment CKA uses): each
  start's value is the cost of a valid coupling, so the lower is the better estimate.
- **Failure**: a plan that is not a coupling (`coupling_problem`: non-finite, negative, or
  rows and columns off the uniform weights by more than MARGINAL_RTOL) raises
  `GWSolverError` with one sentence; nothing is stored.
- "entropic" is `entropic_gromov_wasserstein2` with POT's default projected-gradient solver
  (epsilon = EPSILON = 0.01 on the mean-normalised matrices, entries about 1), started from
  the product coupling. It is biased upwards: on 256 Gaussian points in 32 dimensions a
  rotated, permuted copy gives 0.028 instead of 0 and a different cloud 0.035 (exact: 0.022),
  so entropic values are comparable only with each other. It was not faster than the exact
  solver up to n = 512 (BENCHMARKS.md); epsilon = 0.005 takes a minute per pair at n = 256.
- **Symmetry**: a local solver need not land on the same optimum both ways, so only pairs
  i < j are solved and mirrored (exactly symmetric, zero diagonal); `asymmetry` measures
  |GW(i, j) - GW(j, i)| on some pairs.

Spearman rho over layer pairs i < j (Table S22): rho(GW, CKA), rho(|i - j|, GW),
rho(|i - j|, CKA) (`scipy.stats.spearmanr`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from deffcore.core.checks import check_choice, real_array
from deffcore.core.errors import DeffError, GWSolverError, InvalidStatesError

#: Passages of the subsample per layer (SPEC 13 default).
N_GW = 512
#: Entropic regularisation of the entropic solver, on mean-normalised distance matrices.
EPSILON = 0.01
GW_METRICS: tuple[str, ...] = ("euclidean", "sqeuclidean", "cosine")
SOLVERS: tuple[str, ...] = ("exact", "entropic")
#: Starting couplings of the exact solver (module docstring); the first is the default: the
#: lower GW^2 of the product and identity starts (SPEC 13.1).
INITS: tuple[str, ...] = ("both", "product", "identity")
#: The start whose numbers are compared with the paper's Table S22 (POT's default).
PAPER_INIT = "product"
#: The single starts the default takes the minimum of.
STARTS: tuple[str, ...] = ("product", "identity")
#: A coupling's rows and columns must sum to the uniform weights within this (relative). The
#: entropic solver's Sinkhorn stops after 1,000 iterations with column sums off by up to 0.3%
#: at epsilon = 0.01 on 128 Gaussian points: such a plan is kept; a failed one is off by 100%.
MARGINAL_RTOL = 1e-2

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
    check_choice(metric, GW_METRICS, "GW metric")
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
    init: str = INITS[0],
) -> float:
    """GW^2 between two clouds given by their (n, n) distance matrices, uniform weights,
    square loss (see the module docstring for the solver, `epsilon` and `init`). Raises
    GWSolverError when a solve gives no valid coupling."""
    check_choice(solver, SOLVERS, "GW solver")
    check_choice(init, INITS, "GW init")
    C1 = _distances(C1, "C1")
    C2 = _distances(C2, "C2")
    if solver == "entropic":
        init = "product"  # the entropic solver starts from the product coupling
    names = STARTS if init == "both" else (init,)
    return min(_solve(C1, C2, _start(C1, C2, name), solver, epsilon) for name in names)


def _distances(C: Any, name: str) -> np.ndarray:
    """`C` as a float64 (n, n) distance matrix: real, finite, >= 0 and symmetric (the square
    loss is solved as symmetric), else one sentence (InvalidStatesError) naming `name` --
    (N, d) states where distances belong included (`distance_matrix` makes them)."""
    out = real_array(C)
    shape = None if out is None else out.shape
    ok = out is not None and out.ndim == 2 and out.shape[0] == out.shape[1] and out.size > 0
    if ok and np.all(np.isfinite(out)) and out.min() >= 0:
        scale = max(1.0, float(out.max()))
        if float(np.abs(out - out.T).max()) <= 1e-9 * scale:
            return out
    raise InvalidStatesError(
        f"{name} must be an (n, n) matrix of pairwise distances: finite, >= 0 and symmetric "
        f"(got {'not real numbers' if out is None else f'shape {shape}'}); make one from "
        "(n, d) points with gw.distance_matrix."
    )


def _start(C1: np.ndarray, C2: np.ndarray, name: str) -> np.ndarray | None:
    """The starting coupling `name` of `STARTS` as POT's G0 (None: its default, the product)."""
    if name == "product":
        return None  # POT's default: the product coupling p q^T
    if C1.shape != C2.shape:
        raise DeffError("The identity coupling needs the same number of points in both clouds.")
    return np.eye(C1.shape[0]) / C1.shape[0]


def _solve(
    C1: np.ndarray, C2: np.ndarray, G0: np.ndarray | None, solver: str, epsilon: float
) -> float:
    """One POT solve from the start G0 (None: the product coupling); its value, checked."""
    import warnings

    ot = _ot()
    p, q = _uniform(C1.shape[0]), _uniform(C2.shape[0])
    # POT's own warnings (and numpy's, from an underflowing Sinkhorn) are replaced by the
    # check below, which says in one sentence what failed
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        if solver == "exact":
            v, log = ot.gromov.gromov_wasserstein2(
                C1, C2, p, q, loss_fun="square_loss", symmetric=True, G0=G0, log=True
            )
        else:
            v, log = ot.gromov.entropic_gromov_wasserstein2(
                C1, C2, p, q, loss_fun="square_loss", epsilon=epsilon, symmetric=True, log=True
            )
    problem = coupling_problem(np.asarray(log["T"], dtype=np.float64), p, q, float(v))
    if problem is not None and solver == "entropic":
        larger = EPSILON if epsilon < EPSILON else 10 * epsilon
        raise GWSolverError(
            f"The entropic GW solver (epsilon = {epsilon:g}) gave no valid coupling: {problem}; "
            f"try epsilon = {larger:g} or the exact solver."
        )
    if problem is not None:
        raise GWSolverError(f"The exact GW solver gave no valid coupling: {problem}.")
    return max(float(v), 0.0)  # round-off can give -1e-17 for identical clouds


def coupling_problem(T: np.ndarray, p: np.ndarray, q: np.ndarray, value: float) -> str | None:
    """Why T (n, m) with GW value `value` is not a coupling of the weights p (n,), q (m,), or
    None: non-finite entries or value, negative entries, or rows / columns off their weights
    by more than MARGINAL_RTOL (relative)."""
    if not (np.isfinite(T).all() and np.isfinite(value)):
        return "its plan or value is not finite"
    floor = -MARGINAL_RTOL * min(p.min(), q.min())
    if T.min() < floor:
        return "its plan has negative entries"
    rows, cols = T.sum(axis=1), T.sum(axis=0)
    off = max(np.max(np.abs(rows - p) / p), np.max(np.abs(cols - q) / q))
    if off > MARGINAL_RTOL:
        return (
            f"its plan's rows and columns do not sum to the uniform weights (total mass "
            f"{T.sum():.3g} instead of 1)"
        )
    return None


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
    init: str = INITS[0],
    progress: ProgressFn | None = None,
) -> np.ndarray:
    """states (L, N, d) -> (L, L) GW^2 matrix of the layers' point clouds.

    A seeded subsample of min(n, N) passages (the same rows in every layer); per layer the
    mean-normalised distance matrix under `metric`; GW^2 for pairs i < j, mirrored (exactly
    symmetric, zero diagonal). progress(done, total, stage) after each pair. With the default
    start ("both") it is the elementwise minimum of `gw_start_matrices`' two matrices.
    """
    if init == "both" and solver == "exact":
        by_start = gw_start_matrices(states, n, seed, metric, progress=progress)
        return np.minimum(by_start["product"], by_start["identity"])
    return _matrices(states, n, seed, metric, (init,), solver, epsilon, progress)[init]


def gw_start_matrices(
    states: np.ndarray,
    n: int = N_GW,
    seed: int = 0,
    metric: str = "euclidean",
    *,
    progress: ProgressFn | None = None,
) -> dict[str, np.ndarray]:
    """{start: (L, L) GW^2 matrix} of the exact solver from each of `STARTS` (the product
    start, the paper's, and the identity start), every pair solved once from each; the
    default "both" is their elementwise minimum (SPEC 13.1)."""
    return _matrices(states, n, seed, metric, STARTS, "exact", EPSILON, progress)


def _matrices(
    states: np.ndarray,
    n: int,
    seed: int,
    metric: str,
    inits: tuple[str, ...],
    solver: str,
    epsilon: float,
    progress: ProgressFn | None,
) -> dict[str, np.ndarray]:
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
    out = {init: np.zeros((L, L)) for init in inits}
    pairs = [(i, j) for i in range(L) for j in range(i + 1, L)]
    for done, (i, j) in enumerate(pairs, 1):
        for init, G in out.items():
            G[i, j] = G[j, i] = gw_distance(C[i], C[j], solver=solver, epsilon=epsilon, init=init)
        if progress is not None:
            progress(done, len(pairs), "Gromov–Wasserstein pairs")
    return out


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
