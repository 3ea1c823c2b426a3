"""The lab subcommands: --json output is one parseable object with the library's numbers."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deffcore.cli.main import main
from deffcore.core.constants import POOLINGS

TINY = ["--n", "8", "--max-tokens", "24", "--no-progress"]
CARRY = [
    "carry", "--preset", "tiny", "--gammas", "1,0.5", "--seeds", "0", "--iters", "2",
    "--eval-interval", "2", "--layers", "2", "--n-embd", "16", "--n-head", "2",
    "--block-size", "16", "--batch-size", "2", "--max-chars", "20000", "--no-progress",
]  # fmt: skip


def run_json(capsys, argv: list[str]) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # stdout holds nothing but the object


def test_interventions_json(capsys):
    from deffcore.labs.interventions import intervention_table

    out = run_json(capsys, ["interventions", "--model", "tiny-gemma3", *TINY])
    assert out["lab"] == "interventions" and len(out["rows"]) == 4 * len(POOLINGS)
    direct = intervention_table("tiny-gemma3", n=8, max_tokens=24)  # cache hit
    for row in out["rows"]:
        assert row["gap_pct"] == pytest.approx(direct.value(row["intervention"], row["pooling"]))
    assert (
        main(["interventions", "--model", "tiny-gemma3", "--interventions", "none,no_qk", *TINY])
        == 0
    )
    text = capsys.readouterr().out
    assert "gap% to F_L" in text and "no_qk" in text and "no_post" not in text


def test_interventions_refuses_with_exit_2(capsys):
    assert main(["interventions", "--model", "tiny-llama", *TINY]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "post_attention_layernorm" in err


def test_pruning_json(capsys):
    out = run_json(
        capsys, ["pruning", "--model", "tiny-llama", "--n-heldout", "4", "--ks", "0,1,2,8", *TINY]
    )
    assert out["lab"] == "pruning" and out["ks"] == [0, 1, 2] and out["layers"] == 4
    assert set(out["k_1.10"]) == {"bi", "local_deff"}
    assert len(out["block_influence"]) == len(out["local_delta_deff"]) == 4
    assert main(["pruning", "--model", "tiny-llama", "--n-heldout", "4", *TINY]) == 0
    assert "k_1.10" in capsys.readouterr().out


def test_carry_then_dynamics_json(capsys, tmp_path):
    out = run_json(capsys, [*CARRY, "--checkpoint-dir", str(tmp_path / "ck")])
    assert out["lab"] == "residual_carry"
    assert [row["gamma"] for row in out["final"]] == [1.0, 0.5]
    assert len(out["records"]) == 2 * 2
    # --n equal to the tiny preset's n_probe (32): the same probe windows as during training
    dyn = run_json(
        capsys, ["dynamics", "--checkpoints", str(tmp_path / "ck"), "--n", "32", "--no-progress"]
    )
    assert dyn["landed"] == dyn["planned"] == 4 and dyn["x_axis"] == "tokens"
    by_run = {(r["gamma"], r["step"]): r["deff_h_over_L"] for r in out["records"]}
    for p in dyn["points"]:
        gamma = 1.0 if p["label"].startswith("gamma1_") else 0.5
        assert p["deff_over_L"] == pytest.approx(by_run[(gamma, p["step"])], rel=1e-6)
    assert main([*CARRY]) == 0
    assert "D_eff(h)/L" in capsys.readouterr().out


def test_dynamics_needs_checkpoints(capsys):
    assert main(["dynamics", "--no-progress"]) == 2
    assert "--checkpoints" in capsys.readouterr().err


def test_aggregations_json(capsys):
    from deffcore.labs.aggregations import aggregation_table
    from deffcore.runs.measure import measure

    out = run_json(capsys, ["aggregations", "--model", "tiny-llama", *TINY])
    assert out["lab"] == "aggregations" and out["layers"] == 4 and len(out["rows"]) == 3 * 5
    direct = aggregation_table(measure(model="tiny-llama", n=8, max_tokens=24))
    for got, want in zip(out["rows"], direct["rows"], strict=True):
        assert got["value"] == pytest.approx(want["value"])


def test_pruning_json_has_the_tolerance_fields(capsys):
    from deffcore.labs.pruning import k_tolerance

    argv = ["pruning", "--model", "tiny-llama", "--n-heldout", "4", "--ks", "0,1,2", *TINY]
    out = run_json(capsys, argv)
    assert out["ppl0"] == out["ppl_k"]["0"] and set(out["ppl_k"]) == {"0", "1", "2"}
    assert out["k_110"] == k_tolerance({int(k): v for k, v in out["ppl_k"].items()})
    assert out["f_110"] == out["k_110"] / 4 and out["cached"] is False
    assert run_json(capsys, argv)["cached"] is True  # stored, read back
    assert run_json(capsys, [*argv, "--no-store"])["cached"] is False


def test_aggregations_json_has_the_trajectory_geometry(capsys):
    from deffcore.measures.geometry import geodesic_efficiency
    from deffcore.runs.measure import measure

    out = run_json(capsys, ["aggregations", "--model", "tiny-llama", *TINY])
    m = measure(model="tiny-llama", n=8, max_tokens=24)
    geo = geodesic_efficiency(m.states())
    assert out["geometry"]["cka"]["efficiency"] == pytest.approx(geo.efficiency)
    assert out["trajectory"]["euclidean_efficiency"] == pytest.approx(geo.euclidean_efficiency)
    assert "gw" not in out
    with_gw = run_json(capsys, ["aggregations", "--model", "tiny-llama", *TINY, "--gw",
                                "--n-gw", "6"])  # fmt: skip
    assert with_gw["gw"]["n_gw"] == 6 and len(with_gw["gw"]["gw"]) == 4


def test_gw_json(capsys):
    from deffcore.measures.gw import gw_matrix, pair_spearman
    from deffcore.runs.measure import measure

    out = run_json(capsys, ["gw", "--model", "tiny-llama", *TINY, "--n-gw", "6", "--gw-seed", "1"])
    assert {"gw", "spearman_gw_cka", "spearman_lag_gw", "spearman_lag_cka", "n_gw"} <= set(out)
    m = measure(model="tiny-llama", n=8, max_tokens=24)
    G = gw_matrix(m.states(), n=6, seed=1)
    np.testing.assert_allclose(out["gw"], G, atol=1e-12)
    want = pair_spearman(G, m.similarity())
    assert out["spearman_gw_cka"] == pytest.approx(want["spearman_gw_cka"])
    assert run_json(capsys, ["gw", "--model", "tiny-llama", *TINY, "--n-gw", "6", "--gw-seed",
                             "1"])["cached"] is True  # fmt: skip
    assert main(["gw", "--model", "tiny-llama", *TINY, "--n-gw", "6", "--gw-seed", "1"]) == 0
    text = capsys.readouterr().out
    assert "Spearman rho(|i-j|, GW)" in text and "start=both" in text
    # the default (the lower of two starts) with the paper's start's figures beside Table S22
    assert "this run from the paper's start (product): " in text
    assert "Pythia-410M: -0.86 / +0.45 / -0.48" in text
    assert out["init"] == "both" and out["paper_start"] is False
    assert out["paper"]["init"] == "product"


def test_gw_from_another_start_is_not_put_beside_table_s22(capsys):
    argv = ["gw", "--model", "tiny-llama", *TINY, "--n-gw", "6", "--init", "identity"]
    assert run_json(capsys, argv)["init"] == "identity"
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "Not compared with Table S22" in text and "Pythia-410M" not in text


def test_gw_failed_solve_exits_2_with_one_sentence_and_stores_nothing(capsys):
    from deffcore.labs import store

    argv = ["gw", "--model", "tiny-llama", *TINY, "--n-gw", "6", "--solver", "entropic"]
    assert main([*argv, "--epsilon", "1e-300"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no valid coupling" in err and len(err.splitlines()) == 1
    assert "Traceback" not in err
    assert not [r for r in store.list_results("gw") if r["identity"]["solver"] == "entropic"]


def test_correlate_json_without_arguments_is_table_s18(capsys):
    out = run_json(capsys, ["correlate"])
    assert out["kind"] == "s18" and out["paper"]["agree"] == 29
    conflict = out["paper"]["conflict"]
    assert (conflict["agree_labels"], conflict["agree_caption"]) == (14, 3)
    assert main(["correlate"]) == 0
    text = capsys.readouterr().out
    assert f"! {conflict['sentence']}" in text.splitlines() and "29 of 32" in text


def test_correlate_scores_json(capsys, tmp_path):
    path = tmp_path / "scores.csv"
    rows = ["model,task,score", "Llama-3.1-8B,T,66", "Mistral-7B,T,62", "OLMo-2-1B,T,40",
            "Pythia-1.4B,T,30", "Nobody-1B,T,1"]  # fmt: skip
    path.write_text("\n".join(rows) + "\n")
    assert main(["correlate", "--scores", str(path), "--sources", "paper", "--json"]) == 2
    assert "Nobody-1B" in capsys.readouterr().err
    out = run_json(
        capsys, ["correlate", "--scores", str(path), "--sources", "paper", "--ignore-unknown"]
    )
    (task,) = out["results"]
    assert task["n"] == 4 and out["unknown_models"] == ["Nobody-1B"]
    assert {p["model"]: p["x"] for p in task["points"]}["Mistral-7B"] == 0.048


def test_pretrain_json(capsys):
    out = run_json(capsys, ["pretrain", "--preset", "tiny", "--iters", "2", "--eval-interval",
                            "2", "--variants", "none", "--no-progress"])  # fmt: skip
    assert out["lab"] == "pretrain" and [r["step"] for r in out["records"]] == [0, 2]
    (row,) = out["final"]
    assert row["variant"] == "none" and row["paper_gap_default"] == 41.3
    assert out["cached"] is False
    argv = ["pretrain", "--preset", "tiny", "--iters", "2", "--eval-interval", "2",
            "--variants", "none", "--no-progress"]  # fmt: skip
    again = run_json(capsys, argv)
    assert again["cached"] is True and again["records"] == out["records"]  # stored, read back
    assert run_json(capsys, [*argv, "--no-store"])["cached"] is False
