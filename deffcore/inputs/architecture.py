"""One interface to a decoder's residual stream, whatever its family (stage: inputs).

    arch = architecture_of(model)      # any transformers causal LM or base model
    arch.base, arch.blocks, arch.final_norm, arch.layers
    arch.forward(input_ids, attention_mask, position_ids)   # the base model, no unembedding
    arch.block_input(args, kwargs), arch.block_output(output)   # what the hooks pool
    arch.post_norms(), arch.qk_norms()                      # the interventions' norms
    arch.attention_blocks()                                 # blocks the sink diagnostics read
    base_model(model), decoder_layers(model), final_norm(model)   # the same, one at a time

The answers come from `deffcore.inputs.adapters`: the generic rule (`adapters.generic.Adapter`) and
the few family adapters that override it where it fails. Extraction, the labs' hooks, the
interventions and the diagnostics ask here, so a named model (hub id, folder, .gguf), a tiny
test model and a notebook's model all go through the same adapters. Nothing is cached: the
lookup walks the module tree once (milliseconds even for a 32-block model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from deffcore.core.errors import UnsupportedArchitectureError
from deffcore.inputs.adapters import adapter_for
from deffcore.inputs.adapters.generic import Adapter, text_config


def model_type(model: nn.Module) -> str:
    """The model type of the text decoder (`config.model_type`), else the class name."""
    config = text_config(model)
    found = getattr(config, "model_type", None) if config is not None else None
    return str(found) if found else type(model).__name__


def adapter_of(model: nn.Module) -> Adapter:
    """The adapter of `model`'s type (`deffcore.inputs.adapters.adapter_for`)."""
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
    finds its blocks."""
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
