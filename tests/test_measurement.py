"""measure(): tiny models end to end, caching, memoisation, random null, consistency with the
engine; a slow run on the packaged SmolLM2 with BBC passages."""

from __future__ import annotations

import numpy as np
import pytest

from deffcore.core.constants import POOLINGS
from deffcore.core.errors import (
    DeffError,
    TooFewPassagesError,
    UnknownDatasetError,
    UnknownModelError,
)
from deffcore.inputs import run_spec as run_inputs_mod
from deffcore.measures.controls import apply_pc_control
from deffcore.measures.depth import depth_summary, effective_depth
from deffcore.measures.references import matched_references, update_depth
from deffcore.measures.similarity import similarity_matrix
from deffcore.runs import measure as measure_mod
from deffcore.runs import measure as measurement_mod
from deffcore.runs.measure import measure


def test_measure_tiny_end_to_end(tiny_dataset):
    m = measure(model="tiny-llama", dataset=tiny_dataset, n=10, max_tokens=48, seed=1)
    assert (m.layers, m.d_model, m.n) == (4, 64, 10) and not m.cached
    assert m.pooled.pooled["default"].shape == (5, 10, 64)
    for pooling in POOLINGS:
        S = m.similarity(pooling)
        s = m.summary(pooling)
        assert S.shape == (4, 4)
        # SPEC: D_eff(L-1) = L^2 / sum(S); summary equals the engine on the same states
        assert s.deff == pytest.approx(16 / S.sum(), rel=1e-9)
        assert s.deff == pytest.approx(depth_summary(similarity_matrix(m.states(pooling))).deff)
    np.testing.assert_allclose(
        m.states("top3_pc"), apply_pc_control(m.pooled.pooled["default"][1:], "top3_pc"), atol=1e-5
    )
    np.testing.assert_allclose(m.states("default"), m.pooled.pooled["default"][1:])
    ratio, layer = m.pos0_peak()
    assert ratio == pytest.approx(float(np.max(m.pooled.pos0_norm_ratio)))
    assert layer == int(np.argmax(m.pooled.pos0_norm_ratio))
    want_upd = update_depth(m.pooled.pooled["token_normed"], "cka")
    assert m.update_depth("token_normed").deff_upd == pytest.approx(want_upd.deff_upd)
    want_ref = matched_references(m.pooled.pooled["default"], deff=m.summary().deff)
    assert m.matched_references().F_h0_corr == pytest.approx(want_ref.F_h0_corr)
    s_k = m.summary("default", K=2)
    assert s_k.deff == pytest.approx(effective_depth(m.similarity("default"), 2))


def test_second_call_is_served_from_cache(tiny_dataset, monkeypatch):
    first = measure(model="tiny-qwen2", dataset=tiny_dataset, n=8, max_tokens=32)

    def no_model(*_a, **_k):
        raise AssertionError("the model must not be loaded on a cache hit")

    monkeypatch.setattr(run_inputs_mod, "load_model", no_model)
    second = measure(model="tiny-qwen2", dataset=tiny_dataset, n=8, max_tokens=32)
    assert second.cached and not first.cached
    for p in first.pooled.pooled:
        np.testing.assert_array_equal(first.pooled.pooled[p], second.pooled.pooled[p])
    assert second.to_dict()["results"] == first.to_dict()["results"]


def test_switching_pooling_and_metric_never_reruns(tiny_dataset, monkeypatch):
    m = measure(model="tiny-gpt2", dataset=tiny_dataset, n=8, max_tokens=32, metric="cosine")
    calls = []
    real = measurement_mod.similarity_matrix

    def counting(states, metric="cka"):
        calls.append(metric)
        return real(states, metric)

    monkeypatch.setattr(measurement_mod, "similarity_matrix", counting)
    monkeypatch.setattr(measure_mod, "extract_run", None)  # any rerun would crash
    for _ in range(3):
        for pooling in POOLINGS:
            m.summary(pooling)
            m.summary(pooling, "unbiased_cka", K=2)
    assert len(calls) == 2 * len(POOLINGS)
    assert m.similarity("default") is m.similarity("default", "cosine")


def test_to_dict_has_every_documented_field(tiny_dataset):
    d = measure(model="tiny-gemma3", dataset=tiny_dataset, n=8, max_tokens=32).to_dict()
    for key in ("model", "layers", "d_model", "n", "reference_FL", "pos0_norm_ratio", "results",
                "n_dropped", "cka_bias", "cached", "elapsed_s", "resumed_passages"):  # fmt: skip
        assert key in d, key
    assert d["resumed_passages"] == 0  # computed in one go (resuming: tests/test_resume.py)
    assert set(d["pos0_norm_ratio"]) == {"max", "layer"}
    assert set(d["results"]) == set(POOLINGS)
    for r in d["results"].values():
        for key in ("deff", "deff_over_L", "gap_pct", "rho1", "update_depth",
                    "matched_references"):  # fmt: skip
            assert key in r
    assert d["reference_FL"] == pytest.approx(2 * 4 / 5)
    assert d["cka_bias"] == pytest.approx(64 / (8 + 64))


def test_random_null_band(tiny_dataset):
    m = measure(
        model="tiny-olmo2", dataset=tiny_dataset, n=8, max_tokens=32, random_seeds=(0, 1, 2)
    )
    assert [r.spec.model for r in m.random_null] == [f"random:tiny-olmo2:{s}" for s in (0, 1, 2)]
    band = m.random_band("default")
    vals = [r.summary("default").deff_over_L for r in m.random_null]
    assert band["deff_over_L"] == vals
    assert band["mean"] == pytest.approx(np.mean(vals))
    assert band["high"] - band["mean"] == pytest.approx(2 * np.std(vals, ddof=1))
    assert len({round(v, 9) for v in vals}) == 3  # different seeds, different weights
    again = measure(model="tiny-olmo2", dataset=tiny_dataset, n=8, max_tokens=32, random_seeds=(1,))
    assert again.random_null[0].cached
    assert "random_null" in m.to_dict()


def test_random_seeds_are_checked_before_the_run(tiny_dataset, monkeypatch):
    """random_seeds="12" measured seeds '1' and '2', (-1,) a "random:<model>:-1" that the
    spec parser itself refuses, and 5 a TypeError -- each after the main run. Now one sentence
    before anything loads, for a named model and a model in memory alike."""
    from deffcore.runs import measure as measure_module

    def never(*args, **kwargs):
        raise AssertionError("the run started before its random_seeds were checked")

    monkeypatch.setattr(measure_module, "measure_spec", never)
    for bad in ("12", 5, (-1,), (1.5,), [0, "1"], {0: 1}):
        with pytest.raises(DeffError, match="random_seeds"):
            measure(model="tiny-llama", dataset=tiny_dataset, n=8, max_tokens=16, random_seeds=bad)
        with pytest.raises(DeffError, match="random_seeds"):
            measure(object(), object(), ["a b c"], max_tokens=16, random_seeds=bad)


def test_a_pooling_or_metric_that_is_not_a_name_is_one_sentence():
    """m.similarity(["default"]) raised 'unhashable type: list' from the memo's key."""
    from deffcore.runs.measure import measure_states

    rng = np.random.default_rng(0)
    m = measure_states(rng.standard_normal((3, 6, 5, 4)).astype(np.float32), np.ones((6, 5)))
    for call in (
        lambda: m.similarity(["default"]),
        lambda: m.similarity("default", ["cka"]),
        lambda: m.summary(["default"]),
        lambda: m.trust(pooling={"default": 1}),
    ):
        with pytest.raises(DeffError, match=r"Unknown (pooling|metric)"):
            call()


def test_bootstrap_uses_the_engine(tiny_dataset):
    m = measure(model="tiny-llama", dataset=tiny_dataset, n=10, max_tokens=32)
    b = m.bootstrap(B=20, seed=0)
    assert b.point == pytest.approx(m.summary().deff_over_L)
    assert b.low <= b.high and len(b.samples) == 20


def test_intervention_changes_the_run(tiny_dataset):
    pytest.importorskip("deffcore.labs.interventions")
    base = measure(model="tiny-gemma3", dataset=tiny_dataset, n=8, max_tokens=32)
    nopost = measure(model="tiny-gemma3", dataset=tiny_dataset, n=8, max_tokens=32,
                     intervention="no_post")  # fmt: skip
    assert nopost.spec.key() != base.spec.key() and not nopost.cached
    assert not np.allclose(nopost.pooled.pooled["default"], base.pooled.pooled["default"])
    # h_0 is computed before any block, so the intervention cannot change it
    np.testing.assert_allclose(nopost.pooled.pooled["default"][0], base.pooled.pooled["default"][0])


def test_errors(tmp_path, tiny_dataset):
    one_token = tmp_path / "short.txt"
    one_token.write_text("\n\n".join("abcdefgh"))  # 8 one-character passages
    with pytest.raises(TooFewPassagesError, match="at least 2 tokens"):
        measure(model="tiny-llama-nobos", dataset=str(one_token), n=8, max_tokens=16)
    with pytest.raises(UnknownDatasetError):
        measure(model="tiny-llama", dataset=str(tmp_path / "nope.txt"), n=8)
    with pytest.raises(UnknownModelError):
        measure(model="tiny-nonsense", dataset=tiny_dataset, n=8)
    with pytest.raises(DeffError, match="metric"):
        measure(model="tiny-llama", dataset=tiny_dataset, n=8, metric="pearson")
    with pytest.raises(TooFewPassagesError):
        measure(model="tiny-llama", dataset=tiny_dataset, n=2)
    m = measure(model="tiny-llama", dataset=tiny_dataset, n=8, max_tokens=16)
    with pytest.raises(DeffError, match="pooling"):
        m.similarity("max_pool")


@pytest.mark.slow
def test_smollm2_on_bbc_news_is_sub_reference():
    m = measure(model="smollm2-135m", dataset="bbc-news", n=32, max_tokens=64)
    assert (m.layers, m.d_model, m.n) == (30, 576, 32)
    s = m.summary("default")
    S = m.similarity("default")
    assert s.deff == pytest.approx(30**2 / S.sum(), rel=1e-9)
    engine = depth_summary(similarity_matrix(m.pooled.pooled["default"][1:], "cka"))
    assert s.deff == pytest.approx(engine.deff, rel=1e-9)
    assert s.gap_pct > 0  # sub-reference: more redundant than orthogonal updates
    assert 0 < s.deff < s.reference_FL
    d = m.to_dict()
    assert d["pos0_norm_ratio"]["max"] > 1
    assert all(np.isfinite(d["results"][p]["deff"]) for p in POOLINGS)


def test_random_null_follows_use_cache(tiny_dataset, deff_cache_dir):
    """`use_cache=False` reaches the random-weight null runs too: nothing is written."""
    m = measure(model="tiny-llama", dataset=tiny_dataset, n=6, max_tokens=16, random_seeds=(0,),
                use_cache=False)  # fmt: skip
    assert not m.cached and not m.random_null[0].cached
    assert not deff_cache_dir.exists() or not any(deff_cache_dir.iterdir())


def test_answer_bootstrap_draws_the_stand_in_and_does_without_it_only_where_undefined(
    tiny_dataset, monkeypatch
):
    """Beside linear CKA the answer's bootstrap holds unbiased CKA (its replicates answer the
    BOS question, SPEC 15); on a run too small for the U-statistic it is drawn without it,
    once: the failed draw is remembered, not retried on every call."""
    from deffcore.statistics import paired

    pairs = ("default", "no_pos0")
    big = measure(model="tiny-llama", dataset=tiny_dataset, n=24, max_tokens=16,
                  passages="windows", bos="none")  # fmt: skip
    pb = big.answer_bootstrap(pairs, B=10)
    assert all(pb.has(p, x) for p in pairs for x in ("cka", "unbiased_cka"))
    assert big.answer_bootstrap(pairs, "unbiased_cka", B=10).has("default", "cka") is False
    small = measure(model="tiny-llama", dataset=tiny_dataset, n=8, max_tokens=32)
    real, drawn = paired.paired_bootstrap, []

    def counted(stacks, *, metrics, **kwargs):
        drawn.append(tuple(metrics))
        return real(stacks, metrics=metrics, **kwargs)

    monkeypatch.setattr(paired, "paired_bootstrap", counted)
    with pytest.raises(DeffError):
        small.paired_bootstrap(pairs, ("cka", "unbiased_cka"), B=20)
    drawn.clear()
    alone = small.answer_bootstrap(pairs, B=20)
    assert alone.has("default", "cka") and not alone.has("default", "unbiased_cka")
    assert small.answer_bootstrap(pairs, B=20) is alone
    assert drawn == [("cka", "unbiased_cka"), ("cka",)]
