"""Model + text -> cached pooled states -> a `Measurement` (`measure`, `measure_spec`); first
below, the checks a run passes before anything loads (`plan`, `check`, `run_spec`).

    m = measure(model="smollm2-135m", dataset="bbc-news", n=512, max_tokens=128)
    m = measure(model, tokenizer, texts)     # a model in memory (deffcore.runs.external)
    m = measure_states(states, mask)         # h_0 .. h_L computed elsewhere

The forward pass happens once per `RunSpec` and is cached on disk (`deffcore.extraction.cache`);
an interrupted run resumes from its last finished batch, and a window run reuses a cached run
of the same settings with another N (`deffcore.extraction.cache`).
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from deffcore.core.checks import (
    check_cache_dir,
    check_choice,
    check_int,
    check_passages,
    check_seed,
    check_seeds,
)
from deffcore.core.constants import (
    BOS_OPTIONS,
    METRICS,
    PASSAGE_MODES,
    PC_CONTROLS,
    POOLINGS,
    TABLE_MEASURES,
    WINDOW_MODES,
    similarity_bound,
)
from deffcore.core.errors import (
    DeffError,
    InvalidStatesError,
    MeasureNotComputedError,
    NonFiniteActivationsError,
    TooFewPassagesError,
    UndefinedSimilarityError,
    UnknownModelError,
    fit_advice,
)
from deffcore.extraction import cache
from deffcore.extraction.forward import (
    BatchCheckpoint,
    PooledStates,
    Progress,
    SavedBatch,
    extract_run,
)
from deffcore.inputs.interventions import INTERVENTIONS
from deffcore.inputs.model import (
    Kind,
    LoadedModel,
    ModelSpec,
    check_fits,
    check_max_tokens,
    resolve_device_dtype,
)
from deffcore.inputs.run_spec import RunSpec, open_run_inputs
from deffcore.inputs.texts import DatasetSpec, check_dataset
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
from deffcore.runs import external

# ---------------------------------------------------------------------------------------------
# The checks a run passes before anything loads: its arguments, model path and data.
#
# `plan(**run)` is `deffcore.runs.measure.run_spec(**run)` followed by `check(spec)`: the model
# path, the dataset (opened and sampled: an empty, unreadable or too small file fails here) and,
# for token windows, the window count (`deffcore.inputs.texts.count_windows`). Hub datasets are not
# opened here (network): the worker opens them first, still before the model. Errors name the
# user's own file when `names` maps a saved path to it (`display`: uploads are stored under a
# hash name). `deffcore.work.jobs.start` runs `check` before it queues a run.


def display(text: str, names: dict[str, str] | None) -> str:
    """`text` with every saved path (and its file name) replaced by the user's file name."""
    for path, shown in (names or {}).items():
        text = text.replace(path, shown).replace(Path(path).name, shown)
    return text


def plan(
    *, names: dict[str, str] | None = None, windows: int | None = None, **run: Any
) -> tuple[RunSpec, str]:
    """`run_spec(**run)` followed by `check` -> (spec, device); errors name the user's files
    (`names`). `windows`: the window count when the caller already knows it."""
    try:
        spec, device = run_spec(**run)
    except DeffError as err:
        raise type(err)(display(str(err), names)) from None
    check(spec, names=names, windows=windows)
    return spec, device


def check(
    spec: RunSpec, *, names: dict[str, str] | None = None, windows: int | None = None
) -> None:
    """Raise the DeffError a run of `spec` would hit in its data or model path, before any
    model loads (the section above). `windows` skips counting them again."""
    try:
        _check(spec, windows)
    except DeffError as err:
        raise type(err)(display(str(err), names)) from None


def _check(spec: RunSpec, windows: int | None = None) -> None:
    from deffcore.inputs.texts import all_documents, load_passages

    model = spec.model_spec.trained  # a random null reads its base's files
    if model.looks_local:
        gguf = model.kind is Kind.GGUF
        if gguf and not model.path.is_file():
            raise UnknownModelError(f"The GGUF file {model} does not exist.")
        if not gguf and not model.path.is_dir() and model.text.startswith((".", "/", "~")):
            raise UnknownModelError(f"The model folder {model} does not exist.")
    if spec.dataset_spec.streamed:
        return
    if spec.passages in WINDOW_MODES:
        all_documents(spec.dataset, spec.n, seed=spec.seed)
        available = windows if windows is not None else _count_windows(spec)
        if available is not None and spec.n > available:
            raise TooFewPassagesError(
                f"{spec.dataset} yields {available:,} windows of {spec.max_tokens} tokens "
                f"for {spec.model}, fewer than N = {spec.n:,}; ask for N <= {available:,}."
            )
    else:
        load_passages(spec.dataset, spec.n, seed=spec.seed)


def _count_windows(spec: RunSpec) -> int | None:
    """The window count of `spec`'s data (tokenizer only); None when the tokenizer cannot load
    here (the worker will say why). A DeffError (bad data, bad option) is the check's answer."""
    from deffcore.inputs.texts import count_windows

    try:
        return int(
            count_windows(
                spec.model,
                spec.dataset,
                spec.max_tokens,
                spec.bos,
                spec.revision,
                mode=spec.passages,
            )
        )
    except DeffError:
        raise  # not swallowed by the line below: it is the user's error, said before the load
    except Exception:
        return None


#: Smallest number of kept passages a run accepts (unbiased CKA needs 4).
MIN_PASSAGES = 4


def check_kept(spec: RunSpec, pooled: PooledStates) -> None:
    """TooFewPassagesError when fewer than MIN_PASSAGES passages of a run were kept."""
    if pooled.n < MIN_PASSAGES:
        raise TooFewPassagesError(
            f"Only {pooled.n} passages of {spec.dataset!r} have at least 2 tokens "
            f"({pooled.n_dropped_short} dropped); a run needs at least {MIN_PASSAGES}."
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
    check_choice(metric, METRICS, "metric")
    check_choice(passages, PASSAGE_MODES, "passages mode")
    check_choice(bos, BOS_OPTIONS, "BOS option")
    if isinstance(n, bool) or not isinstance(n, int) or n < MIN_PASSAGES:
        raise TooFewPassagesError(f"n must be an integer >= {MIN_PASSAGES}, got {n!r}.")
    check_passages(n)  # at most MAX_PASSAGES, before anything is sized by it
    if not isinstance(max_tokens, int) or max_tokens < 2:
        raise TooFewPassagesError(f"max_tokens must be an integer >= 2, got {max_tokens!r}.")
    check_seed(seed)
    if batch_size is not None:
        check_int(batch_size, "batch_size", 1)
    device, dtype = resolve_device_dtype(device, dtype, check=device_here)
    check_cache_dir()
    return device, dtype


def run_spec(
    model: str | ModelSpec,
    dataset: str | DatasetSpec,
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

    Every check is cheap and runs before any model loads: `check_run_options`, the
    norm intervention, max_tokens against the model's context length (read from its config)
    and the dataset (opened, not read). Raises a DeffError subclass with one sentence.
    """
    check_choice(intervention, INTERVENTIONS, "norm intervention")
    device, dtype = check_run_options(
        metric, n, max_tokens, seed, device, dtype, passages, bos,
        batch_size=batch_size, device_here=device_here,
    )  # fmt: skip
    parsed = ModelSpec.parse(model)  # the door: a malformed spec is its one sentence here
    if device_here:  # a random shape too large for this machine fails here, not mid-load
        check_fits(parsed, device, dtype, spread=device == "auto")
    check_max_tokens(parsed, max_tokens, revision)
    data = DatasetSpec.parse(dataset)  # the door: a malformed hf: spec is its one sentence here
    check_dataset(data)
    spec = RunSpec(
        model=parsed.text,
        revision=revision,
        dataset=data.text,
        n=n,
        max_tokens=max_tokens,
        seed=seed,
        dtype=dtype,
        intervention=intervention,
        passages=passages,
        bos=bos,
    )
    return spec, device


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
    taps: tuple = (),
) -> PooledStates:
    """Compute the pooled states of `spec` (no cache): text, then model, then one extraction.

    `deffcore.inputs.run_spec.open_run_inputs` makes the run's inputs (`loaded`: a model already
    in memory, which must be `spec.model` at `spec.revision`, else the process's cache of loaded
    models on `device`; `documents`: the run's texts when they are not `spec.dataset`'s), then
    `deffcore.extraction.forward.extract_run` runs it. `checkpoint` keeps finished batches and
    resumes them; `should_stop()` is asked before the model loads and before every batch
    (RunCancelled); `taps` see the captured states too (the depth-use atlas).
    """
    inputs = open_run_inputs(
        spec,
        device=device,
        loaded=loaded,
        documents=documents,
        progress=progress,
        should_stop=should_stop,
    )
    try:
        with inputs:
            return extract_run(
                inputs,
                batch_size=batch_size,
                progress=progress,
                checkpoint=checkpoint,
                should_stop=should_stop,
                taps=taps,
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
    atlas: bool = True,
) -> Measurement:
    """Measure one fully specified run: read it from the cache or extract and store it.

    `loaded` as `extract_spec`'s (the labs extract several runs from one load). Finished
    batches are kept in the run's cache entry, so a run killed, interrupted or cancelled
    (`should_stop()`: RunCancelled) resumes from its last finished batch, bit-identically
    (`Measurement.resumed_passages`); a window run also reuses a cached run of another N
    (`deffcore.extraction.cache`). `use_cache=False` neither reads nor writes the cache.
    `tap(batch)` sees every finished chunk of batches (the live estimates,
    `deffcore.runs.anytime_run`). `atlas`: the depth-use atlas is taken in the same extraction
    and kept beside the run if it ran every passage (SPEC 16).
    """
    from deffcore.extraction.atlas import atlas_taps, keep_atlas

    taps, start = (atlas_taps() if atlas and use_cache else ()), time.perf_counter()
    resolved = loaded.device if loaded is not None else device
    resolved = resolved or resolve_device_dtype(None, spec.dtype)[0]
    # what the model and dataset are, for a new cache entry's meta (no entry: not needed)
    sources = spec.sources() if use_cache else {}

    def compute(checkpoint: BatchCheckpoint | None = None) -> PooledStates:
        return extract_spec(spec, device=resolved, batch_size=batch_size, progress=progress,
                            loaded=loaded, checkpoint=checkpoint, should_stop=should_stop,
                            documents=documents, taps=taps)  # fmt: skip

    def compute_cached() -> PooledStates:
        served = cache.from_larger(spec, resolved, batch_size)
        if served is not None:
            return served
        checkpoint = cache.PrefixCheckpoint(spec, resolved, batch_size, tap)
        return cache.finish(compute(checkpoint), checkpoint)

    if use_cache:
        pooled, was_cached, meta = cache.get_or_compute(spec, compute_cached, sources=sources)
    else:
        watch = None
        if tap is not None:
            watch = cache.PrefixCheckpoint(spec, resolved, batch_size, tap, use_cache=False)
        pooled, was_cached, meta = compute(watch), False, {}
        cache.check_finite(pooled, spec.dtype)  # what the cache refuses to store, unmeasured
    resumed = 0 if was_cached else int(pooled.meta.get("resumed_passages") or 0)
    keep_atlas(spec, taps, pooled)
    check_kept(spec, pooled)
    return Measurement(spec=spec, pooled=pooled, metric=metric, cached=was_cached, meta=meta,
                       elapsed_s=time.perf_counter() - start, resumed_passages=resumed)  # fmt: skip


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
    only when `cache_id` names it (see `deffcore.runs.external`, which also takes a list of strings
    with a model spec).
    An interrupted run resumes from its last finished batch; `use_cache=False` neither reads
    nor writes the cache; `should_stop` cancels between batches (see `measure_spec`).
    Raises DeffError subclasses for unknown models/datasets, too few passages, NaN activations.
    With `random_seeds`, `Measurement.random_null` holds one measurement of
    `random:<model>:<seed>` per seed.
    """
    if not isinstance(model, str) or tokenizer is not None or not isinstance(dataset, str):
        return _measure_in_memory(
            model, tokenizer, dataset, cache_id=cache_id, n=n, max_tokens=max_tokens, seed=seed,
            metric=metric, revision=revision, device=device, dtype=dtype, progress=progress,
            random_seeds=random_seeds, intervention=intervention, batch_size=batch_size,
            passages=passages, bos=bos, use_cache=use_cache, should_stop=should_stop,
        )  # fmt: skip
    if cache_id is not None:
        raise DeffError(
            f"cache_id names a model in memory; {model!r} is named by its spec already."
        )
    random_seeds = check_seeds(random_seeds)  # before the main run is measured
    spec, device = run_spec(
        model, dataset, 512 if n is None else n, max_tokens, seed, metric, revision, device,
        dtype, intervention, passages=passages, bos=bos, batch_size=batch_size,
    )  # fmt: skip
    options = {"metric": metric, "device": device, "batch_size": batch_size}
    options.update(progress=progress, use_cache=use_cache, should_stop=should_stop)
    main = measure_spec(spec, **options)
    for s in random_seeds:
        rspec = replace(spec, model=ModelSpec.random(spec.model_spec, s).text)
        main.random_null.append(measure_spec(rspec, **options))
    return main


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
    `cache_id` (see `deffcore.runs.external` for the key). `random_seeds`: the same config freshly
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
        main.random_null.append(one(twin, ModelSpec.random(spec.model_spec, s).text))
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
    unless `use_cache` is False). A TransformerLens bridge stands for the model it wraps."""
    model, tokenizer = external.unwrap_bridge(model, tokenizer)
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
    mask (N, T), pooled by the extraction's pooler (`deffcore.runs.external`, which documents
    what to pass from transformers, TransformerLens and nnsight). `name`/`dataset` label the run
    (model "states:<name>"); nothing is cached."""
    check_choice(metric, METRICS, "metric")
    pooled = external.pool_external(states, mask)
    return Measurement(
        spec=external.states_spec(pooled, name, dataset), pooled=pooled, metric=metric
    )


# ---------------------------------------------------------------------------------------------
# One run's numbers: the pooled states of a run and everything derived from them (`Measurement`).
#
#     m.summary("default")            # DepthSummary: D_eff, D_eff/L, gap%, rho_hat(1)
#     m.similarity("token_normed", "unbiased_cka")
#
# A `Measurement` only reads the pooled states, so switching pooling, metric or K never runs the
# model again; similarity matrices are memoised per (pooling, metric). In a notebook it shows its
# summary and figures (`deffcore.views.notebook`).
#
# Decisions: `pos0_peak` takes the maximum over h_0 .. h_L and reports the layer index l of h_l.
# The PC controls apply per layer to h_0 .. h_L, so update depth and matched references exist for
# them too. The random-weight null (`random_null`) holds one run of `random:<model>:<seed>` per
# seed with the same text, N, max_tokens and dtype; its band is mean +- 2 sample standard
# deviations (ddof=1) of D_eff/L over seeds.


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
    #: tables across similarity measures, per pooling (SPEC 17.4), computed or read back
    _tables: dict[str, Any] = field(default_factory=dict, repr=False)

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
        """(L, L) similarity of h_1 .. h_L; computed once per (pooling, metric). A SPEC 17
        measure (`TABLE_MEASURES` beyond `METRICS`) is read, never computed here: the matrix
        `measure_similarity` or `measure_table` computed for the run (memoised or kept with its
        cache entry); MeasureNotComputedError (one sentence, with its cost) when there is none."""
        metric = metric or self.metric
        check_choice(pooling, POOLINGS, "pooling")  # a list is one sentence, not a TypeError
        if metric in TABLE_MEASURES and metric not in METRICS:
            held = self.stored_measure_similarity(pooling, metric)
            if held is None:
                raise MeasureNotComputedError(measure_missing_sentence(self, pooling, metric))
            return held
        check_choice(metric, TABLE_MEASURES, "metric")
        if (pooling, metric) not in self._sim:
            self._sim[(pooling, metric)] = similarity_matrix(self.states(pooling), metric)
        return self._sim[(pooling, metric)]

    def measure_similarity(
        self, pooling: str = "default", measure: str = "procrustes", *, progress: Any = None
    ) -> np.ndarray:
        """The (L, L) point-estimate matrix of a SPEC 17 measure on this pooling's states
        (`statistics.measure_table.measure_similarity`: the matrix of `measure_table`'s row),
        held or computed (one all-pairs pass; `action_costs.measure_cost` says how long) and
        kept with the run's cache entry. progress(done, total, stage) before and after."""
        from deffcore.statistics.measure_table import measure_similarity

        check_choice(pooling, POOLINGS, "pooling")
        check_choice(measure, TABLE_MEASURES, "measure")
        if measure in METRICS:
            return self.similarity(pooling, measure)
        held = self.stored_measure_similarity(pooling, measure)
        if held is not None:
            return held
        if progress is not None:
            progress(0, 1, f"computing the {measure} matrix")
        S = np.asarray(measure_similarity(self.states(pooling), measure), dtype=np.float64)
        self._sim[(pooling, measure)] = S
        keep_measure_matrices(self.spec, pooling, {measure: S}, self.layers, self.n)
        if progress is not None:
            progress(1, 1, f"computing the {measure} matrix")
        return S

    def held_measures(self, pooling: str = "default") -> dict[str, np.ndarray]:
        """Every SPEC 17 measure's matrix this run holds for `pooling` (what a snapshot
        carries beside its metrics' matrices); never computes."""
        out = {}
        for measure in TABLE_MEASURES:
            if measure not in METRICS:
                S = self.stored_measure_similarity(pooling, measure)
                if S is not None:
                    out[measure] = S
        return out

    def stored_measure_similarity(self, pooling: str, measure: str) -> np.ndarray | None:
        """The point-estimate matrix of `measure` computed for this run (memoised, or kept with
        its cache entry by `measure_similarity` or `measure_table`), or None; never computes."""
        if (pooling, measure) not in self._sim:
            found = stored_measure_matrices(self.spec, self.layers, self.n).get(pooling, {})
            if measure in found:
                self._sim[(pooling, measure)] = found[measure]
        return self._sim.get((pooling, measure))

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
            keep_paired(self.spec, self._paired[key], self.layers, self.n)
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
        keep_paired(self.spec, pb, self.layers, self.n)
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

    def paired_latest(self):
        """The last `paired_bootstrap` computed for this run, else the one kept with its cache
        entry or adopted (the live estimates' on its own passages), or None (never computes)."""
        self._read_stored()
        return self._paired.get("latest")

    def measure_table(
        self,
        pooling: str = "default",
        measures: tuple[str, ...] | None = None,
        *,
        B: int | None = None,
        seed: int = 0,
        permutations: int | None = None,
        progress: Any = None,
    ):
        """The table across similarity measures of this pooling's states (SPEC 17.4,
        `statistics.measure_table.MeasureTable`): per measure D_eff/L, gap to F_L, the
        passage-bootstrap interval (B replicates, seed: the same draws as `bootstrap` with that
        B and seed), the regime and the calibrated D_eff/L. A table with these settings that
        holds `measures` (default: all) is reused (memoised, or kept beside the run's cache
        entry, `measures.json`); otherwise it is computed (minutes at N in the thousands) and
        kept. B, permutations: default `DEFAULT_B`, `DEFAULT_PERMUTATIONS`."""
        from deffcore.statistics.measure_table import DEFAULT_B, DEFAULT_PERMUTATIONS, measure_table

        check_choice(pooling, POOLINGS, "pooling")
        measures = tuple(measures or TABLE_MEASURES)
        B = DEFAULT_B if B is None else B
        permutations = DEFAULT_PERMUTATIONS if permutations is None else permutations
        held = self.stored_measure_table(pooling)
        settings = (B, seed, permutations)
        same = held is not None and (held.B, held.seed, held.permutations) == settings
        have = {r.measure for r in held.rows} if same else set()
        missing = tuple(m for m in measures if m not in have)
        if missing:  # rows are independent: the missing ones join the held ones
            options = {"B": B, "seed": seed, "permutations": permutations, "progress": progress}
            table = measure_table(self.states(pooling), missing, **options)
            if same:
                rows = {r.measure: r for r in (*held.rows, *table.rows)}
                table.rows = [rows[m] for m in TABLE_MEASURES if m in rows]
            self._tables[pooling] = table
            keep_measure_table(self.spec, pooling, table)
            new = {m: np.asarray(S, dtype=np.float64) for m, S in table.matrices.items()}
            new = {m: S for m, S in new.items() if m not in METRICS}
            self._sim.update({(pooling, m): S for m, S in new.items()})
            if new:
                keep_measure_matrices(self.spec, pooling, new, self.layers, self.n)
        return _table_of(self._tables[pooling], measures)

    def stored_measure_table(self, pooling: str = "default"):
        """The last table across measures of this pooling, computed here or kept with the
        run's cache entry (`measure_table`), or None; never computes."""
        if pooling not in self._tables:
            found = stored_measure_tables(self.spec, self.layers, self.n).get(pooling)
            if found is not None:
                self._tables[pooling] = found
        return self._tables.get(pooling)

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
        """This run as a `deffcore.views.run.Run` (what the explorer's pages read)."""
        from deffcore.views.run import Run

        return Run.from_measurement(self, label)

    def trust(
        self,
        pooling: str = "default",
        metric: str | None = None,
        K: int | None = None,
        ci: tuple[float, float] | None = None,
    ):
        """Trust level of the headline (`deffcore.statistics.trust_rule.Trust`: level, reasons,
        action): the one every surface shows. Under the CKA family, without an explicit `ci`,
        from the paired bootstrap the run's BOS answer is given from (`bos_answer
        .answer_bootstrap_of`: kept with the run, drawn now when it holds none, as `measure`,
        the pages and this run's notebook view draw it), so asking before or after any of them
        gives the same trust."""
        metric = metric or self.metric
        if ci is None and metric in METRICS:
            from deffcore.statistics.bos_answer import answer_bootstrap_of

            self.similarity(pooling, metric)  # the pooling checked before anything is drawn
            answer_bootstrap_of(self, metric)
        return self.view().trust(pooling, metric, K, ci)

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


def _side_file(spec: Any, name: str) -> Path | None:
    """The run's side file `name`, or None when the run has no cache entry of ours."""
    from deffcore.core.files import cache_dir
    from deffcore.extraction.cache import is_run_entry

    folder = cache_dir() / spec.key()
    return folder / name if is_run_entry(folder) else None


def _read_side(spec: Any, name: str, fmt: int) -> dict[str, Any]:
    """The run's side file `name` as read ({} when absent, a link, unreadable, or not of
    format `fmt` and this run's key)."""
    path = _side_file(spec, name)
    if path is None or not path.is_file() or path.is_symlink():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("format") != fmt or data.get("key") != spec.key():
        return {}
    return data


def _write_side(spec: Any, name: str, body: dict[str, Any], what: str) -> None:
    """Write the run's side file `name` (nothing without an entry); a failed write warns and
    loses only the file, never the run."""
    from deffcore.core.files import atomic_write

    path = _side_file(spec, name)
    if path is None:
        return
    try:
        atomic_write(path, json.dumps(body, separators=(",", ":")).encode())
    except DeffError as err:
        warnings.warn(f"The {what} was not kept with the run: {err}", stacklevel=3)


def stored_paired(spec: Any, layers: int, n: int) -> list[Any]:
    """The run's kept `paired.PairedBootstrap`s, oldest first ([] when none is readable)."""
    from deffcore.statistics.paired import PairedBootstrap

    data = _read_side(spec, PAIRED_FILE, PAIRED_FORMAT)
    if not isinstance(data.get("bootstraps"), list):
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
    if _side_file(spec, PAIRED_FILE) is None:
        return
    mine = pb.to_dict()  # at full precision here (a snapshot rounds): the same numbers back
    mine["points"] = [np.asarray(pb.points[k], dtype=np.float64).tolist() for k in pb.profiles]
    mine["profiles"] = [np.asarray(pb.profiles[k], dtype=np.float64).tolist() for k in pb.profiles]
    kept = [b.to_dict() for b in stored_paired(spec, layers, n)]
    kept = [*[b for b in kept if b != mine][-(KEEP_PAIRED - 1) :], mine]
    body = {"format": PAIRED_FORMAT, "key": spec.key(), "bootstraps": kept}
    _write_side(spec, PAIRED_FILE, body, "paired bootstrap")


# ---------------------------------------------------------------------------------------------
# A run's tables across similarity measures, kept beside its cache entry (SPEC 17.4)
#
#     <cache>/<key>/measures.json   {"format", "key", "layers", "n",
#                                    "tables": {pooling: MeasureTable.to_dict()},
#                                    "matrices": {pooling: {measure: (L, L) point estimate}}}
#
# The newest table per pooling, and each SPEC 17 measure's point-estimate matrix (the matrix of
# the table's row, or one `Measurement.measure_similarity` computed alone: what the pages show
# under that measure); a file not of this format, not this run's, or whose table or matrices
# are not of this run's L and N reads as absent. A run without a cache entry keeps them in
# memory.
# ---------------------------------------------------------------------------------------------

MEASURES_FILE = "measures.json"
#: Bump when what the file holds changes (older files then read as absent).
MEASURES_FORMAT = 1


def _table_of(table: Any, measures: tuple[str, ...]) -> Any:
    """`table` with only the rows of `measures`, in that order."""
    return replace(table, rows=[table.row(m) for m in measures])


def stored_measure_tables(spec: Any, layers: int, n: int) -> dict[str, Any]:
    """The run's kept tables across measures by pooling ({} when none is readable)."""
    from deffcore.statistics.measure_table import MeasureTable

    data = _read_side(spec, MEASURES_FILE, MEASURES_FORMAT)
    if not isinstance(data.get("tables"), dict):
        return {}
    found = {}
    for pooling, d in data["tables"].items():
        try:
            table = MeasureTable.from_dict(d)
        except DeffError:
            continue
        if pooling in POOLINGS and (table.layers, table.n) == (layers, n):
            found[pooling] = table
    return found


def measure_matrix_of(rows: Any, layers: int, measure: str) -> np.ndarray | None:
    """`rows` as a kept point-estimate matrix of `measure` (SPEC 17), or None when it is not
    one: (layers, layers) finite numbers within the measure's bound (`similarity_bound`: 1,
    CKNNA's wider), symmetric, unit diagonal (what `measure_similarity` returns; the snapshot's
    similarity matrices pass the same check)."""
    try:
        S = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if S.shape != (layers, layers) or not np.all(np.isfinite(S)):
        return None
    if np.abs(S).max() > similarity_bound(measure) + 1e-6 or np.abs(S - S.T).max() > 1e-6:
        return None
    return S if np.abs(np.diag(S) - 1.0).max() <= 1e-6 else None


def stored_measure_matrices(spec: Any, layers: int, n: int) -> dict[str, dict[str, np.ndarray]]:
    """The run's kept point-estimate matrices of SPEC 17 measures, {pooling: {measure: (L, L)}}
    ({} when none is readable; an entry failing `measure_matrix_of` reads as absent)."""

    data = _read_side(spec, MEASURES_FILE, MEASURES_FORMAT)
    kept = data.get("matrices")
    if not isinstance(kept, dict) or data.get("layers") != layers or data.get("n") != n:
        return {}
    found: dict[str, dict[str, np.ndarray]] = {}
    for pooling, per in kept.items():
        if pooling not in POOLINGS or not isinstance(per, dict):
            continue
        for measure, rows in per.items():
            if measure not in TABLE_MEASURES or measure in METRICS:
                continue
            S = measure_matrix_of(rows, layers, measure)
            if S is not None:
                found.setdefault(pooling, {})[measure] = S
    return found


def _measures_body(spec: Any, layers: int, n: int) -> dict[str, Any]:
    """What measures.json holds now (readable parts only), ready to be added to."""
    tables = {p: t.to_dict() for p, t in stored_measure_tables(spec, layers, n).items()}
    matrices = {
        p: {m: S.tolist() for m, S in per.items()}
        for p, per in stored_measure_matrices(spec, layers, n).items()
    }
    body = {"format": MEASURES_FORMAT, "key": spec.key(), "layers": layers, "n": n}
    return {**body, "tables": tables, "matrices": matrices}


def keep_measure_table(spec: Any, pooling: str, table: Any) -> None:
    """Keep `table` with the run's entry (one per pooling, the newest); a run without an entry
    keeps nothing here. A failed write warns and loses only the file, never the run."""
    if _side_file(spec, MEASURES_FILE) is None:
        return
    body = _measures_body(spec, table.layers, table.n)
    body["tables"][pooling] = table.to_dict()
    _write_side(spec, MEASURES_FILE, body, "measure table")


def keep_measure_matrices(
    spec: Any, pooling: str, matrices: dict[str, np.ndarray], layers: int, n: int
) -> None:
    """Keep point-estimate matrices of SPEC 17 measures (full precision) with the run's entry,
    beside its tables; a run without an entry keeps them in memory only (`Measurement._sim`)."""
    if _side_file(spec, MEASURES_FILE) is None:
        return
    body = _measures_body(spec, layers, n)
    per = body["matrices"].setdefault(pooling, {})
    per.update({m: np.asarray(S, dtype=np.float64).tolist() for m, S in matrices.items()})
    _write_side(spec, MEASURES_FILE, body, "similarity matrix")


def measure_missing_sentence(m: Measurement, pooling: str, measure: str) -> str:
    """Why a run shows no `measure` yet and what computing it would take, in one sentence."""
    from deffcore.runs.action_costs import measure_cost
    from deffcore.statistics.measure_table import MEASURE_LABELS

    name = MEASURE_LABELS.get(measure, measure)
    cost = measure_cost(measure, n=m.n, d=m.d_model, layers=m.layers)
    return (
        f"This run holds no {name} matrix for pooling {pooling!r} yet: computing it (one "
        f"all-pairs pass over L = {m.layers} layers, N = {m.n:,}, d = {m.d_model}) takes "
        f"{cost.line()}."
    )
