"""A sweep's optional pruning column (paper Table S17): the pruning tolerance of each cell.

Off by default: a pruning check costs a held-out perplexity pass per skip count k (and one
extraction of its own measured passages), far more than the cell's measurement. Turned on by
`sweep --pruning` (sizes: `--pruning-n`, `--pruning-heldout`), a manifest's top-level
`pruning: true` (or `pruning: {n: 64, n_heldout: 32}`), or `plan_sweep(..., pruning=True)`.

Each landed cell of trained weights without an intervention gets
`deffcore.labs.pruning.pruning_check(model, dataset, n, n_heldout, max_tokens=the sweep's,
seed=the sweep's, metric=the sweep's, revision, device, dtype, store=True)`: a check stored
before (by the CLI, the app or an earlier sweep) is read back, a new one is stored, and the
correlation lab and the Models page read them all. The row gains `ppl0`, `k_110`, `f_110`,
`pruning_status` ("done", "stored", "failed" or "skipped") and `pruning_error` (the sentence of
a failed check, or why a cell is skipped: a random-weight null's perplexity means nothing, and
a norm-intervention cell's would be of the intervened model, which the check cannot run).

Decisions: the check runs in the sweep's driver after the cell lands (the serial engine reuses
the model the cell was just measured with; under Ray the driver loads each model once per cell
whose check is not stored, one cell after the other), because only the driver writes the
cache and the lab store. It uses the pruning lab's passages (`documents`, the tokenizer's own
BOS), not the sweep's passages/BOS options, so that a check means the same wherever it ran. A
failed check never fails its cell: the cell's measurement stands, `pruning_status` says why
the column is empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from deffcore.core.checks import check_int
from deffcore.core.errors import DeffError

#: Keys a row gains when the column is on (the CLI's --json prints them after CELL_KEYS).
PRUNING_KEYS: tuple[str, ...] = ("ppl0", "k_110", "f_110", "pruning_status", "pruning_error")


@dataclass(frozen=True)
class PruningOptions:
    """Sizes of each cell's pruning check: measured passages (BI, local dD) and held-out ones."""

    n: int = 64
    n_heldout: int = 32

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


def pruning_options(value: Any, where: str = "pruning") -> PruningOptions | None:
    """None/False -> off; True -> the defaults; a mapping {n, n_heldout} or PruningOptions ->
    those sizes (checked: one sentence naming `where`)."""
    if value is None or value is False:
        return None
    if value is True:
        return PruningOptions()
    if isinstance(value, PruningOptions):
        fields = value.to_dict()
    elif isinstance(value, Mapping):
        unknown = set(value) - {"n", "n_heldout"}
        if unknown:
            raise DeffError(
                f"{where} has unknown key(s) {', '.join(sorted(map(str, unknown)))}; allowed: "
                "n, n_heldout."
            )
        fields = {**PruningOptions().to_dict(), **value}
    else:
        raise DeffError(
            f"{where} must be true, false or a mapping {{n, n_heldout}}; got {value!r}."
        )
    return PruningOptions(
        n=check_int(fields["n"], f"{where} n (measured passages)", 4),
        n_heldout=check_int(fields["n_heldout"], f"{where} n_heldout (held-out passages)", 1),
    )


def manifest_pruning(path: str | Path) -> PruningOptions | None:
    """The pruning column a sweep manifest asks for (its top-level `pruning` key), or None.
    The manifest itself is checked by `deffcore.work.sweep.cells.manifest_cells`, read first."""
    from deffcore.work.sweep.cells import parse_manifest

    path = Path(path).expanduser()
    data = parse_manifest(path, path.read_text())
    if not isinstance(data, dict):
        return None
    return pruning_options(data.get("pruning"), f"The 'pruning' of the sweep manifest {path}")


def empty_columns() -> dict[str, Any]:
    return dict.fromkeys(PRUNING_KEYS)


def skip_reason(row: Mapping[str, Any]) -> str | None:
    """Why a cell gets no pruning check, or None when it gets one."""
    if row.get("seed") is not None:
        return "a random-weight null: its perplexity says nothing about pruning"
    if (row.get("intervention") or "none") != "none":
        return "a norm-intervention cell: the check runs the model without interventions"
    return None


def cell_pruning(
    spec: Any, options: PruningOptions, settings: Mapping[str, Any], loaded: Any = None
) -> dict[str, Any]:
    """The pruning columns of one landed cell (spec: its RunSpec; settings: the sweep's shared
    options; loaded: the cell's model when this process still holds it, else None)."""
    from deffcore.labs.pruning import pruning_check
    from deffcore.work.sweep.cells import one_sentence

    out = empty_columns()
    try:
        result = pruning_check(
            spec.model, spec.dataset, n=options.n, n_heldout=options.n_heldout,
            max_tokens=int(settings["max_tokens"]), seed=int(settings["seed"]),
            metric=settings["metric"], revision=spec.revision, device=settings["device"],
            dtype=spec.dtype, loaded=loaded, store=True,
        ).to_dict()  # fmt: skip
    except Exception as err:  # the cell's measurement stands; the column says why it is empty
        out.update(pruning_status="failed", pruning_error=one_sentence(err))
        return out
    out.update({k: result[k] for k in ("ppl0", "k_110", "f_110")})
    out["pruning_status"] = "stored" if result["cached"] else "done"
    return out
