"""Mamba and RWKV: SSM / RNN decoders whose h_0 or `output_hidden_states` differ (stage:
inputs).

Their blocks are found, pooled and padded by the generic rule (each block adds its update to
the residual stream; a convolution or recurrence inside marks it recurrent, so extraction pads
on the right only). Two things differ from transformers' usual decoder:

- `output_hidden_states` of MambaModel, FalconMambaModel, Mamba2Model and RwkvModel has no
  embedding entry: it is (h_1, ..., h_L, final-normed h_L), not (h_0, ..., h_{L-1}, normed).
  `hidden_states_offset = 1` says so to whoever compares with it (the support table's check).
- RWKV normalises the embeddings inside its first block (`blocks[0].pre_ln`, a LayerNorm
  applied before anything else, `layer_id == 0`), so the residual stream that every block adds
  to starts *after* that norm: h_0 is the output of `pre_ln`, not the input of block 1.
"""

from __future__ import annotations

from torch import nn

from deffcore.inputs.adapters.generic import Adapter


class MambaStyle(Adapter):
    types = ("mamba", "falcon_mamba", "mamba2")
    hidden_states_offset = 1


class Rwkv(Adapter):
    types = ("rwkv",)
    hidden_states_offset = 1

    def h0_site(self, blocks: nn.ModuleList) -> tuple[nn.Module, bool]:
        pre_ln = getattr(blocks[0], "pre_ln", None)
        return (pre_ln, True) if isinstance(pre_ln, nn.Module) else super().h0_site(blocks)


RECURRENT: tuple[Adapter, ...] = (MambaStyle(), Rwkv())
