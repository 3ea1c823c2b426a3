"""Cheap checks of user-given arguments, run before any model loads (issue 8, item 3).

Each check raises a `DeffError` subclass whose message is one sentence naming the argument, the
value and what would work, so the CLI prints one line and exits 2 and the app shows the same
sentence. Model-specific checks live beside what they check: the device in
`models.check_device`, the context length in `models.context_length`, a dataset in
`texts.check_dataset`.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from deffcore.core.errors import DeffError, InvalidArgumentError


def check_choice(value: str, allowed: tuple[str, ...], what: str) -> None:
    """DeffError naming the choices unless `value` is one of `allowed` (`what`: its name)."""
    if value not in allowed:
        raise DeffError(f"Unknown {what} {value!r}; choose one of {', '.join(allowed)}.")


def check_int(value: object, name: str, minimum: int) -> int:
    """`value` as an int >= `minimum`; `name` is how the user wrote it (e.g. '--batch-size')."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise InvalidArgumentError(f"{name} must be {what}, got {value!r}.")
    return value


def check_seed(value: object, name: str = "seed") -> int:
    """A sampling seed: numpy's generators take only non-negative integers."""
    return check_int(value, name, 0)


def check_output_file(path: str | Path, name: str) -> Path:
    """Refuse an output file that cannot be written, before hours of work are spent on it.

    Creates the missing parent folders (writing would create them anyway) and writes and
    removes one temporary file there: permissions alone cannot tell (root ignores them, /proc
    refuses everything).
    """
    path = Path(path).expanduser()
    if path.is_dir():
        raise InvalidArgumentError(f"{name} {path} is a folder; give a file name.")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".deff-write-test-"):
            pass
    except OSError as err:
        raise InvalidArgumentError(
            f"{name} {path} cannot be written ({_reason(err, path.parent)})."
        ) from err
    return path


def check_cache_dir() -> Path:
    """The cache folder (`$DEFF_CACHE_DIR` or the repository's cache/), created and writable.

    `paths.cache_dir` refuses a file or a folder it cannot create; this also writes there.
    """
    from deffcore.core.paths import cache_dir

    path = cache_dir()
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".deff-write-test-"):
            pass
    except OSError as err:
        raise InvalidArgumentError(
            f"The cache folder {path} cannot be written ({err.strerror or err}); set "
            "DEFF_CACHE_DIR to a writable folder."
        ) from err
    return path


def _reason(err: OSError, folder: Path) -> str:
    """A short reason; a path whose parent is a file gets the plain explanation."""
    for parent in (folder, *folder.parents):
        if parent.exists():
            if not parent.is_dir():
                return f"{parent} is a file, not a folder"
            break
    return err.strerror or type(err).__name__


def check_writable_dir(path: str | Path, name: str) -> Path:
    """A folder that exists or can be created, and can be written (checked by writing)."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise InvalidArgumentError(f"{name} {path} is a file, not a folder.")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".deff-write-test-"):
            pass
    except OSError as err:
        raise InvalidArgumentError(
            f"{name} {path} cannot be written ({_reason(err, path)})."
        ) from err
    return path
