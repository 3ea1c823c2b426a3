"""`deffcore atlas`: one JSON object with the library's numbers; its table; bad arguments are one
sentence and exit 2 before any model loads."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deffcore.cli.main import main

TINY = ["--model", "tiny-llama", "--n", "8", "--max-tokens", "24", "--no-progress"]


def test_atlas_json_is_the_librarys(capsys, tiny_dataset):
    import deffcore as dc

    assert main(["atlas", *TINY, "--dataset", tiny_dataset, "--json", "--logit-lens"]) == 0
    out = json.loads(capsys.readouterr().out)  # stdout holds nothing but the object
    lib = dc.atlas("tiny-llama", dataset=tiny_dataset, n=8, max_tokens=24, logit_lens=True)
    lib = lib.to_dict()
    assert out["layers"] == 4 and len(out["relative_contribution"]) == 4
    for name in ("relative_contribution", "alignment", "block_influence", "angular_distance"):
        np.testing.assert_allclose(out[name], lib[name], rtol=1e-12)
    assert out["phase_point"] == lib["phase_point"] and out["columns"] == lib["columns"]
    assert out["intervals"]["alignment"] == lib["intervals"]["alignment"]
    assert out["run"]["key"] == lib["run"]["key"] and out["skip_effect"] is None
    lens = out["logit_lens"]  # where predictions form, over h_0 .. h_L
    assert len(lens["kl"]) == 5 and lens["top1_agreement"][-1] == 1.0
    np.testing.assert_allclose(lens["kl"], lib["logit_lens"]["kl"], rtol=1e-12)
    assert out["intervals"]["prediction_depth"] == lib["intervals"]["prediction_depth"]
    geo = out["geometry"]  # consecutive-layer geometry per block (SPEC 16.3)
    assert geo["displacement"] == out["relative_contribution"]
    np.testing.assert_allclose(geo["rotation_angle"], lib["geometry"]["rotation_angle"])
    assert len(geo["procrustes_residual"]) == 4
    skip = ["--skip-effect", "--skip-passages", "3", "--logit-lens"]
    assert main(["atlas", *TINY, "--dataset", tiny_dataset, *skip]) == 0
    text = capsys.readouterr().out
    assert "phase point: block" in text and "skip effect (3 passages)" in text
    assert "r attn" in text and "Gromov et al." in text
    assert "where predictions form" in text and "prediction depth: " in text
    assert "consecutive-layer geometry" in text and "Procrustes residual" in text


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--skip-passages", "0"], "--skip-passages"),
        (["--bootstrap", "5"], "--bootstrap"),
        (["--boot-seed", "-1"], "boot_seed"),
        (["--max-tokens", "1"], "--max-tokens"),
    ],
)
def test_bad_arguments_are_one_sentence_and_exit_2(capsys, no_model, argv, words):
    assert main(["atlas", *TINY, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and words in err and err.count("\n") == 1
    assert not no_model
