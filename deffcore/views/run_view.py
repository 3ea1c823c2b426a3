"""One read-only view of a run, whatever holds it: a live `Measurement` or a JSON snapshot.

Pages, the notebook and the report read both kinds of run through the same `RunView` methods;
what only a live run can do (the bootstrap, which needs the pooled states) is reached through
`RunView.measurement`, which is None for a snapshot. Headline numbers are always recomputed from
the similarity matrix with the engine's own functions (`lag_profile`, `effective_depth`,
`gap_percent`), so a snapshot and a live run of the same data give the same numbers for every
pooling, metric and K.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from deffcore.views.labels import run_identity


@dataclass
class Headline:
    """The numbers on the first screen for one pooling, metric and maximum lag K."""

    layers: int
    d_model: int
    n: int
    K: int
    deff: float
    deff_over_L: float
    gap_pct: float
    reference_FL: float
    rho1: float
    pos0_ratio: float
    pos0_layer: int
    cka_bias: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RunView:
    """What every page reads. Subclasses provide `similarity`, `pos0_norm_ratio` and the rest."""

    label: str
    source: str  # "precomputed" or "measured"
    spec: dict[str, Any]
    layers: int
    d_model: int
    n: int

    def similarity(self, pooling: str = "default", metric: str = "cka") -> np.ndarray:
        raise NotImplementedError

    def pos0_norm_ratio(self) -> np.ndarray:
        """(L+1,) ratios for h_0 .. h_L."""
        raise NotImplementedError

    def update_depth(self, pooling: str = "default", metric: str = "cka") -> dict[str, Any] | None:
        """`UpdateDepth.to_dict()` of this pooling, or None when the run does not hold it."""
        return None

    def matched_references(
        self, pooling: str = "default", metric: str = "cka"
    ) -> dict[str, Any] | None:
        """`MatchedReferences.to_dict()` of this pooling, or None when the run does not hold it."""
        return None

    def random_band(self, pooling: str = "default", metric: str = "cka") -> dict[str, Any]:
        """`Measurement.random_band` (random-weight null seeds), {} when there is none."""
        return {}

    def stored_bootstrap(
        self, pooling: str = "default", metric: str = "cka", K: int | None = None
    ) -> dict[str, Any] | None:
        """The passage bootstrap this run was stored with for this headline (`BootstrapResult
        .to_dict()`), or None (`deffcore.views.run_spread.stored_bootstrap`)."""
        return None

    @property
    def measurement(self) -> Any | None:
        """The live `Measurement`, or None for a snapshot."""
        return None

    def atlas(self) -> Any | None:
        """The run's depth-use atlas (`deffcore.measures.atlas.Atlas`, SPEC 16), or None."""
        return None

    def measure_table(self, pooling: str = "default") -> Any | None:
        """The run's table across similarity measures of this pooling
        (`statistics.measure_table.MeasureTable`, SPEC 17.4), or None (never computes one)."""
        return None

    def paired_bootstrap(self) -> Any | None:
        """The run's `paired.PairedBootstrap` (one bootstrap of its poolings and metrics on the
        same passages, SPEC section 15), or None when it has none (never computes one)."""
        return None

    def window_source(self) -> Any | None:
        """The run's data as a `tokens.WindowSource` when the view holds it (a snapshot made
        with it), so an action is checked against the data without a tokenizer; else None."""
        return None

    # Everything below is computed from `similarity`, the same way for both kinds of run.

    def lag_profile(self, pooling: str = "default", metric: str = "cka") -> np.ndarray:
        from deffcore.measures.depth import lag_profile

        return lag_profile(self.similarity(pooling, metric))

    def deff_over_L_by_K(self, pooling: str = "default", metric: str = "cka") -> dict[int, float]:
        """D_eff(K)/L for every K = 1..L-1."""
        from deffcore.measures.depth import effective_depth

        S = self.similarity(pooling, metric)
        L = S.shape[0]
        return {K: effective_depth(S, K=K) / L for K in range(1, L)}

    def headline(
        self, pooling: str = "default", metric: str = "cka", K: int | None = None
    ) -> Headline:
        from deffcore.core.checks import check_int
        from deffcore.measures.depth import (
            effective_depth,
            gap_percent,
            lag_profile,
            reference_depth,
        )
        from deffcore.measures.similarity import cka_finite_sample_bias

        S = self.similarity(pooling, metric)
        L = S.shape[0]
        K = L - 1 if K is None else min(check_int(K, "K", 1), L - 1)  # "K must be ..."
        deff = float(effective_depth(S, K=K))
        ratios = self.pos0_norm_ratio()
        peak = int(np.nanargmax(ratios))
        return Headline(
            layers=L,
            d_model=self.d_model,
            n=self.n,
            K=K,
            deff=deff,
            deff_over_L=deff / L,
            gap_pct=float(gap_percent(deff, L)),
            reference_FL=float(reference_depth(L)),
            rho1=float(lag_profile(S)[0]),
            pos0_ratio=float(ratios[peak]),
            pos0_layer=peak,
            cka_bias=float(cka_finite_sample_bias(self.n, self.d_model)),
        )

    def trust(
        self,
        pooling: str = "default",
        metric: str = "cka",
        K: int | None = None,
        ci: tuple[float, float] | None = None,
        bootstrap_mean: float | None = None,
    ) -> Any:
        """How far to trust this headline (`deffcore.statistics.trust_rule.trust_badge`): N against
        d, whether
        the CKA bias moves D_eff/L (against unbiased CKA, when the run has it), the bootstrap
        interval `ci` (and its replicates' mean) when one was computed, else the bootstrap the
        run was stored with (`stored_bootstrap`: the run's measured spread, never the prior
        when the run has one), the random-weight band when the run has one."""
        if ci is None:
            boot = self.stored_bootstrap(pooling, metric, K)
            if boot is not None:
                ci, bootstrap_mean = (boot["low"], boot["high"]), boot["mean"]
        h = self.headline(pooling, metric, K)
        unbiased = None
        if metric == "cka":
            with contextlib.suppress(KeyError):  # a snapshot may lack unbiased CKA
                unbiased = self.headline(pooling, "unbiased_cka", K).deff_over_L
        return self.trust_of(
            pooling, metric, h.deff_over_L, ci, bootstrap_mean, unbiased, layers=h.layers
        )

    def trust_of(
        self,
        pooling: str,
        metric: str,
        deff_over_L: float,
        ci: tuple[float, float] | None = None,
        bootstrap_mean: float | None = None,
        unbiased: float | None = None,
        *,
        layers: int,
    ) -> Any:
        """The trust rule of `trust` for a D_eff/L of this run's passages; N and d are the
        run's, `layers` the number's (a headline's). The BOS answer judges its numbers with
        `bos_answer.answer_trust` (a paired bootstrap's, the live estimates' too)."""
        from deffcore.statistics.trust_rule import trust_badge, with_supply

        band = self.random_band(pooling, metric) or {}
        seeds = len(band.get("seeds") or band.get("deff_over_L") or [])
        null = (band["low"], band["high"]) if seeds and {"low", "high"} <= set(band) else None
        t = trust_badge(
            self.n,
            self.d_model,
            metric=metric,
            value=deff_over_L,
            unbiased_value=unbiased,
            ci=ci,
            null_band=null,
            null_seeds=seeds,
            layers=layers,  # the gap's regime is part of the claim
            bootstrap_mean=bootstrap_mean if ci is not None else None,
        )
        return with_supply(t, self.spec or None, self.window_source())  # actions the data gives

    def identity(self, pooling: str = "default", metric: str = "cka") -> dict[str, Any]:
        """`run_identity` of this run and view (what a downloaded table or figure carries)."""
        return run_identity(self.spec, pooling=pooling, metric=metric)
