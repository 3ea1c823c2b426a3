"""Model + text -> cached pooled states -> every number of a run (`measure`).

    m = measure(model="smollm2-135m", dataset="bbc-news", n=512, max_tokens=128)
    m.summary("default")            # DepthSummary: D_eff, D_eff/L, gap%, rho_hat(1)
    m.similarity("token_normed", "unbiased_cka")

The forward pass happens once per `RunSpec` (and is cached on disk); a `Measurement` only reads
the pooled states, so switching pooling, metric or K never runs the model again. Similarity
matrices are memoised per (pooling, metric).

Decisions: `pos0_peak` takes the maximum over h_0 .. h_L and reports the layer index l of h_l.
The PC controls apply per layer to h_0 .. h_L, so update depth and matched references exist for
them too. The random-weight null (`random_seeds`) measures `random:<model>:<seed>` per seed with
the same text, N, max_tokens and dtype, each cached as its own run; its band is mean +- 2
sample standard deviations (ddof=1) of D_eff/L over seeds.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from deffcore.core.checks import check_cache_dir, check_int, check_seed
from deffcore.core.constants import (
    BOS_OPTIONS,
    METRICS,
    PASSAGE_MODES,
    PC_CONTROLS,
    POOLINGS,
    WINDOW_MODES,
)
from deffcore.core.errors import (
    DeffError,
    InvalidStatesError,
    NonFiniteActivationsError,
    RunCancelled,
    TooFewPassagesError,
    UndefinedSimilarityError,
    fit_advice,
)
from deffcore.extraction import cache
from deffcore.extraction.batches import BatchCheckpoint, SavedBatch
from deffcore.extraction.forward import extract_pooled
from deffcore.extraction.pooling import PooledStates
from deffcore.inputs.context import check_max_tokens
from deffcore.inputs.devices import check_fits, resolve_device_dtype
from deffcore.inputs.gguf import assemble_packaged, needs_assembly
from deffcore.inputs.interventions import INTERVENTIONS
from deffcore.inputs.loading import LoadedModel, load_model
from deffcore.inputs.run_spec import RunSpec
from deffcore.inputs.texts import check_dataset
from deffcore.inputs.tokens import run_texts, run_token_ids
from deffcore.measures.controls import apply_pc_control
from deffcore.measures.depth import (
    DepthSummary,
    depth_summary,
    effective_depth,
    gap_percent,
    reference_depth,
)
from deffcore.measures.references import (
    MatchedReferences,
    UpdateDepth,
    matched_references,
    update_depth,
)
from deffcore.measures.similarity import cka_finite_sample_bias, similarity_matrix
from deffcore.runs import external

Progress = Callable[[int, int, str], None]
#: Smallest number of kept passages a run accepts (unbiased CKA needs 4).
MIN_PASSAGES = 4


def _check_choice(value: str, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise DeffError(f"Unknown {what} {value!r}; choose one of {', '.join(allowed)}.")


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

    def __post_init__(self) -> None:
        self.layers = self.layers or self.pooled.layers
        self.d_model = self.d_model or self.pooled.d_model
        self.n = self.n or self.pooled.n

    def states_with_h0(self, pooling: str = "default") -> np.ndarray:
        """h_0 .. h_L pooled, (L+1, N, d) float32; PC controls applied per layer."""
        _check_choice(pooling, POOLINGS, "pooling")
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
        _check_choice(metric, METRICS, "metric")
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

    def random_band(self, pooling: str = "default", metric: str | None = None) -> dict[str, Any]:
        """D_eff/L of each random-weight seed, their mean and the mean +- 2 sigma band."""
        values = [m.summary(pooling, metric).deff_over_L for m in self.random_null]
        if not values:
            return {}
        sd = float(np.std(values, ddof=1)) if len(values) > 1 else 0.0
        mean = float(np.mean(values))
        return {
            "seeds": [m.spec.model.rpartition(":")[2] for m in self.random_null],
            "deff_over_L": values,
            "mean": mean,
            "sd": sd,
            "low": mean - 2 * sd,
            "high": mean + 2 * sd,
        }

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

    # -- In a notebook (deffcore.notebook): the same view a shared snapshot gets ---------------

    def view(self, label: str | None = None):
        """This run as a `snapshot.MeasurementView` (what the explorer's pages read)."""
        from deffcore.views.run_view import MeasurementView

        return MeasurementView(self, label)

    def trust(
        self,
        pooling: str = "default",
        metric: str | None = None,
        K: int | None = None,
        ci: tuple[float, float] | None = None,
    ):
        """Trust level of the headline (`deffcore.trust_rule.Trust`: level, reasons, action)."""
        return self.view().trust(pooling, metric or self.metric, K, ci)

    def figure(self, name: str = "heatmap", **options: Any):
        """The explorer's Plotly figure: "heatmap", "lag", "gap" or "controls" (options:
        pooling, metric, K, paper; see `deffcore.notebook.run_figure`)."""
        options.setdefault("metric", self.metric)
        return self.view().figure(name, **options)

    def _repr_html_(self) -> str:
        from deffcore.views.notebook import run_html

        return run_html(self.view(), metric=self.metric)


def extract_spec(
    spec: RunSpec,
    *,
    device: str | None = None,
    batch_size: int | None = None,
    progress: Progress | None = None,
    loaded: LoadedModel | None = None,
    checkpoint: BatchCheckpoint | None = None,
    should_stop: Callable[[], bool] | None = None,
    documents: list[str] | None = None,
) -> PooledStates:
    """Compute the pooled states of `spec` (no cache): text, then model, then one extraction.

    The dataset is opened before the model loads, so a bad dataset fails in milliseconds.
    `loaded` reuses a model already in memory (it must be `spec.model` at `spec.revision`).
    The intervention named by `spec.intervention` is applied around the extraction.
    `checkpoint` keeps finished batches and resumes them (`deffcore.cache.PartialRun(spec)`);
    `should_stop()` is asked before the model loads and before every batch (RunCancelled).
    `documents`: the run's texts when they are not `spec.dataset`'s (a notebook's list of
    strings, `deffcore.external`); None reads them from the dataset.
    """
    device = device or resolve_device_dtype(None, spec.dtype)[0]
    documents = run_texts(spec) if documents is None else documents
    model = loaded
    if should_stop is not None and should_stop():
        raise RunCancelled("The run was stopped before it started.")
    if model is None:
        if progress is not None and needs_assembly(spec.model):  # a stage of its own, once
            progress(0, spec.n, f"assembling {spec.model}")
            assemble_packaged(spec.model)
        if progress is not None:
            progress(0, spec.n, f"loading {spec.model}")
        model = load_model(spec.model, revision=spec.revision, device=device, dtype=spec.dtype)
    # documents mode hands extraction the texts (it tokenises them and drops too-short ones)
    token_ids = None
    if spec.passages in WINDOW_MODES:
        token_ids = run_token_ids(spec, model.tokenizer, documents)
    with contextlib.ExitStack() as stack:
        if spec.intervention != "none":
            from deffcore.inputs.interventions import norm_intervention

            stack.enter_context(norm_intervention(model.model, spec.intervention))
        try:
            return extract_pooled(
                model,
                None if token_ids is not None else documents,
                token_ids=token_ids,
                max_tokens=spec.max_tokens,
                batch_size=batch_size,
                progress=progress,
                bos=spec.bos,
                checkpoint=checkpoint,
                should_stop=should_stop,
            )
        except NonFiniteActivationsError as err:  # never "try float32" to a float32 run
            raise fit_advice(err, spec.dtype) from err


def measure_spec(
    spec: RunSpec,
    *,
    metric: str = "cka",
    device: str | None = None,
    batch_size: int | None = None,
    progress: Progress | None = None,
    loaded: LoadedModel | None = None,
    use_cache: bool = True,
    should_stop: Callable[[], bool] | None = None,
    documents: list[str] | None = None,
    tap: Callable[[SavedBatch], None] | None = None,
) -> Measurement:
    """Measure one fully specified run: read it from the cache or extract and store it.

    `loaded` reuses a model that is already in memory (it must be `spec.model` at
    `spec.revision`; the labs pass it to extract several runs from one load).
    While extracting, finished batches are kept in the run's cache entry, so a run killed,
    interrupted or cancelled (`should_stop()` returning True between batches: RunCancelled)
    resumes from its last finished batch when measured again, with bit-identical results
    (`Measurement.resumed_passages` says how many passages were resumed).
    `use_cache=False` recomputes without reading or writing the cache at all.
    Window runs also reuse a cached run of the same settings with another N, bit-identically
    (`deffcore.prefix_cache`: a larger run resumes from a smaller one's batches, a smaller one
    is a larger one's first rows); `tap(batch)` sees every finished chunk of batches
    (`deffcore.anytime_run`: the live estimates).
    """
    from deffcore.extraction import prefix_cache

    start = time.perf_counter()
    resolved = loaded.device if loaded is not None else device
    resolved = resolved or resolve_device_dtype(None, spec.dtype)[0]

    def compute(checkpoint: BatchCheckpoint | None = None) -> PooledStates:
        return extract_spec(
            spec,
            device=device,
            batch_size=batch_size,
            progress=progress,
            loaded=loaded,
            checkpoint=checkpoint,
            should_stop=should_stop,
            documents=documents,
        )

    def compute_cached() -> PooledStates:
        served = prefix_cache.from_larger(spec, resolved, batch_size)
        if served is not None:
            return served
        checkpoint = prefix_cache.PrefixCheckpoint(spec, resolved, batch_size, tap)
        return prefix_cache.finish(compute(checkpoint), checkpoint)

    if use_cache:
        pooled, was_cached, meta = cache.get_or_compute(spec, compute_cached)
    else:
        watch = None
        if tap is not None:
            watch = prefix_cache.PrefixCheckpoint(spec, resolved, batch_size, tap, use_cache=False)
        pooled, was_cached, meta = compute(watch), False, {}
        cache.check_finite(pooled, spec.dtype)  # what the cache refuses to store, unmeasured
    resumed = 0 if was_cached else int(pooled.meta.get("resumed_passages") or 0)
    if pooled.n < MIN_PASSAGES:
        raise TooFewPassagesError(
            f"Only {pooled.n} passages of {spec.dataset!r} have at least 2 tokens "
            f"({pooled.n_dropped_short} dropped); a run needs at least {MIN_PASSAGES}."
        )
    elapsed = time.perf_counter() - start
    return Measurement(
        spec=spec,
        pooled=pooled,
        metric=metric,
        cached=was_cached,
        elapsed_s=elapsed,
        meta=meta,
        resumed_passages=resumed,
    )


def check_run_options(
    metric: str,
    n: int,
    max_tokens: int,
    seed: int,
    device: str | None = None,
    dtype: str | None = None,
    passages: str = "documents",
    bos: str = "default",
    *,
    batch_size: int | None = None,
    device_here: bool = True,
) -> tuple[str, str]:
    """Check the options of a run that do not depend on its model or dataset -> (device,
    dtype): the choices, n, max_tokens, seed, batch size, the device (`device_here=False`
    skips the "does this machine have it" part, for a sweep whose workers have their own GPUs)
    and the cache folder. A sweep checks these once for all its cells (`run_spec` per cell).
    Raises a DeffError subclass with one sentence."""
    _check_choice(metric, METRICS, "metric")
    _check_choice(passages, PASSAGE_MODES, "passages mode")
    _check_choice(bos, BOS_OPTIONS, "BOS option")
    if not isinstance(n, int) or n < MIN_PASSAGES:
        raise TooFewPassagesError(f"n must be an integer >= {MIN_PASSAGES}, got {n!r}.")
    if not isinstance(max_tokens, int) or max_tokens < 2:
        raise TooFewPassagesError(f"max_tokens must be an integer >= 2, got {max_tokens!r}.")
    check_seed(seed)
    if batch_size is not None:
        check_int(batch_size, "batch_size", 1)
    device, dtype = resolve_device_dtype(device, dtype, check=device_here)
    check_cache_dir()
    return device, dtype


def run_spec(
    model: str,
    dataset: str,
    n: int,
    max_tokens: int,
    seed: int,
    metric: str,
    revision: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    intervention: str = "none",
    passages: str = "documents",
    bos: str = "default",
    *,
    batch_size: int | None = None,
    device_here: bool = True,
) -> tuple[RunSpec, str]:
    """Check a run's arguments and resolve device/dtype -> (RunSpec, device).

    Every check is cheap and runs before any model loads (issue 8): `check_run_options`, the
    norm intervention, max_tokens against the model's context length (read from its config)
    and the dataset (opened, not read). Raises a DeffError subclass with one sentence.
    """
    _check_choice(intervention, INTERVENTIONS, "norm intervention")
    device, dtype = check_run_options(
        metric, n, max_tokens, seed, device, dtype, passages, bos,
        batch_size=batch_size, device_here=device_here,
    )  # fmt: skip
    if device_here:  # a random shape too large for this machine fails here, not mid-load
        check_fits(model, device, dtype, spread=device == "auto")
    check_max_tokens(model, max_tokens, revision)
    check_dataset(dataset)
    spec = RunSpec(
        model=model,
        revision=revision,
        dataset=dataset,
        n=n,
        max_tokens=max_tokens,
        seed=seed,
        dtype=dtype,
        intervention=intervention,
        passages=passages,
        bos=bos,
    )
    return spec, device


def measure(
    model: str | Any = "smollm2-135m",
    tokenizer: Any = None,
    dataset: str | list[str] = "bbc-news",
    *,
    n: int | None = None,
    max_tokens: int = 128,
    seed: int = 0,
    metric: str = "cka",
    revision: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    progress: Progress | None = None,
    random_seeds: tuple[int, ...] | list[int] = (),
    intervention: str = "none",
    batch_size: int | None = None,
    passages: str = "documents",
    bos: str = "default",
    use_cache: bool = True,
    should_stop: Callable[[], bool] | None = None,
    cache_id: str | None = None,
) -> Measurement:
    """Measure the effective depth of `model` on `n` passages of `dataset` (cached on disk).

    `model` is a model spec (a name, path or hub id; `n` defaults to 512) or, in a notebook, a
    loaded transformers model with its `tokenizer`: `measure(model, tokenizer, texts)`, where
    `texts` (the `dataset`) is a list of strings or a dataset spec. A loaded model is cached
    only when `cache_id` names it (see `deffcore.external`, which also takes a list of strings
    with a model spec).
    An interrupted run resumes from its last finished batch; `use_cache=False` neither reads
    nor writes the cache; `should_stop` cancels between batches (see `measure_spec`).
    Raises DeffError subclasses for unknown models/datasets, too few passages, NaN activations.
    With `random_seeds`, `Measurement.random_null` holds one measurement of
    `random:<model>:<seed>` per seed.
    """
    if not isinstance(model, str) or tokenizer is not None or not isinstance(dataset, str):
        return _measure_in_memory(
            model,
            tokenizer,
            dataset,
            n=n,
            max_tokens=max_tokens,
            seed=seed,
            metric=metric,
            revision=revision,
            device=device,
            dtype=dtype,
            progress=progress,
            random_seeds=random_seeds,
            intervention=intervention,
            batch_size=batch_size,
            passages=passages,
            bos=bos,
            use_cache=use_cache,
            should_stop=should_stop,
            cache_id=cache_id,
        )
    if cache_id is not None:
        raise DeffError(
            f"cache_id names a model in memory; {model!r} is named by its spec already."
        )
    n = 512 if n is None else n
    spec, device = run_spec(
        model,
        dataset,
        n,
        max_tokens,
        seed,
        metric,
        revision,
        device,
        dtype,
        intervention,
        passages=passages,
        bos=bos,
        batch_size=batch_size,
    )
    options = {
        "device": device,
        "batch_size": batch_size,
        "progress": progress,
        "metric": metric,
        "use_cache": use_cache,
        "should_stop": should_stop,
    }
    main = measure_spec(spec, **options)
    for s in random_seeds:
        rspec = replace(spec, model=f"random:{model}:{int(s)}")
        main.random_null.append(measure_spec(rspec, **options))
    return main


# ---------------------------------------------------------------------------------------------
# In a notebook: a model or states already in memory (helpers in deffcore.external)


def measure_model(
    model: Any,
    tokenizer: Any,
    texts: list[str] | str = "bbc-news",
    *,
    n: int | None = None,
    max_tokens: int = 128,
    seed: int = 0,
    metric: str = "cka",
    cache_id: str | None = None,
    intervention: str = "none",
    passages: str = "documents",
    bos: str = "default",
    batch_size: int | None = None,
    random_seeds: tuple[int, ...] | list[int] = (),
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Measurement:
    """Measure a transformers model in memory with its tokenizer (`measure(model, tokenizer,
    texts)`): the extraction of a named run on its own weights, in eval mode; cached only under
    `cache_id` (see `deffcore.external` for the key). `random_seeds`: the same config freshly
    initialised per seed, as `Measurement.random_null`."""
    spec, loaded, docs, ids, seeds = external.plan_loaded_run(
        model,
        tokenizer,
        texts,
        n=n,
        max_tokens=max_tokens,
        seed=seed,
        metric=metric,
        cache_id=cache_id,
        intervention=intervention,
        passages=passages,
        bos=bos,
        batch_size=batch_size,
        random_seeds=random_seeds,
    )
    options = {
        "metric": metric,
        "batch_size": batch_size,
        "progress": progress,
        "use_cache": cache_id is not None,
        "should_stop": should_stop,
        "documents": docs,
    }

    def one(module: Any, name: str) -> Measurement:
        run, wrapped = external.pin(spec, loaded, module, name, ids)
        with external.eval_mode(module):
            return measure_spec(run, device=loaded.device, loaded=wrapped, **options)

    main = one(model, spec.model)
    for s in seeds:
        twin = external.random_twin(model, s, loaded)
        main.random_null.append(one(twin, f"random:{spec.model}:{s}"))
    return main


def _measure_in_memory(
    model: Any,
    tokenizer: Any,
    texts: Any,
    *,
    revision: str | None,
    device: str | None,
    dtype: str | None,
    use_cache: bool,
    cache_id: str | None,
    **options: Any,
) -> Measurement:
    """`measure` for what is not a (model spec, dataset spec) pair: a loaded model with its
    tokenizer, or a model spec with a list of strings (loaded here, cached under its identity
    unless `use_cache` is False)."""
    external.check_in_memory_args(model, tokenizer, revision, device, dtype)
    if isinstance(model, str):
        if cache_id is not None:
            raise DeffError(f"cache_id names a model in memory; {model!r} has a spec already.")
        loaded, own_id = external.load_for_texts(
            model, texts, options.get("max_tokens", 128), revision, device, dtype
        )
        model, tokenizer, cache_id = loaded.model, loaded.tokenizer, own_id
    return measure_model(
        model, tokenizer, texts, cache_id=cache_id if use_cache else None, **options
    )


def measure_states(
    states: Any,
    mask: Any = None,
    *,
    metric: str = "cka",
    name: str = "states",
    dataset: str = "states",
) -> Measurement:
    """Measure hidden states computed elsewhere: h_0 .. h_L, each (N, T, d), with the attention
    mask (N, T), pooled by the extraction's pooler (`deffcore.external`, which documents what to
    pass from transformers, TransformerLens and nnsight). `name`/`dataset` label the run
    (model "states:<name>"); nothing is cached."""
    _check_choice(metric, METRICS, "metric")
    pooled = external.pool_external(states, mask)
    return Measurement(
        spec=external.states_spec(pooled, name, dataset), pooled=pooled, metric=metric
    )
