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

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from deffcore.core.checks import (
    check_cache_dir,
    check_choice,
    check_int,
    check_passages,
    check_seed,
)
from deffcore.core.constants import BOS_OPTIONS, METRICS, PASSAGE_MODES, WINDOW_MODES
from deffcore.core.errors import (
    DeffError,
    NonFiniteActivationsError,
    TooFewPassagesError,
    UnknownModelError,
    fit_advice,
)
from deffcore.extraction import cache
from deffcore.extraction.forward import BatchCheckpoint, PooledStates, SavedBatch, extract_run
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
from deffcore.inputs.texts import check_dataset
from deffcore.runs import external
from deffcore.runs.measurement import Measurement

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
    """`deffcore.runs.measure.run_spec(**run)` followed by `check`: (spec, device) of a run
    whose arguments, model path and data were checked before anything loads; errors name the
    user's files (`names`). `windows`: the window count when the caller already knows it."""
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
    model loads (see the module doc). Hub datasets are not opened here (network): the worker
    opens them first, still before the model. `windows` skips counting them again."""
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
    if spec.dataset.startswith("hf:"):
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
    check_dataset(dataset)
    spec = RunSpec(
        model=parsed.text,
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


Progress = Callable[[int, int, str], None]


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

    `deffcore.inputs.run_spec.open_run_inputs` makes the run's inputs (the dataset opened
    before the model loads; `loaded` reuses a model already in memory, which must be
    `spec.model` at `spec.revision`; without it the model comes from the process's cache of
    loaded models and goes to `device`, None the default device; the intervention named by
    `spec.intervention` is applied around the extraction; `documents` are the run's texts when
    they are not `spec.dataset`'s), then `deffcore.extraction.forward.extract_run` runs it.
    `checkpoint` keeps finished batches and resumes them
    (`deffcore.extraction.cache.PartialRun(spec)`);
    `should_stop()` is asked before the model loads and before every batch (RunCancelled).
    `taps` see the captured states too (`deffcore.extraction.forward.ExtractionTap`: the
    depth-use atlas).
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

    `loaded` reuses a model that is already in memory (it must be `spec.model` at
    `spec.revision`; the labs pass it to extract several runs from one load).
    While extracting, finished batches are kept in the run's cache entry, so a run killed,
    interrupted or cancelled (`should_stop()` returning True between batches: RunCancelled)
    resumes from its last finished batch when measured again, with bit-identical results
    (`Measurement.resumed_passages` says how many passages were resumed).
    `use_cache=False` recomputes without reading or writing the cache at all.
    Window runs also reuse a cached run of the same settings with another N, bit-identically
    (`deffcore.extraction.cache`: a larger run resumes from a smaller one's batches, a
    smaller one is a larger one's first rows); `tap(batch)` sees every finished chunk of
    batches (`deffcore.runs.anytime_run`: the live estimates). `atlas`: the depth-use atlas is
    taken in the same extraction and kept beside the run if it ran every passage (SPEC 16).
    """
    from deffcore.extraction import cache as prefix
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
        served = prefix.from_larger(spec, resolved, batch_size)
        if served is not None:
            return served
        checkpoint = prefix.PrefixCheckpoint(spec, resolved, batch_size, tap)
        return prefix.finish(compute(checkpoint), checkpoint)

    if use_cache:
        pooled, was_cached, meta = cache.get_or_compute(spec, compute_cached, sources=sources)
    else:
        watch = None
        if tap is not None:
            watch = prefix.PrefixCheckpoint(spec, resolved, batch_size, tap, use_cache=False)
        pooled, was_cached, meta = compute(watch), False, {}
        cache.check_finite(pooled, spec.dtype)  # what the cache refuses to store, unmeasured
    resumed = 0 if was_cached else int(pooled.meta.get("resumed_passages") or 0)
    keep_atlas(spec, taps, pooled)
    if pooled.n < MIN_PASSAGES:
        raise TooFewPassagesError(
            f"Only {pooled.n} passages of {spec.dataset!r} have at least 2 tokens "
            f"({pooled.n_dropped_short} dropped); a run needs at least {MIN_PASSAGES}."
        )
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
    options = {
        "n": n,
        "max_tokens": max_tokens,
        "seed": seed,
        "metric": metric,
        "revision": revision,
        "device": device,
        "dtype": dtype,
        "progress": progress,
        "random_seeds": random_seeds,
        "intervention": intervention,
        "batch_size": batch_size,
        "passages": passages,
        "bos": bos,
        "use_cache": use_cache,
        "should_stop": should_stop,
    }
    if not isinstance(model, str) or tokenizer is not None or not isinstance(dataset, str):
        return _measure_in_memory(model, tokenizer, dataset, cache_id=cache_id, **options)
    if cache_id is not None:
        raise DeffError(
            f"cache_id names a model in memory; {model!r} is named by its spec already."
        )
    return _measure_named(model, dataset, **options)


def _measure_named(
    model: str,
    dataset: str,
    *,
    n: int | None,
    max_tokens: int,
    seed: int,
    metric: str,
    revision: str | None,
    device: str | None,
    dtype: str | None,
    random_seeds: tuple[int, ...] | list[int],
    intervention: str,
    batch_size: int | None,
    passages: str,
    bos: str,
    **options: Any,
) -> Measurement:
    """`measure` of a (model spec, dataset spec) pair: checked, then measured with its nulls."""
    n = 512 if n is None else n
    spec, device = run_spec(
        model, dataset, n, max_tokens, seed, metric, revision, device, dtype, intervention,
        passages=passages, bos=bos, batch_size=batch_size,
    )  # fmt: skip
    options = {**options, "device": device, "batch_size": batch_size, "metric": metric}
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
    mask (N, T), pooled by the extraction's pooler (`deffcore.runs.external`, which documents what
    to
    pass from transformers, TransformerLens and nnsight). `name`/`dataset` label the run
    (model "states:<name>"); nothing is cached."""
    check_choice(metric, METRICS, "metric")
    pooled = external.pool_external(states, mask)
    return Measurement(
        spec=external.states_spec(pooled, name, dataset), pooled=pooled, metric=metric
    )
