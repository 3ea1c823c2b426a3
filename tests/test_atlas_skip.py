"""The skip effect (Csordás et al. §3.2, SPEC 16) against an independent computation: each
passage alone, unpadded, every block skipped in turn by the pruning lab's pass-through hook
(`skip_blocks`: the block runs and its output is replaced by its input), the model run whole,
updates from hooks on every block, KL from the logits, in float64 numpy. The atlas instead
replays the blocks before the skipped one from the baseline, batched and padded."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deffcore.inputs.architecture import decoder_layers
from deffcore.labs.pruning import skip_blocks
from deffcore.lenses.atlas_skip import skip_rows
from deffcore.measures.atlas import summarize_skip


def _ids(loaded, passages, max_tokens=32):
    return [s for s in (loaded.tokenizer(t).input_ids[:max_tokens] for t in passages) if len(s) > 1]


def _updates_and_logp(loaded, ids, skip):
    layers = decoder_layers(loaded.model)
    ups = {}

    def hook(i):
        def fn(_m, args, kwargs, out):
            h_in = args[0] if args else kwargs["hidden_states"]
            h_out = out[0] if isinstance(out, tuple) else out
            ups[i] = (h_out - h_in)[0].double().numpy()

        return fn

    handles = [b.register_forward_hook(hook(i), with_kwargs=True) for i, b in enumerate(layers)]
    try:
        with torch.no_grad(), skip_blocks(loaded.model, skip):
            logits = loaded.model(input_ids=torch.tensor([ids])).logits[0].double()
    finally:
        for h in handles:
            h.remove()
    return ups, torch.log_softmax(logits, -1).numpy()


def naive_skip(loaded, ids):
    L = loaded.layers
    later, kl = np.full((L, L), np.nan), np.empty(L)
    top = np.full((L, L), np.nan)
    base_u, logp = _updates_and_logp(loaded, ids, [])
    for s in range(L):
        u, logq = _updates_and_logp(loaded, ids, [s])
        kl[s] = (np.exp(logp) * (logp - logq)).sum(-1).mean()
        for j in range(s + 1, L):
            rel = np.linalg.norm(u[j] - base_u[j], axis=1) / np.linalg.norm(base_u[j], axis=1)
            later[s, j], top[s, j] = rel.mean(), rel.max()
    return later, top, kl


@pytest.mark.parametrize("arch", ["llama", "gemma3", "gptneox"])
def test_skip_effect_matches_a_whole_model_pass_through(tiny_model, tiny_passages, arch):
    loaded = tiny_model(arch)
    ids = _ids(loaded, tiny_passages[:5])
    rows = skip_rows(loaded, ids, batch_size=2)
    for p, seq in enumerate(ids):
        later, top, kl = naive_skip(loaded, seq)
        np.testing.assert_allclose(rows.later[p], later, atol=1e-6)
        np.testing.assert_allclose(rows.later_max[p], top, atol=1e-6)  # Csordás et al.'s max
        np.testing.assert_allclose(rows.kl[p], kl, atol=1e-6)
    assert np.isnan(
        rows.later[:, np.tril_indices(loaded.layers)[0], np.tril_indices(loaded.layers)[1]]
    ).all()
    assert (rows.later_max[:, 0, 1] >= rows.later[:, 0, 1]).all()  # max >= mean over tokens


def test_the_model_is_whole_again_after_the_skip_effect(tiny_model, tiny_passages):
    loaded = tiny_model("gemma3")
    ids = torch.tensor([_ids(loaded, tiny_passages[:1])[0]])
    layers = decoder_layers(loaded.model)
    before = list(layers)
    with torch.no_grad():
        want = loaded.model(input_ids=ids).logits
    skip_rows(loaded, _ids(loaded, tiny_passages[:3]), batch_size=2)
    assert list(layers) == before  # the same block objects, in place
    with torch.no_grad():
        assert torch.equal(loaded.model(input_ids=ids).logits, want)


def test_a_block_that_writes_nothing_has_no_effect(tiny_passages):
    """Block 2 with zero output projections writes u_2 = 0: skipping it changes nothing later
    and nothing in the output (the closed form), while skipping block 1 does."""
    from deffcore.inputs.model import load_model

    loaded = load_model("tiny-llama", device="cpu", dtype="float32")
    block = decoder_layers(loaded.model)[1]
    with torch.no_grad():
        block.self_attn.o_proj.weight.zero_()
        block.mlp.down_proj.weight.zero_()
    rows = skip_rows(loaded, _ids(loaded, tiny_passages[:4]), batch_size=4)
    np.testing.assert_allclose(rows.later[:, 1, 2:], 0.0, atol=1e-6)
    np.testing.assert_allclose(rows.kl[:, 1], 0.0, atol=1e-7)
    assert (rows.kl[:, 0] > 1e-5).all() and (rows.later[:, 0, 2:] > 1e-3).all()


def test_progress_counts_every_pass_and_the_summary_has_intervals(tiny_model, tiny_passages):
    loaded = tiny_model("llama")
    calls = []
    rows = skip_rows(
        loaded,
        _ids(loaded, tiny_passages[:6]),
        batch_size=3,
        progress=lambda d, t, s: calls.append((d, t, s)),
    )
    L = loaded.layers
    assert [c[0] for c in calls] == list(range(1, 2 * (L + 1) + 1))
    assert {c[1] for c in calls} == {2 * (L + 1)} and {c[2] for c in calls} == {"skip effect"}
    eff = summarize_skip(rows.later, rows.later_max, rows.kl, B=40)
    np.testing.assert_allclose(eff.kl, rows.kl.mean(0))
    low, high = eff.intervals["kl"]
    assert (low <= eff.kl).all() and (eff.kl <= high).all()
    assert np.isnan(eff.later[1, 0]) and np.isfinite(eff.later[0, 1])


def test_skip_effect_is_cancelled_between_batches(tiny_model, tiny_passages):
    from deffcore.core.errors import RunCancelled

    loaded = tiny_model("llama")
    with pytest.raises(RunCancelled):
        skip_rows(loaded, _ids(loaded, tiny_passages[:4]), batch_size=2, should_stop=lambda: True)
