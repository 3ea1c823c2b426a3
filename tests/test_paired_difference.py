"""`PairedDifference.from_dict`: a stored difference read back, every field checked."""

from __future__ import annotations

import numpy as np
import pytest

from deffcore.statistics.paired import PairedDifference

NAMES = {"a": "bos=none", "b": "bos=add", "scale": "gap points"}


def _difference() -> PairedDifference:
    samples = np.array([0.5, 1.0, 1.5, 2.5])
    return PairedDifference(
        a="bos=none", b="bos=add", scale="gap points", delta=1.25, samples=samples, ci=0.95,
        method="basic", percentile=(0.6, 2.4), basic=(0.1, 1.9), paired=True,
    )  # fmt: skip


def test_a_stored_difference_reads_back_with_its_numbers():
    d = _difference()
    back = PairedDifference.from_dict(d.to_dict(), **NAMES)
    assert (back.delta, back.ci, back.method, back.paired) == (1.25, 0.95, "basic", True)
    assert back.interval == d.interval == (0.1, 1.9)
    assert back.percentile == (0.6, 2.4) and back.B == 4
    assert back.words() == d.words()


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("percentile", [0.1], "percentile"),
        ("basic", [0.1, float("inf")], "basic"),
        ("basic", [0.1, True], "basic"),
        ("delta", "1.2", "delta"),
        ("delta", float("nan"), "delta"),
        ("ci", None, "ci"),
        ("B", 1, "replicate count"),
        ("B", 10**6, "replicate count"),
        ("B", 4.0, "replicate count"),
        ("B", True, "replicate count"),
        ("method", "bca", "method"),
        ("paired", "yes", "paired"),
        ("why_unpaired", 3, "why_unpaired"),
    ],
)
def test_each_malformed_field_is_refused_by_name(field, value, named):
    stored = {**_difference().to_dict(), field: value}
    with pytest.raises(ValueError, match=named):
        PairedDifference.from_dict(stored, **NAMES)


def test_a_stored_difference_that_is_not_an_object_is_refused():
    with pytest.raises(ValueError, match="not an object"):
        PairedDifference.from_dict([1.25], **NAMES)


def test_a_number_beyond_floats_range_is_refused_not_raised():
    """10**400 is a valid JSON number but no float (`math.isfinite` raises OverflowError)."""
    from deffcore.core.json_values import finite_number

    assert not finite_number(10**400) and finite_number(10**300) and not finite_number(True)
    stored = {**_difference().to_dict(), "delta": 10**400}
    with pytest.raises(ValueError, match="delta"):
        PairedDifference.from_dict(stored, **NAMES)


def test_a_stored_paired_bootstrap_is_checked_whole():
    """Found by the schema's fuzz on the shipped default's `paired`: ragged or oversized
    values, and a profile whose D_eff is undefined, are one sentence (DeffError), no numpy
    message and no traceback."""
    import json

    from deffcore.core.errors import DeffError
    from deffcore.statistics.paired import PairedBootstrap
    from deffcore.views.run import DEFAULT_RUN_PATH

    good = json.loads(DEFAULT_RUN_PATH.read_text())["paired"]
    assert good["B"] == PairedBootstrap.from_dict(good).B
    ragged = {**good, "points": [[0.5, [0.1]], *good["points"][1:]]}
    huge = {**good, "ci": 10**400}
    beyond = {**good, "points": [[2.0] * len(good["points"][0]), *good["points"][1:]]}
    negative = {**good, "points": [[-1.0] * len(good["points"][0]), *good["points"][1:]]}
    for bad, said in ((ragged, "not readable"), (huge, "not readable"),
                      (beyond, "not readable"), (negative, "undefined")):  # fmt: skip
        with pytest.raises(DeffError, match=said) as err:
            PairedBootstrap.from_dict(bad)
        assert str(err.value).count(". ") == 0


# ---------------------------------------------------------------------------------------------
# a stored paired bootstrap (SPEC section 15): of its run's L and N, one profile per key


def _stored_paired() -> dict:
    import json

    from deffcore.views.run import DEFAULT_RUN_PATH

    return json.loads(DEFAULT_RUN_PATH.read_text())


def _small_paired(B: int, L: int = 3) -> dict:
    """A well-formed stored paired bootstrap of B replicates (lag profiles of 0.5)."""
    return {
        "layers": L, "n": 8, "B": B, "seed": 0, "ci": 0.95,
        "keys": [["default", "cka"]], "points": [[0.5] * (L - 1)],
        "profiles": [[[0.5] * (L - 1)] * B],
    }  # fmt: skip


def test_a_stored_paired_bootstrap_with_a_key_twice_is_refused():
    from deffcore.core.errors import DeffError
    from deffcore.statistics.paired import PairedBootstrap

    good = _stored_paired()["paired"]
    twice = {
        **good,
        "keys": [good["keys"][0], *good["keys"]],
        "points": [good["points"][0], *good["points"]],
        "profiles": [good["profiles"][0], *good["profiles"]],
    }
    with pytest.raises(DeffError, match="shapes"):
        PairedBootstrap.from_dict(twice)


def test_a_stored_paired_bootstrap_holds_at_most_max_stored_b_replicates():
    from deffcore.core.errors import DeffError
    from deffcore.statistics.paired import MAX_STORED_B, PairedBootstrap

    assert PairedBootstrap.from_dict(_small_paired(MAX_STORED_B)).B == MAX_STORED_B
    with pytest.raises(DeffError, match="shapes"):
        PairedBootstrap.from_dict(_small_paired(MAX_STORED_B + 1))


def test_a_stored_profile_is_a_similarity_at_most_1():
    """|rho| <= 1 (+1e-6 for the file's rounding): 1.5 is no similarity."""
    from deffcore.core.errors import DeffError
    from deffcore.statistics.paired import PairedBootstrap

    edge = _small_paired(4)
    edge["points"] = [[1.0, 1.0 + 1e-7]]
    assert PairedBootstrap.from_dict(edge).B == 4
    beyond = _small_paired(4)
    beyond["profiles"][0][2] = [0.5, 1.5]
    with pytest.raises(DeffError, match="not readable"):
        PairedBootstrap.from_dict(beyond)


@pytest.mark.parametrize("field", ["layers", "n"])
def test_a_snapshots_paired_bootstrap_of_another_run_is_refused(field):
    """A snapshot whose paired bootstrap is not of its own L and N is one sentence (a stored N
    changed alone, or L with every shape made to agree with it)."""
    from deffcore.views.run_schema import SnapshotError, check_snapshot

    data = _stored_paired()
    pb = data["paired"]
    if field == "n":
        pb["n"] += 1
    else:
        pb["layers"] -= 1
        pb["points"] = [p[:-1] for p in pb["points"]]
        pb["profiles"] = [[r[:-1] for r in prof] for prof in pb["profiles"]]
    with pytest.raises(SnapshotError, match=r"not of this run's L = \d+ and N = \d+\."):
        check_snapshot(data, "run.json")


def test_the_basic_interval_reflects_the_replicates_about_the_point():
    """basic = [2Δ - q_0.975, 2Δ - q_0.025], percentile = [q_0.025, q_0.975] of the Δ_r."""
    from deffcore.statistics.paired import difference_of

    samples = np.linspace(0.0, 1.0, 101) ** 3  # skewed: the two intervals differ
    d = difference_of(0.2, samples)
    q = np.quantile(samples, [0.025, 0.975])
    assert d.percentile == pytest.approx(tuple(q))
    assert d.basic == pytest.approx((0.4 - q[1], 0.4 - q[0]))
    assert d.interval == d.basic and d.B == 101


def test_a_stored_paired_bootstrap_is_checked_at_every_k_in_one_array_pass(monkeypatch):
    """Every replicate's D_eff is checked at every K (SPEC section 4) as cumulative sums: the
    shipped default reads back without one call per replicate and K (24,000 calls took ~0.4 s
    of the cold first screen, twice), and a replicate undefined at one inner K only, or within
    rounding of the edge, is still refused or accepted by `deff_from_profile` itself."""
    from deffcore.core.errors import DeffError
    from deffcore.measures.depth import deff_from_profile
    from deffcore.statistics import paired
    from deffcore.statistics.paired import PairedBootstrap

    calls = []

    def counted(*args):
        calls.append(args)
        return deff_from_profile(*args)

    monkeypatch.setattr(paired, "deff_from_profile", counted)
    good = _stored_paired()["paired"]
    assert good["B"] == PairedBootstrap.from_dict(good).B
    assert calls == []  # the shipped run's replicates are all far from the edge
    L = 5  # at K = 1: 1 + 2 (4/5)(-0.7) = -0.12 <= 0; at K = 4 it is positive again
    inner = _small_paired(4, L)
    inner["profiles"][0][3] = [-0.7, 0.9, 0.9, 0.9]
    assert deff_from_profile([-0.7, 0.9, 0.9, 0.9], L) > 0  # defined at K = L-1
    with pytest.raises(DeffError, match="undefined"):
        deff_from_profile([-0.7, 0.9, 0.9, 0.9], L, 1)
    with pytest.raises(DeffError, match="undefined"):
        PairedBootstrap.from_dict(inner)
    edge = _small_paired(4, 2)  # L = 2: 1 + 2 (1/2) rho = 0 exactly at rho = -1: undefined
    edge["points"] = [[-1.0]]
    with pytest.raises(DeffError, match="undefined"):
        PairedBootstrap.from_dict(edge)
    near = _small_paired(4, 2)  # 1 - 0.999999 > 0: defined, decided by the exact function
    near["points"] = [[-0.999999]]
    assert PairedBootstrap.from_dict(near).B == 4
