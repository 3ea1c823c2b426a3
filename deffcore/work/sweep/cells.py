"""What a sweep is made of: cells, grids and manifests, and the checks on them.

A *cell* is one `measure` spec: a model (optionally its random-weight null `random:<m>:<seed>`),
a revision, a norm intervention and a dataset; every other option (N, tokens, passage seed,
passages mode, BOS, dtype, device) is shared by the sweep. `grid_cells` builds the product of
axes, `manifest_cells` reads a YAML/JSON list, `checkpoint_cells` one cell per checkpoint
folder; `check_cells` is what every sweep passes before it runs (no cells, too many, unknown
interventions: SweepError).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deffcore.core.errors import DeffError
from deffcore.work.sweep import checks
from deffcore.work.sweep.checks import SweepError  # re-exported: the class lives with the checks

#: Cells a single sweep may hold (a typo in a grid should not queue a million runs).
MAX_CELLS = 2000


@dataclass(frozen=True)
class Cell:
    """One cell of a sweep. `seed` is the random-weight seed (None: the trained weights)."""

    model: str
    revision: str | None = None
    seed: int | None = None
    intervention: str = "none"
    dataset: str = "bbc-news"

    @property
    def model_spec(self) -> str:
        """The model spec `load_model` reads: `random:<model>:<seed>` for a random null."""
        if self.seed is None:
            return self.model
        from deffcore.inputs.model import RANDOM_PREFIX

        return f"{RANDOM_PREFIX}{self.model}:{self.seed}"  # its base is checked with the cell

    def label(self) -> str:
        parts = [self.model_spec]
        if self.revision:
            parts.append(f"@{self.revision}")
        if self.intervention != "none":
            parts.append(f"[{self.intervention}]")
        if self.dataset != "bbc-news":
            parts.append(f"on {self.dataset}")
        return " ".join(parts)


def _split_random(model: str) -> tuple[str, int | None]:
    """'random:tiny-llama:3' -> ('tiny-llama', 3); a trained model -> (model, None)."""
    from deffcore.inputs.model import split_random

    rnd = split_random(model)  # the base is checked with its cell (one cell's error)
    return (model, None) if rnd is None else rnd


def _check_interventions(names: Iterable[str]) -> None:
    from deffcore.inputs.interventions import INTERVENTIONS

    for name in names:
        if name not in INTERVENTIONS:
            raise SweepError(
                f"Unknown norm intervention {name!r} in the sweep; choose from "
                f"{', '.join(INTERVENTIONS)}."
            )


def grid_cells(
    models: Sequence[str],
    *,
    revisions: Sequence[str | None] = (None,),
    random_seeds: Sequence[int] = (),
    trained: bool = True,
    interventions: Sequence[str] = ("none",),
    datasets: Sequence[str] = ("bbc-news",),
) -> list[Cell]:
    """The product models x revisions x weights x interventions x datasets, in that order.

    Weights are the trained model (unless `trained` is False) and one random-weight null per
    seed in `random_seeds`. A random null is built from the model's config, so it ignores the
    revision: it appears once per model, not once per revision. A model written as
    `random:<model>:<seed>` is that one random null.
    """
    axes = checks.check_axes(models=models, revisions=revisions, random_seeds=random_seeds,
                                   interventions=interventions, datasets=datasets)  # fmt: skip
    models, revisions, random_seeds = axes["models"], axes["revisions"], axes["random_seeds"]
    interventions, datasets = axes["interventions"], axes["datasets"]
    models = [m.strip() for m in models if m and m.strip()]
    if not models:
        raise SweepError("A sweep needs at least one model (--models a,b or a manifest).")
    if not trained and not random_seeds:
        raise SweepError("--random-only needs --random-seeds (which random seeds to measure).")
    if not interventions or not datasets or not revisions:
        raise SweepError("Every sweep axis needs at least one value.")
    _check_interventions(interventions)
    weights: list[int | None] = ([None] if trained else []) + [int(s) for s in random_seeds]
    cells: list[Cell] = []
    for model, revision, seed, intervention, dataset in itertools.product(
        models, revisions, weights, interventions, datasets
    ):
        base, own_seed = _split_random(model)
        if own_seed is not None:
            if seed is not None:
                continue  # a random null's own random nulls make no sense
            seed = own_seed
        cells.append(
            Cell(
                model=base,
                revision=None if seed is not None else (revision or None),
                seed=seed,
                intervention=intervention,
                dataset=dataset,
            )
        )
    return dedupe(cells)


def checkpoint_cells(root: str | Path, **axes: Any) -> list[Cell]:
    """One cell per checkpoint folder under `root` (the dynamics lab's local checkpoints).

    Residual-carry `.pt` checkpoints are not HF models; the dynamics lab measures them.
    """
    from deffcore.labs.dynamics import local_checkpoints

    folders = [cp.model for cp in local_checkpoints(root) if cp.kind == "folder"]
    if not folders:
        raise SweepError(
            f"No save_pretrained checkpoint folders under {root} (residual-carry .pt files are "
            "measured by `python -m deffcore dynamics`)."
        )
    return grid_cells(folders, **axes)


_CELL_FIELDS = ("model", "revision", "seed", "intervention", "dataset")
#: Top-level manifest keys the cells ignore: the run settings and model sizes the planner
#: reads (`deffcore.work.sweep.cost.manifest_extras`) and free text.
MANIFEST_EXTRAS = ("settings", "sizes", "about")
_AXES = ("models", "revisions", "random_seeds", "trained", "interventions", "datasets")


def parse_manifest(path: Path, text: str) -> Any:
    """The `text` of the manifest `path`: YAML for .yaml/.yml, else JSON (their own errors)."""
    if path.suffix.lower() in (".yaml", ".yml"):
        import yaml

        return yaml.safe_load(text)
    return json.loads(text)


def manifest_cells(path: str | Path) -> list[Cell]:
    """Cells listed in a YAML or JSON manifest file.

    Either a list of cells, or an object with `cells` (a list) and/or `grid` (keyword arguments
    of `grid_cells`: models, revisions, random_seeds, trained, interventions, datasets). A cell
    is a mapping with `model` and optionally revision, seed (random-weight seed), intervention,
    dataset; a bare string is a model. A top-level `pruning` key turns on the sweep's pruning
    column (read by `deffcore.work.sweep.pruning_column.manifest_pruning`).
    """
    path = Path(path).expanduser()
    try:
        text = path.read_text()
    except OSError as err:
        raise SweepError(f"Cannot read the sweep manifest {path}: {err.strerror}.") from err
    try:
        data = parse_manifest(path, text)
    except Exception as err:  # yaml.YAMLError / json.JSONDecodeError: both mean malformed
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise SweepError(f"The sweep manifest {path} is not valid YAML/JSON ({first}).") from err
    if isinstance(data, list):
        data = {"cells": data}
    if not isinstance(data, dict) or not ({"cells", "grid"} & set(data)):
        raise SweepError(
            f"The sweep manifest {path} must be a list of cells or hold 'cells'/'grid'."
        )
    # pruning: sweep.pruning_column; the extras: the planner's
    unknown = set(data) - {"cells", "grid", "pruning", *MANIFEST_EXTRAS}
    if unknown:
        raise SweepError(
            f"The sweep manifest {path} has unknown key(s) {', '.join(sorted(unknown))}."
        )
    cells: list[Cell] = []
    for i, item in enumerate(data.get("cells") or []):
        if isinstance(item, str):
            item = {"model": item}
        if not isinstance(item, dict) or not isinstance(item.get("model"), str):
            raise SweepError(f"Cell {i + 1} of the sweep manifest {path} needs a 'model' string.")
        bad = set(item) - set(_CELL_FIELDS)
        if bad:
            raise SweepError(
                f"Cell {i + 1} of the sweep manifest {path} has unknown field(s) "
                f"{', '.join(sorted(bad))}; allowed: {', '.join(_CELL_FIELDS)}."
            )
        seed = item.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise SweepError(f"Cell {i + 1} of {path}: seed must be an integer, got {seed!r}.")
        checks.check_manifest_cell(item, f"Cell {i + 1} of the sweep manifest {path}")
        cells += grid_cells(
            [item["model"]],
            revisions=[item.get("revision")],
            random_seeds=[] if seed is None else [seed],
            trained=seed is None,
            interventions=[item.get("intervention") or "none"],
            datasets=[item.get("dataset") or "bbc-news"],
        )
    grid = data.get("grid")
    if grid is not None:
        if not isinstance(grid, dict) or set(grid) - set(_AXES):
            raise SweepError(f"The 'grid' of {path} must be a mapping of {', '.join(_AXES)}.")
        grid = dict(grid)
        if "trained" in grid and not isinstance(grid["trained"], bool):
            raise SweepError(f"The 'grid' of {path}: 'trained' must be true or false.")
        axes = {k: v for k, v in grid.items() if k != "trained"}
        grid.update(checks.check_axes(f"The 'grid' of {path}", **axes))
        cells += grid_cells(grid.pop("models", []) or [], **grid)
    return dedupe(cells)


def dedupe(cells: Iterable[Cell]) -> list[Cell]:
    return list(dict.fromkeys(cells))


def check_cells(cells: Iterable[Cell]) -> list[Cell]:
    """The sweep's distinct cells in order; SweepError when there are none, more than
    `MAX_CELLS`, or one names an unknown norm intervention."""
    cells = dedupe(cells)
    if not cells:
        raise SweepError("The sweep has no cells.")
    if len(cells) > MAX_CELLS:
        raise SweepError(f"The sweep has {len(cells)} cells; at most {MAX_CELLS} are allowed.")
    _check_interventions(c.intervention for c in cells)
    return cells


def one_sentence(err: BaseException) -> str:
    """A person-readable sentence for any error (DeffError texts already are)."""
    if isinstance(err, DeffError):
        return str(err)
    text = (str(err).strip().splitlines() or [""])[0][:300]
    return f"{type(err).__name__}: {text}" if text else type(err).__name__
