"""Tiny random models for the lab tests, through the shared loader (4 blocks, d = 64)."""

from __future__ import annotations

import pytest
import torch

from deffcore.inputs.model import load_model


@pytest.fixture(scope="module")
def tiny_gemma3():
    return load_model("tiny-gemma3", device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def tiny_llama():
    return load_model("tiny-llama", device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def gemma3_model(tiny_gemma3) -> torch.nn.Module:
    return tiny_gemma3.model


@pytest.fixture(scope="module")
def llama_model(tiny_llama) -> torch.nn.Module:
    return tiny_llama.model


@pytest.fixture
def token_ids() -> torch.Tensor:
    return torch.randint(3, 250, (2, 12), generator=torch.Generator().manual_seed(1))


@pytest.fixture
def lab_cache(tmp_path, monkeypatch):
    """A private measurement cache, so tests never read or write the repository's."""
    monkeypatch.setenv("DEFF_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"
