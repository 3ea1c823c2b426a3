"""Similarity on a GPU: the large chunks used there give the numbers of the CPU's
cache-sized ones (chunking changes only the order of float64 sums)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deffcore.measures import similarity
from deffcore.measures.similarity import similarity_matrix


def test_chunk_size_follows_the_device():
    assert similarity._chunk_elements(torch.empty(1), 1000) == 1000  # CPU: unchanged
    on_gpu = similarity._chunk_elements(torch.empty(1, device="meta"), 1000)
    assert on_gpu == similarity.GPU_CHUNK_ELEMENTS


@pytest.mark.parametrize("metric", ["cka", "unbiased_cka"])
def test_large_and_cache_sized_chunks_agree(monkeypatch, metric):
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(5, 600, 40, generator=g).cumsum(0) + 50.0).float()  # float32-hard offset
    monkeypatch.setattr(similarity, "CENTRE_CHUNK_ELEMENTS", 40 * 7)  # 7 rows per chunk
    monkeypatch.setattr(similarity, "CONTRACT_ELEMENTS", 5 * 64 * 3)  # 3 columns per chunk
    monkeypatch.setattr(similarity, "GRAM_ROWS", 64)
    small = similarity_matrix(x, metric, route="gram")
    monkeypatch.setattr(similarity, "_chunk_elements", lambda x, on_cpu: 1 << 24)  # GPU sizes
    large = similarity_matrix(x, metric, route="gram")
    assert np.abs(small - large).max() < 1e-12
    assert np.array_equal(large, large.T)
    exact = similarity_matrix(x.double(), metric, route="gram")
    assert np.abs(large - exact).max() < 1e-7
