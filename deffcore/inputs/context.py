"""A model's context length from its config alone, and the check of `max_tokens` against it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from deffcore.core.errors import InvalidArgumentError
from deffcore.inputs.catalog import tiny_config_kwargs
from deffcore.inputs.gguf import gguf_metadata, packaged_metadata
from deffcore.inputs.model_files import check_model_folder
from deffcore.inputs.model_spec import Kind, ModelSpec
from deffcore.inputs.shapes import context_length as shape_context_length

#: Config fields that hold a model's maximum number of positions, most specific first.
_CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length")

_CONTEXT_MEMO: dict[tuple[str, str | None], int | None] = {}


def _context_from_config(config: dict[str, Any]) -> int | None:
    config = config.get("text_config") or config  # multimodal wrappers nest the text model
    for name in _CONTEXT_FIELDS:
        value = config.get(name)
        if isinstance(value, int) and value > 0:
            return value
    return None


def context_length(spec: str | ModelSpec, revision: str | None = None) -> int | None:
    """Most positions `spec` accepts (its config's `max_position_embeddings` or equivalent).

    Cheap: nothing but a config is read (tiny: the config kwargs; GGUF: the header's
    `<arch>.context_length`; folder: config.json; hub id: the config only if it is already on
    this machine). None when unknown. Memoised, except for local files and folders (which may
    change; a GGUF header is memoised on its size and mtime). Raises UnknownModelError for a
    packaged model that is not installed, a GGUF file that is corrupt or an unknown tiny name
    (as the load would).
    """
    spec = ModelSpec.parse(spec)  # an unknown tiny name is refused here, as the load would
    memo_key = (spec.text, revision)
    if memo_key in _CONTEXT_MEMO:
        return _CONTEXT_MEMO[memo_key]
    pinned = (Kind.RANDOM, Kind.PACKAGED, Kind.SHAPE)
    local = spec.kind not in pinned and spec.path.exists()
    if spec.kind is Kind.RANDOM:
        assert spec.base is not None
        result = context_length(spec.base, revision)
    elif spec.kind is Kind.TINY:
        result = _context_from_config(tiny_config_kwargs(spec.tiny_arch))
    elif spec.kind is Kind.SHAPE:
        result = shape_context_length(spec.text)
    elif spec.kind in (Kind.PACKAGED, Kind.GGUF):
        if spec.kind is Kind.PACKAGED:  # read in place: a header never assembles a file
            meta = packaged_metadata(spec.text)
        elif not spec.path.is_file():
            return None  # load_model names the missing file
        else:
            meta = gguf_metadata(spec.path)
        value = meta.get(f"{meta.get('general.architecture')}.context_length")
        result = int(value) if isinstance(value, int) and value > 0 else None
    elif spec.path.is_dir():
        config_file = spec.path / "config.json"
        check_model_folder(config_file.parent)  # refused before any model loads
        try:
            result = _context_from_config(json.loads(config_file.read_text()))
        except (OSError, ValueError, AttributeError):
            result = None
    else:
        result = _hub_context_length(spec.text, revision)
    if not local:  # a local file or folder may change; packaged ones are pinned (and slow to find)
        _CONTEXT_MEMO[memo_key] = result
    return result


def _hub_context_length(spec: str, revision: str | None) -> int | None:
    """From a hub config already downloaded to this machine; None if it is not (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(spec, "config.json", revision=revision)
    except Exception:  # an id that is not a valid repo name: load_model reports it
        return None
    if not isinstance(found, str):
        return None
    try:
        return _context_from_config(json.loads(Path(found).read_text()))
    except (OSError, ValueError, AttributeError):
        return None


def check_max_tokens(spec: str | ModelSpec, max_tokens: int, revision: str | None = None) -> None:
    """Refuse `max_tokens` beyond the model's context (positions past it are not trained, and
    learned position tables, e.g. GPT-2's, have no row for them)."""
    limit = context_length(spec, revision)
    if limit is not None and max_tokens > limit:
        raise InvalidArgumentError(
            f"max_tokens={max_tokens} is beyond the context of {str(spec)!r}, which is {limit} "
            f"tokens; ask for at most {limit}."
        )
