"""Checks of a sweep before it runs: what fails one cell alone (`cell_specs`), what refuses the
whole sweep (`check_axes`, `check_manifest_cell`: a single string is one value, never the cells
t, i, n, ...), and a Ray address that does not answer (`join_ray`: probed with one TCP
connection first, since Ray retries a dead address for ever and SIGTERM cannot end the process
while it does). Nothing here imports deffcore.work.sweep, which re-exports SweepError.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Sequence
from typing import Any

from deffcore.core.checks import MAX_SEED
from deffcore.core.errors import DeffError

#: A Ray cluster that does not answer within this many seconds is refused (TCP probe first).
JOIN_TIMEOUT_S = 25.0
PROBE_TIMEOUT_S = 5.0


class SweepError(DeffError):
    """A malformed sweep: no cells, a bad axis value, an unreadable manifest, a bad engine, a
    Ray address that does not answer (deffcore.work.sweep re-exports it)."""


# ---------------------------------------------------------------------------------------------
# Cells: shared options once, then each cell on its own


def cell_specs(
    cells: Sequence[Any], **shared: Any
) -> tuple[list[Any | None], list[str | None], str, str]:
    """(spec or None per cell, its one-sentence error or None, device, dtype).

    `shared`: n, max_tokens, seed, metric, device, dtype, passages, bos, batch_size,
    device_here (as `deffcore.runs.measure.run_spec` takes them). A bad shared option raises
    (the whole sweep is malformed); a cell whose model or dataset is refused gets its error.
    """
    from deffcore.runs.measure import check_run_options, run_spec

    device_here = shared.pop("device_here", True)
    n, max_tokens, seed, metric = (shared[k] for k in ("n", "max_tokens", "seed", "metric"))
    passages, bos, batch_size = shared["passages"], shared["bos"], shared.get("batch_size")
    device, dtype = check_run_options(
        metric, n, max_tokens, seed, shared.get("device"), shared.get("dtype"), passages, bos,
        batch_size=batch_size, device_here=device_here,
    )  # fmt: skip
    specs: list[Any | None] = []
    errors: list[str | None] = []
    for cell in cells:
        spec, error = None, None
        try:
            spec, _ = run_spec(
                cell.model_spec, cell.dataset, n, max_tokens, seed, metric, cell.revision,
                device, dtype, cell.intervention, passages=passages, bos=bos,
                batch_size=batch_size, device_here=False,  # checked once above
            )  # fmt: skip
        except DeffError as err:
            error = str(err)
        specs.append(spec)
        errors.append(error)
    return specs, errors, device, dtype


# ---------------------------------------------------------------------------------------------
# Grid axes and manifest cells

#: axis -> (the kinds of value it holds, what to call them, an example)
_AXES: dict[str, tuple[tuple[type, ...], str, str]] = {
    "models": ((str,), "model names", "[tiny-llama, tiny-gpt2]"),
    "revisions": ((str, type(None)), "revision names", "[main, step1000]"),
    "random_seeds": ((int,), "integer seeds", "[0, 1, 2]"),
    "interventions": ((str,), "intervention names", "[none, no_post]"),
    "datasets": ((str,), "dataset specs", "[bbc-news]"),
}


def check_axes(where: str = "The sweep", **axes: Any) -> dict[str, list[Any]]:
    """Each axis as a list of plain values; SweepError (one sentence) for a nested list,
    a value of the wrong kind or a seed outside 0 .. `core.checks.MAX_SEED`. A single value
    (a string such as `"tiny-llama"`, or one seed) is an axis of one value."""
    out: dict[str, list[Any]] = {}
    for name, value in axes.items():
        kinds, words, example = _AXES[name]
        values = list(value) if isinstance(value, list | tuple) else [value]
        for v in values:
            bad_kind = isinstance(v, bool) or not isinstance(v, kinds)
            if bad_kind or (name == "random_seeds" and not 0 <= v <= MAX_SEED):
                shown = repr(v) if len(repr(v)) <= 40 else repr(v)[:37] + "..."
                seed = "a negative seed" if not bad_kind and v < 0 else "a seed beyond 2^63 - 1"
                why = seed if not bad_kind else f"not one of its {words}"
                raise SweepError(
                    f"{where}: the axis {name!r} holds {shown}, {why}; write a list of "
                    f"{words}{' (0 to 2^63 - 1)' if name == 'random_seeds' else ''}, e.g. "
                    f"{example}."
                )
        out[name] = values
    return out


def check_manifest_cell(item: dict[str, Any], where: str) -> None:
    """The fields of one manifest cell are plain values of their kind (seed >= 0)."""
    for name, axis in (("model", "models"), ("revision", "revisions"),
                       ("intervention", "interventions"), ("dataset", "datasets")):  # fmt: skip
        if name in item and item[name] is not None:
            check_axes(where, **{axis: [item[name]]})
    if item.get("seed") is not None:
        check_axes(where, random_seeds=[item["seed"]])


# ---------------------------------------------------------------------------------------------
# Joining a Ray cluster


def _host_port(address: str) -> tuple[str, int] | None:
    """('10.0.0.5', 6379) of 'host:port' or 'ray://host:port'; None for 'auto'/'local'."""
    text = address.strip().removeprefix("ray://")
    if text in ("auto", "local", ""):
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise SweepError(
            f"The Ray address {address!r} is not host:port (e.g. 10.0.0.5:6379, what `ray start "
            "--head` prints); leave --address out for a local runtime."
        )
    return host.strip("[]"), int(port)


def probe_ray_address(address: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """One TCP connection to the address: SweepError when nothing answers there."""
    where = _host_port(address)
    if where is None:
        return
    try:
        socket.create_connection(where, timeout=timeout).close()
    except OSError as err:
        why = "timed out" if isinstance(err, TimeoutError) else (err.strerror or str(err))
        raise SweepError(
            f"Nothing answers at the Ray address {address!r} ({why}); start the cluster with "
            "`ray start --head` and pass the address it prints, or leave --address out for a "
            "local runtime."
        ) from None


def join_ray(address: str, init: Callable[[], None], timeout: float = JOIN_TIMEOUT_S) -> None:
    """Probe `address`, then run `init()` (ray.init) in a helper thread with a deadline.

    The main thread only waits, so SIGTERM and Ctrl-C end the process at once even while Ray
    is connecting (Ray installs its own SIGTERM handler only when initialised in the main
    thread); a cluster that does not answer by the deadline is refused
    (SweepError). An exception of `init` is re-raised here."""
    probe_ray_address(address)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            init()
        except BaseException as err:  # handed to the waiting thread
            failure.append(err)

    thread = threading.Thread(target=run, name="deff-ray-join", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise SweepError(
            f"The Ray cluster at {address!r} did not answer within {timeout:.0f} s (is it a Ray "
            "head node's address?); check it with `ray status --address ...`."
        )
    if failure:
        raise failure[0]
