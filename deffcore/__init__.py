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
# Engine re-exports follow (engine authors); pipeline and lab exports are added at integration.
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

__all__ += [
    "BootstrapResult",
    "DepthSummary",
    "MatchedReferences",
    "SyntheticStates",
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
    "update_depth",
    "update_states",
    "validate_states",
]
