"""scripts/add_extras.py: a shipped snapshot gains its own run's diagnostics and BOS on/off check,
nothing else changes but the command that remakes it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from shipped_helpers import SEEDS, measure_args, run_script, write_shipped

REPO = Path(__file__).resolve().parents[1]
EXTRAS = ("diagnostics", "bos_on_off")


@pytest.fixture
def without_extras(tmp_path):
    path = tmp_path / "shipped.json"
    made = write_shipped(path)  # the runs and diagnostics land in this test's cache
    assert all(made.get(k) is not None for k in EXTRAS)
    bare = {k: v for k, v in made.items() if k not in EXTRAS}
    bare["command"] = made["command"].replace(" --diagnostics", "").replace(" --bos-on-off", "")
    path.write_text(json.dumps(bare))
    return path, made


def test_the_file_gains_the_extras_measure_writes_and_nothing_else(without_extras):
    path, made = without_extras
    done = run_script("add_extras.py", path)
    assert done.returncode == 0, done.stderr
    got = json.loads(path.read_text())
    command = got.pop("command")  # whole again: the flags that write the extras (at its end)
    assert sorted(command.split()) == sorted(made.pop("command").split())
    assert command.endswith("--diagnostics --bos-on-off")
    assert got == {k: v for k, v in made.items() if k != "command"}  # as `measure` writes them
    got["command"] = command
    from deffcore.views.snapshot import SnapshotView

    view = SnapshotView(got)
    assert view.data["diagnostics"]["key"] == got["key"]


def test_a_file_whose_key_is_not_its_specs_is_left_alone(without_extras):
    path, _ = without_extras
    data = json.loads(path.read_text())
    data["spec"]["seed"] = 1  # another run's spec under this file's key
    path.write_text(json.dumps(data))
    before = path.read_bytes()
    done = run_script("add_extras.py", path)
    assert done.returncode == 1 and "not the file's run" in done.stderr
    assert "Traceback" not in done.stderr and path.read_bytes() == before


def test_with_flags_appends_only_what_is_missing():
    sys.path.insert(0, str(REPO / "scripts"))
    from add_extras import with_flags

    assert with_flags("m --n 4") == "m --n 4 --diagnostics --bos-on-off"
    assert with_flags("m --bos-on-off") == "m --bos-on-off --diagnostics"


def test_random_seeds_make_the_band_a_fresh_measure_of_those_seeds_gives(without_extras, tmp_path):
    """... and the sound extras the file already holds are kept as they are (not recomputed:
    a changed, still valid, number of them stays)."""
    path, made = without_extras
    assert SEEDS == (1, 2)
    made["diagnostics"]["massive_ratio"][0] += 0.5
    path.write_text(json.dumps(made))
    done = run_script("add_extras.py", path, "--random-seeds", "1,2,3")
    assert done.returncode == 0, done.stderr
    got = json.loads(path.read_text())
    from deffcore.cli.main import main

    fresh_path = tmp_path / "fresh.json"
    argv = measure_args(fresh_path)
    argv[argv.index("--random-seeds") + 1] = "1,2,3"
    assert main(argv) == 0
    fresh = json.loads(fresh_path.read_text())
    a, b = got["measurement"]["random_null"], fresh["measurement"]["random_null"]
    assert a["models"] == b["models"] == [f"random:tiny-llama:{s}" for s in (1, 2, 3)]
    for pooling, band in b["results"].items():
        assert a["results"][pooling]["seeds"] == ["1", "2", "3"]
        for field in ("deff_over_L", "mean", "sd", "low", "high"):
            assert a["results"][pooling][field] == pytest.approx(band[field], abs=2e-6), field
    assert "--random-seeds 1,2,3" in got["command"]
    assert {k: v for k, v in got.items() if k not in ("measurement", "command")} == {
        k: v for k, v in made.items() if k not in ("measurement", "command")
    }


def test_null_band_is_the_mean_and_two_sample_sds():
    from deffcore.runs.measurement import null_band

    band = null_band(["1", "2", "3"], [1.0, 2.0, 3.0])  # mean 2, sd (ddof 1) 1
    assert (band["mean"], band["sd"], band["low"], band["high"]) == (2.0, 1.0, 0.0, 4.0)
    assert null_band(["7"], [0.5])["sd"] == 0.0


def test_a_bad_seed_list_is_one_sentence_and_the_file_is_left_alone(without_extras):
    path, _ = without_extras
    before = path.read_bytes()
    done = run_script("add_extras.py", path, "--random-seeds", "1,x")
    assert done.returncode == 1 and "--random-seeds must be comma-separated integers" in done.stderr
    assert "Traceback" not in done.stderr and path.read_bytes() == before
