"""A model folder never runs its own code, and a lying safetensors header is one sentence:
`deffcore.inputs.model` and its use in
`deffcore.inputs.model`."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import types
from pathlib import Path

import pytest

from deffcore.cli.main import main
from deffcore.core.errors import UnknownModelError
from deffcore.inputs import model as context
from deffcore.inputs import model as loading
from deffcore.inputs.model import check_model_folder, check_safetensors

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def saved_folder(tmp_path, tiny_model) -> Path:
    """A tiny llama saved with save_pretrained (config, safetensors weights, tokenizer)."""
    lm = tiny_model("llama")
    folder = tmp_path / "saved"
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    return folder


def _with_remote_code(folder: Path, config_name: str = "config.json") -> Path:
    """`folder` asking transformers to import its `evil.py`, which writes a marker file."""
    marker = folder / "CODE_RAN"
    (folder / "evil.py").write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        "from transformers import LlamaConfig as EvilConfig, LlamaForCausalLM as EvilModel\n"
    )
    path = folder / config_name
    config = json.loads(path.read_text()) if path.exists() else {}
    config["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    path.write_text(json.dumps(config))
    return marker


@pytest.mark.parametrize("config_name", ["config.json", "tokenizer_config.json"])
def test_a_folder_with_auto_map_is_refused_before_transformers(
    saved_folder, config_name, monkeypatch
):
    import transformers

    marker = _with_remote_code(saved_folder, config_name)
    for cls in (transformers.AutoConfig, transformers.AutoModelForCausalLM,
                transformers.AutoTokenizer):  # fmt: skip
        monkeypatch.setattr(cls, "from_pretrained", lambda *a, **k: pytest.fail("asked"))
    for load in (loading.load_model, loading.load_tokenizer):
        with pytest.raises(UnknownModelError) as err:
            load(str(saved_folder))
        text = str(err.value)
        assert "auto_map" in text and "evil.py" in text and "trust_remote_code=False" in text
        assert "\n" not in text
    with pytest.raises(UnknownModelError, match="auto_map"):
        loading.load_model(f"random:{saved_folder}:0")
    # refused by the cheap checks that run before any model loads, too
    with pytest.raises(UnknownModelError, match="auto_map"):
        context.context_length(str(saved_folder))
    assert not marker.exists()


def test_every_transformers_call_passes_trust_remote_code_false(saved_folder, monkeypatch):
    """The second line of defence: even a folder the check lets through (or a hub id) is
    loaded with trust_remote_code=False, so transformers can neither prompt nor run code."""
    import transformers

    seen: list[tuple[str, object]] = []

    def recorder(name, real):
        def call(*args, **kwargs):
            seen.append((name, kwargs.get("trust_remote_code", "missing")))
            return real(*args, **kwargs)

        return call

    for cls in (transformers.AutoConfig, transformers.AutoTokenizer,
                transformers.AutoModelForCausalLM):  # fmt: skip
        monkeypatch.setattr(cls, "from_pretrained", recorder(cls.__name__, cls.from_pretrained))
    real_from_config = transformers.AutoModelForCausalLM.from_config
    monkeypatch.setattr(
        transformers.AutoModelForCausalLM, "from_config", recorder("from_config", real_from_config)
    )
    loading.load_model(str(saved_folder))
    loading.load_model(f"random:{saved_folder}:1")
    names = {name for name, _ in seen}
    assert {"AutoConfig", "AutoTokenizer", "AutoModelForCausalLM", "from_config"} <= names
    assert all(value is False for _, value in seen), seen


def test_a_hub_model_asking_for_its_code_is_one_sentence(monkeypatch):
    import transformers

    def refuse(*args, **kwargs):
        assert kwargs["trust_remote_code"] is False
        raise ValueError(
            "The repository org/custom contains custom code which must be executed to correctly "
            "load the model.\nPlease pass the argument `trust_remote_code=True` to allow custom "
            "code to be run."
        )

    def plain_tokenizer(*args, **kwargs):  # the tokenizer loads first (and needs no code)
        assert kwargs["trust_remote_code"] is False
        return types.SimpleNamespace(bos_token_id=1, eos_token_id=2, pad_token_id=0)

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", plain_tokenizer)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", refuse)
    with pytest.raises(UnknownModelError) as err:
        loading.load_model("org/custom")
    assert "own Python code" in str(err.value) and "\n" not in str(err.value)


def test_the_cli_refuses_the_folder_in_one_line_with_stdin_closed(saved_folder, tiny_dataset):
    marker = _with_remote_code(saved_folder)
    argv = ["measure", "--model", str(saved_folder), "--dataset", tiny_dataset, "--n", "4",
            "--max-tokens", "8", "--no-progress"]  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-m", "deffcore", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "auto_map" in lines[0], proc.stderr
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# safetensors headers


def _safetensors(path: Path, header: dict | bytes, data: bytes = b"", size: int | None = None):
    blob = header if isinstance(header, bytes) else json.dumps(header).encode()
    n = len(blob) if size is None else size
    path.write_bytes(struct.pack("<Q", n) + blob + data)
    return path


@pytest.mark.parametrize(
    ("header", "data", "claimed", "why"),
    [
        # a 2^20 x 2^20 float32 tensor "stored" in 16 bytes
        ({"w": {"dtype": "F32", "shape": [2**20, 2**20], "data_offsets": [0, 16]}}, 16, None,
         "claims shape"),
        ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, 0, 2**62, "claims"),
        ({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, 8, None, "outside"),
        ({"w": {"dtype": "F99", "shape": [4], "data_offsets": [0, 16]}}, 16, None, "dtype"),
        ({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 16]}}, 16, None, "shape"),
        (b"[1, 2]", 0, None, "not a JSON object"),
        (b"{not json", 0, None, "not JSON"),
    ],
)  # fmt: skip
def test_lying_safetensors_headers_are_refused(tmp_path, header, data, claimed, why):
    path = _safetensors(tmp_path / "model.safetensors", header, b"\0" * data, claimed)
    with pytest.raises(UnknownModelError, match=why) as err:
        check_safetensors(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_file_shorter_than_its_header_size(tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes(b"\x01\x02")
    with pytest.raises(UnknownModelError, match="shorter than"):
        check_safetensors(path)


def test_real_safetensors_pass_and_a_lying_one_in_a_folder_stops_the_load(
    saved_folder, monkeypatch
):
    import transformers

    check_model_folder(saved_folder)  # what save_pretrained writes is valid
    weights = next(saved_folder.glob("*.safetensors"))
    n = struct.unpack("<Q", weights.read_bytes()[:8])[0]
    header = json.loads(weights.read_bytes()[8 : 8 + n])
    name = next(k for k in header if k != "__metadata__")
    header[name]["shape"] = [2**20, 2**20]
    blob = json.dumps(header).encode()
    rest = weights.read_bytes()[8 + n :]
    weights.write_bytes(struct.pack("<Q", len(blob)) + blob + rest)
    monkeypatch.setattr(
        transformers.AutoModelForCausalLM, "from_pretrained", lambda *a, **k: pytest.fail("read")
    )
    with pytest.raises(UnknownModelError, match="not a valid safetensors file"):
        loading.load_model(str(saved_folder))


def test_cli_exit_2_for_a_2_62_byte_header(saved_folder, tiny_dataset, capsys):
    weights = next(saved_folder.glob("*.safetensors"))
    weights.write_bytes(struct.pack("<Q", 2**62) + weights.read_bytes()[8:])
    code = main(["measure", "--model", str(saved_folder), "--dataset", tiny_dataset, "--n", "4",
                 "--max-tokens", "8", "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "safetensors" in err[0], err


@pytest.mark.parametrize("where", [("text_config",), ("text_config", "vision_config")])
def test_an_auto_map_nested_in_a_sub_config_is_refused(saved_folder, where, monkeypatch):
    """A multimodal wrapper's config nests the text model's: an `auto_map` there (or deeper)
    would run the folder's code as surely as one at the top (a surviving mutation)."""
    import transformers

    marker = _with_remote_code(saved_folder)
    path = saved_folder / "config.json"
    config = json.loads(path.read_text())
    nested = config.pop("auto_map")
    node = config
    for key in where:
        node = node.setdefault(key, {"model_type": "llama"})
    node["auto_map"] = nested
    path.write_text(json.dumps(config))
    monkeypatch.setattr(
        transformers.AutoConfig, "from_pretrained", lambda *a, **k: pytest.fail("asked")
    )
    with pytest.raises(UnknownModelError, match=r"an 'auto_map' naming evil\.py"):
        loading.load_model(str(saved_folder))
    with pytest.raises(UnknownModelError, match="auto_map"):
        context.context_length(str(saved_folder))
    assert not marker.exists()
    node["auto_map"] = {}  # an empty one names nothing: the folder is plain again
    path.write_text(json.dumps(config))
    from deffcore.inputs.model import check_model_folder

    check_model_folder(saved_folder)
