"""Model shapes: published architectures typed in without weights, loaded as
`random:<shape>:<seed>` — their numbers against the published parameter counts, the packaged
models' GGUF headers and transformers' own reading of them; the load path on scaled-down copies
(a real 8B shape does not fit a test); reproducible weights drawn in the forward dtype; memory
checks before anything is allocated; device "auto"."""

from __future__ import annotations

import pytest
import torch

from deffcore.core.errors import DeviceUnavailableError, InvalidArgumentError, UnknownModelError
from deffcore.inputs import model as catalog
from deffcore.inputs import model as devices
from deffcore.inputs import model as gguf
from deffcore.inputs import model as loading
from deffcore.inputs.model import (
    SHAPES,
    Shape,
    check_fits,
    check_max_tokens,
    context_length,
    load_model,
    model_identity,
    param_count,
    shape_config,
    tiny_config,
)

# ----------------------------------------------------------------------------------------------
# The typed-in numbers


@pytest.mark.parametrize("name", list(SHAPES))
def test_parameter_count_is_the_published_one(name):
    """Counted from the config, counted from a model built on the meta device (no memory), and
    the model card's count: three independent sources agree exactly."""
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(shape_config(name))
    built = sum(p.numel() for p in model.parameters())
    assert built == param_count(name) == SHAPES[name].published_params


@pytest.mark.parametrize(
    "name,cls,layers,d,heads,kv,head_dim,ff,vocab,theta,eps,tied,ctx",
    [
        ("llama-3.2-1b", "LlamaForCausalLM", 16, 2048, 32, 8, 64, 8192, 128256, 5e5, 1e-5, True,
         131072),
        ("llama-3.1-8b", "LlamaForCausalLM", 32, 4096, 32, 8, 128, 14336, 128256, 5e5, 1e-5,
         False, 131072),
        ("qwen3-8b", "Qwen3ForCausalLM", 36, 4096, 32, 8, 128, 12288, 151936, 1e6, 1e-6, False,
         40960),
    ],
)  # fmt: skip
def test_transformers_reads_the_published_dimensions(
    name, cls, layers, d, heads, kv, head_dim, ff, vocab, theta, eps, tied, ctx
):
    """The config transformers builds from the typed-in fields (nothing silently dropped)."""
    import transformers

    config = shape_config(name)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    assert type(model).__name__ == cls
    assert (config.num_hidden_layers, config.hidden_size) == (layers, d)
    assert (config.num_attention_heads, config.num_key_value_heads) == (heads, kv)
    assert (config.head_dim, config.intermediate_size, config.vocab_size) == (head_dim, ff, vocab)
    assert config.rope_parameters["rope_theta"] == theta and config.rms_norm_eps == eps
    assert config.tie_word_embeddings is tied and config.max_position_embeddings == ctx
    attn = model.model.layers[0].self_attn
    assert attn.q_proj.weight.shape == (heads * head_dim, d)
    assert attn.k_proj.weight.shape == (kv * head_dim, d)
    if name.startswith("llama-3"):
        assert config.rope_parameters["rope_type"] == "llama3"


@pytest.mark.parametrize(
    "shape,packaged,prefix",
    [
        ("smollm2-135m-shape", "smollm2-135m", "llama"),
        ("gemma3-270m-shape", "gemma3-270m", "gemma3"),
    ],
)
def test_packaged_models_shapes_match_their_gguf_headers(shape, packaged, prefix):
    """The packaged models' stand-ins have exactly the dimensions of the GGUF files."""
    try:  # the header read in place (Gemma's from its parts: nothing assembled)
        meta = gguf.packaged_metadata(packaged)
    except UnknownModelError:
        pytest.skip(f"{packaged} is not installed")
    c = SHAPES[shape].config
    assert meta[f"{prefix}.block_count"] == c["num_hidden_layers"]
    assert meta[f"{prefix}.embedding_length"] == c["hidden_size"]
    assert meta[f"{prefix}.feed_forward_length"] == c["intermediate_size"]
    assert meta[f"{prefix}.attention.head_count"] == c["num_attention_heads"]
    assert meta[f"{prefix}.attention.head_count_kv"] == c["num_key_value_heads"]
    assert meta[f"{prefix}.context_length"] == c["max_position_embeddings"]
    assert meta[f"{prefix}.rope.freq_base"] == c["rope_theta"]
    assert meta[f"{prefix}.attention.layer_norm_rms_epsilon"] == pytest.approx(c["rms_norm_eps"])
    assert bool(meta["tokenizer.ggml.add_bos_token"]) == SHAPES[shape].adds_bos
    if prefix == "llama":
        assert meta["llama.vocab_size"] == c["vocab_size"]
        assert meta["llama.rope.dimension_count"] == c["head_dim"]
    else:
        assert meta["gemma3.attention.key_length"] == c["head_dim"]
        assert meta["gemma3.attention.sliding_window"] == c["sliding_window"]


# ----------------------------------------------------------------------------------------------
# The load path, on scaled-down copies (same architecture class, tiny dimensions)

_TINY_DIMS = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
              "vocab_size": 512}  # fmt: skip


def _scaled(name: str) -> Shape:
    extra = {"layer_types": ["sliding_attention", "full_attention"], "sliding_window": 8,
             "query_pre_attn_scalar": 16} if name == "gemma3-270m-shape" else {}  # fmt: skip
    if name == "qwen3-8b":
        extra["max_window_layers"] = 2
    config = {**SHAPES[name].config, **_TINY_DIMS, **extra}
    return Shape(name, SHAPES[name].description, "scaled down for a test", config,
                 SHAPES[name].adds_bos, published_params=0)  # fmt: skip


@pytest.fixture
def scaled(monkeypatch):
    """Every shape replaced by its scaled-down copy (the registry is one dict everywhere)."""
    for name in list(SHAPES):
        monkeypatch.setitem(SHAPES, name, _scaled(name))


@pytest.mark.parametrize("name", list(SHAPES))
def test_random_shape_loads_extracts_and_is_reproducible(scaled, name, tiny_passages):
    from deffcore.extraction.forward import extract_pooled

    spec = f"random:{name}:0"
    loaded = load_model(spec, device="cpu", dtype="bfloat16")
    arch = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM",
            "gemma3_text": "Gemma3ForCausalLM"}[SHAPES[name].config["model_type"]]  # fmt: skip
    assert loaded.architecture == arch and loaded.layers == 2 and loaded.d_model == 64
    assert next(loaded.model.parameters()).dtype == torch.bfloat16
    assert loaded.adds_bos == SHAPES[name].adds_bos  # the published tokenizer's convention
    assert loaded.weights_id == model_identity(spec)["weights_id"]
    again = load_model(spec, device="cpu", dtype="bfloat16")
    other = load_model(f"random:{name}:1", device="cpu", dtype="bfloat16")
    for a, b, c in zip(loaded.model.parameters(), again.model.parameters(),
                       other.model.parameters(), strict=True):  # fmt: skip
        assert torch.equal(a, b)
        if a.ndim == 2:
            assert not torch.equal(a, c)
    got = extract_pooled(loaded, tiny_passages, max_tokens=24)
    assert got.pooled["default"].shape == (3, len(tiny_passages), 64)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("arch", ["llama", "gemma3", "gpt2", "gptneox", "qwen2", "qwen3", "olmo2"])
def test_weights_drawn_in_the_forward_dtype_equal_float32_rounded(arch, dtype):
    """Random weights are drawn directly in the run's dtype (half the host memory of an 8B
    shape): bit-identical to the float32 draw rounded, so cache keys stay valid."""
    wide = loading.init_from_config(tiny_config(arch), 3).to(dtype)
    narrow = loading.init_from_config(tiny_config(arch), 3, dtype)
    for (name, a), b in zip(wide.state_dict().items(), narrow.state_dict().values(), strict=True):
        assert a.dtype == b.dtype == dtype and torch.equal(a, b), name


def test_identities_context_and_tokenizer_without_loading(monkeypatch):
    ids = {model_identity(f"random:{n}:{s}")["weights_id"] for n in SHAPES for s in (0, 1)}
    assert len(ids) == 2 * len(SHAPES)  # distinct per shape and seed
    base = model_identity("random:qwen3-8b:0")["base"]
    assert base["source"] == "shape" and base["weights_id"].startswith("shape:qwen3-8b:")
    before = model_identity("random:qwen3-8b:0")["weights_id"]
    changed = Shape(**{**SHAPES["qwen3-8b"].__dict__,
                       "config": {**SHAPES["qwen3-8b"].config, "rope_theta": 1.0}})  # fmt: skip
    monkeypatch.setitem(SHAPES, "qwen3-8b", changed)
    assert model_identity("random:qwen3-8b:0")["weights_id"] != before  # any field is in the key
    monkeypatch.undo()
    assert context_length("random:qwen3-8b:0") == 40960
    assert context_length("random:llama-3.1-8b:2") == 131072
    with pytest.raises(InvalidArgumentError, match="40960"):
        check_max_tokens("random:qwen3-8b:0", 50_000)
    tok = loading.load_tokenizer("llama-3.1-8b")  # the byte tokenizer, no weights
    assert tok("ab").input_ids == [1, tok("a", add_special_tokens=False).input_ids[0],
                                   tok("b", add_special_tokens=False).input_ids[0]]  # fmt: skip
    assert "llama-3.1-8b" in catalog.offline_models_sentence()


def test_a_bare_shape_has_no_weights():
    with pytest.raises(UnknownModelError, match=r"random:llama-3\.1-8b:<seed>"):
        load_model("llama-3.1-8b", device="cpu")


def test_memory_is_checked_before_anything_is_allocated(monkeypatch):
    gib = 1024**3
    monkeypatch.setattr(devices, "host_memory_bytes", lambda: 20 * gib)
    check_fits("random:llama-3.1-8b:0", "cpu", "bfloat16")  # 15 GiB fits in 20
    with pytest.raises(InvalidArgumentError, match=r"29\.9 GiB of host memory .* 20\.0 GiB"):
        check_fits("random:llama-3.1-8b:0", "cpu", "float32")
    monkeypatch.setattr(devices, "_device_memory_bytes", lambda device: 12 * gib)
    with pytest.raises(InvalidArgumentError, match="--device auto"):
        check_fits("random:qwen3-8b:0", "cuda", "bfloat16")
    check_fits("random:qwen3-8b:0", "cuda", "bfloat16", spread=True)
    check_fits("random:smollm2-135m:0", "cpu", "float32")  # not a shape: size unknown, no check
    monkeypatch.undo()
    monkeypatch.setenv("DEFF_HOST_MEMORY_GIB", "40")  # a VM whose memory grows on demand
    check_fits("random:llama-3.1-8b:0", "cpu", "float32")
    monkeypatch.setenv("DEFF_HOST_MEMORY_GIB", "2")
    inits = []
    monkeypatch.setattr(loading, "init_from_config", lambda *a: inits.append(a))
    with pytest.raises(InvalidArgumentError, match="host memory"):
        load_model("random:llama-3.1-8b:0", device="cpu", dtype="float32")
    from deffcore.runs.measure import run_spec

    with pytest.raises(InvalidArgumentError, match="host memory"):
        run_spec("random:llama-3.1-8b:0", "bbc-news", 16, 32, 0, "cka", device="cpu",
                 dtype="float32")  # fmt: skip
    assert inits == []  # refused before a weight was drawn


def test_device_auto_needs_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(DeviceUnavailableError, match="'auto' spreads a model"):
        devices.check_device("auto")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert devices.resolve_device_dtype("auto") == ("auto", "bfloat16")
