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
is defined is the library's business (docs/DESIGN.md draws the stages). The engine (numpy and
torch only) is imported eagerly; the pipeline and the labs import transformers (seconds), so
they load on first use and `import deffcore` stays light.
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
from deffcore.measures.controls import apply_pc_control, remove_top_pcs
from deffcore.measures.depth import (
    DepthSummary,
    depth_summary,
    effective_depth,
    gap_percent,
    lag_profile,
    lag_sensitivity,
    reference_depth,
)
from deffcore.measures.references import (
    MatchedReferences,
    UpdateDepth,
    accumulated_similarity,
    iid_reference_depth,
    matched_references,
    update_depth,
    update_states,
)
from deffcore.measures.similarity import (
    cka_finite_sample_bias,
    naive_similarity_matrix,
    similarity_matrix,
    validate_states,
)
from deffcore.measures.synthetic import (
    SyntheticStates,
    independent_states,
    orthogonal_states,
    orthogonal_updates,
)
from deffcore.statistics.bootstrap import BootstrapResult, bootstrap_deff_over_L
from deffcore.statistics.trust_rule import Trust, trust, trust_badge

#: The passage bootstrap of D_eff/L (SPEC section 8); `bootstrap_deff_over_L` is its long name.
bootstrap = bootstrap_deff_over_L

#: Names loaded on first use: {public name: the module that defines it}.
_LAZY: dict[str, str] = {
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
    "BootstrapResult",
    "CacheCorruptError",
    "DeffError",
    "DepthSummary",
    "HubUnavailableError",
    "InvalidStatesError",
    "MatchedReferences",
    "NonFiniteActivationsError",
    "OutOfMemoryError",
    "SyntheticStates",
    "TooFewPassagesError",
    "Trust",
    "UnknownDatasetError",
    "UnknownModelError",
    "UnsupportedArchitectureError",
    "UpdateDepth",
    "accumulated_similarity",
    "apply_pc_control",
    "bootstrap",
    "bootstrap_deff_over_L",
    "cka_finite_sample_bias",
    "depth_summary",
    "effective_depth",
    "gap_percent",
    "iid_reference_depth",
    "independent_states",
    "lag_profile",
    "lag_sensitivity",
    "matched_references",
    "naive_similarity_matrix",
    "orthogonal_states",
    "orthogonal_updates",
    "reference_depth",
    "remove_top_pcs",
    "similarity_matrix",
    "synthetic",
    "trust",
    "trust_badge",
    "update_depth",
    "update_states",
    "validate_states",
    *sorted(_LAZY),
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'deffcore' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
