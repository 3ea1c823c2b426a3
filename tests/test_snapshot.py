"""A snapshot reads back as the run it was made from; the shipped default is consistent."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from deffcore.constants import METRICS, POOLINGS
from deffcore.depth import effective_depth, gap_percent, lag_profile
from deffcore.snapshot import (
    DEFAULT_RUN_PATH,
    GALLERY_DIR,
    MeasurementView,
    SnapshotView,
    common_label,
    headline_changes,
    label_fields,
    load_gallery,
    load_snapshot,
    run_identity,
    run_label,
    run_labels,
    run_slug,
    snapshot,
)


@pytest.fixture(scope="module")
def tiny_measurement(tmp_path_factory):
    import os

    from deffcore.measurement import measure

    old = os.environ.get("DEFF_CACHE_DIR")
    os.environ["DEFF_CACHE_DIR"] = str(tmp_path_factory.mktemp("snap_cache"))
    try:
        yield measure(model="tiny-llama", n=12, max_tokens=24, random_seeds=(1, 2))
    finally:
        if old is None:
            os.environ.pop("DEFF_CACHE_DIR")
        else:
            os.environ["DEFF_CACHE_DIR"] = old


def test_round_trip_gives_the_same_numbers(tiny_measurement, tmp_path):
    m = tiny_measurement
    data = json.loads(json.dumps(snapshot(m, command="python -m deffcore measure ...")))
    snap, live = SnapshotView(data), MeasurementView(m)
    assert snap.layers == live.layers == 4 and snap.d_model == 64 and snap.n == m.n
    assert snap.key == live.key == m.spec.key()
    for pooling in POOLINGS:
        for metric in METRICS:
            np.testing.assert_allclose(
                snap.similarity(pooling, metric), m.similarity(pooling, metric), atol=1e-6
            )
        for K in (1, 2, None):
            a, b = snap.headline(pooling, "cka", K), live.headline(pooling, "cka", K)
            assert a.deff == pytest.approx(b.deff, abs=1e-5)
            assert a.gap_pct == pytest.approx(b.gap_pct, abs=1e-3)
        assert snap.update_depth(pooling, "cka")["deff_upd"] == pytest.approx(
            m.update_depth(pooling).deff_upd, abs=1e-5
        )
    np.testing.assert_allclose(snap.pos0_norm_ratio(), m.pooled.pos0_norm_ratio, atol=1e-6)
    band = snap.random_band("default", "cka")
    assert band["deff_over_L"] == pytest.approx(m.random_band()["deff_over_L"], abs=1e-6)
    # only the metric the CLI JSON was made with carries the per-pooling extras
    assert snap.update_depth("default", "cosine") is None
    assert snap.random_band("default", "cosine") == {}


def test_headline_is_the_engine_on_S(tiny_measurement):
    view = MeasurementView(tiny_measurement)
    S = tiny_measurement.similarity("token_normed", "cosine")
    h = view.headline("token_normed", "cosine", K=2)
    assert h.K == 2 and h.deff == effective_depth(S, K=2)
    assert h.gap_pct == gap_percent(h.deff, 4)
    assert h.rho1 == lag_profile(S)[0]
    assert h.cka_bias == pytest.approx(64 / (tiny_measurement.n + 64))
    ratios = tiny_measurement.pooled.pos0_norm_ratio
    assert (h.pos0_ratio, h.pos0_layer) == pytest.approx(
        (float(np.max(ratios)), int(np.argmax(ratios)))
    )
    assert view.headline("default", "cka", K=99).K == 3  # K is capped at L-1
    by_K = view.deff_over_L_by_K("default", "cka")
    assert list(by_K) == [1, 2, 3]
    assert by_K[3] == pytest.approx(tiny_measurement.summary().deff_over_L)


def test_other_format_is_rejected_and_missing_file_is_none(tmp_path):
    with pytest.raises(ValueError, match="format"):
        SnapshotView({"format": 999})
    assert load_snapshot(tmp_path / "none.json") is None


def test_run_label():
    spec = {"model": "m", "dataset": "d", "n": 5, "max_tokens": 7, "seed": 3}
    assert run_label(spec) == "m · d · N=5 · T=7 · seed 3"
    # what is not at its default is said; the default fields stay quiet
    spec2 = {**spec, "model": "random:m:2", "passages": "windows", "bos": "add"}
    assert run_label(spec2) == "random:m:2 · d · N=5 · T=7 · windows · BOS add · seed 3"
    assert run_label({**spec, "intervention": "rms_norm"}).endswith(
        "intervention rms_norm · seed 3"
    )


BASE = {
    "model": "smollm2-135m",
    "revision": None,
    "dataset": "bbc-news",
    "n": 512,
    "max_tokens": 128,
    "seed": 0,
    "dtype": "float32",
}


def test_run_labels_name_only_what_differs():
    specs = [
        BASE,
        {**BASE, "model": "random:smollm2-135m:1"},
        {**BASE, "model": "random:smollm2-135m:2"},
        {**BASE, "intervention": "rms_norm"},
    ]
    labels = run_labels(specs)
    assert labels == [
        "trained · no intervention",
        "random weights, init seed 1 · no intervention",
        "random weights, init seed 2 · no intervention",
        "trained · intervention rms_norm",
    ]
    assert common_label(specs) == "smollm2-135m · bbc-news · N=512 · T=128 · seed 0"
    # every field can be the difference, and the labels are then all distinct
    variants = [
        {"passages": "windows"},
        {"bos": "none"},
        {"revision": "abc123"},
        {"n": 4096},
        {"max_tokens": 64},
        {"dataset": "hf:wikitext:wikitext-2-raw-v1:test:text"},
        {"seed": 7},
        {"dtype": "bfloat16"},
        {"model": "gemma3-270m"},
    ]
    for change in variants:
        a, b = run_labels([BASE, {**BASE, **change}])
        assert a != b, change
        assert "smollm2-135m" not in a or "model" in change  # the shared model is said once
    a, b = run_labels([BASE, {**BASE, "passages": "windows"}])
    assert (a, b) == ("documents", "windows")


def test_run_labels_single_duplicates_and_old_specs():
    assert run_labels([]) == []
    assert run_labels([BASE]) == [run_label(BASE)]
    # the same run twice (a gallery copy and a cached run) still gets two labels
    a, b = run_labels([BASE, dict(BASE)])
    assert a != b and b.endswith("(copy 2)")
    # a spec from before passages/bos/intervention existed reads as their defaults
    old = {k: BASE[k] for k in ("model", "dataset", "n", "max_tokens", "seed")}
    assert run_labels([old, BASE])[0] == run_labels([old, BASE])[1].replace(" (copy 2)", "")


def test_local_dataset_paths_are_shown_by_file_name_only():
    spec = {**BASE, "dataset": "/srv/cache/.uploads/0123456789abcdef_my notes.csv:text"}
    assert label_fields(spec)["dataset"] == "my notes.csv:text"
    assert "/srv" not in run_label(spec) and "uploads" not in run_slug(spec)
    assert label_fields({**BASE, "dataset": "/data/passages.jsonl"})["dataset"] == "passages.jsonl"
    assert label_fields({**BASE, "dataset": "hf:wikitext:x:test:text"})["dataset"] == (
        "hf:wikitext:x:test:text"
    )


def test_run_slug_is_a_safe_file_name_with_the_identity():
    assert run_slug(BASE) == "smollm2-135m_bbc-news_N512_T128_seed0"
    slug = run_slug(
        {**BASE, "model": "random:gemma3-270m:1", "n": 4096, "passages": "windows", "bos": "add"}
    )
    assert slug == "gemma3-270m_random-s1_bbc-news_N4096_T128_windows_bos-add_seed0"
    odd = run_slug({**BASE, "model": "EleutherAI/pythia-70m", "dataset": "hf:a b:c:test"})
    assert re.fullmatch(r"[A-Za-z0-9._-]+", odd) and "EleutherAI-pythia-70m" in odd
    ident = run_identity(BASE, pooling="default", metric="cka")
    assert ident["model"] == "smollm2-135m" and ident["passages"] == "documents"
    assert (ident["pooling"], ident["metric"]) == ("default", "cka")


def test_headline_changes_are_b_minus_a(tiny_measurement):
    view = MeasurementView(tiny_measurement)
    a, b = view.headline("default", "cka"), view.headline("first_non_bos", "cka")
    rows = {r["quantity"]: r for r in headline_changes(a, b)}
    assert rows["D_eff"]["change (B - A)"] == pytest.approx(b.deff - a.deff)
    assert rows["Gap to F_L (%)"]["run A"] == a.gap_pct
    assert rows["N (passages)"]["change (B - A)"] == 0.0
    assert len(rows) == 8


def test_snapshot_spec_carries_passages_bos_and_intervention(tiny_measurement):
    data = snapshot(tiny_measurement)
    for field in ("intervention", "passages", "bos"):
        assert data["spec"][field] == getattr(tiny_measurement.spec, field)


def test_gallery_default_first_one_per_key_and_damaged_files_skipped(tiny_measurement, tmp_path):
    data = json.loads(json.dumps(snapshot(tiny_measurement)))
    folder = tmp_path / "gallery"
    folder.mkdir()
    (folder / "a_run.json").write_text(json.dumps(data))
    (folder / "b_same_run.json").write_text(json.dumps(data))  # same key: shown once
    other = json.loads(json.dumps(data))
    other["key"], other["spec"]["seed"] = "otherkey", 5
    (folder / "c_other.json").write_text(json.dumps(other))
    (folder / "d_broken.json").write_text("{not json")
    (folder / "e_list.json").write_text("[]")
    (folder / "f_old_format.json").write_text(json.dumps({**data, "format": 0}))
    with pytest.warns(UserWarning, match="Skipped gallery snapshot"):
        views = load_gallery(folder, default=None)
    assert [v.key for v in views] == [data["key"], "otherkey"]
    assert all(v.source == "precomputed" for v in views)
    assert views[1].spec["seed"] == 5
    assert load_gallery(tmp_path / "nothing", default=None) == []
    if DEFAULT_RUN_PATH.exists():
        shipped = load_gallery(tmp_path / "nothing")
        assert [v.key for v in shipped] == [load_snapshot().key]


def test_shipped_gallery_is_small_and_consistent():
    files = sorted(GALLERY_DIR.glob("*.json"))
    for path in files:
        assert path.stat().st_size < 300_000, path.name
    views = load_gallery(default=None)
    assert len(views) == len(files)  # none skipped, no duplicates
    for view in views:
        _check_snapshot(view)


def _arg(command: str, flag: str) -> str | None:
    words = command.split()
    return words[words.index(flag) + 1] if flag in words else None


def _check_snapshot(snap: SnapshotView) -> None:
    """The stored spec is the command's, S is a similarity matrix, the CLI numbers agree."""
    assert snap.command.startswith("python -m deffcore measure --model ")
    assert snap.spec["model"] == _arg(snap.command, "--model")
    for flag, field in (("--n", "n"), ("--max-tokens", "max_tokens"), ("--seed", "seed")):
        if _arg(snap.command, flag) is not None:
            assert str(snap.spec[field]) == _arg(snap.command, flag), field
    if _arg(snap.command, "--passages"):
        assert snap.spec["passages"] == _arg(snap.command, "--passages")
    assert snap.n <= snap.spec["n"]
    cli = snap.data["measurement"]
    for pooling in POOLINGS:
        if pooling not in snap.data["similarity"]:
            continue  # a snapshot made before this pooling existed
        S = snap.similarity(pooling, "cka")
        assert S.shape == (snap.layers, snap.layers)
        np.testing.assert_allclose(S, S.T, atol=1e-6)
        np.testing.assert_allclose(np.diag(S), 1.0, atol=1e-5)
        # the stored matrices and the CLI's JSON numbers agree
        assert snap.headline(pooling).deff == pytest.approx(
            cli["results"][pooling]["deff"], abs=1e-4
        )


@pytest.mark.skipif(not DEFAULT_RUN_PATH.exists(), reason="default_run.json not generated")
def test_shipped_default_run_is_small_and_consistent():
    assert DEFAULT_RUN_PATH.stat().st_size < 300_000
    snap = load_snapshot()
    assert snap.spec["model"] == "smollm2-135m" and snap.spec["dataset"] == "bbc-news"
    assert snap.spec["max_tokens"] == 128
    assert (snap.layers, snap.d_model) == (30, 576)
    _check_snapshot(snap)
