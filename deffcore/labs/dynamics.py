"""Training dynamics (paper Figure 3): D_eff over a sequence of checkpoints.

A checkpoint is one of
- a Hugging Face revision of a model id (`EleutherAI/pythia-1.4b` at `step143000`),
- a local checkpoint folder (anything `load_model` reads: `save_pretrained` output),
- a residual-carry lab checkpoint (`.pt`, see `deffcore.labs.residual_carry`).

Each is measured like any run (HF and folders through `deffcore.runs.measure.measure`, so they are
cached; carry checkpoints on the lab's fixed validation windows) and placed on the x axis by
training tokens when known, else by step. A checkpoint that cannot be loaded (not on this
machine, hub unreachable, unreadable) is kept as a *missing* point with its reason: it is
drawn as missing and never interpolated.

Decisions: steps and tokens are read from the checkpoint name when it carries them
(`step1000`, `checkpoint-1000`, `...-tokens4B`, OLMo's `stage1-step1000-tokens5B`; K/M/B/T
suffixes are powers of 1000); a carry checkpoint stores both. Carry checkpoints are measured
on `n` windows of the model's block size from the BBC-news validation split (the same fixed
windows the carry lab's probe uses when `n` equals its `n_probe`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from deffcore.core.errors import DeffError
from deffcore.measures.depth import reference_depth
from deffcore.runs.action_costs import Cost, runs_cost
from deffcore.runs.measure import measure, run_spec

ProgressFn = Callable[[int, int, str], None]

_SUFFIX = {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
#: What a landed point holds (a missing point holds None for each).
_VALUES = ("layers", "deff_over_L", "gap_pct", "rho1", "reference_FL_over_L")


@dataclass
class Checkpoint:
    """One point of a sweep. `kind` in {"hf", "folder", "carry"}."""

    label: str
    kind: str
    model: str
    revision: str | None = None
    step: int | None = None
    tokens: float | None = None


def parse_step_tokens(name: str) -> tuple[int | None, float | None]:
    """Step and token count written in a checkpoint name (None where absent)."""
    step = tokens = None
    m = re.search(r"(?:step|checkpoint-|iter)[_-]?(\d+)", name, re.IGNORECASE)
    if m:
        step = int(m.group(1))
    m = re.search(r"tokens?[_-]?(\d+(?:\.\d+)?)([kmbgt]?)", name, re.IGNORECASE)
    if m:
        tokens = float(m.group(1)) * _SUFFIX[m.group(2).lower()]
    return step, tokens


def hf_revisions(model: str, revisions: Sequence[str]) -> list[Checkpoint]:
    """One checkpoint per revision of a Hugging Face model id."""
    out = []
    for rev in revisions:
        step, tokens = parse_step_tokens(rev)
        out.append(
            Checkpoint(label=rev, kind="hf", model=model, revision=rev, step=step, tokens=tokens)
        )
    return out


def local_checkpoints(root: str | Path) -> list[Checkpoint]:
    """Checkpoints under a folder: sub-folders with a `config.json`, or carry `.pt` files.

    `root` itself may be a single checkpoint folder. Sorted by (tokens or step, name).
    """
    if not str(root).strip():
        raise DeffError("Name a checkpoint folder (the field is empty).")
    root = Path(root).expanduser()
    if not root.exists():
        raise DeffError(f"The checkpoint folder {root} does not exist.")
    found: list[Checkpoint] = []
    if (root / "config.json").is_file():
        step, tokens = parse_step_tokens(root.name)
        found.append(Checkpoint(root.name, "folder", str(root), step=step, tokens=tokens))
    else:
        for sub in sorted(p for p in root.iterdir() if (p / "config.json").is_file()):
            step, tokens = parse_step_tokens(sub.name)
            found.append(Checkpoint(sub.name, "folder", str(sub), step=step, tokens=tokens))
        for pt in sorted(root.rglob("*.pt")):
            found.append(carry_checkpoint(pt))
    if not found:
        raise DeffError(
            f"No checkpoints under {root}: expected sub-folders with a config.json "
            "(save_pretrained) or residual-carry .pt files."
        )
    return sorted(found, key=_order_key)


def carry_checkpoint(path: str | Path) -> Checkpoint:
    """A residual-carry lab checkpoint, listed WITHOUT opening the .pt (listing loads nothing).

    Step and tokens come from the JSON sidecar the lab writes beside each checkpoint, else from
    the file name; the weights are read (with `weights_only=True`) only when measured, and a bad
    file then becomes a missing point with its reason.
    """
    from deffcore.labs.residual_carry import checkpoint_sidecar

    path = Path(path)
    step, tokens = parse_step_tokens(path.stem)
    try:
        side = json.loads(checkpoint_sidecar(path).read_text())
        step, tokens = int(side["step"]), float(side["tokens"])
    except (OSError, ValueError, TypeError, KeyError):
        pass  # no sidecar (or a damaged one): the name's step, no token count
    label = f"{path.parent.name}/{path.stem}" if path.parent.name else path.stem
    return Checkpoint(label=label, kind="carry", model=str(path), step=step, tokens=tokens)


def _order_key(cp: Checkpoint) -> tuple[float, str]:
    x = cp.tokens if cp.tokens is not None else cp.step
    return (float("inf") if x is None else float(x), cp.label)


@dataclass
class DynamicsResult:
    """Points in checkpoint order; a missing point has `status="missing"` and no values."""

    points: list[dict[str, Any]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def x_axis(self) -> str:
        """ "tokens" when every landed point knows its tokens, else "step" (else "index")."""
        ok = [p for p in self.points if p["status"] == "ok"] or self.points
        if ok and all(p["tokens"] is not None for p in ok):
            return "tokens"
        if ok and all(p["step"] is not None for p in ok):
            return "step"
        return "index"

    def to_dict(self) -> dict[str, Any]:
        return {
            "lab": "dynamics",
            "settings": self.settings,
            "x_axis": self.x_axis,
            "landed": sum(p["status"] == "ok" for p in self.points),
            "planned": len(self.points),
            "points": self.points,
        }


def _measure_carry(cp: Checkpoint, n: int, metric: str) -> dict[str, Any]:
    import torch

    from deffcore.labs.residual_carry import char_data, load_checkpoint, probe_depth, sample_windows

    model, meta = load_checkpoint(cp.model)
    # Re-create the run's own validation split (it depends on how much text the run used).
    data = char_data((meta.get("settings") or {}).get("max_chars", 1_000_000))
    if data.chars != meta["chars"]:
        raise DeffError(f"{cp.model} was trained on another character vocabulary than BBC news.")
    probe = sample_windows(
        data.val, n, model.config.block_size, torch.Generator().manual_seed(1234)
    )[0]
    out = probe_depth(model, probe, metric)
    L = model.config.n_layer
    return {
        "layers": L,
        "deff_over_L": out["deff_h_over_L"],
        "gap_pct": out["gap_pct"],
        "rho1": out["rho1"],
    }


def _measure_hf(cp: Checkpoint, settings: dict[str, Any], device: str | None) -> dict[str, Any]:
    """A Hugging Face or folder checkpoint measured as a cached run (`measure`) under the
    sweep's `settings`, summarised at its pooling."""
    args = {k: v for k, v in settings.items() if k != "pooling"}
    m = measure(model=cp.model, revision=cp.revision, device=device, **args)
    s = m.summary(settings["pooling"])
    return {"layers": s.layers, "deff_over_L": s.deff_over_L, "gap_pct": s.gap_pct, "rho1": s.rho1}


def dynamics_cost(
    checkpoints: Sequence[Checkpoint],
    *,
    dataset: str = "bbc-news",
    n: int = 128,
    max_tokens: int = 128,
    seed: int = 0,
    metric: str = "cka",
    device: str = "cpu",
) -> Cost:
    """What `dynamics_sweep` will take and write, said before it starts (SPEC 14, "Writes said
    first"): each Hugging Face or folder checkpoint is a run of its own (`measure`), priced by
    `action_costs.runs_cost` with its cache entry; a carry checkpoint is probed in memory and
    writes nothing. A checkpoint whose arguments `measure` would refuse is left out here (the
    sweep shows it as missing)."""
    specs = []
    for cp in checkpoints:
        if cp.kind == "carry" or cp.model is None:
            continue
        try:
            spec, _ = run_spec(
                cp.model, dataset, n, max_tokens, seed, metric, cp.revision, device_here=False
            )
        except Exception:  # refused (or unreadable) here: the sweep shows it as missing
            continue
        specs.append(spec)
    if not specs:
        return Cost(None, "no checkpoint here is measured into the cache")
    return runs_cost(specs, device)


def dynamics_sweep(
    checkpoints: Sequence[Checkpoint],
    *,
    dataset: str = "bbc-news",
    n: int = 128,
    max_tokens: int = 128,
    seed: int = 0,
    metric: str = "cka",
    pooling: str = "default",
    device: str | None = None,
    progress: ProgressFn | None = None,
) -> DynamicsResult:
    """Measure every checkpoint; failures to load become missing points (never interpolated)."""
    if not checkpoints:
        raise DeffError("A training-dynamics sweep needs at least one checkpoint.")
    result = DynamicsResult(
        settings={
            "dataset": dataset,
            "n": n,
            "max_tokens": max_tokens,
            "seed": seed,
            "metric": metric,
            "pooling": pooling,
        },
    )
    for i, cp in enumerate(checkpoints):
        if progress is not None:
            progress(i, len(checkpoints), f"measuring {cp.label}")
        point: dict[str, Any] = {**asdict(cp), "status": "ok", "reason": None}
        try:
            if cp.kind == "carry":
                values = _measure_carry(cp, n, metric)
            else:
                values = _measure_hf(cp, result.settings, device)
        except (DeffError, OSError) as err:
            point.update(status="missing", reason=str(err), **dict.fromkeys(_VALUES))
        else:
            point.update(values)
            point["reference_FL_over_L"] = reference_depth(values["layers"]) / values["layers"]
        result.points.append(point)
    if progress is not None:
        progress(len(checkpoints), len(checkpoints), "done")
    return result
