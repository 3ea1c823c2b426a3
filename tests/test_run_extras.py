"""A snapshot's extras (deffcore.lenses.run_extras): the CLI attaches the diagnostics and the BOS
on/off check (`measure --diagnostics --bos-on-off --snapshot`), pages read them back only when
sound.

Expected values come from the library on the same run (`diagnose`, `bos_on_off`, in the
fixture's cache: read back, not recomputed), so a section that drifted from what the CLI
computed, or that a hostile file dressed up, is caught.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from shipped_helpers import BOOTSTRAP, RUN, SEEDS, shipped_view

from deffcore.lenses import run_extras as rx
from deffcore.lenses.diagnostics_store import DIAG_FORMAT, diagnose, spec_from_fields

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def in_cache(shipped_run, monkeypatch):
    monkeypatch.setenv("DEFF_CACHE_DIR", str(shipped_run["cache"]))
    return shipped_run


def test_the_cli_puts_checked_diagnostics_in_the_snapshot(in_cache):
    data = in_cache["data"]
    view = shipped_view(data)
    got = rx.snapshot_diagnostics(view)
    assert got is not None and got["shipped"]
    want = diagnose(spec_from_fields(view.spec))  # the fixture's own pass, read back
    assert want["cached"]
    for key in ("massive_ratio", "massive_position", "massive_dim", "sink_fraction"):
        assert got[key] == want[key], key
    assert got["key"] == view.key and got["format"] == DIAG_FORMAT
    ins = got["inspector"]
    assert len(ins["tokens"]) == min(rx.INSPECTOR_PASSAGES, want["n_passages"])
    assert ins["tokens"] == want["inspector"]["tokens"][: rx.INSPECTOR_PASSAGES]
    norms, full = np.asarray(ins["token_norms"][0]), np.asarray(want["inspector"]["token_norms"][0])
    np.testing.assert_allclose(norms, full, rtol=10 ** -(rx.NORM_DIGITS - 1))
    assert "cached" not in data["diagnostics"]  # the file says nothing about this machine


def test_the_cli_puts_the_bos_on_off_check_in_the_snapshot(in_cache):
    from deffcore.lenses.bos_on_off import bos_on_off

    view = shipped_view(in_cache["data"])
    got = rx.snapshot_bos_on_off(view, "cka", None)
    want = bos_on_off(spec_from_fields(view.spec), metric="cka")  # both runs cached
    assert got["add"]["gaps"] == pytest.approx(want["add"]["gaps"])
    assert got["none"]["pos0"] == pytest.approx(want["none"]["pos0"])
    assert got["conclusion"] == want["conclusion"] and got["kind"] == want["kind"]
    assert rx.snapshot_bos_on_off(view, "cka", view.layers - 1) == got  # K = L-1 is the default
    assert rx.snapshot_bos_on_off(view, "unbiased_cka", None) is None  # made for cka only
    assert rx.snapshot_bos_on_off(view, "cka", 2) is None


def test_the_snapshot_names_its_null_seeds_bootstrap_and_extras_in_its_command(in_cache):
    data = in_cache["data"]
    band = data["measurement"]["random_null"]["results"]["default"]
    assert [int(s) for s in band["seeds"]] == list(SEEDS)
    boot = rx.snapshot_bootstrap(shipped_view(data), "default", "cka")
    assert boot["B"] == BOOTSTRAP and len(boot["samples"]) == BOOTSTRAP
    assert rx.snapshot_bootstrap(shipped_view(data), "top1_pc", "cka") is None
    for flag in ("--diagnostics", "--bos-on-off", "--bootstrap", "--random-seeds", "--dtype"):
        assert flag in data["command"], flag


def _broken(data: dict, section: str, path: tuple, value) -> dict:
    out = copy.deepcopy(data)
    node = out[section]
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("format",), DIAG_FORMAT + 1),  # another diagnostics format: stale
        (("key",), "0" * 20),  # another run's
    ],
)
def test_a_stale_or_foreign_diagnostics_section_is_ignored(shipped_run, path, value):
    view = shipped_view(_broken(shipped_run["data"], "diagnostics", path, value), "shared")
    assert rx.snapshot_diagnostics(view) is None


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("massive_ratio",), [1.0]),  # too short
        (("massive_position",), ["0"] * 31),
        (("sink_fraction",), "lots"),
        (("sink_scores",), [[0.1, "x"]]),
        (("n_passages",), True),
        (("inspector", "tokens"), [["x" * 500]]),
        (("inspector", "token_norms"), []),
        (("inspector", "max_value"), [["big"]]),
    ],
)
def test_an_unsound_diagnostics_section_is_one_sentence(shipped_run, path, value):
    """The one schema (SPEC 11 fields): the whole file is refused, never half-shown."""
    from deffcore.views.run_schema import SnapshotError

    with pytest.raises(SnapshotError, match="diagnostics"):
        shipped_view(_broken(shipped_run["data"], "diagnostics", path, value), "shared")


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("metric",), "euclid"),
        (("K",), -1),
        (("add",), None),
        (("none", "gaps"), {"default": "7"}),
        (("none", "gaps"), {"mine": 1.0, "default": 1.0}),
        (("add", "pos0"), [1.0]),
        (("difference",), [1.0]),  # the paired gap move, checked with its section
        (("difference", "B"), 1),
        (("difference", "basic"), [0.1, "x"]),
        (("difference", "method"), "bca"),
    ],
)
def test_an_unsound_on_off_section_is_ignored(shipped_run, path, value):
    assert shipped_run["data"]["bos_on_off"]["difference"] is not None  # the stand-in has one
    view = shipped_view(_broken(shipped_run["data"], "bos_on_off", path, value), "shared")
    assert rx.snapshot_bos_on_off(view, "cka", None) is None


def test_the_on_off_sentence_is_recomputed_never_read_from_the_file(shipped_run):
    hostile = "[click](http://evil.example) <script>alert(1)</script>"
    data = _broken(shipped_run["data"], "bos_on_off", ("conclusion",), hostile)
    data["bos_on_off"]["kind"] = "bos"
    got = rx.snapshot_bos_on_off(shipped_view(data, "shared"), "cka", None)
    assert got is not None and hostile not in got["conclusion"]
    assert got["kind"] == shipped_run["data"]["bos_on_off"]["kind"]
    assert "sender" in rx.extras_source(shipped_view(data, "shared"))
    assert "shipped with the app" in rx.extras_source(shipped_view(data))


def test_a_hostile_bootstrap_is_ignored(shipped_run):
    for key, value in (("samples", ["1"]), ("B", 2.5), ("low", None), ("samples", [])):
        data = _broken(shipped_run["data"], "measurement", ("bootstrap", key), value)
        data.pop("paired", None)  # else the trust reads the run's paired bootstrap instead
        assert rx.snapshot_bootstrap(shipped_view(data, "shared"), "default", "cka") is None


def test_extras_need_a_snapshot_and_the_cache_before_anything_loads(tmp_path, no_model):
    """Refused in one sentence before the model loads (exit code 2)."""
    from deffcore.cli.main import main

    base = ["measure", "--model", RUN["model"], "--n", "8", "--max-tokens", "16"]
    assert main([*base, "--diagnostics"]) == 2
    assert main([*base, "--bos-on-off", "--no-cache", "--snapshot", str(tmp_path / "s.json")]) == 2
    assert not no_model


def test_the_default_run_script_makes_a_whole_snapshot(tmp_path):
    """scripts/make_default_run.sh, for tiny-llama on 8 windows: the null band from
    MIN_NULL_SEEDS seeds (what the trust rule's null statement needs), the bootstrap, the
    diagnostics and the BOS on/off check, each usable by the pages."""
    from deffcore.statistics.trust_rule import MIN_NULL_SEEDS

    out = tmp_path / "default_run.json"
    env = {"DEFF_CACHE_DIR": str(tmp_path / "cache"), "MODEL": "tiny-llama", "MAX_TOKENS": "16",
           "PYTHON": sys.executable, "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
           "BOOTSTRAP_METRICS": "cka"}  # fmt: skip
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "make_default_run.sh"), "8", str(out)],
        env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    view = shipped_view(json.loads(out.read_text()))
    assert len(view.random_band("default", "cka")["seeds"]) == MIN_NULL_SEEDS
    assert view.trust("default", "cka").null != "too_few_seeds"
    assert rx.snapshot_diagnostics(view) is not None
    assert rx.snapshot_bos_on_off(view, "cka", None) is not None
    assert rx.snapshot_bootstrap(view, "default", "cka") is not None
    assert view.spec["dtype"] == "float32" and "--dtype float32" in view.command
