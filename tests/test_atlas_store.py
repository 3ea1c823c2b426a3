"""The atlas beside its run (SPEC 16): taken during the run's own extraction, stored beside the
cache entry without touching the run's files or key, read back checked, recomputed with one pass
when missing or damaged; the library's `atlas()` for named and in-memory models; snapshots."""

from __future__ import annotations

import hashlib
import io
import json

import numpy as np
import pytest
import torch

import deffcore as dc
from deffcore.core.errors import DeffError, RunCancelled
from deffcore.extraction import atlas as atlas_store
from deffcore.extraction import cache
from deffcore.extraction import cache as entries
from deffcore.inputs.architecture import base_model
from deffcore.inputs.model import load_model
from deffcore.lenses.atlas import atlas, atlas_of
from deffcore.runs.measure import measure, measure_spec, run_spec
from deffcore.views.atlas_read import stored_atlas

RUN = {"n": 10, "max_tokens": 24, "seed": 0}


@pytest.fixture
def forwards(monkeypatch):
    """Count base-model forward passes of every model loaded from here on."""
    import deffcore.inputs.run_spec
    import deffcore.runs.measure

    count = [0]
    real = deffcore.inputs.run_spec.load_model

    def counted(*args, **kwargs):
        loaded = real(*args, **kwargs)
        base_model(loaded.model).register_forward_pre_hook(
            lambda *_: count.__setitem__(0, count[0] + 1)
        )
        return loaded

    monkeypatch.setattr(deffcore.inputs.run_spec, "load_model", counted)
    monkeypatch.setattr("deffcore.inputs.model.load_model", counted)
    return count


def _files(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}


def test_a_run_takes_its_atlas_during_its_own_extraction(tiny_dataset, forwards):
    m = measure("tiny-llama", dataset=tiny_dataset, **RUN, batch_size=4)
    batches = forwards[0]
    assert batches == 3  # 10 passages in batches of 4: the extraction alone
    a = stored_atlas(m)
    assert a is not None and a.n == m.n and a.layers == m.layers
    again = atlas("tiny-llama", dataset=tiny_dataset, **RUN, batch_size=4)
    assert forwards[0] == batches  # read back: no pass at all
    np.testing.assert_allclose(again.relative_contribution, a.relative_contribution)
    assert again.run["key"] == m.spec.key()
    assert again.run["deff_over_L"] == pytest.approx(m.summary().deff_over_L)
    assert again.run["lag_profile"] == pytest.approx(list(m.view().lag_profile()))


def test_the_run_entry_its_key_and_its_files_are_unchanged(tiny_dataset):
    spec, _ = run_spec("tiny-gpt2", tiny_dataset, 10, 24, 0, "cka")
    key = spec.key()
    measure_spec(spec, atlas=False)
    folder = cache.cache_dir() / key
    before = _files(folder)
    assert atlas_store.read_rows(spec) is None
    m = measure_spec(spec)  # cached: no extraction, so no atlas either
    assert m.cached and atlas_store.read_rows(spec) is None
    atlas_of(m)  # one pass: the atlas alone
    after = _files(folder)
    assert set(after) == set(before) | {"atlas.npz"}
    assert {k: after[k] for k in before} == before  # meta.json, states.npz untouched
    assert spec.key() == key
    listed = [r for r in entries.list_runs() if r["key"] == key]
    assert [r["status"] for r in listed] == ["complete"]  # the side file is ours
    entries.delete(key)
    assert not folder.exists()


def test_a_missing_atlas_costs_one_pass_and_equals_the_extractions(tiny_dataset, forwards):
    m = measure("tiny-qwen2", dataset=tiny_dataset, **RUN, batch_size=5)
    first = stored_atlas(m)
    (cache.cache_dir() / m.spec.key() / "atlas.npz").unlink()
    assert stored_atlas(m) is None
    before = forwards[0]
    second = atlas_of(m)
    assert forwards[0] - before == 1  # one batch (token budget): one pass of the passages
    np.testing.assert_allclose(second.relative_contribution, first.relative_contribution, rtol=1e-6)
    np.testing.assert_allclose(second.angular_distance, first.angular_distance, atol=1e-7)


@pytest.mark.parametrize(
    "damage",
    ["shape", "nan", "range", "key", "format", "bytes"],
)
def test_a_damaged_atlas_file_reads_as_absent_and_is_recomputed(tiny_dataset, damage):
    m = measure("tiny-llama", dataset=tiny_dataset, **RUN)
    path = cache.cache_dir() / m.spec.key() / "atlas.npz"
    with np.load(io.BytesIO(path.read_bytes())) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["meta"].tobytes())
    if damage == "shape":
        arrays["r"] = arrays["r"][:, :-1]
    elif damage == "nan":
        arrays["c"][0, 0] = np.nan
    elif damage == "range":
        arrays["angular"][0, 0, 1] = arrays["angular"][0, 1, 0] = 1.5
    elif damage in ("key", "format"):
        meta["key" if damage == "key" else "format"] = "0" * 20 if damage == "key" else 99
        arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(b"not an npz" if damage == "bytes" else buf.getvalue())
    assert atlas_store.read_rows(m.spec) is None
    assert atlas_of(m).n == m.n  # recomputed and kept again
    assert atlas_store.read_rows(m.spec) is not None


def test_a_resumed_run_has_no_atlas_until_asked(tiny_dataset, monkeypatch):
    import deffcore.extraction.forward

    monkeypatch.setattr(deffcore.extraction.forward, "CHECKPOINT_EVERY_S", 0.0)  # keep every batch
    spec, _ = run_spec("tiny-llama", tiny_dataset, 12, 24, 0, "cka")
    seen = []

    def stop_after_one() -> bool:
        seen.append(1)
        return len(seen) > 2

    with pytest.raises(RunCancelled):
        measure_spec(spec, batch_size=3, should_stop=stop_after_one)
    m = measure_spec(spec, batch_size=3)
    assert m.resumed_passages > 0
    assert atlas_store.read_rows(spec) is None  # its first batches never reached the tap
    fresh = measure_spec(spec, batch_size=3, use_cache=False)  # the same run in one go
    a = atlas_of(m)
    want = stored_atlas(fresh)
    np.testing.assert_allclose(a.block_influence, want.block_influence, rtol=1e-6)


def test_a_model_in_memory_and_its_name_give_the_same_atlas(tiny_passages, tiny_dataset):
    loaded = load_model("tiny-gemma3", device="cpu", dtype="float32")
    mem = dc.atlas(loaded.model, loaded.tokenizer, tiny_passages, max_tokens=24)
    named = dc.atlas("tiny-gemma3", dataset=tiny_dataset, n=12, max_tokens=24)
    assert mem.run["spec"]["model"].startswith("loaded:") and mem.n == named.n == 12
    for name in ("relative_contribution", "alignment", "block_influence"):
        np.testing.assert_allclose(getattr(mem, name), getattr(named, name), rtol=1e-5)
    np.testing.assert_allclose(
        mem.sublayers["mlp"]["relative_contribution"],
        named.sublayers["mlp"]["relative_contribution"],
        rtol=1e-5,
    )
    assert loaded.model.training is False


def test_the_skip_effect_is_kept_and_read_back(tiny_dataset, forwards):
    a = atlas("tiny-llama", dataset=tiny_dataset, **RUN, skip_effect=True, skip_passages=4)
    assert a.skip_effect is not None and a.skip_effect.passages == 4
    done = forwards[0]
    b = atlas("tiny-llama", dataset=tiny_dataset, **RUN, skip_effect=True, skip_passages=4)
    assert forwards[0] == done  # stored: nothing runs
    np.testing.assert_allclose(b.skip_effect.kl, a.skip_effect.kl)
    c = atlas("tiny-llama", dataset=tiny_dataset, **RUN, skip_effect=True, skip_passages=6)
    assert c.skip_effect.passages == 6 and forwards[0] > done


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"B": 3}, r"B \(bootstrap resamples\) must be"),
        ({"ci": 1.5}, "ci must be"),
        ({"skip_passages": 0}, "skip_passages"),
        ({"random_seeds": (1,)}, "random_seeds"),
    ],
)
def test_bad_options_are_one_sentence_before_any_model_loads(
    tiny_dataset, no_model, options, words
):
    with pytest.raises(DeffError, match=words):
        atlas("tiny-llama", dataset=tiny_dataset, **RUN, **options)
    assert not no_model


def test_a_snapshot_carries_the_atlas_and_a_shared_file_is_checked(tiny_dataset):
    from deffcore.views.run import Run
    from deffcore.views.sharing import SnapshotError, read_snapshot

    m = measure("tiny-llama", dataset=tiny_dataset, **RUN)
    atlas_of(m, skip_effect=True, skip_passages=3)
    data = Run.from_measurement(m).to_snapshot()
    view = Run.from_snapshot(data)
    live = m.view().atlas()
    shipped = view.atlas()
    np.testing.assert_allclose(shipped.relative_contribution, live.relative_contribution, atol=1e-6)
    np.testing.assert_allclose(shipped.skip_effect.kl, live.skip_effect.kl, atol=1e-6)
    assert shipped.phase_point == live.phase_point
    assert shipped.columns() == pytest.approx(live.columns(), abs=1e-5)
    shared = read_snapshot(json.dumps(data).encode())
    assert shared.atlas().layers == m.layers
    for bad, words in (
        ({"angular_distance": [[0.0]]}, "angular_distance is not of shape"),
        ({"phase_point": 99}, "phase point"),
        ({"alignment": ["x"] * m.layers}, "alignment"),
        ({"format": 7}, "'atlas.format'"),
        ({"relative_contribution": [float("inf")] * m.layers}, "relative_contribution"),
    ):
        hostile = {**data, "atlas": {**data["atlas"], **bad}}
        with pytest.raises(SnapshotError, match=words):
            read_snapshot(json.dumps(hostile).encode())


def test_states_computed_elsewhere_give_the_same_rows(tiny_model, tiny_passages):
    """`rows_from_states` (what a notebook's own states would give) equals the hooks."""
    from deffcore.extraction.atlas import AtlasTap, rows_from_states
    from deffcore.extraction.forward import extract_pooled
    from deffcore.inputs.architecture import final_norm

    loaded = tiny_model("llama")
    tap = AtlasTap(split=False)
    extract_pooled(loaded, tiny_passages, max_tokens=24, batch_size=12, taps=[tap])
    seqs = [loaded.tokenizer(t).input_ids[:24] for t in tiny_passages]
    T = max(len(s) for s in seqs)
    ids = torch.zeros(len(seqs), T, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)], mask[i, : len(s)] = torch.tensor(s), 1
    batch = {"input_ids": ids, "attention_mask": mask}
    captured = {}
    hook = final_norm(loaded.model).register_forward_pre_hook(
        lambda _m, args: captured.__setitem__("h", args[0])
    )
    with torch.no_grad():
        out = loaded.model(**batch, output_hidden_states=True)
    hook.remove()
    states = [*out.hidden_states[:-1], captured["h"]]
    mine = rows_from_states(states, batch["attention_mask"])
    hooked = tap.rows(batch["attention_mask"].sum(1).numpy())
    np.testing.assert_allclose(mine.r, hooked.r, atol=2e-6)
    np.testing.assert_allclose(mine.angular, hooked.angular, atol=2e-6)


def test_atlas_states_of_states_computed_elsewhere(tiny_model, tiny_passages):
    """`dc.atlas_states(states, mask)` (a notebook's own states, h_L before the final norm) gives
    the measures of the hooks, without the split; bad states are one sentence."""
    from deffcore.core.errors import InvalidStatesError
    from deffcore.extraction.atlas import AtlasTap
    from deffcore.extraction.forward import extract_pooled
    from deffcore.measures.atlas import summarize

    loaded = tiny_model("qwen2")
    tap = AtlasTap(split=False)
    pooled = extract_pooled(loaded, tiny_passages[:4], max_tokens=24, batch_size=4, taps=[tap])
    want = summarize(tap.rows(pooled.lengths))
    seqs = [loaded.tokenizer(t).input_ids[:24] for t in tiny_passages[:4]]
    T = max(len(s) for s in seqs)
    ids = torch.zeros(4, T, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(seqs):
        ids[i, : len(s)], mask[i, : len(s)] = torch.tensor(s), 1
    from deffcore.inputs.architecture import final_norm

    captured = {}
    hook = final_norm(loaded.model).register_forward_pre_hook(
        lambda _m, args: captured.__setitem__("h", args[0])
    )
    with torch.no_grad():
        out = loaded.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
    hook.remove()
    got = dc.atlas_states([*out.hidden_states[:-1], captured["h"]], mask)
    np.testing.assert_allclose(got.relative_contribution, want.relative_contribution, atol=2e-6)
    np.testing.assert_allclose(got.angular_distance, want.angular_distance, atol=2e-6)
    assert got.sublayers is None and isinstance(got, dc.Atlas)
    bad = [h.clone() for h in out.hidden_states]
    bad[2][0, 0, 0] = float("nan")
    with pytest.raises(InvalidStatesError, match="NaN"):
        dc.atlas_states(bad, mask)
    with pytest.raises(InvalidStatesError):
        dc.atlas_states(out.hidden_states[:2], mask)
