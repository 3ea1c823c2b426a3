"""A small config of any transformers causal-LM type, to build a tiny random model of it (stage:
inputs).

    config = small_config("mixtral")    # 2 blocks, d = 32, vocab 320, 4 experts, top-2
    model = causal_lm_class("mixtral")(config)

One builder for every type: the type's own config class (`transformers.CONFIG_MAPPING`) with
`SMALL` (and `MOE`, `SSM`, `VISION`) for every field it has, then the type's entry of
`OVERRIDES` (the few fields a type needs on top: a per-layer pattern of the right length, a
head size its kernels require, a validator's rule). A multimodal type gets the same small text
config and a small vision config. The configs name BOS = 1, EOS = 2, PAD = 0: the ids of the
built-in byte tokenizer (`byte_level_tokenizer`), so its texts feed every tiny model.

`BY_DESIGN` lists the causal-LM types that are not decoder-only language models (encoders used
as decoders, decoders of encoder-decoder models, a permutation LM): they are refused, each with
its reason, before anything is built, here and when a model folder of the type is loaded
(`deffcore.inputs.model.refusal_by_design`, the one source of both). The support table
(`deffcore.lenses.support`, docs/support.md) is the record of which types build, measure and
match `output_hidden_states`.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

from deffcore.core.errors import UnsupportedArchitectureError

#: Vocabulary of every small config: the byte tokenizer's 259 ids, rounded up.
VOCAB = 320
#: Fields every small config gets when its class has them (aliases through `attribute_map`).
SMALL: dict[str, Any] = {
    "num_hidden_layers": 2, "hidden_size": 32, "intermediate_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8,
    "vocab_size": VOCAB, "max_position_embeddings": 256, "n_positions": 256,
    "n_layer": 2, "n_embd": 32, "n_head": 4, "n_inner": 64, "d_model": 32, "n_layers": 2,
    "num_layers": 2, "ffn_hidden_size": 64, "hidden_dim": 64, "n_heads": 4, "d_ff": 64,
    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
    "sliding_window": 8, "attention_window_size": 8, "rope_scaling": None, "rotary_dim": 4,
    "max_seq_len": 256, "window_size": 8, "sliding_window_size": 8,
}  # fmt: skip
#: Multi-head latent attention (DeepSeek-V2/V3 and their kin) and its sparse indexer.
MLA: dict[str, Any] = {
    "q_lora_rank": 16, "kv_lora_rank": 16, "qk_rope_head_dim": 4, "qk_nope_head_dim": 4,
    "v_head_dim": 8, "index_n_heads": 2, "index_head_dim": 8, "index_topk": 8,
    "hidden_size_per_layer_input": 8, "vocab_size_per_layer_input": VOCAB,
    "expert_ffn_hidden_size": 32, "router_hidden_size": 16, "linear_head_dim": 8,
    "linear_num_heads": 4, "laurel_rank": 4, "adapter_rank": 8, "chunk_size": 16,
    "mamba_chunk_size": 16,
}  # fmt: skip
#: Mixture-of-experts fields: 4 experts, 2 per token, small expert width, dense first block.
MOE: dict[str, Any] = {
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "moe_topk": 2, "top_k": 2, "moe_intermediate_size": 32,
    "expert_intermediate_size": 32, "shared_expert_intermediate_size": 32,
    "n_shared_experts": 1, "num_shared_experts": 1, "first_k_dense_replace": 1, "n_group": 1,
    "topk_group": 1, "num_dense_layers": 1, "moe_layer_freq": 1, "decoder_sparse_step": 1,
}  # fmt: skip
#: State-space fields: a small state, few SSM heads.
SSM: dict[str, Any] = {
    "state_size": 8, "ssm_state_size": 8, "mamba_d_state": 8, "mamba_n_heads": 4,
    "mamba_d_head": 16, "mamba_n_groups": 1, "mamba_expand": 2, "mamba_d_conv": 4,
    "n_mamba_heads": 2, "mamba_headdim": 16, "time_step_rank": 4, "conv_kernel": 4,
    "attention_hidden_size": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 8, "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4,
}  # fmt: skip
#: A multimodal type's vision or audio tower: one small block.
VISION: dict[str, Any] = {
    "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "depth": 1,
    "num_attention_heads": 4, "num_heads": 4, "image_size": 32, "patch_size": 8,
    "num_channels": 3, "out_hidden_size": 32, "projection_dim": 32, "embed_dim": 32,
}  # fmt: skip

_MLA_HEADS = {"num_key_value_heads": 4}  # latent attention has one KV head per query head
#: Per type, the fields `SMALL` cannot give (a pattern per layer, a size a kernel requires).
OVERRIDES: dict[str, dict[str, Any]] = {
    "mamba2": {"num_heads": 4, "head_dim": 16, "n_groups": 1},
    "zamba": {"layers_block_type": ["mamba", "hybrid"], "attn_layer_period": 2,
              "attn_layer_offset": 1, "attention_hidden_size": 64},
    "zamba2": {"layers_block_type": ["mamba", "hybrid"], "n_mamba_heads": 4},
    "falcon_h1": {"mamba_d_ssm": 64, "mamba_n_heads": 4, "mamba_d_head": 16},
    "zaya": {"num_experts_per_tok": 1},
    # one attention block and one expert block in two (the defaults put both beyond block 2)
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1, "expert_layer_period": 2,
              "expert_layer_offset": 1},
    "gpt_neo": {"attention_types": [[["global", "local"], 1]]},
    "dots3_note": {"text_config": {"num_key_value_heads": 4, "per_layer_config": None}},
    "dots3_note_text": {"num_key_value_heads": 4, "per_layer_config": None},
    "dbrx": {"attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},
             "ffn_config": {"ffn_hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2}},
    "minicpm3": _MLA_HEADS, "sarvam_mla": _MLA_HEADS, "axk1": _MLA_HEADS, "axk2": _MLA_HEADS,
    "deepseek_v2": _MLA_HEADS, "deepseek_v3": _MLA_HEADS, "deepseek_v32": _MLA_HEADS,
    "deepseek_v4": _MLA_HEADS, "glm4_moe_lite": _MLA_HEADS, "glm_moe_dsa": _MLA_HEADS,
    "youtu": _MLA_HEADS, "longcat_flash": {**_MLA_HEADS, "zero_expert_num": 2},
    "kimi_linear": _MLA_HEADS, "hy_v4": _MLA_HEADS,
    "gemma4_assistant": {"hidden_size_per_layer_input": 0},
    "blt": {"encoder_hash_byte_group_vocab": 64},
    "inkling2_text": {"unpadded_vocab_size": VOCAB},
    "inkling2_loop_text": {"unpadded_vocab_size": VOCAB},
    "cohere_compass_text": {"layer_types": ["sliding_attention", "full_attention"]},
    "gemma3n_text": {"num_kv_shared_layers": 0, "altup_num_inputs": 2,
                     "layer_types": ["sliding_attention", "full_attention"]},
    "lfm2": {"layer_types": ["conv", "full_attention"]},
    "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_dense_layers": 1},
    "moshi": {"audio_vocab_size": 64},
    "cpmant": {"prompt_length": 0, "dim_head": 8, "dim_ff": 64},
    "reformer": {"is_decoder": True, "attn_layers": ["local", "lsh"], "axial_pos_shape": [16, 16],
                 "axial_pos_embds_dim": [16, 16], "local_attn_chunk_length": 8,
                 "lsh_attn_chunk_length": 8, "num_buckets": 4, "attention_head_size": 8,
                 "feed_forward_size": 64},
}  # fmt: skip

#: Causal-LM types that are not decoder-only language models, each with why it is refused.
ENCODER_REASON = (
    "an encoder (bidirectional attention) that transformers can also run as a decoder; "
    "effective depth is defined on decoder-only language models"
)
ENC_DEC_REASON = (
    "the decoder of an encoder-decoder model, whose states depend on an encoder's output; "
    "effective depth is defined on decoder-only language models"
)
BY_DESIGN: dict[str, str] = {
    **dict.fromkeys(
        (
            "bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra",
            "ernie", "megatron-bert", "rembert", "roberta", "roberta-prelayernorm", "roc_bert",
            "roformer", "xlm", "xlm-roberta", "xlm-roberta-xl", "xmod",
        ),
        ENCODER_REASON,
    ),
    **dict.fromkeys(
        (
            "bart", "bigbird_pegasus", "blenderbot", "blenderbot-small", "marian", "mbart",
            "mvp", "pegasus", "plbart", "prophetnet", "trocr", "whisper", "musicgen",
            "musicgen_melody", "moss_transcribe_diarize",
        ),
        ENC_DEC_REASON,
    ),
    "xlnet": (
        "a permutation language model (two attention streams, no causal residual stream); "
        "effective depth is defined on causal decoders"
    ),
}  # fmt: skip


def causal_lm_types() -> dict[str, str]:
    """transformers' causal-LM types: {model type: model class name}, in its order."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return dict(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def causal_lm_class(model_type: str) -> type:
    """The causal-LM model class of `model_type` (UnsupportedArchitectureError if unknown)."""
    import transformers

    name = causal_lm_types().get(model_type)
    cls = getattr(transformers, name, None) if name else None
    if cls is None:
        raise UnsupportedArchitectureError(
            f"transformers {transformers.__version__} has no causal-LM class for {model_type!r}."
        )
    return cls


def _fields(config_cls: type) -> dict[str, str]:
    """{name a config accepts: the field it sets} (its fields and `attribute_map` aliases)."""
    names = (
        {f.name: f.name for f in dataclasses.fields(config_cls)}
        if dataclasses.is_dataclass(config_cls)
        else {}
    )
    aliases = getattr(config_cls, "attribute_map", {}) or {}
    return {**names, **{alias: target for alias, target in aliases.items() if target in names}}


def _small_kwargs(config_cls: type) -> dict[str, Any]:
    """`SMALL`, `MOE`, `SSM` and `MLA` restricted to what `config_cls` has, each field set once."""
    fields = _fields(config_cls)
    out: dict[str, Any] = {}
    for table in (SMALL, MOE, SSM, MLA):
        for name, value in table.items():
            target = fields.get(name)
            if target is not None:
                out[target] = value
    return out


def _sub_config(config_cls: type, name: str, sub_cls: Any) -> dict[str, Any] | None:
    """The small kwargs of a multimodal config's sub-config `name` (None: leave its default).

    A sub-config typed `AutoConfig` (Gemma-3's vision tower, Fuyu's text model) is shrunk as
    the type its parent's default names, with that `model_type`."""
    from transformers import CONFIG_MAPPING

    kind = None
    if not (isinstance(sub_cls, type) and dataclasses.is_dataclass(sub_cls)):
        try:
            kind = getattr(getattr(config_cls(), name, None), "model_type", None)
        except Exception:  # a parent whose defaults do not build: leave the sub-config alone
            return None
        if kind not in CONFIG_MAPPING:
            return None
        sub_cls = CONFIG_MAPPING[kind]
    if name == "text_config":
        out = _small_kwargs(sub_cls)
    else:
        fields = _fields(sub_cls)
        out = {fields[k]: v for k, v in VISION.items() if k in fields}
    return out if kind is None else {"model_type": kind, **out}


def default_special_ids(model_type: str) -> SimpleNamespace:
    """The BOS and EOS ids the type's own config class defaults to (its text config's for a
    multimodal type): what the family's BOS convention is read from, since `small_config`
    gives every type the byte tokenizer's ids."""
    from transformers import CONFIG_MAPPING

    config_cls = CONFIG_MAPPING[model_type]
    text_cls = (getattr(config_cls, "sub_configs", None) or {}).get("text_config")
    if isinstance(text_cls, type) and dataclasses.is_dataclass(text_cls):
        config_cls = text_cls
    defaults = {}
    if dataclasses.is_dataclass(config_cls):
        defaults = {f.name: f.default for f in dataclasses.fields(config_cls)}
    return SimpleNamespace(
        bos_token_id=defaults.get("bos_token_id"), eos_token_id=defaults.get("eos_token_id")
    )


def small_config(model_type: str) -> Any:
    """The small config of `model_type` (module docstring); UnsupportedArchitectureError for a
    type refused by design (`BY_DESIGN`) or one transformers does not know."""
    from transformers import CONFIG_MAPPING

    if model_type in BY_DESIGN:
        raise UnsupportedArchitectureError(f"{model_type!r} is {BY_DESIGN[model_type]}.")
    if model_type not in CONFIG_MAPPING:
        raise UnsupportedArchitectureError(f"transformers has no config for {model_type!r}.")
    config_cls = CONFIG_MAPPING[model_type]
    kwargs = _small_kwargs(config_cls)
    for name, sub_cls in (getattr(config_cls, "sub_configs", None) or {}).items():
        sub = _sub_config(config_cls, name, sub_cls)
        if sub is not None:
            kwargs[name] = sub
    override = OVERRIDES.get(model_type, {})
    for name, value in override.items():
        if isinstance(value, dict) and isinstance(kwargs.get(name), dict):
            kwargs[name] = {**kwargs[name], **value}
        else:
            kwargs[name] = value
    return config_cls(**kwargs)
