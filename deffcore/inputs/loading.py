"""Loading a model spec (`deffcore.inputs.catalog`) into memory: weights, tokenizer, eval mode.

Hub access honours `HF_HUB_OFFLINE=1`: then nothing is downloaded and an id that is not on the
machine raises `HubUnavailableError` naming the offline models.

Decisions: Random weights are drawn on the CPU, directly in the forward dtype (bit-identical to
drawing float32 and rounding, which tests/test_shapes.py checks per architecture), so a seed gives
the same weights on every machine and device. Loaded models are not memoised here; callers that
reuse a model (the app) keep the `LoadedModel`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch

from deffcore.core.errors import (
    HubUnavailableError,
    UnknownModelError,
    UnsupportedArchitectureError,
)
from deffcore.inputs.architecture import architecture_of
from deffcore.inputs.catalog import (
    TINY_SEED,
    check_not_shape,
    offline_models_sentence,
    tiny_config,
)
from deffcore.inputs.devices import check_fits, place_model, resolve_device_dtype
from deffcore.inputs.gguf import check_gguf_tokenizer, gguf_invalid, gguf_metadata, packaged_gguf
from deffcore.inputs.gguf_reading import reads_once
from deffcore.inputs.identity import model_identity
from deffcore.inputs.load_stages import mark
from deffcore.inputs.model_config import check_config, refusal_by_design
from deffcore.inputs.model_files import check_loaded_weights, check_model_folder
from deffcore.inputs.model_spec import Kind, ModelSpec
from deffcore.inputs.shapes import SHAPES, shape_config
from deffcore.inputs.special_tokens import adds_bos


@dataclass
class LoadedModel:
    """A model ready for extraction.

    `model` is the causal-LM (eval mode, on `device`); extraction runs only `base_model(model)`.
    `weights_id` identifies the weights in cache keys (a file hash, a revision, or a seed).
    """

    spec: str
    revision: str | None
    model: Any
    tokenizer: Any
    layers: int
    d_model: int
    architecture: str
    weights_id: str
    device: str
    dtype: str

    @property
    def adds_bos(self) -> bool:
        """Whether the tokenizer puts a BOS token in front of a passage by default."""
        return adds_bos(self.tokenizer)


_TOKENIZER_MEMO: dict[tuple[str, str | None, str], Any] = {}


def load_tokenizer(spec: str | ModelSpec, revision: str | None = None) -> Any:
    """The tokenizer of `spec` without its weights (memoised per process: do not modify it).

    Tiny models: the built-in byte tokenizer; `random:<m>:<s>`: the tokenizer of `<m>`; GGUF
    files: transformers' tokenizer from the GGUF header; folders and hub ids: AutoTokenizer.
    Memoised on the spec, revision and weights id (a changed file is read again); the model
    loads (`load_model`) share it, and one lock keeps two threads (the sidebar's window count,
    a background load) from building the same tokenizer twice.
    """
    spec = ModelSpec.parse(spec)
    memo_key = (spec.text, revision, model_identity(spec, revision)["weights_id"])
    with _TOKENIZER_LOCK:
        if memo_key not in _TOKENIZER_MEMO:
            _TOKENIZER_MEMO[memo_key] = _load_tokenizer(spec, revision)
        return _TOKENIZER_MEMO[memo_key]


def _load_tokenizer(spec: ModelSpec, revision: str | None) -> Any:
    spec = spec.trained  # a random model reads with its base's tokenizer
    if spec.kind in (Kind.TINY, Kind.SHAPE):
        from deffcore.inputs.byte_tokenizer import byte_level_tokenizer

        add = SHAPES[spec.text].adds_bos if spec.kind is Kind.SHAPE else spec.tiny_adds_bos
        return byte_level_tokenizer(add_bos=add)
    source, kwargs = _source(spec)
    if revision is not None:
        kwargs["revision"] = revision
    return _from_pretrained("tokenizer", spec.text, source, kwargs)


def init_from_config(config, seed: int, dtype: torch.dtype = torch.float32):
    """The architecture's own default init on the CPU, made reproducible by the seed, drawn
    directly in `dtype` (the same weights as float32 rounded to it, at a fraction of the memory:
    an 8B shape takes 16 GB in bfloat16, not 32 GB)."""
    import transformers

    mark("building")
    cls = transformers.AutoModelForCausalLM
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        # never a config's own code
        return cls.from_config(config, dtype=dtype, trust_remote_code=False)


def _load_tiny(spec: ModelSpec, seed: int = TINY_SEED, dtype: torch.dtype = torch.float32):
    from deffcore.inputs.byte_tokenizer import byte_level_tokenizer

    model = init_from_config(tiny_config(spec.tiny_arch), seed, dtype)
    return model, byte_level_tokenizer(add_bos=spec.tiny_adds_bos)


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("1", "true", "yes", "on")


def _hub_reachable(timeout: float = 3.0) -> bool:
    """One quick TCP connection to the hub's host (`$HF_ENDPOINT`, default huggingface.co).

    Without it an offline machine spends ~25 s in transformers' retries before failing; with
    it the load goes straight to the local cache (`local_files_only`) and a clear error.
    """
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((url.hostname or "huggingface.co", port), timeout=timeout).close()
    except OSError:
        return False
    return True


def _source(model: ModelSpec) -> tuple[str, dict[str, Any]]:
    """(path or id, extra from_pretrained kwargs) for a non-tiny, non-random spec."""
    spec = model.text
    if model.kind is Kind.PACKAGED:
        p = packaged_gguf(spec)
        gguf_metadata(p)  # a truncated file fails here with one sentence
        return str(p.parent), {"gguf_file": p.name}
    path = model.path
    if model.kind is Kind.GGUF:
        if path.is_dir():
            raise UnknownModelError(f"The GGUF path {path} is a folder, not a file.")
        if not path.is_file():
            raise UnknownModelError(f"The GGUF file {path} does not exist.")
        gguf_metadata(path)
        return str(path.parent), {"gguf_file": path.name}
    if path.is_dir():
        check_model_folder(path)  # no code, no lying safetensors header: before transformers
        return str(path), {}
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise UnknownModelError(
            f"Model {spec!r} is neither an existing local folder nor a Hugging Face id. "
            + offline_models_sentence()
        )
    return spec, {}


def _from_pretrained(kind: str, spec: str, source: str, kwargs: dict[str, Any]):
    """Call transformers' from_pretrained, turning hub/file failures into DeffErrors."""
    import transformers

    cls = transformers.AutoConfig if kind == "config" else transformers.AutoTokenizer
    if kind == "model":
        cls = transformers.AutoModelForCausalLM
    is_hub = not Path(source).exists()
    no_hub = is_hub and (_offline() or not _hub_reachable())
    # never a model's own code, and never a "run the custom code? [y/N]" prompt on stdin
    kwargs = {**kwargs, "trust_remote_code": False}
    if no_hub:
        kwargs = {**kwargs, "local_files_only": True}
    weights = kind == "model" and "gguf_file" not in kwargs  # a GGUF's names are converted
    if weights:
        kwargs = {**kwargs, "output_loading_info": True}
    try:
        with _held_load_report() as report:
            loaded = cls.from_pretrained(source, **kwargs)
    except OSError as err:
        if not is_hub:
            raise UnknownModelError(f"Could not load model {spec!r} from {source}: {err}") from err
        text = str(err).lower()
        if no_hub or "offline" in text or "connect" in text or "resolve" in text:
            raise HubUnavailableError(
                f"Model {spec!r} is not on this machine and the Hugging Face hub cannot be "
                f"reached{' (HF_HUB_OFFLINE is set)' if _offline() else ''}. "
                + offline_models_sentence()
            ) from err
        raise UnknownModelError(
            f"Model {spec!r} was not found on the Hugging Face hub or on this machine ({err}). "
            + offline_models_sentence()
        ) from err
    except ValueError as err:  # e.g. an architecture transformers does not know
        if "trust_remote_code" in str(err):  # a hub repo whose config asks for its own code
            raise UnknownModelError(
                f"Model {spec!r} asks to run its own Python code (its config has an 'auto_map'); "
                "deffcore never runs code from a model (trust_remote_code=False), so it cannot "
                "be loaded."
            ) from err
        first = (str(err).strip().splitlines() or [""])[0]
        raise UnknownModelError(f"Model {spec!r} could not be loaded: {first}") from err
    except (struct.error, EOFError) as err:  # a GGUF whose header checked out but reads short
        if "gguf_file" in kwargs:
            raise gguf_invalid(Path(source) / kwargs["gguf_file"]) from err
        raise UnknownModelError(f"Model {spec!r} could not be loaded: {err}") from err
    except RuntimeError as err:
        if "mismatch" not in str(err):
            raise
        # weights of other shapes than the config's (transformers' "size mismatch" report)
        raise UnknownModelError(
            f"{_where(spec, source, is_hub)} holds weights whose shapes do not match its "
            "config.json (transformers reports a size mismatch), so it cannot be loaded."
        ) from None
    if kind == "tokenizer" and "gguf_file" in kwargs:
        check_gguf_tokenizer(loaded, Path(source) / kwargs["gguf_file"])
    if weights:
        loaded, info = loaded
        check_loaded_weights(loaded, info, _where(spec, source, is_hub))
    for record in report:  # weights kept: transformers' report of what they lacked is shown
        logging.getLogger(record.name).handle(record)
    if kind in ("model", "config"):
        _refuse_by_design(loaded if kind == "config" else loaded.config, spec)
    return loaded


@contextlib.contextmanager
def _held_load_report() -> Iterator[list[logging.LogRecord]]:
    """transformers' report of the keys a load missed or did not expect ("... LOAD REPORT"),
    held back while the load runs: weights that do not fill their model are refused in one
    sentence (`check_loaded_weights`), and the report is shown only for weights that are kept."""
    held: list[logging.LogRecord] = []

    class _Hold(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            if "LOAD REPORT" in str(record.msg):
                held.append(record)
                return False
            return True

    logger, hold = logging.getLogger("transformers.modeling_utils"), _Hold()
    logger.addFilter(hold)
    try:
        yield held
    finally:
        logger.removeFilter(hold)


def _where(spec: str, source: str, is_hub: bool) -> str:
    """How a refusal names what was loaded: the folder, or the hub id."""
    return f"Model {spec!r}" if is_hub else f"The model folder {source}"


def _refuse_by_design(config: Any, spec: str) -> None:
    """A hub model (or GGUF) of a type refused by design (a local folder's config was refused
    before anything was built: `deffcore.inputs.model_config`)."""
    kind = getattr(config, "model_type", None) or ""
    reason = refusal_by_design(kind, bool(getattr(config, "is_encoder_decoder", False)))
    if reason is not None:
        raise UnsupportedArchitectureError(
            f"Model {spec!r} is a {kind!r} model, which is refused by design: {reason} "
            "(docs/support.md)."
        )


def _load_pretrained(
    spec: ModelSpec, revision: str | None, torch_dtype: torch.dtype, device_map: Any = None
):
    source, kwargs = _source(spec)
    if revision is not None:
        kwargs["revision"] = revision
    placed = {} if device_map is None else {"device_map": device_map}
    tokenizer = load_tokenizer(spec, revision)  # shared with the window counts (memoised)
    if "gguf_file" not in kwargs:  # a GGUF marks its de-quantising and building itself
        mark("building")
    model = _from_pretrained("model", spec.text, source, {**kwargs, **placed, "dtype": torch_dtype})
    return model, tokenizer


def _load_random(inner: ModelSpec, seed: int, revision: str | None, dtype: torch.dtype):
    if inner.kind is Kind.TINY:
        return _load_tiny(inner, seed, dtype)
    if inner.kind is Kind.SHAPE:
        config = shape_config(inner.text)
        return init_from_config(config, seed, dtype), _load_tokenizer(inner, None)
    source, kwargs = _source(inner)
    if revision is not None:
        kwargs["revision"] = revision
    config = _from_pretrained("config", inner.text, source, dict(kwargs))
    # a hub config's types and ranges, before its modules are built (a folder's: in _source)
    check_config(config.to_dict(), f"model {inner.text!r}")
    tokenizer = _from_pretrained("tokenizer", inner.text, source, dict(kwargs))
    return init_from_config(config, seed, dtype), tokenizer


def load_model(
    spec: str | ModelSpec,
    *,
    revision: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    device_map: str | dict[str, Any] | None = None,
) -> LoadedModel:
    """Load `spec` (see the module docstring) in eval mode on `device` with `dtype`.

    `device_map` ("auto" or accelerate's {module name: device}; `device="auto"` means
    `device_map="auto"`) spreads the model over several devices instead of moving it to
    `device`. Raises UnknownModelError (nothing by that name), HubUnavailableError (hub needed
    but unreachable), UnsupportedArchitectureError (no decoder blocks found),
    InvalidArgumentError (a random shape too large for this machine).
    """
    spec = ModelSpec.parse(spec)
    device, dtype = resolve_device_dtype(device, dtype)
    if device == "auto":
        device, device_map = "cuda", device_map or "auto"
    check_not_shape(spec.text)
    check_fits(spec, device, dtype, spread=device_map is not None)
    torch_dtype = getattr(torch, dtype)
    mark("reading")  # the parts of a load, for whoever reports them (deffcore.inputs.load_stages)
    with reads_once():  # a GGUF header is parsed once for config, tokenizer and weights
        if spec.kind is Kind.RANDOM:
            assert spec.base is not None and spec.seed is not None
            model, tokenizer = _load_random(spec.base, spec.seed, revision, torch_dtype)
        elif spec.kind is Kind.TINY:
            model, tokenizer = _load_tiny(spec, dtype=torch_dtype)
        else:
            model, tokenizer = _load_pretrained(spec, revision, torch_dtype, device_map)
    mark("moving")
    model, device = place_model(model, device, torch_dtype, device_map)
    model.eval().requires_grad_(False)
    arch = architecture_of(model)
    return LoadedModel(
        spec=spec.text,
        revision=revision,
        model=model,
        tokenizer=tokenizer,
        layers=arch.layers,
        d_model=arch.width,
        architecture=type(model).__name__,
        weights_id=model_identity(spec, revision)["weights_id"],
        device=device,
        dtype=dtype,
    )


_TOKENIZER_LOCK = threading.Lock()
