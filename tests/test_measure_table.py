"""The table across similarity measures (SPEC 17.4) against naive implementations."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.spatial.distance
import scipy.stats

import deffcore as dc
from deffcore.core.errors import DeffError, InvalidArgumentError
from deffcore.measures.similarity_measures import measure_matrix, pairs_matrix, prepare_layers
from deffcore.statistics.bootstrap import bootstrap_deff_over_L, resample_indices
from deffcore.statistics.calibration import calibrated_similarity
from deffcore.statistics.measure_table import (
    TABLE_MEASURES,
    MeasureTable,
    measure_table,
)
from deffcore.statistics.trust_rule import gap_of, regime_of


def _states(layers: int = 5, n: int = 40, d: int = 6, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.standard_normal((layers, n, d)), axis=0).astype(np.float32)


@pytest.fixture(scope="module")
def table() -> MeasureTable:
    return measure_table(_states(), B=4, seed=3, permutations=19)


def test_point_is_d_eff_of_each_measures_matrix(table):
    x = _states()
    assert [r.measure for r in table.rows] == list(TABLE_MEASURES)
    for r in table.rows:
        if r.measure in ("cka", "unbiased_cka", "cosine"):
            s = dc.similarity_matrix(x, r.measure)
        else:
            s = measure_matrix(x, r.measure)
        assert r.deff == pytest.approx(dc.effective_depth(s), rel=1e-12)
        assert r.deff_over_L == pytest.approx(dc.effective_depth(s) / 5, rel=1e-12)
        f_l = 2 * 5 / 6
        assert r.gap_pct == pytest.approx(100 * (1 - dc.effective_depth(s) / f_l), rel=1e-12)


def test_interval_is_the_percentile_of_recomputed_replicates_on_one_set_of_indices(table):
    x = _states()
    idx = resample_indices(40, 4, 3)
    # linear CKA: the project's own bootstrap with the same B and seed
    ref = bootstrap_deff_over_L(x, B=4, seed=3)
    assert (table.row("cka").low, table.row("cka").high) == pytest.approx((ref.low, ref.high))
    # procrustes, svcca: the measure of the literally resampled rows
    for measure in ("procrustes", "svcca"):
        vals = [dc.effective_depth(measure_matrix(x[:, i], measure)) / 5 for i in idx]
        r = table.row(measure)
        assert (r.low, r.high) == pytest.approx(tuple(np.quantile(vals, [0.025, 0.975])))


def test_interval_is_reproducible_with_its_seed_and_moves_with_another():
    x = _states()
    a = measure_table(x, ("cka", "mutual_knn"), B=3, seed=1, permutations=19)
    b = measure_table(x, ("cka", "mutual_knn"), B=3, seed=1, permutations=19)
    c = measure_table(x, ("cka", "mutual_knn"), B=3, seed=2, permutations=19)

    def numbers(t: MeasureTable) -> list[dict]:
        return [{k: v for k, v in r.items() if k != "seconds"} for r in t.to_dict()["rows"]]

    assert numbers(a) == numbers(b)
    assert a.row("cka").low != c.row("cka").low


def test_regime_and_calibrated_column(table):
    x = _states()
    for r in table.rows:
        gap_range = (gap_of(r.high, 5), gap_of(r.low, 5))
        assert (r.gap_low, r.gap_high) == pytest.approx(gap_range)
        assert r.regime == regime_of(r.gap_pct, gap_range)
        assert r.sub_reference == (r.regime == "below")
    for measure in ("cka", "procrustes", "rsa"):
        cal = calibrated_similarity(x, measure, permutations=19, seed=3)
        assert table.row(measure).cal == pytest.approx(cal.deff_cal / 5, rel=1e-12)
    assert table.row("unbiased_cka").cal is None and table.row("cosine").cal is None


def _naive_knn(x: np.ndarray, k: int, groups: np.ndarray) -> list[list[int]]:
    u = x / np.linalg.norm(x, axis=1, keepdims=True)
    g = u @ u.T  # one product, as the measure's (copies' cosines are then exact ties)
    out = []
    for a in range(len(u)):
        cands = [(-float(g[a, b]), b) for b in range(len(u)) if groups[b] != groups[a]]
        out.append([b for _, b in sorted(cands)[:k]])
    return out


def test_mutual_knn_replicate_never_counts_a_copy_as_a_neighbour():
    x = _states(layers=3, n=30, d=5).astype(np.float64)
    idx = resample_indices(30, 1, 7)[0]
    xr = x[:, idx]
    prepared = prepare_layers(xr, "mutual_knn", groups=idx)
    naive = [_naive_knn(xr[layer], 10, idx) for layer in range(3)]
    for layer in range(3):
        assert prepared[layer].idx.tolist() == naive[layer]
    got = pairs_matrix(prepared, "mutual_knn")
    want = np.mean([len(set(naive[0][a]) & set(naive[1][a])) / 10 for a in range(30)])
    assert got[0, 1] == pytest.approx(want, abs=1e-15)
    assert got[0, 1] != pytest.approx(measure_matrix(xr, "mutual_knn")[0, 1])


def test_rsa_replicate_leaves_out_the_entries_between_copies():
    x = _states(layers=2, n=25, d=5).astype(np.float64)
    idx = resample_indices(25, 1, 4)[0]
    xr = x[:, idx]
    got = pairs_matrix(prepare_layers(xr, "rsa", groups=idx), "rsa")[0, 1]
    a, b = np.triu_indices(25, k=1)
    keep = idx[a] != idx[b]
    # copies give exactly tied distances; rounding makes scipy's ties exact too
    rdms = [np.round(scipy.spatial.distance.pdist(layer, "correlation")[keep], 12) for layer in xr]
    assert got == pytest.approx(scipy.stats.spearmanr(*rdms).statistic, abs=1e-10)


def test_bad_input_is_one_sentence():
    x = _states()
    with pytest.raises(InvalidArgumentError, match="Unknown similarity measure 'cca'"):
        measure_table(x, ("cka", "cca"))
    with pytest.raises(DeffError, match="B"):
        measure_table(x, ("cka",), B=1)
    with pytest.raises(InvalidArgumentError, match="permutations must be a whole number from 1"):
        measure_table(x, ("cka",), permutations=10**9)  # refused, never drawn for hours
    with pytest.raises(InvalidArgumentError, match="groups"):
        prepare_layers(x, "rsa", groups=np.arange(3))


def test_an_undefined_measure_gets_its_reason_not_a_traceback():
    x = _states()
    x[2, 5] = 0.0  # a zero vector: cosine and the neighbourhoods are undefined
    t = measure_table(x, ("cka", "cosine", "mutual_knn"), B=2, permutations=19)
    assert t.row("cka").undefined is None
    assert "zero" in t.row("cosine").undefined and t.row("cosine").deff is None
    assert "zero" in t.row("mutual_knn").undefined
    assert "undefined" in t.text()


def test_round_trip_and_text(table):
    back = MeasureTable.from_dict(table.to_dict())
    assert back.to_dict() == table.to_dict()
    assert "orthogonal Procrustes" in table.text() and "F_L/L = 0.3333" in table.text()
    with pytest.raises(DeffError, match="Not a measure table"):
        MeasureTable.from_dict({"rows": []})


def test_a_runs_table_is_kept_beside_it_and_only_missing_rows_are_computed(
    tiny_dataset, monkeypatch
):
    import deffcore.statistics.measure_table as mt
    from deffcore.core.files import cache_dir

    m = dc.measure("tiny-llama", dataset=tiny_dataset, n=12, max_tokens=32)
    first = m.measure_table(measures=("cka", "procrustes"), B=2)
    assert (cache_dir() / m.spec.key() / "measures.json").is_file()
    assert first.row("cka").deff_over_L == pytest.approx(m.summary().deff_over_L, rel=1e-12)
    again = dc.measure("tiny-llama", dataset=tiny_dataset, n=12, max_tokens=32)
    assert again.cached and again.stored_measure_table().to_dict() == first.to_dict()
    asked = []
    real = mt.measure_table
    monkeypatch.setattr(
        mt, "measure_table", lambda x, ms, **kw: asked.append(ms) or real(x, ms, **kw)
    )
    both = again.measure_table(measures=("rsa", "cka"), B=2)
    assert asked == [("rsa",)]
    assert [r.measure for r in both.rows] == ["rsa", "cka"]
    assert both.row("cka") == first.row("cka")
    again.measure_table(measures=("cka",), B=3)  # another B: computed again
    assert asked[-1] == ("cka",)
    page = again.measure_table(measures=("cka",), B=3)._repr_html_()
    assert "<td>linear CKA</td>" in page and "95% interval (B = 3)" in page
    assert list(again.measure_table(measures=("cka",), B=3).frame()["measure"]) == ["cka"]


def test_cca_rows_say_when_n_is_too_small_for_them():
    x = _states(layers=3, n=8, d=10)
    t = measure_table(x, ("cka", "svcca", "pwcca"), B=2, permutations=19)
    assert t.row("cka").caveat is None
    assert "N - 1 = 7 <= d = 10" in t.row("pwcca").caveat and t.row("svcca").caveat
    assert t.row("pwcca").deff_over_L == pytest.approx(1 / 3)  # every canonical correlation 1
    assert "PWCCA: N - 1 = 7" in t.caption() and "* SVCCA" in t.text()
    assert measure_table(_states(), ("pwcca",), B=2).row("pwcca").caveat is None  # N = 40 > d
