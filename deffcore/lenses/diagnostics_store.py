"""A run's diagnostics kept beside it: computed once (`diagnose`), stored in its cache entry.

`diagnose(spec)` stores the result as `diagnostics.json` inside the run's cache entry folder
(`cache_dir()/<key>/`) when the run is in the cache (complete or partial), so the app reads it
without recomputing and deleting the run deletes it. A run that has no entry (the shipped
default snapshot, never measured here) keeps its diagnostics in this process's memory: no
folder is created that `runs` could not list or `delete` remove. A stored file is trusted only
when its format, key and spec are the run's.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from deffcore.core.constants import DIAG_FORMAT
from deffcore.core.errors import NonFiniteActivationsError, fit_advice
from deffcore.lenses.diagnostics import DIAG_PASSAGES, Progress, bos_diagnostics

#: Name of the file inside a run's cache entry; bump the format when its content changes.
DIAG_FILE = "diagnostics.json"


def spec_from_fields(fields: Mapping[str, Any]) -> Any:
    """The `RunSpec` of a run described by plain fields (e.g. a snapshot's `spec`); fields a
    run did not record (`intervention`, `passages`, `bos`) take their defaults."""
    from dataclasses import fields as dc_fields

    from deffcore.inputs.run_spec import RunSpec

    names = {f.name for f in dc_fields(RunSpec)}
    return RunSpec(**{k: v for k, v in fields.items() if k in names})


def diagnostics_path(spec: Any):
    """`cache_dir()/<key>/diagnostics.json` (the folder is not created here)."""
    from deffcore.core.files import cache_dir

    return cache_dir() / spec.key() / DIAG_FILE


#: Diagnostics of runs with no cache entry (e.g. the shipped snapshot), by (cache folder, key).
_IN_MEMORY: dict[tuple[str, str], dict[str, Any]] = {}


def _memory_key(spec: Any) -> tuple[str, str]:
    return str(diagnostics_path(spec).parent.parent), spec.key()


def _in_cache(spec: Any) -> bool:
    """Whether `spec` has a run entry (complete or partial) to keep its diagnostics in."""
    from deffcore.extraction.cache import is_run_entry

    return is_run_entry(diagnostics_path(spec).parent)


def read_diagnostics(spec: Any) -> dict[str, Any] | None:
    """The diagnostics of `spec` (from its cache entry, else from this process's memory), or
    None: absent, unreadable, of another format, or written for another run (its key or spec
    differ from `spec`'s)."""
    data: Any = None
    if _in_cache(spec):
        try:
            data = json.loads(diagnostics_path(spec).read_text())
        except (OSError, ValueError):
            data = None
    if not isinstance(data, dict):
        data = _IN_MEMORY.get(_memory_key(spec))
    mine = isinstance(data, dict) and data.get("format") == DIAG_FORMAT
    if not mine or data.get("key") != spec.key() or data.get("spec") != asdict(spec):
        return None
    return data


def _keep(spec: Any, data: dict[str, Any]) -> None:
    """Store `data` beside the run when it is in the cache (atomic, never through a link),
    else in memory."""
    from deffcore.core.files import atomic_write

    if _in_cache(spec):
        atomic_write(diagnostics_path(spec), json.dumps(data, allow_nan=False).encode())
        _IN_MEMORY.pop(_memory_key(spec), None)
    else:
        _IN_MEMORY[_memory_key(spec)] = data


def diagnose(
    spec: Any,
    *,
    device: str | None = None,
    loaded: Any = None,
    batch_size: int | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """The diagnostics of a run (`BosDiagnostics.to_dict()` plus `key`, `spec`, `cached`).

    Read from `diagnostics.json` in the run's cache entry when present; else computed on the
    first min(N, 64) passages of the run's sample (`loaded`: a model already in memory, else
    the process's loaded model) and written there atomically, or kept in memory for a run
    with no cache entry (module docstring). Nothing else is written, no folder created.
    """
    from deffcore.core.files import locked
    from deffcore.inputs.model import lease, resolve_device_dtype

    found = read_diagnostics(spec)
    if found is not None:
        if _memory_key(spec) in _IN_MEMORY and _in_cache(spec):
            _keep(spec, found)  # measured since: the diagnostics move beside the run
        return {**found, "cached": True}
    from deffcore.inputs.texts import run_texts, run_token_ids

    texts = run_texts(spec)
    path = diagnostics_path(spec)
    lock = path.parent / ".diagnostics.lock"
    with locked(lock) if _in_cache(spec) else contextlib.nullcontext():
        found = read_diagnostics(spec)
        if found is not None:
            return {**found, "cached": True}
        start = time.perf_counter()
        with contextlib.ExitStack() as stack:
            if loaded is None:  # the process's loaded model (deffcore.inputs.model)
                device = device or resolve_device_dtype(None, spec.dtype)[0]
                loaded = stack.enter_context(
                    lease(spec.model, revision=spec.revision, device=device, dtype=spec.dtype,
                          progress=progress, total=spec.n)
                )  # fmt: skip
            if progress is not None:  # a windows run cuts every document first: its own stage
                progress(0, min(spec.n, DIAG_PASSAGES), "tokenising passages")
            ids = run_token_ids(spec, loaded.tokenizer, texts)
            if spec.intervention != "none":
                from deffcore.inputs.interventions import norm_intervention

                stack.enter_context(norm_intervention(loaded.model, spec.intervention))
            try:
                diag = bos_diagnostics(
                    loaded, token_ids=ids, batch_size=batch_size, progress=progress
                )
            except NonFiniteActivationsError as err:  # never "try float32" to a float32 run
                raise fit_advice(err, spec.dtype) from err
        data = {
            "format": DIAG_FORMAT,
            "key": spec.key(),
            "spec": asdict(spec),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "elapsed_s": time.perf_counter() - start,
            **diag.to_dict(),
        }
        _keep(spec, data)
    return {**data, "cached": False}
