"""Layer-by-layer similarity matrices: linear CKA, unbiased CKA, cosine (SPEC section 3).

All L x L pairs are computed at once. Everything reduces to two ingredients:

    M[i, j] = <K_i, K_j> = ||X_i^T X_j||_F^2      (K_l = X_l X_l^T, X_l column-centred)
    r[l, a] = ||x_{l,a}||^2                        (row squared norms of the centred X_l)

    linear CKA     S = M_ij / sqrt(M_ii M_jj)
    unbiased CKA   the same with M replaced by the unbiased HSIC numerator (see below)

M has two routes, picked by an explicit cost model (multiply-adds, symmetry used in both):

    feature route  per layer block i: X_i^T [X_i .. X_L]  ->  N * d^2 * L(L+1)/2
    gram route     per row block of B passages: the B x N strip of every centred Gram matrix
                   (a batched (L, B, d) @ (L, d, N) float32 product), then float64
                   (L, chunk) @ (chunk, L) products accumulate all pairwise inner products
                                               ->  N^2/2 * (L*d + L^2)

so the Gram route wins when N (d + L) < d^2 (L + 1), i.e. roughly when N < d*L. Only the
upper triangle of the Gram matrices is formed (off-diagonal strips count twice). Memory is
one centred float32 copy of the states plus one strip of at most `block_size` elements and
one float64 chunk (`CONTRACT_ELEMENTS`), never L * N^2 at once.

Unbiased CKA (Song et al. 2012, zeroed Gram diagonals, needs N >= 4). With uncentred Gram
matrices K~ (diagonal set to zero) the unbiased HSIC is

    [tr(K~ L~) + (1'K~1)(1'L~1)/((n-1)(n-2)) - 2/(n-2) 1'K~L~1] / (n(n-3)).

The estimator is translation invariant, so we may evaluate it on column-centred data, where
1'K1 = 0 gives K~1 = -r and 1'K~1 = -tr K, hence

    n(n-3) HSIC_u(K, L) = <K, L> - n/(n-2) r_K . r_L + tr(K) tr(L) / ((n-1)(n-2)).

The same M plus one (L, N) @ (N, L) product of row norms. It can be slightly negative.

Cosine: the mean over passages of cos(x_{i,a}, x_{j,a}) on the *uncentred* pooled vectors;
unit diagonal. Decision: a pooled vector with zero norm makes the cosine undefined, so it
raises `InvalidStatesError` (naming the layer and count) instead of returning NaN or
silently treating it as 0.

Decision (degenerate layers): a layer whose centred matrix is all zero (the same vector for
every passage) has no CKA; it raises `InvalidStatesError` rather than returning NaN.

Precision: the Gram strips are formed in float32 (float64 when the input is float64); each
entry sums only d products. Every reduction over passages accumulates in float64: the Gram
route's L x L contraction (B*N terms per entry) on float64 copies of chunks of each strip,
the feature route's cross-covariances (N terms per entry), the cosine sums.
Column means are taken in float64. Result: within 1e-6 of the same computation in float64
on the same float32 states (the float32 contraction was off by 1.5e-3 at L=6, N=3000).
Symmetry: only the upper triangle of M (and of S) is used and mirrored, so S == S.T bitwise
whatever order a BLAS kernel sums entries (i, j) and (j, i) in; CKA and cosine have a unit
diagonal. Computation runs on the device of a torch input (CUDA when the input is there).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from deffcore.core.checks import check_choice
from deffcore.core.constants import METRICS
from deffcore.core.errors import DeffError, InvalidStatesError, UndefinedSimilarityError
from deffcore.core.lazy import torch  # imported on first use: a stored run never needs it

#: Elements (floats) one streamed block may hold; ~256 MB in float32.
DEFAULT_BLOCK_ELEMENTS = 64 * 1024 * 1024
#: Most rows of one Gram-route strip (see `_gram_rows`).
GRAM_ROWS = 256
#: Elements of one float64 chunk contracted at once (32 MB): few, large calls, since each
#: call costs a thread synchronisation, which dominates on a loaded machine.
CONTRACT_ELEMENTS = 4 * 1024 * 1024
ROUTES = ("auto", "gram", "feature")


def cka_finite_sample_bias(n: int, d: int) -> float:
    """Expected linear CKA of independent isotropic data, about d / (n + d) (SPEC section 3).
    n >= 1 passages (inf: the population, bias 0) and d >= 1 features, finite; else one
    sentence (InvalidArgumentError), never a bias outside [0, 1) or a TypeError."""
    from deffcore.core.checks import is_real
    from deffcore.core.errors import InvalidArgumentError

    if not (is_real(n) and is_real(d) and n >= 1 and 1 <= d < np.inf):
        raise InvalidArgumentError(
            f"The CKA bias needs n >= 1 passages and d >= 1 features; got n={n!r}, d={d!r}."
        )
    return float(d) / float(n + d)


# ---------------------------------------------------------------------------------------------
# input handling


def _as_tensor(states: Any) -> torch.Tensor:
    """(L, N, d) array / tensor / list of (N, d) -> a torch tensor (no copy when possible)."""
    if isinstance(states, torch.Tensor):
        return states.detach()
    if isinstance(states, np.ndarray):
        if not states.dtype.isnative:
            states = states.astype(states.dtype.newbyteorder("="))
        with warnings.catch_warnings():  # read-only arrays (memmaps) are fine: we never write
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(states)
    if isinstance(states, Sequence) and not isinstance(states, str | bytes):
        if len(states) == 0:
            raise InvalidStatesError("States are empty: expected L >= 2 layers of (N, d) arrays.")
        layers = [_as_tensor(x) for x in states]
        shapes = [tuple(x.shape) for x in layers]
        for i, shape in enumerate(shapes):
            if len(shape) != 2:
                raise InvalidStatesError(
                    f"Layer {i} has shape {shape}; each layer must be a 2-D (N, d) matrix."
                )
            if shape != shapes[0]:
                raise InvalidStatesError(
                    f"Layer {i} has shape {shape} but layer 0 has shape {shapes[0]}; all "
                    "layers must have the same (N, d) shape."
                )
        device = layers[0].device
        return torch.stack([x.to(device) for x in layers])
    raise InvalidStatesError(
        f"States must be an (L, N, d) numpy array, torch tensor or list of (N, d) arrays, "
        f"not {type(states).__name__}."
    )


def validate_states(states: Any, *, min_layers: int = 2, min_passages: int = 2) -> None:
    """Raise `InvalidStatesError` unless `states` is a finite (L, N, d) stack.

    Checks, in order: type and ndim, equal per-layer shapes, L >= min_layers,
    N >= min_passages, d >= 1, and finiteness (the message names the first bad layer).
    """
    _validated(states, min_layers=min_layers, min_passages=min_passages)


def _validated(
    states: Any, *, min_layers: int = 2, min_passages: int = 2, check_finite: bool = True
) -> torch.Tensor:
    """`validate_states`, returning the tensor. check_finite=False skips the finiteness pass
    for callers whose own float64 reductions detect NaN / inf (`_centred`, `_layer_norms`)."""
    x = _as_tensor(states)
    if x.ndim != 3:
        raise InvalidStatesError(
            f"States have {x.ndim} dimensions (shape {tuple(x.shape)}); expected a 3-D "
            "(L, N, d) stack: L layers, N passages, d features."
        )
    if not (x.is_floating_point() or x.dtype in (torch.int32, torch.int64)):
        raise InvalidStatesError(f"States have dtype {x.dtype}; expected a floating-point type.")
    n_layers, n, d = x.shape
    if n_layers < min_layers:
        raise InvalidStatesError(
            f"States have {n_layers} layer(s); at least {min_layers} are needed to compare layers."
        )
    if n < min_passages:
        raise InvalidStatesError(
            f"States have {n} passage(s); this measurement needs at least {min_passages}."
        )
    if d < 1:
        raise InvalidStatesError("States have 0 features per passage; expected d >= 1.")
    if check_finite and x.is_floating_point():
        finite = torch.isfinite(x).reshape(n_layers, -1).all(dim=1)
        if not bool(finite.all()):
            _raise_non_finite(x, (~finite).nonzero()[:, 0].tolist())
    return x


def _raise_non_finite(x: torch.Tensor, suspects: Sequence[int]) -> None:
    """Raise for the first layer among `suspects` (indices into the (L, N, d) stack) that holds
    a NaN or inf. A suspect comes from a non-finite float64 reduction, so if none holds one,
    the reduction overflowed float64 on finite values."""
    for bad in suspects:
        count = int((~torch.isfinite(x[bad])).sum())
        if count:
            raise InvalidStatesError(
                f"Layer {bad} (0-based index in the stack) contains {count} NaN or inf "
                "value(s); similarities need finite states."
            )
    raise InvalidStatesError(
        f"Layer {suspects[0]} (0-based index in the stack) has values so large that their sums "
        "overflow float64; rescale the states."
    )


def _compute_dtype(x: torch.Tensor) -> torch.dtype:
    return torch.float64 if x.dtype == torch.float64 else torch.float32


#: Elements of one row chunk of the centring passes (256 KB in float64): small enough to stay
#: in a core's cache, so the second touch of a chunk costs no memory traffic.
CENTRE_CHUNK_ELEMENTS = 32 * 1024
#: The same chunks (centring, float64 contraction) on a GPU (128 MB in float64): there each
#: chunk costs a few kernel launches of ~5-10 us, which cache-sized chunks multiply into
#: seconds (L=32, N=10,000, d=4,096: 40,000 chunks per centring pass), and a GPU's cache is
#: not what bounds them.
GPU_CHUNK_ELEMENTS = 16 * 1024 * 1024


def _chunk_elements(x: torch.Tensor, on_cpu: int) -> int:
    """`on_cpu` for a CPU tensor, `GPU_CHUNK_ELEMENTS` for a tensor on a GPU."""
    return on_cpu if x.device.type == "cpu" else max(on_cpu, GPU_CHUNK_ELEMENTS)


def _centred(x: torch.Tensor) -> torch.Tensor:
    """(L, N, d) -> column-centred copy in the compute dtype; means taken in float64.

    Two streaming passes over the input, the minimum: one float64 reduction for the column
    means, one writing the centred copy. The finiteness check rides on the first: a NaN or inf
    anywhere in layer l makes one of its float64 column sums NaN or inf (+inf and -inf in one
    column give NaN), so only the (L, d) means are checked, and the input is searched for the
    bad layer only when one is non-finite (`_raise_non_finite`).
    Both passes go a chunk of rows at a time through a small buffer (`CENTRE_CHUNK_ELEMENTS`):
    `sum(dtype=float64)` over a whole layer was ~8x slower here (an internal float64 copy).
    """
    dtype = _compute_dtype(x)
    n_layers, n, d = x.shape
    rows = max(1, min(n, _chunk_elements(x, CENTRE_CHUNK_ELEMENTS) // max(1, d)))
    mean = torch.zeros(n_layers, d, dtype=torch.float64, device=x.device)
    buf = torch.empty(rows, d, dtype=torch.float64, device=x.device)
    for i in range(n_layers):
        for r0 in range(0, n, rows):
            r1 = min(n, r0 + rows)
            chunk = buf[: r1 - r0]
            chunk.copy_(x[i, r0:r1])
            mean[i].add_(chunk.sum(dim=0))  # float64 accumulation throughout
    mean /= n
    finite = torch.isfinite(mean).all(dim=1)  # (L,), one check instead of a pass over x
    if not bool(finite.all()):
        _raise_non_finite(x, (~finite).nonzero()[:, 0].tolist())
    out = torch.empty(x.shape, dtype=dtype, device=x.device)
    if dtype == torch.float64:
        torch.sub(x, mean[:, None], out=out)
        return out
    # x - mean without float64 copies of the layer: the mean split into its float32 part and
    # the float32 remainder, subtracted in turn (no rounding bias in the mean); the second
    # subtraction hits the chunk while it is still in cache
    hi = mean.to(dtype)
    lo = (mean - hi.to(torch.float64)).to(dtype)
    for i in range(n_layers):
        for r0 in range(0, n, rows):
            r1 = min(n, r0 + rows)
            target = out[i, r0:r1]
            torch.sub(x[i, r0:r1].to(dtype), hi[i], out=target)
            target.sub_(lo[i])
    return out


# ---------------------------------------------------------------------------------------------
# the two routes for M[i, j] = <K_i, K_j>


def route_costs(n: int, d: int, n_layers: int) -> dict[str, float]:
    """Multiply-add counts of the two routes (the cost model that `route="auto"` uses)."""
    feature = n * d * d * n_layers * (n_layers + 1) / 2
    gram = n * n / 2 * (n_layers * d + n_layers * n_layers)
    return {"feature": float(feature), "gram": float(gram)}


def choose_route(n: int, d: int, n_layers: int) -> str:
    costs = route_costs(n, d, n_layers)
    return "gram" if costs["gram"] < costs["feature"] else "feature"


def _mirror_upper(m: torch.Tensor) -> torch.Tensor:
    """(L, L) -> the upper triangle (diagonal included) mirrored onto the lower one.

    Symmetry by construction: a BLAS kernel may sum entry (i, j) of A @ A.T in a different
    order from entry (j, i), so the two can differ in the last bit; averaging afterwards
    would hide that, mirroring makes S == S.T bitwise whatever the kernel.
    """
    upper = torch.triu(m)
    return upper + torch.triu(m, diagonal=1).T


def _gram_rows(n: int, n_layers: int, budget: int) -> int:
    """Rows per streamed strip of the Gram route (and of the bootstrap's).

    A strip of B rows holds L * B * N elements, so B <= budget / (L N). The strips
    re-form the B x B square on the diagonal in full, i.e. about B / N of extra work, so
    B is also capped at GRAM_ROWS; above that the batched product gains nothing.
    """
    return max(1, min(n, GRAM_ROWS, budget // max(1, n_layers * n)))


def _contract_cols(n_layers: int, rows: int, budget: int, limit: int = CONTRACT_ELEMENTS) -> int:
    """Columns of a strip converted to float64 at once for the L x L contraction."""
    return max(1, min(budget, limit) // max(1, n_layers * rows))


def _gram_inner_products(xc: torch.Tensor, block_size: int | None) -> torch.Tensor:
    """Centred (L, N, d) -> M (L, L) float64 with M[i, j] = <K_i, K_j>, streaming row blocks.

    Row block [r0, r1) forms the strip K_l[r0:r1, r0:] of every layer with one batched
    product in the compute dtype: the square part [r0:r1, r0:r1] enters once, the rest
    [r0:r1, r1:] twice (the Gram matrices are symmetric). The L x L contraction of a strip
    sums B * N products per entry, far too many for float32 (at N = 3000 the error in S
    reached 1.5e-3), so the strip is converted to float64 a chunk of columns at a time
    (`CONTRACT_ELEMENTS`) and contracted there: float32 products are exact in
    float64 and the sum carries no float32 rounding. The contraction is L / d of the work.
    """
    n_layers, n, _ = xc.shape
    budget = block_size if block_size is not None else DEFAULT_BLOCK_ELEMENTS
    rows = _gram_rows(n, n_layers, budget)
    cols = _contract_cols(n_layers, rows, budget, _chunk_elements(xc, CONTRACT_ELEMENTS))
    m = torch.zeros(n_layers, n_layers, dtype=torch.float64, device=xc.device)
    # preallocated buffers: fresh large allocations cost page faults on every strip
    strip_buf = torch.empty(n_layers * rows * n, dtype=xc.dtype, device=xc.device)
    chunk_buf = torch.empty(n_layers * rows * cols, dtype=torch.float64, device=xc.device)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        b, width = r1 - r0, n - r0
        strip = strip_buf[: n_layers * b * width].view(n_layers, b, width)
        torch.bmm(xc[:, r0:r1], xc[:, r0:].transpose(1, 2), out=strip)
        # columns [0, b) are the diagonal square (weight 1), the rest appear twice
        for lo, hi, weight in ((0, b, 1.0), (b, width, 2.0)):
            for c0 in range(lo, hi, cols):
                c1 = min(hi, c0 + cols)
                chunk = chunk_buf[: n_layers * b * (c1 - c0)].view(n_layers, b, c1 - c0)
                chunk.copy_(strip[:, :, c0:c1])
                flat = chunk.view(n_layers, -1)
                m.addmm_(flat, flat.T, alpha=weight)
    return _mirror_upper(m)


def _feature_inner_products(xc: torch.Tensor, block_size: int | None) -> torch.Tensor:
    """Centred (L, N, d) -> M (L, L) float64 with M[i, j] = ||X_i^T X_j||_F^2.

    For each layer i, the cross-covariances X_i^T X_j for j >= i come from one float64
    product with a chunk of the stacked layers (each entry is a sum over N passages, so it
    accumulates in float64), the chunk sized so its float64 copy and the (d, d) results
    stay within `block_size`. Only j >= i is computed; the lower triangle is mirrored.
    """
    n_layers, n, d = xc.shape
    budget = block_size if block_size is not None else DEFAULT_BLOCK_ELEMENTS
    per_chunk = max(1, budget // max(1, d * d + n * d))
    m = torch.zeros(n_layers, n_layers, dtype=torch.float64, device=xc.device)
    for i in range(n_layers):
        xi = xc[i].to(torch.float64)
        for j0 in range(i, n_layers, per_chunk):
            j1 = min(n_layers, j0 + per_chunk)
            cross = torch.matmul(xi.T, xc[j0:j1].to(torch.float64))  # (j1 - j0, d, d)
            m[i, j0:j1] = cross.pow(2).sum(dim=(1, 2))
    return _mirror_upper(m)


def _layer_norms(x: torch.Tensor) -> torch.Tensor:
    """(L, N, d) -> float64 (L, N) norms of the uncentred rows; raise on NaN / inf or a zero
    vector."""
    norms = torch.stack([torch.linalg.vector_norm(layer.to(torch.float64), dim=1) for layer in x])
    # a NaN or inf in a row makes its float64 norm non-finite: this is the finiteness check
    # of the cosine path (no separate pass over the input)
    finite = torch.isfinite(norms).all(dim=1)
    if not bool(finite.all()):
        _raise_non_finite(x, (~finite).nonzero()[:, 0].tolist())
    zero = norms == 0
    if bool(zero.any()):
        bad = int(zero.any(dim=1).nonzero()[0, 0])
        raise InvalidStatesError(
            f"Layer {bad} (0-based) has {int(zero[bad].sum())} passage(s) whose pooled vector "
            "is exactly zero; cosine similarity is undefined for them (drop those passages or "
            "use metric='cka')."
        )
    return norms


def _unit_rows(x: torch.Tensor, norms: torch.Tensor, r0: int, r1: int) -> torch.Tensor:
    """Rows [r0, r1) of every layer divided by their norms, float64 (L, r1 - r0, d)."""
    return x[:, r0:r1].to(torch.float64) / norms[:, r0:r1, None]


def _cosine_matrix(x: torch.Tensor, block_size: int | None) -> torch.Tensor:
    """(L, N, d) uncentred -> (L, L) mean over passages of cos(x_{i,a}, x_{j,a}), float64.

    The unit vectors and the (L, B*d) @ (B*d, L) products run in float64: the sum over
    passages and features has B*d terms per block. Upper triangle mirrored, unit diagonal.
    """
    n_layers, n, d = x.shape
    norms = _layer_norms(x)
    budget = block_size if block_size is not None else DEFAULT_BLOCK_ELEMENTS
    rows = max(1, min(n, min(budget, CONTRACT_ELEMENTS) // max(1, n_layers * d)))
    total = torch.zeros(n_layers, n_layers, dtype=torch.float64, device=x.device)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        flat = _unit_rows(x, norms, r0, r1).reshape(n_layers, -1)
        total.addmm_(flat, flat.T)
    s = _mirror_upper(total / n)
    s.fill_diagonal_(1.0)
    return s


def _normalise(m: torch.Tensor, what: str) -> np.ndarray:
    """M (L, L) of (unbiased) HSIC numerators -> S = M_ij / sqrt(M_ii M_jj), unit diagonal."""
    diag = torch.diagonal(m).clone()
    if bool((diag <= 0).any()):
        bad = int((diag <= 0).nonzero()[0, 0])
        if what == "CKA":
            reason = "has no variance across passages (its centred matrix is zero)"
        else:
            reason = (
                "has a non-positive unbiased HSIC estimate with itself (no variance, or too "
                "few passages for the unbiased estimator)"
            )
        raise UndefinedSimilarityError(  # a subclass: a caller may call one control undefined
            f"Layer {bad} (0-based) {reason}, so {what} is undefined for it."
        )
    s = _mirror_upper(m / torch.sqrt(diag[:, None] * diag[None, :]))
    s.fill_diagonal_(1.0)
    return s.cpu().numpy()


def unbiased_hsic_matrix(
    m: torch.Tensor, row_norms: torch.Tensor, n: int, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """n(n-3) * unbiased HSIC for all pairs from M (L, L) and centred row norms (L, N), float64.

    `row_norms[l, a]` = ||x_{l,a} - mean||^2. `weights` (N,) are passage multiplicities (the
    bootstrap: passage a appears w_a times, n = sum(w)); then r_K . r_L and tr(K) are the
    weighted sums over the distinct passages.
    """
    r = row_norms.to(torch.float64)
    if weights is None:
        rr, tr = r @ r.T, r.sum(dim=1)
    else:
        w = weights.to(torch.float64)
        rr, tr = (r * w) @ r.T, r @ w
    return _mirror_upper(m - n / (n - 2) * rr + torch.outer(tr, tr) / ((n - 1) * (n - 2)))


def similarity_matrix(
    states: Any,
    metric: str = "cka",
    *,
    block_size: int | None = None,
    route: str = "auto",
) -> np.ndarray:
    """All-pairs layer similarity. states (L, N, d) -> S (L, L) float64 numpy.

    metric: "cka" (linear CKA), "unbiased_cka" (needs N >= 4) or "cosine".
    route: "auto" (cost model, see module docstring), "gram" or "feature"; ignored for cosine.
    block_size: maximum number of elements of one streamed block (default ~64M); it bounds
    memory and never changes the result beyond rounding.
    """
    check_choice(metric, METRICS, "similarity metric")
    check_choice(route, ROUTES, "route")
    if block_size is not None and block_size < 1:
        raise DeffError(f"block_size must be a positive number of elements, not {block_size}.")
    # finiteness is checked inside `_centred` / `_layer_norms`, on float64 reductions they make
    # anyway: a separate pass over the input cost up to 0.35 s of ~3 s at N=2000, d=576, L=30
    x = _validated(states, min_passages=4 if metric == "unbiased_cka" else 2, check_finite=False)
    if not x.is_floating_point():
        x = x.to(torch.float64)
    n_layers, n, d = x.shape
    if metric == "cosine":
        return _cosine_matrix(x, block_size).cpu().numpy()

    xc = _centred(x)
    chosen = choose_route(n, d, n_layers) if route == "auto" else route
    if chosen == "gram":
        m = _gram_inner_products(xc, block_size)
    else:
        m = _feature_inner_products(xc, block_size)
    if metric == "cka":
        return _normalise(m, "CKA")
    row_norms = xc.to(torch.float64).pow(2).sum(dim=2)  # (L, N)
    return _normalise(unbiased_hsic_matrix(m, row_norms, n), "unbiased CKA")


# ---------------------------------------------------------------------------------------------
# the plain reference implementation


def _naive_pair(xi: np.ndarray, xj: np.ndarray, metric: str) -> float:
    """One pair, float64, straight from the definitions (no shortcuts shared with the fast path)."""
    if metric == "cosine":
        num = np.sum(xi * xj, axis=1)
        den = np.linalg.norm(xi, axis=1) * np.linalg.norm(xj, axis=1)
        return float(np.mean(num / den))
    if metric == "cka":
        xi = xi - xi.mean(axis=0)
        xj = xj - xj.mean(axis=0)
        cross = np.linalg.norm(xi.T @ xj) ** 2
        return float(cross / (np.linalg.norm(xi.T @ xi) * np.linalg.norm(xj.T @ xj)))

    # unbiased: Song et al. (2012) on the uncentred Gram matrices with zeroed diagonals
    def hsic(k: np.ndarray, l: np.ndarray) -> float:
        n = k.shape[0]
        k = k.copy()
        l = l.copy()
        np.fill_diagonal(k, 0.0)
        np.fill_diagonal(l, 0.0)
        ones = np.ones(n)
        term1 = np.trace(k @ l)
        term2 = (ones @ k @ ones) * (ones @ l @ ones) / ((n - 1) * (n - 2))
        term3 = 2.0 / (n - 2) * (ones @ k @ l @ ones)
        return float((term1 + term2 - term3) / (n * (n - 3)))

    ki = xi @ xi.T
    kj = xj @ xj.T
    return hsic(ki, kj) / np.sqrt(hsic(ki, ki) * hsic(kj, kj))


def naive_similarity_matrix(states: Any, metric: str = "cka") -> np.ndarray:
    """Reference implementation: a plain float64 loop over layer pairs (clear, not fast)."""
    check_choice(metric, METRICS, "similarity metric")
    x = _validated(states, min_passages=4 if metric == "unbiased_cka" else 2)
    layers = [x[i].cpu().to(torch.float64).numpy() for i in range(x.shape[0])]
    n_layers = len(layers)
    s = np.eye(n_layers)
    for i in range(n_layers):
        for j in range(i + 1, n_layers):
            s[i, j] = s[j, i] = _naive_pair(layers[i], layers[j], metric)
    return s
