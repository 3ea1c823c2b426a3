"""The architecture adapters (deffcore.inputs.architecture): each family
adapter does what its docstring says, checked against the model's own computation, and a named model
(a saved folder) goes through the same adapters as a model in memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import deffcore as dc
from deffcore.core.errors import UnsupportedArchitectureError
from deffcore.extraction.forward import extract_pooled
from deffcore.inputs.architecture import architecture_of
from deffcore.inputs.interventions import supported_interventions
from deffcore.inputs.texts import tokenize
from deffcore.lenses.support import TEXTS, build_small
from deffcore.runs.external import wrap_loaded

MAX_TOKENS = 48


def _measure(model_type: str, **options):
    model, tokenizer = build_small(model_type)
    return (
        model,
        tokenizer,
        extract_pooled(
            wrap_loaded(model, tokenizer, model_type), list(TEXTS), max_tokens=MAX_TOKENS, **options
        ),
    )


def test_rwkv_h0_is_the_stream_after_its_first_blocks_norm():
    """RWKV normalises the embeddings inside block 1 (`pre_ln`): h_0 is that norm's output."""
    model, tokenizer, pooled = _measure("rwkv")
    ids, _ = tokenize(tokenizer, list(TEXTS), MAX_TOKENS)
    block = model.rwkv.blocks[0]
    with torch.inference_mode():
        expected = [block.pre_ln(model.rwkv.embeddings(torch.tensor([s])))[0].mean(0) for s in ids]
    np.testing.assert_allclose(
        pooled.pooled["default"][0], torch.stack(expected).numpy(), rtol=1e-5, atol=1e-6
    )


def test_mamba_blocks_norm_and_padding():
    model, tokenizer = build_small("mamba")
    arch = architecture_of(model)
    assert arch.blocks is model.backbone.layers and arch.final_norm is model.backbone.norm_f
    assert arch.recurrent and arch.attention_blocks() == []
    with pytest.raises(UnsupportedArchitectureError, match="right padding"):
        extract_pooled(
            wrap_loaded(model, tokenizer, "m"), list(TEXTS), max_tokens=8, padding_side="left"
        )


def test_an_attention_decoder_takes_either_padding_side():
    _, _, right = _measure("llama")
    _, _, left = _measure("llama", padding_side="left")
    np.testing.assert_allclose(
        left.pooled["default"], right.pooled["default"], rtol=1e-5, atol=1e-6
    )


def test_a_sparse_attention_indexer_runs_one_passage_per_batch():
    """GLM-MoE-DSA's indexer picks keys among padded positions too: batched with padding its
    states would change, so extraction never pads it."""
    model, tokenizer, pooled = _measure("glm_moe_dsa")
    assert pooled.meta["max_batch_size"] == 1
    ids, _ = tokenize(tokenizer, list(TEXTS), MAX_TOKENS)
    with torch.inference_mode():
        alone = [
            model(input_ids=torch.tensor([s]), output_hidden_states=True)
            .hidden_states[1][0]
            .mean(0)
            for s in ids
        ]
    np.testing.assert_allclose(
        pooled.pooled["default"][1], torch.stack(alone).numpy(), rtol=1e-5, atol=1e-6
    )


def test_stacked_hyper_connection_streams_are_pooled_side_by_side():
    model, _, pooled = _measure("deepseek_v4")
    assert pooled.d_model == 4 * model.config.hidden_size


def test_a_looped_model_is_refused_not_measured_wrong():
    model, tokenizer = build_small("dory")
    with pytest.raises(UnsupportedArchitectureError, match="more than once per forward"):
        dc.measure(model, tokenizer, list(TEXTS), max_tokens=MAX_TOKENS)


def test_a_hybrids_sink_scores_cover_its_attention_blocks_only():
    from deffcore.lenses.diagnostics import bos_diagnostics

    model, tokenizer = build_small("jamba")
    assert architecture_of(model).attention_blocks() == [1]
    diag = bos_diagnostics(wrap_loaded(model, tokenizer, "j"), list(TEXTS), max_tokens=MAX_TOKENS)
    assert np.isnan(diag.sink_scores[0]).all() and np.isfinite(diag.sink_scores[1]).all()
    assert np.isnan(diag.sink_fraction[0]) and 0 <= diag.sink_fraction[1] <= 1


@pytest.mark.parametrize(
    ("model_type", "supported"),
    [
        ("llama", ["none"]),
        ("gemma3_text", ["none", "no_post", "no_qk", "no_post_no_qk"]),
        ("glm4", ["none", "no_post"]),  # post_self_attn_layernorm + post_mlp_layernorm
        ("afmoe", ["none", "no_post", "no_qk", "no_post_no_qk"]),
        ("hunyuan_v1_dense", ["none", "no_qk"]),  # query_layernorm + key_layernorm
    ],
)
def test_the_interventions_find_each_familys_norms(model_type, supported):
    model, _ = build_small(model_type)
    assert supported_interventions(model) == supported


def test_a_glm4_intervention_changes_its_states():
    model, tokenizer = build_small("glm4")
    lm = wrap_loaded(model, tokenizer, "g")
    plain = extract_pooled(lm, list(TEXTS), max_tokens=MAX_TOKENS)
    with dc.norm_intervention(model, "no_post"):
        removed = extract_pooled(lm, list(TEXTS), max_tokens=MAX_TOKENS)
    assert not np.allclose(plain.pooled["default"][1:], removed.pooled["default"][1:])
    again = extract_pooled(lm, list(TEXTS), max_tokens=MAX_TOKENS)
    np.testing.assert_array_equal(again.pooled["default"], plain.pooled["default"])


@pytest.mark.parametrize(
    ("model_type", "bos"),
    [("llama", True), ("gpt2", False), ("gpt_neox", False), ("opt", True), ("mamba", False)],
)
def test_the_bos_convention_of_each_family(model_type, bos):
    from deffcore.inputs.architecture import adapter_for
    from deffcore.inputs.small_configs import default_special_ids

    assert adapter_for(model_type).adds_bos(default_special_ids(model_type)) is bos


@pytest.mark.parametrize("model_type", ["mamba", "opt"])
def test_a_saved_folder_of_the_type_loads_through_the_same_adapters(
    model_type, tmp_path, tiny_dataset
):
    """A named model (a local folder, as from save_pretrained) of a non-Llama type measures
    like the same model in memory."""
    model, tokenizer = build_small(model_type)
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    named = dc.measure(str(tmp_path / "m"), dataset=tiny_dataset, n=8, max_tokens=32)
    here = dc.measure(model, tokenizer, tiny_dataset, n=8, max_tokens=32)
    np.testing.assert_allclose(
        named.pooled.pooled["default"], here.pooled.pooled["default"], rtol=1e-5, atol=1e-6
    )
    assert named.layers == architecture_of(model).layers
