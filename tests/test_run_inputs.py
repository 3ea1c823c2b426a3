"""A run's inputs (`deffcore.inputs.run_spec`): ready ids for extraction, released when closed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn

from deffcore.core.constants import EXTRACTED_POOLINGS
from deffcore.core.errors import DeffError, RunCancelled
from deffcore.extraction.forward import extract_pooled
from deffcore.inputs import run_spec as run_inputs
from deffcore.inputs.architecture import architecture_of, decoder_layers
from deffcore.inputs.interventions import intervention_targets
from deffcore.inputs.run_spec import RunSpec
from deffcore.inputs.texts import cut_windows, prepare_ids, run_texts, sample_windows
from deffcore.runs.measure import extract_spec


def _spec(dataset: str, **fields) -> RunSpec:
    base = RunSpec(model="tiny-gemma3", revision=None, dataset=dataset, n=6, max_tokens=24,
                   seed=0, dtype="float32")  # fmt: skip
    return replace(base, **fields)


def _in_use(held) -> list[bool]:
    return [m["in_use"] for m in held.MODELS.held()]


def test_documents_are_tokenised_here_as_extraction_used_to(tiny_dataset, loaded_models):
    spec = _spec(tiny_dataset)
    with run_inputs.open_run_inputs(spec, device="cpu") as inputs:
        texts = run_texts(spec)
        want = prepare_ids(inputs.loaded.tokenizer, texts, None, 24, "default")
        assert (inputs.ids, inputs.kept, inputs.given) == want
        assert inputs.given == len(texts) == 6
        assert all(2 <= len(s) <= 24 for s in inputs.ids)
        assert inputs.arch.blocks is decoder_layers(inputs.loaded.model)


def test_windows_are_cut_and_drawn_with_the_run_seed(tiny_dataset, loaded_models):
    spec = _spec(tiny_dataset, passages="windows", n=4, max_tokens=8, seed=3)
    with run_inputs.open_run_inputs(spec, device="cpu") as inputs:
        tok = inputs.loaded.tokenizer
        windows = cut_windows(tok, run_texts(spec), 8, "default", "windows")
        assert inputs.ids == sample_windows(windows, 4, 3)
        assert inputs.kept == [0, 1, 2, 3] and inputs.given == 4
        assert all(len(s) == 8 for s in inputs.ids)


def test_closing_releases_the_lease_and_removes_the_intervention(tiny_dataset, loaded_models):
    spec = _spec(tiny_dataset, intervention="no_post")
    inputs = run_inputs.open_run_inputs(spec, device="cpu")
    targets = intervention_targets(inputs.loaded.model, "no_post")
    assert targets and all(m._forward_hooks for m in targets)  # applied while open
    assert _in_use(loaded_models) == [True]
    inputs.close()
    assert not any(m._forward_hooks for m in targets)
    assert _in_use(loaded_models) == [False]
    inputs.close()  # idempotent


def test_a_failure_while_making_the_inputs_releases_what_was_opened(
    tiny_dataset, loaded_models, monkeypatch
):
    def broken(*_a, **_k):
        raise DeffError("the ids could not be made")

    spec = _spec(tiny_dataset, intervention="no_post")
    with monkeypatch.context() as patched:
        patched.setattr(run_inputs.RunInputs, "of", broken)
        with pytest.raises(DeffError, match="could not be made"):
            run_inputs.open_run_inputs(spec, device="cpu")
    assert _in_use(loaded_models) == [False]  # loaded, then released, not leaked
    with run_inputs.open_run_inputs(_spec(tiny_dataset), device="cpu") as inputs:
        targets = intervention_targets(inputs.loaded.model, "no_post")
        assert targets and not any(m._forward_hooks for m in targets)  # the hooks went too


def test_a_stop_before_the_start_loads_nothing(tiny_dataset, loaded_models):
    with pytest.raises(RunCancelled):
        run_inputs.open_run_inputs(_spec(tiny_dataset), device="cpu", should_stop=lambda: True)
    assert loaded_models.MODELS.held() == []


def test_a_run_extracted_from_its_inputs_is_the_extraction_of_its_texts(tiny_dataset, tiny_model):
    spec = _spec(tiny_dataset)
    loaded = tiny_model("gemma3")
    via_inputs = extract_spec(spec, loaded=loaded)
    direct = extract_pooled(loaded, run_texts(spec), max_tokens=24)
    for p in EXTRACTED_POOLINGS:
        np.testing.assert_array_equal(via_inputs.pooled[p], direct.pooled[p])
    assert via_inputs.meta["kept_indices"] == direct.meta["kept_indices"]


class _Recorder(nn.Module):
    def forward(self, input_ids, attention_mask=None):
        self.seen = {"attention_mask": attention_mask}
        return input_ids


def test_the_forward_passes_only_what_the_base_takes(tiny_model):
    arch = architecture_of(tiny_model("llama").model)
    assert arch.forward_takes == {"attention_mask", "position_ids", "use_cache"}
    recorder = _Recorder()
    narrow = replace(arch, base=recorder, forward_takes=frozenset({"attention_mask"}))
    ids = torch.ones((1, 3), dtype=torch.long)
    narrow.forward(ids, ids, ids)  # a position_ids or use_cache would be a TypeError here
    assert recorder.seen["attention_mask"] is ids
