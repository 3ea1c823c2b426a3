"""A model's dimensions and parameter count without its weights (what the planner needs).

    size = model_size("smollm2-135m")        # from the GGUF header: 30 blocks, d = 576, ...
    size.params, size.block_params            # 134.5M in all, 106.2M in the blocks

Sources, cheapest first, none of them a download: a tiny model's config kwargs; a GGUF file's
header (`models.gguf_metadata`; a packaged model's vocabulary size from `_GGUF_VOCAB` when the
header lacks it); a local folder's config.json; a hub config already on this machine
(`huggingface_hub.try_to_load_from_cache`); else a `known` table (a sweep manifest's `size`
entries: `manifests/paper16.yaml`). `random:<m>:<seed>` has the size of `<m>`.

Parameter count (decision, a transformer decoder): embeddings vocab x d (an untied head adds
the same again); per block the attention projections d x (H + 2 KV) x head_dim + H x head_dim
x d and the MLP, 3 d d_ff when gated (Llama, Gemma, Qwen, OLMo, Mistral) or 2 d d_ff (GPT-2,
GPT-NeoX); norms and biases are left out (under 0.1%). The packaged models come out at 134.5M
(SmolLM2-135M) and 268.1M (Gemma-3-270M), their published sizes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deffcore.core.errors import DeffError
from deffcore.inputs.model_spec import Kind, ModelSpec

#: Vocabulary sizes of packaged GGUF architectures whose header does not state one.
_GGUF_VOCAB = {"gemma3": 262144, "llama": 49152}
#: Architectures whose MLP is two matrices (up, down) rather than three (gate, up, down).
_UNGATED = ("gpt2", "gpt_neox", "gptneox")
#: The range of each size (far beyond any decoder, far inside what the planner can count).
_BOUNDS = {
    "layers": (1, 10_000),
    "d_model": (1, 2**20),
    "d_ff": (1, 2**24),
    "heads": (1, 2**14),
    "kv_heads": (1, 2**14),
    "head_dim": (1, 2**16),
    "vocab": (1, 2**24),
}


def _per_head(d: int, heads: int) -> int:
    """d / heads, the default head width (0 for a size whose heads are not positive: refused
    by `ModelSize` with its sentence, never a ZeroDivisionError)."""
    return d // heads if heads > 0 else 0


@dataclass(frozen=True)
class ModelSize:
    """Dimensions of a decoder: L blocks of width d, MLP width d_ff, H query and KV heads."""

    layers: int
    d_model: int
    d_ff: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    gated: bool = True
    tied: bool = True
    source: str = ""

    def __post_init__(self) -> None:
        """Every size a whole number in its range (a manifest's `heads: 0` or `layers: -4`
        would divide by zero or plan negative seconds): one sentence naming the field."""
        for name, (low, high) in _BOUNDS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise DeffError(
                    f"The model size from {self.source or 'its source'} has {name} = {value!r}; "
                    f"it must be a whole number from {low:,} to {high:,}."
                )
        if self.kv_heads > self.heads:
            raise DeffError(
                f"The model size from {self.source or 'its source'} has more KV heads "
                f"({self.kv_heads}) than heads ({self.heads})."
            )

    @property
    def block_params(self) -> int:
        """Parameters in the L blocks (what a forward pass multiplies by, per token)."""
        attn = self.d_model * (self.heads + 2 * self.kv_heads) * self.head_dim
        attn += self.heads * self.head_dim * self.d_model
        mlp = (3 if self.gated else 2) * self.d_model * self.d_ff
        return self.layers * (attn + mlp)

    @property
    def params(self) -> int:
        """Every parameter: the blocks, the embeddings and an untied unembedding."""
        embed = self.vocab * self.d_model * (1 if self.tied else 2)
        return self.block_params + embed

    def to_dict(self) -> dict[str, Any]:
        return {
            "layers": self.layers,
            "d_model": self.d_model,
            "params": self.params,
            "block_params": self.block_params,
            "source": self.source,
        }


def from_config(config: Mapping[str, Any], source: str = "config") -> ModelSize:
    """A ModelSize from a Hugging Face config.json mapping (a nested `text_config` wins)."""
    cfg = dict(config.get("text_config") or config)

    def first(*names: str, default: Any = None) -> Any:
        for name in names:
            if cfg.get(name) is not None:
                return cfg[name]
        return default

    d = int(first("hidden_size", "n_embd", "d_model"))
    heads = int(first("num_attention_heads", "n_head"))
    arch = str(first("model_type", default=config.get("model_type", "")))
    return ModelSize(
        layers=int(first("num_hidden_layers", "n_layer")),
        d_model=d,
        d_ff=int(first("intermediate_size", "n_inner", default=4 * d) or 4 * d),
        heads=heads,
        kv_heads=int(first("num_key_value_heads", default=heads)),
        head_dim=int(first("head_dim", default=_per_head(d, heads))),
        vocab=int(first("vocab_size")),
        gated=arch not in _UNGATED,
        tied=bool(first("tie_word_embeddings", default=True)),
        source=source,
    )


def from_gguf(meta: Mapping[str, Any], source: str = "gguf header") -> ModelSize:
    """A ModelSize from a GGUF header's scalars (`models.gguf_metadata`)."""
    arch = meta.get("general.architecture", "")

    def key(name: str) -> Any:
        return meta.get(f"{arch}.{name}")

    d, heads = int(key("embedding_length")), int(key("attention.head_count"))
    vocab = key("vocab_size") or _GGUF_VOCAB.get(arch)
    if vocab is None:
        raise DeffError(f"The GGUF header of this {arch} model does not say its vocabulary size.")
    return ModelSize(
        layers=int(key("block_count")),
        d_model=d,
        d_ff=int(key("feed_forward_length")),
        heads=heads,
        kv_heads=int(key("attention.head_count_kv") or heads),
        head_dim=int(key("attention.key_length") or _per_head(d, heads)),
        vocab=int(vocab),
        source=source,
    )


def from_mapping(entry: Mapping[str, Any], source: str = "table") -> ModelSize:
    """A ModelSize from a manifest's `size` entry: layers, d_model, d_ff, heads, kv_heads,
    head_dim (default d/heads), vocab, gated (default true), tied (default true)."""
    try:
        heads = int(entry["heads"])
        d = int(entry["d_model"])
        return ModelSize(
            layers=int(entry["layers"]),
            d_model=d,
            d_ff=int(entry["d_ff"]),
            heads=heads,
            kv_heads=int(entry.get("kv_heads", heads)),
            head_dim=int(entry.get("head_dim", _per_head(d, heads))),
            vocab=int(entry["vocab"]),
            gated=bool(entry.get("gated", True)),
            tied=bool(entry.get("tied", True)),
            source=source,
        )
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        if isinstance(err, DeffError):  # a size out of its range: ModelSize's own sentence
            raise
        raise DeffError(
            f"A model size needs layers, d_model, d_ff, heads and vocab as numbers ({err})."
        ) from err


def model_size(
    spec: str | ModelSpec,
    revision: str | None = None,
    known: Mapping[str, ModelSize] | None = None,
) -> ModelSize | None:
    """The size of `spec` from what this machine holds (module docstring), None if unknown."""
    from deffcore.inputs import catalog, gguf

    parsed = ModelSpec.stored(spec).trained  # a random null has its base's size
    spec = parsed.text
    if known and spec in known:
        return known[spec]
    if parsed.kind is Kind.TINY:
        return from_config(catalog.tiny_config(parsed.tiny_arch).to_dict(), "tiny config")
    path = parsed.path
    if parsed.kind in (Kind.PACKAGED, Kind.GGUF):
        if parsed.kind is Kind.PACKAGED:  # read in place: a size never assembles a file
            return from_gguf(gguf.packaged_metadata(spec))
        return from_gguf(gguf.gguf_metadata(path)) if path.is_file() else None
    if path.is_dir():
        return _from_json(path / "config.json", "config.json")
    return _from_hub_cache(spec, revision)


def _from_json(path: Path, source: str) -> ModelSize | None:
    """None for a config that is not a mapping of sizes (a JSON list, "four" layers): the load
    refuses it in one sentence (`deffcore.inputs.model_config`)."""
    try:
        return from_config(json.loads(path.read_text()), source)
    except (OSError, ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None


def _from_hub_cache(spec: str, revision: str | None) -> ModelSize | None:
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(spec, "config.json", revision=revision)
    except Exception:  # not a repo name, or no huggingface_hub: unknown here
        return None
    return _from_json(Path(found), "hub config on disk") if isinstance(found, str) else None
