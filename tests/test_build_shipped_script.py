"""scripts/build_shipped.py: a shipped snapshot is built whole from its own run, reusing the
cache: what `measure --snapshot` writes with every extra (diagnostics, BOS on/off check, paired
bootstrap, random-weight band, atlas), plus the atlas's skip effect; a file that is not its
run's is left alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from shipped_helpers import SEEDS, measure_args, run_script, write_shipped

REPO = Path(__file__).resolve().parents[1]
SCRIPT = "build_shipped.py"
EXTRAS = ("diagnostics", "bos_on_off")


def _without(made: dict, *fields: str) -> dict:
    return {k: v for k, v in made.items() if k not in fields}


@pytest.fixture
def shipped(tmp_path):
    """The fixture snapshot (its runs, diagnostics and BOS variants in this test's cache)."""
    path = tmp_path / "shipped.json"
    made = write_shipped(path)
    assert all(made.get(k) is not None for k in (*EXTRAS, "paired", "atlas"))
    assert made["atlas"]["skip_effect"] is None
    return path, made


# ---------------------------------------------------------------------------------------------
# The diagnostics and the BOS on/off check


def test_a_file_without_extras_gains_what_measure_writes_and_its_command_is_whole(shipped):
    path, made = shipped
    bare = _without(made, *EXTRAS)
    bare["command"] = made["command"].replace(" --diagnostics", "").replace(" --bos-on-off", "")
    path.write_text(json.dumps(bare))
    done = run_script(SCRIPT, path, "--no-skip-effect")
    assert done.returncode == 0, done.stderr
    got = json.loads(path.read_text())
    assert sorted(got["command"].split()) == sorted(made["command"].split())
    assert "--diagnostics" in got["command"] and "--bos-on-off" in got["command"]
    assert got == made  # as `measure` writes it, command included
    from deffcore.views.run import Run

    assert Run.from_snapshot(got).data["diagnostics"]["key"] == got["key"]


def test_a_file_whose_key_is_not_its_specs_is_left_alone(shipped):
    path, _ = shipped
    data = json.loads(path.read_text())
    data["spec"]["seed"] = 1  # another run's spec under this file's key
    path.write_text(json.dumps(data))
    before = path.read_bytes()
    done = run_script(SCRIPT, path)
    assert done.returncode == 1 and "not the file's run" in done.stderr
    assert "Traceback" not in done.stderr and path.read_bytes() == before


def test_measure_args_appends_only_what_is_missing_and_sets_what_is_given():
    sys.path.insert(0, str(REPO / "scripts"))
    from build_shipped import measure_args as completed

    assert completed("python -m deffcore measure --n 4") == [
        "measure", "--n", "4", "--diagnostics", "--bos-on-off",
    ]  # fmt: skip
    assert completed("deffcore measure --bos-on-off") == [
        "measure", "--bos-on-off", "--diagnostics",
    ]  # fmt: skip
    assert completed("m measure --random-seeds 1,2 --model 'a b'", seeds="1,2,3") == [
        "measure", "--random-seeds", "1,2,3", "--model", "a b", "--diagnostics", "--bos-on-off",
    ]  # fmt: skip
    assert completed("deffcore measure --n 4", extras=False) == ["measure", "--n", "4"]
    assert completed("measure", poolings="default,no_pos0")[-2:] == [
        "--bootstrap-poolings", "default,no_pos0",
    ]  # fmt: skip


def test_random_seeds_make_the_file_a_fresh_measure_of_those_seeds(shipped, tmp_path):
    """The whole file is what `measure --random-seeds 1,2,3 ...` writes: the band over the
    three seeds, and every other section read back from the run (a number the file holds that
    its run does not give is not kept)."""
    path, made = shipped
    assert SEEDS == (1, 2)
    made["diagnostics"]["massive_ratio"][0] += 0.5
    path.write_text(json.dumps(made))
    done = run_script(SCRIPT, path, "--random-seeds", "1,2,3", "--no-skip-effect")
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
    took = ("elapsed_s", "cached", "random_null")  # what the file's run took when it was made
    assert [got["measurement"][k] for k in took[:2]] == [made["measurement"][k] for k in took[:2]]
    was = made["measurement"]["random_null"]["cached"]  # seeds 1, 2 read back, 3 measured
    assert got["measurement"]["random_null"]["cached"] == [*was, False]
    for data in (got, fresh):
        data["measurement"] = _without(data["measurement"], *took)
    assert got == fresh


def test_null_band_is_the_mean_and_two_sample_sds():
    from deffcore.runs.measure import null_band

    band = null_band(["1", "2", "3"], [1.0, 2.0, 3.0])  # mean 2, sd (ddof 1) 1
    assert (band["mean"], band["sd"], band["low"], band["high"]) == (2.0, 1.0, 0.0, 4.0)
    assert null_band(["7"], [0.5])["sd"] == 0.0


def test_a_bad_seed_list_is_one_sentence_and_the_file_is_left_alone(shipped):
    path, _ = shipped
    before = path.read_bytes()
    done = run_script(SCRIPT, path, "--random-seeds", "1,x")
    assert done.returncode == 1 and "--random-seeds must be comma-separated integers" in done.stderr
    assert "Traceback" not in done.stderr and path.read_bytes() == before


# ---------------------------------------------------------------------------------------------
# The paired bootstrap


def test_the_paired_bootstrap_is_the_one_measure_draws_and_nothing_else_changes(shipped):
    path, made = shipped
    poolings = list(dict.fromkeys(pooling for pooling, _ in made["paired"]["keys"]))
    command = made["command"].split(" --bootstrap-poolings ")[0]
    older = _without(made, "paired")  # as an older CLI wrote it
    path.write_text(json.dumps({**older, "command": command}))
    done = run_script(SCRIPT, path, "--poolings", ",".join(poolings), "--no-skip-effect")
    assert done.returncode == 0, done.stderr
    got = json.loads(path.read_text())
    assert got["paired"] == made["paired"]
    assert f"--bootstrap-poolings {','.join(poolings)}" in got["command"]
    assert _without(got, "paired", "command") == _without(older, "command")
    assert got == made  # the command that remakes it included


def test_a_file_whose_bootstrap_is_another_is_left_alone(shipped):
    path, made = shipped
    data = _without(made, "paired")
    data["measurement"]["bootstrap"]["samples"][0] += 0.001  # not these passage multisets
    path.write_text(json.dumps(data))
    before = path.read_bytes()
    done = run_script(SCRIPT, path)
    assert done.returncode == 1 and "not the file's bootstrap" in done.stderr
    assert "Traceback" not in done.stderr and path.read_bytes() == before


# ---------------------------------------------------------------------------------------------
# The depth-use atlas and its skip effect


@pytest.mark.parametrize("skip_effect", [True, False])
def test_the_file_gains_its_runs_atlas_and_skip_effect_and_nothing_else(shipped, skip_effect):
    path, made = shipped
    path.write_text(json.dumps({**made, "atlas": None}))
    done = run_script(SCRIPT, path, *([] if skip_effect else ["--no-skip-effect"]))
    assert done.returncode == 0, done.stderr
    got = json.loads(path.read_text())
    assert _without(got, "atlas") == _without(made, "atlas")
    skip = got["atlas"].pop("skip_effect")
    if skip_effect:
        assert skip["passages"] == made["n"] and len(skip["kl"]) == made["layers"]
    else:
        assert skip is None
    assert got["atlas"] == _without(made["atlas"], "skip_effect")


def test_a_file_that_is_not_of_its_run_is_left_alone(shipped):
    path, made = shipped
    data = {**made, "atlas": None}
    sim = data["similarity"]["top1_pc"]["unbiased_cka"]  # no longer the run's own numbers
    sim[0][1] = sim[1][0] = sim[0][1] + 0.01  # (a matrix the schema cannot tie to the rest)
    path.write_text(json.dumps(data))
    before = path.read_bytes()
    done = run_script(SCRIPT, path)
    assert done.returncode == 1 and "not the file's run" in done.stderr
    assert "top1_pc unbiased_cka" in done.stderr
    assert path.read_bytes() == before
    data["similarity"]["default"]["cka"][0][1] += 0.01  # one the schema refuses: one sentence
    path.write_text(json.dumps(data))
    done = run_script(SCRIPT, path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "left alone" in done.stderr and path.read_text() == json.dumps(data)


# ---------------------------------------------------------------------------------------------
# The SPEC 17 measures' matrices (SPEC 17.5: what the metric picker draws)


def _point_estimate(made: dict, measure: str) -> list:
    """The measure's matrix on the fixture run's default states, computed here on its own."""
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.runs.measure import measure_spec
    from deffcore.statistics.measure_table import measure_similarity
    from deffcore.views.run import _rounded

    m = measure_spec(RunSpec(**made["spec"]), metric=made["measurement"]["metric"])
    return _rounded(measure_similarity(m.states("default"), measure))


def test_measures_only_adds_the_matrices_and_keeps_every_other_number(shipped):
    path, made = shipped
    done = run_script(SCRIPT, path, "--measures-only", "--measures", "procrustes,mutual_knn")
    assert done.returncode == 0, done.stderr
    assert "default procrustes:" in done.stdout and "default mutual_knn:" in done.stdout
    got = json.loads(path.read_text())
    default = got["similarity"].pop("default")
    assert list(default) == [*made["similarity"]["default"], "procrustes", "mutual_knn"]
    for measure in ("procrustes", "mutual_knn"):
        S = np.asarray(default.pop(measure))
        assert S.tolist() == _point_estimate(made, measure)
        assert np.array_equal(S, S.T) and np.allclose(np.diag(S), 1.0, atol=1e-6)
    assert default == made["similarity"]["default"]
    made["similarity"].pop("default")
    assert got == made  # every other number as it was


def test_a_whole_build_gives_the_measures_asked_for_and_none_drops_them(shipped):
    path, made = shipped
    done = run_script(SCRIPT, path, "--measures", "rsa", "--no-skip-effect")
    assert done.returncode == 0, done.stderr
    got = json.loads(path.read_text())
    assert got["similarity"]["default"].pop("rsa") == _point_estimate(made, "rsa")
    assert got == made
    done = run_script(SCRIPT, path, "--no-skip-effect")  # another file: the ones it holds, kept
    assert done.returncode == 0, done.stderr
    assert "rsa" in json.loads(path.read_text())["similarity"]["default"]
    done = run_script(SCRIPT, path, "--measures", "none", "--no-skip-effect")
    assert done.returncode == 0, done.stderr
    assert json.loads(path.read_text()) == made


def test_a_file_whose_measure_matrix_is_not_its_runs_is_left_alone(shipped):
    path, made = shipped
    data = json.loads(json.dumps(made))
    S = np.asarray(_point_estimate(made, "procrustes"))
    S[0, 1] = S[1, 0] = S[0, 1] - 0.01
    data["similarity"]["default"]["procrustes"] = S.tolist()
    path.write_text(json.dumps(data))
    before = path.read_bytes()
    done = run_script(SCRIPT, path, "--measures-only")
    assert done.returncode == 1 and "default procrustes similarity differs" in done.stderr
    assert "Traceback" not in done.stderr and path.read_bytes() == before


def test_a_bad_measure_name_is_one_sentence_and_the_file_is_left_alone(shipped):
    path, _ = shipped
    before = path.read_bytes()
    done = run_script(SCRIPT, path, "--measures", "procrustes,cka2")
    assert done.returncode == 1 and "--measures: all, none or some of procrustes" in done.stderr
    assert "Traceback" not in done.stderr and path.read_bytes() == before


def test_the_shipped_default_run_gets_every_measure_by_default(tmp_path):
    sys.path.insert(0, str(REPO / "scripts"))
    from build_shipped import default_measures, measure_names

    from deffcore.views.run import DEFAULT_RUN_PATH

    six = ("procrustes", "mutual_knn", "cknna", "rsa", "svcca", "pwcca")
    assert set(default_measures(DEFAULT_RUN_PATH)) == set(six) == set(measure_names("all"))
    assert default_measures(tmp_path / "default_run.json") is None
    assert measure_names("none") == () and measure_names(" rsa, procrustes") == (
        "procrustes", "rsa",
    )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# The digests of the shipped files' checked bytes


def test_digests_record_each_shipped_file_the_schema_accepts_and_nothing_else(
    tmp_path, monkeypatch
):
    """`--digests` checks every shipped snapshot and records the sha256 of its bytes; one file
    the schema refuses stops it with that file named, and the recorded digests stay as they
    were (a refused file is never vouched for)."""
    import hashlib
    import importlib.util
    import shutil

    import deffcore.core.files as files
    import deffcore.views.run as run_module

    spec = importlib.util.spec_from_file_location("build_shipped", REPO / "scripts" / SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    data = tmp_path / "data"
    (data / "gallery").mkdir(parents=True)
    shutil.copy(run_module.DEFAULT_RUN_PATH, data / "default_run.json")
    gallery = sorted(run_module.GALLERY_DIR.glob("*.json"))[0]
    shutil.copy(gallery, data / "gallery" / gallery.name)
    digests = data / "checked_snapshots.json"
    monkeypatch.setattr(files, "DATA_DIR", data)
    monkeypatch.setattr(run_module, "DEFAULT_RUN_PATH", data / "default_run.json")
    monkeypatch.setattr(run_module, "GALLERY_DIR", data / "gallery")
    monkeypatch.setattr(run_module, "CHECKED_DIGESTS", digests)
    got = script.record_digests()
    sha = {p: hashlib.sha256((data / p).read_bytes()).hexdigest() for p in got}
    assert set(got) == {"default_run.json", f"gallery/{gallery.name}"} and got == sha
    assert json.loads(digests.read_text()) == got
    before = digests.read_bytes()
    bad = json.loads((data / "gallery" / gallery.name).read_text())
    bad["layers"] = -3
    (data / "gallery" / gallery.name).write_text(json.dumps(bad))
    with pytest.raises(SystemExit, match=f"{gallery.name}.*no digest recorded"):
        script.record_digests()
    assert digests.read_bytes() == before
    (data / "gallery" / gallery.name).write_text("{not json")  # one sentence, no traceback
    with pytest.raises(SystemExit, match=f"{gallery.name}.*no digest recorded"):
        script.record_digests()
    assert digests.read_bytes() == before
