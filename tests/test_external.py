"""A model in memory and states computed elsewhere give the numbers `measure` gives.

Where the same code runs on the same float32 inputs the numbers are compared bit for bit
(`np.array_equal`, `==`): a loaded model goes through the very extraction a named one does,
and `measure_states` pools with the extraction's own pooler, so states produced by the same
forward pass (same batch layout) pool to the same bits. Where the user's forward pass is laid
out differently (all texts in one right-padded batch in their own order, instead of the
extraction's length-sorted batches) the states themselves differ by float32 rounding of the
differently shaped matmuls and attention softmaxes (~1e-7 relative): there a tolerance of
1e-5 on the pooled states and 1e-6 on D_eff is used, and it is far below any displayed digit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import deffcore as dc
from deffcore.core.constants import EXTRACTED_POOLINGS, METRICS, POOLINGS
from deffcore.core.errors import DeffError, InvalidStatesError, NonFiniteActivationsError
from deffcore.inputs.architecture import final_norm
from deffcore.inputs.model import load_model, tiny_config
from deffcore.inputs.texts import load_passages, tokenize


def _same_numbers(a, b) -> None:
    """Bit-identical pooled states, and so every summary under every pooling and metric."""
    for p in EXTRACTED_POOLINGS:
        assert np.array_equal(a.pooled.pooled[p], b.pooled.pooled[p]), p
    assert np.array_equal(a.pooled.pos0_norm_ratio, b.pooled.pos0_norm_ratio)
    for pooling in POOLINGS:
        for metric in METRICS:
            assert a.summary(pooling, metric) == b.summary(pooling, metric), (pooling, metric)


def _cache_entries(cache) -> list:
    return [p for p in cache.iterdir() if len(p.name) == 20] if cache.exists() else []


@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_loaded_model_gives_the_named_runs_numbers_bit_for_bit(tiny_model, tiny_dataset, arch):
    lm = tiny_model(arch)
    named = dc.measure(f"tiny-{arch}", dataset=tiny_dataset, n=12, max_tokens=48)
    texts = load_passages(tiny_dataset, 12, seed=0)  # the named run's passages, in its order
    loaded = dc.measure(lm.model, lm.tokenizer, texts, max_tokens=48)
    _same_numbers(named, loaded)
    assert loaded.spec.model == f"loaded:{type(lm.model).__name__}" and not loaded.cached


def test_a_from_config_model_built_here_matches_its_random_spec(tiny_passages):
    """A model the user builds with from_config is `random:tiny-qwen2:5` by construction."""
    import transformers

    torch.manual_seed(5)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config("qwen2"))
    tokenizer = load_model("tiny-qwen2").tokenizer
    mine = dc.measure(model, tokenizer, tiny_passages, max_tokens=40, batch_size=4)
    spec = dc.measure("random:tiny-qwen2:5", dataset=tiny_passages, max_tokens=40, batch_size=4)
    _same_numbers(mine, spec)
    assert spec.spec.model.startswith("loaded:random:tiny-qwen2:5@")  # cached by its identity


def test_uncached_unless_a_cache_id_names_it(tiny_model, tiny_passages, deff_cache_dir):
    lm = tiny_model("llama")
    first = dc.measure(lm.model, lm.tokenizer, tiny_passages, max_tokens=32)
    again = dc.measure(lm.model, lm.tokenizer, tiny_passages, max_tokens=32)
    assert not first.cached and not again.cached and _cache_entries(deff_cache_dir) == []
    named = dc.measure(lm.model, lm.tokenizer, tiny_passages, max_tokens=32, cache_id="tiny@1")
    assert not named.cached and len(_cache_entries(deff_cache_dir)) == 1
    hit = dc.measure(lm.model, lm.tokenizer, tiny_passages, max_tokens=32, cache_id="tiny@1")
    assert hit.cached and hit.spec == named.spec and named.spec.model == "loaded:tiny@1"
    _same_numbers(first, hit)
    off = dc.measure(
        lm.model, lm.tokenizer, tiny_passages, max_tokens=32, cache_id="tiny@1", use_cache=False
    )
    assert not off.cached


def test_the_key_covers_tokenizer_texts_options_and_weights(tiny_model, tiny_passages):
    """Everything that changes the numbers changes the key, under one cache_id."""
    lm, nobos = tiny_model("llama"), tiny_model("llama", bos=False)  # same weights
    base = dict(max_tokens=32, cache_id="same-id")
    key = dc.measure(lm.model, lm.tokenizer, tiny_passages, **base).spec.key()
    other_tokenizer = dc.measure(lm.model, nobos.tokenizer, tiny_passages, **base)
    other_texts = dc.measure(lm.model, lm.tokenizer, tiny_passages[::-1], **base)
    other_length = dc.measure(
        lm.model, lm.tokenizer, tiny_passages, max_tokens=24, cache_id="same-id"
    )
    other_bos = dc.measure(lm.model, lm.tokenizer, tiny_passages, bos="none", **base)
    private = load_model("tiny-llama")  # a private copy: the session's model stays as it is
    with torch.no_grad():
        for p in private.model.parameters():
            p.add_(1e-3)  # a "fine-tune": every weight moves
    other_weights = dc.measure(private.model, private.tokenizer, tiny_passages, **base)
    runs = [other_tokenizer, other_texts, other_length, other_bos, other_weights]
    keys = {key} | {m.spec.key() for m in runs}
    assert len(keys) == 6 and not any(m.cached for m in runs)


def test_eval_mode_for_the_run_and_the_users_mode_after(tiny_passages):
    private = load_model("tiny-llama")
    private.model.train()
    private.model.model.layers[1].eval()  # a mixed state must come back exactly
    before = {name: m.training for name, m in private.model.named_modules()}
    seen = []
    hook = private.model.model.layers[0].register_forward_hook(
        lambda mod, *_: seen.append(mod.training)
    )
    dc.measure(private.model, private.tokenizer, tiny_passages, max_tokens=32)
    hook.remove()
    assert seen and not any(seen)  # dropout off while measuring
    assert {name: m.training for name, m in private.model.named_modules()} == before


def test_random_null_of_a_loaded_model_is_the_random_spec(tiny_model, tiny_passages):
    lm = tiny_model("llama")
    m = dc.measure(lm.model, lm.tokenizer, tiny_passages, max_tokens=32, random_seeds=(1, 2))
    assert [r.spec.model for r in m.random_null] == [
        "random:loaded:LlamaForCausalLM:1",
        "random:loaded:LlamaForCausalLM:2",
    ]
    assert m.random_band()["seeds"] == ["1", "2"]
    by_spec = dc.measure("random:tiny-llama:1", dataset=tiny_passages, max_tokens=32)
    _same_numbers(m.random_null[0], by_spec)


def test_bad_arguments_get_one_sentence(tiny_model, tiny_passages):
    lm = tiny_model("llama")
    cases = [
        (lambda: dc.measure(lm.model, None, tiny_passages), "tokenizer"),
        (lambda: dc.measure(lm.model, lm.tokenizer, tiny_passages, n=3), "texts[:3]"),
        (lambda: dc.measure(lm.model, lm.tokenizer, "no such dataset"), "no such dataset"),
        (lambda: dc.measure(lm.model, lm.tokenizer, [1, 2, 3, 4]), "texts[0]"),
        (lambda: dc.measure(lm.model, lm.tokenizer, tiny_passages[:3]), "at least 4"),
        (lambda: dc.measure(lm.model, lm.tokenizer, tiny_passages, cache_id=""), "cache_id"),
        (lambda: dc.measure(lm.model, lm.tokenizer, tiny_passages, device="cpu"), "model.to"),
        (lambda: dc.measure("tiny-llama", lm.tokenizer, tiny_passages), "brings its own"),
        (lambda: dc.measure("tiny-llama", cache_id="x"), "cache_id"),
        (lambda: dc.measure(object(), lm.tokenizer, tiny_passages), "model name"),
        (lambda: dc.measure(lm.model, lm.tokenizer, tiny_passages, passages="windows"), "give n"),
    ]
    for call, words in cases:
        with pytest.raises(DeffError) as err:
            call()
        assert words in str(err.value), (words, str(err.value))
        assert "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------
# measure_states


def _forward_states(lm, ids: list[list[int]]):
    """h_0 .. h_L of a right-padded batch of `ids`, from output_hidden_states with the final
    norm's input as h_L (SPEC section 1), and the mask: what the README tells users to pass."""
    T = max(len(s) for s in ids)
    input_ids = torch.zeros((len(ids), T), dtype=torch.long)
    mask = torch.zeros((len(ids), T), dtype=torch.long)
    for b, s in enumerate(ids):
        input_ids[b, : len(s)] = torch.tensor(s)
        mask[b, : len(s)] = 1
    position_ids = (mask.cumsum(1) - 1).clamp_min(0)
    captured = {}
    hook = final_norm(lm.model).register_forward_pre_hook(
        lambda _m, args: captured.__setitem__("h_L", args[0])
    )
    try:
        with torch.inference_mode():
            out = lm.model(
                input_ids=input_ids,
                attention_mask=mask,
                position_ids=position_ids,
                output_hidden_states=True,
                use_cache=False,
            )
    finally:
        hook.remove()
    return [*out.hidden_states[:-1], captured["h_L"]], mask, out.hidden_states[-1]


def test_states_from_the_extractions_forward_pool_to_the_same_bits(tiny_model, tiny_passages):
    """One batch, laid out as the extraction lays it (longest first), then put back in the
    passages' order: the same forward, so measure_states must equal measure bit for bit."""
    lm = tiny_model("llama")
    ref = dc.measure(lm.model, lm.tokenizer, tiny_passages, max_tokens=48, batch_size=12)
    ids, _ = tokenize(lm.tokenizer, tiny_passages, 48)
    order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
    states, mask, _ = _forward_states(lm, [ids[i] for i in order])
    back = torch.tensor(np.argsort(order))
    m = dc.measure_states([h[back] for h in states], mask[back])
    _same_numbers(ref, m)
    assert m.n == 12 and m.layers == 4 and m.pooled.n_dropped_short == 0


def test_states_from_output_hidden_states_match_measure(tiny_model, tiny_arch, tiny_passages):
    """The natural notebook call (all texts in one batch, their own order) on every
    architecture: equal up to float32 rounding of a differently shaped forward pass."""
    lm = tiny_model(tiny_arch)
    ref = dc.measure(lm.model, lm.tokenizer, tiny_passages, max_tokens=48)
    ids, _ = tokenize(lm.tokenizer, tiny_passages, 48)
    states, mask, after_norm = _forward_states(lm, ids)
    m = dc.measure_states(states, mask)
    for p in EXTRACTED_POOLINGS:
        np.testing.assert_allclose(m.pooled.pooled[p], ref.pooled.pooled[p], rtol=1e-5, atol=1e-5)
    for pooling in POOLINGS:
        assert m.summary(pooling).deff == pytest.approx(ref.summary(pooling).deff, rel=1e-6)
    # the last output_hidden_states entry is after the final norm: passing it is another run
    wrong = dc.measure_states([*states[:-1], after_norm], mask)
    assert not np.allclose(wrong.pooled.pooled["default"][-1], m.pooled.pooled["default"][-1])


def test_every_container_of_states_gives_the_same_run(tiny_model, tiny_passages):
    lm = tiny_model("gpt2")
    ids, _ = tokenize(lm.tokenizer, tiny_passages, 32)
    states, mask, _ = _forward_states(lm, ids)
    ref = dc.measure_states(states, mask)
    lens_cache = {"blocks.0.hook_resid_pre": states[0]}  # TransformerLens' hook names
    lens_cache |= {f"blocks.{l}.hook_resid_post": h for l, h in enumerate(states[1:])}
    for other in (
        dc.measure_states(tuple(states), mask.bool()),
        dc.measure_states(torch.stack(states), mask.numpy()),
        dc.measure_states([h.numpy() for h in states], mask),
        dc.measure_states(lens_cache, mask),
    ):
        _same_numbers(ref, other)


def test_states_pooling_against_a_naive_mean_with_short_rows_dropped():
    """Rows with < 2 real tokens are dropped and counted; padding (even NaN) never enters."""
    gen = torch.Generator().manual_seed(0)
    L1, N, T, d = 4, 7, 6, 5
    states = torch.randn((L1, N, T, d), generator=gen)
    lengths = [6, 1, 3, 2, 6, 0, 4]
    mask = torch.tensor([[1] * k + [0] * (T - k) for k in lengths])
    states[mask[None].expand(L1, -1, -1) == 0] = float("nan")
    m = dc.measure_states(states, mask)
    kept = [i for i, k in enumerate(lengths) if k >= 2]
    assert m.n == len(kept) and m.pooled.n_dropped_short == 2
    assert m.pooled.lengths.tolist() == [lengths[i] for i in kept]
    x = states.double().numpy()
    want_default = np.stack([[x[l, i, : lengths[i]].mean(0) for i in kept] for l in range(L1)])
    want_rest = np.stack([[x[l, i, 1 : lengths[i]].mean(0) for i in kept] for l in range(L1)])
    np.testing.assert_allclose(m.pooled.pooled["default"], want_default, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m.pooled.pooled["no_pos0"], want_rest, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(m.pooled.pooled["first_non_bos"], states[:, kept, 1].numpy())
    # no mask: every position is real
    full = dc.measure_states(states[:, :, :2][:, [0, 2, 3, 4, 6]], None)
    np.testing.assert_allclose(
        full.pooled.pooled["default"], x[:, [0, 2, 3, 4, 6], :2].mean(2), rtol=1e-5, atol=1e-6
    )


def test_bad_states_get_one_sentence():
    good = torch.randn((3, 6, 4, 8))
    nan = good.clone()
    nan[2, 0, 1, 0] = float("nan")
    cases = [
        (lambda: dc.measure_states(good[:2]), InvalidStatesError, "L+1 entries"),
        (lambda: dc.measure_states([good[0], good[1][:, :3]] * 2), InvalidStatesError, "states[1]"),
        (lambda: dc.measure_states(good[0]), InvalidStatesError, "(L+1, N, T, d)"),
        (lambda: dc.measure_states(good, torch.ones(6, 5)), InvalidStatesError, "mask must be"),
        (lambda: dc.measure_states(good, torch.full((6, 4), 0.5)), InvalidStatesError, "0 or 1"),
        (lambda: dc.measure_states(good.long()), InvalidStatesError, "floating point"),
        (lambda: dc.measure_states(nan), NonFiniteActivationsError, "states[2]"),
        (lambda: dc.measure_states({"x": good}), InvalidStatesError, "hook_resid_pre"),
        (lambda: dc.measure_states(good[:, :3]), DeffError, "at least 4"),
        (lambda: dc.measure_states(good, metric="l2"), DeffError, "metric"),
    ]
    for call, kind, words in cases:
        with pytest.raises(kind) as err:
            call()
        assert words in str(err.value), (words, str(err.value))


def test_a_model_in_memory_is_checked_like_the_cli_checks_a_named_one(tiny_model, tiny_passages):
    """Token ids within the embedding, no meta weights, max_tokens within the positions: each
    a sentence naming what is wrong, before any forward pass (never a raw torch error)."""
    import transformers

    import deffcore.extraction.forward

    lm = tiny_model("llama")

    def no_forward(*args, **kwargs):
        pytest.fail("a forward pass ran although the run is refused")

    mp = pytest.MonkeyPatch()
    mp.setattr(deffcore.extraction.forward, "_forward", no_forward)
    try:
        config = tiny_config("llama")
        config.vocab_size = 100  # the byte tokenizer's ids go up to 258
        small = transformers.AutoModelForCausalLM.from_config(config)
        with pytest.raises(DeffError, match=r"token id \d+ in passage 0, outside the model's "
                           r"embedding of 100 rows"):  # fmt: skip
            dc.measure(small, lm.tokenizer, tiny_passages, max_tokens=32)
        with torch.device("meta"):
            ghost = transformers.AutoModelForCausalLM.from_config(tiny_config("llama"))
        with pytest.raises(DeffError, match="is on the meta device"):
            dc.measure(ghost, lm.tokenizer, tiny_passages, max_tokens=32)
        limit = lm.model.config.max_position_embeddings
        with pytest.raises(DeffError, match=f"max_tokens={limit + 1} is beyond the model's "
                           f"context of {limit} positions"):  # fmt: skip
            dc.measure(lm.model, lm.tokenizer, tiny_passages, max_tokens=limit + 1)
    finally:
        mp.undo()
    m = dc.measure(lm.model, lm.tokenizer, tiny_passages, max_tokens=limit)  # the edge runs
    assert m.n == len(tiny_passages)


def test_every_figure_error_names_its_argument(tiny_model, tiny_passages):
    lm = tiny_model("llama")
    m = dc.measure(lm.model, lm.tokenizer, tiny_passages, max_tokens=24)
    for options, said in (
        ({"K": "a"}, "K must be a positive integer, got 'a'"),
        ({"K": 0}, "K must be a positive integer, got 0"),
        ({"K": 1.5}, "K must be a positive integer, got 1.5"),
        ({"k": 2}, "figure() has no option 'k'"),
        ({"paper": "yes"}, "paper must be True or False"),
        ({"pooling": "mean"}, "Unknown pooling 'mean'"),
        ({"metric": "cca"}, "Unknown metric 'cca'"),
    ):
        with pytest.raises(DeffError) as err:
            m.figure("gap", **options)
        assert said in str(err.value), (options, str(err.value))
    with pytest.raises(DeffError, match="Unknown figure 'gaps'"):
        m.figure("gaps")
    assert m.figure("gap", K=2, paper=False) is not None
