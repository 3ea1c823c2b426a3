"""The Ray runtime of a sweep: join a cluster at `address`, or start a private local one.

A local runtime is bound to 127.0.0.1 (`ray.init(num_cpus=...)`, no dashboard) and shut down
afterwards; a joined cluster is only disconnected from (it keeps running).
"""

from __future__ import annotations

import contextlib
import os

from deffcore.core.files import PACKAGE_DIR
from deffcore.work.sweep import checks
from deffcore.work.sweep.cells import one_sentence
from deffcore.work.sweep.checks import SweepError


def _local_ray_init(num_cpus: int | None, num_gpus: int | None) -> None:
    """Start a private Ray runtime on this machine, every port bound to 127.0.0.1.

    Ray picks the machine's routable address for a local runtime on Linux; with
    RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 it uses the loopback address (its behaviour on a
    laptop), so nothing of the runtime is reachable from the network. The variable is set
    only while the runtime starts; its processes inherit it.
    """
    import ray

    repo = str(PACKAGE_DIR.parent)  # the folder holding deffcore/
    old = {k: os.environ.get(k) for k in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "PYTHONPATH")}
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    # workers must import deffcore even when the driver runs from another directory
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (repo, old["PYTHONPATH"]) if p)
    # Ray reads the variable once, when it is imported; this process may have imported it
    # already, so the flag it derived is switched too (and restored below).
    from ray._private import ray_constants

    old_flag = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        ray.init(
            address="local",  # a new runtime even when RAY_ADDRESS names a cluster
            num_cpus=num_cpus or os.cpu_count() or 1,
            num_gpus=num_gpus,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = old_flag
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _join_ray(address: str) -> None:
    import ray

    def init() -> None:
        ray.init(address=address, log_to_driver=False, configure_logging=False)

    try:  # probed first, joined with a deadline (a dead address: one sentence, not for ever)
        checks.join_ray(address, init)
    except SweepError:
        raise
    except Exception as err:  # ConnectionError and friends: a sentence, not a traceback
        raise SweepError(
            f"Cannot join the Ray cluster at {address!r} ({one_sentence(err)}); start it with "
            "`ray start --head` and pass its address."
        ) from err


@contextlib.contextmanager
def ray_runtime(
    address: str | None = None, *, num_cpus: int | None = None, num_gpus: int | None = None
):
    """Connect to Ray for the duration of the block; yields the cluster's GCS address.

    Reuses a runtime this process already holds; else joins `address`, or starts a local one
    (shut down on exit; a joined cluster is only disconnected from).
    """
    try:
        import ray
    except ImportError as err:
        raise SweepError("The ray engine needs Ray: pip install -r requirements.txt.") from err
    started = False
    if not ray.is_initialized():
        if address:
            _join_ray(address)
        else:
            _local_ray_init(num_cpus, num_gpus)
        started = True
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        if started:
            ray.shutdown()
