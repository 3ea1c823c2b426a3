"""A model folder is checked before anything is built, and its weights must fill its config
(`deffcore.inputs.model`, `deffcore.inputs.model.check_loaded_weights`): a bad
config, a model too large for the machine, an encoder, or a config over foreign weights is one
sentence (a DeffError; exit 2 on the CLI), for a folder and for `random:<folder>:<seed>`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from deffcore.cli.main import main
from deffcore.core.errors import (
    InvalidArgumentError,
    UnknownModelError,
    UnsupportedArchitectureError,
)
from deffcore.inputs import model as context
from deffcore.inputs import model as loading
from deffcore.inputs.model import check_loaded_weights, model_size, parameters, refusal_by_design
from deffcore.inputs.small_configs import BY_DESIGN


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory) -> Path:
    """A tiny GPT-2 (4 blocks, d = 64) saved with save_pretrained, with the byte tokenizer."""
    from deffcore.inputs.model import load_model

    lm = load_model("tiny-gpt2")
    folder = tmp_path_factory.mktemp("folders") / "gpt2"
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    return folder


def _copy(src: Path, dest: Path, config: dict | str | None = None, **changes) -> Path:
    """A copy of `src` whose config.json is `config` (JSON text or a mapping), or the original
    with `changes`."""
    shutil.copytree(src, dest)
    path = dest / "config.json"
    if config is None:
        config = {**json.loads(path.read_text()), **changes}
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    return dest


@pytest.fixture
def nothing_built(monkeypatch):
    """Every way transformers could read or build a model fails the test: a refusal must come
    before (a config of 10^9 blocks would otherwise build for hours, 2^30 wide allocate TBs)."""
    import transformers

    def asked(*args, **kwargs):
        pytest.fail("transformers was asked to build the model")

    for cls in (transformers.AutoConfig, transformers.AutoModelForCausalLM):
        monkeypatch.setattr(cls, "from_pretrained", asked)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_config", asked)


BAD_CONFIGS = [
    ("[1, 2]", {}, "is a JSON list, not an object"),
    ('"gpt2"', {}, "is a JSON string"),
    (None, {"n_layer": "four"}, "has n_layer = 'four'; it must be a whole number from 1 to 1,000"),
    (None, {"n_layer": 4.0}, "has n_layer = 4.0"),
    (None, {"n_layer": True}, "has n_layer = true"),
    (None, {"n_head": 0}, "has n_head = 0"),
    (None, {"n_embd": 2**30}, "has n_embd = 1073741824; it must be a whole number from 1 to"),
    (None, {"n_layer": 10**9}, "has n_layer = 1000000000"),
    (None, {"vocab_size": -1}, "has vocab_size = -1"),
    (None, {"n_positions": [512]}, "has n_positions = [512]"),
    (None, {"n_head": 5}, "width of 64 that its 5 attention heads do not divide"),
    (None, {"model_type": 7}, "model_type that is not a string"),
    (None, {"architectures": "GPT2LMHeadModel"}, "architectures that are not a list"),
    (None, {"text_config": {"num_hidden_layers": 0}}, "(its text_config) has num_hidden_layers"),
]


@pytest.mark.parametrize(("config", "changes", "why"), BAD_CONFIGS)
@pytest.mark.parametrize("random", [False, True])
def test_a_bad_config_is_one_sentence_before_anything_is_built(
    gpt2_folder, tmp_path, nothing_built, config, changes, why, random
):
    folder = _copy(gpt2_folder, tmp_path / "bad", config, **changes)
    spec = f"random:{folder}:0" if random else str(folder)
    start = time.perf_counter()
    with pytest.raises(UnknownModelError) as err:
        loading.load_model(spec)
    text = str(err.value)
    assert why in text and f"the model folder {folder}" in text and "\n" not in text, text
    assert time.perf_counter() - start < 5  # no model of 10^9 blocks was started
    with pytest.raises(UnknownModelError, match=r"config\.json"):  # the cheap checks, too
        context.context_length(str(folder))
    size = model_size(str(folder))  # the planner's estimate: unknown, never a traceback
    assert size is None or size.layers <= 1_000


def test_a_hub_config_of_random_weights_is_checked_before_its_model_is_built(monkeypatch):
    """`random:<hub id>:<seed>` reads the config from the hub (here: a stand-in) and builds
    it: 10^9 blocks would build for hours."""
    import transformers

    from deffcore.inputs.model import byte_level_tokenizer

    deep = transformers.GPT2Config(n_layer=10**9, n_embd=64, n_head=4, vocab_size=320)
    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", lambda *a, **k: deep)
    monkeypatch.setattr(
        transformers.AutoTokenizer, "from_pretrained", lambda *a, **k: byte_level_tokenizer()
    )
    monkeypatch.setattr(
        transformers.AutoModelForCausalLM, "from_config", lambda *a, **k: pytest.fail("built")
    )
    with pytest.raises(UnknownModelError) as err:
        loading.load_model("random:org/deep:0")
    assert str(err.value) == (
        "The config.json of model 'org/deep' has n_layer = 1000000000; it must be a whole "
        "number from 1 to 1,000."
    )


def test_kv_heads_must_divide_the_heads(gpt2_folder, tmp_path, nothing_built):
    llama = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
             "num_attention_heads": 4, "num_key_value_heads": 3, "vocab_size": 320}  # fmt: skip
    folder = _copy(gpt2_folder, tmp_path / "kv", llama)
    with pytest.raises(UnknownModelError, match="3 key-value heads, which do not divide its 4"):
        loading.load_model(str(folder))


@pytest.mark.parametrize("random", [False, True])
def test_a_config_larger_than_the_machine_is_refused_before_allocation(
    gpt2_folder, tmp_path, nothing_built, monkeypatch, random
):
    """Every config's parameter memory (not only the built-in shapes') is checked against the
    machine: 48 blocks of width 8192 are ~39B parameters, 144 GiB in float32."""
    monkeypatch.setenv("DEFF_HOST_MEMORY_GIB", "16")
    folder = _copy(gpt2_folder, tmp_path / "big", n_layer=48, n_embd=8192, n_head=64)
    spec = f"random:{folder}:0" if random else str(folder)
    with pytest.raises(InvalidArgumentError) as err:
        loading.load_model(spec, device="cpu", dtype="float32")
    text = str(err.value)
    assert "GiB of host memory" in text and "16.0 GiB available" in text and "\n" not in text
    assert f"{parameters(json.loads((folder / 'config.json').read_text())):,}" in text
    monkeypatch.setenv("DEFF_HOST_MEMORY_GIB", "1000")
    from deffcore.inputs.model import check_fits

    check_fits(spec, "cpu", "float32")  # the same config fits a machine with 1,000 GiB


@pytest.mark.parametrize("arch", ["llama", "gpt2", "qwen3", "gemma3"])
def test_the_parameter_estimate_is_the_models_size(arch):
    """The memory check's count, from config.json alone, against the built model's (within
    the norms, biases and position tables the formula leaves out)."""
    lm = loading.load_model(f"tiny-{arch}")
    built = sum(p.numel() for p in lm.model.parameters())
    estimate = parameters(lm.model.config.to_dict())
    assert 0.75 * built <= estimate <= 1.05 * built, (estimate, built)


def _bert_folder(tmp_path: Path) -> Path:
    import transformers

    from deffcore.inputs.model import byte_level_tokenizer

    config = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=64,
        vocab_size=320, is_decoder=True,
    )  # fmt: skip
    folder = tmp_path / "bert"
    transformers.BertLMHeadModel(config).save_pretrained(folder)
    byte_level_tokenizer(add_bos=True).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("random", [False, True])
def test_an_encoder_folder_is_refused_on_load_as_the_support_table_says(
    tmp_path, monkeypatch, random
):
    """BERT's support-table row is "refused by design"; a BERT folder was measured (exit 0):
    now its load gives the table's own reason, before any model is built."""
    from deffcore.lenses.support import verify_type

    folder = _bert_folder(tmp_path)
    import transformers

    for name in ("from_pretrained", "from_config"):
        monkeypatch.setattr(
            transformers.AutoModelForCausalLM, name, lambda *a, **k: pytest.fail("built")
        )
    spec = f"random:{folder}:0" if random else str(folder)
    with pytest.raises(UnsupportedArchitectureError) as err:
        loading.load_model(spec)
    text = str(err.value)
    assert "'bert' model, which is refused by design" in text and str(folder) in text
    assert BY_DESIGN["bert"] in text and "\n" not in text
    assert verify_type("bert").reason == f"Refused by design: {BY_DESIGN['bert']}."


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({"model_type": "t5", "is_encoder_decoder": True, "d_model": 32, "num_layers": 2},
         "the decoder of an encoder-decoder model"),
        ({"model_type": "deberta-v2", "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 4}, "an encoder (bidirectional attention)"),
        ({"model_type": "roberta", "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 4}, "an encoder (bidirectional attention)"),
    ],
)  # fmt: skip
def test_encoders_and_encoder_decoders_outside_the_table_are_refused_too(
    gpt2_folder, tmp_path, nothing_built, config, reason
):
    folder = _copy(gpt2_folder, tmp_path / "enc", config)
    with pytest.raises(UnsupportedArchitectureError, match="refused by design") as err:
        loading.load_model(str(folder))
    assert reason in str(err.value)


def test_one_source_for_the_load_and_the_support_table():
    for kind, reason in BY_DESIGN.items():
        assert refusal_by_design(kind) == reason
    for kind in ("llama", "gpt2", "gemma3_text", "mamba"):
        assert refusal_by_design(kind) is None


def test_a_config_that_says_encoder_decoder_is_refused_whatever_its_type():
    """`is_encoder_decoder` alone refuses: a type transformers does not know, a causal-LM type
    and no type at all get the encoder-decoder reason (t5's own refusal comes from its type)."""
    from deffcore.inputs.small_configs import ENC_DEC_REASON

    for kind in ("my-new-seq2seq", "llama", ""):
        assert refusal_by_design(kind, encoder_decoder=True) == ENC_DEC_REASON
        assert refusal_by_design(kind) is None


# ---------------------------------------------------------------------------------------------
# weights that do not fill their config


def test_a_llama_config_over_gpt2_weights_is_refused(gpt2_folder, tmp_path):
    import transformers

    llama = transformers.LlamaConfig(num_hidden_layers=4, hidden_size=64, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=259)  # fmt: skip
    folder = _copy(gpt2_folder, tmp_path / "foreign", llama.to_json_string())
    with pytest.raises(UnknownModelError) as err:
        loading.load_model(str(folder))
    text = str(err.value)
    assert f"The model folder {folder} holds weights that do not match its config.json" in text
    # only GPT-2's untied head (lm_head.weight, the same shape) is a llama tensor
    assert "38 of the 'llama' model's parameter tensors (92% of its parameters" in text
    assert "newly initialised" in text and "\n" not in text


def test_a_config_with_more_blocks_than_its_weights_is_refused(gpt2_folder, tmp_path):
    """One block of five missing is a fifth of the parameters: still refused (its block would
    be random)."""
    folder = _copy(gpt2_folder, tmp_path / "deeper", n_layer=5)
    with pytest.raises(UnknownModelError, match=r"e\.g\. transformer\.h\.4\.") as err:
        loading.load_model(str(folder))
    assert "do not match its config.json" in str(err.value)


def test_weights_of_other_shapes_than_the_config_are_one_sentence(gpt2_folder, tmp_path):
    folder = _copy(gpt2_folder, tmp_path / "wide", n_embd=128)
    with pytest.raises(UnknownModelError, match=r"shapes do not match its config\.json") as err:
        loading.load_model(str(folder))
    assert str(folder) in str(err.value) and "\n" not in str(err.value)


def test_a_folder_whose_weights_fill_it_loads_and_measures(gpt2_folder):
    lm = loading.load_model(str(gpt2_folder))
    ref = loading.load_model("tiny-gpt2")
    assert lm.layers == 4
    for (name, p), (_, q) in zip(
        lm.model.named_parameters(), ref.model.named_parameters(), strict=True
    ):
        assert torch.equal(p, q), name


class _TwoPart(torch.nn.Module):
    """An embedding (1,000 values) and an unnumbered head (10): what the share rule weighs."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(100, 10)
        self.head = torch.nn.Linear(10, 1, bias=False)
        self.extra = torch.nn.Linear(10, 200, bias=False)


def test_the_share_rule_and_the_embeddings():
    model = _TwoPart()
    check_loaded_weights(model, {"missing_keys": {"head.weight"}}, "The model folder x")
    most = r"the model's parameter tensors \(66% of its parameters"  # 2,000 of 3,010 are new
    with pytest.raises(UnknownModelError, match=most):
        check_loaded_weights(model, {"missing_keys": {"extra.weight"}}, "The model folder x")
    model.get_input_embeddings = lambda: model.embed
    with pytest.raises(UnknownModelError, match=r"e\.g\. embed\.weight"):  # h_0 would be random
        check_loaded_weights(model, {"missing_keys": {"embed.weight"}}, "The model folder x")


# ---------------------------------------------------------------------------------------------
# the CLI


@pytest.mark.parametrize(
    ("kind", "why"),
    [("list", "JSON list"), ("deep", "n_layer = 1000000000"), ("bert", "refused by design"),
     ("foreign", "do not match its config.json")],
)  # fmt: skip
def test_the_cli_exits_2_with_one_sentence(gpt2_folder, tmp_path, tiny_dataset, capsys, kind, why):
    import transformers

    if kind == "bert":
        folder = _bert_folder(tmp_path)
    elif kind == "foreign":
        llama = transformers.LlamaConfig(num_hidden_layers=4, hidden_size=64,
                                         num_attention_heads=4, vocab_size=259)  # fmt: skip
        folder = _copy(gpt2_folder, tmp_path / kind, llama.to_json_string())
    else:
        folder = _copy(gpt2_folder, tmp_path / kind, "[1]" if kind == "list" else None,
                       **({"n_layer": 10**9} if kind == "deep" else {}))  # fmt: skip
    capsys.readouterr()
    code = main(["measure", "--model", str(folder), "--dataset", tiny_dataset, "--n", "4",
                 "--max-tokens", "8", "--no-progress", "--no-cache"])  # fmt: skip
    lines = capsys.readouterr().err.strip().splitlines()
    # transformers' own "Loading weights" progress bar is on every folder load; nothing else
    err = [line for line in lines if not line.startswith("Loading weights")]
    assert code == 2 and len(err) == 1 and why in err[0], lines


def test_a_refused_foreign_folder_prints_only_its_sentence(gpt2_folder, tmp_path, tiny_dataset):
    """transformers' LOAD REPORT (a table of missing and unexpected keys on stderr, the only sign
    before) is held back for weights that are refused: the process prints the one sentence."""
    import transformers

    llama = transformers.LlamaConfig(num_hidden_layers=4, hidden_size=64, num_attention_heads=4,
                                     vocab_size=259)  # fmt: skip
    folder = _copy(gpt2_folder, tmp_path / "foreign", llama.to_json_string())
    argv = ["measure", "--model", str(folder), "--dataset", tiny_dataset, "--n", "4",
            "--max-tokens", "8", "--no-progress", "--no-cache"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "deffcore", *argv],
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    err = [line for line in lines if not line.startswith("Loading weights")]
    assert proc.returncode == 2 and len(err) == 1, proc.stderr
    assert err[0].startswith(f"error: The model folder {folder} holds weights that do not match")
