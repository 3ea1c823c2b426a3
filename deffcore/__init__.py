"""deffcore: effective depth of a transformer's residual stream. The public API is this module.

    import deffcore as dc
    S = dc.similarity_matrix(states)          # (L, N, d) -> (L, L)
    dc.effective_depth(S), dc.reference_depth(L)

    m = dc.measure("smollm2-135m", n=512)     # a named model (cached on disk)
    m = dc.measure(model, tokenizer, texts)   # a model in memory (cache_id= to cache it)
    m = dc.measure_states(states, mask)       # h_0 .. h_L (N, T, d) computed elsewhere
    m.trust(), m.figure("heatmap")            # in Jupyter, `m` shows its summary
    run = dc.open_snapshot("run.json")        # a run someone shared (`measure --snapshot`)
    a = dc.atlas("smollm2-135m", n=512)       # the depth-use atlas beside D_eff (SPEC 16)

Every name users import is listed in `__all__` and imported from here (`dc.<name>`); where it
is defined is the library's business (docs/DESIGN.md draws the stages). The numpy-only engine
(depth, trust, synthetic states) is imported eagerly; what imports torch (the similarity
matrices, references, controls, bootstrap: a second or more) and the pipeline and the labs
(transformers: seconds) load on first use, so `import deffcore` stays light and the app's first
screen, drawn from a stored snapshot, imports neither.
"""

from __future__ import annotations

import importlib
from typing import Any

from deffcore.core.constants import (
    CODE_VERSION,
    EXTRACTED_POOLINGS,
    METRICS,
    PC_CONTROLS,
    POOLINGS,
)
from deffcore.core.errors import (
    CacheCorruptError,
    DeffError,
    HubUnavailableError,
    InvalidStatesError,
    NonFiniteActivationsError,
    OutOfMemoryError,
    TooFewPassagesError,
    UnknownDatasetError,
    UnknownModelError,
    UnsupportedArchitectureError,
)
from deffcore.measures import synthetic
from deffcore.measures.depth import (
    DepthSummary,
    depth_summary,
    effective_depth,
    gap_percent,
    lag_profile,
    lag_sensitivity,
    reference_depth,
)
from deffcore.measures.synthetic import (
    SyntheticStates,
    independent_states,
    orthogonal_states,
    orthogonal_updates,
)
from deffcore.statistics.trust_rule import Trust, trust, trust_badge

#: Names loaded on first use: {public name: the module that defines it}.
_LAZY: dict[str, str] = {
    # the engine's torch part: similarity matrices, references, PC controls, the bootstrap
    "similarity_matrix": "deffcore.measures.similarity",
    "naive_similarity_matrix": "deffcore.measures.similarity",
    "cka_finite_sample_bias": "deffcore.measures.similarity",
    "validate_states": "deffcore.measures.similarity",
    "MatchedReferences": "deffcore.measures.references",
    "UpdateDepth": "deffcore.measures.references",
    "accumulated_similarity": "deffcore.measures.references",
    "iid_reference_depth": "deffcore.measures.references",
    "matched_references": "deffcore.measures.references",
    "update_depth": "deffcore.measures.references",
    "update_states": "deffcore.measures.references",
    "apply_pc_control": "deffcore.measures.controls",
    "remove_top_pcs": "deffcore.measures.controls",
    "BootstrapResult": "deffcore.statistics.bootstrap",
    "bootstrap_deff_over_L": "deffcore.statistics.bootstrap",
    "bootstrap": "deffcore.statistics.bootstrap",
    # a run, from a named model, a model in memory or states computed elsewhere
    "measure": "deffcore.runs.measure",
    "measure_states": "deffcore.runs.measure",
    "Measurement": "deffcore.runs.measure",
    "RunSpec": "deffcore.inputs.run_spec",
    "list_runs": "deffcore.extraction.cache",
    # the table across similarity measures (SPEC 17.4)
    "measure_table": "deffcore.statistics.measure_table",
    "MeasureTable": "deffcore.statistics.measure_table",
    # shared runs
    "open_snapshot": "deffcore.views.sharing",
    "read_snapshot": "deffcore.views.sharing",
    # models and texts
    "load_model": "deffcore.inputs.model",
    "LoadedModel": "deffcore.inputs.model",
    "PACKAGED_MODELS": "deffcore.inputs.model",
    "TINY_MODELS": "deffcore.inputs.model",
    "architecture_of": "deffcore.inputs.architecture",
    "base_model": "deffcore.inputs.architecture",
    "decoder_layers": "deffcore.inputs.architecture",
    "final_norm": "deffcore.inputs.architecture",
    "model_identity": "deffcore.inputs.model",
    "load_passages": "deffcore.inputs.texts",
    "dataset_identity": "deffcore.inputs.texts",
    "norm_intervention": "deffcore.inputs.interventions",
    # extraction
    "extract_pooled": "deffcore.extraction.forward",
    "PooledStates": "deffcore.extraction.forward",
    # further lenses and the labs
    "correlate": "deffcore.measures.correlation",
    "Correlation": "deffcore.measures.correlation",
    "gw_matrix": "deffcore.measures.gw",
    "gw_distance": "deffcore.measures.gw",
    "geodesic_efficiency": "deffcore.measures.geometry",
    "TrajectoryGeometry": "deffcore.measures.geometry",
    "intervention_table": "deffcore.labs.interventions",
    "block_influence": "deffcore.labs.pruning",
    "local_delta_deff": "deffcore.labs.pruning",
    "perplexity": "deffcore.labs.pruning",
    "skip_blocks": "deffcore.labs.pruning",
    "pruning_check": "deffcore.labs.pruning",
    "run_carry_sweep": "deffcore.labs.residual_carry",
    "dynamics_sweep": "deffcore.labs.dynamics",
    "aggregation_table": "deffcore.labs.aggregations",
    "gw_lens": "deffcore.labs.gw_lens",
    "GwOptions": "deffcore.labs.gw_lens",
    "pretrain_probe": "deffcore.labs.pretrain",
    # the depth-use atlas (SPEC section 16)
    "atlas": "deffcore.lenses.atlas",
    "atlas_states": "deffcore.lenses.atlas",
    "Atlas": "deffcore.measures.atlas",
    "SkipEffect": "deffcore.measures.atlas",
}

__all__ = [
    "CODE_VERSION",
    "EXTRACTED_POOLINGS",
    "METRICS",
    "PC_CONTROLS",
    "POOLINGS",
    "CacheCorruptError",
    "DeffError",
    "DepthSummary",
    "HubUnavailableError",
    "InvalidStatesError",
    "NonFiniteActivationsError",
    "OutOfMemoryError",
    "SyntheticStates",
    "TooFewPassagesError",
    "Trust",
    "UnknownDatasetError",
    "UnknownModelError",
    "UnsupportedArchitectureError",
    "depth_summary",
    "effective_depth",
    "gap_percent",
    "independent_states",
    "lag_profile",
    "lag_sensitivity",
    "orthogonal_states",
    "orthogonal_updates",
    "reference_depth",
    "synthetic",
    "trust",
    "trust_badge",
    *sorted(_LAZY),
]


#: Public names that are another name of their module: the passage bootstrap of D_eff/L (SPEC
#: section 8) is `bootstrap`, `bootstrap_deff_over_L` its long name.
_ALIASES: dict[str, str] = {"bootstrap": "bootstrap_deff_over_L"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), _ALIASES.get(name, name))
        globals()[name] = value
        return value
    raise AttributeError(f"module 'deffcore' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
