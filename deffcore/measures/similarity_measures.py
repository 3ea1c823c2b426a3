"""Similarity measures beside linear CKA, all layer pairs on the pooled states (SPEC section 17).

    procrustes   ||X_i^T X_j||_*  (centred, ||X||_F = 1)  = 1 - d_Proc^2 / 2
    mutual_knn   mean_a |kNN_i(a) ∩ kNN_j(a)| / k          (Huh et al. 2024)
    cknna        unbiased CKA restricted to mutual kNN pairs (Huh et al. 2024)
    rsa          Spearman (or Pearson) correlation of correlation-distance RDM upper triangles
    svcca        mean canonical correlation after keeping 99% of each layer's variance
    pwcca        Morcos et al. 2018 projection-weighted mean canonical correlation, both ways
    cka          linear CKA (the same number as `similarity_matrix`; here so that the
                 permutation null of `statistics.calibration` treats it like the others)

Every measure is split into a per-layer step (`_prepare`, once per layer: centring, SVD,
k nearest neighbours, ranked RDM) and a per-pair step (`_pair`) that only combines two
prepared layers; all pairs are i < j, the lower triangle is mirrored (S == S.T bitwise) and
the diagonal is 1. The per-pair step also takes a permutation of the second layer's passages,
which is how `statistics.calibration` draws its null without preparing any layer again.

Precision: everything is float64 (the float32 states are converted one layer at a time),
except the Spearman RSA's centred ranks, which are multiples of 1/2 of size below 2^23 and so
are held exactly in float32 (halving the largest buffer). Memory: the prepared layers are held
together; `prepared_bytes` states the size and `measure_matrix` refuses (one sentence) when it
exceeds `max_bytes` instead of allocating it. At L = 30 (31 states), N = 4,096, d = 576:
procrustes / cka / svcca / pwcca 31 x N x d x 8 B = 0.59 GB (pwcca also r x d per layer:
+0.08 GB), knn / cknna 31 x N x k x 16 B = 20 MB (plus one N x 512 float64 block at a time),
rsa 31 x N(N-1)/2 x 4 B = 1.04 GB (Pearson: x 8 B, 2.1 GB).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # annotations only: scipy is imported where it is used
    import scipy.sparse

from deffcore.core.checks import check_choice
from deffcore.core.constants import SPEC17_MEASURES
from deffcore.core.errors import InvalidArgumentError, UndefinedSimilarityError
from deffcore.core.lazy import torch  # imported on first use: the sidebar's picker reads names
from deffcore.measures.similarity import _validated

#: The measures of this module (SPEC section 17).
MEASURES: tuple[str, ...] = ("cka", *SPEC17_MEASURES)
#: Default largest size (bytes) of the prepared layers held at once.
DEFAULT_MAX_BYTES = 4 * 1024**3
#: Rows of one Gram block when finding nearest neighbours.
KNN_ROWS = 512
#: Elements of one float64 chunk of the RSA's correlation of RDM vectors.
RSA_CHUNK = 1 << 22
RSA_METHODS = ("spearman", "pearson")
CCA_SUMMARIES = ("mean", "mean_sq")


@dataclass(frozen=True)
class MeasureOptions:
    """The choices of SPEC section 17 (defaults are the papers')."""

    k: int = 10  # mutual_knn, cknna: neighbours per passage
    rsa_method: str = "spearman"  # rsa: "spearman" or "pearson"
    variance: float = 0.99  # svcca: share of each layer's variance kept
    cca_summary: str = "mean"  # svcca: "mean" of rho (Raghu et al.) or "mean_sq" (repsim)


def _options(measure: str, n: int, opts: MeasureOptions) -> None:
    check_choice(measure, MEASURES, "similarity measure")
    if measure in ("mutual_knn", "cknna"):
        if isinstance(opts.k, bool) or not isinstance(opts.k, int) or not 1 <= opts.k <= n - 1:
            raise InvalidArgumentError(
                f"k (nearest neighbours) must be an integer in 1..N-1 = {n - 1}; got {opts.k!r}."
            )
        if measure == "cknna" and (opts.k < 2 or n < 4):
            raise InvalidArgumentError(
                f"CKNNA needs k >= 2 and N >= 4 (unbiased HSIC); got k = {opts.k}, N = {n}."
            )
    if measure == "rsa":
        if opts.rsa_method not in RSA_METHODS:
            raise InvalidArgumentError(
                f"rsa_method must be one of {', '.join(RSA_METHODS)}; got {opts.rsa_method!r}."
            )
        if n < 4:
            raise InvalidArgumentError(
                f"RSA needs N >= 4 passages (an RDM of >= 6 pairs); got {n}."
            )
    if measure == "svcca":
        if not 0.0 < float(opts.variance) <= 1.0:
            raise InvalidArgumentError(
                f"variance (share kept by SVCCA) must be in (0, 1]; got {opts.variance!r}."
            )
        if opts.cca_summary not in CCA_SUMMARIES:
            raise InvalidArgumentError(
                f"cca_summary must be one of {', '.join(CCA_SUMMARIES)}; got {opts.cca_summary!r}."
            )


def prepared_bytes(
    measure: str, n_states: int, n: int, d: int, opts: MeasureOptions | None = None
) -> int:
    """Bytes of the prepared layers `measure_matrix` holds at once (SPEC section 17)."""
    opts = opts or MeasureOptions()
    r = min(n, d)
    if measure in ("cka", "procrustes", "svcca"):
        per = n * r * 8
    elif measure == "pwcca":
        per = n * r * 8 + r * d * 8
    elif measure in ("mutual_knn", "cknna"):
        per = n * opts.k * 16
    elif measure == "rsa":
        m = n * (n - 1) // 2
        per = m * (4 if opts.rsa_method == "spearman" and m < 2**23 else 8)
    else:
        per = 0
    return int(n_states * per)


# ---------------------------------------------------------------------------------------------
# per-layer preparation


def _centred64(x: np.ndarray, layer: int) -> np.ndarray:
    xc = x - x.mean(axis=0, dtype=np.float64)
    if not np.any(xc):
        raise UndefinedSimilarityError(
            f"Layer {layer} (0-based) has no variance across passages (its centred matrix is "
            "zero), so the similarity is undefined for it."
        )
    return xc


def _basis(xc: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Thin SVD of a centred layer, rank-truncated at numpy's matrix_rank tolerance."""
    u, s, vt = np.linalg.svd(xc, full_matrices=False)
    tol = s[0] * max(xc.shape) * np.finfo(np.float64).eps
    r = max(1, int(np.sum(s > tol)))
    return u[:, :r], s[:r], vt[:r]


@dataclass
class _Knn:
    idx: np.ndarray  # (N, k) neighbour indices, most similar first
    val: np.ndarray  # (N, k) their cosines
    self_hsic: float  # cknna: n(n-3) HSIC_u(A, A), A the kNN-masked cosine kernel


def _unit_rows(x: np.ndarray, layer: int, what: str) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1)
    if np.any(norms == 0):
        raise UndefinedSimilarityError(
            f"Layer {layer} (0-based) has {int(np.sum(norms == 0))} passage(s) whose vector is "
            f"zero, so {what} is undefined for them."
        )
    return x / norms[:, None]


def _knn(x: np.ndarray, k: int, layer: int, cknna: bool, groups: np.ndarray | None = None) -> _Knn:
    """k nearest neighbours by cosine (self excluded), a block of rows at a time; with `groups`
    (a bootstrap replicate's original passage of each row) a row's copies are excluded too."""
    u = _unit_rows(x, layer, "the cosine neighbourhood")
    n = u.shape[0]
    idx = np.empty((n, k), dtype=np.int64)
    val = np.empty((n, k), dtype=np.float64)
    for r0 in range(0, n, KNN_ROWS):
        r1 = min(n, r0 + KNN_ROWS)
        g = u[r0:r1] @ u.T
        g[np.arange(r1 - r0), np.arange(r0, r1)] = -np.inf
        if groups is not None:
            g[groups[r0:r1, None] == groups[None, :]] = -np.inf
        part = np.argpartition(-g, k - 1, axis=1)[:, :k]
        pv = np.take_along_axis(g, part, axis=1)
        # a tie at the k-th cosine (a bootstrap replicate's copies of one passage are exact
        # ties): argpartition picks among the tied at random; take the lowest indices instead
        kth = pv.min(axis=1)
        for row in np.flatnonzero((g >= kth[:, None]).sum(axis=1) > k):
            cand = np.flatnonzero(g[row] >= kth[row])
            cand = cand[np.lexsort((cand, -g[row, cand]))[:k]]
            part[row], pv[row] = cand, g[row, cand]
        # most similar first; equal cosines by index (a stable order, SPEC 17.2)
        order = np.lexsort((part, -pv), axis=1)
        idx[r0:r1] = np.take_along_axis(part, order, axis=1)
        val[r0:r1] = np.take_along_axis(pv, order, axis=1)
    out = _Knn(idx, val, 0.0)
    if cknna:
        a = _sparse(idx, val, np.ones(idx.shape, dtype=bool), n)
        out.self_hsic = _hsic_u(a, a, n)
        if out.self_hsic <= 0:
            raise UndefinedSimilarityError(
                f"Layer {layer} (0-based) has a non-positive unbiased HSIC of its kNN kernel with "
                "itself, so CKNNA is undefined for it."
            )
    return out


def _rsa_vector(
    x: np.ndarray, layer: int, method: str, groups: np.ndarray | None = None
) -> tuple[np.ndarray, float]:
    """Upper triangle (row-major, a < b) of the correlation-distance RDM, centred (ranked for
    Spearman), and its sum of squares; with `groups` (a bootstrap replicate's original passage
    of each row) the entries between copies of one passage are left out."""
    xr = x - x.mean(axis=1, keepdims=True)
    u = _unit_rows(
        xr, layer, "the correlation distance (a passage vector constant across features)"
    )
    n = u.shape[0]
    iu = np.triu_indices(n, k=1)
    if groups is None:
        rdm = 1.0 - (u @ u.T)[iu]
    else:  # each distinct passage's row once, so copies' distances are exact ties
        _, first, inv = np.unique(groups, return_index=True, return_inverse=True)
        keep = groups[iu[0]] != groups[iu[1]]
        ud = u[first]
        rdm = 1.0 - (ud @ ud.T)[inv[iu[0][keep]], inv[iu[1][keep]]]
    if method == "spearman":
        import scipy.stats  # on first use: a run read back from a file never ranks

        rdm = scipy.stats.rankdata(rdm)  # average ranks for ties
    c = rdm - rdm.mean()
    ss = float(np.dot(c, c))
    if ss == 0:
        raise UndefinedSimilarityError(
            f"Layer {layer} (0-based) has an RDM whose entries are all equal, so RSA is "
            "undefined for it."
        )
    if method == "spearman" and c.size < 2**23:
        c = c.astype(np.float32)  # multiples of 1/2 below 2^22: exact in float32
    return c, ss


def _prepare(
    measure: str,
    x: np.ndarray,
    layer: int,
    opts: MeasureOptions,
    groups: np.ndarray | None = None,
) -> Any:
    """One layer (N, d) float64 -> what the pair step of `measure` needs (`groups`: see
    `prepare_layers`)."""
    if measure in ("cka", "procrustes"):
        xc = _centred64(x, layer)
        if xc.shape[0] >= xc.shape[1]:
            z = xc
        else:  # N < d: the scores U S (N x r) give the same Z_i^T Z_j singular values
            u, s, _ = _basis(xc)
            z = u * s
        return z / np.linalg.norm(z)  # Z_i^T Z_j has the singular values of X_i^T X_j / norms
    if measure == "svcca":
        u, s, _ = _basis(_centred64(x, layer))
        share = np.cumsum(s**2) / np.sum(s**2)
        r = int(np.searchsorted(share, opts.variance - 1e-12) + 1)
        return u[:, : min(r, u.shape[1])]
    if measure == "pwcca":
        u, s, vt = _basis(_centred64(x, layer))
        return u, s[:, None] * vt  # U^T X = S V^T: the neurons in the basis
    if measure in ("mutual_knn", "cknna"):
        return _knn(x, opts.k, layer, measure == "cknna", groups)
    return _rsa_vector(x, layer, opts.rsa_method, groups)


# ---------------------------------------------------------------------------------------------
# per-pair step (the second layer's passages optionally permuted)


@dataclass
class Permutation:
    """A permutation pi of the N passages applied to the second layer of a pair (row a of the
    permuted layer is row pi[a]); caches what each measure derives from it."""

    pi: np.ndarray
    _inv: np.ndarray | None = field(default=None, init=False, repr=False)
    _tri: np.ndarray | None = field(default=None, init=False, repr=False)

    @property
    def inv(self) -> np.ndarray:
        if self._inv is None:
            self._inv = np.empty_like(self.pi)
            self._inv[self.pi] = np.arange(self.pi.size)
        return self._inv

    def triangle(self) -> np.ndarray:
        """Index map of an RDM's upper triangle: entry (a, b) of the permuted RDM is entry
        (pi[a], pi[b]) of the original."""
        if self._tri is None:
            n = self.pi.size
            a, b = np.triu_indices(n, k=1)
            pa, pb = self.pi[a], self.pi[b]
            lo, hi = np.minimum(pa, pb), np.maximum(pa, pb)
            self._tri = lo * (2 * n - lo - 1) // 2 + (hi - lo - 1)
        return self._tri


def _sparse(idx: np.ndarray, val: np.ndarray, keep: np.ndarray, n: int) -> scipy.sparse.csr_matrix:
    import scipy.sparse

    rows = np.broadcast_to(np.arange(n)[:, None], idx.shape)
    return scipy.sparse.csr_matrix((val[keep], (rows[keep], idx[keep])), shape=(n, n))


def _hsic_u(a: scipy.sparse.csr_matrix, b: scipy.sparse.csr_matrix, n: int) -> float:
    """n(n-3) x unbiased HSIC (Song et al. 2012) of two zero-diagonal kernels, as Huh et al.'s
    `hsic_unbiased`: tr(A B) + 1'A1 1'B1/((n-1)(n-2)) - 2/(n-2) 1'AB1."""
    t1 = float(a.multiply(b.T).sum())
    t2 = float(a.sum()) * float(b.sum()) / ((n - 1) * (n - 2))
    col_a = np.asarray(a.sum(axis=0)).ravel()
    row_b = np.asarray(b.sum(axis=1)).ravel()
    t3 = 2.0 / (n - 2) * float(col_a @ row_b)
    return t1 + t2 - t3


def _permuted_knn(p: _Knn, perm: Permutation | None) -> tuple[np.ndarray, np.ndarray]:
    if perm is None:
        return p.idx, p.val
    return perm.inv[p.idx[perm.pi]], p.val[perm.pi]


def _cca_pair(ui: np.ndarray, uj: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a, rho, bt = np.linalg.svd(ui.T @ uj, full_matrices=False)
    return a, np.clip(rho, 0.0, 1.0), bt.T


def _pair(measure: str, pi: Any, pj: Any, perm: Permutation | None, opts: MeasureOptions) -> float:
    if measure in ("cka", "procrustes", "svcca", "pwcca"):
        zi = pi[0] if measure == "pwcca" else pi
        zj = pj[0] if measure == "pwcca" else pj
        if perm is not None:
            zj = zj[perm.pi]
        if measure == "cka":
            cross = zi.T @ zj
            return float(np.sum(cross**2) / (np.linalg.norm(zi.T @ zi) * np.linalg.norm(zj.T @ zj)))
        if measure == "procrustes":
            return float(np.linalg.svd(zi.T @ zj, compute_uv=False).sum())
        if measure == "svcca":  # canonical correlations only: no singular vectors
            rho = np.clip(np.linalg.svd(zi.T @ zj, compute_uv=False), 0.0, 1.0)
            return float(rho.mean() if opts.cca_summary == "mean" else np.sum(rho**2) / rho.size)
        a, rho, b = _cca_pair(zi, zj)
        # pwcca: weights alpha_k = sum over neurons |<h_k, x_m>|, h = canonical variates
        wi = np.abs(a.T @ pi[1]).sum(axis=1)
        wj = np.abs(b.T @ pj[1]).sum(axis=1)
        return float(0.5 * (wi @ rho / wi.sum() + wj @ rho / wj.sum()))
    if measure in ("mutual_knn", "cknna"):
        n, k = pi.idx.shape
        idx_j, val_j = _permuted_knn(pj, perm)
        match = pi.idx[:, :, None] == idx_j[:, None, :]  # (N, k, k)
        if measure == "mutual_knn":
            return float(match.sum() / (n * k))
        keep = match.any(axis=2)
        a = _sparse(pi.idx, pi.val, keep, n)
        # the matched neighbour's cosine in layer j, at the same (a, b) position
        vj = np.where(match, val_j[:, None, :], 0.0).sum(axis=2)
        b = _sparse(pi.idx, vj, keep, n)
        return float(_hsic_u(a, b, n) / np.sqrt(pi.self_hsic * pj.self_hsic))
    ci, ssi = pi
    cj, ssj = pj
    tri = perm.triangle() if perm is not None else None
    dot = 0.0
    for c0 in range(0, ci.size, RSA_CHUNK):
        c1 = min(ci.size, c0 + RSA_CHUNK)
        right = cj[c0:c1] if tri is None else cj[tri[c0:c1]]
        dot += float(np.dot(ci[c0:c1].astype(np.float64), right.astype(np.float64)))
    return float(dot / np.sqrt(ssi * ssj))


# ---------------------------------------------------------------------------------------------
# all pairs


def prepare_layers(
    states: Any,
    measure: str,
    opts: MeasureOptions | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    groups: Any = None,
) -> list[Any]:
    """Validate (L, N, d) states and prepare every layer for `measure` (SPEC section 17).

    groups: for a passage-bootstrap replicate (SPEC 17.4), the original passage of each of the
    N resampled rows; copies of one passage are then never each other's neighbours (mutual_knn,
    cknna) and their RDM entries are left out (rsa). The other measures ignore it.
    """
    opts = opts or MeasureOptions()
    x = _validated(states, min_passages=2)
    n_states, n, d = x.shape
    _options(measure, n, opts)
    if groups is not None:
        groups = np.asarray(groups)
        if groups.shape != (n,):
            raise InvalidArgumentError(
                f"groups must give one original passage per row (N = {n}); got shape "
                f"{groups.shape}."
            )
        distinct = int(np.unique(groups).size)
        if measure in ("mutual_knn", "cknna") and distinct - 1 < opts.k:
            raise InvalidArgumentError(
                f"A replicate of {distinct} distinct passages has fewer than k + 1 = "
                f"{opts.k + 1}; use more passages or a smaller k."
            )
        if measure in ("rsa", "cknna") and distinct < 4:
            raise InvalidArgumentError(
                f"A replicate of {distinct} distinct passages is too few for {measure} (4)."
            )
    need = prepared_bytes(measure, n_states, n, d, opts)
    if need > max_bytes:
        raise InvalidArgumentError(
            f"The {measure} measure would hold {need / 1e9:.2f} GB of prepared layers "
            f"({n_states} x N = {n} x d = {d}), more than max_bytes = {max_bytes / 1e9:.2f} GB; "
            "use fewer passages or raise max_bytes."
        )
    out = []
    for layer in range(n_states):
        xl = x[layer].cpu().to(torch.float64).numpy()
        out.append(_prepare(measure, xl, layer, opts, groups))
    return out


def pairs_matrix(
    prepared: list[Any],
    measure: str,
    opts: MeasureOptions | None = None,
    perm: Permutation | None = None,
    *,
    diagonal: bool = False,
) -> np.ndarray:
    """(L, L) matrix of `measure` from prepared layers: i < j computed (layer j's passages
    permuted by `perm` when given) and mirrored; diagonal 1, or computed when `diagonal`."""
    opts = opts or MeasureOptions()
    n_states = len(prepared)
    s = np.eye(n_states)
    for i in range(n_states):
        for j in range(i if diagonal else i + 1, n_states):
            s[i, j] = s[j, i] = _pair(measure, prepared[i], prepared[j], perm, opts)
    return s


def measure_matrix(
    states: Any,
    measure: str,
    *,
    k: int = 10,
    rsa_method: str = "spearman",
    variance: float = 0.99,
    cca_summary: str = "mean",
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> np.ndarray:
    """All-pairs layer similarity under `measure` (SPEC section 17): states (L, N, d) -> (L, L)
    float64, symmetric, unit diagonal.

    measure: one of `MEASURES`. k: neighbours (mutual_knn, cknna). rsa_method: "spearman" or
    "pearson". variance: share kept by SVCCA. cca_summary: SVCCA's "mean" rho or "mean_sq".
    max_bytes: the most the prepared layers may hold (`prepared_bytes`).
    """
    opts = MeasureOptions(k=k, rsa_method=rsa_method, variance=variance, cca_summary=cca_summary)
    prepared = prepare_layers(states, measure, opts, max_bytes=max_bytes)
    return pairs_matrix(prepared, measure, opts)
