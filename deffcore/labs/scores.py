"""A user's per-model scores (benchmark results) for the correlation lab: read and validated.

The file is a CSV with a header row and the columns `model`, `task`, `score` (any order, names
case-insensitive) and optionally `family` (else the family is guessed from the model's name).
One row per (model, task); for example

    model,task,score
    Llama-3.1-8B,MMLU,66.7
    smollm2-135m,MMLU,30.2

Everything is checked before anything else happens, and each problem is one sentence naming
the line: a missing column, an unknown column, an empty model or task, a score that is not a
finite number, a repeated (model, task), no rows at all. Files larger than MAX_BYTES are
refused (a scores table is small; a mistaken path to a dataset is not).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from deffcore.core.checks import csv_rows
from deffcore.core.errors import InvalidArgumentError

REQUIRED = ("model", "task", "score")
OPTIONAL = ("family",)
MAX_BYTES = 5 * 2**20


@dataclass
class ScoreTable:
    """scores[task][model] = score; families[model] when the file names them."""

    path: str
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    families: dict[str, str] = field(default_factory=dict)

    @property
    def models(self) -> list[str]:
        return sorted({m for by_model in self.scores.values() for m in by_model})

    @property
    def tasks(self) -> list[str]:
        return list(self.scores)


def _read_text(path: Path) -> str:
    if not path.exists():
        raise InvalidArgumentError(f"The scores file {path} does not exist.")
    if not path.is_file():
        raise InvalidArgumentError(f"The scores file {path} is not a file.")
    size = path.stat().st_size
    if size > MAX_BYTES:
        raise InvalidArgumentError(
            f"The scores file {path} is {size / 2**20:.1f} MB; a scores table (model, task, "
            f"score) is expected to be under {MAX_BYTES // 2**20} MB."
        )
    try:
        return path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InvalidArgumentError(f"The scores file {path} is not UTF-8 text.") from err
    except OSError as err:
        raise InvalidArgumentError(
            f"The scores file {path} cannot be read ({err.strerror or err})."
        ) from err


def check_upload(
    name: str, data: bytes, what: str = "scores file", max_bytes: int = MAX_BYTES
) -> None:
    """An uploaded table (scores, a sweep result) before it is stored: not empty, at most
    `max_bytes`, UTF-8 text without NUL bytes (one sentence naming the user's file `name`)."""
    if not data or not data.strip():
        raise InvalidArgumentError(f"The uploaded {what} {name} is empty.")
    if len(data) > max_bytes:
        raise InvalidArgumentError(
            f"The uploaded {what} {name} is {len(data) / 2**20:.1f} MB, more than the "
            f"{max_bytes // 2**20} MB such a table may have."
        )
    try:
        if b"\x00" in data[: 1 << 16]:
            raise UnicodeDecodeError("utf-8", data[:1], 0, 1, "NUL byte")
        data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidArgumentError(
            f"The uploaded {what} {name} is not UTF-8 text; upload a .csv (or .json) text file."
        ) from None


def _columns(header: list[str] | None, path: Path) -> dict[str, int]:
    if not header:
        raise InvalidArgumentError(f"The scores file {path} is empty; it needs a header row.")
    names = [h.strip().lower() for h in header]
    unknown = [h for h in names if h not in REQUIRED + OPTIONAL]
    if unknown:  # a few, each cut short: a JSON file's first line is thousands of "columns"
        shown = [repr(h) if len(h) <= 40 else repr(h[:37] + "...") for h in unknown[:3]]
        more = f" and {len(unknown) - 3:,} more" if len(unknown) > 3 else ""
        raise InvalidArgumentError(
            f"The scores file {path} has the unknown column(s) {', '.join(shown)}{more}; "
            f"the columns are {', '.join(REQUIRED)} and optionally {', '.join(OPTIONAL)}."
        )
    missing = [c for c in REQUIRED if c not in names]
    if missing:
        raise InvalidArgumentError(
            f"The scores file {path} lacks the column(s) {', '.join(missing)}; its header is "
            f"{', '.join(header)}."
        )
    if len(set(names)) != len(names):
        raise InvalidArgumentError(f"The scores file {path} repeats a column in its header.")
    return {name: i for i, name in enumerate(names)}


def _score(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidArgumentError(f"{where}: the score {text!r} is not a number.") from None
    if not math.isfinite(value):
        raise InvalidArgumentError(f"{where}: the score {text!r} is not a finite number.")
    return value


def read_scores(path: str | Path) -> ScoreTable:
    """The validated scores of `path` (see the module docstring); InvalidArgumentError else."""
    path = Path(path).expanduser()
    rows = csv_rows(_read_text(path), f"The scores file {path.name}")  # fields bounded
    cols = _columns(rows[0] if rows else None, path)
    table = ScoreTable(path=str(path))
    for line, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue  # blank lines are allowed
        where = f"{path.name} line {line}"
        required_width = 1 + max(cols[c] for c in REQUIRED)
        if len(row) > len(cols) or len(row) < required_width:
            raise InvalidArgumentError(
                f"{where} has {len(row)} fields; the header has {len(cols)}."
            )
        row = row + [""] * (len(cols) - len(row))  # an optional last column may be left off
        model, task = row[cols["model"]].strip(), row[cols["task"]].strip()
        if not model or not task:
            raise InvalidArgumentError(f"{where}: the model and the task must not be empty.")
        by_model = table.scores.setdefault(task, {})
        if model in by_model:
            raise InvalidArgumentError(
                f"{where} repeats the score of {model!r} on {task!r}; give each (model, task) once."
            )
        by_model[model] = _score(row[cols["score"]].strip(), where)
        if "family" in cols and row[cols["family"]].strip():
            family = row[cols["family"]].strip()
            if table.families.setdefault(model, family) != family:
                raise InvalidArgumentError(
                    f"{where} gives {model!r} the family {family!r}, an earlier line "
                    f"{table.families[model]!r}."
                )
    if not table.scores:
        raise InvalidArgumentError(f"The scores file {path} has a header but no scores.")
    return table
