"""deffcore.views.models_overview: the one `model_family`, used by every page."""

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
    from deffcore.extraction import cache as entries
    from deffcore.runs.measure import measure
    from deffcore.runs.tables import cached_model_row

    m = measure(model="random:tiny-llama:1", n=8, max_tokens=16)
    meta = next(r for r in entries.list_runs() if r["key"] == m.spec.key())
    row = cached_model_row(meta)
    assert (row["family"], row["weights"]) == ("random-weight null", "random")


def test_gemma_3_12b_comes_from_table_s6_without_intervention(tmp_path, monkeypatch):
    """Table S6 publishes Gemma-3-12B (the gaps the Gap and BOS pages show) beside its norm
    interventions: the Models table takes the "intervention: none" row, whatever the row order
    (here the interventions come first), and leaves every other model as Table S4/S5 give it."""
    from deffcore.views.models_overview import paper_models
    from deffcore.views.paper import PACKAGED_PATH

    lines = PACKAGED_PATH.read_text().splitlines()
    head, rows = lines[0], lines[1:]
    moved = sorted(rows, key=lambda r: not ("Table S6" in r and "intervention: none" not in r))
    assert "no post" in moved[0] and "Gemma-3-12B" in "".join(moved[:20])
    path = tmp_path / "reordered.csv"
    path.write_text("\n".join([head, *moved]) + "\n")
    monkeypatch.setenv("DEFF_PAPER_REFERENCE", str(path))
    by_model = {m["model"]: m for m in paper_models()}
    gemma = by_model["Gemma-3-12B"]
    assert gemma["gap_default"] == gemma["gap_pct"] == -17.0  # not "no post"'s +47.6
    assert gemma["gap_token_normed"] == 34.4 and gemma["trust"] == "published"
    assert len(by_model) == 18
    monkeypatch.delenv("DEFF_PAPER_REFERENCE")
    assert {m["model"]: m for m in paper_models()} == by_model  # the order never mattered
