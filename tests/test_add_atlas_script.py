"""scripts/add_atlas.py: a shipped snapshot gains its own run's atlas, nothing else changes."""

from __future__ import annotations

import json

import pytest
from shipped_helpers import run_script, write_shipped


@pytest.fixture
def without_atlas(tmp_path):
    path = tmp_path / "shipped.json"
    data = write_shipped(path)  # the runs land in this test's cache
    assert data["atlas"] is not None and data["atlas"]["skip_effect"] is None
    path.write_text(json.dumps({**data, "atlas": None}))
    return path, data


@pytest.mark.parametrize("skip_effect", [True, False])
def test_the_file_gains_its_runs_atlas_and_skip_effect_and_nothing_else(without_atlas, skip_effect):
    path, made = without_atlas
    done = run_script("add_atlas.py", path, *([] if skip_effect else ["--no-skip-effect"]))
    assert done.returncode == 0, done.stderr
    got = json.loads(path.read_text())
    assert {k: v for k, v in got.items() if k != "atlas"} == {
        k: v for k, v in made.items() if k != "atlas"
    }
    skip = got["atlas"].pop("skip_effect")
    if skip_effect:
        assert skip["passages"] == made["n"] and len(skip["kl"]) == made["layers"]
    else:
        assert skip is None
    assert got["atlas"] == {k: v for k, v in made["atlas"].items() if k != "skip_effect"}


def test_a_file_that_is_not_of_its_run_is_left_alone(without_atlas):
    path, _ = without_atlas
    data = json.loads(path.read_text())
    sim = data["similarity"]["top1_pc"]["unbiased_cka"]  # no longer the run's own numbers
    sim[0][1] = sim[1][0] = sim[0][1] + 0.01  # (a matrix the schema cannot tie to the rest)
    path.write_text(json.dumps(data))
    before = path.read_bytes()
    done = run_script("add_atlas.py", path)
    assert done.returncode == 1 and "not the file's run" in done.stderr
    assert "top1_pc unbiased_cka" in done.stderr
    assert path.read_bytes() == before
    data["similarity"]["default"]["cka"][0][1] += 0.01  # one the schema refuses: one sentence
    path.write_text(json.dumps(data))
    done = run_script("add_atlas.py", path)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "left alone" in done.stderr and path.read_text() == json.dumps(data)
