"""Models load once per process: a bounded cache of loaded models, lent one user at a time
(stage: inputs).

    with loaded_models.lease("smollm2-135m", device="cpu", dtype="float32") as lm:
        extract_pooled(lm, passages, max_tokens=128)   # a LoadedModel

A run, its diagnostics, the BOS on/off check, the baselines and the labs all ask here, so the
server (or a notebook, or one CLI command that measures twice) loads each model once.

Key: the model's identity (`models.model_identity`: the spec, and its weights id: a packaged
file's pinned version, a GGUF's sha256, a folder's file fingerprint, a hub revision, a random
null's seed), the revision, the device and the dtype, all plain values. A norm intervention is
not part of the key: `deffcore.inputs.interventions` applies it as forward hooks for the length
of one extraction and removes them after (the weights are never touched), so one loaded model serves
every intervention. A file whose weights id changed is another key, and the stale entry of the
same spec is dropped.

Exclusive use: hooks are registered on the model itself (extraction, diagnostics, the labs'
block skips, the interventions), so two threads must never run it at once. A lease holds the
entry's lock for its `with` (re-entrant: the same thread may lease it again inside); a second
thread asking for the same model waits, and asking for a model that is being loaded waits for
that load instead of loading it twice.

Memory: every device has a budget (`DEFF_MODEL_CACHE_GIB`, else half the host memory this
machine can give for the CPU, 90% of a GPU's memory); a model's size is its parameters' and
buffers' bytes. Before a load, idle entries on that device are evicted least-recently-used
until the new model (its `model_size` estimate x dtype bytes; unknown: every idle entry) fits.
A model in use is never evicted: when the leased ones alone exceed the budget, the load goes
ahead over it rather than fail a job.

A load reports its parts through `progress(0, total, "loading <spec>: <part>")`
(`deffcore.inputs.load_stages`: reading, de-quantising, building, moving) after one
`progress(0, total, "loading <spec>")`, and its end with `progress(0, total, "loaded <spec>")`
(so a progress display times the load alone, not the first batch after it); a model found
here reports nothing.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from deffcore.inputs.load_stages import reporting

#: share of the host memory the CPU models may hold when DEFF_MODEL_CACHE_GIB is unset
HOST_SHARE = 0.5
#: share of a GPU's memory its models may hold
GPU_SHARE = 0.9

Progress = Callable[[int, int, str], None]


@dataclass
class _Entry:
    key: tuple[Any, ...]
    lock: threading.RLock = field(default_factory=threading.RLock)
    loaded: Any = None  # the LoadedModel, None while it loads (or after a failed load)
    nbytes: int = 0
    last_used: float = field(default_factory=time.monotonic)
    users: int = 0  # leases open now (any thread)


def model_bytes(model: Any) -> int:
    """Bytes of a module's parameters and buffers (each storage once: tied weights count once)."""
    seen: set[int] = set()
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        if t.device.type == "meta":
            continue
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            continue
        seen.add(ptr)
        total += t.untyped_storage().nbytes()
    return total


def _env_budget() -> int | None:
    """`DEFF_MODEL_CACHE_GIB` in bytes (0: keep no idle model), None when unset
    (`core.checks.env_gib`: a finite, bounded number, else one sentence)."""
    from deffcore.core.checks import env_gib

    return env_gib("DEFF_MODEL_CACHE_GIB", zero=True)


def default_budget(device: str) -> int | None:
    """Bytes the models on `device` may hold (module docstring); None: no limit known."""
    from deffcore.inputs.devices import _device_memory_bytes, host_memory_bytes

    env = _env_budget()
    if env is not None:
        return env
    if device.startswith("cuda"):
        total = _device_memory_bytes(device)
        return None if total is None else int(GPU_SHARE * total)
    host = host_memory_bytes()
    return None if host is None else int(HOST_SHARE * host)


def expected_bytes(spec: str, dtype: str) -> int | None:
    """A model's weights before it loads: `model_size` parameters x dtype bytes (None when
    its size cannot be read without loading it)."""
    import torch

    from deffcore.inputs.model_size import model_size

    try:
        size = model_size(spec)
    except Exception:  # an unreadable config: the load itself will say what is wrong
        return None
    return None if size is None else size.params * getattr(torch, dtype).itemsize


class ModelCache:
    """Loaded models by identity, budgeted per device (module docstring)."""

    def __init__(self, budget: Callable[[str], int | None] = default_budget) -> None:
        self._budget = budget
        self._lock = threading.Lock()
        self._entries: dict[tuple[Any, ...], _Entry] = {}
        self.loads = 0  # models actually loaded (for tests and benchmarks)
        self.hits = 0

    # -- what is held -----------------------------------------------------------------------

    def held(self) -> list[dict[str, Any]]:
        """The loaded models, least recently used first: plain values."""
        with self._lock:
            entries = sorted(self._entries.values(), key=lambda e: e.last_used)
            return [
                {"model": e.key[0], "revision": e.key[1], "device": e.key[3],
                 "dtype": e.key[4], "bytes": e.nbytes, "in_use": e.users > 0}
                for e in entries
                if e.loaded is not None
            ]  # fmt: skip

    def clear(self) -> int:
        """Forget every idle model (leased ones stay until their lease ends); how many."""
        with self._lock:
            idle = [k for k, e in self._entries.items() if e.users == 0]
            for k in idle:
                del self._entries[k]
        _free_memory()
        return len(idle)

    # -- leasing ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def lease(
        self,
        spec: Any,
        *,
        revision: str | None = None,
        device: str | None = None,
        dtype: str | None = None,
        progress: Progress | None = None,
        total: int = 0,
        loader: Callable[..., Any] | None = None,
    ) -> Iterator[Any]:
        """The `LoadedModel` of `spec`, loaded now or found here, for the `with` only.

        `loader` loads it when it is not here (default `deffcore.inputs.loading.load_model`, looked
        up at the call, so whoever replaces that function is obeyed)."""
        from deffcore.inputs.devices import resolve_device_dtype
        from deffcore.inputs.identity import model_identity
        from deffcore.inputs.model_spec import ModelSpec

        spec = ModelSpec.parse(spec).text  # the key holds the text, however it was given
        device, dtype = resolve_device_dtype(device, dtype)
        key = (spec, revision, model_identity(spec, revision)["weights_id"], device, dtype)
        entry = self.entry_folder(
            key
        )  # counted as a user from here: never evicted while waited for
        try:
            with entry.lock:
                if entry.loaded is None:
                    self._load(entry, (spec, revision, device, dtype), progress, total, loader)
                else:
                    with self._lock:
                        self.hits += 1
                entry.last_used = time.monotonic()
                yield entry.loaded
        finally:
            with self._lock:
                entry.users -= 1
                entry.last_used = time.monotonic()
                if entry.loaded is None and entry.users == 0:  # a failed load: forget it
                    self._entries.pop(key, None)

    def entry_folder(self, key: tuple[Any, ...]) -> _Entry:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                stale = [k for k in self._entries if k[:2] == key[:2] and k[3:] == key[3:]]
                for k in stale:  # the same spec whose file changed: its old weights go
                    if self._entries[k].users == 0:
                        del self._entries[k]
                entry = self._entries[key] = _Entry(key)
            entry.users += 1
            return entry

    def _load(self, entry: _Entry, what: tuple[str, str | None, str, str],
              progress: Progress | None, total: int, loader: Any) -> None:  # fmt: skip
        from deffcore.inputs import loading

        spec, revision, device, dtype = what
        load_model = loader or loading.load_model
        self._make_room(device, expected_bytes(spec, dtype), keep=entry.key)
        if progress is not None:
            progress(0, total, f"loading {spec}")

        def part(name: str) -> None:
            if progress is not None:
                progress(0, total, f"loading {spec}: {name}")

        with reporting(part):
            loaded = load_model(spec, revision=revision, device=device, dtype=dtype)
        if progress is not None:  # the load ends here, not at the first batch
            progress(0, total, f"loaded {spec}")
        with self._lock:
            entry.loaded, entry.nbytes = loaded, model_bytes(loaded.model)
            self.loads += 1

    def _make_room(self, device: str, need: int | None, keep: tuple[Any, ...]) -> None:
        """Evict idle models on `device`, least recently used first, until `need` bytes fit
        in its budget (`need` None: every idle one)."""
        budget = self._budget(device)
        with self._lock:
            mine = [e for k, e in self._entries.items() if k[3] == device and k != keep]
            used = sum(e.nbytes for e in mine)
            evicted = False
            for e in sorted(mine, key=lambda e: e.last_used):
                fits = need is not None and (budget is None or used + need <= budget)
                if fits:
                    break
                if e.users == 0:
                    del self._entries[e.key]
                    used -= e.nbytes
                    evicted = True
        if evicted:
            _free_memory()


def _free_memory() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


#: The process's cache (the server's, a notebook's, one CLI command's).
MODELS = ModelCache()


def lease(spec: str, **options: Any) -> contextlib.AbstractContextManager[Any]:
    """`MODELS.lease(spec, ...)`: the process's loaded model of `spec` for a `with`."""
    return MODELS.lease(spec, **options)


def lease_or_given(
    loaded: Any, spec: str, **options: Any
) -> contextlib.AbstractContextManager[Any]:
    """`loaded` as it is when the caller already holds a model, else `lease(spec, ...)`."""
    return contextlib.nullcontext(loaded) if loaded is not None else lease(spec, **options)
