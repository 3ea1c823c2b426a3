"""The table across similarity measures (SPEC 17.4) in a run's snapshot and its HTML report."""

from __future__ import annotations

import copy
import html

import pytest
from shipped_helpers import shipped_view

from deffcore.statistics.measure_table import MeasureRow, MeasureTable
from deffcore.views.run_report import report_html
from deffcore.views.run_schema import SnapshotError, check_snapshot

HOSTILE = '<script>alert("x")</script>'


def _table(L: int, N: int) -> MeasureTable:
    rows = [
        MeasureRow("cka", 6.0, 0.2, 10.0, 0.19, 0.21, 5.0, 14.0, "below", 0.3),
        MeasureRow("cosine", 9.0, 0.3, -5.0, 0.28, 0.33, -12.0, 1.0, "at the reference"),
        MeasureRow("pwcca", undefined=HOSTILE),
    ]
    return MeasureTable(L, N, 64, 20, 0, 0.95, 19, 0.05, rows)


def _with_table(data: dict) -> dict:
    out = copy.deepcopy(data)
    out["measures"] = {"default": _table(data["layers"], data["n"]).to_dict()}
    return out


def test_the_report_shows_the_table_when_the_run_has_it(shipped_run):
    page = report_html(shipped_view(_with_table(shipped_run["data"])))
    assert "<h2>Across similarity measures</h2>" in page
    assert "<td>linear CKA</td><td>0.2000</td><td>[0.1900, 0.2100]</td><td>+10.0</td>" in page
    assert "<td>below</td><td>yes</td><td>0.3000</td>" in page
    assert "<td>at the reference</td><td>no</td><td>—</td>" in page
    assert HOSTILE not in page and html.escape(HOSTILE) in page
    assert "Across similarity measures" not in report_html(shipped_view(shipped_run["data"]))


def test_the_snapshot_carries_a_checked_table(shipped_run):
    data = _with_table(shipped_run["data"])
    assert check_snapshot(copy.deepcopy(data)) is not None
    view = shipped_view(data)
    assert view.measure_table("default").to_dict() == data["measures"]["default"]
    assert view.measure_table("no_pos0") is None


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda t: t.update(layers=t["layers"] + 1), "not of this run's L, N"),
        (lambda t: t["rows"][0].update(low=float("nan")), "non-number"),
        (lambda t: t["rows"][0].update(low="0.1"), "non-number"),
        (lambda t: t["rows"][0].update(regime="sideways"), "unknown regime"),
        (lambda t: t["rows"][0].update(measure="cca"), "unreadable"),
        (lambda t: t.update(B=1), "unreadable"),
        (lambda t: t["rows"][2].update(undefined=3), "non-text reason"),
    ],
)
def test_a_bad_table_is_one_sentence(shipped_run, change, said):
    data = _with_table(shipped_run["data"])
    change(data["measures"]["default"])
    with pytest.raises(SnapshotError, match=said):
        check_snapshot(data)
    data = _with_table(shipped_run["data"])
    data["measures"] = {"nowhere": data["measures"]["default"]}
    with pytest.raises(SnapshotError, match="a table per pooling"):
        check_snapshot(data)
