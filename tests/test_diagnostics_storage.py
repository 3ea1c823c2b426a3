"""Where a run's BOS diagnostics live and when they are trusted:
`diagnose` honours the run's norm intervention, never creates a cache folder for a run that was
never measured, and `read_diagnostics` refuses a file written for another run."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import numpy as np
import pytest

from deffcore.extraction import cache
from deffcore.extraction import cache as entries
from deffcore.inputs.run_spec import RunSpec
from deffcore.lenses.diagnostics import bos_diagnostics
from deffcore.lenses.diagnostics_store import diagnose, diagnostics_path, read_diagnostics


def _spec(dataset: str, **kw) -> RunSpec:
    fields = {"model": "tiny-llama", "revision": None, "dataset": dataset, "n": 8,
              "max_tokens": 16, "seed": 0, "dtype": "float32", **kw}  # fmt: skip
    return RunSpec(**fields)


def test_diagnose_applies_the_runs_norm_intervention(tiny_dataset):
    from deffcore.inputs.interventions import norm_intervention
    from deffcore.inputs.model import load_model
    from deffcore.inputs.texts import run_texts, run_token_ids

    plain = diagnose(_spec(tiny_dataset, model="tiny-gemma3"))
    spec = _spec(tiny_dataset, model="tiny-gemma3", intervention="no_post")
    probed = diagnose(spec)
    assert not np.allclose(probed["massive_ratio"], plain["massive_ratio"])
    loaded = load_model("tiny-gemma3")
    ids = run_token_ids(spec, loaded.tokenizer, run_texts(spec))
    with norm_intervention(loaded.model, "no_post"):
        want = bos_diagnostics(loaded, token_ids=ids).to_dict()
    np.testing.assert_allclose(probed["massive_ratio"], want["massive_ratio"], rtol=1e-6)
    np.testing.assert_allclose(probed["sink_scores"], want["sink_scores"], rtol=1e-6)


def test_a_run_never_measured_gets_no_cache_folder(tiny_dataset, monkeypatch):
    from deffcore.inputs import model as loading

    spec = _spec(tiny_dataset)
    first = diagnose(spec)
    folder = diagnostics_path(spec).parent
    assert first["cached"] is False and not folder.exists()
    assert entries.list_runs() == [] and list(cache.cache_dir().iterdir()) == []
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("recomputed"))
    again = diagnose(spec)  # kept in memory for the process: not recomputed
    assert again["cached"] is True and again["massive_ratio"] == first["massive_ratio"]
    assert read_diagnostics(spec)["key"] == spec.key()
    assert not folder.exists()


def test_diagnostics_of_a_measured_run_are_stored_beside_it_and_deleted_with_it(tiny_dataset):
    from deffcore.runs.measure import measure_spec

    spec = _spec(tiny_dataset)
    measure_spec(spec)
    diagnose(spec)
    path = diagnostics_path(spec)
    assert path.is_file() and json.loads(path.read_text())["key"] == spec.key()
    assert [r["key"] for r in entries.list_runs()] == [spec.key()]
    entries.delete(spec.key())
    assert not path.parent.exists() and read_diagnostics(spec) is None


@pytest.mark.parametrize("damage", ["format", "key", "spec", "list", "not json"])
def test_read_diagnostics_refuses_a_file_written_for_another_run(tiny_dataset, damage):
    from deffcore.runs.measure import measure_spec

    spec = _spec(tiny_dataset)
    measure_spec(spec)
    diagnose(spec)
    path = diagnostics_path(spec)
    data = json.loads(path.read_text())
    if damage == "format":
        data["format"] = 99
    elif damage == "key":
        data["key"] = "0" * 20
    elif damage == "spec":  # another run's diagnostics copied here, its key edited to match
        data["spec"] = asdict(replace(spec, seed=1))
    text = {"list": "[1, 2]", "not json": "{oops"}.get(damage) or json.dumps(data)
    path.write_text(text)
    assert read_diagnostics(spec) is None


def test_diagnostics_of_the_previous_format_are_recomputed(tiny_dataset):
    """Format 2 applied Sun et al.'s criterion to mean_b m_b and had no Gu et al. metric: such
    a file is never read as today's, the pass runs again and rewrites it."""
    from deffcore.lenses.diagnostics_store import DIAG_FORMAT
    from deffcore.runs.measure import measure_spec

    assert DIAG_FORMAT == 3
    spec = _spec(tiny_dataset)
    measure_spec(spec)
    diagnose(spec)
    path = diagnostics_path(spec)
    old = json.loads(path.read_text())
    for key in ("sun_share", "sun_position", "gu_sink_fraction", "gu_sink_rate"):
        old.pop(key)
    old.update(format=2, sun_massive=[False] * 5)
    path.write_text(json.dumps(old))
    assert read_diagnostics(spec) is None
    fresh = diagnose(spec)
    assert fresh["cached"] is False and fresh["format"] == 3 and "sun_share" in fresh
    assert json.loads(path.read_text())["format"] == 3
