"""Where deffcore keeps files on disk: the cache folder, and the data shipped in the package.

A leaf module (it imports only `deffcore.core.errors`, itself a leaf), so every stage can ask
for the cache folder without importing another.
"""

from __future__ import annotations

import os
from pathlib import Path

from deffcore.core.errors import DeffError

#: The package folder, `deffcore/`.
PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: The data shipped with the package: the paper's values, the precomputed runs.
DATA_DIR = PACKAGE_DIR / "data"
#: The default cache folder of a source checkout, `<repo>/cache` (see cache/README.md).
REPO_CACHE = PACKAGE_DIR.parent / "cache"


def default_cache_dir() -> Path:
    """`<repo>/cache` in a source checkout (the package sits beside the project's
    pyproject.toml); for an installed package (the wheel in site-packages, where no such file
    is) the user's cache folder, `$XDG_CACHE_HOME/deffcore` or `~/.cache/deffcore`, so an
    install never writes into site-packages."""
    if (REPO_CACHE.parent / "pyproject.toml").is_file():
        return REPO_CACHE
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "deffcore"


def cache_dir() -> Path:
    """`$DEFF_CACHE_DIR` if set, else `default_cache_dir()`; created on first use.

    Raises DeffError (one sentence) when the path is a file or cannot be created.
    """
    from_env = os.environ.get("DEFF_CACHE_DIR")
    path = Path(from_env or default_cache_dir()).expanduser()
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
