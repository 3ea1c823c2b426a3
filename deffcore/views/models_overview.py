"""The Models overview: the paper's models as rows of a table, and the family of any model.

`model_family` is the one family label of a model spec (every page uses it): the paper's
family names (`FAMILIES`, first match wins), "random-weight null" for a `random:<m>:<seed>`
spec, "other" for a name no family matches. A measured run's row is
`deffcore.runs.tables.model_row` (it needs the run, which this module stays below: the
notebook's gap figure labels its bars with `model_family`), and `run_tables.models_table` joins
them with the paper's rows, one run once, each labelled by what tells it apart. Columns are
added to a row in one place (`paper_models` or `run_tables.model_row`).
"""

from __future__ import annotations

from typing import Any

from deffcore.inputs.model import ModelSpec
from deffcore.views.comparisons import PAPER_DATASET, PAPER_N

#: Family of a model, from its name (first match wins); the Models page colours by it.
FAMILIES: tuple[tuple[str, str], ...] = (
    ("pythia", "Pythia"),
    ("olmo", "OLMo-2"),
    ("qwen", "Qwen"),
    ("llama", "Llama"),
    ("mistral", "Mistral"),
    ("gemma", "Gemma"),
    ("smollm", "SmolLM2"),
    ("gpt2", "GPT-2"),
    ("gptneox", "GPT-NeoX"),
)


#: The family of every random-weight null (`random:<model>:<seed>`).
RANDOM_FAMILY = "random-weight null"


def model_family(name: str) -> str:
    """The one family label of a model spec, the same on every page.

    'random:tiny-llama:0' -> 'random-weight null' (a fresh init measures no trained family),
    'EleutherAI/pythia-70m' and 'Pythia-70M' -> 'Pythia' (first match of `FAMILIES` in the
    lower-cased name), a name no family matches -> 'other'.
    """
    if ModelSpec.stored(name).is_random:
        return RANDOM_FAMILY
    low = name.lower()
    return next((family for key, family in FAMILIES if key in low), "other")


def _num(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


#: Where a model's published gaps per pooling come from (Table S4 and S5 first; Table S6 is the
#: only one that publishes Gemma-3-12B: its "intervention: none" rows).
GAP_TABLES: tuple[str, ...] = ("Table 2", "Table S4", "Table S5", "Table S6", "Table S17")


def _no_intervention(row: dict[str, str]) -> bool:
    """Whether a paper row measures the model as published (Table S6 also has its norm
    interventions, which are other settings, not this model's gap)."""
    return (row.get("note") or "").strip() in ("", "intervention: none")


def paper_models() -> list[dict[str, Any]]:
    """The paper's models with their published depth numbers, one row per model.

    Columns: source ("paper"), model, family, weights ("trained"), layers, d_model,
    deff_over_L, gap_pct (default pooling), gap_<pooling> per pooling control where published,
    random_mean / random_low / random_high (the random-weight null's D_eff/L where published),
    table (where D_eff/L comes from). D_eff/L is taken from Table 2, else Table S13, S15, S17,
    Table 1 (in that order: the first table that publishes it); gap per pooling from Table S4,
    else S5, else the other `GAP_TABLES` (Table S6 without intervention: Gemma-3-12B, which
    publishes no D_eff/L); the null from Table S10 (mean, min, max), else Table 1 (one value).
    """
    from deffcore.views.paper import paper_rows

    order = ("Table 2", "Table S13", "Table S15", "Table S17", "Table 1")
    models: dict[str, dict[str, Any]] = {}
    for r in paper_rows():
        name = r["model"]
        if "(" in name:  # "Gemma-3-4B (random init)", "nanoGPT-12L (residual carry)": not a model
            continue
        q, value, src = r["quantity"], _num(r["value"]), r["source"]
        m = models.setdefault(
            name,
            {"source": "paper", "model": name, "family": model_family(name), "weights": "trained"},
        )
        if r["layers"] and m.get("layers") is None:
            m["layers"] = int(float(r["layers"]))
        if value is None:
            continue
        if q == "d_model":
            m["d_model"] = int(value)
        elif q in ("deff_over_L", "deff_over_L_trained") and src in order:
            if m.get("table") is None or order.index(src) < order.index(m["table"]):
                m["deff_over_L"], m["table"] = value, src
        elif q == "gap_pct" and src in GAP_TABLES and _no_intervention(r):
            key = f"gap_{r['setting']}"
            if src in ("Table S4", "Table S5") or key not in m:
                m[key] = value
        elif src == "Table S10" and q.startswith("deff_over_L_random_"):
            m[
                {"mean": "random_mean", "min": "random_low", "max": "random_high"}[
                    q.rsplit("_", 1)[1]
                ]
            ] = value
        elif src == "Table 1" and q == "deff_over_L_random":
            m.setdefault("random_mean", value)
    rows = [m for m in models.values() if m.get("deff_over_L") is not None or "gap_default" in m]
    for m in rows:
        m["gap_pct"] = m.get("gap_default")
        m["n"], m["dataset"], m["trust"] = PAPER_N, PAPER_DATASET, "published"
        m["bias"] = m["d_model"] / (PAPER_N + m["d_model"]) if m.get("d_model") else None
    return sorted(rows, key=lambda m: (m["family"], m.get("layers") or 0, m["model"]))


#: Depth of the paper's models whose rows give no L (Gemma-3: Tables S5 and S6 publish gaps
#: alone): `num_hidden_layers` of each model's published config.
CONFIG_LAYERS: dict[str, int] = {"Gemma-3-4B": 34, "Gemma-3-12B": 48, "Gemma-3-27B": 62}

#: What `table` says for a D_eff/L derived by `with_config_depth`.
DERIVED_FROM = "derived: L from the model's config, D_eff/L = F_L(1 − gap/100)/L"


def with_config_depth(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`paper_models` rows for display, a paper model without a published L given its config's
    (`CONFIG_LAYERS`) and, without a published D_eff/L, the one its published default gap
    implies (SPEC section 4: gap = 100(1 − D_eff/F_L), F_L = 2L/(L+1)), marked in `table`
    (`DERIVED_FROM`). Copies; the published rows themselves stay as the paper gives them."""
    from deffcore.measures.depth import reference_depth

    out = []
    for m in rows:
        m = dict(m)
        if m.get("layers") is None and m.get("model") in CONFIG_LAYERS:
            m["layers"] = CONFIG_LAYERS[m["model"]]
            gap = m.get("gap_default")
            if m.get("deff_over_L") is None and gap is not None:
                L = m["layers"]
                m["deff_over_L"] = reference_depth(L) * (1 - gap / 100) / L
                m["table"] = DERIVED_FROM
        out.append(m)
    return out
