"""A window run from a cached run of another N (deffcore.extraction.cache): bit-identical."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from run_helpers import assert_same_pooled, window_spec

import deffcore.inputs.run_spec
import deffcore.runs.measure
from deffcore.extraction import cache
from deffcore.extraction import cache as prefix
from deffcore.runs.measure import measure_spec


def test_a_larger_run_resumes_from_a_smaller_one_bit_identically(windows_dataset, every_batch):
    small = measure_spec(window_spec(windows_dataset, 128), device="cpu", batch_size=32)
    assert small.meta["extract_meta"]["batch_rows"] == 32
    large = measure_spec(window_spec(windows_dataset, 256), device="cpu", batch_size=32)
    # every checkpointed batch of the 128-run: all but its last (handed to no checkpoint, its
    # per-passage position-0 ratios are not kept), which the 256-run extracts again
    assert large.resumed_passages == 96
    fresh = measure_spec(
        window_spec(windows_dataset, 256), device="cpu", batch_size=32, use_cache=False
    )
    assert_same_pooled(large, fresh)


def test_a_smaller_run_is_a_larger_ones_first_rows_without_a_model(
    windows_dataset,
    every_batch,
    monkeypatch,
):
    fresh = measure_spec(
        window_spec(windows_dataset, 128), device="cpu", batch_size=32, use_cache=False
    )
    measure_spec(window_spec(windows_dataset, 256), device="cpu", batch_size=32)

    def loader(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(deffcore.inputs.run_spec, "load_model", loader)
    served = measure_spec(window_spec(windows_dataset, 128), device="cpu", batch_size=32)
    assert served.resumed_passages == 128 and not served.cached
    assert_same_pooled(served, fresh)
    # stored as a normal complete entry of N = 128
    assert cache.load(window_spec(windows_dataset, 128)) is not None


def test_other_batching_is_not_a_source(windows_dataset, every_batch):
    """A run batched by 16 serves runs batched by 16 only, and only whole numbers of batches:
    each refusal is checked beside a request the same source does serve (the old
    test could not fail, its source's ratio prefix being too short to serve anything)."""
    measure_spec(window_spec(windows_dataset, 256), device="cpu", batch_size=16)
    larger = prefix.from_larger
    assert larger(window_spec(windows_dataset, 128), "cpu", 16) is not None  # the source serves
    assert larger(window_spec(windows_dataset, 128), "cpu", 32) is None  # ... not other batching
    assert larger(window_spec(windows_dataset, 112), "cpu", 16) is not None  # 7 batches of 16
    assert larger(window_spec(windows_dataset, 100), "cpu", 16) is None  # not a whole number
    other = measure_spec(window_spec(windows_dataset, 384), device="cpu", batch_size=32)
    assert other.resumed_passages == 0  # nor is it resumed from by another batching


def test_documents_mode_never_reuses(tiny_dataset, every_batch):
    measure_spec(window_spec(tiny_dataset, 8, "documents"), device="cpu", batch_size=4)
    assert prefix.sources(window_spec(tiny_dataset, 12, "documents")) == []
    m = measure_spec(window_spec(tiny_dataset, 12, "documents"), device="cpu", batch_size=4)
    assert m.resumed_passages == 0


def test_a_damaged_entry_is_no_source(windows_dataset, every_batch):
    small = window_spec(windows_dataset, 128)
    measure_spec(small, device="cpu", batch_size=32)
    npz = cache.cache_dir() / small.key() / "states.npz"
    with np.load(npz) as z:  # a valid npz with one changed value: only the checksum tells
        arrays = {k: z[k] for k in z.files}
    arrays["default"][1, 0, 0] += 1.0
    np.savez(npz, **arrays)
    assert prefix.best_prefix(window_spec(windows_dataset, 256), "cpu", 32, larger=False) is None
    large = measure_spec(window_spec(windows_dataset, 256), device="cpu", batch_size=32)
    assert large.resumed_passages == 0


def test_the_ratio_prefix_rides_in_the_checksummed_entry(windows_dataset, every_batch):
    spec = window_spec(windows_dataset, 96)
    m = measure_spec(spec, device="cpu", batch_size=32)
    assert prefix.RATIO_PREFIX not in m.pooled.pooled  # cache.load ignores it
    meta = cache.load_meta(spec.key())
    arrays = prefix._read_rows(spec, meta)
    ratio = arrays[prefix.RATIO_PREFIX]
    assert ratio.shape == (m.layers + 1, 64)  # all but the last chunk (never checkpointed)
    assert np.allclose(ratio.mean(1), m.pooled.pos0_norm_ratio, rtol=0.5)  # per-passage values
    bigger = replace(spec, n=192)
    assert measure_spec(bigger, device="cpu", batch_size=32).resumed_passages == 64
