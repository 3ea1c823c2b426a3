"""Where deffcore keeps files on disk: the cache folder.

A leaf module (it imports only `deffcore.errors`, itself a leaf), so `models`, `texts`, `cache`
and the labs can all ask for the cache folder without importing each other.
"""

from __future__ import annotations

import os
from pathlib import Path

from deffcore.errors import DeffError

#: The default cache folder, `<repo>/cache` (see cache/README.md for its layout).
REPO_CACHE = Path(__file__).resolve().parent.parent / "cache"


def cache_dir() -> Path:
    """`$DEFF_CACHE_DIR` if set, else `<repo>/cache`; created on first use.

    Raises DeffError (one sentence) when the path is a file or cannot be created.
    """
    from_env = os.environ.get("DEFF_CACHE_DIR")
    path = Path(from_env or REPO_CACHE).expanduser()
    where = "DEFF_CACHE_DIR" if from_env else "The cache folder"
    if path.exists() and not path.is_dir():
        raise DeffError(
            f"{where} points at {path}, which is a file, not a folder; set DEFF_CACHE_DIR to a "
            "folder (it is created if missing)."
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DeffError(
            f"{where} {path} cannot be created ({err.strerror or err}); set DEFF_CACHE_DIR to a "
            "writable folder."
        ) from err
    return path
