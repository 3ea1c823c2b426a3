"""The Gromov–Wasserstein lens of one run (paper Table S22): GW matrix beside CKA, stored.

`gw_lens(measurement, GwOptions(...))` computes `deffcore.measures.gw.gw_matrix` on the run's
pooled states h_1 .. h_L (one pooling) and the three Spearman correlations over layer pairs
against the run's similarity matrix, and stores the result (`deffcore.labs.store`, lab "gw"),
keyed by the run's cache key, the pooling, the similarity metric and every GW option
(`GwOptions.identity`), so the app and a repeated command read it back (a GW matrix costs
minutes; see BENCHMARKS.md).

The solver's start (`GwOptions.init`, `deffcore.measures.gw.INITS`; by default "both", the lower
GW^2 of the product and identity starts, SPEC 13.1) is part of the key and of every result, with
`paper_start` (whether it is the paper's start, `deffcore.measures.gw.PAPER_INIT`, POT's product
coupling). A default result also carries the paper's start's own figures (`paper`: its
matrix and Spearman correlations, from the same solves), shown beside it where Table S22 is
compared. `GW_FORMAT` is in the key too: results stored before it are never read back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from deffcore.labs import store as lab_store
from deffcore.measures.gw import (
    EPSILON,
    INITS,
    N_GW,
    PAPER_INIT,
    gw_matrix,
    gw_start_matrices,
    pair_spearman,
)

#: Bump when a stored GW result's meaning changes. 2: the default start is the product
#: coupling, the start is recorded, failed solves are refused. 3: the default start is the
#: lower of the product and identity starts ("both"), whose results carry the product
#: start's figures (`paper`).
GW_FORMAT = 3

ProgressFn = Callable[[int, int, str], None]


@dataclass(frozen=True)
class GwOptions:
    """How a GW lens is computed: the run's pooling and every option of
    `deffcore.measures.gw.gw_matrix` (its defaults are the library's; the start `init`
    defaults to "both", the lower of the product and identity starts)."""

    pooling: str = "default"
    n_gw: int = N_GW
    seed: int = 0
    gw_metric: str = "euclidean"
    solver: str = "exact"
    epsilon: float = EPSILON
    init: str = INITS[0]

    def identity(self, run_key: str, metric: str) -> dict[str, Any]:
        """Plain values that determine a GW lens result of the run `run_key` under the
        similarity `metric` (epsilon only where the entropic solver reads it; the entropic
        solver always starts from the product coupling, so its `init` reads "product"
        whatever was asked)."""
        return {
            "gw_format": GW_FORMAT,
            "run_key": run_key,
            "pooling": self.pooling,
            "metric": metric,
            "n_gw": int(self.n_gw),
            "seed": int(self.seed),
            "gw_metric": self.gw_metric,
            "solver": self.solver,
            "epsilon": float(self.epsilon) if self.solver == "entropic" else None,
            "init": "product" if self.solver == "entropic" else self.init,
        }


def stored_gw(measurement: Any, options: GwOptions | None = None) -> dict[str, Any] | None:
    """The stored `gw_lens` result of these options (`"cached": True`), or None; never
    computes (the app shows a stored result before anyone presses Compute)."""
    options = options or GwOptions()
    identity = options.identity(measurement.spec.key(), measurement.metric)
    found = lab_store.read_result("gw", identity)
    return None if found is None else {**found, "cached": True}


def gw_lens(
    measurement: Any,
    options: GwOptions | None = None,
    *,
    store: bool = True,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """{"gw": (L, L) lists, "similarity": (L, L), "spearman_gw_cka", "spearman_lag_gw",
    "spearman_lag_cka", "n_gw" (passages used), "init" (the start), "paper_start",
    "paper" (with init "both": the product start's "gw" and Spearman correlations, else None),
    "seconds", "cached", options...}. Raises GWSolverError (nothing stored) when a solve
    fails.

    `options`: the pooling and GW options (`GwOptions()`: the defaults); `store`: read a stored
    result of the same run and options instead of computing, and store a computed one."""
    m, o = measurement, options or GwOptions()
    if store:
        found = stored_gw(m, o)
        if found is not None:
            return found
    states = m.states(o.pooling)
    S = m.similarity(o.pooling)
    start = time.perf_counter()
    identity = o.identity(m.spec.key(), m.metric)
    paper = None
    if identity["init"] == "both":  # both starts solved once: the paper's is kept beside
        by_start = gw_start_matrices(
            states, n=o.n_gw, seed=o.seed, metric=o.gw_metric, progress=progress
        )
        G = np.minimum(by_start["product"], by_start["identity"])
        P = by_start[PAPER_INIT]
        paper = {"init": PAPER_INIT, "gw": P.tolist(), **pair_spearman(P, S)}
    else:
        G = gw_matrix(
            states, n=o.n_gw, seed=o.seed, metric=o.gw_metric, solver=o.solver,
            epsilon=o.epsilon, init=o.init, progress=progress,
        )  # fmt: skip
    seconds = time.perf_counter() - start
    result = {
        "lab": "gw",
        "model": m.spec.model,
        "dataset": m.spec.dataset,
        "layers": m.layers,
        "n": m.n,
        "pooling": o.pooling,
        "metric": m.metric,
        "n_gw": min(int(o.n_gw), m.n),
        "gw_seed": o.seed,
        "gw_metric": o.gw_metric,
        "solver": o.solver,
        "epsilon": identity["epsilon"],
        "init": identity["init"],
        "paper_start": identity["init"] == PAPER_INIT,
        "paper": paper,
        "gw": np.asarray(G).tolist(),
        "similarity": np.asarray(S, dtype=np.float64).tolist(),
        **pair_spearman(G, S),
        "seconds": seconds,
        "key": m.spec.key(),
    }
    if store:
        lab_store.write_result("gw", identity, result)
    return {**result, "cached": False}
