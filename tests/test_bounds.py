"""Values bounded before use: byte sizes, manifest model sizes and CSV
fields each get one sentence at their edge, never an OverflowError, a ZeroDivisionError, a
negative plan or a csv traceback."""

from __future__ import annotations

import json

import numpy as np
import pytest

from deffcore.cli.main import main
from deffcore.core.checks import MAX_CSV_FIELD, csv_rows
from deffcore.core.errors import DeffError, InvalidArgumentError
from deffcore.inputs.model import ModelSize, from_config, from_mapping
from deffcore.runs.planner import MAX_BYTES, parse_bytes

SIZE = {"layers": 30, "d_model": 576, "d_ff": 1536, "heads": 9, "kv_heads": 3, "vocab": 49152}


@pytest.mark.parametrize(
    "text, want",
    [("8GiB", 8 * 2**30), ("0.5G", 2**29), ("1", 1), ("2e9", 2 * 10**9), ("1k", 1024)],
)
def test_a_memory_size_reads_as_bytes(text, want):
    assert parse_bytes(text) == want


@pytest.mark.parametrize("text", ["1e400", "0.5", "0", "0.4b", "2048T", "1e16", "-1G", "8 apples"])
def test_a_memory_size_out_of_range_is_one_sentence(text):
    with pytest.raises(DeffError, match=r"--max-memory must be") as err:
        parse_bytes(text)
    assert "\n" not in str(err.value) and str(err.value).endswith(".")


def test_the_byte_bound_is_one_pib_exactly():
    assert MAX_BYTES == 2**50
    assert parse_bytes("1024T") == MAX_BYTES
    with pytest.raises(DeffError):
        parse_bytes(str(MAX_BYTES + 1))


def test_max_memory_on_the_command_line_exits_2(capsys):
    for value in ("1e400", "0.5"):
        code = main(["measure", "--model", "tiny-llama", "--plan", "--max-memory", value])
        err = capsys.readouterr().err
        assert code == 2 and "--max-memory must be" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "change, said",
    [
        ({"heads": 0}, "heads = 0"),
        ({"d_model": 0}, "d_model = 0"),
        ({"layers": -4}, "layers = -4"),
        ({"vocab": 2**30}, "vocab = 1073741824"),
        ({"kv_heads": 12}, "more KV heads"),
        ({"head_dim": 0}, "head_dim = 0"),
    ],
)
def test_a_manifest_size_out_of_range_is_one_sentence(change, said):
    with pytest.raises(DeffError, match=said) as err:
        from_mapping({**SIZE, **change}, "manifest")
    assert "\n" not in str(err.value)


def test_a_manifest_size_that_is_not_a_count_is_one_sentence():
    for bad in ({"layers": float("inf")}, {"layers": "many"}, {"heads": None}):
        with pytest.raises(DeffError, match="as numbers"):
            from_mapping({**SIZE, **bad})
    with pytest.raises(DeffError, match="layers = True"):
        ModelSize(True, 576, 1536, 9, 3, 64, 49152)
    with pytest.raises(DeffError, match="heads = 0"):
        from_config({"hidden_size": 64, "num_attention_heads": 0, "num_hidden_layers": 2,
                     "vocab_size": 100})  # fmt: skip


def test_the_edges_of_a_size_are_accepted():
    edge = ModelSize(1, 1, 1, 1, 1, 1, 1)
    assert edge.block_params > 0 and edge.params > 0
    big = from_mapping({**SIZE, "layers": 10_000, "vocab": 2**24})
    assert big.layers == 10_000
    with pytest.raises(DeffError):
        from_mapping({**SIZE, "layers": 10_001})


def test_a_manifest_with_zero_heads_plans_nothing_and_exits_2(tmp_path, capsys):
    manifest = tmp_path / "grid.json"
    manifest.write_text(
        json.dumps(
            {
                "grid": {"models": ["org/model"], "datasets": ["bbc-news"]},
                "sizes": {"org/model": {**SIZE, "heads": 0}},
            }
        )
    )
    code = main(["sweep", "--manifest", str(manifest), "--plan"])
    err = capsys.readouterr().err
    assert code == 2 and "heads = 0" in err and "ZeroDivision" not in err


def test_a_csv_field_longer_than_the_bound_is_one_sentence():
    ok = "model,task,score\n" + "m" * MAX_CSV_FIELD + ",MMLU,1\n"
    assert len(csv_rows(ok, "scores.csv")[1][0]) == MAX_CSV_FIELD
    for cell in ("m" * (MAX_CSV_FIELD + 1), "m" * 200_000):
        with pytest.raises(InvalidArgumentError, match=r"scores.csv line 2 has a field of"):
            csv_rows(f"model,task,score\n{cell},MMLU,1\n", "scores.csv")
    with pytest.raises(InvalidArgumentError, match="line 2 has a field of more than 1,000"):
        csv_rows("model,task,score\n" + "m" * 131_073 + ",MMLU,1\n", "scores.csv")


def test_a_scores_file_with_a_200000_character_cell_exits_2(tmp_path, capsys):
    from deffcore.labs.scores import read_scores

    path = tmp_path / "scores.csv"
    path.write_text("model,task,score\n" + "x" * 200_000 + ",MMLU,66.7\n")
    with pytest.raises(InvalidArgumentError, match="line 2 has a field of more than 1,000 char"):
        read_scores(path)
    code = main(["correlate", "--scores", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "more than 1,000 characters" in err and "Traceback" not in err


# --- Every DEFF_* number: finite, positive, bounded, one sentence (`core.checks.env_gib`)

BAD_GIB = ["nan", "inf", "-inf", "-1", "abc", "1e400", str(2**20 + 1)]


@pytest.mark.parametrize("value", BAD_GIB)
def test_a_host_memory_override_out_of_range_is_one_sentence(monkeypatch, value):
    from deffcore.inputs.model import host_memory_bytes

    monkeypatch.setenv("DEFF_HOST_MEMORY_GIB", value)
    with pytest.raises(InvalidArgumentError, match="DEFF_HOST_MEMORY_GIB must be a number of GiB"):
        host_memory_bytes()
    monkeypatch.setenv("DEFF_HOST_MEMORY_GIB", "0")  # no memory at all is no override either
    with pytest.raises(InvalidArgumentError, match="above 0"):
        host_memory_bytes()


@pytest.mark.parametrize("value", BAD_GIB)
def test_a_model_cache_budget_out_of_range_is_one_sentence(monkeypatch, value):
    from deffcore.inputs.model import default_budget

    monkeypatch.setenv("DEFF_MODEL_CACHE_GIB", value)
    with pytest.raises(InvalidArgumentError, match="DEFF_MODEL_CACHE_GIB must be a number of GiB"):
        default_budget("cpu")


def test_the_edges_of_a_deff_number_are_accepted(monkeypatch):
    from deffcore.inputs.model import default_budget, host_memory_bytes

    monkeypatch.setenv("DEFF_HOST_MEMORY_GIB", f"{2**20}")
    assert host_memory_bytes() == 2**50
    monkeypatch.setenv("DEFF_HOST_MEMORY_GIB", " 0.5 ")
    assert host_memory_bytes() == 2**29
    monkeypatch.setenv("DEFF_MODEL_CACHE_GIB", "0")  # keep no idle model
    assert default_budget("cpu") == 0


@pytest.mark.parametrize("name", ["DEFF_HOST_MEMORY_GIB", "DEFF_MODEL_CACHE_GIB"])
def test_a_bad_deff_number_on_the_command_line_exits_2(monkeypatch, capsys, tiny_dataset, name):
    monkeypatch.setenv(name, "inf")
    argv = ["measure", "--model", "tiny-llama", "--dataset", tiny_dataset, "--n", "8"]
    assert main([*argv, "--max-tokens", "16", "--no-progress", "--no-cache"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{name} must be" in err and "\n" not in err and "Traceback" not in err, err


# --- Bootstrap replicates bounded before anything is drawn (`core.checks.check_replicates`)

TINY_RUN = ["--model", "tiny-llama", "--n", "16", "--max-tokens", "16", "--no-progress"]


@pytest.mark.parametrize("command", ["measure", "bos", "atlas"])
def test_a_billion_replicates_on_the_command_line_exits_2(capsys, no_model, command):
    assert main([command, *TINY_RUN, "--bootstrap", str(10**9)]) == 2
    err = capsys.readouterr().err.strip()
    assert "--bootstrap must be at most 100,000 bootstrap replicates" in err, err
    assert "\n" not in err and "Traceback" not in err and not no_model


def test_replicates_beyond_the_machines_memory_exit_2(capsys, monkeypatch, no_model):
    monkeypatch.setenv("DEFF_HOST_MEMORY_GIB", "1")  # 16 bytes a draw: 1 GiB holds 2**26 draws
    argv = ["measure", *TINY_RUN[:2], "--n", "100000", "--bootstrap", "1000", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "--bootstrap = 1,000 replicates of 100,000 passages need 1.5 GiB" in err, err
    assert "use --bootstrap <= 671." in err and "\n" not in err and not no_model


def test_the_library_bounds_b_before_drawing(monkeypatch):
    import deffcore as dc
    from deffcore.statistics import bootstrap, paired

    def drawn(*args, **kwargs):
        raise AssertionError("replicates were drawn")

    monkeypatch.setattr(bootstrap, "resample_indices", drawn)
    monkeypatch.setattr(paired, "resample_indices", drawn)
    with pytest.raises(InvalidArgumentError, match="at most 100,000 bootstrap replicates"):
        dc.atlas("tiny-llama", n=16, max_tokens=16, B=10**9)
    states = np.random.default_rng(0).normal(size=(3, 64, 4))
    for run in (
        lambda B: bootstrap.bootstrap_deff_over_L(states, B=B),
        lambda B: paired.paired_bootstrap({"default": states}, B=B),
        lambda B: dc.atlas_states([np.ones((64, 4, 2))] * 3, B=B),
    ):
        with pytest.raises(InvalidArgumentError, match="at most 100,000"):
            run(10**9)
    monkeypatch.setenv("DEFF_HOST_MEMORY_GIB", "0.0001")  # ~105 kB: 64 passages x 100 > that
    with pytest.raises(InvalidArgumentError, match="of memory, more than this machine can give"):
        bootstrap.bootstrap_deff_over_L(states, B=100)


def test_the_edges_of_b_are_accepted():
    from deffcore.core.checks import MAX_REPLICATES, check_replicates

    assert check_replicates(MAX_REPLICATES, "B") == MAX_REPLICATES
    assert check_replicates(2, "B", n=10**6, memory=32 * 10**6) == 2
    with pytest.raises(InvalidArgumentError, match="use B <= 2"):
        check_replicates(3, "B", n=10**6, memory=32 * 10**6)


# --- n bounded before anything is sized by it (`core.checks.check_passages`, `check_rows_fit`)


@pytest.mark.parametrize("n", [10**7 + 1, 10**12, 10**30])
def test_any_n_beyond_the_bound_is_one_sentence_before_anything_loads(capsys, no_model, n):
    argv = ["measure", "--model", "tiny-llama", "--max-tokens", "16", "--no-progress"]
    assert main([*argv, "--n", str(n)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--n must be at most 10,000,000 passages, got {n:,}" in err.replace(
        " (more than a dataset file gives and their states fit in memory)", ""
    ), err
    assert "\n" not in err and "Traceback" not in err and not no_model


def test_the_library_bounds_n_too(no_model):
    import deffcore as dc

    with pytest.raises(InvalidArgumentError, match="n must be at most 10,000,000 passages"):
        dc.measure("tiny-llama", n=10**12)


def test_the_live_rows_wait_for_the_data_and_check_memory(monkeypatch):
    """`PrefixRows` allocates nothing for n until a batch lands (the dataset has given n
    passages by then), and then checks the rows fit before allocating them."""
    from deffcore.core.constants import EXTRACTED_POOLINGS
    from deffcore.core.errors import OutOfMemoryError
    from deffcore.extraction.cache import PrefixRows
    from deffcore.extraction.forward import SavedBatch

    rows = PrefixRows(10**12)  # was a 931 GiB bool array at once
    assert rows.filled is None and rows.rows == {}
    parts = {p: np.zeros((3, 2, 8), dtype=np.float32) for p in EXTRACTED_POOLINGS}
    batch = SavedBatch(np.arange(2), {**parts, "pos0_ratio": np.zeros((3, 2))}, None)
    monkeypatch.setenv("DEFF_HOST_MEMORY_GIB", "1")
    with pytest.raises(OutOfMemoryError, match="The pooled states of 1,000,000,000,000 passages"):
        rows.add(batch)
    fine = PrefixRows(4)
    fine.add(batch)
    assert fine.done == 2


# --- Data files read lazily: batches of rows, never whole (`inputs.texts._read_file`)


def test_a_parquet_of_a_million_rows_is_refused_before_a_row_is_read(tmp_path, monkeypatch):
    import tracemalloc

    import pyarrow as pa
    import pyarrow.parquet as pq

    from deffcore.inputs import texts

    path = tmp_path / "many.parquet"
    pq.write_table(pa.table({"text": pa.array(["a b"] * 10**6).dictionary_encode()}), path)
    assert path.stat().st_size < 100_000  # tiny on disk, a million rows inside
    monkeypatch.setattr(texts, "MAX_FILE_ROWS", 10**5)
    read = []
    monkeypatch.setattr(pq.ParquetFile, "iter_batches", lambda *a, **k: read.append(1) or iter(()))
    tracemalloc.start()
    try:
        with pytest.raises(DeffError, match="has 1,000,000 rows or more, beyond the 100,000"):
            texts.all_passages(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not read and peak < 5 * 2**20, peak  # the old read_parquet: ~60 MB of Python strings


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".txt"])
def test_a_text_file_is_read_in_batches_and_refused_past_the_bound(tmp_path, monkeypatch, suffix):
    from deffcore.inputs import texts

    monkeypatch.setattr(texts, "MAX_FILE_ROWS", 1000)
    monkeypatch.setattr(texts, "_BATCH_ROWS", 100)
    path = tmp_path / f"many{suffix}"
    rows = [f"passage {i}" for i in range(10**5)]
    if suffix == ".csv":
        path.write_text("text\n" + "\n".join(rows) + "\n")
    elif suffix == ".jsonl":
        path.write_text("".join(json.dumps({"text": r}) + "\n" for r in rows))
    else:
        path.write_text("\n\n".join(rows) + "\n")
    seen = "1,001" if suffix == ".txt" else "1,100"  # a block at a time; a batch of 100 rows
    with pytest.raises(DeffError, match=f"has {seen} rows or more, beyond the 1,000"):
        texts.all_passages(str(path))
    monkeypatch.setattr(texts, "MAX_FILE_ROWS", 10**5)
    assert texts.all_passages(str(path)) == rows  # within the bound: every row, in order


def test_one_endless_block_of_text_is_refused_past_the_character_bound(tmp_path, monkeypatch):
    from deffcore.inputs import texts

    monkeypatch.setattr(texts, "MAX_FILE_CHARS", 10_000)
    path = tmp_path / "one.txt"
    path.write_text("word " * 100_000)  # no newline at all: read 1 MiB of a line at a time
    with pytest.raises(DeffError, match="holds more than 10,000 characters of text"):
        texts.all_passages(str(path))


def test_a_dataset_file_beyond_the_bound_exits_2_before_the_model(tmp_path, capsys, no_model):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "many.parquet"
    pq.write_table(pa.table({"text": pa.array(["a b"] * (10**6 + 1)).dictionary_encode()}), path)
    argv = ["measure", "--model", "tiny-llama", "--dataset", str(path), "--n", "8"]
    assert main([*argv, "--max-tokens", "16", "--no-progress", "--no-cache"]) == 2
    err = capsys.readouterr().err.strip()
    assert "has 1,000,001 rows or more, beyond the 1,000,000" in err, err
    assert "\n" not in err and "Traceback" not in err and not no_model
