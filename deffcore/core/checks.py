"""Cheap checks of user-given arguments, run before any model loads.

Each check raises a `DeffError` subclass whose message is one sentence naming the argument, the
value and what would work, so the CLI prints one line and exits 2 and the app shows the same
sentence. Model-specific checks live beside what they check: the device in
`models.check_device`, the context length in `models.context_length`, a dataset in
`texts.check_dataset`.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from deffcore.core.errors import DeffError, InvalidArgumentError
from deffcore.core.files import reason

if TYPE_CHECKING:
    import numpy as np


def check_choice(value: str, allowed: tuple[str, ...], what: str) -> None:
    """DeffError naming the choices unless `value` is one of `allowed` (`what`: its name)."""
    if value not in allowed:
        raise DeffError(f"Unknown {what} {value!r}; choose one of {', '.join(allowed)}.")


def as_int(value: object) -> object:
    """A numpy integer as the int it is (what `check_int` and `check_seed` take); anything
    else unchanged, for the check that follows to judge."""
    import numpy as np

    return int(value) if isinstance(value, np.integer) else value


def real_array(value: object) -> np.ndarray | None:
    """`value` as a float64 numpy array, or None when it does not hold real numbers (complex,
    text, ragged lists, objects): the caller says its own sentence, never numpy's error."""
    import numpy as np

    try:
        return None if np.iscomplexobj(value) else np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return None


def is_real(value: object) -> bool:
    """A real number, Python's or numpy's (NaN and inf too: test them apart), not a bool,
    text or an array."""
    import numpy as np

    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


def check_int(value: object, name: str, minimum: int) -> int:
    """`value` as an int >= `minimum`; `name` is how the user wrote it (e.g. '--batch-size')."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        what = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        raise InvalidArgumentError(f"{name} must be {what}, got {value!r}.")
    return value


#: The largest memory size any `DEFF_*_GIB` variable may give: 1 PiB in GiB (beyond any
#: machine, far inside an int64 of bytes; `runs.planner.MAX_BYTES` is the same bound).
MAX_GIB = 2**20


def env_gib(name: str, *, zero: bool = False) -> int | None:
    """Bytes the environment variable `name` gives in GiB (e.g. DEFF_HOST_MEMORY_GIB=40), or
    None when unset or blank. Every `DEFF_*` number is read here: a finite number above 0
    (0 too when `zero`) and at most `MAX_GIB`, else one sentence naming the variable
    (InvalidArgumentError) -- never a ValueError or OverflowError from `nan`, `inf`, `1e400`."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    low = value >= 0 if zero else value > 0
    if not (math.isfinite(value) and low and value <= MAX_GIB):
        least = "from 0 to" if zero else "above 0 and at most"
        raise InvalidArgumentError(
            f"{name} must be a number of GiB {least} {MAX_GIB:,} (1 PiB), got {text!r}; set it "
            "to e.g. 16, or unset it."
        )
    return int(value * 1024**3)


#: The most bootstrap replicates anything draws: a 95% interval settles within a few thousand
#: (SPEC section 8), and B beyond this is an error of the hand, not a wish.
MAX_REPLICATES = 100_000
#: Bytes one replicate holds per passage: its drawn index (int64) and its multiplicity (float64).
DRAW_BYTES = 16


def check_replicates(
    B: object,
    name: str,
    *,
    minimum: int = 2,
    n: int | None = None,
    per_replicate: int = 0,
    memory: int | None = None,
) -> int:
    """`B` bootstrap replicates, checked before anything is drawn: an integer from `minimum`
    to `MAX_REPLICATES` and, when the passages `n` and the machine's `memory` (bytes) are
    known, B x (`DRAW_BYTES` n + `per_replicate`) bytes within that memory. One sentence
    (InvalidArgumentError) naming `name` and the largest B that would do."""
    B = check_int(B, name, minimum)
    if B > MAX_REPLICATES:
        raise InvalidArgumentError(
            f"{name} must be at most {MAX_REPLICATES:,} bootstrap replicates (a 95% interval "
            f"settles within a few thousand), got {B:,}."
        )
    if n is not None and memory is not None and 0 < n <= MAX_PASSAGES:  # else n's own sentence
        each = DRAW_BYTES * n + per_replicate
        if B * each > memory:
            raise InvalidArgumentError(
                f"{name} = {B:,} replicates of {n:,} passages need {B * each / 2**30:,.1f} GiB "
                f"of memory, more than this machine can give ({memory / 2**30:,.1f} GiB); use "
                f"{name} <= {max(memory // each, minimum - 1):,}."
            )
    return B


#: The most passages a run may ask for: more than any dataset deffcore reads whole gives, and
#: more than one model's pooled states (n x (L+1) x d floats per pooling) fit in a machine.
MAX_PASSAGES = 10_000_000


def check_passages(n: object, name: str = "n", minimum: int = 1) -> int:
    """`n` passages: an integer from `minimum` to `MAX_PASSAGES`, else one sentence
    (InvalidArgumentError); the dataset's own supply is checked where it is read and the
    memory of its states where they are allocated (`check_memory`)."""
    n = check_int(n, name, minimum)
    if n > MAX_PASSAGES:
        raise InvalidArgumentError(
            f"{name} must be at most {MAX_PASSAGES:,} passages (more than a dataset file gives "
            f"and their states fit in memory), got {n:,}; ask for fewer passages."
        )
    return n


def check_memory(need: int, memory: int | None, what: str, advice: str) -> None:
    """OutOfMemoryError (one sentence) before allocating `need` bytes for `what` when the
    machine cannot give them (`memory`: `inputs.model.host_memory_bytes()`, None: unknown)."""
    from deffcore.core.errors import OutOfMemoryError

    if memory is not None and need > memory:
        raise OutOfMemoryError(
            f"{what} need {need / 2**30:,.1f} GiB of memory, more than this machine can give "
            f"({memory / 2**30:,.1f} GiB); {advice}."
        )


#: The largest seed: numpy's generators take only non-negative integers, torch's `manual_seed`
#: at most a 64-bit one, and a run snapshot stores at most this (`views.run_schema`).
MAX_SEED = 2**63 - 1


def check_seed(value: object, name: str = "seed") -> int:
    """A seed (of the passage sampling, a random-weight model, a bootstrap): an integer from 0
    to `MAX_SEED`, else one sentence (InvalidArgumentError)."""
    value = check_int(value, name, 0)
    if value > MAX_SEED:
        raise InvalidArgumentError(
            f"{name} must be at most {MAX_SEED:,} (2^63 - 1), got {value:,}."
        )
    return value


def check_seeds(values: object, name: str = "random_seeds") -> list[int]:
    """Seeds of several runs (random-weight models, trainings), checked before anything runs:
    a list or tuple (or range), each `check_seed` (numpy's integers as the ints they are),
    none twice; the same seed gives the same result, so a repeat would count one run twice
    (and narrow a band across seeds, SPEC section 8). A bare number, text ("12" is not seeds 1
    and 2), a mapping or a repeat is one sentence (InvalidArgumentError) naming `name`."""
    if not isinstance(values, list | tuple | range):
        raise InvalidArgumentError(
            f"{name} must be a list or tuple of seeds, e.g. (1, 2, 3); got {values!r}."
        )
    seeds: list[int] = []
    for value in values:
        seed = check_seed(as_int(value), f"Each of {name}")
        if seed in seeds:
            raise InvalidArgumentError(
                f"{name} repeats the seed {seed}; the same seed gives the same result, so a "
                "repeat would count it twice: give each seed once."
            )
        seeds.append(seed)
    return seeds


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
    from deffcore.core.files import cache_dir

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
            f"{name} {path} cannot be written ({reason(err, path)})."
        ) from err
    return path
