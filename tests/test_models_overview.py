"""deffcore.views.models_overview: the one `model_family`, used by every page (issue 18)."""

from __future__ import annotations

import pytest

from deffcore.views.models_overview import FAMILIES, RANDOM_FAMILY, model_family


@pytest.mark.parametrize(
    ("spec", "family"),
    [
        ("random:tiny-llama:1", "random-weight null"),  # a fresh init is no trained family
        ("random:EleutherAI/pythia-70m:3", "random-weight null"),
        ("Pythia-70M", "Pythia"),  # the paper's name ...
        ("EleutherAI/pythia-70m", "Pythia"),  # ... and the hub id: the same family
        ("Gemma-3-4B", "Gemma"),
        ("gemma3-270m", "Gemma"),
        ("smollm2-135m", "SmolLM2"),
        ("OLMo-2-1B", "OLMo-2"),
        ("tiny-gptneox", "GPT-NeoX"),
        ("/models/my-model", "other"),
        ("nanoGPT-12L (residual carry)", "other"),
    ],
)
def test_model_family(spec, family):
    assert model_family(spec) == family


def test_every_family_label_is_distinct():
    labels = [label for _, label in FAMILIES]
    assert len(set(labels)) == len(labels) and RANDOM_FAMILY not in labels


def test_a_cached_random_run_is_in_the_random_family():
    from deffcore.extraction import entries
    from deffcore.runs.measure import measure
    from deffcore.runs.tables import cached_model_row

    m = measure(model="random:tiny-llama:1", n=8, max_tokens=16)
    meta = next(r for r in entries.list_runs() if r["key"] == m.spec.key())
    row = cached_model_row(meta)
    assert (row["family"], row["weights"]) == ("random-weight null", "random")
