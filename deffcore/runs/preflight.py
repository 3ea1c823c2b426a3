"""The checks a run passes before anything loads: its arguments, model path and data.

`plan(**run)` is `deffcore.runs.preflight.run_spec(**run)` followed by `check(spec)`: the model
path, the dataset (opened and sampled: an empty, unreadable or too small file fails here) and,
for token windows, the window count (`deffcore.inputs.texts.count_windows`). Hub datasets are not
opened here (network): the worker opens them first, still before the model. Errors name the
user's own file when `names` maps a saved path to it (`display`: uploads are stored under a
hash name). `deffcore.work.jobs.start` runs `check` before it queues a run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deffcore.core.checks import (
    check_cache_dir,
    check_choice,
    check_int,
    check_passages,
    check_seed,
)
from deffcore.core.constants import BOS_OPTIONS, METRICS, PASSAGE_MODES, WINDOW_MODES
from deffcore.core.errors import DeffError, TooFewPassagesError, UnknownModelError
from deffcore.inputs.interventions import INTERVENTIONS
from deffcore.inputs.model import (
    Kind,
    ModelSpec,
    check_fits,
    check_max_tokens,
    resolve_device_dtype,
)
from deffcore.inputs.run_spec import RunSpec
from deffcore.inputs.texts import check_dataset


def display(text: str, names: dict[str, str] | None) -> str:
    """`text` with every saved path (and its file name) replaced by the user's file name."""
    for path, shown in (names or {}).items():
        text = text.replace(path, shown).replace(Path(path).name, shown)
    return text


def plan(
    *, names: dict[str, str] | None = None, windows: int | None = None, **run: Any
) -> tuple[RunSpec, str]:
    """`deffcore.runs.preflight.run_spec(**run)` followed by `check`: (spec, device) of a run
    whose arguments, model path and data were checked before anything loads; errors name the
    user's files (`names`). `windows`: the window count when the caller already knows it."""
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
    from deffcore.inputs.texts import all_documents, load_passages

    model = spec.model_spec.trained  # a random null reads its base's files
    if model.looks_local:
        gguf = model.kind is Kind.GGUF
        if gguf and not model.path.is_file():
            raise UnknownModelError(f"The GGUF file {model} does not exist.")
        if not gguf and not model.path.is_dir() and model.text.startswith((".", "/", "~")):
            raise UnknownModelError(f"The model folder {model} does not exist.")
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
    from deffcore.inputs.texts import count_windows

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


#: Smallest number of kept passages a run accepts (unbiased CKA needs 4).
MIN_PASSAGES = 4


def check_run_options(
    metric: str,
    n: int,
    max_tokens: int,
    seed: int,
    device: str | None = None,
    dtype: str | None = None,
    passages: str = "documents",
    bos: str = "default",
    *,
    batch_size: int | None = None,
    device_here: bool = True,
) -> tuple[str, str]:
    """Check the options of a run that do not depend on its model or dataset -> (device,
    dtype): the choices, n, max_tokens, seed, batch size, the device (`device_here=False`
    skips the "does this machine have it" part, for a sweep whose workers have their own GPUs)
    and the cache folder. A sweep checks these once for all its cells (`run_spec` per cell).
    Raises a DeffError subclass with one sentence."""
    check_choice(metric, METRICS, "metric")
    check_choice(passages, PASSAGE_MODES, "passages mode")
    check_choice(bos, BOS_OPTIONS, "BOS option")
    if isinstance(n, bool) or not isinstance(n, int) or n < MIN_PASSAGES:
        raise TooFewPassagesError(f"n must be an integer >= {MIN_PASSAGES}, got {n!r}.")
    check_passages(n)  # at most MAX_PASSAGES, before anything is sized by it
    if not isinstance(max_tokens, int) or max_tokens < 2:
        raise TooFewPassagesError(f"max_tokens must be an integer >= 2, got {max_tokens!r}.")
    check_seed(seed)
    if batch_size is not None:
        check_int(batch_size, "batch_size", 1)
    device, dtype = resolve_device_dtype(device, dtype, check=device_here)
    check_cache_dir()
    return device, dtype


def run_spec(
    model: str | ModelSpec,
    dataset: str,
    n: int,
    max_tokens: int,
    seed: int,
    metric: str,
    revision: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    intervention: str = "none",
    passages: str = "documents",
    bos: str = "default",
    *,
    batch_size: int | None = None,
    device_here: bool = True,
) -> tuple[RunSpec, str]:
    """Check a run's arguments and resolve device/dtype -> (RunSpec, device).

    Every check is cheap and runs before any model loads: `check_run_options`, the
    norm intervention, max_tokens against the model's context length (read from its config)
    and the dataset (opened, not read). Raises a DeffError subclass with one sentence.
    """
    check_choice(intervention, INTERVENTIONS, "norm intervention")
    device, dtype = check_run_options(
        metric, n, max_tokens, seed, device, dtype, passages, bos,
        batch_size=batch_size, device_here=device_here,
    )  # fmt: skip
    parsed = ModelSpec.parse(model)  # the door: a malformed spec is its one sentence here
    if device_here:  # a random shape too large for this machine fails here, not mid-load
        check_fits(parsed, device, dtype, spread=device == "auto")
    check_max_tokens(parsed, max_tokens, revision)
    check_dataset(dataset)
    spec = RunSpec(
        model=parsed.text,
        revision=revision,
        dataset=dataset,
        n=n,
        max_tokens=max_tokens,
        seed=seed,
        dtype=dtype,
        intervention=intervention,
        passages=passages,
        bos=bos,
    )
    return spec, device
