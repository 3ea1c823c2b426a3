"""Stored lab results: one JSON file per result, keyed by the plain values that determine it.

    cache_dir()/labs/<lab>/<key>.json    {"format": 1, "lab", "key", "identity": {...},
                                          "created", "result": {...}}

`key` = the first 20 hex digits of a sha256 over `identity` (sorted JSON): every argument that
changes the result (model and its weights id, dataset and its content id, sample sizes, seeds,
options) and `CODE_VERSION`. Used by the pruning check (`labs/pruning`, read back by the
correlation lab), the Gromov–Wasserstein lens (`labs/gw`) and the short-pretraining probes
(`labs/pretrain`).

Nothing read is trusted: a file that is not valid JSON, of another format, whose key or
identity does not match, is treated as absent. Writes are atomic (temp file + os.replace in
the same folder); the folders are created as real folders and a link in their place is refused
(nothing is ever written through a link). This module never deletes anything.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

from deffcore.core.constants import CODE_VERSION
from deffcore.core.errors import DeffError
from deffcore.core.files import atomic_write, cache_dir
from deffcore.core.json_values import json_safe

FORMAT = 1
LABS_FOLDER = "labs"
_LABS = ("pruning", "gw", "pretrain")


def result_key(identity: dict[str, Any]) -> str:
    """sha256 (20 hex digits) of the identity with the code version."""
    blob = json.dumps({**identity, "code_version": CODE_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def _real_folder(path: Path) -> Path:
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise DeffError(f"{path} is a link or a file, not a folder; lab results are not written.")
    path.mkdir(exist_ok=True)
    return path


def lab_folder(lab: str, *, create: bool = False) -> Path:
    """`cache_dir()/labs/<lab>` (created, as real folders, when `create`)."""
    if lab not in _LABS:
        raise DeffError(f"Unknown lab store {lab!r}; one of {', '.join(_LABS)}.")
    root = cache_dir() / LABS_FOLDER
    if create:
        return _real_folder(_real_folder(root) / lab)
    return root / lab


def _parse(path: Path, lab: str) -> dict[str, Any] | None:
    if path.is_symlink() or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("lab") != lab:
        return None
    identity, result = data.get("identity"), data.get("result")
    if not isinstance(identity, dict) or not isinstance(result, dict):
        return None
    if data.get("key") != result_key(identity) or path.stem != data["key"]:
        return None
    return data


def read_result(lab: str, identity: dict[str, Any]) -> dict[str, Any] | None:
    """The stored result of `identity`, or None."""
    key = result_key(identity)
    data = _parse(lab_folder(lab) / f"{key}.json", lab)
    if data is None or data["identity"] != json.loads(json.dumps(identity, default=str)):
        return None
    return data["result"]


def write_result(lab: str, identity: dict[str, Any], result: dict[str, Any]) -> Path:
    """Store `result` (plain JSON values; NaN/inf become null) under `identity`'s key."""
    folder = lab_folder(lab, create=True)
    key = result_key(identity)
    data = {
        "format": FORMAT,
        "lab": lab,
        "key": key,
        "identity": identity,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "result": result,
    }
    path = folder / f"{key}.json"
    blob = json.dumps(json_safe(data), default=str, allow_nan=False)
    atomic_write(path, blob.encode())
    return path


def list_results(lab: str) -> list[dict[str, Any]]:
    """Every readable stored result of `lab` (whole records: identity, created, result),
    newest first; unreadable files are skipped."""
    folder = lab_folder(lab)
    if folder.is_symlink() or not folder.is_dir():
        return []
    found = [_parse(p, lab) for p in sorted(folder.glob("*.json"))]
    return sorted(
        (d for d in found if d is not None), key=lambda d: str(d.get("created")), reverse=True
    )
