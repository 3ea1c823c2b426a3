"""`python -m deffcore bos`: one JSON object whose numbers are the library's, clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deffcore.cli.main import main
from deffcore.core.constants import POOLINGS

ARGS = ["--model", "tiny-llama", "--n", "8", "--max-tokens", "24", "--no-progress"]


def _run(capsys, *extra: str) -> tuple[int, str, str]:
    code = main(["bos", *ARGS, *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_bos_json_matches_measure_and_diagnose(capsys, tiny_dataset):
    from deffcore.lenses.diagnostics_store import diagnose
    from deffcore.measures.activations import uniform_sink_score
    from deffcore.runs.measure import measure
    from deffcore.statistics.bos_answer import identical_controls
    from deffcore.statistics.trust_rule import measurement_trust
    from deffcore.statistics.verdict import bos_verdict, verdict_inputs

    code, out, _ = _run(capsys, "--dataset", tiny_dataset, "--json")
    assert code == 0
    d = json.loads(out)
    L = d["layers"]
    assert L == 4
    assert len(d["massive_ratio"]) == len(d["massive_position"]) == len(d["massive_dim"]) == L + 1
    assert len(d["sink_fraction"]) == L
    assert all(0 <= f <= 1 for f in d["sink_fraction"])
    assert set(d["results"]) == set(POOLINGS)
    m = measure(model="tiny-llama", dataset=tiny_dataset, n=8, max_tokens=24)  # cache hit
    assert m.cached
    for p in POOLINGS:
        s = m.summary(p)
        r = d["results"][p]
        assert set(r) == {"deff", "deff_over_L", "gap_pct", "rho1", "identical_to"}
        np.testing.assert_allclose(
            [r["deff"], r["deff_over_L"], r["gap_pct"], r["rho1"]],
            [s.deff, s.deff_over_L, s.gap_pct, s.rho1],
            rtol=1e-12,
        )
    np.testing.assert_allclose(d["pos0_norm_ratio"]["per_layer"], m.pooled.pos0_norm_ratio)
    diag = diagnose(m.spec)
    assert diag["cached"] and d["massive_ratio"] == diag["massive_ratio"]
    want = bos_verdict(
        {p: d["results"][p]["gap_pct"] for p in POOLINGS},
        identical=identical_controls(m),
        **verdict_inputs(diag),
    )
    assert d["verdict"] == want.sentence and d["verdict"].endswith(".")
    # 8 BBC documents truncated to 24 tokens, each with tiny-llama's BOS: equal lengths and
    # one first token, so no_pos0 is default for this run, said in the verdict and the row
    assert d["results"]["no_pos0"]["identical_to"] == "default"
    assert "no_pos0 is the same control as default here" in d["verdict"]
    assert "all 5 distinct controls" in d["verdict"] or "of the 5 distinct" in d["verdict"]
    assert d["sink_min_length"] == 6 and d["sink_passages"] == 8
    assert d["sink_baseline"] == pytest.approx(np.mean([uniform_sink_score(24)] * 8))
    assert d["sun_share"] == diag["sun_share"] and len(d["sun_share"]) == L + 1
    assert d["sun_onset"] == diag["sun_onset"]
    assert d["gu_sink_fraction"] == diag["gu_sink_fraction"] and len(d["gu_sink_fraction"]) == L
    assert d["gu_passages"] == 8 and d["gu_min_length"] == 10  # 24 tokens each
    assert d["gu64_sink_metric"] == d["gu_sink_metric"]  # 24 < 64 tokens: the same window
    t = d["trust"]
    assert t["point"] == d["results"]["default"]["deff_over_L"] and t["level"] == "noise"
    # the trust reads the BOS answer's paired bootstrap, kept with the run (SPEC 11.6)
    boot = m.paired_latest().result("default", "cka")
    assert t == measurement_trust(m, "default", bootstrap=boot).to_dict()
    assert d["bos"] == "default" and d["adds_bos"] is True
    # the page's answer: no_pos0 is default here, so it is certain (and says why)
    from deffcore.statistics.bos_answer import position0_answer_for

    a = d["position0_answer"]
    assert a == position0_answer_for(m.view(), "cka").to_dict()
    assert a["verdict"] == "not_artefact" and a["identical"] and a["paired"] is False
    # second call: everything from the cache
    _, out2, _ = _run(capsys, "--dataset", tiny_dataset, "--json")
    assert json.loads(out2)["cached"] == {"run": True, "diagnostics": True}


def test_bos_json_answer_is_paired_with_a_bootstrap(capsys, tiny_dataset):
    from deffcore.runs.measure import measure
    from deffcore.statistics.bos_answer import position0_answer_for

    opts = ["--dataset", tiny_dataset, "--passages", "windows", "--bos", "none", "--n", "24"]
    code, out, _ = _run(capsys, *opts, "--max-tokens", "16", "--json", "--bootstrap", "12")
    assert code == 0
    d = json.loads(out)
    m = measure(model="tiny-llama", dataset=tiny_dataset, n=24, max_tokens=16,
                passages="windows", bos="none")  # fmt: skip
    # with unbiased CKA beside linear CKA: its replicates answer linear CKA (SPEC 15)
    pb = m.paired_bootstrap(("default", "no_pos0"), ("cka", "unbiased_cka"), B=12, seed=0)
    assert d["position0_answer"] == position0_answer_for(m.view(), "cka", paired=pb).to_dict()
    assert d["position0_answer"]["paired"] is True
    assert d["position0_answer"]["answered_with"] == "unbiased_cka"
    res = pb.result("default", "cka")
    assert d["trust"]["interval"] == pytest.approx([res.low, res.high])


def test_bos_none_and_add_change_the_first_token(capsys, tiny_dataset):
    from deffcore.lenses.diagnostics_store import diagnose
    from deffcore.runs.measure import run_spec

    cases = (("tiny-llama", "none", False), ("tiny-llama-nobos", "add", True))
    for model, bos, first_is_bos in cases:
        code = main(
            ["bos", "--model", model, "--dataset", tiny_dataset, "--n", "8", "--max-tokens", "24",
             "--bos", bos, "--json", "--no-progress"]
        )  # fmt: skip
        d = json.loads(capsys.readouterr().out)
        assert code == 0 and d["bos"] == bos
        spec, _ = run_spec(model, tiny_dataset, 8, 24, 0, "cka", bos=bos)
        tokens = diagnose(spec)["inspector"]["tokens"]
        assert all((t[0] == "<bos>") == first_is_bos for t in tokens)
        assert all("<bos>" not in t[1:] for t in tokens)


def test_bos_table_output(capsys, tiny_dataset):
    code, out, _ = _run(capsys, "--dataset", tiny_dataset)
    assert code == 0
    assert "regime" in out and "no_pos0" in out and "massive activations" in out
    assert "= default (identical for this run)" in out and "by Sun et al." in out
    assert "uniform attention scores" in out and "trust (default pooling, D_eff/L)" in out


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--dataset", "/no/such/file.txt"], "file.txt"),
        (["--dataset", "bbc-news", "--model", "tiny-nosuch"], "tiny-nosuch"),
        (["--dataset", "bbc-news", "--n", "2"], "n must be"),
    ],
)
def test_bos_bad_input_is_one_line_exit_2(capsys, extra, needle):
    code, out, err = _run(capsys, *extra)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and needle in err and err.count("\n") == 1
