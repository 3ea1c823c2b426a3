"""What a notebook already holds, measured like a named run: a loaded model, or hidden states
(the checks, identities and pooling behind `measurement.measure_model` / `measure_states`).

    import deffcore as dc
    m = dc.measure(model, tokenizer, texts)                        # a model in memory
    m = dc.measure(model, tokenizer, texts, cache_id="my-ft@v3")   # ... and cached on disk
    m = dc.measure_states(states, mask)                            # states computed elsewhere

**A loaded model** (any `transformers` causal LM or base model with decoder blocks, a
fine-tuned or patched one, on any device and dtype) runs through the same extraction as a
named model (`measurement.measure_spec`, hooks on its blocks, the base model only), so the
numbers are those `measure("<name>", ...)` gives for the same weights and texts. `texts` is a
list of strings (every one is a passage, in order) or a dataset spec ("bbc-news", a file,
"hf:..."). The model is put in eval mode for the run and its own mode restored after.

Caching: a model in memory has no name the cache could trust, so its run is **not cached**
unless the caller names it with `cache_id` (e.g. "my-finetune@v3": the caller's promise that
the id means these weights and this tokenizer). The key (`RunSpec`) is then

    model     "loaded:<cache_id>"
    revision  "sha256:<16 hex>" over the config, a strided sample of every weight tensor
              (1,024 values each) and the exact token ids the model is fed
    dataset   the dataset spec, or "texts:<sha256 of the texts, 16 hex>" for a list
    + n, max_tokens, seed, dtype (the model's), intervention, passages, bos as for any run

so a changed tokenizer, config, text or option is a new key, and weights changed under the
same id are a new key in practice too (a fine-tune moves the sampled values; the id remains
the promise for the rest). Without `cache_id` the same spec is built (model
"loaded:<architecture>") but nothing is read from or written to the cache.

**Hidden states** (`measure_states`): h_0 .. h_L as L+1 tensors (N, T, d) (a list, a tuple, a
stacked (L+1, N, T, d) tensor or array, or a TransformerLens `ActivationCache`), with the
attention mask (N, T) (1 at real tokens; None: every position is real). They are pooled by the
extraction's own pooling arithmetic (`extract.pool_states`, what the hooks call per layer): the same
masks, the same float32 means, the same NaN check, the same position-0 ratio. h_L must be the
residual stream *before* the final norm (SPEC section 1): `output_hidden_states[-1]` is after
it for most architectures, so replace that entry by the final norm's input:

    # transformers
    captured = {}
    hook = dc.final_norm(model).register_forward_pre_hook(
        lambda _m, args: captured.__setitem__("h_L", args[0]))
    batch = tokenizer(texts, return_tensors="pt", padding=True)   # right padding
    out = model(**batch, output_hidden_states=True)
    hook.remove()
    m = dc.measure_states([*out.hidden_states[:-1], captured["h_L"]], batch["attention_mask"])

    # TransformerLens 4.x (TransformerBridge wraps a transformers model and keeps its own
    # residual stream; enable_compatibility_mode() would fold and centre the weights)
    bridge = TransformerBridge.boot_transformers("gpt2")   # or hf_model=model, tokenizer=...
    _, cache = bridge.run_with_cache(batch["input_ids"], attention_mask=batch["attention_mask"])
    m = dc.measure_states(cache, batch["attention_mask"])  # blocks.0.hook_resid_pre, ..._post

    # nnsight (0.8: a saved value is the tensor itself; a list is saved with nnsight.save)
    traced = nnsight.NNsight(model)
    with traced.trace(batch["input_ids"], attention_mask=batch["attention_mask"]):
        h0 = traced.model.layers[0].input.save()
        hs = nnsight.save([layer.output for layer in traced.model.layers])
    m = dc.measure_states([h0, *hs], batch["attention_mask"])

Rows with fewer than 2 real tokens are dropped and counted (`n_dropped`), as in extraction.
Padding: right padding (or explicit `position_ids = cumsum(mask) - 1`), so every real token
sits at the position the extraction gives it. All three routes run in the tests
(tests/test_peers.py, and docs/notebook.md's examples) against `measure` on the same weights.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from deffcore.core.checks import check_choice, check_int, check_seed, check_seeds
from deffcore.core.constants import BOS_OPTIONS, METRICS, PASSAGE_MODES, WINDOW_MODES
from deffcore.core.constants import EXTRACTED_POOLINGS as POOLED
from deffcore.core.errors import (
    DeffError,
    InvalidArgumentError,
    InvalidStatesError,
    NonFiniteActivationsError,
    TooFewPassagesError,
)
from deffcore.core.lazy import torch  # imported on first use
from deffcore.extraction.forward import PooledStates, pool_states
from deffcore.inputs.architecture import architecture_of, decoder_layers
from deffcore.inputs.interventions import INTERVENTIONS
from deffcore.inputs.model import LoadedModel
from deffcore.inputs.run_spec import RunSpec
from deffcore.inputs.texts import TEXTS_PREFIX, check_dataset, run_texts, run_token_ids

#: Values of each weight tensor that enter a loaded model's fingerprint (strided sample).
WEIGHT_SAMPLE = 1024
#: Longest cache_id accepted (it is part of a file's JSON, a label and a key).
MAX_CACHE_ID = 200
#: Rows pooled at once by `measure_states` (bounds the float32 temporaries of one layer).
STATES_ROWS_PER_CHUNK = 256
#: A NaN/inf at any real token reaches these masked means (the extraction checks the same).
_MEANS_CHECKED = ("default", "token_normed", "no_pos0")
#: The weight dtypes measured, by their names (`str(dtype)`: no torch at import).
_DTYPES = {"torch.float32": "float32", "torch.bfloat16": "bfloat16", "torch.float16": "float16"}


def check_cache_id(cache_id: object) -> str | None:
    """None, or a printable name of at most MAX_CACHE_ID characters (InvalidArgumentError)."""
    if cache_id is None:
        return None
    if (
        not isinstance(cache_id, str)
        or not cache_id.strip()
        or len(cache_id) > MAX_CACHE_ID
        or not cache_id.isprintable()
    ):
        raise InvalidArgumentError(
            f"cache_id must be a printable name of 1 to {MAX_CACHE_ID} characters such as "
            f"'my-finetune@v3', got {cache_id!r}."
        )
    return cache_id


# ---------------------------------------------------------------------------------------------
# A loaded model


def wrap_loaded(model: Any, tokenizer: Any, name: str) -> LoadedModel:
    """`model` (a transformers module, used in place) as the `LoadedModel` extraction takes.

    device and dtype are those of its first parameter; d is its residual stream's width.
    Raises DeffError for something that is not a module, a tokenizer that is not callable,
    a dtype extraction does not run (not float32/bfloat16/float16), and
    UnsupportedArchitectureError when no decoder blocks are found.
    """
    if not isinstance(model, torch.nn.Module):
        raise DeffError(
            f"measure() takes a model name or a loaded torch/transformers model, got "
            f"{type(model).__name__}."
        )
    if not callable(tokenizer) or not hasattr(tokenizer, "bos_token_id"):
        raise DeffError(
            "A loaded model needs its tokenizer (a transformers tokenizer) as the second "
            f"argument, got {type(tokenizer).__name__}: measure(model, tokenizer, texts)."
        )
    layers = len(decoder_layers(model))
    param = next(model.parameters(), None)
    if param is None:
        raise DeffError(f"The model {type(model).__name__} has no parameters.")
    on_meta = next(
        (n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta), None
    )
    if on_meta is not None:  # what the CLI's loader never gives: weights that are not there
        raise DeffError(
            f"The model's weight {on_meta!r} is on the meta device, so it holds no values "
            "(built under init_empty_weights, or offloaded by a device_map); load its weights "
            "onto a device before measuring it."
        )
    if str(param.dtype) not in _DTYPES:
        raise DeffError(
            f"The model's weights are {param.dtype}; measure a float32, bfloat16 or float16 "
            "model (e.g. model.float())."
        )
    return LoadedModel(
        spec=name,
        revision=None,
        model=model,
        tokenizer=tokenizer,
        layers=layers,
        d_model=architecture_of(model).width,
        architecture=type(model).__name__,
        weights_id=name,
        device=str(param.device),
        dtype=_DTYPES[str(param.dtype)],
    )


def _weights_sample_digest(model: torch.nn.Module) -> str:
    """sha256 of every parameter's and buffer's name, shape and a strided sample of its
    values (WEIGHT_SAMPLE per tensor, as float32): milliseconds, even for billions of weights."""
    h = hashlib.sha256()
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}\n".encode())
        if t.device.type == "meta" or t.numel() == 0:
            continue
        flat = t.detach().reshape(-1)
        sample = flat[:: max(1, flat.numel() // WEIGHT_SAMPLE)][:WEIGHT_SAMPLE]
        h.update(sample.float().cpu().numpy().tobytes())
    return h.hexdigest()


def _config_json(model: torch.nn.Module) -> str:
    """The model's config as sorted JSON, without where it was loaded from."""
    config = getattr(model, "config", None)
    as_dict = config.to_dict() if hasattr(config, "to_dict") else {}
    for volatile in ("_name_or_path", "transformers_version"):
        as_dict.pop(volatile, None)
    return json.dumps(as_dict, sort_keys=True, default=str)


def _ids_digest(ids: list[list[int]]) -> str:
    h = hashlib.sha256()
    for seq in ids:
        h.update(np.asarray(seq, dtype=np.int64).tobytes() + b";")
    return h.hexdigest()


def model_fingerprint(model: torch.nn.Module, token_ids: list[list[int]]) -> str:
    """`sha256:<16 hex>` over the architecture, config, weight sample and token ids (the
    `revision` of a loaded model's RunSpec)."""
    blob = json.dumps(
        {
            "architecture": type(model).__name__,
            "config": _config_json(model),
            "weights_sample": _weights_sample_digest(model),
            "token_ids": _ids_digest(token_ids),
        },
        sort_keys=True,
    )
    return "sha256:" + hashlib.sha256(blob.encode()).hexdigest()[:16]


def texts_dataset_name(texts: Sequence[str]) -> str:
    """`texts:<16 hex>`: the dataset field of a run over a list of strings (content hash)."""
    h = hashlib.sha256()
    for text in texts:
        h.update(text.encode("utf-8", "surrogatepass") + b"\x00")
    return TEXTS_PREFIX + h.hexdigest()[:16]


def _check_texts(texts: object) -> list[str]:
    if isinstance(texts, str | bytes) or not isinstance(texts, Sequence):
        raise DeffError(
            "texts must be a list of strings or a dataset spec such as 'bbc-news', got "
            f"{type(texts).__name__}."
        )
    bad = next((i for i, t in enumerate(texts) if not isinstance(t, str)), None)
    if bad is not None:
        raise DeffError(f"texts[{bad}] is a {type(texts[bad]).__name__}, not a string.")
    return list(texts)


def _documents(
    texts: Sequence[str] | str, n: int | None, passages: str
) -> tuple[str, int, list[str] | None]:
    """(dataset field, n, the texts when given as a list) after checking them cheaply."""
    if isinstance(texts, str):
        check_dataset(texts)
        n = 512 if n is None else n
        check_int(n, "n", 4)
        return texts, n, None
    docs = _check_texts(texts)
    if passages in WINDOW_MODES:
        if n is None:
            raise DeffError(f"passages={passages!r} draws n windows from the texts; give n.")
        check_int(n, "n", 4)
    else:
        if n is not None and n != len(docs):
            raise DeffError(
                f"Every one of the {len(docs)} texts is measured; n={n} does not match "
                f"(pass texts[:{n}] to measure fewer)."
            )
        n = len(docs)
        if n < 4:
            raise TooFewPassagesError(f"Only {n} texts were given; a run needs at least 4.")
    return texts_dataset_name(docs), n, docs


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[None]:
    """Run in eval mode (no dropout) and give every submodule its own mode back after."""
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        yield
    finally:
        for m, training in modes.items():
            m.training = training


def plan_loaded_run(
    model: Any,
    tokenizer: Any,
    texts: Sequence[str] | str,
    *,
    n: int | None,
    max_tokens: int,
    seed: int,
    metric: str,
    cache_id: str | None,
    intervention: str,
    passages: str,
    bos: str,
    batch_size: int | None,
    random_seeds: Sequence[int],
) -> tuple[RunSpec, LoadedModel, list[str], list[list[int]], list[int]]:
    """Check a loaded-model run's arguments cheaply, before any forward pass ->
    (spec without its fingerprint, the wrapped model, the texts, their token ids, the seeds).

    texts: a list of strings (all measured, in order; `n` None or their count, except for
    passages="windows"/"packed", which draw `n` windows with `seed`) or a dataset spec (`n`
    passages, default 512). The spec's model is "loaded:<cache_id>" (or the architecture).
    """
    check_choice(metric, METRICS, "metric")
    check_choice(passages, PASSAGE_MODES, "passages mode")
    check_choice(bos, BOS_OPTIONS, "BOS option")
    check_choice(intervention, INTERVENTIONS, "norm intervention")
    check_int(max_tokens, "max_tokens", 2)
    check_seed(seed)
    if batch_size is not None:
        check_int(batch_size, "batch_size", 1)
    seeds = check_seeds(random_seeds)
    cache_id = check_cache_id(cache_id)
    dataset, n, docs = _documents(texts, n, passages)
    loaded = wrap_loaded(model, tokenizer, "loaded")
    spec = RunSpec(
        model=f"loaded:{cache_id}" if cache_id else f"loaded:{loaded.architecture}",
        revision=None,
        dataset=dataset,
        n=n,
        max_tokens=max_tokens,
        seed=seed,
        dtype=loaded.dtype,
        intervention=intervention,
        passages=passages,
        bos=bos,
    )
    check_positions(model, max_tokens)
    docs = run_texts(spec) if docs is None else docs
    ids = run_token_ids(spec, tokenizer, docs)
    check_token_ids(model, ids)
    return spec, loaded, docs, ids, seeds


def check_positions(model: torch.nn.Module, max_tokens: int) -> None:
    """`max_tokens` within the model's position table (its config's context length), as the
    CLI checks a named model's (`models.check_max_tokens`)."""
    from deffcore.inputs.model import _context_from_config  # the CLI's reading of a config

    config = getattr(model, "config", None)
    limit = _context_from_config(config.to_dict()) if hasattr(config, "to_dict") else None
    if limit is not None and max_tokens > limit:
        raise InvalidArgumentError(
            f"max_tokens={max_tokens} is beyond the model's context of {limit} positions (its "
            f"config); ask for at most {limit}."
        )


def check_token_ids(model: torch.nn.Module, ids: list[list[int]]) -> None:
    """Every token id the tokenizer gave has a row in the model's input embedding (a
    tokenizer of another model gives ids past it, which torch reports as an index error)."""
    rows = int(model.get_input_embeddings().num_embeddings)
    for i, seq in enumerate(ids):
        if seq and not 0 <= min(seq) <= max(seq) < rows:
            bad = max(seq) if max(seq) >= rows else min(seq)
            raise DeffError(
                f"The tokenizer gives token id {bad} in passage {i}, outside the model's "
                f"embedding of {rows} rows: pass the tokenizer that belongs to this model."
            )


def pin(
    spec: RunSpec, loaded: LoadedModel, module: torch.nn.Module, name: str, ids: list[list[int]]
) -> tuple[RunSpec, LoadedModel]:
    """The run of `module` under the model name `name`: the spec with its fingerprint as
    revision (what the key must cover), and `loaded` wrapping that module."""
    run = replace(spec, model=name, revision=model_fingerprint(module, ids))
    return run, replace(loaded, model=module, spec=name, weights_id=run.revision)


def unwrap_bridge(model: Any, tokenizer: Any) -> tuple[Any, Any]:
    """A TransformerLens `TransformerBridge` -> the transformers model it wraps and its tokenizer
    (unless one is given), so `measure(bridge, dataset=texts)` runs deffcore's extraction on the
    bridge's weights; anything else is returned as it is. A bridge in compatibility mode
    (folded and centred weights: not the model's own residual stream, SPEC section 1) is refused
    (InvalidArgumentError)."""
    inner = getattr(model, "original_model", None)
    if not isinstance(inner, torch.nn.Module) or not hasattr(model, "run_with_cache"):
        return model, tokenizer
    if getattr(model, "compatibility_mode", False):
        raise InvalidArgumentError(
            "This TransformerBridge is in compatibility mode (folded, centred weights), whose "
            "residual stream is not the model's own; measure a bridge without "
            "enable_compatibility_mode(), or its original_model."
        )
    return inner, tokenizer if tokenizer is not None else getattr(model, "tokenizer", None)


def check_in_memory_args(
    model: Any, tokenizer: Any, revision: str | None, device: str | None, dtype: str | None
) -> None:
    """A loaded model brings its tokenizer, device and dtype; a spec brings its tokenizer."""
    if isinstance(model, str):
        if tokenizer is not None:
            raise DeffError(
                f"A tokenizer goes with a loaded model; {model!r} is a model spec, which brings "
                "its own: measure(spec, dataset=texts)."
            )
        return
    for what, value in (("revision", revision), ("device", device), ("dtype", dtype)):
        if value is not None:
            raise DeffError(
                f"{what}= is for a model spec; a loaded model is measured where and as it is "
                "(move or cast it first, e.g. model.to('cuda') or model.float())."
            )


def load_for_texts(
    spec: str,
    texts: Any,
    max_tokens: int,
    revision: str | None,
    device: str | None,
    dtype: str | None,
) -> tuple[LoadedModel, str]:
    """A named model to measure on a list of strings -> (it loaded, the cache_id naming it:
    `<spec>@<weights id>`, the identity a named run's key uses)."""
    from deffcore.inputs.model import check_max_tokens, load_model, model_identity

    _check_texts(texts)
    check_int(max_tokens, "max_tokens", 2)
    check_max_tokens(spec, max_tokens, revision)
    loaded = load_model(spec, revision=revision, device=device, dtype=dtype)
    return loaded, f"{spec}@{model_identity(spec, revision)['weights_id']}"


def random_twin(model: torch.nn.Module, seed: int, loaded: LoadedModel) -> torch.nn.Module:
    """The same config freshly initialised under `seed` (the paper's null), like
    `random:<model>:<seed>` for a named model, on the model's device and dtype."""
    from deffcore.inputs.model import init_from_config

    twin = init_from_config(model.config, seed)
    twin.requires_grad_(False)
    return twin.to(device=loaded.device, dtype=getattr(torch, loaded.dtype)).eval()


# ---------------------------------------------------------------------------------------------
# Hidden states computed elsewhere


def _as_tensor(x: Any, what: str) -> torch.Tensor:
    value = getattr(x, "value", x)  # an nnsight proxy of an older release keeps it in .value
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    if isinstance(value, torch.Tensor):
        return value.detach()
    raise InvalidStatesError(f"{what} is a {type(value).__name__}, not a tensor or array.")


def _is_cache(states: Any) -> bool:
    """A mapping of hook names: a dict, or a TransformerLens ActivationCache (which has keys()
    and [] but is no `Mapping` subclass)."""
    return isinstance(states, Mapping) or (
        callable(getattr(states, "keys", None)) and hasattr(states, "__getitem__")
    )


def _layers_from_cache(cache: Any) -> list[Any]:
    """h_0 .. h_L from a TransformerLens ActivationCache (or any mapping of its hook names)."""
    names = set(cache.keys())  # an ActivationCache has keys() but no `in`
    if "blocks.0.hook_resid_pre" not in names:
        raise InvalidStatesError(
            "A mapping of states must hold TransformerLens' 'blocks.0.hook_resid_pre' and "
            "'blocks.{l}.hook_resid_post' (model.run_with_cache); pass a list otherwise."
        )
    L = 0
    while f"blocks.{L}.hook_resid_post" in names:
        L += 1
    return [
        cache["blocks.0.hook_resid_pre"],
        *(cache[f"blocks.{l}.hook_resid_post"] for l in range(L)),
    ]


def _check_states(states: Any) -> list[torch.Tensor]:
    """L+1 tensors (N, T, d) of one shape (InvalidStatesError otherwise)."""
    if _is_cache(states):
        states = _layers_from_cache(states)
    elif isinstance(states, np.ndarray | torch.Tensor):
        if states.ndim != 4:
            raise InvalidStatesError(
                f"Stacked states must be (L+1, N, T, d), got shape {tuple(states.shape)}."
            )
        states = list(states)
    elif not isinstance(states, Sequence):
        raise InvalidStatesError(
            f"states must be a list of per-layer (N, T, d) tensors, got {type(states).__name__}."
        )
    layers = [_as_tensor(h, f"states[{i}]") for i, h in enumerate(states)]
    if len(layers) < 3:
        raise InvalidStatesError(
            f"Got {len(layers)} layer(s) of states; pass h_0 .. h_L (L+1 entries, L >= 2)."
        )
    shape = tuple(layers[0].shape)
    for i, h in enumerate(layers):
        if h.ndim != 3 or tuple(h.shape) != shape:
            raise InvalidStatesError(
                f"states[{i}] has shape {tuple(h.shape)}; every layer must be (N, T, d) like "
                f"states[0] {shape}."
            )
        if not h.is_floating_point():
            raise InvalidStatesError(f"states[{i}] holds {h.dtype}, not floating point.")
    return layers


def _check_mask(mask: Any, n: int, t: int, device: torch.device) -> torch.Tensor:
    if mask is None:
        return torch.ones((n, t), dtype=torch.bool, device=device)
    m = _as_tensor(mask, "mask")
    if tuple(m.shape) != (n, t):
        raise InvalidStatesError(f"mask must be (N, T) = ({n}, {t}), got {tuple(m.shape)}.")
    if m.is_floating_point() and not bool(((m == 0) | (m == 1)).all()):
        raise InvalidStatesError("mask must hold 0 or 1 (1 at real tokens).")
    return (m != 0).to(device)


def pool_external(states: Any, mask: Any = None) -> PooledStates:
    """h_0 .. h_L (see `measure_states`) pooled by the extraction's pooler -> PooledStates."""
    layers = _check_states(states)
    n, t, d = layers[0].shape
    device = layers[0].device
    real = _check_mask(mask, n, t, device)
    lengths = real.sum(1)
    kept = torch.nonzero(lengths >= 2).flatten()
    if len(kept) < 4:
        raise TooFewPassagesError(
            f"Only {len(kept)} of {n} rows have at least 2 real tokens; at least 4 are needed."
        )
    out = {p: torch.zeros((len(layers), len(kept), d), dtype=torch.float32) for p in POOLED}
    ratio = torch.zeros((len(layers), len(kept)), dtype=torch.float32)
    for start in range(0, len(kept), STATES_ROWS_PER_CHUNK):
        rows = kept[start : start + STATES_ROWS_PER_CHUNK]
        slots = slice(start, start + len(rows))
        for layer, h in enumerate(layers):
            pooled = pool_states(h[rows], real[rows])  # the hooks' own arithmetic
            if not all(bool(torch.isfinite(pooled[p]).all()) for p in _MEANS_CHECKED):
                raise NonFiniteActivationsError(
                    f"states[{layer}] holds NaN or inf at real tokens (mask 1); they cannot "
                    "be measured."
                )
            for p in POOLED:
                out[p][layer, slots] = pooled[p].cpu()
            ratio[layer, slots] = pooled["pos0_ratio"].cpu()
    kept_lengths = lengths[kept].cpu().numpy().astype(np.int64)
    return PooledStates(
        pooled={p: t.numpy() for p, t in out.items()},
        pos0_norm_ratio=ratio.mean(1).numpy(),
        n_dropped_short=int(n - len(kept)),
        tokens=int(kept_lengths.sum()),
        lengths=kept_lengths,
        meta={
            "source": "states",
            "dtype": str(layers[0].dtype).removeprefix("torch."),
            "kept_indices": kept.cpu().tolist(),
        },
    )


def states_spec(pooled: PooledStates, name: str, dataset: str) -> RunSpec:
    """The spec a run of states computed elsewhere carries: model "states:<name>" (a label:
    such a run is never cached)."""
    for label, value in (("name", name), ("dataset", dataset)):
        if not isinstance(value, str) or not value or len(value) > MAX_CACHE_ID:
            raise InvalidArgumentError(f"{label} must be a short non-empty string, got {value!r}.")
    return RunSpec(
        model=f"states:{name}",
        revision=None,
        dataset=dataset,
        n=pooled.n,
        max_tokens=int(pooled.lengths.max()),
        seed=0,
        dtype=pooled.meta["dtype"],
    )
