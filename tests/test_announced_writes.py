"""What an action writes into the cache, said before it starts (SPEC 14, "Writes said first"):
the planner's line and the page actions' cost lines name the cache entries and the packaged
file joined into the cache; nothing is written to work that out."""

from __future__ import annotations

from deffcore.extraction.atlas import rows_bytes
from deffcore.inputs import model as catalog
from deffcore.inputs.run_spec import RunSpec
from deffcore.runs.action_costs import SAY_ABOVE_BYTES, runs_cost, with_variants
from deffcore.runs.planner import human_bytes, plan_run


def spec(model: str, n: int = 512) -> RunSpec:
    return RunSpec(
        model=model, revision=None, dataset="bbc-news", n=n, max_tokens=128, seed=0,
        dtype="float32", passages="windows",
    )  # fmt: skip


def cache_files(cache) -> list:
    return [p for p in cache.rglob("*") if p.is_file()] if cache.exists() else []


def test_a_gemma_plan_names_the_file_it_joins_into_the_cache_and_writes_nothing(deff_cache_dir):
    joined = catalog.packaged_bytes("gemma3-270m")
    assert joined == 253_113_024  # the four parts of the pip package, read in place
    plan = plan_run(spec("gemma3-270m"), "cpu", calibrate="cached")
    assert plan.to_dict()["assemble_bytes"] == joined
    assert f"first the model's file, {human_bytes(joined)}, joined into the cache" in plan.line()
    assert cache_files(deff_cache_dir) == []


def test_once_joined_the_plan_says_no_more(deff_cache_dir, monkeypatch):
    monkeypatch.setattr(catalog, "needs_assembly", lambda model: False)  # joined earlier
    plan = plan_run(spec("gemma3-270m"), "cpu", calibrate="cached")
    assert plan.assemble == 0 and "joined" not in plan.line()


def test_the_disk_refusal_counts_the_joined_file(deff_cache_dir, monkeypatch):
    from deffcore.runs import planner

    entry = plan_run(spec("gemma3-270m"), "cpu", calibrate="never").disk
    # room for the entry twice (while it runs) but not for the file joined first as well
    monkeypatch.setattr(planner, "_disk_free", lambda: 2 * entry + 1_000)
    plan = plan_run(spec("gemma3-270m"), "cpu", calibrate="never")
    assert plan.refusal and "with the model's file joined first" in plan.refusal


def test_the_bos_check_cost_says_its_two_entries_and_the_joined_file(deff_cache_dir):
    size = catalog.model_size("gemma3-270m")
    entry = 4 * (size.layers + 1) * 512 * size.d_model * 4  # 4 poolings x (L+1) x N x d float32
    entry += rows_bytes(512, size.layers)  # and the atlas kept beside it
    cost = runs_cost(with_variants(spec("gemma3-270m"), "bos", ("add", "none")), "cpu")
    assert cost.disk == 2 * entry + catalog.packaged_bytes("gemma3-270m")
    assert f"writes about {human_bytes(cost.disk)} into the cache folder" in cost.line()
    assert cache_files(deff_cache_dir) == []


def test_a_run_writes_the_entry_the_plan_says(deff_cache_dir):
    # the entry is its states and the atlas the extraction keeps beside them
    from deffcore.runs.measure import measure
    from deffcore.runs.planner import entry_bytes

    m = measure(model="tiny-llama", dataset="bbc-news", n=16, max_tokens=32, seed=0)
    npz = [p for p in cache_files(deff_cache_dir / m.spec.key()) if p.suffix == ".npz"]
    written = sum(p.stat().st_size for p in npz)
    said = entry_bytes(catalog.model_size("tiny-llama"), 16)
    assert abs(said - written) <= 0.05 * written, (said, written)


def test_a_small_write_is_not_announced(deff_cache_dir):
    cost = runs_cost([spec("tiny-llama", n=8)], "cpu")
    assert 0 < cost.disk < SAY_ABOVE_BYTES and "writes" not in cost.line()


def test_the_atlas_files_are_the_sizes_their_formulas_say(deff_cache_dir):
    # the Depth use buttons price what they keep beside the run from these formulas
    from deffcore.extraction import atlas as store
    from deffcore.lenses.atlas import atlas_of
    from deffcore.runs.measure import measure

    m = measure(model="tiny-llama", dataset="bbc-news", n=16, max_tokens=32, seed=0)
    atlas_of(m, logit_lens=True)
    atlas_of(m, skip_effect=True)
    folder = deff_cache_dir / m.spec.key()
    rows = (folder / store.ROWS_FILE).stat().st_size
    skip = (folder / store.SKIP_FILE).stat().st_size
    assert abs(store.rows_bytes(16, m.layers, lens=True) - rows) <= 0.03 * rows
    assert abs(store.skip_bytes(16, m.layers) - skip) <= 0.06 * skip


def test_the_depth_use_buttons_say_the_atlas_they_write_first(deff_cache_dir):
    from deffcore.extraction.atlas import rows_bytes, skip_bytes
    from deffcore.lenses.atlas_skip import SKIP_PASSAGES
    from deffcore.runs.action_costs import SKIP_PASSAGES as PRICED
    from deffcore.runs.action_costs import atlas_cost

    assert PRICED == SKIP_PASSAGES
    run = spec("smollm2-135m", n=4096)
    L = catalog.model_size("smollm2-135m").layers
    atlas = atlas_cost(run, "cpu", n=4096, layers=L, part="atlas")
    # (N, L+1, L+1) angular distances in float64: about 38 MB for SmolLM2's 4,096 passages
    assert atlas.disk == rows_bytes(4096, L) > 30_000_000
    assert f"writes about {human_bytes(atlas.disk)} into the cache folder" in atlas.line()
    lens = atlas_cost(run, "cpu", n=4096, layers=L, part="lens")
    assert lens.disk == rows_bytes(4096, L, lens=True) > atlas.disk
    skip = atlas_cost(run, "cpu", n=4096, layers=L, part="skip")
    assert skip.disk == skip_bytes(64, L) < SAY_ABOVE_BYTES and "writes" not in skip.line()
    gemma = catalog.model_size("gemma3-270m").layers
    joined = atlas_cost(spec("gemma3-270m"), "cpu", n=512, layers=gemma, part="skip")
    assert joined.disk == skip_bytes(64, gemma) + catalog.packaged_bytes("gemma3-270m")
    assert cache_files(deff_cache_dir) == []


def test_the_carry_sweep_writes_what_its_cost_says(deff_cache_dir):
    from deffcore.labs.residual_carry import (
        BBC_CHARS,
        carry_cost,
        char_data,
        run_carry_sweep,
        settings_from,
    )

    assert len(char_data(1000).chars) == BBC_CHARS  # the vocabulary of every carry model
    s = settings_from("tiny", iters=4, eval_interval=3, checkpoint_dir=str(deff_cache_dir / "c"))
    said = carry_cost(s).disk  # 2 gammas x 1 seed x 3 checkpoints (steps 0, 3, 4)
    run_carry_sweep(s)
    written = sum(p.stat().st_size for p in cache_files(deff_cache_dir))
    assert abs(said - written) <= 0.02 * written, (said, written)
    assert carry_cost(settings_from("tiny")).disk == 0  # no checkpoint folder, nothing kept


def test_the_carry_cpu_preset_says_its_checkpoints_first(deff_cache_dir):
    from deffcore.labs.residual_carry import carry_cost, settings_from

    tiny = carry_cost(settings_from("tiny", checkpoint_dir=str(deff_cache_dir / "c")))
    assert 0 < tiny.disk < SAY_ABOVE_BYTES and tiny.writes() == ""
    cpu = carry_cost(settings_from("cpu", checkpoint_dir=str(deff_cache_dir / "c")))
    # 4 gammas x 2 seeds x 7 checkpoints of a 12-layer, d = 48 GPT: about 80 MB
    assert 70_000_000 < cpu.disk < 90_000_000
    assert cpu.writes() == f"writes about {human_bytes(cpu.disk)} into the cache folder"
    assert cache_files(deff_cache_dir) == []


def big_checkpoints(root, steps=(1000, 8000)):
    """Folders as save_pretrained leaves them, config only: a 24-layer, d = 1,024 Llama."""
    import json

    cfg = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 1024,
        "num_hidden_layers": 24, "num_attention_heads": 16, "intermediate_size": 4096,
        "vocab_size": 32000, "max_position_embeddings": 2048,
    }  # fmt: skip
    for step in steps:
        (root / f"step{step}").mkdir(parents=True)
        (root / f"step{step}" / "config.json").write_text(json.dumps(cfg))
    return root


def test_the_dynamics_sweep_says_each_checkpoints_entry_first(deff_cache_dir, tmp_path):
    from deffcore.labs.dynamics import carry_checkpoint, dynamics_cost, local_checkpoints

    cps = local_checkpoints(big_checkpoints(tmp_path / "cps"))
    cost = dynamics_cost(cps, n=64, max_tokens=128)
    # two entries: 4 poolings x (L+1) x N x d float32 and the atlas beside each
    assert cost.disk == 2 * (4 * 25 * 64 * 1024 * 4 + rows_bytes(64, 24))
    assert f"writes about {human_bytes(cost.disk)} into the cache folder" in cost.line()
    carry = carry_checkpoint(tmp_path / "gamma1_seed0" / "step000000.pt")
    assert dynamics_cost([carry], n=64).disk == 0  # probed in memory
    assert cache_files(deff_cache_dir) == []


def written_by(cache, action) -> int:
    """Bytes of the files `action()` created or changed under `cache`."""
    before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in cache_files(cache)}
    action()
    after = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in cache_files(cache)}
    return sum(s for p, (s, t) in after.items() if before.get(p) != (s, t))


def test_the_small_writers_stay_small(deff_cache_dir):
    # SPEC 14, "Writes said first": these buttons say no bytes, because what they keep is a
    # few (L+1) x (L+1) matrices or a record per evaluation, never per passage: GW on
    # Aggregations, a SPEC 17 measure's matrix (Overview / Similarity, explorer/measure_pick.py),
    # the bootstrap on Baselines, the pretraining probe's records. The same run at twice the
    # passages must write the same bytes, and a tiny run's far below SAY_ABOVE_BYTES.
    from deffcore.labs.gw_lens import gw_lens
    from deffcore.labs.pretrain import pretrain_probe, settings_from
    from deffcore.runs.measure import measure

    sizes = []
    for n in (16, 32):
        m = measure(model="tiny-llama", dataset="bbc-news", n=n, max_tokens=32, seed=0)
        sizes.append(
            [
                written_by(deff_cache_dir, lambda m=m: gw_lens(m)),
                written_by(deff_cache_dir, lambda m=m: m.measure_similarity("default", "rsa")),
                written_by(deff_cache_dir, lambda m=m: m.bootstrap("default", "cka", B=20)),
            ]
        )
    for small, twice in zip(*sizes, strict=True):
        assert small < 64_000 and abs(twice - small) <= 64, sizes  # JSON digits may differ
    probe = written_by(deff_cache_dir, lambda: pretrain_probe(settings_from("tiny")))
    assert 0 < probe < 64_000
