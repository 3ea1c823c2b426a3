"""Model shapes: published architectures with no weights, for `random:<shape>:<seed>`.

A *shape* is the `config.json` of a published model, typed in here from the model's own page
(each entry cites it), so its random-weight null can be built on a machine that never reaches
the hub: `random:llama-3.1-8b:0` is Llama-3.1-8B's architecture and dimensions with the
architecture's default init under `torch.manual_seed(0)`, like every other `random:` model
(SPEC section 8). `SHAPES` lists them; `shape_config(name)` is the transformers config.

Tokenizer: a shape has no tokenizer of its own here (the real ones are hub downloads), so it uses
the built-in byte tokenizer (`deffcore.inputs.byte_tokenizer`, ids 0..258: valid in every shape's
vocabulary), adding a BOS exactly when the published model's tokenizer does (Llama-3 and
Gemma-3: yes; Qwen3 and SmolLM2: no), so the BOS and position-0 controls see the same
convention as the real model. The config's pad/BOS/EOS ids are the byte tokenizer's. A window
of `max_tokens` byte tokens holds less text than the model's own tokenizer would put in it (one
token per UTF-8 byte); for a null model, and for speed and memory, the ids only need to be
valid.

`smollm2-135m-shape` and `gemma3-270m-shape` are the packaged models' architectures (the same
dimensions as their GGUF headers, tests/test_shapes.py checks them): a benchmark on a machine
without the packaged files measures the same forward (a forward's cost does not depend on the
weights' values).

`param_count(name)` counts parameters from the config alone (no model is built); the tests
check it against each model's published count and against a model built on the meta device.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

#: Byte tokenizer ids (`deffcore.inputs.byte_tokenizer.SPECIAL_TOKENS`): <pad>, <bos>, <eos>.
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


def is_shape(name: str) -> bool:
    return name in SHAPES


def shape_kwargs(name: str, **overrides: Any) -> dict[str, Any]:
    """The config fields of shape `name` with the byte tokenizer's ids (and `overrides`)."""
    from deffcore.inputs.byte_tokenizer import BYTE_VOCAB_SIZE

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
    """Parameters of shape `name` from its config alone (decoder-only, no biases: every shape
    here). Embedding + (untied) head + per block: attention projections, the gated MLP's three
    matrices, the block's norms (+ Qwen3/Gemma-3's per-head q/k norms) + the final norm."""
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


def context_length(name: str) -> int:
    return int(SHAPES[name].config["max_position_embeddings"])
