"""The checks a run passes before anything loads: its arguments, model path and data.

`plan(**run)` is `deffcore.measurement.run_spec(**run)` followed by `check(spec)`: the model
path, the dataset (opened and sampled: an empty, unreadable or too small file fails here) and,
for token windows, the window count (`deffcore.tokens.count_windows`). Hub datasets are not
opened here (network): the worker opens them first, still before the model. Errors name the
user's own file when `names` maps a saved path to it (`display`: uploads are stored under a
hash name). `deffcore.jobs.start` runs `check` before it queues a run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deffcore.core.constants import WINDOW_MODES
from deffcore.core.errors import DeffError, TooFewPassagesError, UnknownModelError
from deffcore.inputs.run_spec import RunSpec


def display(text: str, names: dict[str, str] | None) -> str:
    """`text` with every saved path (and its file name) replaced by the user's file name."""
    for path, shown in (names or {}).items():
        text = text.replace(path, shown).replace(Path(path).name, shown)
    return text


def plan(
    *, names: dict[str, str] | None = None, windows: int | None = None, **run: Any
) -> tuple[RunSpec, str]:
    """`deffcore.measurement.run_spec(**run)` followed by `check`: (spec, device) of a run
    whose arguments, model path and data were checked before anything loads; errors name the
    user's files (`names`). `windows`: the window count when the caller already knows it."""
    from deffcore.runs.measure import run_spec

    try:
        spec, device = run_spec(**run)
    except DeffError as err:
        raise type(err)(display(str(err), names)) from None
    check(spec, names=names, windows=windows)
    return spec, device


def check(
    spec: RunSpec, *, names: dict[str, str] | None = None, windows: int | None = None
) -> None:
    """Raise the DeffError a run of `spec` would hit in its data or model path, before any
    model loads (see the module doc). Hub datasets are not opened here (network): the worker
    opens them first, still before the model. `windows` skips counting them again."""
    try:
        _check(spec, windows)
    except DeffError as err:
        raise type(err)(display(str(err), names)) from None


def _check(spec: RunSpec, windows: int | None = None) -> None:
    from deffcore.inputs import serving
    from deffcore.inputs.texts import all_documents, load_passages

    inner = spec.model
    if inner.startswith("random:"):
        inner = inner.removeprefix("random:").rpartition(":")[0]
    if serving.looks_like_path(inner):
        path = Path(inner).expanduser()
        if path.suffix == ".gguf" and not path.is_file():
            raise UnknownModelError(f"The GGUF file {inner} does not exist.")
        if path.suffix != ".gguf" and not path.is_dir() and inner.startswith((".", "/", "~")):
            raise UnknownModelError(f"The model folder {inner} does not exist.")
    if spec.dataset.startswith("hf:"):
        return
    if spec.passages in WINDOW_MODES:
        all_documents(spec.dataset, spec.n, seed=spec.seed)
        available = windows if windows is not None else _count_windows(spec)
        if available is not None and spec.n > available:
            raise TooFewPassagesError(
                f"{spec.dataset} yields {available:,} windows of {spec.max_tokens} tokens "
                f"for {spec.model}, fewer than N = {spec.n:,}; ask for N <= {available:,}."
            )
    else:
        load_passages(spec.dataset, spec.n, seed=spec.seed)


def _count_windows(spec: RunSpec) -> int | None:
    """The window count of `spec`'s data (tokenizer only); None when the tokenizer cannot load
    here (the worker will say why). A DeffError (bad data, bad option) is the check's answer."""
    from deffcore.inputs.tokens import count_windows

    try:
        return int(
            count_windows(
                spec.model,
                spec.dataset,
                spec.max_tokens,
                spec.bos,
                spec.revision,
                mode=spec.passages,
            )
        )
    except DeffError:
        raise  # not swallowed by the line below: it is the user's error, said before the load
    except Exception:
        return None
