"""One run's effective depth under every similarity measure, side by side (SPEC section 17.4).

    table = measure_table(m.states("default"), B=20)   # or `Measurement.measure_table`
    table.rows[0].deff_over_L, table.rows[0].low, table.rows[0].regime, table.rows[0].cal

Per measure (the run's metrics of section 3, then the measures of section 17), on the pooled
states h_1 .. h_L of one pooling (the headline's states):

    D_eff/L     section 4 on the measure's (L, L) matrix (`similarity_matrix` for cka,
                unbiased_cka and cosine; `measure_matrix` for the others)
    gap%        100 (1 - D_eff / F_L)
    low, high   the percentile interval of D_eff/L over B passage-bootstrap replicates, ONE set
                of resampling indices for every measure (`bootstrap.resample_indices(N, B,
                seed)`: the same draws as the run's own bootstrap of that B and seed)
    regime      `trust_rule.regime_of` of the gap and its interval: "below" (sub-reference,
                D_eff < F_L), "above", or "at the reference" (the gap's interval holds 0)
    cal         D_eff/L of S_cal, the matrix calibrated against its own permutation null
                (section 17.3, `permutations` seeded permutations); None for unbiased_cka and
                cosine, which have no null there

A replicate of linear / unbiased CKA and cosine is section 8's. For the section 17 measures it
is the measure of the resampled rows (copies included, as linear CKA), except that a passage's
copies are never its neighbours (mutual_knn, cknna) and the RDM entries between copies are
left out (rsa): a copy is at cosine 1 and distance 0 from itself in every layer, which would
otherwise count as agreement the layers do not have (the rule unbiased CKA's replicate follows,
section 8). A measure undefined on these states (a zero vector, a strongly negative profile) has
a row with its reason and no numbers.

Cost: per section 17 measure, B + 1 + `permutations` all-pairs pair steps (each layer prepared
B + 1 times); BENCHMARKS.md "Similarity measures beside CKA" gives the times.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from deffcore.core.constants import METRICS, TABLE_MEASURES
from deffcore.core.errors import DeffError, InvalidArgumentError
from deffcore.measures.depth import effective_depth, gap_percent, reference_depth
from deffcore.measures.similarity import _validated, similarity_matrix
from deffcore.measures.similarity_measures import (
    MEASURES,
    MeasureOptions,
    measure_matrix,
    pairs_matrix,
    prepare_layers,
)
from deffcore.statistics.bootstrap import (
    bootstrap_similarities,
    check_b,
    percentile_interval,
    resample_indices,
)
from deffcore.statistics.calibration import calibrated_similarity, check_permutations
from deffcore.statistics.trust_rule import gap_of, regime_of

#: Default bootstrap replicates of the table (modest: each is a whole matrix per measure).
DEFAULT_B = 20
#: Default permutations of the calibrated column (the fewest whose 95% threshold is not the
#: largest of the observed and the null values, which would make S_cal 0 everywhere).
DEFAULT_PERMUTATIONS = 19
#: Readable names of the measures, for tables.
MEASURE_LABELS: dict[str, str] = {
    "cka": "linear CKA",
    "unbiased_cka": "unbiased CKA",
    "cosine": "cosine",
    "procrustes": "orthogonal Procrustes",
    "mutual_knn": "mutual kNN",
    "cknna": "CKNNA",
    "rsa": "RSA (Spearman)",
    "svcca": "SVCCA",
    "pwcca": "PWCCA",
}


@dataclass
class MeasureRow:
    """One measure's row of the table (SPEC 17.4); numbers None when `undefined` says why."""

    measure: str
    deff: float | None = None
    deff_over_L: float | None = None
    gap_pct: float | None = None
    low: float | None = None
    high: float | None = None
    gap_low: float | None = None
    gap_high: float | None = None
    regime: str | None = None
    cal: float | None = None
    seconds: float = 0.0
    undefined: str | None = None
    caveat: str | None = None

    @property
    def sub_reference(self) -> bool | None:
        """Whether D_eff lies below F_L with the interval's backing (regime "below")."""
        return None if self.regime is None else self.regime == "below"


@dataclass
class MeasureTable:
    """D_eff/L, gap to F_L, bootstrap interval, regime and the calibrated D_eff/L per measure."""

    layers: int
    n: int
    d: int
    B: int
    seed: int
    ci: float
    permutations: int
    alpha: float
    rows: list[MeasureRow] = field(default_factory=list)
    #: each defined row's (L, L) point-estimate matrix, by measure (not part of `to_dict`:
    #: a run keeps them beside its tables, `runs.measure.keep_measure_matrix`)
    matrices: dict[str, np.ndarray] = field(default_factory=dict, repr=False, compare=False)

    @property
    def reference_FL(self) -> float:
        return reference_depth(self.layers)

    def row(self, measure: str) -> MeasureRow:
        for r in self.rows:
            if r.measure == measure:
                return r
        raise InvalidArgumentError(
            f"The table has no row for {measure!r}; it holds "
            f"{', '.join(r.measure for r in self.rows)}."
        )

    def to_dict(self) -> dict[str, Any]:
        out = {
            k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("rows", "matrices")
        }
        out["reference_FL"] = self.reference_FL
        out["rows"] = [{**asdict(r), "sub_reference": r.sub_reference} for r in self.rows]
        return out

    @classmethod
    def from_dict(cls, data: Any) -> MeasureTable:
        """A table back from `to_dict` (a kept file); one sentence when it is not one."""
        try:
            head = {k: data[k] for k in ("layers", "n", "d", "B", "seed", "ci")}
            head.update(permutations=data["permutations"], alpha=data["alpha"])
            rows = []
            for r in data["rows"]:
                known = {k: r[k] for k in MeasureRow.__dataclass_fields__ if k in r}
                if known.get("measure") not in TABLE_MEASURES:
                    raise ValueError
                rows.append(MeasureRow(**known))
            table = cls(
                **{k: (float(v) if k in ("ci", "alpha") else int(v)) for k, v in head.items()},
                rows=rows,
            )
            ok = table.layers >= 2 and table.n >= 4 and table.B >= 2 and table.permutations >= 1
            if not (ok and 0.0 < table.ci < 1.0 and 0.0 < table.alpha < 1.0):
                raise ValueError("a setting out of range")
        except (KeyError, TypeError, ValueError, OverflowError) as err:
            raise DeffError(f"Not a measure table: {err!r}.") from None
        return table

    def head(self) -> tuple[str, ...]:
        """Column names of `display_rows`."""
        ci = round(100 * self.ci)
        return (
            "measure",
            "D_eff/L",
            f"{ci}% interval (B = {self.B})",
            "gap to F_L (%)",
            "regime",
            "sub-reference",
            f"calibrated D_eff/L ({self.permutations} perm.)",
        )

    def display_rows(self) -> list[list[str]]:
        """One row of text per measure (the report, the notebook and the page show these)."""
        out = []
        for r in self.rows:
            name = MEASURE_LABELS.get(r.measure, r.measure)
            if r.undefined is not None:
                out.append([name, "undefined", r.undefined, "", "", "", ""])
                continue
            out.append(
                [
                    name,
                    f"{r.deff_over_L:.4f}",
                    f"[{r.low:.4f}, {r.high:.4f}]",
                    f"{r.gap_pct:+.1f}",
                    str(r.regime),
                    "yes" if r.sub_reference else "no",
                    "—" if r.cal is None else f"{r.cal:.4f}",
                ]
            )
        return out

    def caption(self) -> str:
        """What the table is, in one paragraph (each row's caveat last)."""
        notes = "".join(
            f" {MEASURE_LABELS.get(r.measure, r.measure)}: {r.caveat}."
            for r in self.rows
            if r.caveat
        )
        return (
            f"Pooled states h_1..h_L, L = {self.layers}, N = {self.n}, d = {self.d}; "
            f"F_L/L = {self.reference_FL / self.layers:.4f} (sub-reference: D_eff/L below it, "
            f"the gap's interval clear of 0). Interval: passage bootstrap, the same "
            f"{self.B} resamples for every measure (seed {self.seed}). Calibrated: D_eff/L of "
            f"S_cal against {self.permutations} passage permutations (alpha {self.alpha}; "
            "SPEC 17.3); none for unbiased CKA and cosine." + notes
        )

    def frame(self) -> Any:
        """One row per measure with every number (a pandas DataFrame; None where undefined)."""
        import pandas as pd

        d = self.to_dict()["rows"]
        return pd.DataFrame(d).drop(columns=["seconds"])

    def _repr_html_(self) -> str:
        """The table in a notebook (`display_rows`, every cell escaped)."""
        import html

        e = html.escape
        top = "".join(f"<th>{e(h)}</th>" for h in self.head())
        body = "".join(
            "<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>" for r in self.display_rows()
        )
        return f"<table><tr>{top}</tr>{body}</table><p>{e(self.caption())}</p>"

    def text(self) -> str:
        """The table as fixed-width text (the CLI prints it)."""
        ci = round(100 * self.ci)
        lines = [
            f"measures: L = {self.layers}, N = {self.n}, d = {self.d}, F_L/L = "
            f"{self.reference_FL / self.layers:.4f}; {ci}% passage bootstrap B = {self.B} "
            f"(seed {self.seed}), calibrated against {self.permutations} permutations "
            f"(alpha {self.alpha})",
            f"{'measure':<22}{'D_eff/L':>9}{'interval':>20}{'gap%':>8}  {'regime':<17}"
            f"{'cal D/L':>8}",
        ]
        for r in self.rows:
            name = MEASURE_LABELS.get(r.measure, r.measure)
            if r.undefined is not None:
                lines.append(f"{name:<22}{'undefined':>9}  {r.undefined}")
                continue
            interval = f"[{r.low:.4f}, {r.high:.4f}]"
            cal = "—" if r.cal is None else f"{r.cal:.4f}"
            lines.append(
                f"{name:<22}{r.deff_over_L:>9.4f}{interval:>20}{r.gap_pct:>8.1f}  "
                f"{r.regime:<17}{cal:>8}{'  *' if r.caveat else ''}"
            )
        lines += [f"* {MEASURE_LABELS.get(r.measure, r.measure)}: {r.caveat}." for r in self.rows
                  if r.caveat]  # fmt: skip
        return "\n".join(lines)


def _check_measures(measures: Sequence[str]) -> tuple[str, ...]:
    if isinstance(measures, str):
        measures = (measures,)
    out = tuple(dict.fromkeys(measures))
    bad = [m for m in out if m not in TABLE_MEASURES]
    if bad or not out:
        raise InvalidArgumentError(
            f"Unknown similarity measure {bad[0] if bad else ''!r}; choose from "
            f"{', '.join(TABLE_MEASURES)}."
        )
    return out


def _matrix(x: Any, measure: str, opts: MeasureOptions, groups: Any = None) -> np.ndarray:
    if measure in METRICS:
        return similarity_matrix(x, measure)
    if groups is None:
        return measure_matrix(x, measure, **asdict(opts))
    return pairs_matrix(prepare_layers(x, measure, opts, groups=groups), measure, opts)


def measure_similarity(states: Any, measure: str, *, k: int = 10) -> np.ndarray:
    """The (L, L) point-estimate matrix of `measure` on (L, N, d) pooled states h_1 .. h_L: the
    matrix whose D_eff is the table's row (`measure_table`'s D_eff/L times L, same `k`); SPEC
    17.4. One all-pairs pass, none of the row's B + `permutations` further ones."""
    (measure,) = _check_measures(measure)
    return _matrix(_validated(states, min_passages=4), measure, MeasureOptions(k=k))


def _replicates(x: Any, measure: str, indices: np.ndarray, opts: MeasureOptions) -> list[Any]:
    if measure in METRICS:
        return bootstrap_similarities(x, indices, measure)
    return [_matrix(x[:, idx], measure, opts, groups=idx) for idx in indices]


def measure_row(
    x: Any,
    measure: str,
    indices: np.ndarray,
    *,
    ci: float = 0.95,
    permutations: int = DEFAULT_PERMUTATIONS,
    alpha: float = 0.05,
    seed: int = 0,
    opts: MeasureOptions | None = None,
    matrices: dict[str, np.ndarray] | None = None,
) -> MeasureRow:
    """One measure's row from (L, N, d) states and the (B, N) resampling indices (module doc);
    a defined row's point-estimate matrix goes into `matrices[measure]` when given."""
    opts = opts or MeasureOptions()
    start = time.perf_counter()
    n_layers, n = int(x.shape[0]), int(x.shape[1])
    try:
        S = _matrix(x, measure, opts)
        deff = effective_depth(S)
        samples = np.array(
            [effective_depth(s) / n_layers for s in _replicates(x, measure, indices, opts)]
        )
        cal = None
        if measure in MEASURES:
            cal = calibrated_similarity(
                x, measure, permutations=permutations, alpha=alpha, seed=seed, **asdict(opts)
            ).deff_cal
            cal /= n_layers
    except DeffError as err:
        return MeasureRow(measure, undefined=str(err), seconds=time.perf_counter() - start)
    if matrices is not None:  # a defined row's only: an undefined row has no point estimate
        matrices[measure] = S
    caveat = None
    if measure in ("svcca", "pwcca") and n - 1 <= int(x.shape[2]):
        caveat = (
            f"N - 1 = {n - 1} <= d = {int(x.shape[2])}: two layers spanning (nearly) all N - 1 "
            "centred directions have canonical correlations of 1 by construction, so this "
            "row reflects N more than the layers"
        )
    low, high = percentile_interval(samples, ci)
    gap = gap_percent(deff, n_layers)
    gap_range = (gap_of(high, n_layers), gap_of(low, n_layers))
    return MeasureRow(
        measure=measure,
        deff=deff,
        deff_over_L=deff / n_layers,
        gap_pct=gap,
        low=low,
        high=high,
        gap_low=gap_range[0],
        gap_high=gap_range[1],
        regime=regime_of(gap, gap_range),
        cal=None if cal is None else float(cal),
        seconds=time.perf_counter() - start,
        caveat=caveat,
    )


def measure_table(
    states: Any,
    measures: Sequence[str] = TABLE_MEASURES,
    *,
    B: int = DEFAULT_B,
    seed: int = 0,
    ci: float = 0.95,
    permutations: int = DEFAULT_PERMUTATIONS,
    alpha: float = 0.05,
    k: int = 10,
    progress: Callable[[str, int, int], None] | None = None,
) -> MeasureTable:
    """The table across `measures` (SPEC 17.4) of (L, N, d) pooled states h_1 .. h_L.

    B: bootstrap replicates (one set of indices, `resample_indices(N, B, seed)`, for every
    measure); permutations, alpha: the calibrated column's null (section 17.3, seeded by
    `seed`); k: neighbours of mutual_knn and cknna. progress(measure, done, total) is called
    before each measure.
    """
    measures = _check_measures(measures)
    if not 0.0 < float(ci) < 1.0:
        raise InvalidArgumentError(f"ci must lie strictly between 0 and 1; got {ci!r}.")
    x = _validated(states, min_passages=4)
    n_layers, n, d = (int(v) for v in x.shape)
    B = check_b(B, n=n, layers=n_layers)
    check_permutations(permutations, n=n, layers=n_layers)
    indices = resample_indices(n, B, seed)
    opts = MeasureOptions(k=k)
    table = MeasureTable(n_layers, n, d, B, seed, float(ci), permutations, float(alpha))
    for i, measure in enumerate(measures):
        if progress is not None:
            progress(measure, i, len(measures))
        table.rows.append(
            measure_row(
                x,
                measure,
                indices,
                ci=ci,
                permutations=permutations,
                alpha=alpha,
                seed=seed,
                opts=opts,
                matrices=table.matrices,
            )
        )
    return table
