"""`python -m deffcore synthetic`: JSON fields, the human table and errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from deffcore.cli.main import main
from deffcore.measures.references import iid_reference_depth

REPO = Path(__file__).resolve().parents[1]


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["synthetic", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_subprocess_json_independent() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "deffcore", "synthetic", "--construction", "independent",
         "--n", "300", "--d", "30", "--layers", "6", "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    out = json.loads(proc.stdout)
    for key in ("deff", "deff_over_L", "gap_pct", "rho1", "reference_FL", "layers", "n", "d",
                "metric", "iid_reference_deff_over_L", "cka_bias"):  # fmt: skip
        assert key in out
    assert out["layers"] == 6 and out["n"] == 300 and out["d"] == 30 and out["metric"] == "cka"
    assert out["reference_FL"] == pytest.approx(12 / 7)
    assert out["cka_bias"] == pytest.approx(30 / 330)
    assert out["iid_reference_deff_over_L"] == pytest.approx(iid_reference_depth(300, 30, 6) / 6)
    assert out["deff_over_L"] == pytest.approx(out["iid_reference_deff_over_L"], abs=0.03)
    assert out["deff"] == pytest.approx(6 * out["deff_over_L"])
    assert "deff_updates_over_L" not in out


def test_orthogonal_updates_json(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "--construction", "orthogonal-updates", "--n", "300", "--d", "30",
                   "--layers", "6", "--scale", "0.3", "--seed", "2")  # fmt: skip
    assert out["scale"] == 0.3 and out["seed"] == 2
    assert out["deff_updates_over_L"] == pytest.approx(out["iid_reference_deff_over_L"], abs=0.03)
    assert out["deff_over_L"] < 0.5 * out["deff_updates_over_L"]
    assert out["rho1"] > 0.8


def test_orthogonal_states_and_metrics(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, "--construction", "orthogonal-states", "--n", "200", "--d", "20",
                   "--layers", "5")  # fmt: skip
    assert out["deff_over_L"] == pytest.approx(1.0, abs=1e-4)
    unbiased = run_json(capsys, "--n", "200", "--d", "100", "--layers", "5",
                        "--metric", "unbiased_cka")  # fmt: skip
    biased = run_json(capsys, "--n", "200", "--d", "100", "--layers", "5")
    assert unbiased["metric"] == "unbiased_cka"
    assert abs(unbiased["rho1"]) < 0.03 < biased["rho1"]


def test_human_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["synthetic", "--construction", "orthogonal-updates", "--n", "100", "--d", "10",
                 "--layers", "4"]) == 0  # fmt: skip
    text = capsys.readouterr().out
    assert "orthogonal-updates  N=100  d=10  L=4" in text
    for label in ("D_eff/L", "rho_hat(1)", "F_L = 2L/(L+1)", "gap to F_L (%)",
                  "D_eff(f)/L updates"):  # fmt: skip
        assert label in text


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["synthetic", "--layers", "1"]) == 2
    assert "at least 2 layers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["synthetic", "--construction", "spiral"])
