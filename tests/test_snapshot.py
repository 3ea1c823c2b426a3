"""A snapshot reads back as the run it was made from; the shipped default is consistent."""

from __future__ import annotations

import hashlib
import json
import os
import re

import numpy as np
import pytest

from deffcore.core.constants import METRICS, POOLINGS
from deffcore.measures.depth import effective_depth, gap_percent, lag_profile
from deffcore.views.labels import (
    common_label,
    label_fields,
    run_identity,
    run_label,
    run_labels,
    run_slug,
)
from deffcore.views.run import (
    DEFAULT_RUN_PATH,
    GALLERY_DIR,
    Run,
    load_gallery,
    load_snapshot,
)


@pytest.fixture(scope="module")
def tiny_measurement(tmp_path_factory):
    import os

    from deffcore.runs.measure import measure

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
    data = json.loads(
        json.dumps(Run.from_measurement(m).to_snapshot(command="python -m deffcore measure ..."))
    )
    snap, live = Run.from_snapshot(data), Run.from_measurement(m)
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


def test_one_run_with_or_without_its_states(tiny_measurement, monkeypatch):
    """A live run holds its Measurement; the same run opened from its plain form holds none,
    gives back exactly that form, and reads the same stored results (matched references
    memoised on the live run: Measurement recomputes them on every call)."""
    m = tiny_measurement
    live = Run.from_measurement(m, label="mine")
    data = json.loads(json.dumps(live.to_snapshot(command="deffcore measure ...")))
    snap = Run.from_snapshot(data)
    assert (live.measurement, live.source, live.label) == (m, "measured", "mine")
    assert (snap.measurement, snap.source, snap.command) == (None, "precomputed", data["command"])
    assert snap.to_snapshot() is snap.data and snap.to_snapshot() == data
    calls = []
    real = type(m).matched_references
    monkeypatch.setattr(
        type(m), "matched_references", lambda self, *a: calls.append(a) or real(self, *a)
    )
    first = live.matched_references("default", "cka")
    assert live.matched_references("default", "cka") is first and len(calls) == 1
    stored = snap.matched_references("default", "cka")
    assert stored.keys() == first.keys()


def test_headline_is_the_engine_on_S(tiny_measurement):
    view = Run.from_measurement(tiny_measurement)
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


def test_a_pooling_or_metric_a_shared_run_lacks_is_one_sentence(tiny_measurement):
    """In a notebook, `run.headline("bogus")` or `run.trust(metric="nope")` on an opened
    snapshot is a DeffError naming what the run holds, as on a live run, never a bare KeyError
    or TypeError; it stays a KeyError too, so a surface skipping what an older snapshot lacks
    (a pooling made after it) keeps skipping it."""
    from deffcore.core.errors import DeffError

    data = json.loads(json.dumps(Run.from_measurement(tiny_measurement).to_snapshot()))
    del data["similarity"]["no_pos0"]
    snap = Run.from_snapshot(data)
    calls = [
        lambda: snap.similarity("bogus"),
        lambda: snap.similarity("default", "nope"),
        lambda: snap.similarity(["default"]),
        lambda: snap.headline("no_pos0"),
        lambda: snap.trust(metric="nope"),
        lambda: snap.lag_profile(pooling=None),
    ]
    for call in calls:
        with pytest.raises(DeffError, match=r"holds poolings default.*metrics cka") as err:
            call()
        assert isinstance(err.value, KeyError) and "\n" not in str(err.value)
        assert not str(err.value).startswith(("'", '"'))  # a sentence, not a KeyError's repr
    assert snap.trust().level  # the default pooling and metric are there


def test_other_format_is_rejected_and_missing_file_is_none(tmp_path):
    with pytest.raises(ValueError, match="format"):
        Run.from_snapshot({"format": 999})
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


def test_headline_differences_are_b_minus_a(tiny_measurement):
    from deffcore.views.comparisons import headline_differences

    view = Run.from_measurement(tiny_measurement)
    a, b = view.headline("default", "cka"), view.headline("first_non_bos", "cka")
    rows = {r["quantity"]: r for r in headline_differences(a, b)}
    assert rows["D_eff"]["B − A"] == pytest.approx(b.deff - a.deff)
    assert rows["Gap to F_L (%)"]["run A"] == a.gap_pct
    assert rows["N (passages)"]["B − A"] == 0.0
    assert len(rows) == 8


def test_snapshot_spec_carries_passages_bos_and_intervention(tiny_measurement):
    data = Run.from_measurement(tiny_measurement).to_snapshot()
    for field in ("intervention", "passages", "bos"):
        assert data["spec"][field] == getattr(tiny_measurement.spec, field)


def test_gallery_default_first_one_per_key_and_damaged_files_skipped(tiny_measurement, tmp_path):
    data = json.loads(json.dumps(Run.from_measurement(tiny_measurement).to_snapshot()))
    folder = tmp_path / "gallery"
    folder.mkdir()
    (folder / "a_run.json").write_text(json.dumps(data))
    (folder / "b_same_run.json").write_text(json.dumps(data))  # same key: shown once
    other = json.loads(json.dumps(data))
    other["key"] = other["measurement"]["key"] = "f" * 20  # another run: a key of its own
    other["spec"]["seed"] = 5
    (folder / "c_other.json").write_text(json.dumps(other))
    (folder / "d_broken.json").write_text("{not json")
    (folder / "e_list.json").write_text("[]")
    (folder / "f_old_format.json").write_text(json.dumps({**data, "format": 0}))
    with pytest.warns(UserWarning, match="Skipped gallery snapshot"):
        views = load_gallery(folder, default=None)
    assert [v.key for v in views] == [data["key"], "f" * 20]
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


def _check_snapshot(snap: Run) -> None:
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
    # 270 kB of numbers, and about 210 kB of its diagnostics (the inspector's 8 passages of 128
    # tokens: L + 1 norms per token), which it carries so the BOS page is whole at first visit,
    # and 48 kB of the six SPEC 17 measures' 30 x 30 matrices (the metric picker, SPEC 17.5)
    assert DEFAULT_RUN_PATH.stat().st_size < 640_000
    snap = load_snapshot()
    assert snap.spec["model"] == "smollm2-135m" and snap.spec["dataset"] == "bbc-news"
    assert snap.spec["max_tokens"] == 128
    assert (snap.layers, snap.d_model) == (30, 576)
    _check_snapshot(snap)


#: The SPEC 17 measures the metric picker offers beyond the CKA family (SPEC 17.5).
SIX = ("procrustes", "mutual_knn", "cknna", "rsa", "svcca", "pwcca")


def _shipped_measures() -> set[str]:
    if not DEFAULT_RUN_PATH.exists():
        return set()
    return set(json.loads(DEFAULT_RUN_PATH.read_text())["similarity"]["default"]) - set(METRICS)


def test_the_shipped_default_run_holds_every_measures_matrix():
    """The first screen draws any measure the picker offers (SPEC 17.5): the shipped run holds
    each one's point-estimate matrix for the default pooling, checked by the one schema
    (square, symmetric, unit diagonal, in [-1, 1]), rounded like the metrics' matrices."""
    from deffcore.views.run_schema import check_snapshot

    data = check_snapshot(json.loads(DEFAULT_RUN_PATH.read_text()), DEFAULT_RUN_PATH.name)
    snap = load_snapshot()
    L = snap.layers
    for measure in SIX:
        S = np.asarray(data["similarity"]["default"][measure], dtype=float)
        assert S.shape == (L, L) and np.array_equal(S, S.T), measure
        assert np.allclose(np.diag(S), 1.0, atol=1e-6) and np.isfinite(S).all(), measure
        assert np.array_equal(S, np.round(S, 6)), measure
        assert snap.similarity("default", measure).tolist() == S.tolist()
    assert _shipped_measures() == set(SIX)  # no other pooling's, none beyond the six


# ---------------------------------------------------------------------------------------------
# Shared runs: open_snapshot / read_snapshot / save_shared / list_shared / delete_shared


def test_a_shared_snapshot_reads_back_as_the_run_and_compares_like_one(tiny_measurement, tmp_path):
    from deffcore.views.sharing import open_snapshot

    path = tmp_path / "from a colleague.json"
    path.write_text(
        json.dumps(
            Run.from_measurement(tiny_measurement).to_snapshot(command="python -m deffcore ...")
        )
    )
    shared = open_snapshot(path)
    live = Run.from_measurement(tiny_measurement)
    assert shared.source == "shared" and shared.path == path.resolve()
    assert len(shared.sha256) == 64 and shared.key == live.key and shared.label == live.label
    from deffcore.views.comparisons import headline_differences

    for row in headline_differences(live.headline(), shared.headline()):
        assert row["B − A"] == pytest.approx(0.0, abs=1e-5), row["quantity"]
    assert shared.trust().level == live.trust().level


def test_every_shipped_snapshot_validates():
    from deffcore.views.sharing import open_snapshot

    for path in [DEFAULT_RUN_PATH, *sorted(GALLERY_DIR.glob("*.json"))]:
        if path.exists():
            assert open_snapshot(path).layers >= 2, path.name


def _bad_snapshots(good: dict) -> dict[str, object]:
    """name -> a file body (bytes) or a dict that breaks one rule."""
    import copy
    import pickle

    def edit(fn):
        data = copy.deepcopy(good)
        fn(data)
        return data

    L = good["layers"]
    return {
        "empty": b"",
        "not json": b"{not json",
        "not utf-8": b"\xff\xfe\x00{",
        "a pickle": pickle.dumps(print),
        "deep nesting": b"[" * 100_000,
        "a list": [],
        "other format": edit(lambda d: d.update(format=2)),
        "no similarity": edit(lambda d: d.pop("similarity")),
        "spec n a string": edit(lambda d: d["spec"].update(n="512")),
        "unknown spec field": edit(lambda d: d["spec"].update(command="rm -rf /")),
        "unknown passages": edit(lambda d: d["spec"].update(passages="sentences")),
        "layers a bool": edit(lambda d: d.update(layers=True)),
        "layers huge": edit(lambda d: d.update(layers=10**9)),
        "bad key": edit(lambda d: d.update(key="../../etc")),
        "short pos0": edit(lambda d: d.update(pos0_norm_ratio=[1.0] * L)),
        "string in S": edit(lambda d: d["similarity"]["default"]["cka"][0].__setitem__(1, "0.5")),
        "S too small": edit(lambda d: d["similarity"]["default"].update(cka=[[1.0]])),
        "S asymmetric": edit(lambda d: d["similarity"]["default"]["cka"][0].__setitem__(1, 0.123)),
        "S out of range": edit(lambda d: d["similarity"]["default"]["cka"][0].__setitem__(0, 5.0)),
        "NaN in S": edit(
            lambda d: d["similarity"]["default"]["cka"][1].__setitem__(1, float("nan"))
        ),
        "unknown pooling": edit(lambda d: d["similarity"].update(mystery={})),
        "results a list": edit(lambda d: d["measurement"].update(results=[1])),
        "band text": edit(
            lambda d: d["measurement"]["random_null"]["results"]["default"].update(mean={"x": 1})
        ),
    }


def test_corrupt_or_foreign_files_get_one_sentence(tiny_measurement, tmp_path):
    from deffcore.views.sharing import SnapshotError, open_snapshot, read_snapshot

    good = json.loads(json.dumps(Run.from_measurement(tiny_measurement).to_snapshot()))
    read_snapshot(json.dumps(good).encode())  # the unbroken one passes
    for name, body in _bad_snapshots(good).items():
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        with pytest.raises(SnapshotError) as err:
            read_snapshot(data, name="run.json")
        text = str(err.value)
        assert text.startswith("run.json") and "\n" not in text and len(text) < 200, (name, text)
    with pytest.raises(SnapshotError, match="cannot be read"):
        open_snapshot(tmp_path / "missing.json")
    with pytest.raises(SnapshotError, match="cannot be read"):
        open_snapshot(tmp_path)  # a folder
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # opening it must neither block nor read
    with pytest.raises(SnapshotError, match="not a regular file"):
        open_snapshot(fifo)


# The size bound (16 MiB, checked before anything is parsed) is tested at its real edge, no
# constant patched, in tests/test_sharing.py::test_the_size_bound_is_16_mib_and_checked_...


def test_shared_runs_are_kept_listed_and_deleted_only_when_ours(tiny_measurement, deff_cache_dir):
    from deffcore.views.sharing import (
        SnapshotError,
        delete_shared,
        list_shared,
        save_shared,
        shared_dir,
    )

    body = json.dumps(Run.from_measurement(tiny_measurement).to_snapshot()).encode()
    first = save_shared(body, name="run.json")
    again = save_shared(body, name="copy.json")
    assert first.path == again.path and first.path.parent == deff_cache_dir / ".shared"
    assert [v.sha256 for v in list_shared()] == [first.sha256]
    (shared_dir() / "notes.txt").write_text("mine")  # not a shared run: never listed/deleted
    other = shared_dir() / ("0" * 16 + ".json")
    other.write_bytes(body)  # named like one, but its name is not its hash
    broken = b"{broken"
    (shared_dir() / f"{hashlib.sha256(broken).hexdigest()[:16]}.json").write_bytes(broken)
    with pytest.warns(UserWarning, match="Skipped shared run"):
        assert [v.path for v in list_shared()] == [first.path]
    for sha in ("0" * 16, "../../x", "not hex!"):
        with pytest.raises(SnapshotError, match="nothing was deleted"):
            delete_shared(sha)
    assert other.exists()
    delete_shared(first.sha256)
    assert not first.path.exists() and (shared_dir() / "notes.txt").exists()
    with pytest.raises(SnapshotError):
        save_shared(b"{}")


def test_a_kept_run_opens_by_its_content_id_only_when_it_is_still_that_file(
    tiny_measurement, deff_cache_dir, tmp_path
):
    """`open_shared` (what `deffcore app --run` hands the app): the very bytes named by their
    hash, a regular file, never a link; anything else is one sentence."""
    from deffcore.views.sharing import (
        SnapshotError,
        open_shared,
        save_shared,
        share_file,
        shared_dir,
    )

    body = json.dumps(Run.from_measurement(tiny_measurement).to_snapshot()).encode()
    sent = tmp_path / "from a colleague.json"
    sent.write_bytes(body)
    kept = share_file(sent)  # read once, checked, kept
    assert kept.path == shared_dir() / f"{kept.sha256[:16]}.json" and kept.path.read_bytes() == body
    opened = open_shared(kept.sha256[:16])
    assert opened.sha256 == kept.sha256 and opened.headline() == kept.headline()
    assert opened.source == "shared" and opened.path == kept.path
    for bad in ("0" * 16, "../../etc/pass", "", "ABCDEF0123456789"):
        with pytest.raises(SnapshotError, match="is kept here"):
            open_shared(bad)
    kept.path.write_bytes(body.replace(b'"n": ', b'"n":  ', 1))  # changed since it was kept
    with pytest.raises(SnapshotError, match="has changed since it was kept"):
        open_shared(kept.sha256)
    # a link squatting the name is never read, and never written through
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(b"theirs")
    kept.path.unlink()
    kept.path.symlink_to(elsewhere)
    with pytest.raises(SnapshotError, match="cannot be read"):
        open_shared(kept.sha256)
    again = save_shared(body, name="run.json")  # replaces the link itself
    assert not again.path.is_symlink() and again.path.read_bytes() == body
    assert elsewhere.read_bytes() == b"theirs"
    assert open_shared(kept.sha256).sha256 == kept.sha256


def test_a_run_that_cannot_be_kept_is_one_sentence(tiny_measurement, deff_cache_dir, monkeypatch):
    import tempfile

    from deffcore.views.sharing import SnapshotError, list_shared, save_shared

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "mkstemp", full_disk)
    body = json.dumps(Run.from_measurement(tiny_measurement).to_snapshot()).encode()
    with pytest.raises(
        SnapshotError,
        match=r"run.json is a valid run but cannot be kept in .*"
        r"\(No space left on device\)\.$",
    ):
        save_shared(body, name="run.json")
    assert list_shared() == []


def _shipped_files():
    from deffcore.core.files import DATA_DIR

    paths = [DEFAULT_RUN_PATH, *sorted(GALLERY_DIR.glob("*.json"))]
    return {p.relative_to(DATA_DIR).as_posix(): p for p in paths}


def test_every_shipped_snapshot_passes_the_schema_and_its_digest_is_recorded():
    """The digests the app trusts name exactly the shipped files, each as the one schema
    accepts it now: the bytes opened without a check are bytes that pass it. (Rebuild with
    `scripts/build_shipped.py --digests` after changing a shipped file.)"""
    from deffcore.views.run import shipped_digests
    from deffcore.views.run_schema import check_snapshot, parse_snapshot_json

    files = _shipped_files()
    assert shipped_digests() == {
        name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in files.items()
    }
    for name, path in files.items():
        check_snapshot(parse_snapshot_json(path.read_text(), name), name)


def test_a_shipped_file_opens_by_its_digest_as_the_checked_run(monkeypatch):
    """The shipped run opened by its digest is the run the full check opens, and it is opened
    without the check (the first screen needs no pydantic)."""
    import deffcore.views.run_schema as schema
    from deffcore.views.run_schema import parse_snapshot_json

    checked = Run.from_snapshot(parse_snapshot_json(DEFAULT_RUN_PATH.read_text()))

    def refuse(*args, **kwargs):
        raise AssertionError("the shipped file was checked again")

    monkeypatch.setattr(schema, "check_snapshot", refuse)
    fast = load_snapshot()
    assert json.dumps(fast.to_snapshot()) == json.dumps(checked.to_snapshot())
    assert fast.source == checked.source == "precomputed"
    assert [v.key for v in load_gallery()] == [v.key for v in load_gallery()]  # no check


def test_a_file_that_differs_from_its_digest_is_checked_in_full(monkeypatch, tmp_path):
    """One changed byte, or the same bytes outside deffcore/data: the one schema reads it."""
    import deffcore.views.run as run_module
    from deffcore.core.errors import SnapshotError

    raw = DEFAULT_RUN_PATH.read_bytes()
    key = load_snapshot().key
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    digests = data_dir / "checked_snapshots.json"
    digests.write_text(json.dumps({"default_run.json": hashlib.sha256(raw).hexdigest()}))
    monkeypatch.setattr(run_module, "DATA_DIR", data_dir)
    monkeypatch.setattr(run_module, "CHECKED_DIGESTS", digests)
    same = data_dir / "default_run.json"
    same.write_bytes(raw)
    assert load_snapshot(same).key == key
    bad = json.loads(raw)
    bad["layers"] = -3  # a value the schema refuses
    same.write_bytes(json.dumps(bad).encode())
    with pytest.raises(SnapshotError, match="layers"):
        load_snapshot(same)
    calls = []
    import deffcore.views.run_schema as schema

    original = schema.check_snapshot
    monkeypatch.setattr(schema, "check_snapshot", lambda *a: calls.append(1) or original(*a))
    outside = tmp_path / "default_run.json"  # the right bytes, not under deffcore/data
    outside.write_bytes(raw)
    assert load_snapshot(outside).key == key and len(calls) == 1
