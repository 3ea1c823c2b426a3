"""Tables of the further lenses show exactly the library's numbers, under human names."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from deffcore.labs import lens_figures, lens_tables
from deffcore.labs.aggregations import aggregation_table
from deffcore.labs.correlation_lab import correlate_points
from deffcore.measures.correlation import correlate
from deffcore.measures.synthetic import orthogonal_updates

POINTS = [
    {"model": "a1", "family": "A", "source": "paper", "x": 0.10, "y": 4.0},
    {"model": "a2", "family": "A", "source": "paper", "x": 0.07, "y": 2.0},
    {"model": "b1", "family": "B", "source": "cached", "x": 0.05, "y": 2.5},
    {"model": "c1", "family": "C", "source": "cached", "x": 0.03, "y": 1.0},
    {"model": "c2", "family": "C", "source": "sweep", "x": 0.02, "y": 0.5},
]


@pytest.fixture(scope="module")
def result():
    return correlate_points(POINTS, "x", "y")


def test_summary_is_scipy_on_the_points(result):
    x, y = [p["x"] for p in POINTS], [p["y"] for p in POINTS]
    row = lens_tables.correlation_summary(result).iloc[0]
    assert row["n (models)"] == 5
    assert row["Pearson r"] == pytest.approx(pearsonr(x, y)[0])
    assert row["p (Pearson)"] == pytest.approx(pearsonr(x, y)[1])
    assert row["Spearman ρ"] == pytest.approx(spearmanr(x, y)[0])
    assert row["p (Spearman, t approx.)"] == pytest.approx(spearmanr(x, y)[1])
    # n = 5 <= 9: the reported Spearman p is the exact permutation p, and the table says so
    assert row["p (Spearman)"] == row["p (Spearman, exact)"] != row["p (Spearman, t approx.)"]
    assert row["Spearman p from"].startswith("exact permutation over 120 orderings")


def test_leave_one_out_rows_and_the_extremes(result):
    frame = lens_tables.leave_one_out(result)
    assert list(frame["left out"]) == ["a1", "a2", "b1", "c1", "c2"]
    assert dict(zip(frame["left out"], frame["extreme"], strict=True)) == {
        "a1": "largest x", "a2": "", "b1": "", "c1": "", "c2": "smallest x"
    }  # fmt: skip
    keep = [p for p in POINTS if p["model"] != "b1"]
    direct = correlate([p["x"] for p in keep], [p["y"] for p in keep])
    row = frame.set_index("left out").loc["b1"]
    assert row["Pearson r"] == pytest.approx(direct.pearson_r)
    assert row["p (Spearman)"] == pytest.approx(direct.spearman_p)
    assert row["n (models)"] == 4


def test_leave_one_family_out_marks_one_model_families(result):
    frame = lens_tables.leave_one_family_out(result).set_index("family left out")
    assert list(frame.index) == ["A", "B", "C"]
    assert list(frame["models left out"]) == [2, 1, 2]
    assert frame.loc["B", "same as leaving out"] == "b1"
    assert frame.loc["A", "same as leaving out"] == ""
    loo = lens_tables.leave_one_out(result).set_index("left out")
    assert frame.loc["B", "Pearson r"] == loo.loc["b1", "Pearson r"]
    keep = [p for p in POINTS if p["family"] != "C"]
    direct = correlate([p["x"] for p in keep], [p["y"] for p in keep])
    assert frame.loc["C", "Spearman ρ"] == pytest.approx(direct.spearman_rho)


def test_too_small_subsets_say_why():
    small = correlate_points(POINTS[:3], "x", "y")
    frame = lens_tables.leave_one_out(small)
    assert (frame["skipped"] == "fewer than 3 models remain").all()
    assert frame["Pearson r"].isna().all()


def test_points_frame(result):
    frame = lens_tables.points_frame(result)
    assert list(frame.columns) == ["Model", "Family", "Source", "x", "y"]
    assert list(frame["y"]) == [p["y"] for p in POINTS]


def test_published_scores_frames():
    from deffcore.labs.correlation_lab import paper_score_tables

    frames = lens_tables.published_scores(paper_score_tables())
    assert set(frames) == {"Table S20", "Table S21"}
    assert "Pearson r" in frames["Table S20"].columns and len(frames["Table S20"]) > 0


def test_pruning_tolerance_rows():
    from deffcore.labs.panels import paper_pruning_rows

    mine = {"model": "m", "source": "pruning", "layers": 16, "deff_over_L": 0.1, "gap_pct": 5.0,
            "ppl0": 12.0, "k_110": 2, "f_110": 0.125, "n": 64, "n_heldout": 32}  # fmt: skip
    frame = lens_tables.pruning_tolerance([mine, *paper_pruning_rows()])
    assert frame.loc[0, "Source"] == "this machine (stored check)"
    assert frame.loc[0, "f₁.₁₀"] == 0.125 and frame.loc[0, "measured passages"] == 64
    llama = frame[frame["Model"] == "Llama-3.1-8B"].iloc[0]
    assert (llama["Source"], llama["k₁.₁₀"], llama["L (layers)"]) == ("paper (Table S17)", 1, 32)
    assert math.isnan(llama["Held-out passages"])  # the paper's rows have no sample sizes here


class _Run:
    """A run with S = min(i,j)/max(i,j) (orthogonal updates' closed form) under cka and the
    pooled states of orthogonal updates (a Euclidean path with right-angle turns)."""

    def __init__(self, L: int = 6):
        i = np.arange(1, L + 1)
        self.S = np.minimum.outer(i, i) / np.maximum.outer(i, i)
        self._states = orthogonal_updates(n=40, d=64, layers=L, seed=0).states

    def similarity(self, pooling, metric=None):
        return self.S

    def states(self, pooling):
        return self._states


def test_geometry_frame_on_the_orthogonal_reference():
    table = aggregation_table(_Run(), metrics=("cka",))
    frame = lens_tables.geometry_frame(table)
    assert list(frame.index) == ["arccos linear CKA", "Euclidean (pooled states)"]
    row = frame.loc["arccos linear CKA"]
    assert row["efficiency"] == pytest.approx(row["reference E_L"])  # the closed form E_L
    assert row["mean turning angle (°)"] == pytest.approx(90.0)  # exactly orthogonal turns
    assert row["D_eff / L"] == pytest.approx(2 / (6 + 1))  # F_L / L
    euclid = frame.loc["Euclidean (pooled states)"]
    assert euclid["efficiency"] == pytest.approx(table["trajectory"]["euclidean_efficiency"])
    fig = lens_figures.turning_angles_plot(table)
    cka, euclidean = fig.data
    assert list(cka.x) == [2, 3, 4, 5] and list(cka.y) == pytest.approx([90.0] * 4)
    assert euclidean.name == "Euclidean (pooled states)"


def test_geometry_frame_without_states():
    class Snapshot:
        def similarity(self, pooling, metric=None):
            return np.eye(4)

    table = aggregation_table(Snapshot(), metrics=("cka",))
    frame = lens_tables.geometry_frame(table)
    assert frame.loc["arccos linear CKA", "efficiency"] == pytest.approx(1 / 3)  # S = I
    assert frame.loc["Euclidean (pooled states)"].drop("geometry", errors="ignore").isna().all()
    assert len(lens_figures.turning_angles_plot(table).data) == 1


def test_pretrain_beside_paper_rows():
    final = [{"variant": "none", "seeds": 3, "gap_default": 34.7, "gap_default_sd": 0.6,
              "paper_gap_default": 41.3, "paper_gap_default_sd": 0.6, "val_loss": 2.3,
              "paper_val_loss": 5.06, "max_pos0_ratio": 1.2,
              "paper_max_pos0_ratio": 1.48}]  # fmt: skip
    frame = lens_tables.pretrain_beside_paper(final)
    ours, paper = frame.to_dict("records")
    assert ours["source"] == "this machine (3 seeds)" and paper["source"] == "paper (Table S8)"
    assert (ours["default gap %"], paper["default gap %"]) == (34.7, 41.3)
    assert (ours["validation loss"], paper["validation loss"]) == (2.3, 5.06)
    assert ours["sd of default gap"] == 0.6 and paper["sd of default gap"] == 0.6


def test_gw_beside_the_paper():
    gw = {"model": "m", "n_gw": 64, "layers": 4, "spearman_gw_cka": -0.8,
          "spearman_lag_gw": 0.3, "spearman_lag_cka": -0.5, "init": "product"}  # fmt: skip
    frame = lens_tables.gw_beside_paper(gw).set_index("Model")
    assert list(frame.columns) == [
        "starting coupling", "L (layers)", "ρ(GW, CKA)", "ρ(|i−j|, GW)", "ρ(|i−j|, CKA)"
    ]  # fmt: skip
    assert frame.loc["m (this run, n_gw = 64)", "ρ(GW, CKA)"] == -0.8
    assert frame.loc["Pythia-410M (paper)", "ρ(|i−j|, GW)"] == 0.45  # Table S22
    assert frame.loc["Llama-3.1-8B (paper)", "ρ(|i−j|, CKA)"] == -0.89
    assert lens_tables.gw_paper_note(gw) is None
    assert "Pythia-410M: -0.86 / +0.45 / -0.48" in "\n".join(lens_tables.gw_paper_lines(gw))


def test_a_default_start_result_shows_the_papers_start_beside_it():
    """SPEC 13.1: the default's figures, then the same run's from the paper's start, then
    Table S22."""
    paper = {"init": "product", "spearman_gw_cka": -0.2, "spearman_lag_gw": 0.3,
             "spearman_lag_cka": -0.5}  # fmt: skip
    gw = {"model": "m", "n_gw": 64, "layers": 4, "spearman_gw_cka": -0.99,
          "spearman_lag_gw": 0.95, "spearman_lag_cka": -0.5, "init": "both",
          "paper": paper}  # fmt: skip
    frame = lens_tables.gw_beside_paper(gw)
    rows = frame.to_dict("records")
    assert [r["starting coupling"] for r in rows[:2]] == ["both", "product (the paper's start)"]
    assert [r["ρ(GW, CKA)"] for r in rows[:2]] == [-0.99, -0.2]
    assert rows[0]["Model"] == rows[1]["Model"] == "m (this run, n_gw = 64)"
    assert "Pythia-410M (paper)" in set(frame["Model"])
    assert lens_tables.gw_paper_note(gw) is None
    lines = lens_tables.gw_paper_lines(gw)
    assert lines[0] == "  this run from the paper's start (product): -0.20 / +0.30 / -0.50"
    assert any("Pythia-410M: -0.86 / +0.45 / -0.48" in line for line in lines)


@pytest.mark.parametrize("init", ["both", "identity", None])
def test_gw_from_another_start_stands_alone(init):
    """Table S22 is compared only with numbers from the paper's start."""
    gw = {"model": "m", "n_gw": 64, "layers": 4, "spearman_gw_cka": -0.99,
          "spearman_lag_gw": 0.95, "spearman_lag_cka": -0.5, "init": init}  # fmt: skip
    frame = lens_tables.gw_beside_paper(gw)
    assert list(frame["Model"]) == ["m (this run, n_gw = 64)"]
    note = lens_tables.gw_paper_note(gw)
    assert note.startswith("Not compared with Table S22") and "'product'" in note
    assert lens_tables.gw_paper_lines(gw) == [f"  {note}"]


def test_ppl_k_frame_of_a_non_monotone_curve():
    from deffcore.labs.pruning import PruningResult

    curve = {0: 10.0, 1: 12.0, 2: 10.5, 4: float("inf")}  # k = 1 fails, k = 2 qualifies again
    check = PruningResult(
        model="m", layers=8, n=8, n_heldout=4, deff=2.0, bi=[0.1] * 8, local_deff=[0.0] * 8,
        order={"bi": list(range(8))}, ks=sorted(curve), ppl={"bi": curve}, heldout_tokens=50,
    ).to_dict()  # fmt: skip
    frame = lens_tables.ppl_k_frame(check)
    assert list(frame.index) == [0, 1, 2, 4]
    assert list(frame["PPL_k / PPL₀"][:3]) == pytest.approx([1.0, 1.2, 1.05])
    assert list(frame["≤ 1.10 PPL₀"]) == [True, False, True, False]
    assert (check["k_110"], check["k_110_contiguous"], check["k_110_monotone"]) == (2, 0, False)


def test_paper_table_s8():
    frame = lens_tables.paper_table_s8().set_index("variant")
    assert list(frame.index) == ["none", "no post", "no QK", "no post/no QK"]
    assert frame.loc["no post", "first non-BOS gap %"] == 22.8
    assert frame.loc["none", "sd of default gap"] == 0.6
    assert frame.loc["no post/no QK", "max pos-0 ratio"] == 5.06


def test_s18_table_names_each_quantity():
    from deffcore.labs.correlation_lab import s18_check

    check = s18_check()
    frame = lens_tables.s18_table(check)
    assert len(frame) == 32 and frame["agrees to the printed digits"].sum() == check["agree"]
    row = frame.set_index(["subset", "quantity"]).loc[("drop both", "f₁.₁₀: p (Pearson)")]
    (raw,) = [r for r in check["rows"]
              if (r["subset"], r["quantity"]) == ("drop both", "frac110_pearson_p")]  # fmt: skip
    assert row["published"] == raw["published"] == 0.14
    assert row["reconstructed (8 models, 2 k₁.₁₀ inferred)"] == raw["reconstructed"]
    assert row["recomputed (Table S17's 6 models)"] == raw["recomputed_six"]
    assert set(frame["quantity"]) >= {"k₁.₁₀: p (Spearman, t approx.)", "f₁.₁₀: Spearman ρ"}
