"""Residual-carry GPT: gamma = 1 is the ordinary block; the sweep records every quantity."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from deffcore.core.errors import DeffError
from deffcore.labs.carry_model import CarryBlock, CarryConfig, CarryGPT
from deffcore.labs.residual_carry import (
    QUANTITIES,
    char_data,
    checkpoint_path,
    load_checkpoint,
    probe_depth,
    run_carry_sweep,
    settings_from,
)
from deffcore.measures.depth import effective_depth
from deffcore.measures.similarity import naive_similarity_matrix

TEXT = "the quick brown fox jumps over the lazy dog. " * 200


def _ordinary_block(block: CarryBlock, h: torch.Tensor) -> torch.Tensor:
    """nanoGPT's block, written out: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x))."""
    x = h + block.attn(block.ln1(h))
    return x + block.mlp(block.ln2(x))


@pytest.mark.parametrize("gamma", [1.0, 0.75, 0.25])
def test_block_is_gamma_carry_plus_ordinary_update(gamma):
    torch.manual_seed(0)
    block = CarryBlock(CarryConfig(n_embd=32, n_head=4, gamma=gamma)).eval()
    h = torch.randn(2, 7, 32)
    ordinary = _ordinary_block(block, h)
    with torch.no_grad():
        got = block(h)
        # block(h) = ordinary(h) - h, so gamma h + block(h) = ordinary(h) - (1 - gamma) h
        torch.testing.assert_close(got, ordinary - (1 - gamma) * h, rtol=1e-6, atol=1e-6)
    if gamma == 1.0:
        assert torch.equal(got, ordinary) or torch.allclose(got, ordinary, atol=1e-7)


def test_states_are_block_outputs_before_final_norm():
    torch.manual_seed(0)
    model = CarryGPT(CarryConfig(vocab_size=20, block_size=8, n_layer=3, n_embd=16, n_head=2))
    idx = torch.randint(20, (2, 8))
    with torch.no_grad():
        states = model.states(idx)
        assert len(states) == 4
        torch.testing.assert_close(states[2], model.blocks[1](states[1]))
        logits, _ = model(idx)
        torch.testing.assert_close(logits, model.lm_head(model.ln_f(states[-1])))
    with pytest.raises(DeffError, match="block size"):
        model.states(torch.zeros(1, 9, dtype=torch.long))


def test_probe_depth_matches_naive_computation():
    torch.manual_seed(0)
    model = CarryGPT(CarryConfig(vocab_size=20, block_size=8, n_layer=4, n_embd=16, n_head=2))
    probe = torch.randint(20, (12, 8))
    got = probe_depth(model, probe)
    with torch.no_grad():
        pooled = np.stack([h.mean(dim=1).numpy() for h in model.states(probe)]).astype(np.float64)
    S = naive_similarity_matrix(pooled[1:])
    assert got["deff_h_over_L"] == pytest.approx(effective_depth(S) / 4, rel=1e-5)
    assert got["rho1"] == pytest.approx(np.mean(np.diag(S, 1)), rel=1e-5)
    f = np.diff(pooled, axis=0)
    Su = naive_similarity_matrix(f)
    assert got["deff_upd_over_L"] == pytest.approx(effective_depth(Su) / 4, rel=1e-4)
    centred = [x - x.mean(axis=0) for x in pooled]
    ratio = np.mean(
        [
            np.linalg.norm(centred[i + 1] - centred[i]) / np.linalg.norm(centred[i + 1])
            for i in range(4)
        ]
    )
    assert got["f_over_h"] == pytest.approx(ratio, rel=1e-4)


def test_char_data_split_and_encoding():
    data = char_data(text=TEXT)
    assert len(data.train) + len(data.val) == len(TEXT)
    assert "".join(data.chars[i] for i in data.val[:10].tolist()) == TEXT[-len(data.val) :][:10]
    assert torch.equal(data.encode("fox"), data.train[16:19])


def test_sweep_records_every_quantity_and_saves_checkpoints(tmp_path):
    s = settings_from(
        "tiny",
        gammas=(1.0, 0.5),
        seeds=(0, 1),
        n_layer=3,
        n_embd=16,
        n_head=2,
        block_size=16,
        batch_size=4,
        iters=6,
        eval_interval=3,
        eval_batches=1,
        n_probe=8,
        checkpoint_dir=str(tmp_path),
    )
    seen = []
    result = run_carry_sweep(s, data=char_data(text=TEXT), progress=lambda *a: seen.append(a))
    assert seen[-1][:2] == (2 * 2 * 6, 2 * 2 * 6)
    assert len(result.records) == 2 * 2 * 3  # steps 0, 3, 6 per run
    for rec in result.records:
        for q in QUANTITIES:
            assert np.isfinite(rec[q]), (q, rec)
    final = result.final_table()
    assert [row["gamma"] for row in final] == [1.0, 0.5]
    for row in final:
        runs = [
            r["val_loss"] for r in result.records if r["gamma"] == row["gamma"] and r["step"] == 6
        ]
        assert row["val_loss"] == pytest.approx(np.mean(runs))
        assert row["val_loss_min"] == min(runs) and row["val_loss_max"] == max(runs)
    # training lowers the loss from its initial ~log(vocab)
    first = [r["val_loss"] for r in result.records if r["step"] == 0]
    last = [r["val_loss"] for r in result.records if r["step"] == 6]
    assert np.mean(last) < np.mean(first)
    # checkpoints reload to the same model
    model, meta = load_checkpoint(checkpoint_path(tmp_path, 0.5, 1, 6))
    assert meta["step"] == 6 and meta["tokens"] == 6 * 4 * 16
    assert model.config.gamma == 0.5
    rec = next(r for r in result.records if (r["gamma"], r["seed"], r["step"]) == (0.5, 1, 6))
    probe_again = probe_depth(model, torch.randint(len(meta["chars"]), (8, 16)))
    assert np.isfinite(probe_again["deff_h_over_L"])
    assert rec["gamma"] == 0.5
    assert (tmp_path / "records.json").exists()


def test_same_seed_same_records():
    s = settings_from(
        "tiny",
        gammas=(0.75,),
        seeds=(3,),
        n_layer=2,
        n_embd=16,
        n_head=2,
        block_size=8,
        batch_size=2,
        iters=2,
        eval_interval=2,
        eval_batches=1,
        n_probe=4,
    )
    data = char_data(text=TEXT)
    a = run_carry_sweep(s, data=data).records
    b = run_carry_sweep(s, data=data).records
    assert a == b


def test_bad_settings_refuse():
    with pytest.raises(DeffError, match="preset"):
        settings_from("huge")
    with pytest.raises(DeffError, match="divisible"):
        run_carry_sweep(settings_from("tiny", n_embd=30, n_head=4), data=char_data(text=TEXT))
    with pytest.raises(DeffError, match="gamma"):
        run_carry_sweep(settings_from("tiny", gammas=()), data=char_data(text=TEXT))


def test_a_checkpoint_replaces_only_its_own_earlier_self(tmp_path):
    """The one output rule (core.files.check_output) for the lab's checkpoints: a user's file
    that shares a checkpoint's name is never replaced, a link is never written through, and
    the lab's own earlier checkpoint (its sidecar says so) is replaced whole."""
    from deffcore.core.errors import InvalidArgumentError
    from deffcore.labs.residual_carry import checkpoint_path, checkpoint_sidecar, save_checkpoint

    model = CarryGPT(CarryConfig(vocab_size=20, block_size=8, n_layer=2, n_embd=16, n_head=2))
    data = char_data(text=TEXT)
    path = checkpoint_path(tmp_path, 1.0, 0, 10)
    save_checkpoint(path, model, data, 10, 80)
    save_checkpoint(path, model, data, 10, 90)  # ours: replaced
    assert json.loads(checkpoint_sidecar(path).read_text())["tokens"] == 90
    mine = checkpoint_path(tmp_path, 1.0, 0, 20)
    mine.write_bytes(b"PK\x03\x04 a zip of the user's, no sidecar beside it")
    with pytest.raises(InvalidArgumentError, match="carry-lab sidecar"):
        save_checkpoint(mine, model, data, 20, 160)
    assert mine.read_bytes().startswith(b"PK\x03\x04 a zip of the user's")
    target = tmp_path / "elsewhere.pt"
    link = checkpoint_path(tmp_path, 1.0, 0, 30)
    link.symlink_to(target)
    with pytest.raises(InvalidArgumentError, match="symbolic link"):
        save_checkpoint(link, model, data, 30, 240)
    assert not target.exists()
