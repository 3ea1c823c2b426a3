"""Where a model keeps its parts: the decoder stack, its blocks in order, the final norm."""

from __future__ import annotations

from torch import nn

from deffcore.core.errors import UnsupportedArchitectureError


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
