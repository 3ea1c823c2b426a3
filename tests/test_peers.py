"""Beside the peers: the residual stream TransformerLens and nnsight hand out, pooled by
`measure_states`, is the one deffcore's extraction measures (SPEC section 1: h_0 .. h_L, h_L
before the final norm), on the same tiny weights and passages.

    TransformerLens 4.x  TransformerBridge over the loaded transformers model; its
                         ActivationCache (blocks.0.hook_resid_pre, blocks.{l}.hook_resid_post)
                         goes to `measure_states` as it is
    nnsight 0.8          NNsight(model).trace: the first block's input and every block's output

Pooled states equal to float32 rounding and D_eff to 1e-6 (the batch is laid out as the user
lays it, not as extraction does). The default pooling is also recomputed from the cache in
numpy, independently of deffcore's pooler.
"""

from __future__ import annotations

import nnsight
import numpy as np
import pytest
import torch
from transformer_lens.model_bridge import TransformerBridge

import deffcore as dc
from deffcore.core.errors import InvalidArgumentError, InvalidStatesError

MAX_TOKENS = 32
N = 16
#: The transformers path to the decoder blocks, per tiny architecture (nnsight walks it).
BLOCKS = {"llama": "model.layers", "gpt2": "transformer.h"}


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return dc.load_passages("bbc-news", N, seed=0)


def _setup(arch: str, texts: list[str]):
    lm = dc.load_model(f"tiny-{arch}")
    model, tokenizer = lm.model, lm.tokenizer
    mine = dc.measure(model, tokenizer, texts, max_tokens=MAX_TOKENS)
    batch = tokenizer(
        texts, return_tensors="pt", padding=True, truncation=True, max_length=MAX_TOKENS
    )
    return model, tokenizer, batch, mine


def _same(theirs: dc.Measurement, mine: dc.Measurement) -> None:
    assert theirs.layers == mine.layers and theirs.n == mine.n
    for pooling, ours in mine.pooled.pooled.items():
        np.testing.assert_allclose(theirs.pooled.pooled[pooling], ours, rtol=1e-5, atol=1e-5)
    assert abs(theirs.summary().deff - mine.summary().deff) < 1e-6
    assert abs(theirs.summary("no_pos0").deff - mine.summary("no_pos0").deff) < 1e-6


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_transformer_lens_cache_gives_measures_states(arch, texts):
    model, tokenizer, batch, mine = _setup(arch, texts)
    # the byte tokenizer is built in code: TransformerLens would reload it by name otherwise
    tokenizer.init_kwargs.setdefault("name_or_path", f"tiny-{arch}")
    tokenizer.init_kwargs["add_bos_token"] = True
    bridge = TransformerBridge.boot_transformers(
        f"tiny-{arch}", hf_model=model, tokenizer=tokenizer
    )
    with torch.no_grad():
        _, cache = bridge.run_with_cache(batch["input_ids"], attention_mask=batch["attention_mask"])
    theirs = dc.measure_states(cache, batch["attention_mask"])  # the ActivationCache itself
    _same(theirs, mine)

    # default pooling recomputed in numpy from the hooks (float64 masked means)
    mask = batch["attention_mask"].numpy().astype(bool)
    L = mine.layers
    names = ["blocks.0.hook_resid_pre", *(f"blocks.{l}.hook_resid_post" for l in range(L))]
    for layer, name in enumerate(names):
        h = cache[name].detach().double().numpy()
        means = (h * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
        np.testing.assert_allclose(
            theirs.pooled.pooled["default"][layer], means, rtol=1e-5, atol=1e-5
        )


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_nnsight_trace_gives_measures_states(arch, texts):
    model, _, batch, mine = _setup(arch, texts)
    traced = nnsight.NNsight(model)
    blocks = traced
    for part in BLOCKS[arch].split("."):
        blocks = getattr(blocks, part)
    with torch.no_grad(), traced.trace(batch["input_ids"], attention_mask=batch["attention_mask"]):
        h0 = blocks[0].input.save()
        hs = nnsight.save([block.output for block in blocks])
    hs = [h[0] if isinstance(h, tuple) else h for h in hs]
    _same(dc.measure_states([h0, *hs], batch["attention_mask"]), mine)


def test_a_cache_without_the_residual_hooks_is_one_sentence():
    class Cache:  # keys() and [] like an ActivationCache, no Mapping subclass
        def keys(self):
            return ["blocks.0.hook_attn_out"]

        def __getitem__(self, name):
            raise KeyError(name)

    with pytest.raises(InvalidStatesError, match="hook_resid_pre"):
        dc.measure_states(Cache())


def test_measure_takes_a_transformer_lens_bridge_as_the_model_it_wraps(texts):
    model, tokenizer, _, mine = _setup("llama", texts)
    tokenizer.init_kwargs.setdefault("name_or_path", "tiny-llama")
    tokenizer.init_kwargs["add_bos_token"] = True
    bridge = TransformerBridge.boot_transformers("tiny-llama", hf_model=model, tokenizer=tokenizer)
    theirs = dc.measure(bridge, dataset=texts, max_tokens=MAX_TOKENS)  # its tokenizer
    # the same extraction; float32 rounding apart, as booting switched attention to eager
    _same(theirs, mine)
    bridge.compatibility_mode = True  # what enable_compatibility_mode() sets after folding
    with pytest.raises(InvalidArgumentError, match="compatibility mode"):
        dc.measure(bridge, dataset=texts, max_tokens=MAX_TOKENS)
