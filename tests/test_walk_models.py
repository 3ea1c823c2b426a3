"""The Models page's paper rows: every row of the pooling chart has a marker; Gemma-3's rows
carry L (from the models' configs) and the D_eff/L their published gap implies."""

from __future__ import annotations

import pytest


def test_the_pooling_chart_lists_only_rows_with_a_gap():
    import pandas as pd

    from deffcore.core.constants import POOLINGS
    from deffcore.figures import models_gap_by_pooling
    from deffcore.views.models_overview import paper_models

    table = pd.DataFrame(paper_models())
    fig = models_gap_by_pooling(table, POOLINGS)
    listed = {y for t in fig.data for y in t.y}
    marked = {y for t in fig.data for x, y in zip(t.x, t.y, strict=True) if x == x}
    assert listed == marked  # every label on the axis has a marker
    assert "Pythia-70M" in marked and "Gemma-3-4B" in marked
    assert "Qwen3.5-27B" not in listed  # publishes D_eff/L alone, no gap


def test_gemma_paper_rows_get_their_configs_depth_and_the_gaps_d_eff():
    from deffcore.views.models_overview import DERIVED_FROM, paper_models, with_config_depth

    rows = {m["model"]: m for m in with_config_depth(paper_models())}
    g4 = rows["Gemma-3-4B"]
    assert g4["layers"] == 34 and g4["table"] == DERIVED_FROM
    # gap 2.2% (Table S5) at L = 34: D_eff = F_L (1 - 0.022), F_L = 68/35
    assert g4["deff_over_L"] == pytest.approx(68 / 35 * 0.978 / 34, rel=1e-12)
    assert (rows["Gemma-3-12B"]["layers"], rows["Gemma-3-27B"]["layers"]) == (48, 62)
    assert rows["Pythia-70M"]["deff_over_L"] == 0.205  # a published one stays
    assert rows["Pythia-70M"]["table"] == "Table 2"
    assert all(m.get("layers") is None for m in paper_models() if m["model"].startswith("Gemma"))
