"""Training dynamics over local checkpoints; missing checkpoints stay missing."""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import torch

from deffcore.core.errors import DeffError
from deffcore.extraction.forward import extract_pooled
from deffcore.inputs.model import load_model
from deffcore.inputs.texts import load_passages
from deffcore.labs.dynamics import (
    Checkpoint,
    dynamics_sweep,
    hf_revisions,
    local_checkpoints,
    parse_step_tokens,
)
from deffcore.labs.residual_carry import run_carry_sweep, settings_from
from deffcore.measures.depth import effective_depth, gap_percent
from deffcore.measures.similarity import naive_similarity_matrix


def test_parse_names():
    assert parse_step_tokens("step143000") == (143000, None)
    assert parse_step_tokens("checkpoint-500") == (500, None)
    assert parse_step_tokens("stage1-step1000-tokens5B") == (1000, 5e9)
    assert parse_step_tokens("step000300") == (300, None)
    assert parse_step_tokens("main") == (None, None)
    cps = hf_revisions("EleutherAI/pythia-70m", ["step1000", "main"])
    assert [(c.revision, c.step) for c in cps] == [("step1000", 1000), ("main", None)]


@pytest.fixture
def two_folders(tmp_path, tiny_llama):
    """tiny-llama saved twice: as is ("step100") and with perturbed weights ("step200")."""
    root = tmp_path / "ckpts"
    tiny_llama.model.save_pretrained(root / "step100")
    tiny_llama.tokenizer.save_pretrained(root / "step100")
    model = load_model("tiny-llama", device="cpu", dtype="float32").model
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    model.save_pretrained(root / "step200")
    tiny_llama.tokenizer.save_pretrained(root / "step200")
    return root


def _direct_deff_over_L(folder: str, n: int, max_tokens: int) -> float:
    loaded = load_model(folder, device="cpu", dtype="float32")
    pooled = extract_pooled(loaded, load_passages("bbc-news", n, seed=0), max_tokens=max_tokens)
    S = naive_similarity_matrix(pooled.pooled["default"][1:])
    return effective_depth(S) / S.shape[0]


def test_two_checkpoint_sweep_on_local_folders(two_folders, lab_cache):
    cps = local_checkpoints(two_folders)
    assert [(c.label, c.step, c.kind) for c in cps] == [
        ("step100", 100, "folder"),
        ("step200", 200, "folder"),
    ]
    result = dynamics_sweep(cps, n=8, max_tokens=24)
    out = result.to_dict()
    assert out["x_axis"] == "step" and out["landed"] == 2
    for point in out["points"]:
        assert point["status"] == "ok"
        expected = _direct_deff_over_L(point["model"], 8, 24)
        assert point["deff_over_L"] == pytest.approx(expected, rel=1e-4)
        assert point["gap_pct"] == pytest.approx(gap_percent(expected * 4, 4), rel=1e-3)
    assert out["points"][0]["deff_over_L"] != pytest.approx(out["points"][1]["deff_over_L"])


def test_missing_checkpoints_are_kept_as_missing(two_folders, lab_cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cps = [
        *local_checkpoints(two_folders)[:1],
        Checkpoint("gone", "folder", str(two_folders / "step999"), step=999),
        *hf_revisions("deffcore-test/no-such-model", ["step5"]),
    ]
    result = dynamics_sweep(cps, n=8, max_tokens=24)
    status = [p["status"] for p in result.points]
    assert status == ["ok", "missing", "missing"]
    for p in result.points[1:]:
        assert p["deff_over_L"] is None and p["reason"]
    assert result.to_dict()["landed"] == 1 and result.to_dict()["planned"] == 3


def test_carry_checkpoints_reproduce_the_lab_probe(tmp_path):
    s = settings_from(
        "tiny",
        gammas=(0.5,),
        seeds=(0,),
        n_layer=3,
        n_embd=16,
        n_head=2,
        block_size=16,
        batch_size=4,
        iters=4,
        eval_interval=2,
        eval_batches=1,
        n_probe=8,
        max_chars=40_000,
        checkpoint_dir=str(tmp_path / "carry"),
    )
    lab = run_carry_sweep(s)
    cps = local_checkpoints(tmp_path / "carry")
    assert [c.step for c in cps] == [0, 2, 4] and all(c.kind == "carry" for c in cps)
    assert [c.tokens for c in cps] == [0, 2 * 4 * 16, 4 * 4 * 16]
    result = dynamics_sweep(cps, n=8)
    assert result.x_axis == "tokens"
    got = [p["deff_over_L"] for p in result.points]
    want = [r["deff_h_over_L"] for r in lab.records]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_empty_or_absent_refuses(tmp_path):
    with pytest.raises(DeffError, match="does not exist"):
        local_checkpoints(tmp_path / "nothing")
    with pytest.raises(DeffError, match="No checkpoints"):
        local_checkpoints(tmp_path)
    with pytest.raises(DeffError, match="at least one"):
        dynamics_sweep([])


class _Payload:
    """Unpickling this object would create `marker` (a stand-in for arbitrary code)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def test_listing_and_measuring_never_unpickle_a_crafted_checkpoint(tmp_path):
    folder = tmp_path / "ckpts"
    folder.mkdir()
    marker = tmp_path / "code_ran"
    torch.save({"step": 5, "payload": _Payload(marker)}, folder / "step000005.pt")
    (folder / "step000009.pt").write_bytes(b"not a checkpoint at all")
    cps = local_checkpoints(folder)  # listing opens no .pt
    assert not marker.exists()
    assert [c.step for c in cps] == [5, 9] and all(c.tokens is None for c in cps)
    result = dynamics_sweep(cps, n=8)
    assert not marker.exists()  # weights_only=True refused the payload
    assert [p["status"] for p in result.points] == ["missing", "missing"]
    assert all("Cannot read the carry-lab checkpoint" in p["reason"] for p in result.points)


def test_empty_folder_field_is_refused_not_searched():
    with pytest.raises(DeffError, match="field is empty"):
        local_checkpoints("")
    with pytest.raises(DeffError, match="field is empty"):
        local_checkpoints("   ")
