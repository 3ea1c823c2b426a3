"""One read of a GGUF file per load (deffcore.inputs.model): a load inside `reads_once`
parses the file once instead of three times and gives bit-identical weights and tokenizer; the load
reports its four parts; the patches are gone afterwards."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from deffcore.core.errors import UnknownModelError
from deffcore.inputs import model as load_stages
from deffcore.inputs.model import load_model, reads_once

gguf = pytest.importorskip("gguf")


def write_tiny_gguf(path: Path, layers: int = 2, d: int = 32, ff: int = 64) -> Path:
    """A Llama GGUF of random float32 weights and a byte-fallback SentencePiece vocabulary."""
    heads, kv = 4, 2
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(128)
    w.add_embedding_length(d)
    w.add_block_count(layers)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(d // heads)
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{i:02X}>" for i in range(256)), "▁a", "▁b", "ab"]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    w.add_token_types([2, 3, 3, *([6] * 256), 1, 1, 1])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    rng = np.random.default_rng(0)
    hd = d // heads
    shapes = {"token_embd.weight": (len(tokens), d), "output.weight": (len(tokens), d)}
    for i in range(layers):
        shapes |= {
            f"blk.{i}.attn_q.weight": (d, d), f"blk.{i}.attn_k.weight": (kv * hd, d),
            f"blk.{i}.attn_v.weight": (kv * hd, d), f"blk.{i}.attn_output.weight": (d, d),
            f"blk.{i}.ffn_gate.weight": (ff, d), f"blk.{i}.ffn_up.weight": (ff, d),
            f"blk.{i}.ffn_down.weight": (d, ff),
        }  # fmt: skip
    for name, shape in shapes.items():
        w.add_tensor(name, (rng.standard_normal(shape) * 0.05).astype(np.float32))
    for name in ["output_norm.weight"] + [
        f"blk.{i}.{n}_norm.weight" for i in range(layers) for n in ("attn", "ffn")
    ]:
        w.add_tensor(name, np.ones(d, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture
def parses(monkeypatch):
    """How many times a GGUF file's header is parsed (GGUFReader objects built)."""
    count = [0]
    real = gguf.gguf_reader.GGUFReader.__init__

    def counting(self, *args, **kwargs):
        count[0] += 1
        real(self, *args, **kwargs)

    monkeypatch.setattr(gguf.gguf_reader.GGUFReader, "__init__", counting)
    return count


def test_one_parse_and_the_same_weights_and_tokenizer(tiny_gguf, parses):
    import transformers

    parts: list[str] = []
    with load_stages.reporting(parts.append):
        lm = load_model(str(tiny_gguf), device="cpu")
    assert parses[0] == 1
    assert parts == ["reading", "de-quantising", "building", "moving"]
    parses[0] = 0
    folder, name = str(tiny_gguf.parent), tiny_gguf.name
    plain = transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32
    )
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    assert parses[0] == 3  # what transformers does on its own: config, model, tokenizer
    mine, theirs = lm.model.state_dict(), plain.state_dict()
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)
    assert lm.tokenizer.get_vocab() == tok.get_vocab()
    assert lm.tokenizer("ab ba").input_ids == tok("ab ba").input_ids


def test_the_patches_are_gone_after_the_load_and_nest(tiny_gguf):
    import transformers.modeling_gguf_pytorch_utils as hf_gguf

    originals = (gguf.GGUFReader, gguf.get_tensor_name_map, hf_gguf.load_gguf_checkpoint)
    with reads_once():
        first = gguf.GGUFReader(str(tiny_gguf))
        with reads_once():  # nested: the same readers
            assert gguf.GGUFReader(str(tiny_gguf)) is first
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is gguf.get_tensor_name_map(
            gguf.MODEL_ARCH.LLAMA, 2
        )
    assert (gguf.GGUFReader, gguf.get_tensor_name_map, hf_gguf.load_gguf_checkpoint) == originals
    with pytest.raises(RuntimeError), reads_once():
        raise RuntimeError("a failed load")
    assert gguf.GGUFReader is originals[0]


def test_a_changed_file_is_read_again(tiny_gguf, tmp_path):
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(tiny_gguf.read_bytes())
    with reads_once():
        first = gguf.GGUFReader(str(copy))
        write_tiny_gguf(copy, d=16)
        assert gguf.GGUFReader(str(copy)) is not first


# ---------------------------------------------------------------------------------------------
# hostile headers: bounded in depth and typed (deffcore.inputs.model.gguf_metadata)

_U32, _F32, _STRING, _ARRAY, _U64 = 4, 6, 8, 9, 10


def _kv(key: str, kind: int, payload: bytes) -> bytes:
    name = key.encode()
    return struct.pack("<Q", len(name)) + name + struct.pack("<I", kind) + payload


def _string(text: str) -> bytes:
    return struct.pack("<Q", len(text.encode())) + text.encode()


def _nested_array(depth: int) -> bytes:
    """An array value `depth` arrays deep: [[[...[]...]]] (the innermost an empty u32 array)."""
    payload = struct.pack("<IQ", _U32, 0)
    for _ in range(depth - 1):
        payload = struct.pack("<IQ", _ARRAY, 1) + payload
    return payload


def _write_header(path: Path, *kvs: bytes) -> Path:
    """A GGUF file of no tensors whose header holds `kvs` (after general.architecture)."""
    kvs = (_kv("general.architecture", _STRING, _string("llama")), *kvs)
    blob = b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs)
    path.write_bytes(blob + b"\0" * 64)  # the (empty) data section starts aligned
    return path


HOSTILE = [
    ("nested", _kv("x.deep", _ARRAY, _nested_array(5_000)), "nests arrays deeper than 8"),
    ("align-text", _kv("general.alignment", _STRING, _string("abc")),
     "general.alignment is 'abc', not a power of two"),
    ("align-3", _kv("general.alignment", _U32, struct.pack("<I", 3)), "general.alignment is '3'"),
    ("align-0", _kv("general.alignment", _U32, struct.pack("<I", 0)), "general.alignment is '0'"),
    ("align-huge", _kv("general.alignment", _U64, struct.pack("<Q", 2**40)),
     "general.alignment is '1099511627776'"),
    ("blocks-float", _kv("llama.block_count", _F32, struct.pack("<f", 4.0)),
     "llama.block_count is '4.0', not a whole number from 1 to 1,000"),
    ("blocks-1e9", _kv("llama.block_count", _U32, struct.pack("<I", 10**9)),
     "llama.block_count is '1000000000'"),
    ("width-text", _kv("llama.embedding_length", _STRING, _string("wide")),
     "llama.embedding_length is 'wide'"),
    ("bos-text", _kv("tokenizer.ggml.add_bos_token", _STRING, _string("no")),
     "tokenizer.ggml.add_bos_token is 'no', not a bool"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "kv", "why"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_a_hostile_gguf_header_is_one_sentence(tmp_path, name, kv, why):
    from deffcore.inputs.model import gguf_metadata

    path = _write_header(tmp_path / f"{name}.gguf", kv)
    with pytest.raises(UnknownModelError) as err:  # never a RecursionError or a ValueError
        gguf_metadata(path)
    text = str(err.value)
    assert text.startswith(f"The file {path} is not a valid GGUF file (its ")
    assert why in text and str(path) in text and "\n" not in text, text
    with pytest.raises(UnknownModelError, match="not a valid GGUF file"):
        load_model(str(path))


def test_a_header_within_the_bounds_reads(tmp_path):
    from deffcore.inputs.model import MAX_ARRAY_DEPTH, gguf_metadata

    path = _write_header(
        tmp_path / "fine.gguf",
        _kv("x.deep", _ARRAY, _nested_array(MAX_ARRAY_DEPTH)),
        _kv("general.alignment", _U32, struct.pack("<I", 64)),
        _kv("llama.block_count", _U32, struct.pack("<I", 30)),
    )
    meta = gguf_metadata(path)
    assert meta["general.alignment"] == 64 and meta["llama.block_count"] == 30
    assert "x.deep" not in meta  # arrays are skipped


def test_the_gguf_ranges_are_the_config_ranges():
    from deffcore.inputs.model import GGUF_SIZES, MAX_LAYERS, SIZE_FIELDS

    assert GGUF_SIZES["block_count"] == (1, MAX_LAYERS)
    assert GGUF_SIZES["embedding_length"] == SIZE_FIELDS["hidden_size"]
    assert GGUF_SIZES["vocab_size"] == SIZE_FIELDS["vocab_size"]
    assert GGUF_SIZES["context_length"] == SIZE_FIELDS["max_position_embeddings"]
    pairs = {"feed_forward_length": "intermediate_size", "attention.head_count":
             "num_attention_heads", "attention.head_count_kv": "num_key_value_heads",
             "attention.key_length": "head_dim", "attention.value_length": "head_dim"}  # fmt: skip
    for gguf_key, field in pairs.items():
        assert GGUF_SIZES[gguf_key][1] == SIZE_FIELDS[field][1]


def test_the_cli_exits_2_for_a_gguf_nested_5000_deep(tmp_path, tiny_dataset, capsys):
    from deffcore.cli.main import main

    path = _write_header(tmp_path / "deep.gguf", HOSTILE[0][1])
    code = main(["measure", "--model", str(path), "--dataset", tiny_dataset, "--n", "4",
                 "--max-tokens", "8", "--no-progress", "--no-cache"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "nests arrays deeper than 8" in err[0], err
