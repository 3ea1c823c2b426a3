"""The interventions lab (paper Table S6): every pooling control under each norm intervention.

`intervention_table` measures the controls under each intervention through
`deffcore.runs.measure.measure_spec` (each intervention its own cached run). The interventions
themselves (Gemma-style post and QK norms replaced by identity at inference, with the decisions
behind them) live in `deffcore.inputs.interventions`, part of the extraction pipeline.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from deffcore.core.constants import POOLINGS
from deffcore.core.errors import UnsupportedArchitectureError
from deffcore.extraction import cache
from deffcore.inputs.interventions import INTERVENTIONS, PAPER_LABELS, intervention_targets
from deffcore.inputs.model import lease
from deffcore.runs.run_pairs import run_difference
from deffcore.statistics.trust_rule import measurement_trust
from deffcore.views.paper import paper_rows


@dataclass
class InterventionTable:
    """D_eff/L, gap% and rho_hat(1) per (intervention, pooling) for one model and text sample.

    rows: one dict per (intervention, pooling) with keys `intervention, pooling, deff,
    deff_over_L, gap_pct, rho1, layers`.
    """

    model: str
    dataset: str
    n: int
    max_tokens: int
    metric: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "lab": "interventions",
            "model": self.model,
            "dataset": self.dataset,
            "n": self.n,
            "max_tokens": self.max_tokens,
            "metric": self.metric,
            "rows": self.rows,
        }

    def value(self, intervention: str, pooling: str, quantity: str = "gap_pct") -> float:
        for row in self.rows:
            if row["intervention"] == intervention and row["pooling"] == pooling:
                return row[quantity]
        raise KeyError((intervention, pooling))


def intervention_table(
    model: str = "gemma3-270m",
    dataset: str = "bbc-news",
    *,
    n: int = 128,
    max_tokens: int = 128,
    seed: int = 0,
    metric: str = "cka",
    interventions: Sequence[str] = INTERVENTIONS,
    poolings: Sequence[str] = POOLINGS,
    revision: str | None = None,
    device: str | None = None,
    dtype: str | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    passages: str = "documents",
    bos: str = "default",
    B: int | None = 50,
) -> InterventionTable:
    """Measure every pooling control under each intervention (paper Table S6).

    Each intervention is its own cached run (`RunSpec.intervention`, the same entry that
    `measure(..., intervention=name)` reads and writes). Runs already in the cache are read;
    for the others the model is loaded once (not once per intervention: loading a GGUF costs
    more than a small extraction), checked for every requested intervention (an unsupported
    one raises before any forward pass), and extracted under each intervention.
    With "none" among the interventions and `B`, each other intervention's row also holds its
    gap's move against "none" (`delta_vs_none`, points) with its 95% interval from B bootstrap
    replicates, paired by passage (the same token ids: `run_pairs.run_difference`).
    """
    from deffcore.runs.measure import measure_spec, run_spec  # patched in tests

    for name in interventions:
        if name not in INTERVENTIONS:
            raise UnsupportedArchitectureError(
                f"Unknown norm intervention {name!r}; choose one of {', '.join(INTERVENTIONS)}."
            )
    base, device = run_spec(
        model, dataset, n, max_tokens, seed, metric, revision, device, dtype,
        passages=passages, bos=bos,
    )  # fmt: skip
    specs = {name: replace(base, intervention=name) for name in interventions}
    missing = {name for name, spec in specs.items() if cache.load(spec) is None}
    with contextlib.ExitStack() as held:  # one loaded model for every intervention
        loaded = None
        if missing:
            loaded = held.enter_context(
                lease(model, revision=revision, device=device, dtype=base.dtype,
                      progress=progress, total=len(interventions))
            )  # fmt: skip
            for name in interventions:  # refuse before any forward pass
                intervention_targets(loaded.model, name)
        table = InterventionTable(model, dataset, n, max_tokens, metric)
        results = {}
        for i, name in enumerate(specs):
            if progress is not None:
                progress(i, len(specs), f"intervention {name}")
            # a cached run is read; a missing one is extracted with the model loaded above
            result = results[name] = measure_spec(
                specs[name], metric=metric, device=device, loaded=loaded
            )
            table.rows += [_row(result, name, pooling, metric) for pooling in poolings]
        if B and "none" in results:
            _add_moves(table, results, metric, B, seed)
        if progress is not None:
            progress(len(specs), len(specs), "done")
        return table


def _add_moves(
    table: InterventionTable, results: dict[str, Any], metric: str, B: int, seed: int
) -> None:
    """Each other intervention's row gets its gap's move against "none" with its 95% interval,
    paired by passage when both runs hold the same passages (`run_pairs.run_difference`)."""
    for row in table.rows:
        runs = (results["none"], results[row["intervention"]])
        defined = all(r.undefined(row["pooling"]) is None for r in runs)
        if row["intervention"] != "none" and defined:
            d = run_difference(*runs, pooling=row["pooling"], metric=metric, B=B, seed=seed)
            row.update(delta_vs_none=d.delta, delta_interval=list(d.interval), paired=d.paired)


def _row(result: Any, name: str, pooling: str, metric: str) -> dict[str, Any]:
    """One row of the table: a pooling control's numbers under intervention `name`."""
    summary = result.summary(pooling)
    return {
        "intervention": name,
        "pooling": pooling,
        "layers": summary.layers,
        "deff": summary.deff,
        "deff_over_L": summary.deff_over_L,
        "gap_pct": summary.gap_pct,
        "rho1": summary.rho1,
        "n": result.n,
        # the trust rule's level: beside the paper's values, say how far to trust ours
        "trust": measurement_trust(result, pooling, metric).level,
    }


def paper_intervention_rows() -> list[dict[str, Any]]:
    """The paper's Table S6 values (Gemma-3-4B/12B gap%), for display beside a measurement.

    Returns dicts `model, intervention, pooling, gap_pct` (intervention as in `INTERVENTIONS`).
    """
    label_to_name = {label: name for name, label in PAPER_LABELS.items()}
    rows = []
    for rec in paper_rows("Table S6"):
        label = rec["note"].removeprefix("intervention: ").strip()
        if rec["quantity"] != "gap_pct" or label not in label_to_name:
            continue
        rows.append(
            {
                "model": rec["model"],
                "intervention": label_to_name[label],
                "pooling": rec["setting"],
                "gap_pct": float(rec["value"]),
            }
        )
    return rows
