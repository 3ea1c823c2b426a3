"""The generic adapter's rules on small hand-built modules (deffcore.inputs.architecture):
the layer count from a config, which block list is the model's, a block's output rebuilt,
which blocks are recurrent and which hold attention. No model is built: these run in
milliseconds, beside tests/test_architecture.py's checks against real families."""

from __future__ import annotations

from types import SimpleNamespace
from typing import ClassVar

import pytest
import torch
from torch import nn

from deffcore.inputs.architecture import LAYER_COUNT_FIELDS, Adapter, config_int


def test_a_bos_shared_with_the_eos_is_not_put_in_front():
    """GPT-2's and Falcon's configs give one id for BOS and EOS: their tokenizers only append
    it. A BOS of its own is put in front; an EOS list is looked through."""
    adds = Adapter().adds_bos
    assert not adds(SimpleNamespace(bos_token_id=0, eos_token_id=0))
    assert adds(SimpleNamespace(bos_token_id=1, eos_token_id=2))
    assert not adds(SimpleNamespace(bos_token_id=2, eos_token_id=[1, 2]))
    assert not adds(SimpleNamespace(bos_token_id=None, eos_token_id=2))


def test_a_zero_layer_count_is_no_count_and_the_next_field_is_asked():
    config = SimpleNamespace(num_hidden_layers=0, n_layer=4)
    assert config_int(config, LAYER_COUNT_FIELDS) == 4
    assert config_int(SimpleNamespace(num_hidden_layers=0), LAYER_COUNT_FIELDS) is None
    assert config_int(SimpleNamespace(num_hidden_layers=True, n_layer=2), LAYER_COUNT_FIELDS) == 2


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(2, 2)


class _Inner(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(_Block() for _ in range(n))


class _Model(nn.Module):
    """Two block lists of the configured length: the model's own (depth 1) and one nested in
    a submodule (depth 2), e.g. a vision tower's; a third list of another length."""

    def __init__(self, n: int = 3) -> None:
        super().__init__()
        self.config = SimpleNamespace(num_hidden_layers=n)
        self.tower = _Inner(n)
        self.layers = nn.ModuleList(_Block() for _ in range(n))
        self.heads = nn.ModuleList(_Block() for _ in range(n + 2))


def test_of_two_lists_of_the_configured_length_the_shallowest_is_the_blocks():
    model = _Model(3)
    assert Adapter().blocks(model, model) is model.layers


def test_a_list_output_keeps_its_tail_when_the_stream_is_replaced():
    adapter, hidden, extra = Adapter(), torch.zeros(1, 2), torch.ones(1)
    out = adapter.replace_output([torch.ones(1, 2), extra], hidden)
    assert isinstance(out, list) and out[0] is hidden and out[1] is extra
    tup = adapter.replace_output((torch.ones(1, 2), extra), hidden)
    assert isinstance(tup, tuple) and tup[0] is hidden and tup[1] is extra
    assert adapter.replace_output(torch.ones(1, 2), hidden) is hidden


class _ConvBlock(nn.Module):
    def __init__(self, kernel: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 2, kernel_size=kernel)


def test_only_a_convolution_over_several_positions_makes_a_block_recurrent():
    """A 1-wide Conv1d mixes features, not positions (GPT-2's Conv1D projections are such):
    not a recurrence; a wider one is (Mamba's short convolution)."""
    blocks = nn.ModuleList([_ConvBlock(1), _ConvBlock(4)])
    assert Adapter().recurrent_blocks(blocks) == [False, True]


class _Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q = nn.Linear(2, 2)


class _AttnBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = _Attention()


class _Hybrid(nn.Module):
    """A hybrid whose transformers record says which class returns attention probabilities."""

    _can_record_outputs: ClassVar[dict] = {"attentions": _Attention}

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([_AttnBlock(), _ConvBlock(4), _AttnBlock()])


def test_the_attention_blocks_are_those_holding_the_recorded_class():
    model = _Hybrid()
    assert Adapter().attention_blocks(model, model.layers) == [0, 2]


def test_what_is_not_a_module_is_one_sentence():
    """dc.architecture_of(5), dc.decoder_layers(None) or dc.final_norm("tiny-llama") raised an
    AttributeError ('named_modules') from deep inside."""
    import deffcore as dc
    from deffcore.core.errors import UnsupportedArchitectureError

    for look in (dc.architecture_of, dc.base_model, dc.decoder_layers, dc.final_norm):
        for thing in (5, None, "tiny-llama"):
            with pytest.raises(UnsupportedArchitectureError, match="loaded torch module"):
                look(thing)
