"""Cheap checks of user-given arguments, run before any model loads.

Each check raises a `DeffError` subclass whose message is one sentence naming the argument, the
value and what would work, so the CLI prints one line and exits 2 and the app shows the same
sentence. Model-specific checks live beside what they check: the device in
`models.check_device`, the context length in `models.context_length`, a dataset in
`texts.check_dataset`.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable, Mapping
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


def check_output_file(
    path: str | Path,
    name: str,
    *,
    inputs: Mapping[str, object] | None = None,
    replaceable: Callable[[Path], str | None] | None = None,
) -> Path:
    """Refuse an output file that cannot be written, before hours of work are spent on it.

    An output never overwrites an input: `inputs` maps what each input is ("--dataset") to
    its spec (a path, possibly with `:column`, or any other spec); a path naming the same file
    (through a link or a hard link too) is refused. An existing file is replaced only when
    `replaceable(path)` returns None (e.g. a snapshot of the same run); otherwise its sentence
    says why not. A link is never written through. Creates the missing parent folders
    (writing would create them anyway) and writes and removes one temporary file there:
    permissions alone cannot tell (root ignores them, /proc refuses everything).
    """
    path = Path(path).expanduser()
    if path.is_symlink():
        raise InvalidArgumentError(
            f"{name} {path} is a symbolic link; nothing is written through one: give the file "
            "itself, or another name."
        )
    if path.is_dir():
        raise InvalidArgumentError(f"{name} {path} is a folder; give a file name.")
    for what, spec in (inputs or {}).items():
        source = local_input(spec)
        if source is not None and _same_file(path, source):
            raise InvalidArgumentError(
                f"{name} {path} is the {what} file; an output never overwrites an input, so "
                "nothing was run: give another file name."
            )
    if path.exists():
        why = replaceable(path) if replaceable is not None else "it is not an output of this"
        if why is not None:
            raise InvalidArgumentError(
                f"{name} {path} already exists and {why}; nothing was run or replaced: give "
                "another file name, or delete that file first."
            )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".deff-write-test-"):
            pass
    except OSError as err:
        raise InvalidArgumentError(
            f"{name} {path} cannot be written ({_reason(err, path.parent)})."
        ) from err
    return path


def local_input(spec: object) -> Path | None:
    """The local file or folder an input spec names (`path`, `path:column`, `hf:path`; a random
    model's caller passes its base, `ModelSpec.trained`), or None for anything else (a packaged
    or hub name, a file that is not there)."""
    text = str(spec or "").removeprefix("hf:")
    for candidate in (text, text.rpartition(":")[0]):
        if candidate and Path(candidate).expanduser().exists():
            return Path(candidate).expanduser()
    return None


def _same_file(output: Path, source: Path) -> bool:
    """Whether writing `output` would replace `source` (the same file through any link)."""
    try:
        if output.exists() and os.path.samefile(output, source):
            return True
    except OSError:
        return False
    return output.resolve() == source.resolve()


def write_output(path: str | Path, data: bytes, name: str, *, then: str = "") -> Path:
    """Write an output file whole or not at all (`cache_files.replace_file`: a temp file
    renamed into place, so a full disk or a crash leaves the old file, never half a new one);
    an OSError is one sentence (InvalidArgumentError) naming `name`, ending with `then`."""
    from deffcore.core.files import replace_file

    path = Path(path).expanduser()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(path, data)
    except OSError as err:
        advice = {
            errno.ENOSPC: "the disk is full",
            errno.EDQUOT: "the disk quota is exceeded",
            errno.EROFS: "the disk is read-only",
        }.get(err.errno or -1) or _reason(err, path.parent)
        raise InvalidArgumentError(
            f"{name} {path} could not be written ({advice}); nothing half-written was left "
            f"and any file there is unchanged{then}."
        ) from err
    return path


#: Longest field of a user's CSV table (a model, task or family name; a number).
MAX_CSV_FIELD = 1000


def csv_rows(text: str, shown: str, max_field: int = MAX_CSV_FIELD) -> list[list[str]]:
    """The rows of a user's CSV text, each field at most `max_field` characters; a row the csv
    module cannot read (a field beyond its own limit, a stray quote) or a field too long is one
    sentence naming `shown` and the line (InvalidArgumentError), never a csv traceback."""
    import csv
    import io

    reader = csv.reader(io.StringIO(text))
    rows = []
    try:
        for row in reader:
            longest = max((len(cell) for cell in row), default=0)
            if longest > max_field:
                raise InvalidArgumentError(
                    f"{shown} line {reader.line_num} has a field of {longest:,} characters; a "
                    f"field of this table holds at most {max_field:,}."
                )
            rows.append(row)
    except csv.Error as err:
        if "field limit" in str(err):  # beyond the csv module's own limit (131,072)
            raise InvalidArgumentError(
                f"{shown} line {reader.line_num} has a field of more than {max_field:,} "
                "characters, more than a field of this table holds."
            ) from None
        raise InvalidArgumentError(
            f"{shown} line {reader.line_num} is not a readable CSV row ({err})."
        ) from None
    return rows


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
