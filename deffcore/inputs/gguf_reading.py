"""One read of a GGUF file per load, and its de-quantising timed (stage: inputs).

transformers reads a GGUF file's whole header three times for one `load_model` (the config,
the tokenizer and the model each call `load_gguf_checkpoint`, which parses every field,
the 49,152-entry vocabulary included, in Python: ~7 s each for SmolLM2-135M on the 2-core
machine), and maps its tensor names by building gguf's `TensorNameMap` once per submodule
(397 times for SmolLM2: ~11 s). Both are pure functions of their arguments, so inside
`reads_once()`:

- `gguf.GGUFReader(path)` returns one reader per file (keyed by path, size and mtime; a
  reader memory-maps the file and is only read from), and
- `gguf.get_tensor_name_map(arch, n_blocks)` one map per (arch, n_blocks) (only looked up),

which gives bit-identical weights and tokenizers (tests/test_gguf_reading.py) in about half
the time. transformers' tensor pass (`load_gguf_checkpoint(..., return_tensors=True)`) is
where a GGUF is de-quantised; inside `reads_once()` it marks the "de-quantising" part of the
load and then "building" (`deffcore.inputs.load_stages`).

The patches are module attributes of `gguf` and transformers, so they are process-wide while
they last: one lock serialises the loads that use them (two loads at once would only share two
cores anyway), and everything is restored when the outermost `with` ends, also on an error.
Nothing is patched when `gguf` or transformers' GGUF support is missing.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from deffcore.inputs.load_stages import mark

JOBS_LOCK = threading.RLock()
_DEPTH = 0


def _memo_reader(original: Any, readers: dict[tuple, Any]) -> Any:
    def shared_reader(path: Any, mode: str = "r") -> Any:
        try:
            st = Path(path).stat()
            key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns, mode)
        except (OSError, TypeError):  # not a path we can key: read it as transformers would
            return original(path, mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    return shared_reader


def _memo_name_map(original: Any, maps: dict[tuple, Any]) -> Any:
    def shared_name_map(arch: Any, n_blocks: int) -> Any:
        key = (arch, n_blocks)
        if key not in maps:
            maps[key] = original(arch, n_blocks)
        return maps[key]

    return shared_name_map


def _marked_checkpoint(original: Any) -> Any:
    def load_gguf_checkpoint(*args: Any, **kwargs: Any) -> Any:
        tensors = kwargs.get("return_tensors", args[1] if len(args) > 1 else False)
        if tensors:
            mark("de-quantising")
        result = original(*args, **kwargs)
        if tensors:
            mark("building")
        return result

    return load_gguf_checkpoint


def _targets() -> list[tuple[Any, str, Any]]:
    """(module, attribute, wrapper factory) of every patch this environment allows."""
    try:
        import gguf
        import transformers.modeling_gguf_pytorch_utils as hf_gguf
    except ImportError:
        return []
    readers: dict[tuple, Any] = {}
    maps: dict[tuple, Any] = {}
    found = []
    if hasattr(gguf, "GGUFReader"):
        found.append((gguf, "GGUFReader", lambda f: _memo_reader(f, readers)))
    if hasattr(gguf, "get_tensor_name_map"):
        found.append((gguf, "get_tensor_name_map", lambda f: _memo_name_map(f, maps)))
    if hasattr(hf_gguf, "load_gguf_checkpoint"):
        found.append((hf_gguf, "load_gguf_checkpoint", _marked_checkpoint))
    return found


@contextlib.contextmanager
def reads_once() -> Iterator[None]:
    """Inside the `with`, each GGUF file is parsed once and its tensor names mapped once per
    architecture (module docstring); nested uses share the outermost one's readers."""
    global _DEPTH
    with JOBS_LOCK:
        if _DEPTH:
            _DEPTH += 1
            try:
                yield
            finally:
                _DEPTH -= 1
            return
        saved = []
        try:
            for module, name, wrap in _targets():
                original = getattr(module, name)
                saved.append((module, name, original))
                setattr(module, name, wrap(original))
            _DEPTH = 1
            yield
        finally:
            _DEPTH = 0
            for module, name, original in reversed(saved):
                setattr(module, name, original)
