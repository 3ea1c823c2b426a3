"""Small runs for tests: the spec of a tiny-llama window run, and the check that two runs hold
the same pooled states bit for bit.

Importable from every test folder: pytest puts `tests/` on `sys.path` for `tests/conftest.py`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deffcore.core.constants import EXTRACTED_POOLINGS
from deffcore.inputs.run_spec import RunSpec


def window_spec(
    dataset: str, n: int, passages: str = "windows", model: str = "tiny-llama"
) -> RunSpec:
    """The checked spec of a run of `n` passages of 16 tokens (seed 0, CKA, on the CPU)."""
    from deffcore.runs.measure import run_spec

    return run_spec(model, dataset, n, 16, 0, "cka", passages=passages, device="cpu")[0]


def assert_same_pooled(a: Any, b: Any) -> None:
    """Two measurements hold the same pooled states: every extracted pooling, the position-0
    norm ratios and the token count, exactly."""
    for p in EXTRACTED_POOLINGS:
        assert np.array_equal(a.pooled.pooled[p], b.pooled.pooled[p]), p
    assert np.array_equal(a.pooled.pos0_norm_ratio, b.pooled.pos0_norm_ratio)
    assert a.pooled.tokens == b.pooled.tokens
