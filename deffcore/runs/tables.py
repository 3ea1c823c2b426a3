"""Tables of one run's numbers that the pages show beside their charts (no Streamlit).

A *view* is a `deffcore.views.run.Run`: a measured run or a shipped snapshot, both answering
`headline(pooling, metric, K)`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from deffcore.core.constants import POOLINGS
from deffcore.core.errors import DeffError
from deffcore.inputs.model import ModelSpec

if TYPE_CHECKING:
    from deffcore.views.run import Run

#: The two similarity metrics the first page compares, with their names in words.
METRICS_COMPARED: tuple[tuple[str, str], ...] = (
    ("cka", "linear CKA"),
    ("unbiased_cka", "unbiased CKA"),
)


def metric_comparison(
    view: Run, pooling: str = "default", K: int | None = None
) -> list[dict[str, Any]] | None:
    """D_eff, D_eff/L, gap and rho_hat(1) under linear and unbiased CKA side by side (the first
    screen's answer to "is this the finite-sample bias?"), one row per metric; None when a
    snapshot lacks one. Plain rows, not a DataFrame: the first screen never imports pandas."""
    rows = []
    for metric, name in METRICS_COMPARED:
        try:
            h = view.headline(pooling, metric, K)
        except (KeyError, DeffError):
            return None
        rows.append(
            {
                "similarity": name,
                "D_eff": round(h.deff, 3),
                "D_eff / L": round(h.deff_over_L, 4),
                "gap to F_L (%)": round(h.gap_pct, 1),
                "ρ̂(1)": round(h.rho1, 3),
            }
        )
    return rows


def metric_difference(view: Run, pooling: str = "default", K: int | None = None) -> Any:
    """The paired difference D_eff/L(linear) - D_eff/L(unbiased) of one pooling (a
    `paired.PairedDifference`, SPEC 15: both metrics on the same bootstrap multisets), or None
    when the run's paired bootstrap lacks either metric for it."""
    pb = view.paired_bootstrap()
    if pb is None or not (pb.has(pooling, "cka") and pb.has(pooling, "unbiased_cka")):
        return None
    return pb.difference((pooling, "cka"), (pooling, "unbiased_cka"), K, scale="D_eff/L")


def model_row(view: Run, source: str, metric: str = "cka") -> dict[str, Any]:
    """One run (a `Run`: cached, precomputed or shared) as a Models-table row.

    Columns: source, model, family, weights, layers, d_model, n (kept passages), max_tokens,
    dataset, passages, bos, intervention, revision, seed, key; deff_over_L and gap_pct of the
    default pooling; gap_<pooling> per pooling control (NaN where a snapshot lacks it); trust
    (the trust rule's level of the default headline), trust_action, bias (linear CKA's
    d/(N+d)); spec (the run's fields, for `models_overview.label_rows`).
    """
    from deffcore.views.labels import SPEC_DEFAULTS
    from deffcore.views.models_overview import model_family

    spec = {**SPEC_DEFAULTS, **view.spec}
    h = view.headline("default", metric)
    trust = view.trust("default", metric)
    row: dict[str, Any] = {
        "source": source,
        "model": spec["model"],
        "family": model_family(str(spec["model"])),
        "weights": "random" if ModelSpec.stored(spec["model"]).is_random else "trained",
        "layers": view.layers,
        "d_model": view.d_model,
        "n": view.n,
        **{k: spec.get(k) for k in ("max_tokens", "dataset", "passages", "bos")},
        **{k: spec.get(k) for k in ("intervention", "revision", "seed")},
        "key": getattr(view, "key", None),
        "deff_over_L": h.deff_over_L,
        "gap_pct": h.gap_pct,
        "trust": trust.level,
        "trust_action": trust.action,
        "bias": h.cka_bias,
        "spec": dict(view.spec),
    }
    for p in POOLINGS:
        try:
            row[f"gap_{p}"] = view.headline(p, metric).gap_pct
        except (KeyError, DeffError):  # an older snapshot, or a control undefined here
            row[f"gap_{p}"] = float("nan")
    return row


def cached_model_row(meta: dict[str, Any], metric: str = "cka") -> dict[str, Any]:
    """One cached run (its cache meta) as a Models-table row (`model_row`), its numbers
    computed from its states. Raises DeffError when the entry cannot be read."""
    from deffcore.extraction import cache
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.runs.measure import Measurement
    from deffcore.views.run import Run

    spec = RunSpec(**meta["spec"])
    found = cache._read_entry(meta["key"])  # by key: the stored spec's key may predate a change
    if found is None:
        raise DeffError(f"The cached run {meta['key']} has no states.")
    view = Run.from_measurement(Measurement(spec=spec, pooled=found[0], metric=metric))
    return {**model_row(view, "cached", metric), "key": meta["key"], "created": meta.get("created")}


#: Where a measured row comes from, in the order one run is kept (a run cached here and
#: shipped precomputed is one run: its cached row stays).
MEASURED_SOURCES = ("cached", "shared", "precomputed")


def models_table(
    measured: list[dict[str, Any]], paper: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The Models table's rows: every measured run once (by key, `MEASURED_SOURCES` order),
    then the paper's models; each row gets a `label`: measured runs named by what tells them
    apart (`labels.run_labels`: two SmolLM2 runs differing only in their BOS option read
    `... BOS add` / `... BOS default`), the paper's as `<model> (paper)`."""
    from deffcore.views.labels import run_labels

    order = {s: i for i, s in enumerate(MEASURED_SOURCES)}
    kept: dict[Any, dict[str, Any]] = {}
    for row in sorted(measured, key=lambda r: order.get(r["source"], len(order))):
        kept.setdefault(row.get("key") or id(row), row)
    runs = list(kept.values())
    labels = run_labels([r["spec"] for r in runs])
    out = [{**r, "label": label} for r, label in zip(runs, labels, strict=True)]
    return out + [{**r, "label": f"{r['model']} (paper)"} for r in paper]
