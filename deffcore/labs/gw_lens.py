"""The Gromov–Wasserstein lens of one run (paper Table S22): GW matrix beside CKA, stored.

`gw_lens(measurement, ...)` computes `deffcore.measures.gw.gw_matrix` on the run's pooled states
h_1 .. h_L (one pooling) and the three Spearman correlations over layer pairs against the
run's similarity matrix, and stores the result (`deffcore.labs.store`, lab "gw"), keyed by
the run's cache key, the pooling, the similarity metric and every GW option, so the app and a
repeated command read it back (a GW matrix costs minutes; see BENCHMARKS.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from deffcore.measures.gw import EPSILON, N_GW, gw_matrix, pair_spearman

ProgressFn = Callable[[int, int, str], None]


def gw_identity(
    run_key: str,
    *,
    pooling: str,
    metric: str,
    n_gw: int,
    seed: int,
    gw_metric: str,
    solver: str,
    epsilon: float,
    init: str,
) -> dict[str, Any]:
    """Plain values that determine a GW lens result."""
    return {
        "run_key": run_key,
        "pooling": pooling,
        "metric": metric,
        "n_gw": int(n_gw),
        "seed": int(seed),
        "gw_metric": gw_metric,
        "solver": solver,
        "epsilon": float(epsilon) if solver == "entropic" else None,
        "init": init,
    }


def _identity(m: Any, **options: Any) -> dict[str, Any]:
    return gw_identity(m.spec.key(), metric=m.metric, **options)


def stored_gw(
    measurement: Any,
    *,
    pooling: str = "default",
    n_gw: int = N_GW,
    seed: int = 0,
    gw_metric: str = "euclidean",
    solver: str = "exact",
    epsilon: float = EPSILON,
    init: str = "both",
) -> dict[str, Any] | None:
    """The stored `gw_lens` result of these options (`"cached": True`), or None; never
    computes (the app shows a stored result before anyone presses Compute)."""
    from deffcore.labs import store as lab_store

    identity = _identity(
        measurement, pooling=pooling, n_gw=n_gw, seed=seed, gw_metric=gw_metric,
        solver=solver, epsilon=epsilon, init=init,
    )  # fmt: skip
    found = lab_store.read_result("gw", identity)
    return None if found is None else {**found, "cached": True}


def gw_lens(
    measurement: Any,
    *,
    pooling: str = "default",
    n_gw: int = N_GW,
    seed: int = 0,
    gw_metric: str = "euclidean",
    solver: str = "exact",
    epsilon: float = EPSILON,
    init: str = "both",
    store: bool = True,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """{"gw": (L, L) lists, "similarity": (L, L), "spearman_gw_cka", "spearman_lag_gw",
    "spearman_lag_cka", "n_gw" (passages used), "seconds", "cached", options...}."""
    from deffcore.labs import store as lab_store

    m = measurement
    options = {"pooling": pooling, "n_gw": n_gw, "seed": seed, "gw_metric": gw_metric,
               "solver": solver, "epsilon": epsilon, "init": init}  # fmt: skip
    identity = _identity(m, **options)
    if store:
        found = stored_gw(m, **options)
        if found is not None:
            return found
    states = m.states(pooling)
    S = m.similarity(pooling)
    start = time.perf_counter()
    G = gw_matrix(
        states, n=n_gw, seed=seed, metric=gw_metric, solver=solver, epsilon=epsilon,
        init=init, progress=progress,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    result = {
        "lab": "gw",
        "model": m.spec.model,
        "dataset": m.spec.dataset,
        "layers": m.layers,
        "n": m.n,
        "pooling": pooling,
        "metric": m.metric,
        "n_gw": min(int(n_gw), m.n),
        "gw_seed": seed,
        "gw_metric": gw_metric,
        "solver": solver,
        "epsilon": identity["epsilon"],
        "init": init,
        "gw": np.asarray(G).tolist(),
        "similarity": np.asarray(S, dtype=np.float64).tolist(),
        **pair_spearman(G, S),
        "seconds": seconds,
        "key": m.spec.key(),
    }
    if store:
        lab_store.write_result("gw", identity, result)
    return {**result, "cached": False}
