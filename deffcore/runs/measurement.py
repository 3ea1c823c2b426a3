"""One run's numbers: the pooled states of a run and everything derived from them (`Measurement`).

    m.summary("default")            # DepthSummary: D_eff, D_eff/L, gap%, rho_hat(1)
    m.similarity("token_normed", "unbiased_cka")

A `Measurement` only reads the pooled states, so switching pooling, metric or K never runs the
model again; similarity matrices are memoised per (pooling, metric). In a notebook it shows its
summary and figures (`deffcore.views.notebook`).

Decisions: `pos0_peak` takes the maximum over h_0 .. h_L and reports the layer index l of h_l.
The PC controls apply per layer to h_0 .. h_L, so update depth and matched references exist for
them too. The random-weight null (`random_null`) holds one run of `random:<model>:<seed>` per
seed with the same text, N, max_tokens and dtype; its band is mean +- 2 sample standard
deviations (ddof=1) of D_eff/L over seeds.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from deffcore.core.checks import check_choice
from deffcore.core.constants import METRICS, PC_CONTROLS, POOLINGS
from deffcore.core.errors import DeffError, InvalidStatesError, UndefinedSimilarityError
from deffcore.extraction.forward import Progress
from deffcore.extraction.pooling import PooledStates
from deffcore.inputs.run_spec import RunSpec
from deffcore.measures.controls import apply_pc_control
from deffcore.measures.depth import (
    DepthSummary,
    depth_summary,
    effective_depth,
    gap_percent,
    lag_profile,
    reference_depth,
)
from deffcore.measures.references import (
    MatchedReferences,
    UpdateDepth,
    matched_references,
    update_depth,
)
from deffcore.measures.similarity import cka_finite_sample_bias, similarity_matrix


@dataclass
class Measurement:
    """One run's pooled states and everything derived from them (memoised, model never rerun)."""

    spec: RunSpec
    pooled: PooledStates
    metric: str = "cka"
    layers: int = 0
    d_model: int = 0
    n: int = 0
    cached: bool = False
    elapsed_s: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    #: passages taken from an interrupted run's finished batches when this run was computed
    #: (0 when it was computed in one go or read from the cache)
    resumed_passages: int = 0
    random_null: list[Measurement] = field(default_factory=list)
    _states: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _sim: dict[tuple[str, str], np.ndarray] = field(default_factory=dict, repr=False)
    _upd: dict[tuple[str, str], UpdateDepth] = field(default_factory=dict, repr=False)
    _refs: dict[tuple[str, str], MatchedReferences] = field(default_factory=dict, repr=False)
    _paired: dict[tuple, Any] = field(default_factory=dict, repr=False)
    #: answer bootstraps whose stand-in metric is undefined on this run's replicates
    _no_stand_in: set[tuple] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        self.layers = self.layers or self.pooled.layers
        self.d_model = self.d_model or self.pooled.d_model
        self.n = self.n or self.pooled.n

    def states_with_h0(self, pooling: str = "default") -> np.ndarray:
        """h_0 .. h_L pooled, (L+1, N, d) float32; PC controls applied per layer."""
        check_choice(pooling, POOLINGS, "pooling")
        if pooling not in self._states:
            if pooling in PC_CONTROLS:
                self._states[pooling] = np.asarray(
                    apply_pc_control(self.pooled.pooled["default"], pooling), dtype=np.float32
                )
            else:
                self._states[pooling] = self.pooled.pooled[pooling]
        return self._states[pooling]

    def states(self, pooling: str = "default") -> np.ndarray:
        """h_1 .. h_L pooled, (L, N, d)."""
        return self.states_with_h0(pooling)[1:]

    def similarity(self, pooling: str = "default", metric: str | None = None) -> np.ndarray:
        """(L, L) similarity of h_1 .. h_L; computed once per (pooling, metric)."""
        metric = metric or self.metric
        check_choice(metric, METRICS, "metric")
        if (pooling, metric) not in self._sim:
            self._sim[(pooling, metric)] = similarity_matrix(self.states(pooling), metric)
        return self._sim[(pooling, metric)]

    def undefined(self, pooling: str = "default", metric: str | None = None) -> str | None:
        """Why `pooling` has no numbers in this run, or None when it has them.

        A control whose pooled states do not vary across passages at some layer (e.g.
        first_non_bos when every passage starts with the same token: its states are the same
        for all passages) has no similarity, so it is undefined for this run while the default
        and the other controls are measured. The default pooling is never undefined here: its
        failure is the run's (the similarity raises)."""
        if pooling == "default":
            return None
        try:
            self.similarity(pooling, metric)
        except UndefinedSimilarityError as err:
            return f"Pooling {pooling!r} is undefined for this run: {err}"
        return None

    def summary(
        self, pooling: str = "default", metric: str | None = None, K: int | None = None
    ) -> DepthSummary:
        """D_eff, D_eff/L, gap%, rho_hat(1) at maximum lag K (default L-1); every number NaN
        for a control that is `undefined` for this run."""
        if self.undefined(pooling, metric) is not None:
            nan, L = float("nan"), self.layers
            return DepthSummary(L, nan, nan, nan, nan, reference_depth(L))
        S = self.similarity(pooling, metric)
        out = depth_summary(S)
        if K is not None and out.layers - 1 != K:
            deff = effective_depth(S, K)
            out = replace(
                out, deff=deff, deff_over_L=deff / out.layers, gap_pct=gap_percent(deff, out.layers)
            )
        return out

    def pos0_peak(self) -> tuple[float, int]:
        """(max over h_0 .. h_L of the position-0 norm ratio, its layer index l)."""
        ratios = np.asarray(self.pooled.pos0_norm_ratio, dtype=np.float64)
        finite = np.isfinite(ratios)
        if not finite.any():  # (never from the cache: non-finite states are not stored)
            raise InvalidStatesError(
                "The position-0 norm ratio is NaN or inf at every layer, so it has no peak."
            )
        layer = int(np.argmax(np.where(finite, ratios, -np.inf)))
        return float(ratios[layer]), layer

    def update_depth(self, pooling: str = "default", metric: str | None = None) -> UpdateDepth:
        """Depth of the updates f_l = h_l - h_{l-1} (SPEC section 6)."""
        metric = metric or self.metric
        if (pooling, metric) not in self._upd:
            self._upd[(pooling, metric)] = update_depth(self.states_with_h0(pooling), metric)
        return self._upd[(pooling, metric)]

    def matched_references(
        self, pooling: str = "default", metric: str | None = None
    ) -> MatchedReferences:
        """F_L, F_norm, F_h0+norm, F_h0+corr for this pooling's D_eff (SPEC section 5)."""
        metric = metric or self.metric
        if (pooling, metric) not in self._refs:
            deff = self.summary(pooling, metric).deff
            self._refs[(pooling, metric)] = matched_references(
                self.states_with_h0(pooling), deff=deff, metric=metric
            )
        return self._refs[(pooling, metric)]

    def bootstrap(
        self,
        pooling: str = "default",
        metric: str | None = None,
        *,
        B: int = 100,
        seed: int = 0,
        ci: float = 0.95,
        K: int | None = None,
    ):
        """Passage bootstrap of D_eff/L (SPEC section 8) -> BootstrapResult."""
        from deffcore.statistics.bootstrap import bootstrap_deff_over_L

        return bootstrap_deff_over_L(
            self.states(pooling), B=B, seed=seed, metric=metric or self.metric, ci=ci, K=K
        )

    def paired_bootstrap(
        self,
        poolings: tuple[str, ...] | None = None,
        metrics: tuple[str, ...] | None = None,
        *,
        B: int = 100,
        seed: int = 0,
        progress: Progress | None = None,
    ):
        """One passage bootstrap shared by `poolings` (default: every pooling defined for this
        run) under `metrics` (default: the run's metric and unbiased CKA): a
        `paired.PairedBootstrap` (SPEC section 15), memoised; `paired_latest` returns it.
        progress(done, total, stage): after each pooling."""
        from deffcore.statistics.paired import paired_bootstrap

        poolings = tuple(p for p in (poolings or POOLINGS) if self.undefined(p) is None)
        metrics = metrics or tuple(dict.fromkeys((self.metric, "unbiased_cka")))
        key = (poolings, tuple(metrics), B, seed)
        self._read_stored()
        if key not in self._paired:
            self._paired[key] = self._covering(poolings, metrics, B, seed)
        if self._paired[key] is None:
            stacks = {p: self.states(p) for p in poolings}
            self._paired[key] = paired_bootstrap(
                stacks, metrics=metrics, B=B, seed=seed, progress=progress
            )
            self._keep(self._paired[key])
        self._paired["latest"] = self._paired[key]
        return self._paired[key]

    def answer_bootstrap(
        self,
        poolings: tuple[str, ...] | None = None,
        metric: str | None = None,
        *,
        also: tuple[str, ...] = (),
        B: int = 100,
        seed: int = 0,
        progress: Progress | None = None,
    ):
        """The paired bootstrap a BOS answer under `metric` (default: the run's) is given
        from: `metric`, the metrics in `also` and, beside linear CKA, its stand-in unbiased CKA
        (`bos_answer.answer_metrics`; SPEC 15), all on the same passage multisets. Where the
        stand-in is undefined on this run's replicates (too few distinct passages for the
        U-statistic) it is drawn without it, so linear CKA answers alone, its bias said.
        Memoised like `paired_bootstrap`."""
        from deffcore.statistics.bos_answer import answer_metrics

        metric = metric or self.metric
        asked = tuple(dict.fromkeys((metric, *also)))
        wanted = tuple(dict.fromkeys((*answer_metrics(metric), *also)))
        key = (poolings, wanted, B, seed)
        if wanted != asked and key not in self._no_stand_in:
            try:
                return self.paired_bootstrap(poolings, wanted, B=B, seed=seed, progress=progress)
            except DeffError:  # the stand-in's U-statistic is undefined here (or the metric's)
                self._no_stand_in.add(key)
        return self.paired_bootstrap(poolings, asked, B=B, seed=seed, progress=progress)

    def _covering(self, poolings, metrics, B: int, seed: int):
        """A memoised paired bootstrap with this B and seed that holds every (pooling, metric)
        asked, restricted to them (the same multisets, so the same numbers), or None."""
        for key, pb in self._paired.items():
            if key not in ("latest", "stored") and pb is not None and (pb.B, pb.seed) == (B, seed):
                found = pb.restricted(poolings, metrics)
                if found is not None:
                    return found
        return None

    def adopt_paired(self, pb: Any) -> bool:
        """Keep `pb` (a `paired.PairedBootstrap` drawn elsewhere, e.g. by the live estimate on
        these passages) as this run's, when it is of this run: its n, L and each
        pooling's point profile equal to this run's own. One metric per pooling is checked,
        linear CKA where `pb` has it: both are functions of the same pooled states, and the
        unbiased similarity is not computed for a run that shows only linear CKA. A later
        `paired_bootstrap` it covers is read from it, not redrawn, and until one is computed
        it is the run's `paired_latest`: its measured spread and paired answer (SPEC 15).
        True when kept."""
        if pb is None or (pb.n, pb.layers) != (self.n, self.layers):
            return False
        checked: dict[str, str] = {}
        for pooling, metric in sorted(pb.points, key=lambda pm: pm[1] != "cka"):
            checked.setdefault(pooling, metric)
        for pooling, metric in checked.items():
            if self.undefined(pooling, metric) is not None:
                return False
            if not np.array_equal(lag_profile(self.similarity(pooling, metric)), pb.points[
                    (pooling, metric)]):  # fmt: skip
                return False
        self._read_stored()
        self._hold(pb)
        self._keep(pb)
        return True

    def _hold(self, pb: Any) -> None:
        poolings = tuple(dict.fromkeys(p for p, _ in pb.points))
        metrics = tuple(dict.fromkeys(m for _, m in pb.points))
        self._paired[(poolings, metrics, pb.B, pb.seed)] = pb
        self._paired.setdefault("latest", pb)

    def _read_stored(self) -> None:
        """Once: the paired bootstraps kept with the run's cache entry (`paired_store`), the
        newest its `paired_latest`, so a run read back answers from the replicates drawn for
        it before, in whatever process (SPEC section 15)."""
        if "stored" in self._paired:
            return
        self._paired["stored"] = None
        found = stored_paired(self.spec, self.layers, self.n)
        for pb in found:
            self._hold(pb)
        if found:
            self._paired["latest"] = found[-1]

    def _keep(self, pb: Any) -> None:
        keep_paired(self.spec, pb, self.layers, self.n)

    def paired_latest(self):
        """The last `paired_bootstrap` computed for this run, else the one kept with its cache
        entry or adopted (the live estimates' on its own passages), or None (never computes)."""
        self._read_stored()
        return self._paired.get("latest")

    def random_band(self, pooling: str = "default", metric: str | None = None) -> dict[str, Any]:
        """D_eff/L of each random-weight seed, their mean and the mean +- 2 sigma band."""
        values = [m.summary(pooling, metric).deff_over_L for m in self.random_null]
        seeds = [str(m.spec.model_spec.seed) for m in self.random_null]
        return null_band(seeds, values) if values else {}

    def to_dict(self, metric: str | None = None) -> dict[str, Any]:
        """The CLI's JSON object (see `python -m deffcore measure --help`)."""
        metric = metric or self.metric
        ratio, layer = self.pos0_peak()
        results = {}
        for pooling in POOLINGS:
            s = self.summary(pooling, metric)
            why = self.undefined(pooling, metric)
            if why is not None:  # a degenerate control: its numbers are null, with the reason
                keys = ("deff", "deff_over_L", "gap_pct", "rho1", "update_depth")
                results[pooling] = {**dict.fromkeys(keys), "undefined": why}
                results[pooling].update(deff_over_L_at_K={}, matched_references=None)
                continue
            results[pooling] = {
                "undefined": None,
                "deff": s.deff,
                "deff_over_L": s.deff_over_L,
                "gap_pct": s.gap_pct,
                "rho1": s.rho1,
                "deff_over_L_at_K": {str(k): v for k, v in s.deff_over_L_at_K.items()},
                "update_depth": self.update_depth(pooling, metric).to_dict(),
                "matched_references": self.matched_references(pooling, metric).to_dict(),
            }
        out: dict[str, Any] = {
            "model": self.spec.model,
            "revision": self.spec.revision,
            "dataset": self.spec.dataset,
            "layers": self.layers,
            "d_model": self.d_model,
            "n": self.n,
            "n_requested": self.spec.n,
            "n_dropped": int(self.pooled.n_dropped_short),
            "max_tokens": self.spec.max_tokens,
            "seed": self.spec.seed,
            "dtype": self.spec.dtype,
            "intervention": self.spec.intervention,
            "passages": self.spec.passages,
            "bos": self.spec.bos,
            "metric": metric,
            "key": self.spec.key(),
            "reference_FL": depth_summary(self.similarity("default", metric)).reference_FL,
            "cka_bias": cka_finite_sample_bias(self.n, self.d_model),
            "pos0_norm_ratio": {"max": ratio, "layer": layer},
            "results": results,
            "cached": self.cached,
            "elapsed_s": self.elapsed_s,
            "resumed_passages": self.resumed_passages,
        }
        if self.random_null:
            out["random_null"] = {
                "models": [m.spec.model for m in self.random_null],
                "cached": [m.cached for m in self.random_null],
                "results": {p: self.random_band(p, metric) for p in POOLINGS},
            }
        return out

    # -- In a notebook (deffcore.views.notebook): the same view a shared snapshot gets
    # ---------------

    def view(self, label: str | None = None):
        """This run as a `snapshot.MeasurementView` (what the explorer's pages read)."""
        from deffcore.views.measurement_view import MeasurementView

        return MeasurementView(self, label)

    def trust(
        self,
        pooling: str = "default",
        metric: str | None = None,
        K: int | None = None,
        ci: tuple[float, float] | None = None,
    ):
        """Trust level of the headline (`deffcore.statistics.trust_rule.Trust`: level, reasons,
        action)."""
        return self.view().trust(pooling, metric or self.metric, K, ci)

    def figure(self, name: str = "heatmap", **options: Any):
        """The explorer's Plotly figure: "heatmap", "lag", "gap" or "controls" (options:
        pooling, metric, K, paper; see `deffcore.views.notebook.run_figure`)."""
        options.setdefault("metric", self.metric)
        return self.view().figure(name, **options)

    def _repr_html_(self) -> str:
        from deffcore.views.notebook import run_html

        return run_html(self.view(), metric=self.metric)


def null_band(seeds: list[str], values: list[float]) -> dict[str, Any]:
    """The random-weight band of per-seed D_eff/L `values`: each seed's value, their mean,
    sample sd (ddof 1; 0 for one seed) and the mean +- 2 sd band."""
    sd = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
    mean = float(np.mean(values))
    return {
        "seeds": list(seeds),
        "deff_over_L": list(values),
        "mean": mean,
        "sd": sd,
        "low": mean - 2 * sd,
        "high": mean + 2 * sd,
    }


# ---------------------------------------------------------------------------------------------
# A run's paired bootstraps kept beside its cache entry (SPEC section 15)
#
#     <cache>/<key>/paired.json   {"format", "key", "bootstraps": [PairedBootstrap.to_dict()...]}
#
# A paired bootstrap drawn for a run anywhere (the BOS page's background draw, `measure` or `bos`
# with `--bootstrap` or without, `--until verdict`'s live estimates) is kept here, and a
# `Measurement` read back adopts them, so a report, a command or a notebook made later answers
# from the replicates the page answered from. The newest `KEEP_PAIRED` are kept, newest last; a
# file not of this format, not this run's, or whose bootstraps are not of this run's L and N
# reads as absent. A run without a cache entry keeps its bootstraps in memory only.
# ---------------------------------------------------------------------------------------------

PAIRED_FILE = "paired.json"
#: Bump when what the file holds changes (older files then read as absent).
PAIRED_FORMAT = 1
#: Paired bootstraps kept per run (each is B x (L - 1) numbers per pooling and metric).
KEEP_PAIRED = 4


def _paired_file(spec: Any) -> Path | None:
    """The run's side file, or None when the run has no cache entry of ours."""
    from deffcore.core.paths import cache_dir
    from deffcore.extraction.entries import is_run_entry

    folder = cache_dir() / spec.key()
    return folder / PAIRED_FILE if is_run_entry(folder) else None


def stored_paired(spec: Any, layers: int, n: int) -> list[Any]:
    """The run's kept `paired.PairedBootstrap`s, oldest first ([] when none is readable)."""
    from deffcore.core.errors import DeffError
    from deffcore.statistics.paired import PairedBootstrap

    path = _paired_file(spec)
    if path is None or not path.is_file() or path.is_symlink():
        return []
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return []
    if not isinstance(data, dict) or data.get("format") != PAIRED_FORMAT:
        return []
    if data.get("key") != spec.key() or not isinstance(data.get("bootstraps"), list):
        return []
    found = []
    for d in data["bootstraps"]:
        try:
            pb = PairedBootstrap.from_dict(d)
        except (DeffError, TypeError, AttributeError):
            continue
        if (pb.layers, pb.n) == (layers, n):
            found.append(pb)
    return found


def keep_paired(spec: Any, pb: Any, layers: int, n: int) -> None:
    """Keep `pb` with the run's entry (newest last, at most `KEEP_PAIRED`); a run without an
    entry keeps nothing here. A failed write warns and loses only the file, never the run."""
    from deffcore.core.errors import DeffError
    from deffcore.core.files import atomic_write

    path = _paired_file(spec)
    if path is None:
        return
    mine = pb.to_dict()  # at full precision here (a snapshot rounds): the same numbers back
    mine["points"] = [np.asarray(pb.points[k], dtype=np.float64).tolist() for k in pb.profiles]
    mine["profiles"] = [np.asarray(pb.profiles[k], dtype=np.float64).tolist() for k in pb.profiles]
    kept = [b.to_dict() for b in stored_paired(spec, layers, n)]
    kept = [*[b for b in kept if b != mine][-(KEEP_PAIRED - 1) :], mine]
    body = {"format": PAIRED_FORMAT, "key": spec.key(), "bootstraps": kept}
    try:
        atomic_write(path, json.dumps(body, separators=(",", ":")).encode())
    except DeffError as err:
        warnings.warn(f"The paired bootstrap was not kept with the run: {err}", stacklevel=2)
