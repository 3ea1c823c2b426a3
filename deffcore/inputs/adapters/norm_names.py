"""Families whose norms have other names than the generic rule's (stage: inputs).

The Table S6 interventions replace a block's post-sub-layer norms and its attention's query/key
norms by identity (`deffcore.inputs.interventions`). The generic rule knows Gemma's names
(`post_attention_layernorm` + `post_feedforward_layernorm`; `q_norm` + `k_norm`); these
families normalise the same places under other names (read from their transformers modeling
code: each norm is applied to the sub-layer's output before it is added to the stream, or to
the queries and keys before attention):

    GLM-4, Kolibri-1     post_self_attn_layernorm + post_mlp_layernorm
    AFMoE                post_attention_layernorm + post_mlp_layernorm
    Hunyuan (dense, MoE) query_layernorm + key_layernorm
    Phi, Persimmon, StableLM, LFM2   q_layernorm + k_layernorm (Phi, Persimmon, StableLM:
                         when the config enables them; Qwen4-exp too, `adapters.streams`)

and LFM2/LFM3 apply their final norm under the name `embedding_norm` (after the last block).
"""

from __future__ import annotations

from deffcore.inputs.adapters.generic import Adapter


class GlmSandwich(Adapter):
    types = ("glm4", "kolibri1")
    post_norm_names = ("post_self_attn_layernorm", "post_mlp_layernorm")


class AfmoeSandwich(Adapter):
    types = ("afmoe",)
    post_norm_names = ("post_attention_layernorm", "post_mlp_layernorm")


class HunyuanQK(Adapter):
    types = ("hunyuan_v1_dense", "hunyuan_v1_moe")
    qk_norm_names = ("query_layernorm", "key_layernorm")


class LayernormQK(Adapter):
    types = ("phi", "persimmon", "stablelm")
    qk_norm_names = ("q_layernorm", "k_layernorm")


class Lfm(LayernormQK):
    types = ("lfm2", "lfm2_moe", "lfm3")
    final_norm_names = ("embedding_norm",)


NORM_NAMES: tuple[Adapter, ...] = (
    GlmSandwich(), AfmoeSandwich(), HunyuanQK(), LayernormQK(), Lfm(),
)  # fmt: skip
