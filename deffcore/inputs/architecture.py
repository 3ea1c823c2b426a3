"""One interface to a decoder's residual stream, whatever its family (stage: inputs).

    arch = architecture_of(model)      # any transformers causal LM or base model
    arch.base, arch.blocks, arch.final_norm, arch.layers
    arch.forward(input_ids, attention_mask, position_ids)   # the base model, no unembedding
    arch.block_input(args, kwargs), arch.block_output(output)   # what the hooks pool
    arch.post_norms(), arch.qk_norms()                      # the interventions' norms
    arch.attention_blocks()                                 # blocks the sink diagnostics read
    base_model(model), decoder_layers(model), final_norm(model)   # the same, one at a time

The answers come from the generic rule (`Adapter`, below) and
the few family adapters that override it where it fails. Extraction, the labs' hooks, the
interventions and the diagnostics ask here, so a named model (hub id, folder, .gguf), a tiny
test model and a notebook's model all go through the same adapters. Nothing is cached: the
lookup walks the module tree once (milliseconds even for a 32-block model).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

from deffcore.core.errors import UnsupportedArchitectureError
from deffcore.core.lazy import nn, torch  # imported on first use: a model's name never needs it

# ---------------------------------------------------------------------------------------------
# The generic rule for finding a decoder's residual stream.
#
# Every architecture question extraction, the interventions and the sink diagnostics ask is a
# method of `Adapter`; this class answers each one by a rule that holds for transformers'
# decoders in general, and a family whose model breaks a rule gets a subclass overriding that one
# method (`ADAPTERS`, below; each method's docstring says what it answers). The rules, in order
# of trust:

#
# - The base: transformers' own `model.base_model` (its `base_model_prefix`), then the text model
#   of a multimodal wrapper (`language_model`, `text_model`), again until the blocks are found.
# - The blocks: the `nn.ModuleList` whose modules are the classes transformers itself records as
#   `hidden_states` (the model's `_can_record_outputs`: the blocks `output_hidden_states` reports,
#   decoder and SSM blocks of hybrids alike); else the shallowest ModuleList with as many modules
#   as the config has layers, a list named `layers`, `h`, `blocks` or `layer` first; else the
#   first of those names.
# - h_0 is the input of the first block (a forward pre-hook: an embedding scale such as Gemma's
#   sqrt(d) is in it), h_l the output of block l: the tensor itself, or the first item of a
#   tuple, as transformers' blocks return it. An SSM or RNN block (Mamba, RWKV, xLSTM) adds its
#   update to the same residual stream, so it is a block like any other.
# - Recurrent blocks: a block holding a convolution over positions (`nn.Conv1d` with a kernel
#   longer than 1: Mamba, Jamba, Zamba, Bamba, Falcon-H1, Nemotron-H, LFM2, Qwen3-Next's
#   DeltaNet ...) or a module named for a recurrence (RWKV, xLSTM, linear/lightning attention,
#   RG-LRU). Such a block runs over every position before a token, so padding in front of a
#   passage would reach its states: extraction pads them on the right only.

#: Names of the module list of blocks, most common first (when the config gives no count).
BLOCK_LIST_NAMES: tuple[str, ...] = ("layers", "h", "blocks", "layer")
#: Names of the final norm on the module that holds the blocks (or on the base).
FINAL_NORM_NAMES: tuple[str, ...] = (
    "norm", "ln_f", "final_layer_norm", "final_layernorm", "norm_f", "ln_out", "final_norm",
    "layer_norm", "layernorm", "final_ln", "out_norm", "ln_final",
)  # fmt: skip
#: Config fields that count blocks, most specific first.
LAYER_COUNT_FIELDS: tuple[str, ...] = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
#: Config fields of the residual-stream width.
WIDTH_FIELDS: tuple[str, ...] = ("hidden_size", "n_embd", "d_model", "dim", "embed_dim")
#: Submodules of a wrapper that hold its text model (a multimodal model's, or a plain
#: module's transformers-style stack).
TEXT_MODEL_NAMES: tuple[str, ...] = (
    "language_model", "text_model", "model", "transformer", "gpt_neox", "backbone",
)  # fmt: skip
#: A block's post-sub-layer norms (attention, feed-forward): Gemma-2/3, OLMo-2, EXAONE-4.
POST_NORM_NAMES: tuple[str, str] = ("post_attention_layernorm", "post_feedforward_layernorm")
#: An attention module's query and key norms: Gemma-3, OLMo-2, Qwen3, Cohere, ...
QK_NORM_NAMES: tuple[str, str] = ("q_norm", "k_norm")
#: Parts of module class names that mean a recurrence along the sequence.
RECURRENT_NAMES: tuple[str, ...] = (
    "Rwkv", "LSTM", "DeltaNet", "LinearAttention", "Lightning", "Rglru", "RgLru", "Recurrent",
    "Mamba", "ShortConv",
)  # fmt: skip
#: Parts of module class names that mean a mixture of experts.
MOE_NAMES: tuple[str, ...] = ("MoE", "Moe", "Experts", "SparseMlp")
#: The base-model arguments extraction passes when the forward takes them.
FORWARD_ARGUMENTS: tuple[str, ...] = ("attention_mask", "position_ids", "use_cache")


def text_config(model: nn.Module) -> Any:
    """The config of the model's text decoder (a multimodal config's `text_config`), or None."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    if hasattr(config, "get_text_config"):
        try:
            return config.get_text_config() or config
        except (AttributeError, ValueError, TypeError):  # a config with several text configs
            return config
    return config


def config_int(config: Any, names: tuple[str, ...]) -> int | None:
    """The first of `names` set to a positive int on `config` (None when none is)."""
    for name in names:
        try:
            value = getattr(config, name, None)
        except (AttributeError, ValueError, TypeError):  # per-layer fields refuse global reads
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _recorded_classes(model: nn.Module, key: str) -> tuple[type, ...]:
    """The module classes transformers hooks to record `key` ("hidden_states", "attentions")."""
    found: list[type] = []
    for cls in type(model).__mro__:
        spec = cls.__dict__.get("_can_record_outputs")
        if isinstance(spec, dict) and key in spec:
            entries = spec[key] if isinstance(spec[key], list | tuple) else [spec[key]]
            for entry in entries:
                target = getattr(entry, "target_class", entry)
                if isinstance(target, type):
                    found.append(target)
            break
    return tuple(found)


def _depth(name: str) -> int:
    return name.count(".") + 1 if name else 0


class Adapter:
    """The generic answers (module docstring); a family subclasses what fails for it."""

    #: the model types this adapter is for (the registry's keys); empty for the generic rule
    types: tuple[str, ...] = ()
    #: where h_1 sits in transformers' `output_hidden_states` minus 1: 0 when it starts with h_0
    #: (the usual), 1 when it has no embedding entry (Mamba, RWKV)
    hidden_states_offset: int = 0
    #: names of the norm after the last block, on the module holding the blocks (or the base)
    final_norm_names: tuple[str, ...] = FINAL_NORM_NAMES
    #: a block's (attention-output norm, feed-forward-output norm) names
    post_norm_names: tuple[str, str] = POST_NORM_NAMES
    #: an attention module's (query norm, key norm) names
    qk_norm_names: tuple[str, str] = QK_NORM_NAMES
    #: the family's BOS convention when the config cannot tell (`adds_bos`); None: ask it
    bos_convention: bool | None = None

    # -- where the stream is --------------------------------------------------------------

    def base(self, model: nn.Module) -> nn.Module:
        """The module running the blocks, without the unembedding (module docstring)."""
        base = model
        prefix_base = getattr(model, "base_model", None)
        if isinstance(prefix_base, nn.Module):
            base = prefix_base
        for _ in range(4):  # multimodal wrappers nest the text model, sometimes twice
            inner = self._text_model(base)
            if inner is None:
                break
            base = inner
        return base

    def _text_model(self, base: nn.Module) -> nn.Module | None:
        """The text model inside a wrapper whose own children hold no block list."""
        if self._own_block_list(base) is not None:
            return None
        for name in TEXT_MODEL_NAMES:
            inner = getattr(base, name, None)
            if isinstance(inner, nn.Module) and inner is not base:
                prefix_base = getattr(inner, "base_model", None)
                return prefix_base if isinstance(prefix_base, nn.Module) else inner
        return None

    def _own_block_list(self, module: nn.Module) -> nn.ModuleList | None:
        for name in BLOCK_LIST_NAMES:
            sub = getattr(module, name, None)
            if isinstance(sub, nn.ModuleList) and len(sub) > 0:
                return sub
        return None

    def blocks(self, base: nn.Module, model: nn.Module) -> nn.ModuleList | None:
        """The L blocks in order (module docstring), None when no rule finds them."""
        lists = [
            (name, sub)
            for name, sub in base.named_modules()
            if isinstance(sub, nn.ModuleList) and len(sub) > 0
        ]
        recorded = _recorded_classes(model, "hidden_states") or _recorded_classes(
            base, "hidden_states"
        )  # the causal LM says, or its base model (the one that runs the blocks)
        if recorded:
            for _, sub in sorted(lists, key=lambda item: _depth(item[0])):
                if all(isinstance(block, recorded) for block in sub):
                    return sub
        count = config_int(text_config(model) or text_config(base), LAYER_COUNT_FIELDS)
        if count is not None:
            same = [(name, sub) for name, sub in lists if len(sub) == count]
            if same:
                return min(same, key=lambda item: (_depth(item[0]), not self._named(item[0])))[1]
        return self._own_block_list(base)

    @staticmethod
    def _named(path: str) -> bool:
        return path.rsplit(".", 1)[-1] in BLOCK_LIST_NAMES

    def final_norm(self, base: nn.Module, blocks: nn.ModuleList) -> nn.Module | None:
        """The norm after the last block: a known name beside the blocks, else on the base."""
        owners = [m for m in base.modules() if any(c is blocks for c in m.children())]
        for owner in [*owners, base]:
            for name in self.final_norm_names:
                sub = getattr(owner, name, None)
                if isinstance(sub, nn.Module) and not isinstance(sub, nn.ModuleList):
                    return sub
        return None

    def recurrent_blocks(self, blocks: nn.ModuleList) -> list[bool]:
        """Per block, whether it mixes positions by a recurrence or a causal convolution."""
        return [_is_recurrent(block) for block in blocks]

    def family(self, model: nn.Module, blocks: nn.ModuleList) -> str:
        """The kind of decoder in words, from what its blocks hold (the support table's)."""
        recurrent = any(self.recurrent_blocks(blocks))
        attention = bool(self.attention_blocks(model, blocks))
        moe = any(_named_like(block, MOE_NAMES) for block in blocks)
        kind = (
            "hybrid attention + recurrent"
            if recurrent and attention
            else "recurrent (SSM/RNN)"
            if recurrent
            else "attention"
        )
        return kind + (", mixture of experts" if moe else "")

    # -- what a block's hooks see ------------------------------------------------------------

    def h0_site(self, blocks: nn.ModuleList) -> tuple[nn.Module, bool]:
        """(module, after): h_0 is the input of `module` (after False: the first block) or its
        output (after True: a norm that starts the stream inside the first block, RWKV)."""
        return blocks[0], False

    def pad_sensitive(self, blocks: nn.ModuleList) -> bool:
        """Whether a passage's states depend on the padding of its batch: a block holding a
        sparse-attention indexer (a module named `*Indexer`: DeepSeek-V3.2, GLM-MoE-DSA,
        A.X-K2, dots3) picks its top-k keys among every position, padded ones included, so
        such a model is measured one passage per batch."""
        return any(_named_like(block, ("Indexer",)) for block in blocks)

    def width(self, model: nn.Module) -> int | None:
        """The residual stream's width d: the text config's hidden size (None: unknown)."""
        return config_int(text_config(model), WIDTH_FIELDS)

    def block_input(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
        """The residual stream entering a block (its first argument or `hidden_states=`)."""
        if args and isinstance(args[0], torch.Tensor):
            return args[0]
        for name in ("hidden_states", "hidden_state", "x", "inputs_embeds"):
            if isinstance(kwargs.get(name), torch.Tensor):
                return kwargs[name]
        raise TypeError("the block was called without a hidden-states tensor")

    def block_output(self, output: Any) -> torch.Tensor:
        """The residual stream leaving a block (the tensor, or the first item of a tuple)."""
        return output[0] if isinstance(output, tuple | list) else output

    def replace_output(self, output: Any, hidden: torch.Tensor) -> Any:
        """`output` with its residual stream replaced by `hidden` (a block skipped by a lab)."""
        if isinstance(output, tuple):
            return (hidden, *output[1:])
        if isinstance(output, list):
            return [hidden, *output[1:]]
        return hidden

    # -- how the base is called ------------------------------------------------------------

    def forward_kwargs(self, base: nn.Module) -> frozenset[str]:
        """Which of `FORWARD_ARGUMENTS` the base model's forward names as parameters."""
        try:
            params = inspect.signature(base.forward).parameters
        except (TypeError, ValueError):
            return frozenset(FORWARD_ARGUMENTS)
        return frozenset(name for name in FORWARD_ARGUMENTS if name in params)

    def adds_bos(self, config: Any) -> bool:
        """Whether the family's tokenizers put a BOS in front of a text (Llama, Gemma, OPT: yes;
        GPT-2, GPT-NeoX, Falcon, Mamba: no), for a tokenizer built in code (a tiny or random
        model of the family). A named model's own tokenizer always decides for itself.

        Generic rule: the config names a BOS token that is not also its EOS token (GPT-2 and
        Falcon configs give one id for both, which their tokenizers only append).
        """
        if self.bos_convention is not None:
            return self.bos_convention
        bos, eos = getattr(config, "bos_token_id", None), getattr(config, "eos_token_id", None)
        eos_ids = eos if isinstance(eos, list | tuple) else [eos]
        return isinstance(bos, int) and bos not in eos_ids

    # -- the interventions' norms and the diagnostics' attention ------------------------------

    def post_norms(self, model: nn.Module) -> list[nn.Module]:
        """Each block's norms of the attention and feed-forward outputs (Gemma-2/3 style).

        A block counts only when it has the feed-forward one: Llama, Qwen and Mistral have a
        `post_attention_layernorm` too, but there it is the *pre*-MLP norm.
        """
        attn_name, mlp_name = self.post_norm_names
        found: list[nn.Module] = []
        for module in model.modules():
            mlp_norm = getattr(module, mlp_name, None)
            if isinstance(mlp_norm, nn.Module):
                attn_norm = getattr(module, attn_name, None)
                if isinstance(attn_norm, nn.Module):
                    found.append(attn_norm)
                found.append(mlp_norm)
        return found

    def qk_norms(self, model: nn.Module) -> list[nn.Module]:
        """The query and key norms of every attention module that has both."""
        return pairs_named(model, self.qk_norm_names)

    def attention_blocks(self, model: nn.Module, blocks: nn.ModuleList) -> list[int]:
        """0-based indices of the blocks whose attention probabilities `output_attentions`
        returns, in order: the blocks holding a module of the class transformers records as
        `attentions` (a hybrid's SSM blocks have none); for a model that does not say, the
        blocks holding a module named for attention that is not a recurrence (RWKV's
        time-mixing "attention" returns no probabilities)."""
        recorded = _recorded_classes(model, "attentions") or _recorded_classes(
            self.base(model), "attentions"
        )
        if not recorded:  # an older model: its blocks named for (softmax) attention
            return [i for i, block in enumerate(blocks) if _has_softmax_attention(block)]
        return [
            i
            for i, block in enumerate(blocks)
            if any(isinstance(sub, recorded) for sub in block.modules())
        ]


def _named_like(block: nn.Module, parts: tuple[str, ...]) -> bool:
    return any(part in type(sub).__name__ for sub in block.modules() for part in parts)


def _has_softmax_attention(block: nn.Module) -> bool:
    for sub in block.modules():
        name = type(sub).__name__
        if ("Attention" in name or "Attn" in name) and not any(p in name for p in RECURRENT_NAMES):
            return True
    return False


def _is_recurrent(block: nn.Module) -> bool:
    for sub in block.modules():
        if isinstance(sub, nn.Conv1d) and max(sub.kernel_size) > 1:
            return True
    return _named_like(block, RECURRENT_NAMES)


def pairs_named(model: nn.Module, names: tuple[str, str]) -> list[nn.Module]:
    """Both modules of every module that has the two children `names`, in module order."""
    found: list[nn.Module] = []
    for module in model.modules():
        first, second = (getattr(module, name, None) for name in names)
        if isinstance(first, nn.Module) and isinstance(second, nn.Module):
            found.extend([first, second])
    return found


# ---------------------------------------------------------------------------------------------
# Families whose BOS convention the config does not show.
#
# `Adapter.adds_bos` reads a family's convention from its config (a BOS id that is not also its
# EOS id); for tiny and random models whose tokenizer deffcore builds in code. Two well-known
# families break that rule:
#
#     GPT-NeoX (Pythia)   the config names BOS 0 and EOS 2, but its tokenizer adds no BOS
#     OPT                 the config gives one id (2, `</s>`) for both, and its tokenizer puts
#                         `</s>` in front of every text


class NoBos(Adapter):
    types = ("gpt_neox",)
    bos_convention = False


class LeadingEos(Adapter):
    types = ("opt",)
    bos_convention = True


# ---------------------------------------------------------------------------------------------
# Families whose norms have other names than the generic rule's.
#
# The Table S6 interventions replace a block's post-sub-layer norms and its attention's query/key
# norms by identity (`deffcore.inputs.interventions`). The generic rule knows Gemma's names
# (`post_attention_layernorm` + `post_feedforward_layernorm`; `q_norm` + `k_norm`); these
# families normalise the same places under other names (read from their transformers modeling
# code: each norm is applied to the sub-layer's output before it is added to the stream, or to
# the queries and keys before attention):
#
#     GLM-4, Kolibri-1     post_self_attn_layernorm + post_mlp_layernorm
#     AFMoE                post_attention_layernorm + post_mlp_layernorm
#     Hunyuan (dense, MoE) query_layernorm + key_layernorm
#     Phi, Persimmon, StableLM, LFM2   q_layernorm + k_layernorm (Phi, Persimmon, StableLM:
#                          when the config enables them; Qwen4-exp too, `HyperConnections`)
#
# and LFM2/LFM3 apply their final norm under the name `embedding_norm` (after the last block).


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


# ---------------------------------------------------------------------------------------------
# Mamba and RWKV: SSM / RNN decoders whose h_0 or `output_hidden_states` differ.
#
# Their blocks are found, pooled and padded by the generic rule (each block adds its update to
# the residual stream; a convolution or recurrence inside marks it recurrent, so extraction pads
# on the right only). Two things differ from transformers' usual decoder:
#
# - `output_hidden_states` of MambaModel, FalconMambaModel, Mamba2Model and RwkvModel has no
#   embedding entry: it is (h_1, ..., h_L, final-normed h_L), not (h_0, ..., h_{L-1}, normed).
#   `hidden_states_offset = 1` says so to whoever compares with it (the support table's check).
# - RWKV normalises the embeddings inside its first block (`blocks[0].pre_ln`, a LayerNorm
#   applied before anything else, `layer_id == 0`), so the residual stream that every block adds
#   to starts *after* that norm: h_0 is the output of `pre_ln`, not the input of block 1.


class MambaStyle(Adapter):
    types = ("mamba", "falcon_mamba", "mamba2")
    hidden_states_offset = 1


class Rwkv(Adapter):
    types = ("rwkv",)
    hidden_states_offset = 1

    def h0_site(self, blocks: nn.ModuleList) -> tuple[nn.Module, bool]:
        pre_ln = getattr(blocks[0], "pre_ln", None)
        return (pre_ln, True) if isinstance(pre_ln, nn.Module) else super().h0_site(blocks)


# ---------------------------------------------------------------------------------------------
# Families whose residual stream is several streams side by side.
#
# Hyper-connections keep n copies of the residual stream and mix them at every block. What
# accumulates across depth is all n of them, so that is the state deffcore pools, d = n x
# hidden_size:
#
#     Qwen4-exp (`hc_count`)          the streams concatenated, (B, T, n x hidden_size)
#     DeepSeek-V4, HY-V4 (`hc_mult`)  the streams stacked, (B, T, n, hidden_size): flattened here
#                                     to (B, T, n x hidden_size), stream by stream
#
# After the last block the streams are merged into one before the final norm, so no norm takes
# h_L as its input: `final_norm` is None (h_L is the last block's output, all n streams).


class HyperConnections(Adapter):
    types = ("qwen4_exp", "qwen4_exp_text")
    qk_norm_names = ("q_layernorm", "k_layernorm")
    streams_field = "hc_count"

    def width(self, model: nn.Module) -> int | None:
        hidden = super().width(model)
        streams = config_int(text_config(model), (self.streams_field,))
        return None if hidden is None else hidden * (streams or 1)


class StackedHyperConnections(HyperConnections):
    types = ("deepseek_v4", "hy_v4")
    qk_norm_names = Adapter.qk_norm_names
    streams_field = "hc_mult"

    def final_norm(self, base: nn.Module, blocks: nn.ModuleList) -> nn.Module | None:
        return None  # it normalises the merged stream, not h_L (section comment)

    def block_input(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
        return _flat(super().block_input(args, kwargs))

    def block_output(self, output: Any) -> torch.Tensor:
        return _flat(super().block_output(output))


def _flat(hidden: torch.Tensor) -> torch.Tensor:
    """(B, T, n, d) -> (B, T, n x d); a 3-d tensor as it is."""
    return hidden.flatten(2) if hidden.dim() == 4 else hidden


# ---------------------------------------------------------------------------------------------
# The registry: `adapter_for("mamba")` is the Mamba adapter, `adapter_for("llama")` the generic
# rule.

_GENERIC = Adapter()
_FAMILIES: tuple[Adapter, ...] = (
    NoBos(), LeadingEos(), GlmSandwich(), AfmoeSandwich(), HunyuanQK(), LayernormQK(), Lfm(),
    MambaStyle(), Rwkv(), HyperConnections(), StackedHyperConnections(),
)  # fmt: skip
#: model type -> its family adapter (every other type uses the generic rule)
ADAPTERS: dict[str, Adapter] = {kind: family for family in _FAMILIES for kind in family.types}


def adapter_for(model_type: str) -> Adapter:
    """The adapter of `model_type` (a config's `model_type`): its family's, else the generic."""
    return ADAPTERS.get(model_type, _GENERIC)


def model_type(model: nn.Module) -> str:
    """The model type of the text decoder (`config.model_type`), else the class name."""
    config = text_config(model)
    found = getattr(config, "model_type", None) if config is not None else None
    return str(found) if found else type(model).__name__


def adapter_of(model: nn.Module) -> Adapter:
    """The adapter of `model`'s type (`adapter_for`)."""

    return adapter_for(model_type(model))


@dataclass(frozen=True)
class Architecture:
    """Where one model's residual stream is (`architecture_of`).

    base:           the module `forward` runs (no unembedding)
    blocks:         the L blocks; h_0 is the input of blocks[0], h_l the output of blocks[l-1]
    final_norm:     the norm after the last block (h_L is its input), None when there is none
    forward_takes:  which of attention_mask, position_ids, use_cache `base.forward` names
                    (read from its signature once, not per batch)
    """

    model: nn.Module
    model_type: str
    adapter: Adapter
    base: nn.Module
    blocks: nn.ModuleList
    final_norm: nn.Module | None
    forward_takes: frozenset[str]

    @property
    def layers(self) -> int:
        return len(self.blocks)

    @property
    def family(self) -> str:
        """The kind of decoder in words (attention, MoE, hybrid, recurrent)."""
        return self.adapter.family(self.model, self.blocks)

    @property
    def recurrent(self) -> bool:
        """Some block carries state along the sequence (SSM, RNN, causal convolution): padding
        in front of a passage would reach its states, so it is padded on the right only."""
        return any(self.adapter.recurrent_blocks(self.blocks))

    @property
    def pad_sensitive(self) -> bool:
        """A passage's states depend on its batch's padding: extraction runs one per batch."""
        return self.adapter.pad_sensitive(self.blocks)

    @property
    def width(self) -> int:
        """d, the residual stream's width (the config's hidden size, else the embedding's)."""
        found = self.adapter.width(self.model)
        if found is None:
            embed = (
                self.model.get_input_embeddings()
                if hasattr(self.model, "get_input_embeddings")
                else None
            )
            found = int(getattr(embed, "embedding_dim", 0)) or None
        if found is None:
            raise UnsupportedArchitectureError(
                f"Cannot tell the residual-stream width of {type(self.model).__name__}: its config "
                "has no hidden size and it has no input embedding."
            )
        return found

    def h0_site(self) -> tuple[nn.Module, bool]:
        """(module, after): h_0 is the input (after False) or the output (True) of `module`."""
        return self.adapter.h0_site(self.blocks)

    def block_input(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
        return self.adapter.block_input(args, kwargs)

    def block_output(self, output: Any) -> torch.Tensor:
        return self.adapter.block_output(output)

    def replace_output(self, output: Any, hidden: torch.Tensor) -> Any:
        return self.adapter.replace_output(output, hidden)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        **extra: Any,
    ) -> Any:
        """One forward pass of the base model with the arguments its forward takes.

        input_ids, attention_mask, position_ids (B, T); `extra` (e.g. output_attentions) is
        passed as given. A base whose forward has no `position_ids` counts positions itself,
        which is the same for right padding (`recurrent` models are only ever right-padded).
        """
        kwargs: dict[str, Any] = {"input_ids": input_ids, **extra}
        given = {"attention_mask": attention_mask, "position_ids": position_ids, "use_cache": False}
        kwargs.update({name: value for name, value in given.items() if name in self.forward_takes})
        return self.base(**kwargs)

    def post_norms(self) -> list[nn.Module]:
        return self.adapter.post_norms(self.model)

    def qk_norms(self) -> list[nn.Module]:
        return self.adapter.qk_norms(self.model)

    def attention_blocks(self) -> list[int]:
        """0-based indices of the blocks whose attention `output_attentions` returns, in order."""
        return self.adapter.attention_blocks(self.model, self.blocks)


def architecture_of(model: nn.Module) -> Architecture:
    """The `Architecture` of `model`; UnsupportedArchitectureError (one sentence) when no rule
    finds its blocks, or when `model` is not a module at all (a name, None, a tokenizer)."""
    if not callable(getattr(model, "named_modules", None)):
        raise UnsupportedArchitectureError(
            f"A model here is a loaded torch module (e.g. dc.load_model(name).model), not a "
            f"{type(model).__name__}."
        )
    kind = model_type(model)
    adapter = adapter_for(kind)
    base = adapter.base(model)
    blocks = adapter.blocks(base, model)
    if blocks is None:
        raise UnsupportedArchitectureError(
            f"Cannot find the decoder blocks of {type(model).__name__} (model type {kind!r}): "
            "no module list of its blocks under 'layers', 'h', 'blocks' or the classes "
            "transformers records as hidden states."
        )
    return Architecture(
        model=model,
        model_type=kind,
        adapter=adapter,
        base=base,
        blocks=blocks,
        final_norm=adapter.final_norm(base, blocks),
        forward_takes=adapter_of(base).forward_kwargs(base),
    )


def base_model(model: nn.Module) -> nn.Module:
    """The decoder stack without the unembedding (`architecture_of(model).base`)."""
    return architecture_of(model).base


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The L decoder blocks, in order (`architecture_of(model).blocks`)."""
    return architecture_of(model).blocks


def final_norm(model: nn.Module) -> nn.Module | None:
    """The norm applied after the last block, if any (`architecture_of(model).final_norm`)."""
    return architecture_of(model).final_norm
