"""deffcore: effective depth of a transformer's residual stream.

    import deffcore as dc
    S = dc.similarity_matrix(states)          # (L, N, d) -> (L, L)
    dc.effective_depth(S), dc.reference_depth(L)

    m = dc.measure("smollm2-135m", n=512)     # a named model (cached on disk)
    m = dc.measure(model, tokenizer, texts)   # a model in memory (cache_id= to cache it)
    m = dc.measure_states(states, mask)       # h_0 .. h_L (N, T, d) computed elsewhere
    m.trust(), m.figure("heatmap")            # in Jupyter, `m` shows its summary
    run = dc.open_snapshot("run.json")        # a run someone shared (`measure --snapshot`)

The public API is re-exported here; see docs/DESIGN.md for the module map.
"""

from deffcore.core.constants import CODE_VERSION, EXTRACTED_POOLINGS, METRICS, PC_CONTROLS, POOLINGS
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
    "measure": "deffcore.runs.measure",
    "Measurement": "deffcore.runs.measure",
    "measure_states": "deffcore.runs.measure",
    "open_snapshot": "deffcore.views.sharing",
    "read_snapshot": "deffcore.views.sharing",
    "load_model": "deffcore.inputs.loading",
    "LoadedModel": "deffcore.inputs.loading",
    "PACKAGED_MODELS": "deffcore.inputs.loading",
    "TINY_MODELS": "deffcore.inputs.loading",
    "base_model": "deffcore.inputs.loading",
    "decoder_layers": "deffcore.inputs.loading",
    "final_norm": "deffcore.inputs.loading",
    "model_identity": "deffcore.inputs.loading",
    "load_passages": "deffcore.inputs.texts",
    "dataset_identity": "deffcore.inputs.texts",
    "extract_pooled": "deffcore.extraction.forward",
    "PooledStates": "deffcore.extraction.forward",
    "RunSpec": "deffcore.extraction.cache",
    "list_runs": "deffcore.extraction.cache",
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
    "correlate": "deffcore.measures.correlation",
    "Correlation": "deffcore.measures.correlation",
    "gw_matrix": "deffcore.measures.gw",
    "gw_distance": "deffcore.measures.gw",
    "geodesic_efficiency": "deffcore.measures.geometry",
    "TrajectoryGeometry": "deffcore.measures.geometry",
    "gw_lens": "deffcore.labs.gw_lens",
    "pretrain_probe": "deffcore.labs.pretrain",
}
__all__ += sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'deffcore' has no attribute {name!r}")
