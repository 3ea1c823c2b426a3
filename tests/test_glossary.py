"""The glossary covers the issue's terms and no snake_case column reaches a person."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from deffcore.views.glossary import COLUMN_LABELS, GLOSSARY, glossary_markdown, human_columns

REQUIRED_TERMS = (
    "D_eff",
    "D_eff/L",
    "F_L",
    "gap",
    "ρ̂(1)",
    "lag profile",
    "CKA",
    "unbiased CKA",
    "cosine",
    "pooling controls",
    "more redundant than orthogonal updates",
    "less redundant than orthogonal updates",
    "F_norm",
    "F_h0+norm",
    "F_h0+corr",
    "k₁.₁₀",
    "BI",
    "ΔD_eff",
    "position-0 norm ratio",
    "massive activation",
    "attention sink",
    "BOS",
    "random-weight null",
    "bootstrap CI",
    "windows",
    "finite-sample bias",
    "h_0",
)
#: a lower-case snake_case key (symbols such as D_eff, F_L or h_0 are the app's notation)
SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9.]+)+$")


def test_every_required_term_has_one_or_two_plain_sentences():
    for term in REQUIRED_TERMS:
        assert term in GLOSSARY, term
    for term, text in GLOSSARY.items():
        assert isinstance(text, str) and text.strip(), term
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s]
        assert 1 <= len(sentences) <= 3, (term, sentences)  # "e.g." style splits allowed
        assert text.rstrip().endswith("."), term


def test_regimes_are_said_in_words():
    assert "gap > 0" in GLOSSARY["more redundant than orthogonal updates"]
    assert "sub-reference" in GLOSSARY["more redundant than orthogonal updates"]  # mapped
    assert "more redundant" in GLOSSARY["gap"] and "less redundant" in GLOSSARY["gap"]


def test_column_labels_of_every_result_key_are_human():
    from deffcore.measures.depth import depth_summary
    from deffcore.measures.references import matched_references, update_depth
    from deffcore.measures.synthetic import orthogonal_updates

    syn = orthogonal_updates(40, 8, 5, seed=0)
    from deffcore.measures.similarity import similarity_matrix

    keys = set(depth_summary(similarity_matrix(syn.states)).to_dict())
    keys |= set(matched_references(syn.states_with_h0()).to_dict())
    keys |= set(update_depth(syn.states_with_h0()).to_dict())
    keys |= {"k_1.10", "f_1.10", "deff_h_over_L", "deff_upd_over_L", "val_loss", "f_over_h"}
    frame = human_columns(pd.DataFrame(columns=sorted(keys)))
    for key, shown in zip(sorted(keys), frame.columns, strict=True):
        assert key in COLUMN_LABELS, key
        assert not SNAKE.match(shown), (key, shown)
    assert COLUMN_LABELS["deff_over_L"] == "D_eff / L"
    assert COLUMN_LABELS["k_1.10"] == "k₁.₁₀"


def test_human_columns_renames_known_unknown_and_index():
    df = pd.DataFrame({"gap_pct": [1.0], "some_new_thing": [2], "Model": ["x"], "top1_pc": [3]})
    df.index.name = "rho1"
    out = human_columns(df)
    assert list(out.columns) == ["Gap to F_L (%)", "some new thing", "Model", "top1_pc"]
    assert out.index.name == "ρ̂(1)"
    assert df.columns[0] == "gap_pct"  # the input is not changed
    assert out.iloc[0, 0] == 1.0


@pytest.mark.parametrize("terms", [None, ["F_L", "not a term", "BI"]])
def test_glossary_markdown(terms):
    text = glossary_markdown(terms)
    lines = text.splitlines()
    assert all(line.startswith("- **") for line in lines)
    if terms is None:
        assert len(lines) == len(GLOSSARY)
    else:
        assert [line.split("**")[1] for line in lines] == ["F_L", "BI"]


def test_term_for_options():
    from deffcore.views.glossary import term_for

    assert term_for("add", "BOS") == "BOS add" and term_for("default", "BOS") == "BOS default"
    assert term_for("default", "Pooling control") == "default"
    assert term_for("none", "Norm interventions") == "intervention none"
    assert term_for("3 · A persistent h_0", "Story step") == "persistent h_0"
    assert term_for("unbiased_cka", "Metric") == "unbiased CKA"
    assert term_for("no such option", "Metric") is None
    # an option's trailing parenthesis says where it comes from; the term is what precedes it
    assert term_for("Pruning tolerance (stored pruning checks)", "y") == "pruning tolerance"
    assert term_for("γ (residual carry)") == "γ (residual carry)"  # a term with one kept
    assert term_for("no such option (at all)", "y") is None
