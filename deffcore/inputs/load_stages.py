"""The parts of a model load, reported as each one starts (stage: inputs).

    with load_stages.reporting(lambda part: print(part)):
        load_model("smollm2-135m")        # reading, de-quantising, building, moving

A load has up to four parts, in this order (`PARTS`):

    reading        the file header, config and tokenizer (a GGUF's header holds all three)
    de-quantising  a GGUF file's quantised tensors to the forward dtype (GGUF only)
    building       the model's modules and their weights (from a file, or a seeded init)
    moving         onto the device, in the forward dtype

`deffcore.inputs.loading.load_model` calls `mark(part)` where each part starts; the loader of a
GGUF file marks de-quantising and building from inside transformers
(`deffcore.inputs.gguf_reading`).
Whoever wants the parts (`deffcore.inputs.loaded_models`, which times them for the progress display
and `deffcore.runs.stage_times`) wraps the load in `reporting(callback)`. The reporter is a context
variable, so a load on one thread never reports to another thread's callback.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator

#: The parts of a load, in order (module docstring).
PARTS: tuple[str, ...] = ("reading", "de-quantising", "building", "moving")

_REPORTER: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar(
    "deff_load_reporter", default=None
)


def mark(part: str) -> None:
    """`part` (one of PARTS) starts now: tell the reporter, if a load is being reported."""
    if part not in PARTS:
        raise ValueError(f"Unknown load part {part!r}; the parts are {', '.join(PARTS)}.")
    reporter = _REPORTER.get()
    if reporter is not None:
        reporter(part)


@contextlib.contextmanager
def reporting(callback: Callable[[str], None]) -> Iterator[None]:
    """Inside the `with`, every `mark(part)` of this thread calls `callback(part)`."""
    token = _REPORTER.set(callback)
    try:
        yield
    finally:
        _REPORTER.reset(token)
