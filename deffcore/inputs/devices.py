"""Devices and memory: a run's device and dtype, where a model's weights go, whether a shape fits.

Several devices: `device="auto"` (or `load_model(..., device_map=...)`) spreads the
model over the GPUs with accelerate (`device_map="auto"`: block by block, as memory allows);
`LoadedModel.device` is then the device of the input embeddings and extraction's hooks pool
each block on the device it runs on.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from torch import nn

from deffcore.core.errors import DeviceUnavailableError, InvalidArgumentError, UnknownModelError
from deffcore.inputs.model_spec import Kind, ModelSpec


def check_device(device: str) -> str:
    """`device` if this machine has it, else DeviceUnavailableError (one sentence).

    Accepts what torch accepts for a model here: cpu, cuda, cuda:<index>, mps; and "auto"
    (the model spread over this machine's GPUs by accelerate, `device_map="auto"`).
    """
    if device == "auto":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                "Device 'auto' spreads a model over this machine's GPUs, but CUDA is not "
                "available here; use --device cpu."
            )
        return device
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise DeviceUnavailableError(
            f"Unknown device {device!r}; use 'cpu' or 'cuda' (or 'cuda:<index>')."
        ) from err
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceUnavailableError(
                f"Device {device!r} was asked for, but CUDA is not available on this machine; "
                "use --device cpu."
            )
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise DeviceUnavailableError(
                f"Device {device!r} does not exist: this machine has "
                f"{torch.cuda.device_count()} CUDA device(s), numbered from 0."
            )
    elif parsed.type == "mps":
        if not torch.backends.mps.is_available():
            raise DeviceUnavailableError(
                f"Device {device!r} (Apple MPS) is not available on this machine; use --device cpu."
            )
    elif parsed.type != "cpu":
        raise DeviceUnavailableError(
            f"Device {device!r} is not supported; use 'cpu' or 'cuda' (or 'cuda:<index>')."
        )
    return str(device)


def default_device() -> str:
    """The device a run goes to when none is named: CUDA when available, else the CPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_device_dtype(
    device: str | None = None, dtype: str | None = None, *, check: bool = True
) -> tuple[str, str]:
    """CUDA with bfloat16 when available, else CPU with float32; either may be overridden.

    A given device is checked (`check_device`), so a missing GPU fails before anything loads;
    `check=False` skips that for a device on another machine (a sweep's workers).
    """
    if device is None:
        device = default_device()
    elif check:
        device = check_device(device)
    if dtype is None:
        dtype = "bfloat16" if str(device).startswith("cuda") or device == "auto" else "float32"
    if dtype not in ("float32", "bfloat16", "float16"):
        raise UnknownModelError(
            f"dtype {dtype!r} is not supported; use 'float32', 'bfloat16' or 'float16'."
        )
    return str(device), dtype


def place_model(model: nn.Module, device: str, torch_dtype: torch.dtype, device_map: Any):
    """(model on its device(s), the device its inputs go to).

    Without `device_map`: the whole model on `device`. With one: a model that from_pretrained
    already spread (it has `hf_device_map`) stays; any other is cast and spread with
    accelerate's `dispatch_model` ("auto": `infer_auto_device_map` over the GPUs, then the CPU).
    """
    if device_map is None:
        return model.to(device=device, dtype=torch_dtype), device
    if getattr(model, "hf_device_map", None) is None:
        from accelerate import dispatch_model, infer_auto_device_map

        model = model.to(dtype=torch_dtype)
        if device_map == "auto":
            device_map = infer_auto_device_map(
                model, no_split_module_classes=model._no_split_modules, dtype=torch_dtype
            )
        dispatch_model(model, device_map=device_map, offload_dir=_offload_dir(device_map))
    return model, _input_device(model)


def _offload_dir(device_map: dict[str, Any]) -> str | None:
    """A private folder for the blocks a device map puts on "disk" (None when there are none)."""
    if "disk" not in device_map.values():
        return None
    import tempfile

    return tempfile.mkdtemp(prefix="deff-offload-")


def _gpu_name(where: Any) -> str | None:
    """A device map's value as a torch device name, None for "cpu" and "disk" (offloaded)."""
    if isinstance(where, int):
        return f"cuda:{where}"
    return None if where in ("cpu", "disk") else str(torch.device(where))


def _input_device(model: nn.Module) -> str:
    """Where a spread model's input ids go: the execution device of its input embeddings.

    accelerate runs a block offloaded to "cpu" or "disk" on the map's first GPU (its main
    device), or on the CPU when the map has no GPU.
    """
    device_map = model.hf_device_map
    embed = model.get_input_embeddings()
    name = next(n for n, m in model.named_modules() if m is embed)
    owners = [k for k in device_map if k == "" or name == k or name.startswith(k + ".")]
    where = _gpu_name(device_map[max(owners, key=len)])
    if where is not None:
        return where
    gpus = [g for g in map(_gpu_name, device_map.values()) if g is not None]
    return gpus[0] if gpus else "cpu"


def host_memory_bytes() -> int | None:
    """Memory this machine can still give: `$DEFF_HOST_MEMORY_GIB` when set (a VM whose memory
    grows on demand reports far less than it can give), else Linux's MemAvailable, else the
    total, else None."""
    from deffcore.core.checks import env_gib

    override = env_gib("DEFF_HOST_MEMORY_GIB")  # finite, above 0, bounded: else one sentence
    if override is not None:
        return override
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _device_memory_bytes(device: str) -> int | None:
    """Total memory of a CUDA device, or None for other devices."""
    parsed = torch.device(device)
    if parsed.type != "cuda" or not torch.cuda.is_available():
        return None
    return int(torch.cuda.mem_get_info(parsed.index or 0)[1])


def check_fits(spec: str | ModelSpec, device: str, dtype: str, *, spread: bool = False) -> None:
    """Refuse a model that cannot fit, before a byte is allocated (one sentence).

    Its size comes from its config alone: a random-weight shape's (`shapes.param_count`), or a
    local folder's config.json (`model_config.parameters`, the folder's config checked first;
    also for `random:<folder>:<seed>`). A random model's weights are drawn on the CPU (so a seed
    gives the same weights everywhere) and a folder's are read there unless the model is
    spread: they need `parameters x bytes per value` of host memory, and as much on a GPU
    unless the model is spread over several (`spread`). Other specs are not checked here
    (their size is not known before their config is read; a bare shape is refused by
    `load_model` as weightless).
    """
    from deffcore.inputs.model_config import folder_config, parameters
    from deffcore.inputs.shapes import param_count

    spec = ModelSpec.parse(spec)
    name = spec.trained
    if spec.is_random and name.kind is Kind.SHAPE:
        params = param_count(name.text)
        advice = "use a smaller shape or bfloat16 (--dtype bfloat16)"
    elif name.kind is not Kind.FOLDER:
        return
    else:
        config = folder_config(name.path)
        if config is None:
            return
        params, advice = parameters(config), "its config.json asks for too large a model"
    need = params * getattr(torch, dtype).itemsize
    gib = 1024**3
    host = host_memory_bytes()
    if host is not None and need > host and (spec.is_random or not spread):
        raise InvalidArgumentError(
            f"{spec.text!r} needs about {need / gib:,.1f} GiB of host memory for its {params:,} "
            f"{dtype} weights, and this machine has {host / gib:.1f} GiB available; {advice}."
        )
    on_gpu = _device_memory_bytes(device)
    if not spread and on_gpu is not None and need > 0.95 * on_gpu:
        raise InvalidArgumentError(
            f"{spec.text!r} needs about {need / gib:,.1f} GiB on {device} for its {dtype} weights, "
            f"which has {on_gpu / gib:.1f} GiB; spread it over several GPUs with --device auto."
        )
