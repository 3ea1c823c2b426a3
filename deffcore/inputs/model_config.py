"""A model folder's config.json checked before any model is built (stage: inputs; SPEC section 1).

    config = folder_config(Path("my-model"))   # the checked mapping, or one sentence
    parameters(config)                         # its parameter count, from the config alone

transformers trusts a config.json: a JSON list, `"n_layer": "four"`, zero heads or a hidden size
of 2^30 end in its tracebacks (a TypeError, a ZeroDivisionError, a storage overflow), and
10^9 layers builds modules for hours. Here, before transformers reads the folder
(`deffcore.inputs.model_files.check_model_folder`, used for a local folder and for
`random:<folder>:<seed>` alike), each is one sentence naming the folder:

- the config is a JSON object; `model_type` a string, `architectures` a list of strings;
- every size field it has (`SIZE_FIELDS`: layers, width, heads, KV heads, MLP width, head
  width, vocabulary, positions), at the top and in a nested `*_config`, is a whole number in
  its range (None: the family's default); in the decoder's config (the top or `text_config`)
  the heads divide the width when no `head_dim` is given, and the KV heads divide the heads;
- its type is a decoder-only language model: an encoder or the decoder of an encoder-decoder
  model is refused with the reason the support table gives (`refusal_by_design`, the one source
  of `deffcore.lenses.support` and docs/support.md);
- its parameters (`parameters`: the `deffcore.inputs.model_size` formula over vocabulary, width,
  MLP width, heads and layers) fit the machine's memory in the forward dtype
  (`deffcore.inputs.devices.check_fits`), checked before a byte is allocated.

Only JSON is read; nothing is imported from the folder or built.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from deffcore.core.errors import UnknownModelError, UnsupportedArchitectureError
from deffcore.inputs.small_configs import BY_DESIGN, ENC_DEC_REASON, ENCODER_REASON

#: A config.json larger than this is not a config (they are a few kB).
MAX_CONFIG_BYTES = 16 * 2**20
#: Most blocks a config may ask for (the deepest published decoders have under 200).
MAX_LAYERS = 1_000
_LAYERS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers")
_WIDTH = ("hidden_size", "n_embd", "d_model")
_HEADS = ("num_attention_heads", "n_head", "n_heads")
_MLP = ("intermediate_size", "n_inner", "d_ff")
_POSITIONS = ("max_position_embeddings", "n_positions", "n_ctx")
#: Every size field a config may have, with its range (inclusive). A field may be absent or
#: null (the family's default); otherwise a whole number (not a bool, not 32.0) in range.
SIZE_FIELDS: dict[str, tuple[int, int]] = {
    **dict.fromkeys(_LAYERS, (1, MAX_LAYERS)),
    **dict.fromkeys(_WIDTH, (1, 2**20)),
    **dict.fromkeys(_HEADS, (1, 2**14)),
    "num_key_value_heads": (1, 2**14),
    **dict.fromkeys(_MLP, (1, 2**24)),
    "head_dim": (1, 2**16),
    "vocab_size": (1, 2**24),
    **dict.fromkeys(_POSITIONS, (1, 2**24)),
}
#: Fields that may also be a list with one whole number per block (Gemma-3n's MLP widths).
_PER_BLOCK = frozenset(_MLP)


def read_config_file(path: Path) -> Any:
    """A model folder's JSON file, read only when at most `MAX_CONFIG_BYTES`; UnknownModelError
    (one sentence naming the file) when too large, unreadable or not JSON."""
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            raise UnknownModelError(
                f"The model file {path} is {path.stat().st_size:,} bytes, too large for a "
                "config file; it is not read."
            )
        return json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as err:
        if isinstance(err, UnknownModelError):
            raise
        raise UnknownModelError(f"The model file {path} is not readable JSON ({err}).") from None


def folder_config(folder: Path) -> dict[str, Any] | None:
    """The checked config.json of a model folder (module docstring), None when it has none
    (transformers then says what is missing). Raises UnknownModelError or
    UnsupportedArchitectureError (one sentence naming the folder)."""
    path = Path(folder) / "config.json"
    if not path.is_file():
        return None
    config = read_config_file(path)
    check_config(config, f"the model folder {path.parent}")
    return config


def check_config(config: Any, where: str) -> None:
    """Refuse a config that is not a decoder-only language model of sane sizes (module
    docstring); `where` names what the config belongs to ("the model folder /x")."""
    if not isinstance(config, dict):
        raise UnknownModelError(
            f"The config.json of {where} is a JSON {_json_kind(config)}, not an object of "
            "settings, so it is not a model config."
        )
    kind = config.get("model_type")
    if kind is not None and not isinstance(kind, str):
        raise UnknownModelError(
            f"The config.json of {where} has a model_type that is not a string."
        )
    names = config.get("architectures")
    if names is not None and not (
        isinstance(names, list) and all(isinstance(n, str) for n in names)
    ):
        raise UnknownModelError(
            f"The config.json of {where} has architectures that are not a list of class names."
        )
    for label, cfg in _configs(config):
        # how heads split the width: a decoder's rule (a vision or audio tower may differ)
        text = label in ("", " (its text_config)")
        _check_sizes(cfg, f"The config.json of {where}{label}", relations=text)
    reason = refusal_by_design(kind or "", bool(config.get("is_encoder_decoder")))
    if reason is not None:
        raise UnsupportedArchitectureError(
            f"The config.json of {where} describes a {kind!r} model, which is refused by design: "
            f"{reason} "
            "(docs/support.md)."
        )


def refusal_by_design(model_type: str, encoder_decoder: bool = False) -> str | None:
    """Why `model_type` is refused by design (an encoder, an encoder-decoder's decoder, a
    permutation LM), None for a decoder-only type. One source for the load's refusal and the
    support table (`deffcore.lenses.support`): `BY_DESIGN` for the causal-LM types; a type
    transformers has only as a masked LM (DeBERTa, ALBERT) or a sequence-to-sequence model (T5),
    or a config saying `is_encoder_decoder`, for the rest."""
    if model_type in BY_DESIGN:
        return BY_DESIGN[model_type]
    if encoder_decoder:
        return ENC_DEC_REASON
    if not model_type:
        return None
    from transformers.models.auto import modeling_auto as auto

    if model_type in auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return None
    if model_type in auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES:
        return ENC_DEC_REASON
    if model_type in auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES:
        return ENCODER_REASON
    return None


def parameters(config: Mapping[str, Any]) -> int:
    """Parameters a checked config builds, from its sizes alone (the `model_size` formula:
    embeddings, attention projections and MLP per block; a nested `*_config` tower added), for
    the memory check before anything is allocated. Sizes a config leaves to its family's
    default count as the family's small defaults do (0 for an unknown vocabulary)."""
    from deffcore.inputs.model_size import from_config

    total = 0
    for _, cfg in _configs(config):
        layers, width = _first(cfg, _LAYERS), _first(cfg, _WIDTH)
        if layers is None or width is None:
            continue
        heads = _first(cfg, _HEADS) or 1
        mlp = _first(cfg, _MLP)
        mlp = max(mlp) if isinstance(mlp, list) and mlp else mlp
        size = from_config(
            {
                "model_type": cfg.get("model_type", config.get("model_type", "")),
                "num_hidden_layers": layers,
                "hidden_size": width,
                "num_attention_heads": heads,
                "num_key_value_heads": min(cfg.get("num_key_value_heads") or heads, heads),
                "head_dim": cfg.get("head_dim") or max(width // heads, 1),
                "intermediate_size": mlp or 4 * width,
                "vocab_size": cfg.get("vocab_size") or 1,
                "tie_word_embeddings": cfg.get("tie_word_embeddings", True) is not False,
            },
            "config.json",
        )
        total += size.params
    return total


def _configs(config: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The config and its nested sub-configs (`text_config`, `vision_config` ...), labelled."""
    yield "", config
    for key, sub in config.items():
        if isinstance(key, str) and key.endswith("_config") and isinstance(sub, dict):
            yield f" (its {key})", sub


def _first(cfg: Mapping[str, Any], names: tuple[str, ...]) -> Any:
    return next((cfg[n] for n in names if cfg.get(n) is not None), None)


def _whole(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _check_sizes(cfg: Mapping[str, Any], where: str, relations: bool = True) -> None:
    for name, (low, high) in SIZE_FIELDS.items():
        value = cfg.get(name)
        if value is None:
            continue
        ok = _whole(value, low, high)
        if name in _PER_BLOCK and isinstance(value, list):
            ok = 0 < len(value) <= MAX_LAYERS and all(_whole(v, low, high) for v in value)
        if not ok:
            raise UnknownModelError(
                f"{where} has {name} = {_short(value)}; it must be a whole number from {low:,} "
                f"to {high:,}."
            )
    if not relations:
        return
    width, heads = _first(cfg, _WIDTH), _first(cfg, _HEADS)
    no_head_dim = cfg.get("head_dim") is None
    if width is not None and heads is not None and no_head_dim and width % heads:
        raise UnknownModelError(
            f"{where} has a width of {width} that its {heads} attention heads do not divide "
            "(and no head_dim)."
        )
    kv = cfg.get("num_key_value_heads")
    if kv is not None and heads is not None and (kv > heads or heads % kv):
        raise UnknownModelError(
            f"{where} has {kv} key-value heads, which do not divide its {heads} attention heads."
        )


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if value is None:
        return "null"
    return "boolean" if isinstance(value, bool) else "number"
