"""What a sweep will cost before it starts: every cell's plan on this machine and on one GPU.

    settings, sizes, about = manifest_extras("manifests/paper16.yaml")
    cost = sweep_cost(plan_sweep(cells, **settings), known=sizes)
    print("\\n".join(cost.lines()))

A sweep manifest may carry, beside its `cells` / `grid`, the run settings it was made for
(`settings`: n, max_tokens, seed, passages, bos, dtype; the command line overrides them) and
the sizes of its models (`sizes`: {model id: {layers, d_model, d_ff, heads, kv_heads,
head_dim, vocab, gated, tied, source}}), so a sweep of hub models plans offline: nothing is
downloaded, no model loads. Each cell is planned by `deffcore.runs.planner.plan_run`; a model this
machine cannot load (a hub id) is never calibrated: its time is scaled by block parameters
from a calibration of another model on this device (`planner._scaled`), and when there is
none, the packaged SmolLM2 is calibrated once as this machine's reference (said so). The GPU
column is `planner.gpu_time` (BENCHMARKS.md's H200 figures, scaled by block parameters: a
range) and whether the cell fits the H200's memory (weights in bfloat16, one batch, the
pooled states on the device).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deffcore.core.errors import DeffError
from deffcore.inputs.model import ModelSize, from_mapping
from deffcore.runs.planner import (
    H200,
    Plan,
    device_bytes,
    gpu_time,
    human_bytes,
    human_time,
    plan_run,
)

#: Settings a manifest may give (the sweep command's options of the same names).
SETTINGS = ("n", "max_tokens", "seed", "passages", "bos", "dtype")
#: The packaged model calibrated as this machine's reference when nothing else is.
REFERENCE_MODEL = "smollm2-135m"


def manifest_extras(path: str | Path) -> tuple[dict[str, Any], dict[str, ModelSize], str]:
    """(settings, sizes, about) of a YAML/JSON sweep manifest (module docstring); empty when
    it has none. Raises DeffError for malformed ones."""
    from deffcore.work.sweep.cells import parse_manifest

    path = Path(path).expanduser()
    try:
        data = parse_manifest(path, path.read_text())
    except Exception as err:  # the cells reader says what is wrong with it in one sentence
        raise DeffError(f"The sweep manifest {path} cannot be read ({err}).") from err
    if not isinstance(data, dict):
        return {}, {}, ""
    settings = data.get("settings") or {}
    if not isinstance(settings, dict) or set(settings) - set(SETTINGS):
        raise DeffError(f"The 'settings' of {path} must be a mapping of {', '.join(SETTINGS)}.")
    sizes = data.get("sizes") or {}
    if not isinstance(sizes, dict):
        raise DeffError(f"The 'sizes' of {path} must map model ids to their dimensions.")
    known = {
        str(model): from_mapping(entry, str(entry.get("source", "manifest")))
        for model, entry in sizes.items()
        if isinstance(entry, dict)
    }
    return dict(settings), known, str(data.get("about") or "")


@dataclass
class CellCost:
    label: str
    plan: Plan
    gpu_s: tuple[float, float] | None = None
    gpu_fits: bool | None = None


@dataclass
class SweepCost:
    """Every cell's cost (module docstring); `lines()` prints them with the totals."""

    cells: list[CellCost]
    device: str
    notes: list[str] = field(default_factory=list)

    def totals(self) -> dict[str, Any]:
        here = [c.plan for c in self.cells if c.plan.fits and c.plan.seconds is not None]
        gpu = [c.gpu_s for c in self.cells if c.gpu_s is not None]
        return {
            "cells": len(self.cells),
            "passages": sum(c.plan.n for c in self.cells),
            "tokens": sum(c.plan.tokens for c in self.cells),
            "refused_here": sum(not c.plan.fits for c in self.cells),
            "unknown_here": sum(c.plan.fits and c.plan.seconds is None for c in self.cells),
            "seconds_here": sum(p.seconds for p in here),
            "gpu_seconds": (sum(g[0] for g in gpu), sum(g[1] for g in gpu)) if gpu else None,
            "gpu_refused": sum(c.gpu_fits is False for c in self.cells),
        }

    def lines(self) -> list[str]:
        t = self.totals()
        out = [
            f"Sweep plan: {t['cells']} cells, {t['passages']:,} passages, {t['tokens']:,} tokens "
            "at most",
            f"{'cell':<46}{'here (' + self.device + ')':<44}one H200",
        ]
        for c in self.cells:
            out.append(f"{c.label[:45]:<46}{_here(c.plan)[:43]:<44}{_gpu(c)}")
        timed = len(self.cells) - t["refused_here"] - t["unknown_here"]
        here = (
            f"~{human_time(t['seconds_here'])} for the {timed} cells that fit here"
            if timed
            else "no cell has a time here"
        )
        if t["refused_here"] or t["unknown_here"]:
            here += f" ({t['refused_here']} refused, {t['unknown_here']} without a time)"
        out.append(f"Total here: {here}.")
        if t["gpu_seconds"] is not None:
            lo, hi = t["gpu_seconds"]
            out.append(
                f"Total on {H200['name']}: {human_time(lo)} to {human_time(hi)}"
                + (f" ({t['gpu_refused']} cells do not fit its memory)" if t["gpu_refused"] else "")
                + "; GPU time scales with block parameters from the measured Gemma-3-270M "
                f"({H200['tokens_per_s']:,.0f} tokens/s, BENCHMARKS.md), the lower bound a "
                "compute-bound forward at 40% of the H200's bfloat16 peak."
            )
        return out + self.notes

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "totals": self.totals(),
            "cells": [
                {
                    "label": c.label,
                    "plan": c.plan.to_dict(),
                    "gpu_seconds": None if c.gpu_s is None else list(c.gpu_s),
                    "gpu_fits": c.gpu_fits,
                }
                for c in self.cells
            ],
            "notes": list(self.notes),
        }


def _here(plan: Plan) -> str:
    if not plan.fits:
        need = max(plan.memory.values()) if plan.memory else 0
        return f"refused: needs {human_bytes(need)}"
    if plan.seconds is None:
        return "time unknown"
    return f"~{human_time(plan.seconds)}, {human_bytes(max(plan.memory.values()))} peak"


def _gpu(c: CellCost) -> str:
    if c.gpu_s is None:
        return "size unknown"
    lo, hi = c.gpu_s
    fits = "" if c.gpu_fits else " (does not fit its memory)"
    return f"{human_time(lo)} to {human_time(hi)}{fits}"


def _calibratable(model: str) -> bool:
    """Models this machine loads without a network (packaged, tiny, random nulls, paths)."""
    from deffcore.inputs.model import Kind, ModelSpec

    spec = ModelSpec.stored(model).trained  # a malformed one: its cell reports it
    return spec.kind in (Kind.PACKAGED, Kind.TINY) or spec.path.exists()


def _reference(plan: Any, calibrate: str) -> str | None:
    """Calibrate the packaged reference model when this device has no calibration at all."""
    from deffcore.extraction.cache import batch_rows
    from deffcore.runs import calibration

    s = plan.settings
    if calibrate != "auto" or calibration.any_cached(plan.device, s["dtype"]):
        return None
    batch = batch_rows(s["max_tokens"], plan.device, plan.batch_size)
    cal = calibration.calibrate(
        REFERENCE_MODEL,
        device=plan.device,
        dtype=s["dtype"],
        max_tokens=s["max_tokens"],
        batch=batch,
    )
    return f"Calibrated {REFERENCE_MODEL} now as this machine's reference: {cal.describe()}."


def _hub_refusal(dataset: str) -> str | None:
    """The sentence `dataset` is refused with when only the hub stands in its way (it cannot
    be reached from here), else None."""
    from deffcore.core.errors import HubUnavailableError
    from deffcore.inputs.texts import check_dataset

    try:
        check_dataset(dataset)
    except HubUnavailableError as err:
        return str(err)
    except DeffError:
        pass
    return None


def planned(cells: list, **options: Any) -> tuple[Any, list[str]]:
    """`deffcore.work.sweep.plan_sweep(cells, **options)` and notes. A hub dataset this machine
    cannot open (offline) does not stop a plan, which reads no data: its cells are checked
    with a stand-in dataset instead, the plan keeps their own dataset's name, and a note says
    so. A cell refused for anything else keeps its refusal (a refused cell fails alone,
    `sweep_checks.cell_specs`, so the hub's refusal arrives as the cells' errors)."""
    from dataclasses import replace

    from deffcore.inputs.texts import DatasetSpec
    from deffcore.work.sweep.cells import check_cells
    from deffcore.work.sweep.runner import plan_sweep

    distinct = check_cells(cells)
    plan = plan_sweep(distinct, **options)
    hub = [
        i for i, c in enumerate(distinct)
        if plan.specs[i] is None and DatasetSpec.stored(c.dataset).streamed
        and plan.errors[i] == _hub_refusal(c.dataset)  # that refusal, not another
    ]  # fmt: skip
    stand_in = [replace(c, dataset="bbc-news") if i in hub else c for i, c in enumerate(distinct)]
    if not hub or len(set(stand_in)) != len(distinct):  # none, or stand-ins would merge cells
        return plan, []
    checked = plan_sweep(stand_in, **options)
    for i in hub:
        if checked.specs[i] is not None:  # refused for the hub only: planned with its name
            checked.specs[i] = replace(checked.specs[i], dataset=distinct[i].dataset)
        checked.rows[i]["dataset"], checked.rows[i]["label"] = (
            distinct[i].dataset,
            distinct[i].label(),
        )
    names = ", ".join(sorted({distinct[i].dataset for i in hub}))
    return checked, [f"Not opened here (the hub is off): {names}; the plan reads no data."]


def sweep_cost(
    plan: Any,
    *,
    known: dict[str, ModelSize] | None = None,
    max_memory: int | str | None = None,
    calibrate: str = "auto",
) -> SweepCost:
    """The cost of a checked sweep (`deffcore.work.sweep.plan_sweep`'s SweepPlan)."""
    cost = SweepCost(cells=[], device=plan.device)
    specs = [s for s in plan.specs if s is not None]
    if any(not _calibratable(s.model) for s in specs):
        note = _reference(plan, calibrate)
        if note:
            cost.notes.append(note)
    for spec, row in zip(plan.specs, plan.rows, strict=True):
        if spec is None:  # a refused cell: not priced, its sentence said
            continue
        mode = calibrate if _calibratable(spec.model) else "cached"
        p = plan_run(
            spec,
            plan.device,
            batch_size=plan.batch_size,
            max_memory=max_memory,
            calibrate=mode,
            known=known,
        )
        cell = CellCost(row["label"], p)
        if p.size is not None:
            cell.gpu_s = gpu_time(p.size, p.tokens)
            gpu_batch = max(1, 32768 // spec.max_tokens)
            need = device_bytes(p.size, spec.n, spec.max_tokens, gpu_batch, "bfloat16")
            cell.gpu_fits = need <= H200["memory_bytes"]
        cost.cells.append(cell)
    errors = getattr(plan, "errors", None) or [None] * len(plan.rows)
    cost.notes += [
        f"Refused, not priced: {row['label']}: {err}"
        for row, err in zip(plan.rows, errors, strict=True)
        if err
    ]
    return cost
