"""A run's point-estimate matrices of the SPEC 17 measures (SPEC 17.4): read, never computed,
by `Measurement.similarity`; computed on request; kept with the run (schema-checked) and in
its snapshot; their D_eff is the table's point estimate."""

from __future__ import annotations

import json

import numpy as np
import pytest

import deffcore as dc
from deffcore.core.errors import MeasureNotComputedError
from deffcore.measures.depth import effective_depth
from deffcore.runs.action_costs import MEASURE_BENCH_S, measure_cost
from deffcore.runs.measure import MEASURES_FILE, measure, stored_measure_matrices
from deffcore.statistics.measure_table import measure_similarity
from deffcore.views.run import Run
from deffcore.views.run_schema import SnapshotError, check_snapshot

RUN = {"model": "tiny-llama", "dataset": "bbc-news", "n": 16, "max_tokens": 32, "seed": 0}


@pytest.fixture
def run(cache_dir):
    return measure(**RUN)


def _file(m):
    from deffcore.core.files import cache_dir

    return cache_dir() / m.spec.key() / MEASURES_FILE


def test_a_measure_is_read_never_computed_by_similarity(run, monkeypatch):
    import deffcore.statistics.measure_table as mt

    monkeypatch.setattr(mt, "_matrix", lambda *a, **k: pytest.fail("computed"))
    with pytest.raises(MeasureNotComputedError, match="holds no orthogonal Procrustes matrix"):
        run.similarity("default", "procrustes")
    with pytest.raises(MeasureNotComputedError, match=r"takes about .* here"):
        run.summary("default", "procrustes")


def test_the_matrix_computed_alone_is_the_tables_point_estimate(run):
    S = run.measure_similarity("default", "procrustes")
    table = dc.measure_table(run.states("default"), ("procrustes", "rsa"), B=2, permutations=1)
    assert effective_depth(S) == table.row("procrustes").deff  # the same number, exactly
    assert run.summary("default", "procrustes").deff == table.row("procrustes").deff
    np.testing.assert_array_equal(S, measure_similarity(run.states("default"), "procrustes"))
    again = measure(**RUN)  # read back from the run's cache entry, full precision
    np.testing.assert_array_equal(again.similarity("default", "procrustes"), S)
    assert again.similarity("no_pos0", "cka") is not None
    with pytest.raises(MeasureNotComputedError):
        again.similarity("no_pos0", "procrustes")  # kept per pooling


def test_the_table_keeps_its_rows_matrices(run):
    table = run.measure_table("default", ("cka", "rsa", "mutual_knn"), B=2, permutations=1)
    assert table.row("mutual_knn").undefined  # k + 1 distinct passages in a replicate: none
    again = measure(**RUN)
    S = again.similarity("default", "rsa")
    assert effective_depth(S) == table.row("rsa").deff
    assert again.stored_measure_table("default").row("rsa").deff == effective_depth(S)
    with pytest.raises(MeasureNotComputedError):  # an undefined row keeps no matrix
        again.similarity("default", "mutual_knn")
    # a later matrix joins the kept table and matrices, dropping neither
    again.measure_similarity("default", "mutual_knn")
    kept = stored_measure_matrices(run.spec, run.layers, run.n)["default"]
    assert set(kept) == {"mutual_knn", "rsa"}
    assert measure(**RUN).stored_measure_table("default") is not None


@pytest.mark.parametrize(
    "change",
    [
        lambda S: S[:-1],  # not L x L
        lambda S: [[*r[:-1], 3.0] for r in S],  # outside every measure's bound
        lambda S: [[0.5 if i == j else v for j, v in enumerate(r)] for i, r in enumerate(S)],
        lambda S: "not a matrix",
    ],
)
def test_a_kept_matrix_that_is_not_one_reads_as_absent(run, change):
    run.measure_similarity("default", "cknna")
    path = _file(run)
    data = json.loads(path.read_text())
    data["matrices"]["default"]["cknna"] = change(data["matrices"]["default"]["cknna"])
    path.write_text(json.dumps(data))
    with pytest.raises(MeasureNotComputedError):
        measure(**RUN).similarity("default", "cknna")


def test_the_snapshot_carries_held_matrices_checked(run):
    run.measure_similarity("default", "svcca")
    data = json.loads(json.dumps(Run.from_measurement(run).to_snapshot()))
    assert set(data["similarity"]["default"]) == {"cka", "unbiased_cka", "cosine", "svcca"}
    assert set(data["similarity"]["no_pos0"]) == {"cka", "unbiased_cka", "cosine"}
    view = Run.from_snapshot(data)
    want = effective_depth(run.similarity("default", "svcca"))
    assert view.headline("default", "svcca").deff == pytest.approx(want, abs=1e-4)
    bad = json.loads(json.dumps(data))
    bad["similarity"]["default"]["svcca"][0][1] = 0.123  # no longer symmetric
    with pytest.raises(SnapshotError, match="symmetric"):
        check_snapshot(bad)
    bad = json.loads(json.dumps(data))
    bad["similarity"]["default"]["hsic"] = bad["similarity"]["default"]["cka"]
    with pytest.raises(SnapshotError):
        check_snapshot(bad)


def test_the_cost_is_the_benchmarks_at_its_size_and_grows_with_n():
    for m, seconds in MEASURE_BENCH_S.items():
        assert measure_cost(m, n=4096, d=576, layers=31).seconds == pytest.approx(seconds)
    small = measure_cost("rsa", n=512, d=576, layers=31).seconds
    assert small < MEASURE_BENCH_S["rsa"] / 50  # N^2 log N: 64x fewer pairs, a shorter sort
    assert "BENCHMARKS.md" in measure_cost("procrustes", n=64, d=8, layers=4).line()


def test_trust_and_the_bos_answer_refuse_a_measure_in_one_sentence(run):
    from deffcore.core.errors import DeffError
    from deffcore.statistics.bos_answer import run_answer

    run.measure_similarity("default", "procrustes")  # held: its headline exists
    assert run.view().headline("default", "procrustes").deff > 0
    with pytest.raises(DeffError, match="A trust level is defined for linear CKA, unbiased"):
        run.trust("default", "procrustes")
    with pytest.raises(DeffError, match="The BOS answer is defined for linear CKA"):
        run_answer(run.view(), "procrustes")
    with pytest.raises(DeffError, match="'hsic'"):
        run.trust("default", "hsic")


def test_each_measure_is_held_to_its_own_bound():
    """CKNNA's kNN-restricted HSIC is not an inner product: its matrix may pass 1 (1.001 seen on
    random states) and is kept; Procrustes' may not (SPEC 17.1, `similarity_bound`)."""
    from deffcore.runs.measure import measure_matrix_of

    S = np.eye(3)
    S[0, 1] = S[1, 0] = 1.001
    assert measure_matrix_of(S.tolist(), 3, "cknna") is not None
    assert measure_matrix_of(S.tolist(), 3, "procrustes") is None
    S[0, 1] = S[1, 0] = 2.5
    assert measure_matrix_of(S.tolist(), 3, "cknna") is None


def test_a_snapshot_holds_each_measure_to_its_own_bound(run):
    run.measure_similarity("default", "procrustes")
    data = json.loads(json.dumps(Run.from_measurement(run).to_snapshot()))
    L = len(data["similarity"]["default"]["cka"])
    S = np.eye(L)
    S[0, 1] = S[1, 0] = 1.001
    data["similarity"]["default"]["cknna"] = S.tolist()
    check_snapshot(data)  # CKNNA may pass 1
    data["similarity"]["default"]["procrustes"] = S.tolist()
    with pytest.raises(SnapshotError, match="procrustes"):
        check_snapshot(data)
