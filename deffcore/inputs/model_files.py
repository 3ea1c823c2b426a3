"""A local model folder's files, checked before transformers reads them: no code, sane headers.

Two ways a folder could hurt the machine that loads it, both refused here with one sentence:

- **Code.** A `config.json` (or `tokenizer_config.json`, `processor_config.json`) with an
  `auto_map` names Python files of the folder that transformers would import and run (it asks
  "Do you wish to run the custom code?" on stdin, or runs it with `trust_remote_code=True`).
  deffcore never runs a model's own code: such a folder is refused before transformers is
  asked, and every `from_pretrained`/`from_config` call passes `trust_remote_code=False`
  (`deffcore.inputs.loading`) so nothing can prompt or run even where this check does not look.
- **Headers that lie.** A `.safetensors` file starts with an 8-byte little-endian header size
  and a JSON header listing each tensor's dtype, shape and byte range. A header claiming 2^62
  bytes, or a 2^20 x 2^20 tensor, makes the safetensors library fail with its own traceback or
  try to allocate it. Here the header size is bounded by the file size and `MAX_HEADER_BYTES`,
  and every tensor's bytes (dtype bits x elements, in Python integers) must equal its byte
  range, which must lie inside the file.

Only JSON is read (at most `MAX_CONFIG_BYTES` per config file); nothing is imported or run.
The config's own types, sizes and model type are checked by `deffcore.inputs.model_config`;
weights that do not fill the model their config builds are refused after transformers reads
them (`check_loaded_weights`).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from deffcore.core.errors import UnknownModelError
from deffcore.inputs.model_config import folder_config, read_config_file

#: The safetensors library refuses larger headers too (100 MB).
MAX_HEADER_BYTES = 100_000_000
#: Config files whose `auto_map` would make transformers import the folder's Python files.
CODE_CONFIGS = ("config.json", "tokenizer_config.json", "processor_config.json",
                "preprocessor_config.json", "generation_config.json")  # fmt: skip
#: Bits per element of every safetensors dtype (safetensors 0.8).
SAFETENSORS_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E5M2FNUZ": 8,
    "F8_E4M3FNUZ": 8, "F8_E8M0": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16,
    "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64, "F64": 64, "C64": 64,
    "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}  # fmt: skip


class _Bad(Exception):
    """Internal: why a safetensors header is invalid (becomes part of one sentence)."""


def check_model_folder(folder: Path) -> None:
    """Refuse a model folder that asks to run its own code, whose config.json is not a
    decoder-only language model of sane sizes (`deffcore.inputs.model_config.folder_config`), or
    that holds an invalid safetensors file.

    Raises UnknownModelError or UnsupportedArchitectureError (one sentence naming the file and
    why)."""
    folder = Path(folder)
    for name in CODE_CONFIGS:
        _refuse_code(folder / name)
    folder_config(folder)
    for path in sorted(folder.glob("*.safetensors")):
        check_safetensors(path)


def _refuse_code(path: Path) -> None:
    if not path.is_file():
        return
    config = read_config_file(path)
    found = _auto_map(config)
    if found:
        raise UnknownModelError(
            f"The model folder {path.parent} asks to run its own Python code ({path.name} has "
            f"an 'auto_map' naming {found}); deffcore never runs code from a model folder "
            "(trust_remote_code=False), so it cannot be loaded."
        )


def _auto_map(config: Any) -> str | None:
    """What an `auto_map` (at the top or in a nested text/vision config) points at, if any."""
    if not isinstance(config, dict):
        return None
    value = config.get("auto_map")
    if value:
        targets = value.values() if isinstance(value, dict) else [value]
        names = sorted({str(t if not isinstance(t, list) else t[0]).split(".")[0] for t in targets})
        return ", ".join(f"{n}.py" for n in names if n and n != "None") or "custom code"
    for sub in config.values():
        if isinstance(sub, dict) and (found := _auto_map(sub)):
            return found
    return None


def check_safetensors(path: Path) -> None:
    """Refuse a `.safetensors` file whose header is out of bounds or disagrees with its size.

    Reads the 8-byte header size and the JSON header only (never the tensors)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            _check_header(f, size)
    except _Bad as why:
        raise UnknownModelError(
            f"The weights file {path} is not a valid safetensors file ({why}); it was not loaded."
        ) from None
    except OSError as err:
        raise UnknownModelError(
            f"The weights file {path} cannot be read ({err.strerror or err})."
        ) from err


def _check_header(f: Any, size: int) -> None:
    if size < 8:
        raise _Bad(f"{size} bytes, shorter than its 8-byte header size")
    (n,) = struct.unpack("<Q", f.read(8))
    if n > size - 8 or n > MAX_HEADER_BYTES:
        raise _Bad(f"its header claims {n:,} bytes but the file has {size:,}")
    try:
        header = json.loads(f.read(n))
    except (ValueError, MemoryError) as err:
        raise _Bad("its header is not JSON") from err
    if not isinstance(header, dict):
        raise _Bad("its header is not a JSON object")
    data = size - 8 - n
    for name, info in header.items():
        if name == "__metadata__":
            continue
        _check_tensor(str(name)[:80], info, data)


def _check_tensor(name: str, info: Any, data: int) -> None:
    if not isinstance(info, dict):
        raise _Bad(f"tensor {name!r} has no description")
    bits = SAFETENSORS_BITS.get(info.get("dtype"))  # type: ignore[arg-type]
    shape, offsets = info.get("shape"), info.get("data_offsets")
    if bits is None:
        raise _Bad(f"tensor {name!r} has unknown dtype {str(info.get('dtype'))[:20]!r}")
    if not isinstance(shape, list) or not all(_count(d) for d in shape):
        raise _Bad(f"tensor {name!r} has no valid shape")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_count, offsets))):
        raise _Bad(f"tensor {name!r} has no valid byte range")
    begin, end = offsets
    elements = 1
    for d in shape:
        elements *= d  # Python integers: a 2^20 x 2^20 claim cannot overflow here
    if not begin <= end <= data:
        raise _Bad(f"tensor {name!r} lies outside the file's {data:,} data bytes")
    if elements * bits != 8 * (end - begin):
        raise _Bad(
            f"tensor {name!r} claims shape {shape[:8]} ({elements:,} elements) but holds "
            f"{end - begin:,} bytes"
        )


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


#: Share of a model's parameters that may be missing from its weights files (and so newly
#: initialised by transformers) before the weights are refused as not the model's.
MAX_NEW_SHARE = 0.5


def check_loaded_weights(model: Any, info: Mapping[str, Any], where: str) -> None:
    """Refuse weights that do not fill the model their config builds (SPEC section 1: the
    measured states are a trained model's): transformers' `output_loading_info` lists the
    parameters missing from the weights files, which it initialised afresh and only reports on
    stderr (a llama config.json over GPT-2 weights builds a llama of random weights). Refused
    when a block's parameter or the input embeddings (h_0 itself) are missing, or more than
    `MAX_NEW_SHARE` of all parameters (an untied head, never run by extraction, may be); `where`
    starts the sentence ("The model folder /x"). Raises UnknownModelError."""
    params = dict(model.named_parameters(remove_duplicate=False))
    missing = sorted(k for k in info.get("missing_keys") or () if k in params)
    if not missing:
        return
    total = sum(p.numel() for p in model.parameters()) or 1
    fresh = {id(params[k]): params[k] for k in missing}  # a tied tensor counted once
    share = sum(p.numel() for p in fresh.values()) / total
    embed = getattr(model, "get_input_embeddings", lambda: None)()
    embed_ids = {id(p) for p in embed.parameters()} if embed is not None else set()
    # a block's parameter (a numbered module on its path), or the embeddings (h_0 itself)
    vital = [
        k
        for k in missing
        if id(params[k]) in embed_ids or any(part.isdigit() for part in k.split("."))
    ]
    if not vital and share <= MAX_NEW_SHARE:
        return
    kind = getattr(getattr(model, "config", None), "model_type", None)
    whose = f"the {kind!r} model's" if kind else "the model's"
    example = (vital or missing)[0]
    raise UnknownModelError(
        f"{where} holds weights that do not match its config.json: {len(missing):,} of "
        f"{whose} parameter tensors ({share:.0%} of its parameters, e.g. {example}) "
        "are not in its weights files and would be newly initialised, so it is refused rather "
        "than measured as if trained."
    )
