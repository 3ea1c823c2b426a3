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
