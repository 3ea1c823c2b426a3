"""The correlation lab: Table S18 from the paper's own values, panels, scores, geometry."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from deffcore.core.errors import DeffError, InvalidArgumentError
from deffcore.inputs.model import Kind
from deffcore.labs import correlation_lab, panels
from deffcore.labs.scores import read_scores
from deffcore.measures.correlation import correlate

# Table S17 as printed in the paper (model, L, D_eff/L, k_1.10), typed in by hand.
S17 = [
    ("OLMo-2-1B", 16, 0.070, 0),
    ("Pythia-1.4B", 24, 0.059, 0),
    ("Mistral-7B", 32, 0.048, 1),
    ("Llama-3.1-8B", 32, 0.046, 1),
    ("OLMo-2-7B", 32, 0.036, 1),
    ("Qwen3.5-9B", 32, 0.036, 1),
]


def test_paper_pruning_rows_are_table_s17():
    rows = panels.paper_pruning_rows()
    assert [(r["model"], r["layers"], r["deff_over_L"], r["k_110"]) for r in rows] == S17
    assert rows[2]["f_110"] == 0.031 and rows[0]["ppl0"] == 6.54


def test_s18_recomputed_from_the_six_s17_models():
    x = [r[2] for r in S17]
    k = [r[3] for r in S17]
    f = [r[3] / r[1] for r in S17]
    check = correlation_lab.s18_check()
    full = check["recomputed_six"][0]
    assert full["subset"] == "full panel" and full["n"] == 6
    assert full["k110_pearson_r"] == pytest.approx(pearsonr(x, k)[0])
    assert full["frac110_pearson_r"] == pytest.approx(pearsonr(x, f)[0])
    assert full["k110_spearman_rho"] == pytest.approx(spearmanr(x, k)[0])
    assert full["k110_spearman_p"] == pytest.approx(spearmanr(x, k)[1])
    # pinned: the six alone do not give the published full-panel r = -0.90 (n = 8)
    assert full["k110_pearson_r"] == pytest.approx(-0.8908, abs=5e-5)


def test_s18_reconstruction_agrees_with_29_of_32_printed_values():
    check = correlation_lab.s18_check()
    assert (check["agree"], check["total"]) == (29, 32)
    off = {(r["subset"], r["quantity"]): r for r in check["rows"] if not r["agrees"]}
    assert set(off) == {
        ("drop OLMo-2-1B", "k110_spearman_rho"),
        ("drop Qwen3.5-4B", "k110_spearman_rho"),
        ("drop Qwen3.5-4B", "frac110_pearson_p"),
    }
    # each of the three is one unit off in the last printed digit (module docstring)
    for (_, quantity), r in off.items():
        unit = 0.01
        assert unit / 2 < abs(r["reconstructed"] - r["published"]) <= 1.5 * unit, quantity
    # n of every subset as printed
    printed_n = {"full panel": 8, "drop OLMo-2-1B": 7, "drop Qwen3.5-4B": 7, "drop both": 6}
    assert {r["subset"]: r["n"] for r in check["reconstructed_eight"]} == printed_n


def test_s18_caption_against_its_numbers_by_an_independent_count():
    """The caption's "largest- and smallest-D_eff/L endpoints" is not what the rows
    drop; counted here with scipy alone, from the typed-in S17 rows and Table S13's values."""
    panel = {m: (L, x, k) for m, L, x, k in S17}
    panel["Qwen3.5-4B"] = (32, 0.034, 2)  # Table S13 D_eff/L; k inferred (module docstring)
    panel["Qwen3.5-27B"] = (64, 0.021, 2)
    printed = {  # the two rows that drop Qwen3.5-4B, as printed (f_1.10 then k_1.10)
        ("Qwen3.5-4B",): [-0.82, 0.03, -0.80, 0.03, -0.94, 0.002, -0.91, 0.005],
        ("OLMo-2-1B", "Qwen3.5-4B"): [-0.68, 0.14, -0.66, 0.15, -0.92, 0.009, -0.86, 0.03],
    }

    def stats(dropped):
        kept = [v for m, v in panel.items() if m not in dropped]
        x = [v[1] for v in kept]
        out = []
        for y in ([v[2] / v[0] for v in kept], [v[2] for v in kept]):
            out += [*pearsonr(x, y)[:2], *spearmanr(x, y)[:2]]
        return out

    def agreeing(swap):
        count = 0
        for dropped, values in printed.items():
            ours = stats(tuple(swap.get(m, m) for m in dropped))
            for o, v in zip(ours, values, strict=True):
                digits = max(2, len(repr(v).partition(".")[2]))
                count += abs(o - v) <= 0.5 * 10.0**-digits + 1e-12
        return count

    smallest = min(panel, key=lambda m: panel[m][1])
    largest = max(panel, key=lambda m: panel[m][1])
    c = correlation_lab.s18_endpoint_conflict()
    assert (c["largest"], c["smallest"]) == (largest, smallest) == ("OLMo-2-1B", "Qwen3.5-27B")
    assert c["dropped_instead"] == "Qwen3.5-4B" != smallest and c["values"] == 16
    assert c["agree_labels"] == agreeing({}) == 14
    assert c["agree_caption"] == agreeing({"Qwen3.5-4B": smallest}) == 3
    text = c["sentence"]
    assert '"drop the largest- and smallest-D_eff/L endpoints"' in text
    assert "reproduces 14 and dropping Qwen3.5-27B 3" in text and "largest f_1.10 (2/32)" in text
    assert correlation_lab.s18_check()["conflict"] == c


def test_the_paper_spearman_p_is_scipys_t_not_the_exact_permutation_p():
    full = correlation_lab.s18_check()["reconstructed_eight"][0]
    assert round(full["k110_spearman_p"], 3) == 0.001  # printed 0.001
    assert full["k110_spearman_p_exact"] > 0.004  # the exact p would print as 0.005


def test_agrees_uses_the_printed_precision():
    assert (
        correlation_lab.printed_decimals("-0.9") == 2
        and correlation_lab.printed_decimals("0.002") == 3
    )
    assert correlation_lab.agrees(-0.9034, "-0.9") and not correlation_lab.agrees(-0.9061, "-0.9")
    assert correlation_lab.agrees(0.0021, "0.002") and not correlation_lab.agrees(0.0026, "0.002")


# ---------------------------------------------------------------------------------------------
# Scores against a panel


@pytest.fixture
def fake_panel(monkeypatch):
    rows = {
        "a": {"model": "A", "family": "F1", "source": "cached", "deff_over_L": 0.10},
        "b": {"model": "B", "family": "F1", "source": "cached", "deff_over_L": 0.08},
        "c": {"model": "C", "family": "F2", "source": "paper", "deff_over_L": 0.05},
        "org-d": {"model": "org/D", "family": "F2", "source": "sweep", "deff_over_L": 0.03},
        "e": {"model": "E", "family": "F3", "source": "paper", "deff_over_L": None},
    }
    panel = {panels.model_key(r["model"]): r for r in rows.values()}
    monkeypatch.setattr(correlation_lab, "model_panel", lambda *a, **k: panel)
    return panel


def test_score_correlations_join_scores_to_the_panel(tmp_path, fake_panel):
    path = tmp_path / "s.csv"
    path.write_text("model,task,score\nA,T,1\nb,T,2\nC,T,4\nD,T,3.5\nA,U,1\nB,U,2\n")
    out = correlation_lab.score_correlations(read_scores(path))
    t, u = out["results"]
    assert t["task"] == "T" and t["n"] == 4
    direct = correlate([0.10, 0.08, 0.05, 0.03], [1, 2, 4, 3.5], families=["F1", "F1", "F2", "F2"])
    assert t["pearson_r"] == pytest.approx(direct.pearson_r)
    assert t["spearman_p"] == pytest.approx(direct.spearman_p)
    assert [p["source"] for p in t["points"]] == ["cached", "cached", "paper", "sweep"]
    assert "skipped" in u and u["n"] == 2
    assert out["paper"]["Table S20"][0]["task"] == "MMLU"


def test_unknown_models_are_refused_or_left_out(tmp_path, fake_panel):
    path = tmp_path / "s.csv"
    path.write_text("model,task,score\nA,T,1\nB,T,2\nC,T,4\nE,T,1\nZ,T,3\n")
    with pytest.raises(InvalidArgumentError, match=r"no deff_over_L in the panel.*E, Z"):
        correlation_lab.score_correlations(read_scores(path))
    out = correlation_lab.score_correlations(read_scores(path), ignore_unknown=True)
    assert out["unknown_models"] == ["E", "Z"] and out["results"][0]["n"] == 3
    with pytest.raises(InvalidArgumentError, match="Unknown x"):
        correlation_lab.score_correlations(read_scores(path), x="nope")


# ---------------------------------------------------------------------------------------------
# Panels from the cache, a sweep file, stored pruning checks


def test_sweep_panel_json_and_csv(tmp_path):
    cells = [
        {"model": "m1", "status": "done", "intervention": "none", "deff_over_L": 0.1,
         "gap_pct": 10},
        {"model": "m1", "status": "cached", "intervention": "none", "deff_over_L": 0.2},
        {"model": "m1", "status": "failed", "intervention": "none", "deff_over_L": None},
        {"model": "m1", "status": "done", "intervention": "no_post", "deff_over_L": 0.9},
        {"model": "random:m1:0", "status": "done", "intervention": "none", "deff_over_L": 0.9},
        {"model": "m2", "status": "done", "intervention": "none", "deff_over_L": 0.3},
    ]  # fmt: skip
    js = tmp_path / "sweep.json"
    js.write_text(json.dumps({"engine": "serial", "cells": cells}))
    rows = {r["model"]: r for r in panels.sweep_panel(js)}
    assert rows["m1"]["deff_over_L"] == pytest.approx(0.15) and rows["m1"]["runs"] == 2
    assert rows["m1"]["gap_pct"] == 10 and set(rows) == {"m1", "m2"}
    csv = tmp_path / "sweep.csv"
    csv.write_text("model,deff_over_L\nm3,0.4\nm3,0.6\n")
    assert panels.sweep_panel(csv)[0]["deff_over_L"] == pytest.approx(0.5)
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": []}')
    with pytest.raises(InvalidArgumentError, match="no list of cells"):
        panels.sweep_panel(bad)
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        panels.sweep_panel(tmp_path / "none.json")


@pytest.fixture
def tiny_counts_as_trained(monkeypatch):
    """The tiny test models stand in for trained ones here (panels leave them out otherwise)."""
    monkeypatch.setattr(panels, "RANDOM_WEIGHTS", (Kind.RANDOM,))


def test_random_weights_are_never_in_a_panel(tiny_dataset):
    from deffcore.runs.measure import measure

    measure("tiny-llama", dataset=tiny_dataset, n=6, max_tokens=16)
    assert panels.cached_panel() == [] and panels.geometry_panel() == []


def test_cached_panel_keeps_the_largest_run_and_wins_over_the_paper(
    tiny_dataset, tiny_counts_as_trained
):
    from deffcore.runs.measure import measure

    small = measure("tiny-llama", dataset=tiny_dataset, n=6, max_tokens=16)
    big = measure("tiny-llama", dataset=tiny_dataset, n=10, max_tokens=16)
    measure("random:tiny-llama:1", dataset=tiny_dataset, n=10, max_tokens=16)  # never in the panel
    rows = panels.cached_panel()
    assert [r["model"] for r in rows] == ["tiny-llama"]
    assert rows[0]["n"] == big.n and rows[0]["deff_over_L"] == big.summary().deff_over_L
    assert small.n < big.n
    panel = panels.model_panel(("cached", "paper"))
    assert panel["tiny-llama"]["source"] == "cached"
    assert panel["llama-3.1-8b"]["source"] == "paper"
    assert panels.model_key("meta-llama/Llama-3.1-8B") == "llama-3.1-8b"
    with pytest.raises(InvalidArgumentError, match="Unknown panel source"):
        panels.model_panel(("cached", "web"))


def _store_check(model: str, layers: int, deff_over_L: float, k: int, n_heldout: int = 4):
    from deffcore.labs.pruning import PruningResult
    from deffcore.labs.store import write_result

    curve = {0: 10.0, **{kk: (10.5 if kk <= k else 20.0) for kk in (1, 2, 4, 6, 8) if kk < layers}}
    result = PruningResult(
        model=model, layers=layers, n=8, n_heldout=n_heldout, deff=deff_over_L * layers,
        bi=[0.1] * layers, local_deff=[0.0] * layers, order={"bi": list(range(layers))},
        ks=sorted(curve), ppl={"bi": curve}, heldout_tokens=50,
    )  # fmt: skip
    write_result("pruning", {"model": model, "n_heldout": n_heldout}, result.to_dict())


def test_pruning_correlations_from_stored_checks():
    _store_check("m1", 16, 0.07, 0)
    _store_check("m1", 16, 0.99, 8, n_heldout=2)  # fewer held-out passages: not the one kept
    _store_check("m2", 24, 0.05, 1)
    _store_check("m3", 32, 0.04, 2)
    _store_check("m4", 32, 0.03, 4)
    out = correlation_lab.pruning_correlations()
    f, k = out["results"]
    assert (f["y"], k["y"], f["n"]) == ("f_110", "k_110", 4)
    x = [0.07, 0.05, 0.04, 0.03]
    assert sorted(p["x"] for p in k["points"]) == pytest.approx(sorted(x))
    by_model = {p["model"]: p["y"] for p in k["points"]}
    assert by_model == {"m1": 0, "m2": 1, "m3": 2, "m4": 4}
    assert k["pearson_r"] == pytest.approx(pearsonr(x, [0, 1, 2, 4])[0])
    assert out["paper"]["agree"] == 29
    both = correlation_lab.pruning_correlations(with_paper=True)
    assert both["results"][0]["n"] == 10
    with pytest.raises(InvalidArgumentError, match="records deff_over_L and gap_pct"):
        correlation_lab.pruning_correlations(x="rho1")


def test_pruning_correlations_need_three_checks():
    with pytest.raises(DeffError, match="Only 0 models with a stored pruning check"):
        correlation_lab.pruning_correlations()


def test_geometry_correlations_over_cached_runs(tiny_dataset, tiny_counts_as_trained):
    from deffcore.measures.geometry import geodesic_efficiency
    from deffcore.runs.measure import measure

    models = ("tiny-llama", "tiny-gpt2", "tiny-qwen2")
    runs = [measure(m, dataset=tiny_dataset, n=8, max_tokens=16) for m in models]
    out = correlation_lab.geometry_correlations()
    geo, euc = out["results"]
    assert geo["y"] == "geodesic_efficiency" and geo["n"] == 3
    expected = {m.spec.model: geodesic_efficiency(m.states("default")).efficiency for m in runs}
    got = {p["model"]: p["y"] for p in geo["points"]}
    assert got == pytest.approx(expected)
    assert np.isfinite(euc["pearson_r"]) or euc["warnings"]
    assert out["paper"]["figure_s6_pearson_r"] == 0.65


def test_stored_checks_of_random_weights_are_no_pruning_points():
    """The Models page lists every stored check; a correlation takes trained weights only."""
    for model, k in (("m2", 1), ("m3", 2), ("m4", 4), ("tiny-llama", 0), ("random:m2:0", 8)):
        _store_check(model, 32, 0.05, k)
    assert {r["model"] for r in panels.stored_pruning_rows()} == {
        "m2", "m3", "m4", "tiny-llama", "random:m2:0"
    }  # fmt: skip
    assert {r["model"] for r in panels.pruning_panel()} == {"m2", "m3", "m4"}
    (f, _) = correlation_lab.pruning_correlations()["results"]
    assert {p["model"] for p in f["points"]} == {"m2", "m3", "m4"}


def test_a_panel_number_beyond_floats_range_is_no_number():
    """A sweep file's 10**400 is a JSON number but no float: left out, not an OverflowError."""
    from deffcore.labs.panels import _number

    assert _number(10**400) is None and _number("0.5") == 0.5 and _number("x") is None
