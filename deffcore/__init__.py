"""deffcore: effective depth of a transformer's residual stream.

    import deffcore as dc
    S = dc.similarity_matrix(states)          # (L, N, d) -> (L, L)
    dc.effective_depth(S), dc.reference_depth(L)

The public API is re-exported here; see docs/DESIGN.md for the module map.
"""

from deffcore.constants import CODE_VERSION, EXTRACTED_POOLINGS, METRICS, PC_CONTROLS, POOLINGS
from deffcore.errors import (
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

__all__ = [
    "CODE_VERSION",
    "EXTRACTED_POOLINGS",
    "METRICS",
    "PC_CONTROLS",
    "POOLINGS",
    "CacheCorruptError",
    "DeffError",
    "HubUnavailableError",
    "InvalidStatesError",
    "NonFiniteActivationsError",
    "OutOfMemoryError",
    "TooFewPassagesError",
    "UnknownDatasetError",
    "UnknownModelError",
    "UnsupportedArchitectureError",
]
# The engine is imported eagerly (numpy + torch only).
from deffcore import synthetic
from deffcore.bootstrap import BootstrapResult, bootstrap_deff_over_L
from deffcore.controls import apply_pc_control, remove_top_pcs
from deffcore.depth import (
    DepthSummary,
    depth_summary,
    effective_depth,
    gap_percent,
    lag_profile,
    lag_sensitivity,
    reference_depth,
)
from deffcore.references import (
    MatchedReferences,
    UpdateDepth,
    accumulated_similarity,
    iid_reference_depth,
    matched_references,
    update_depth,
    update_states,
)
from deffcore.similarity import (
    cka_finite_sample_bias,
    naive_similarity_matrix,
    similarity_matrix,
    validate_states,
)
from deffcore.synthetic import (
    SyntheticStates,
    independent_states,
    orthogonal_states,
    orthogonal_updates,
)
from deffcore.trust_rule import Trust, trust, trust_badge

__all__ += [
    "BootstrapResult",
    "DepthSummary",
    "MatchedReferences",
    "SyntheticStates",
    "Trust",
    "UpdateDepth",
    "accumulated_similarity",
    "apply_pc_control",
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
]

# The pipeline and the labs import transformers (seconds); they load on first attribute access,
# so `import deffcore` stays light for the engine, the synthetic CLI and the synthetic lab.
_LAZY: dict[str, str] = {
    "measure": "deffcore.measurement",
    "Measurement": "deffcore.measurement",
    "load_model": "deffcore.models",
    "LoadedModel": "deffcore.models",
    "PACKAGED_MODELS": "deffcore.models",
    "TINY_MODELS": "deffcore.models",
    "base_model": "deffcore.models",
    "decoder_layers": "deffcore.models",
    "final_norm": "deffcore.models",
    "model_identity": "deffcore.models",
    "load_passages": "deffcore.texts",
    "dataset_identity": "deffcore.texts",
    "extract_pooled": "deffcore.extract",
    "PooledStates": "deffcore.extract",
    "RunSpec": "deffcore.cache",
    "list_runs": "deffcore.cache",
    "norm_intervention": "deffcore.labs.interventions",
    "intervention_table": "deffcore.labs.interventions",
    "block_influence": "deffcore.labs.pruning",
    "local_delta_deff": "deffcore.labs.pruning",
    "perplexity": "deffcore.labs.pruning",
    "skip_blocks": "deffcore.labs.pruning",
    "pruning_check": "deffcore.labs.pruning",
    "run_carry_sweep": "deffcore.labs.residual_carry",
    "dynamics_sweep": "deffcore.labs.dynamics",
    "aggregation_table": "deffcore.labs.aggregations",
}
__all__ += sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'deffcore' has no attribute {name!r}")
