"""The interventions lab on the packaged Gemma-3-270M (offline GGUF), a dozen passages."""

from __future__ import annotations

import math

import pytest

from deffcore.core.constants import POOLINGS


@pytest.mark.slow
def test_gemma3_270m_interventions():
    from deffcore.inputs.interventions import INTERVENTIONS, norm_intervention
    from deffcore.inputs.model import load_model
    from deffcore.inputs.texts import load_passages
    from deffcore.labs.interventions import intervention_table
    from deffcore.labs.pruning import perplexity

    table = intervention_table("gemma3-270m", n=12, max_tokens=64, device="cpu", dtype="float32")
    assert len(table.rows) == len(INTERVENTIONS) * len(POOLINGS)
    assert {r["layers"] for r in table.rows} == {18}
    assert all(math.isfinite(r["gap_pct"]) for r in table.rows)
    none, no_post = table.value("none", "default"), table.value("no_post", "default")
    assert abs(none - no_post) > 0.5  # removing the post norms changes the measured geometry
    # the real forward pass changes under the intervention and is restored afterwards
    loaded = load_model("gemma3-270m", device="cpu", dtype="float32")
    text = load_passages("bbc-news", 2, seed=0)
    base = perplexity(loaded.model, loaded.tokenizer, text, max_tokens=32)["ppl"]
    with norm_intervention(loaded.model, "no_post_no_qk"):
        changed = perplexity(loaded.model, loaded.tokenizer, text, max_tokens=32)["ppl"]
    assert changed != pytest.approx(base, rel=1e-3)
    assert perplexity(loaded.model, loaded.tokenizer, text, max_tokens=32)["ppl"] == base
    assert base < 200  # the trained model predicts English news reasonably
