"""Every failure a user can cause ends in one sentence on stderr and exit code 2, before any
model loads: in `measure` and in every sibling subcommand.

Each case runs `deffcore.cli.main` with the model loaders replaced by a function that fails
the test, so a check that happens only after loading (or never) is caught.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from deffcore.cli.main import main

REPO = Path(__file__).resolve().parent.parent
RUN = ["--n", "8", "--max-tokens", "16", "--no-progress"]


def _refuse_to_load(*args, **kwargs):
    pytest.fail("a model was loaded although the arguments are bad")


@pytest.fixture(autouse=True)
def no_model_loads(monkeypatch):
    import deffcore.inputs.model
    import deffcore.inputs.run_spec
    import deffcore.runs.measure

    monkeypatch.setattr(deffcore.inputs.model, "load_model", _refuse_to_load)
    monkeypatch.setattr(deffcore.inputs.run_spec, "load_model", _refuse_to_load)
    # the CUDA cases must not depend on whether this machine has a GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def a_file(tmp_path) -> Path:
    path = tmp_path / "plain_file"
    path.write_text("not a folder")
    return path


@pytest.fixture
def truncated_gguf(tmp_path) -> Path:
    """A valid small GGUF written by the `gguf` package, then cut inside its tensor data."""
    import gguf

    whole = tmp_path / "whole.gguf"
    w = gguf.GGUFWriter(str(whole), "llama")
    w.add_context_length(64)
    w.add_tensor("token_embd.weight", np.ones((64, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole.read_bytes()[:-100])
    return cut


def _one_line_exit_2(capsys, argv: list[str]) -> str:
    """Run the CLI; assert exit code 2 and one line on stderr; return that line."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own errors (unknown choice, not an integer)
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


CASES = [
    # measure
    (["measure", "--model", "tiny-llama", *RUN, "--seed", "-1"], "--seed must be an integer >= 0"),
    (["measure", "--model", "tiny-llama", *RUN, "--batch-size", "0"], "--batch-size must be a "),
    (["measure", "--model", "tiny-llama", "--n", "0", "--no-progress"], "--n must be a positive"),
    (["measure", "--model", "tiny-llama", "--n", "-3", "--no-progress"], "got -3"),
    (["measure", "--model", "tiny-llama", "--n", "3", "--no-progress"], "an integer >= 4"),
    (["measure", "--model", "tiny-llama", *RUN, "--device", "cuda"], "CUDA is not available"),
    (["measure", "--model", "tiny-llama", *RUN, "--device", "tpu"], "Unknown device 'tpu'"),
    (["measure", "--model", "tiny-gpt2", "--max-tokens", "600", "--no-progress"],
     "beyond the context of 'tiny-gpt2', which is 512 tokens"),
    (["measure", "--model", "tiny-llama", "--max-tokens", "513", "--no-progress"],
     "which is 512 tokens; ask for at most 512"),
    (["measure", "--model", "random:tiny-gpt2:1", "--max-tokens", "600", "--no-progress"],
     "which is 512 tokens"),
    (["measure", "--model", "tiny-llama", *RUN, "--metric", "nope"],
     "--metric 'nope' is not a similarity measure"),
    (["measure", "--model", "tiny-llama", *RUN, "--passages", "pages"], "invalid choice"),
    (["measure", "--model", "tiny-llama", *RUN, "--bos", "twice"], "invalid choice"),
    (["measure", "--model", "tiny-llama", *RUN, "--dtype", "int8"], "invalid choice: 'int8'"),
    (["measure", "--model", "tiny-llama", *RUN, "--intervention", "no_mlp"],
     "Unknown norm intervention 'no_mlp'; choose one of none, no_post"),
    (["measure", "--model", "tiny-nope", *RUN], "Unknown tiny model 'tiny-nope'"),
    (["measure", "--model", "tiny-llama", "--n", "x"], "invalid int value: 'x'"),
    (["measure", "--model", "tiny-llama", *RUN, "--random-seeds", "0,-1"],
     "Each of --random-seeds must be an integer >= 0, got -1"),
    (["measure", "--model", "tiny-llama", *RUN, "--dataset", "/no/such/file.txt"],
     "The dataset file /no/such/file.txt does not exist"),
    # a seed beyond 2^63 - 1: torch's manual_seed overflows, a snapshot cannot store it
    (["measure", "--model", "tiny-llama", *RUN, "--seed", str(2**63)],
     "--seed must be at most 9,223,372,036,854,775,807 (2^63 - 1), got 9,223,372,036,854,775,808."),
    (["measure", "--model", "tiny-llama", *RUN, "--random-seeds", f"0,{10**23}"],
     "Each of --random-seeds must be at most 9,223,372,036,854,775,807"),
    (["measure", "--model", f"random:tiny-llama:{10**23}", *RUN], "with a whole-number seed"),
    # one seed twice is one random model counted twice: a band of zero width
    (["measure", "--model", "tiny-llama", *RUN, "--random-seeds", "0,1,0"],
     "--random-seeds repeats the seed 0; the same seed gives the same result"),
    (["carry", "--preset", "tiny", "--seeds", "2,2", "--no-progress"],
     "--seeds repeats the seed 2"),
    (["measure", "--model", "random:tiny-llama:\u00b2", *RUN], "with a whole-number seed"),
    # the calibrated column's permutations: bounded before the model loads, not hours later
    (["measure", "--model", "tiny-llama", *RUN, "--measures", "cka", "--measures-permutations",
      "0"], "--measures-permutations must be a whole number from 1 to 10,000, got 0."),
    (["measure", "--model", "tiny-llama", *RUN, "--metric", "rsa", "--measures-permutations",
      str(10**11)], "--measures-permutations must be a whole number from 1 to 10,000"),
    (["atlas", "--model", "random:tiny-llama:\u00b2", *RUN], "with a whole-number seed"),
    # siblings
    (["aggregations", "--model", "tiny-llama", *RUN, "--seed", "-1"], "--seed must be"),
    (["aggregations", "--model", "tiny-llama", *RUN, "--pooling", "max"], "invalid choice: 'max'"),
    (["aggregations", "--model", "tiny-llama", *RUN, "--device", "tpu"], "Unknown device"),
    (["interventions", "--model", "tiny-gemma3", "--n", "0", "--no-progress"], "--n must be"),
    (["interventions", "--model", "tiny-gemma3", "--max-tokens", "1000", "--no-progress"],
     "beyond the context of 'tiny-gemma3'"),
    (["interventions", "--model", "tiny-gemma3", *RUN, "--device", "cuda"], "CUDA is not"),
    (["pruning", "--model", "tiny-llama", *RUN, "--n-heldout", "0"], "--n-heldout must be"),
    (["pruning", "--model", "tiny-llama", *RUN, "--ks", "0,-2"], "Each of --ks must be"),
    (["pruning", "--model", "tiny-llama", *RUN, "--seed", "-5"], "--seed must be"),
    (["pruning", "--model", "tiny-gpt2", "--max-tokens", "600", "--no-progress"], "512 tokens"),
    (["pruning", "--model", "tiny-llama", *RUN, "--device", "tpu"], "Unknown device"),
    (["dynamics", "--model", "tiny-llama", "--revisions", "a", "--n", "0", "--no-progress"],
     "--n must be"),
    (["dynamics", "--checkpoints", ".", "--device", "cuda:3", "--no-progress"], "CUDA is not"),
    (["dynamics", "--checkpoints", ".", "--seed", "-1", "--no-progress"], "--seed must be"),
    (["synthetic", "--n", "0"], "--n must be a positive integer, got 0"),
    (["synthetic", "--n", "-3"], "got -3"),
    (["synthetic", "--seed", "-1"], "--seed must be an integer >= 0"),
    (["synthetic", "--d", "0"], "--d must be"),
    # sizes numpy cannot allocate: one sentence before it tries, never its MemoryError
    (["synthetic", "--d", str(10**11)], "A construction of 32 layers x 1,000 passages x "
     "100,000,000,000 features (float32) need"),
    (["synthetic", "--layers", str(10**11)], "A construction has at most 1,000 layers"),
    (["synthetic", "--metric", "l2"], "invalid choice: 'l2'"),
    (["carry", "--preset", "tiny", "--iters", "0", "--no-progress"], "--iters must be"),
    (["carry", "--preset", "tiny", "--batch-size", "0", "--no-progress"], "--batch-size must"),
    (["carry", "--preset", "tiny", "--seeds", "0,-1", "--no-progress"], "Each of --seeds"),
    (["carry", "--preset", "tiny", "--n-head", "5", "--no-progress"],
     "--n-embd (32) must be a multiple of the number of heads --n-head (5)"),
    (["carry", "--preset", "tiny", "--device", "tpu", "--no-progress"], "Unknown device"),
    (["carry", "--preset", "gpu", "--no-progress"], "CUDA is not available"),
    (["carry", "--preset", "huge", "--no-progress"], "invalid choice: 'huge'"),
    # the further lenses (SPEC 13)
    (["gw", "--model", "tiny-llama", *RUN, "--n-gw", "1"], "--n-gw must be an integer >= 2"),
    (["gw", "--model", "tiny-llama", *RUN, "--gw-seed", "-1"], "--gw-seed must be"),
    (["gw", "--model", "tiny-llama", *RUN, "--epsilon", "0"], "--epsilon must be a positive"),
    (["gw", "--model", "tiny-llama", *RUN, "--epsilon", "nan"], "--epsilon must be a positive"),
    (["gw", "--model", "tiny-llama", *RUN, "--solver", "sinkhorn"], "invalid choice"),
    (["gw", "--model", "tiny-llama", *RUN, "--device", "tpu"], "Unknown device"),
    (["aggregations", "--model", "tiny-llama", *RUN, "--gw", "--n-gw", "0"], "--n-gw must be"),
    (["correlate", "--scores", "/no/such.csv"], "The scores file /no/such.csv does not exist"),
    (["correlate", "--scores", "/no/such.csv", "--y", "f_110"], "either --scores or --y"),
    (["correlate", "--y", "f_110", "--sources", "web"], "--sources must name some of"),
    (["correlate", "--y", "f_110", "--sweep", "/no/sweep.json"], "does not exist or is not a"),
    (["correlate", "--x", "width"], "invalid choice: 'width'"),
    (["pretrain", "--preset", "tiny", "--iters", "0", "--no-progress"], "--iters must be"),
    (["pretrain", "--preset", "tiny", "--seeds", "0,-1", "--no-progress"], "Each of --seeds"),
    (["pretrain", "--preset", "tiny", "--variants", "none,no_mlp", "--no-progress"],
     "Unknown norm variant(s) no_mlp"),
    (["pretrain", "--preset", "tiny", "--n-probe", "2", "--no-progress"], "--n-probe must be"),
    (["pretrain", "--preset", "tiny", "--layers", "1", "--no-progress"], "at least 2 layers"),
    (["pretrain", "--preset", "tiny", "--device", "tpu", "--no-progress"], "Unknown device"),
    (["pretrain", "--preset", "gpu", "--no-progress"], "CUDA is not available"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "message"), CASES, ids=[" ".join(a)[:70] for a, _ in CASES])
def test_bad_argument_is_one_sentence_and_exit_2(capsys, argv, message):
    assert message in _one_line_exit_2(capsys, argv)


def test_unwritable_snapshot_path(capsys, a_file):
    base = ["measure", "--model", "tiny-llama", *RUN, "--snapshot"]
    err = _one_line_exit_2(capsys, [*base, str(a_file / "y.json")])
    assert f"--snapshot {a_file}/y.json cannot be written ({a_file} is a file, not a folder)" in err
    if Path("/proc").is_dir():  # Linux: nothing can be created under /proc, even by root
        assert "cannot be written" in _one_line_exit_2(capsys, [*base, "/proc/x/y.json"])
    assert "is a folder; give a file name" in _one_line_exit_2(capsys, [*base, str(a_file.parent)])


def test_checkpoint_dir_that_is_a_file(capsys, a_file):
    argv = ["carry", "--preset", "tiny", "--checkpoint-dir", str(a_file), "--no-progress"]
    assert "is a file, not a folder" in _one_line_exit_2(capsys, argv)


@pytest.mark.parametrize("command", ["measure", "aggregations", "interventions", "pruning"])
def test_cache_dir_that_is_a_file(capsys, monkeypatch, a_file, command):
    monkeypatch.setenv("DEFF_CACHE_DIR", str(a_file))
    err = _one_line_exit_2(capsys, [command, "--model", "tiny-gemma3", *RUN])
    assert "DEFF_CACHE_DIR" in err and "is a file, not a folder" in err


def test_truncated_gguf_is_named_not_a_struct_error(capsys, truncated_gguf):
    err = _one_line_exit_2(capsys, ["measure", "--model", str(truncated_gguf), *RUN])
    assert f"The file {truncated_gguf} is not a valid GGUF file (truncated or corrupt)." in err


@pytest.mark.parametrize("command", ["measure", "bos", "atlas"])
def test_a_model_folder_without_config_json_is_named_before_loading(capsys, tmp_path, command):
    """transformers' own error was cut to "Couldn't instantiate the backend tokenizer from one
    of:", after the load had begun."""
    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "README.md").write_text("not a model")
    err = _one_line_exit_2(capsys, [command, "--model", str(folder), *RUN])
    assert f"The model folder {folder} has no config.json, so it holds no model" in err


def test_dataset_folder_and_missing_column_before_the_model(capsys, tmp_path):
    folder = tmp_path / "texts"
    folder.mkdir()
    err = _one_line_exit_2(capsys, ["measure", "--model", "tiny-llama", *RUN, "--dataset",
                                    str(folder)])  # fmt: skip
    assert f"The dataset path {folder} is a folder, not a file" in err
    table = tmp_path / "t.csv"
    table.write_text("body\nhello\n")
    err = _one_line_exit_2(capsys, ["interventions", "--model", "tiny-gemma3", *RUN,
                                    "--dataset", str(table)])  # fmt: skip
    assert "has no column 'text' (columns: body)" in err


def test_the_library_checks_before_loading_too(monkeypatch, a_file, tiny_dataset):
    """The app calls `measure` and the labs directly: the same checks, the same sentences."""
    from deffcore.core.errors import DeffError
    from deffcore.labs.interventions import intervention_table
    from deffcore.runs.measure import measure

    ok = {"model": "tiny-llama", "dataset": tiny_dataset, "n": 8, "max_tokens": 16}
    for bad, message in [
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
        ({"device": "tpu"}, "Unknown device 'tpu'"),
        ({"max_tokens": 4096}, "which is 512 tokens"),
        ({"dataset": str(a_file.parent / "missing.txt")}, "does not exist"),
        ({"random_seeds": [3, 3]}, "random_seeds repeats the seed 3"),
    ]:
        with pytest.raises(DeffError, match=message):
            measure(**{**ok, **bad})
    with pytest.raises(DeffError, match="does not exist"):
        intervention_table("tiny-gemma3", str(a_file.parent / "missing.txt"), n=8, max_tokens=16)
    monkeypatch.setenv("DEFF_CACHE_DIR", str(a_file))
    with pytest.raises(DeffError, match="is a file, not a folder"):
        measure(**ok)


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["measure", "--model", "tiny-llama", "--device", "tpu"], {}, "Unknown device 'tpu'"),
        (["measure", "--model", "tiny-llama"], {"DEFF_CACHE_DIR": "FILE"}, "is a file"),
    ],
)
def test_python_dash_m_exits_2_without_traceback(tmp_path, argv, env, message):
    cache_file = tmp_path / "cache_file"
    cache_file.write_text("")
    full_env = {**os.environ, "DEFF_CACHE_DIR": str(tmp_path / "cache"), "CUDA_VISIBLE_DEVICES": ""}
    full_env.update({k: str(cache_file) if v == "FILE" else v for k, v in env.items()})
    cmd = [sys.executable, "-m", "deffcore", *argv, "--no-progress"]
    res = subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
    assert res.stdout == ""
