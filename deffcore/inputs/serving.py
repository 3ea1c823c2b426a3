"""Serving the explorer to others: which local paths a visitor may name, and uploads.

The app's local-path inputs (a model folder or .gguf file, a dataset file, the labs'
checkpoint folders) read files on the machine that runs the server. For a server others can
reach, `DEFF_LOCAL_PATHS` limits them:

    DEFF_LOCAL_PATHS unset or "on"   any path (the default: a personal, localhost-only app)
    DEFF_LOCAL_PATHS=off             no local path at all (packaged models, bbc-news, uploads)
    DEFF_LOCAL_PATHS=/some/folder    only paths inside that folder (symlinks resolved first)

A refused path gets the same sentence whether or not it exists, so the message reveals nothing
about the server's files. Uploads are checked here too (`check_upload`): empty and binary
files are refused before anything is saved or loaded, naming the user's own file name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from deffcore.core.errors import DeffError, UnknownDatasetError

if TYPE_CHECKING:
    from deffcore.inputs.texts import DatasetSpec

ENV = "DEFF_LOCAL_PATHS"
#: Upload suffixes that must be text (parquet is binary by design).
TEXT_SUFFIXES = (".txt", ".jsonl", ".csv")


class LocalPathRefusedError(DeffError):
    """A local path the server's DEFF_LOCAL_PATHS setting does not allow."""


@dataclass(frozen=True)
class LocalPathPolicy:
    """`mode` "on" (any path), "off" (none) or "folder" (only inside `folder`)."""

    mode: str
    folder: Path | None = None

    @property
    def allowed(self) -> bool:
        return self.mode != "off"

    def describe(self) -> str:
        if self.mode == "on":
            return "Local paths: any file or folder on the server."
        if self.mode == "off":
            return f"Local paths are switched off on this server ({ENV}=off)."
        return f"Local paths: only inside {self.folder} ({ENV})."


def local_path_policy() -> LocalPathPolicy:
    """The policy set by `DEFF_LOCAL_PATHS` (read on every call, so tests can change it).

    A value that is neither on/off nor an existing folder switches local paths off: a typo
    must not open the whole disk.
    """
    raw = os.environ.get(ENV, "").strip()
    if raw.lower() in ("", "on", "1", "true", "yes"):
        return LocalPathPolicy("on")
    if raw.lower() in ("off", "0", "false", "no", "none"):
        return LocalPathPolicy("off")
    folder = Path(raw).expanduser()
    if not folder.is_absolute() or not folder.is_dir():
        return LocalPathPolicy("off")
    return LocalPathPolicy("folder", folder.resolve())


def check_local_path(path: str | Path, *, what: str = "path") -> Path:
    """`path` resolved (symlinks and `..` followed) if the policy allows it; else
    LocalPathRefusedError, whose text is the same whether or not the path exists.

    Existence is not checked here: the caller's own error for a missing file may name it,
    because by then the path is one the server allows to be read.
    """
    policy = local_path_policy()
    text = str(path).strip()
    if policy.mode == "on":
        return Path(text).expanduser()
    if policy.mode == "off":
        raise LocalPathRefusedError(
            f"This server does not read local paths ({ENV}=off); choose a packaged {what} "
            "or upload a file."
        )
    assert policy.folder is not None
    candidate = Path(text).expanduser()
    if not candidate.is_absolute():
        candidate = policy.folder / candidate
    resolved = candidate.resolve(strict=False)
    if resolved != policy.folder and policy.folder not in resolved.parents:
        raise LocalPathRefusedError(
            f"This server reads local {what}s only inside {policy.folder}; {text!r} is not "
            "a path there."
        )
    return resolved


def _names_local_path(name: str, policy: LocalPathPolicy) -> bool:
    """Whether `name` would be read from this machine: it looks like a path (a model spec's
    rule, `names_local_path`), or it exists relative to the working directory or (a folder
    policy) to the allowed folder."""
    from deffcore.inputs.model import names_local_path

    if names_local_path(name):
        return True

    return policy.folder is not None and bool(name.strip()) and (policy.folder / name).exists()


def check_model_spec(spec: str) -> str:
    """The model spec to load: `spec` with its local path replaced by the checked, resolved
    one (so what was checked is what gets opened); LocalPathRefusedError for a refused path.

    Packaged, tiny and hub ids pass unchanged; `random:<inner>:<seed>` is checked through
    `<inner>` and comes back as `random:<resolved inner>:<seed>`. With local paths on (the
    default), every spec comes back as given.
    """
    from deffcore.inputs.model import Kind, ModelSpec

    if not spec.strip():
        return spec  # nothing chosen yet
    parsed = ModelSpec.parse(spec)  # a malformed spec: its one sentence, here at the door
    policy = local_path_policy()
    inner = parsed.base if parsed.base is not None else parsed
    if inner.kind in (Kind.PACKAGED, Kind.TINY) or policy.mode == "on":
        return spec
    if not _names_local_path(inner.text, policy):
        return spec  # a hub id
    resolved = str(check_local_path(inner.text, what="model"))
    if parsed.seed is None:
        return resolved
    return ModelSpec.random(resolved, parsed.seed).text


def check_dataset_spec(dataset: str, local_path: str | None = None) -> str:
    """The dataset spec to open: `dataset` with its local path replaced by the checked,
    resolved one; LocalPathRefusedError for a path the policy refuses.

    `local_path` is the path part of `dataset` as the user typed it (`dataset` is that path
    with an optional `:column`). An `hf:` spec is checked too: under `DEFF_LOCAL_PATHS=off` a
    Hugging Face name that names something on this machine (a folder or file that exists,
    `/`, `./`, `~`...) or one of `datasets`' file builders (`csv`, `json`, `text`, ... which
    read the server's working directory) is refused; under a folder policy such a name must be
    inside the folder and comes back resolved. With local paths on, `dataset` comes back as
    given.
    """
    from deffcore.inputs.texts import DatasetSpec

    policy = local_path_policy()
    if local_path:
        resolved = check_local_path(local_path, what="dataset file")
        if policy.mode == "on":
            return dataset
        rest = dataset[len(local_path) :] if dataset.startswith(local_path) else ""
        return f"{resolved}{rest}"
    data = DatasetSpec.stored(dataset)
    if data.streamed and policy.mode != "on":
        return _check_hf_spec(DatasetSpec.parse(data), policy)  # malformed: its sentence
    return dataset


def _check_hf_spec(data: DatasetSpec, policy: LocalPathPolicy) -> str:
    spec = data.text
    name = data.hf.name  # type: ignore[union-attr]  # parsed by the caller: hf is set
    if name.strip().lower() in _file_builders():
        raise LocalPathRefusedError(
            f"The Hugging Face dataset name {name!r} is one of the datasets library's file "
            "readers, which read files of this server; name a dataset on the hub "
            "(hf:<org>/<name>:<split>) or upload a file."
        )
    if not _names_local_path(name, policy):
        return spec
    resolved = str(check_local_path(name, what="dataset"))
    if ":" in resolved:
        raise LocalPathRefusedError(
            f"The dataset folder {name!r} resolves to a path with ':' in it, which an 'hf:' "
            "spec cannot hold; move it or upload a file."
        )
    return data.with_hf_name(resolved).text


def _file_builders() -> set[str]:
    """The `datasets` builders that read local files by name (csv, json, text, parquet, ...)."""
    try:
        from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES
    except ImportError:  # no datasets library: an hf: spec cannot be read at all
        return {"csv", "json", "text", "parquet", "arrow", "pandas", "sql", "webdataset"}
    return set(_PACKAGED_DATASETS_MODULES)


def check_upload(name: str, data: bytes) -> None:
    """Refuse an empty upload, or a text-format upload holding binary data, by the user's name.

    Text formats (.txt, .jsonl, .csv) must be UTF-8 without NUL bytes; .parquet is binary and
    is judged when it is read.
    """
    shown = Path(name).name
    if not data or not data.strip():
        raise UnknownDatasetError(f"The uploaded file {shown} is empty; it holds no passage.")
    if Path(shown).suffix.lower() in TEXT_SUFFIXES:
        head = data[: 1 << 16]
        try:
            if b"\x00" in head:
                raise UnicodeDecodeError("utf-8", head, 0, 1, "NUL byte")
            data.decode("utf-8")
        except UnicodeDecodeError:
            raise UnknownDatasetError(
                f"The uploaded file {shown} is not UTF-8 text (it holds binary data); upload "
                "a .txt, .jsonl or .csv text file, or a .parquet table."
            ) from None
