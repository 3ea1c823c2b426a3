"""Families whose residual stream is several streams side by side (stage: inputs).

Hyper-connections keep n copies of the residual stream and mix them at every block. What
accumulates across depth is all n of them, so that is the state deffcore pools, d = n x
hidden_size:

    Qwen4-exp (`hc_count`)          the streams concatenated, (B, T, n x hidden_size)
    DeepSeek-V4, HY-V4 (`hc_mult`)  the streams stacked, (B, T, n, hidden_size): flattened here
                                    to (B, T, n x hidden_size), stream by stream

After the last block the streams are merged into one before the final norm, so no norm takes
h_L as its input: `final_norm` is None (h_L is the last block's output, all n streams).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from deffcore.inputs.adapters.generic import Adapter, config_int, text_config


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
        return None  # it normalises the merged stream, not h_L (module docstring)

    def block_input(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor:
        return _flat(super().block_input(args, kwargs))

    def block_output(self, output: Any) -> torch.Tensor:
        return _flat(super().block_output(output))


def _flat(hidden: torch.Tensor) -> torch.Tensor:
    """(B, T, n, d) -> (B, T, n x d); a 3-d tensor as it is."""
    return hidden.flatten(2) if hidden.dim() == 4 else hidden


STREAMS: tuple[Adapter, ...] = (HyperConnections(), StackedHyperConnections())
