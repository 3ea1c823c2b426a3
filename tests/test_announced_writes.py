"""What an action writes into the cache, said before it starts (SPEC 14, "Writes said first"):
the planner's line and the page actions' cost lines name the cache entries and the packaged
file joined into the cache; nothing is written to work that out."""

from __future__ import annotations

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
    cost = runs_cost(with_variants(spec("gemma3-270m"), "bos", ("add", "none")), "cpu")
    assert cost.disk == 2 * entry + catalog.packaged_bytes("gemma3-270m")
    assert f"writes about {human_bytes(cost.disk)} into the cache folder" in cost.line()
    assert cache_files(deff_cache_dir) == []


def test_a_small_write_is_not_announced(deff_cache_dir):
    cost = runs_cost([spec("tiny-llama", n=8)], "cpu")
    assert 0 < cost.disk < SAY_ABOVE_BYTES and "writes" not in cost.line()
