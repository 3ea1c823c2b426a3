"""The tables pages show, computed in deffcore (no Streamlit): the paper's published gaps and
controls (deffcore.views.paper) and one run's linear-vs-unbiased comparison
(deffcore.runs.tables)."""

from __future__ import annotations

import pandas as pd
import pytest

import deffcore.views.paper
from deffcore.runs.tables import metric_comparison
from deffcore.views.paper import paper_controls, paper_default_gaps, paper_table


def test_paper_table_is_a_fresh_copy_and_none_without_the_file(monkeypatch, tmp_path):
    first = paper_table()
    assert {"source", "model", "quantity", "value", "note"} <= set(first.columns)
    first.loc[:, "value"] = -1.0  # a page may change its copy ...
    assert (paper_table()["value"] != -1.0).any()  # ... never the next page's
    monkeypatch.setattr(deffcore.views.paper, "paper_reference_path", lambda: tmp_path / "none.csv")
    assert paper_table() is None


def test_default_gaps_prefer_table_2_and_skip_interventions():
    gaps = paper_default_gaps(paper_table()).set_index("model")
    assert gaps.index.is_unique
    assert gaps.loc["Pythia-70M", "value"] == 28.2  # Table 2, not Table S4's 28.3
    assert gaps.loc["Pythia-70M", "source"] == "Table 2"
    assert gaps.loc["Gemma-3-4B", "value"] == 2.2  # Table S5, intervention none (not S6's)
    assert set(gaps["source"]) <= set(deffcore.views.paper.DEFAULT_GAP_TABLES)


def test_controls_are_one_published_gap_per_model_and_pooling():
    pub = paper_controls(paper_table())
    assert not pub.duplicated(["model", "setting"]).any()
    assert set(pub["source"]) <= set(deffcore.views.paper.CONTROL_TABLES)
    row = pub[(pub["model"] == "Pythia-70M") & (pub["setting"] == "default")].iloc[0]
    assert (row["source"], row["value"]) == ("Table S4", 28.3)
    assert not pub["note"].fillna("").str.contains("no post|no QK").any()


class _View:
    """A run view with two metrics' headlines (a snapshot may lack one: KeyError)."""

    def __init__(self, metrics):
        self.metrics = metrics

    def headline(self, pooling, metric, K=None):
        if metric not in self.metrics:
            raise KeyError(metric)
        h = self.metrics[metric]
        return type("H", (), {**h, "pooling": pooling, "K": K})


def test_metric_comparison_rounds_each_metrics_headline():
    view = _View(
        {
            "cka": {"deff": 1.23456, "deff_over_L": 0.123456, "gap_pct": 12.345, "rho1": 0.98765},
            "unbiased_cka": {"deff": 2.0, "deff_over_L": 0.2, "gap_pct": -5.06, "rho1": 0.5},
        }
    )
    table = pd.DataFrame(metric_comparison(view, "default", 3))
    assert list(table["similarity"]) == ["linear CKA", "unbiased CKA"]
    assert list(table["D_eff"]) == [1.235, 2.0]
    assert list(table["D_eff / L"]) == [0.1235, 0.2]
    assert list(table["gap to F_L (%)"]) == [12.3, -5.1]
    assert list(table["ρ̂(1)"]) == [0.988, 0.5]
    assert metric_comparison(_View({"cka": view.metrics["cka"]})) is None


def test_metric_comparison_of_a_measured_run():
    from deffcore.runs.measure import measure
    from deffcore.views.run import Run

    view = Run.from_measurement(measure(model="tiny-llama", n=8, max_tokens=16))
    rows = metric_comparison(view)
    assert isinstance(rows, list) and all(isinstance(row, dict) for row in rows)
    table = pd.DataFrame(rows).set_index("similarity")
    for metric, name in (("cka", "linear CKA"), ("unbiased_cka", "unbiased CKA")):
        h = view.headline("default", metric)
        assert table.loc[name, "D_eff / L"] == pytest.approx(round(h.deff_over_L, 4))
