"""Passage bootstrap of D_eff/L (SPEC section 8): resample passages with replacement B times.

A replicate draws N passage indices with replacement; only the multiplicities w (N,)
(sum w = N) matter. Instead of rebuilding each resampled (L, N, d) stack, the "gram" method
streams the Gram matrices once and serves all B replicates from each strip.

Linear CKA (a replicate is the statistic of the resampled rows, duplicates included). With
X_l centred once (unweighted), G_l = X_l X_l^T, and the replicate's weighted mean
mu_l = X_l^T w / N, the resampled stack's centred rows are x_{l,a} - mu_l, and

    <K_i, K_j>_w = A_ij - 2 N E_ij + N^2 c_i c_j
    A_ij = sum_{a,b} w_a w_b G_i[a,b] G_j[a,b]       (= ||X_i^T W X_j||_F^2)
    E_ij = sum_a w_a g_i[a] g_j[a],  g_l = X_l mu_l,  c_l = |mu_l|^2

which is exactly <K_i, K_j> of the resampled stack (the expansion of
||X_i^T W X_j - N mu_i mu_j^T||_F^2).

Unbiased CKA: a U-statistic over distinct passages. HSIC_1 (Song et al. 2012) is the
U-statistic of order 4 with kernel h(a,b,c,e) = k_ab l_ab + k_ab l_ce - 2 k_ab l_ac summed
over ordered tuples of *distinct* samples. Literally resampled rows break that: ~N pairs of
different slots hold the same passage, their k_aa l_aa terms are exactly the bias the
estimator removes, and a replicate of resampled rows reproduces linear CKA (independent
states, L=8, N=128, d=32: point D_eff/L 1.007, replicate mean 0.421 = linear CKA's 0.419; the
95% interval covered the truth 0/20 times). So a replicate is the U-statistic of the
resample with every index tuple that repeats a passage dropped; a tuple of distinct passages
(a, b, c, e) then counts w_a w_b w_c w_e times (the slots holding them):

    H_w(K, L) = sum_{a,b,c,e distinct} w_a w_b w_c w_e [k_ab l_ab + k_ab l_ce - 2 k_ab l_ac]

and S_ij = H_w(K_i, K_j) / sqrt(H_w(K_i, K_i) H_w(K_j, K_j)) (the normalisation 1 / sum of the
tuple weights cancels). The symmetrised kernel equals (1/4) (x_a - x_c).(x_b - x_e) times the
same for y, averaged over orderings, so every tuple's term is translation invariant and H_w
may be evaluated on the unweighted-centred X. With w = 1 it is n(n-3)(n-1)(n-2) HSIC_1.
Derivation of the closed form: let K~ be K with a zero diagonal, Q = K~_i o K~_j, and the
replicate's vectors alpha_l = K~_l w, beta_l = K~_l w^2, s_l = w . alpha_l, N = sum w,
P2 = sum w^2. Inclusion-exclusion over the coincidences of the indices gives

    term 1 = sum_{a != b} w_a w_b Q_ab [(N - w_a - w_b)^2 - (P2 - w_a^2 - w_b^2)]
           = (N^2 - P2) w'Qw - 4N w'Qw^2 + 4 w'Qw^3 + 2 (w^2)'Qw^2
    term 2 = s_i s_j - 4 sum_a w_a^2 alpha_i,a alpha_j,a + 2 (w^2)'Qw^2
    term 3 = sum_a w_a (N - w_a) alpha_i,a alpha_j,a - sum_a w_a (beta_i,a alpha_j,a + i<->j)
             - N w'Qw^2 + (w^2)'Qw^2 + 2 w'Qw^3

and H_w = term 1 + term 2 - 2 term 3, in which w'Qw^3 cancels:

    H_w = (N^2 - P2) w'Qw - 2N w'Qw^2 + 2 (w^2)'Qw^2 + s_i s_j
          - 2 sum_a w_a (N + w_a) alpha_i,a alpha_j,a + 2 sum_a w_a (beta_i,a alpha_j,a + i<->j).

With w = 1 this is (n-1)(n-2) tr(K~L~) + 1'K~1 1'L~1 - 2(n-1) 1'K~L~1, Song et al.'s
numerator times (n-1)(n-2). Tested against an explicit sum over distinct slot tuples.

Cost. For linear CKA only A is expensive; for unbiased CKA the three forms w'Qw, w'Qw^2,
(w^2)'Qw^2 (Q's diagonal is the Gram diagonals' products, subtracted exactly) and the
(B, L, N) vectors alpha, beta (X (X^T w), never K). For a strip of Gram entries (rows a,
columns b, every layer) and each layer i, the products Q[j, a, b] = G_i G_j for j >= i
(L(L+1)/2 layer pairs in all) form one ((L - i) rows, cols) @ (cols, C) float64 product
with the column weights (C = B for linear CKA, 2B: [w; w^2] for unbiased), then in-place
weighted sums over the rows: fat matrix products, so the per-replicate cost is
L(L+1)/2 * N^2/2 multiply-adds (twice that for unbiased CKA) instead of L d N^2/2 +
L^2 N^2/2 for recomputing. Memory is bounded: one centred copy of the states, one strip
and its float64 chunks (the same budget as `similarity_matrix`), never the L N^2 Gram
matrices. Everything after the float32 strip is float64 (float32 products are exact there).
Cosine sums the per-passage cosines with the weights, one passage block at a time.

Decision: "auto" picks "gram" unless the cost model (`bootstrap_costs`) says recomputing
is cheaper, which happens when d is small against L (the feature route's N d^2 L^2 / 2 per
replicate then undercuts the gram method's L(L+1)/2 N^2 / 2, counted four times);
both give the same numbers. "recompute" resamples the stack and calls `similarity_matrix`
for linear CKA and cosine; for unbiased CKA it evaluates the same U-statistic from each
replicate's weighted cross-covariances X_i^T W X_j, X_i^T W^2 X_j (float64).

Intervals: `low, high` is the percentile interval SPEC asks for. For linear CKA, resampling
with replacement leaves ~0.63 N distinct passages and CKA's finite-sample bias (about
d/(N+d)) grows as the effective sample shrinks, so at small N every replicate's D_eff/L is
shifted down and the percentile interval can exclude the point estimate (the unbiased
replicates above do not have this shift). `basic_low, basic_high` is the basic
(reverse-percentile) interval [2 point - q_hi, 2 point - q_lo]: it treats the replicates'
shift as an estimate of the estimator's own finite-N bias and corrects for it, so it moves
towards the large-N value; `bias_corrected = 2 point - mean` is the matching point. All are
reported, and `bias = mean - point` says how large the shift is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from deffcore.core.constants import METRICS
from deffcore.core.errors import DeffError, InvalidStatesError
from deffcore.core.lazy import torch  # imported on first use: a stored run never needs it
from deffcore.measures.depth import effective_depth
from deffcore.measures.similarity import (
    CONTRACT_ELEMENTS,
    DEFAULT_BLOCK_ELEMENTS,
    _as_tensor,
    _centred,
    _gram_rows,
    _layer_norms,
    _mirror_upper,
    _normalise,
    _unit_rows,
    _validated,
    route_costs,
    similarity_matrix,
)

METHODS = ("auto", "gram", "recompute")


def percentile_interval(samples: Any, ci: float) -> tuple[float, float]:
    """The percentile interval (q_(1-ci)/2, q_(1+ci)/2) of replicate values (B,)."""
    alpha = (1.0 - ci) / 2.0
    return float(np.quantile(samples, alpha)), float(np.quantile(samples, 1.0 - alpha))


@dataclass
class BootstrapResult:
    """Point estimate, bootstrap mean, percentile CI and the B replicate values of D_eff/L."""

    point: float
    mean: float
    low: float
    high: float
    samples: np.ndarray = field(repr=False)
    B: int = 100
    ci: float = 0.95

    @property
    def bias(self) -> float:
        """Bootstrap estimate of the estimator's bias: mean of the replicates - point."""
        return self.mean - self.point

    @property
    def bias_corrected(self) -> float:
        """The point minus the bootstrap bias: 2 point - mean (the basic interval's centre
        when the replicates are symmetric)."""
        return 2.0 * self.point - self.mean

    @property
    def contains_point(self) -> bool:
        """Whether the percentile interval contains the point estimate."""
        return self.low <= self.point <= self.high

    @property
    def basic_low(self) -> float:
        """Lower end of the basic (bias-corrected, reverse-percentile) interval."""
        return 2.0 * self.point - self.high

    @property
    def basic_high(self) -> float:
        """Upper end of the basic (bias-corrected, reverse-percentile) interval."""
        return 2.0 * self.point - self.low

    @classmethod
    def of(cls, point: float, samples: np.ndarray, ci: float) -> BootstrapResult:
        """The result of replicate values `samples` (B,) around `point`: their mean and
        percentile interval."""
        low, high = percentile_interval(samples, ci)
        return cls(point, float(samples.mean()), low, high, samples, len(samples), ci)

    def to_dict(self) -> dict[str, Any]:
        return {
            "point": self.point,
            "mean": self.mean,
            "low": self.low,
            "high": self.high,
            "bias": self.bias,
            "bias_corrected": self.bias_corrected,
            "basic_low": self.basic_low,
            "basic_high": self.basic_high,
            "B": self.B,
            "ci": self.ci,
            "samples": self.samples.tolist(),
        }


def check_b(
    B: Any,
    name: str = "B",
    *,
    minimum: int = 2,
    n: int | None = None,
    layers: int = 0,
    matrices: int = 1,
) -> int:
    """`B` replicates of `n` passages (each keeping `matrices` (L, L) similarities of `layers`)
    checked before anything is drawn (`core.checks.check_replicates`): at most
    `MAX_REPLICATES`, and within the memory this machine can give (`host_memory_bytes`)."""
    from deffcore.core.checks import check_replicates
    from deffcore.inputs.model import host_memory_bytes

    memory = host_memory_bytes() if n is not None else None
    per = 8 * matrices * (layers + 1) ** 2
    return check_replicates(B, name, minimum=minimum, n=n, per_replicate=per, memory=memory)


def check_metrics(metrics: Sequence[str]) -> None:
    """DeffError naming the first of `metrics` that is not a SPEC section 3 metric."""
    bad = [m for m in metrics if m not in METRICS]
    if bad:
        raise DeffError(
            f"Unknown similarity metric {bad[0]!r}; choose one of {', '.join(METRICS)}."
        )


def cheaper_method(n: int, d: int, n_layers: int, B: int, metric: str) -> str:
    """ "gram" or "recompute", whichever `bootstrap_costs` says is cheaper ("auto")."""
    costs = bootstrap_costs(n, d, n_layers, B, metric)
    return "gram" if costs["gram"] <= costs["recompute"] else "recompute"


def check_draw_seed(seed: Any) -> int:
    """The seed of a draw: an integer >= 0 (numpy's too, as the int it is), else one sentence
    (`core.checks.check_seed`) -- never numpy's ValueError or SeedSequence's TypeError."""
    from deffcore.core.checks import as_int, check_seed

    return check_seed(as_int(seed))


def resample_indices(n: int, B: int, seed: int = 0) -> np.ndarray:
    """(B, n) passage indices drawn with replacement; the same seed gives the same draws."""
    return np.random.default_rng(check_draw_seed(seed)).integers(0, n, size=(B, n))


def bootstrap_costs(n: int, d: int, n_layers: int, B: int, metric: str = "cka") -> dict[str, float]:
    """Multiply-adds of the two methods for B replicates (the model `method="auto"` uses).

    "gram": the float32 strips once (L d N^2 / 2) plus, per replicate, L(L+1)/2 * N^2 / 2
    float64 multiply-adds, counted four times: float64 runs below the float32 rate and the
    elementwise products Q are memory-bound (measured: at N=10,000, d=128, L=8, B=100 the
    gram method was 2.8x slower than recomputing on the feature route).
    "recompute": one `similarity_matrix` per replicate, on its cheaper route.
    Unbiased CKA doubles both per-replicate parts: the U-statistic needs the columns w and w^2
    (gram) or the two cross-covariances X^T W X and X^T W^2 X on the feature route (module
    docstring), and its recompute method always takes the feature route.
    """
    pairs = n_layers * (n_layers + 1) / 2
    per_rep = 2.0 if metric == "unbiased_cka" else 1.0
    gram = n_layers * d * n * n / 2 + per_rep * 4.0 * B * pairs * n * n / 2
    if metric == "unbiased_cka":
        recompute = per_rep * B * route_costs(n, d, n_layers)["feature"]
    else:
        recompute = B * min(route_costs(n, d, n_layers).values())
    return {"gram": float(gram), "recompute": float(recompute)}


def _counts(indices: np.ndarray, n: int, device: torch.device) -> torch.Tensor:
    """(B, N) indices -> (B, N) float64 multiplicities w (each row sums to N)."""
    counts = np.stack([np.bincount(idx, minlength=n) for idx in indices])
    return torch.from_numpy(counts.astype(np.float64)).to(device)


def _weighted_gram_sums(
    xc: torch.Tensor,
    cols: torch.Tensor,
    steps: list[tuple[slice, torch.Tensor]],
    budget: int,
) -> torch.Tensor:
    """Streamed bilinear forms of the Gram products u' (G_i o G_j) v, for all layer pairs.

    xc: centred (L, N, d); cols: (C, N) float64 column weights v_c. `steps` lists, in order,
    (a slice of the C columns, row factors (width, N)): each step multiplies the Z columns of
    its slice *in place* by its factors and sums over the rows, so a step's row weights are
    the product of its factors with those of the earlier steps on the same slice (no copy of
    Z). Returns (sum of the steps' widths, L, L) float64, one (L, L) per step and column.
    The strips hold the upper triangle of Q once (counted twice), so a form sums
    Q_ab (u_a v_b + u_b v_a) / 2 and u'Qv equals v'Qu only for the symmetrised weights: an
    asymmetric form is the mean of both orders (see `_unbiased_replicates`).
    Linear CKA: cols = w, steps [(all, w)] -> w'Qw. Unbiased CKA: cols = [w; w^2], steps
    [(w, w), (w, w), (w^2, w), (w^2, w)] -> w'Qw, (w^2)'Qw, w'Qw^2, (w^2)'Qw^2.

    Streams the upper triangle of the Gram matrices in strips of rows a (as the Gram route
    of `similarity_matrix`: the square part once, the rest twice). Within a strip, for each
    float64 chunk of columns b and each layer i, Q = G_i[a, b] * G_j[a, b] for all j >= i
    and Z_i += Q @ V[:, b]^T (one product over the columns, accumulated over the strip's
    chunks); at the end of the strip the steps reduce Z over its rows a. Few, large calls:
    each call costs a thread synchronisation, which dominates on a loaded machine.
    """
    n_layers, n, _ = xc.shape
    n_cols = cols.shape[0]
    n_out = sum(f.shape[0] for _, f in steps)
    dev = xc.device
    f64 = torch.float64
    n_pairs = n_layers * (n_layers + 1) // 2
    rows = _gram_rows(n, n_layers, budget)
    rows = max(1, min(rows, budget // max(1, n_pairs * n_cols)))  # Z is (pairs, rows, C)
    width_max = max(1, min(budget, CONTRACT_ELEMENTS) // max(1, n_layers * rows))
    vt = cols.T.contiguous()  # (N, C)
    factors = [f.T.contiguous() for _, f in steps]  # (N, width) each
    acc = torch.zeros(n_pairs, n_out, dtype=f64, device=dev)  # row-major upper triangle
    starts = [i * n_layers - i * (i - 1) // 2 for i in range(n_layers)]  # pair offset of (i, i)
    strip_buf = torch.empty(n_layers * rows * n, dtype=xc.dtype, device=dev)
    chunk_buf = torch.empty(n_layers * rows * width_max, dtype=f64, device=dev)
    q_buf = torch.empty(n_layers * rows * width_max, dtype=f64, device=dev)
    z_buf = torch.empty(n_pairs * rows * n_cols, dtype=f64, device=dev)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        b, width = r1 - r0, n - r0
        strip = strip_buf[: n_layers * b * width].view(n_layers, b, width)
        torch.bmm(xc[:, r0:r1], xc[:, r0:].transpose(1, 2), out=strip)
        z = z_buf[: n_pairs * b * n_cols].view(n_pairs, b, n_cols)
        z.zero_()
        for lo, hi, weight in ((0, b, 1.0), (b, width, 2.0)):
            for c0 in range(lo, hi, width_max):
                c1 = min(hi, c0 + width_max)
                c = c1 - c0
                chunk = chunk_buf[: n_layers * b * c].view(n_layers, b, c)
                chunk.copy_(strip[:, :, c0:c1])
                vb = vt[r0 + c0 : r0 + c1]  # (c, C)
                for i in range(n_layers):
                    k = n_layers - i
                    q = q_buf[: k * b * c].view(k, b, c)
                    torch.mul(chunk[i], chunk[i:], out=q)
                    zi = z[starts[i] : starts[i] + k].view(k * b, n_cols)
                    zi.addmm_(q.view(k * b, c), vb, alpha=weight)
        k0 = 0
        for (cs, _), f in zip(steps, factors, strict=True):
            part = z[:, :, cs].mul_(f[r0:r1])  # in place: the rows' weights
            acc[:, k0 : k0 + f.shape[1]] += part.sum(dim=1)
            k0 += f.shape[1]
    out = torch.zeros(n_out, n_layers, n_layers, dtype=f64, device=dev)
    iu = torch.triu_indices(n_layers, n_layers, device=dev)
    out[:, iu[0], iu[1]] = acc.T
    return _mirror_batch(out)


def _linear_replicates(xc: torch.Tensor, w: torch.Tensor, budget: int) -> list[np.ndarray]:
    """Linear CKA of each resampled stack (duplicated rows included, as resampling makes them).

    xc: centred (L, N, d); w: (B, N) multiplicities. See the module docstring for the
    expansion <K_i, K_j>_w = A_ij - 2 N E_ij + N^2 c_i c_j.
    """
    a = _weighted_gram_sums(xc, w, [(slice(None), w)], budget)  # (B, L, L)
    return _linear_from_sums(xc, w, a, budget)


def _linear_from_sums(
    xc: torch.Tensor, w: torch.Tensor, a: torch.Tensor, budget: int
) -> list[np.ndarray]:
    """Linear CKA of each replicate from its streamed sums a = w'(G_i o G_j)w (B, L, L), Gram
    diagonals included (the unbiased pass's first form before its diagonal is subtracted is
    the same sum): the centring terms -2N E_ij + N^2 c_i c_j, then the normalisation."""
    n_layers, n, _ = xc.shape
    out = []
    # the cheap centring terms, a chunk of replicates at a time: g is (B_c, L, N) float64
    per = max(1, budget // max(1, n_layers * n))
    for r0 in range(0, w.shape[0], per):
        wc = w[r0 : r0 + per]  # (B_c, N)
        g = torch.empty(wc.shape[0], n_layers, n, dtype=torch.float64, device=xc.device)
        c = torch.empty(wc.shape[0], n_layers, dtype=torch.float64, device=xc.device)
        for layer in range(n_layers):
            xl = xc[layer].to(torch.float64)  # (N, d)
            mu = wc @ xl / n  # (B_c, d) weighted means
            g[:, layer] = mu @ xl.T
            c[:, layer] = mu.pow(2).sum(dim=1)
        e = torch.bmm(g * wc[:, None, :], g.transpose(1, 2))  # (B_c, L, L)
        m = a[r0 : r0 + per] - 2.0 * n * e + n * n * c[:, :, None] * c[:, None, :]
        out += _normalise_batch(_mirror_batch(m), "CKA")
    return out


def _gram_diagonals(xc: torch.Tensor) -> torch.Tensor:
    """(L, N) float64 Gram diagonals G_l[a, a] = |x_{l,a}|^2, each formed as the strips form
    it (one dot product in the compute dtype), so subtracting the diagonal's share of the
    streamed sums cancels it to float64 rounding."""
    return torch.stack([(layer * layer).sum(dim=1) for layer in xc]).to(torch.float64)


def _u_statistic_numerators(
    q11: torch.Tensor,
    q12: torch.Tensor,
    q22: torch.Tensor,
    alpha: torch.Tensor,
    beta: torch.Tensor,
    w: torch.Tensor,
) -> torch.Tensor:
    """The tie-excluded weighted HSIC_1 numerators H (B, L, L) of each replicate.

    q11, q12, q22 (B, L, L): w'Qw, w'Q w^2, (w^2)'Q w^2 with Q = K~_i o K~_j (zero diagonals);
    alpha, beta (B, L, N): K~_l w and K~_l w^2; w (B, N) multiplicities. H_w's closed form
    and its derivation are in the module docstring.
    """
    n = w.sum(dim=1)[:, None, None]  # (B, 1, 1)
    p2 = w.pow(2).sum(dim=1)[:, None, None]
    s = torch.einsum("bn,bln->bl", w, alpha)  # (B, L)
    aa = torch.bmm(alpha * (w * (n[:, :, 0] + w))[:, None, :], alpha.transpose(1, 2))
    ba = torch.bmm(beta * w[:, None, :], alpha.transpose(1, 2))
    h = (n * n - p2) * q11 - 2.0 * n * q12 + 2.0 * q22 + s[:, :, None] * s[:, None, :]
    return h - 2.0 * aa + 2.0 * (ba + ba.transpose(1, 2))


def _kernel_weight_products(xc: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """alpha = K~_l w and beta = K~_l w^2 (B, L, N) float64, K~ the centred Gram matrix with
    its diagonal zeroed: X_l (X_l^T w) - r_l o w, never forming K."""
    n_layers = xc.shape[0]
    diag = _gram_diagonals(xc)  # (L, N)
    w2 = w * w
    alpha = torch.empty(w.shape[0], n_layers, w.shape[1], dtype=torch.float64, device=xc.device)
    beta = torch.empty_like(alpha)
    for layer in range(n_layers):
        xl = xc[layer].to(torch.float64)  # (N, d)
        alpha[:, layer] = (w @ xl) @ xl.T - w * diag[layer]
        beta[:, layer] = (w2 @ xl) @ xl.T - w2 * diag[layer]
    return alpha, beta


def _diag_share(diag: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """sum_a weight_a r_{i,a} r_{j,a}: (L, N) diagonals, (B, N) weights -> (B, L, L)."""
    return torch.einsum("bn,in,jn->bij", weight, diag, diag)


def _unbiased_replicates(
    xc: torch.Tensor,
    w: torch.Tensor,
    budget: int,
    route: str,
    linear: list[np.ndarray] | None = None,
) -> list[np.ndarray]:
    """Unbiased CKA of each replicate as the U-statistic over distinct passages (module doc).

    xc: centred (L, N, d); w: (B, N) multiplicities. route "gram": the q forms from one
    streamed pass over the Gram strips; "feature": from the weighted cross-covariances
    X_i^T W X_j of each replicate (float64), the recompute method. The rest is shared.
    `linear`: a list that also receives each replicate's linear CKA, from the same pass (its
    first form w'Qw, diagonals included, is linear CKA's sum: `_linear_from_sums`).
    """
    n_layers, n, _ = xc.shape
    diag = _gram_diagonals(xc)
    out = []
    # the per-replicate (B_c, L, N) vectors, a chunk of replicates at a time
    per = max(1, budget // max(1, 2 * n_layers * n))
    for r0 in range(0, w.shape[0], per):
        wc = w[r0 : r0 + per]
        w2 = wc * wc
        if route == "gram":
            b = wc.shape[0]
            # the strips hold the upper triangle once (counted twice): a form u'Qv is summed
            # with the symmetric weights (u_a v_b + v_a u_b) / 2, so w'Qw^2 is the mean of
            # w . (Q w^2) and w^2 . (Q w); the in-place steps give w, then w^2 as row weights
            first, second = slice(0, b), slice(b, 2 * b)
            steps = [(first, wc), (first, wc), (second, wc), (second, wc)]
            q = _weighted_gram_sums(xc, torch.cat([wc, w2]), steps, budget)
            q11, q12, q22 = q[:b], (q[b : 2 * b] + q[2 * b : 3 * b]) / 2, q[3 * b :]
        else:
            q11, q12, q22 = _feature_forms(xc, wc, budget)
        if linear is not None:
            linear += _linear_from_sums(xc, wc, q11, budget)
        q11 = q11 - _diag_share(diag, w2)
        q12 = q12 - _diag_share(diag, w2 * wc)
        q22 = q22 - _diag_share(diag, w2 * w2)
        alpha, beta = _kernel_weight_products(xc, wc)
        h = _u_statistic_numerators(q11, q12, q22, alpha, beta, wc)
        out += _normalise_batch(_mirror_batch(h), "unbiased CKA")
    return out


def _mirror_batch(m: torch.Tensor) -> torch.Tensor:
    """`similarity._mirror_upper` of every (L, L) matrix of a (B, L, L) stack at once (two
    calls instead of 2B: on a loaded machine every torch call costs a thread synchronisation,
    and 30 x 30 matrices are nothing else); the same entries, bit for bit."""
    return torch.triu(m) + torch.triu(m, diagonal=1).transpose(-1, -2)


def _normalise_batch(h: torch.Tensor, what: str) -> list[np.ndarray]:
    """`similarity._normalise` of every mirrored (L, L) numerator of a (B, L, L) stack, in
    numpy float64 (the same correctly rounded sqrt and division: the same numbers, bit for
    bit); a replicate with a non-positive diagonal raises through `_replicate_normalise`."""
    a = h.detach().cpu().numpy()  # (B, L, L) float64, symmetric by construction
    diag = np.diagonal(a, axis1=1, axis2=2).copy()  # (B, L)
    bad = np.flatnonzero((diag <= 0).any(axis=1))
    if len(bad):
        one = torch.from_numpy(a[bad[0]])
        if what == "CKA":
            _normalise(one, "CKA")
        _replicate_normalise(one)
    s = a / np.sqrt(diag[:, :, None] * diag[:, None, :])
    s = np.triu(s) + np.swapaxes(np.triu(s, 1), 1, 2)
    idx = np.arange(s.shape[1])
    s[:, idx, idx] = 1.0
    return list(s)


def _replicate_normalise(h: torch.Tensor) -> np.ndarray:
    try:
        return _normalise(h, "unbiased CKA")
    except InvalidStatesError as err:
        raise InvalidStatesError(
            f"{err} In a bootstrap replicate this means too few distinct passages (the "
            "U-statistic needs 4); use more passages."
        ) from None


def _feature_forms(xc: torch.Tensor, w: torch.Tensor, budget: int) -> tuple[torch.Tensor, ...]:
    """w'(G_i o G_j)w, w'(G_i o G_j)w^2, (w^2)'(G_i o G_j)w^2 (B, L, L) float64 from the
    weighted cross-covariances C1 = X_i^T W X_j, C2 = X_i^T W^2 X_j (Frobenius products);
    Gram diagonals included, as the streamed sums include them. Per layer i, the layers
    j >= i go in chunks whose (d, d) products fit `budget`, as `_feature_inner_products`."""
    n_layers, n, d = xc.shape
    per_chunk = max(1, budget // max(1, 2 * d * d + n * d))
    x64 = xc.to(torch.float64)
    q = torch.zeros(3, w.shape[0], n_layers, n_layers, dtype=torch.float64, device=xc.device)
    for r, wr in enumerate(w):
        for i in range(n_layers):
            left1 = x64[i].T * wr  # (d, N): X_i^T W
            left2 = left1 * wr  # X_i^T W^2
            for j0 in range(i, n_layers, per_chunk):
                j1 = min(n_layers, j0 + per_chunk)
                c1 = torch.matmul(left1, x64[j0:j1])  # (j1 - j0, d, d)
                c2 = torch.matmul(left2, x64[j0:j1])
                q[0, r, i, j0:j1] = (c1 * c1).sum(dim=(1, 2))
                q[1, r, i, j0:j1] = (c1 * c2).sum(dim=(1, 2))
                q[2, r, i, j0:j1] = (c2 * c2).sum(dim=(1, 2))
    return tuple(_mirror_batch(q[k]) for k in range(3))


def _cosine_replicates(
    x: torch.Tensor, indices: np.ndarray, block_size: int | None = None
) -> list[np.ndarray]:
    """Replicate r: sum_a w_a cos_ij(a) / N, the per-passage cosines a passage block at a time."""
    n_layers, n, d = x.shape
    norms = _layer_norms(x)  # raises on a zero vector, as `similarity_matrix` does
    w = _counts(indices, n, x.device)  # (B, N)
    budget = block_size if block_size is not None else DEFAULT_BLOCK_ELEMENTS
    rows = max(1, min(n, budget // max(1, n_layers * (d + n_layers))))
    total = torch.zeros(w.shape[0], n_layers * n_layers, dtype=torch.float64, device=x.device)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        unit = _unit_rows(x, norms, r0, r1).transpose(0, 1)  # (b, L, d)
        per_passage = torch.bmm(unit, unit.transpose(1, 2)).reshape(r1 - r0, -1)  # (b, L*L)
        total.addmm_(w[:, r0:r1], per_passage)
    out = []
    for s in total.view(-1, n_layers, n_layers) / n:
        s = _mirror_upper(s)
        s.fill_diagonal_(1.0)
        out.append(s.cpu().numpy())
    return out


def bootstrap_similarities(
    states: Any,
    indices: np.ndarray,
    metric: str = "cka",
    method: str = "auto",
    *,
    block_size: int | None = None,
) -> list[np.ndarray]:
    """One (L, L) similarity matrix per row of `indices` (B, N): the resampled stacks.

    block_size bounds the elements of one streamed block, as in `similarity_matrix`.
    """
    check_metrics((metric,))
    if method not in METHODS:
        raise DeffError(f"Unknown bootstrap method {method!r}; choose one of {', '.join(METHODS)}.")
    x = _validated(states, min_passages=4 if metric == "unbiased_cka" else 2)
    if not x.is_floating_point():
        x = x.to(torch.float64)
    n_layers, n, d = x.shape
    if method == "auto" and metric != "cosine":
        method = cheaper_method(n, d, n_layers, len(indices), metric)
    if block_size is not None and block_size < 1:
        raise DeffError(f"block_size must be a positive number of elements, not {block_size}.")
    if method == "recompute" and metric != "unbiased_cka":
        return [
            similarity_matrix(x[:, torch.from_numpy(idx)], metric, block_size=block_size)
            for idx in indices
        ]
    if metric == "cosine":
        return _cosine_replicates(x, indices, block_size)
    xc = _centred(x)  # (L, N, d), centred with the unweighted mean
    budget = block_size if block_size is not None else DEFAULT_BLOCK_ELEMENTS
    w = _counts(indices, n, x.device)  # (B, N)
    if metric == "cka":
        return _linear_replicates(xc, w, budget)
    return _unbiased_replicates(xc, w, budget, "gram" if method == "gram" else "feature")


def bootstrap_deff_over_L(
    states: Any,
    *,
    B: int = 100,
    seed: int = 0,
    metric: str = "cka",
    ci: float = 0.95,
    K: int | None = None,
    method: str = "auto",
) -> BootstrapResult:
    """Passage bootstrap of D_eff/L. states (L, N, d) -> BootstrapResult (percentile CI).

    K: maximum lag (default L-1). method: "auto", "gram" (all replicates from one streamed
    pass over the Gram matrices, see the module docstring) or "recompute" (resample the
    stack and call `similarity_matrix`); both give the same numbers.
    """
    from deffcore.core.checks import is_real

    if not (is_real(ci) and 0 < ci < 1):
        raise DeffError(f"The confidence level must lie strictly between 0 and 1; got {ci!r}.")
    seed = check_draw_seed(seed)
    x = _as_tensor(states)
    n_layers = x.shape[0] if x.ndim == 3 else 0
    B = check_b(B, n=int(x.shape[1]) if x.ndim == 3 else None, layers=n_layers)
    point = effective_depth(similarity_matrix(x, metric), K) / n_layers
    indices = resample_indices(x.shape[1], B, seed)
    mats = bootstrap_similarities(x, indices, metric, method)
    samples = np.array([effective_depth(s, K) / n_layers for s in mats])
    return BootstrapResult.of(point, samples, ci)
