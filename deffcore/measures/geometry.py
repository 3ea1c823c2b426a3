"""Trajectory geometry of the layers (paper Figure S6): how straight is the path h_1 .. h_L?

The paper plots D_eff/L against a "geodesic efficiency" without defining it; SPEC section 13
defines it as the straightness index of movement ecology (Batschelet 1981; Benhamou 2004):
distance from start to end over the length of the path, 1 for a straight path, beside the
turning angles between successive displacements (Hénaff, Goris & Simoncelli 2019).

**CKA geometry** (from S alone): theta_ij = arccos(S_ij), for linear CKA the great-circle
distance between the layers' centred Gram matrices (a metric).

    efficiency = theta_{1,L} / sum_{l=1}^{L-1} theta_{l,l+1}        in [0, 1] for CKA

The turning angle at layer l (l = 2 .. L-1) is pi minus the spherical angle at vertex l of the
triangle (l-1, l, l+1), from the spherical law of cosines with a = theta_{l-1,l+1},
b = theta_{l-1,l}, c = theta_{l,l+1}:  cos A = (cos a - cos b cos c) / (sin b sin c).

Closed forms (tests): the orthogonal-update reference S_ij = min(i,j)/max(i,j) has
efficiency E_L = arccos(1/L) / sum_{l=1}^{L-1} arccos(l/(l+1)) (E_2 = 1, E_3 = 0.652,
E_30 = 0.125; about 1/sqrt(L)) and a turning angle of exactly pi/2 at every layer (each new
update is orthogonal to the path so far).

**Euclidean geometry** (needs the states (L, N, d)): the column-centred pooled matrices
X_1 .. X_L as points of R^{N x d}: ||X_L - X_1||_F / sum_l ||X_{l+1} - X_l||_F, and the angle
between X_l - X_{l-1} and X_{l+1} - X_l. Not scale-free; a random walk of iid steps gives about
1/sqrt(L-1) and turning angles near pi/2. Undefined values (a path of zero length, a
zero-length step at a vertex) are NaN.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from deffcore.core.errors import InvalidStatesError


@dataclass
class TrajectoryGeometry:
    """Straightness of the layer trajectory. Angles in radians; lists are per layer step."""

    layers: int
    efficiency: float  # theta_{1,L} / sum theta_{l,l+1}  (CKA geometry)
    chord: float  # theta_{1,L}
    path: float  # sum_l theta_{l,l+1}
    step_angles: list[float]  # theta_{l,l+1}, l = 1 .. L-1
    turning_angles: list[float]  # at l = 2 .. L-1
    mean_turning: float
    euclidean_efficiency: float | None = None
    euclidean_turning_angles: list[float] | None = None
    euclidean_mean_turning: float | None = None
    metric: str = "cka"
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _angles(S: np.ndarray) -> np.ndarray:
    return np.arccos(np.clip(S, -1.0, 1.0))


def spherical_turning_angles(S: np.ndarray) -> np.ndarray:
    """(L-2,) turning angles pi - A_l at l = 2 .. L-1 from S (L, L) (see the module docstring)."""
    theta = _angles(np.asarray(S, dtype=np.float64))
    L = theta.shape[0]
    out = np.full(max(L - 2, 0), np.nan)
    for v in range(1, L - 1):
        a, b, c = theta[v - 1, v + 1], theta[v - 1, v], theta[v, v + 1]
        denom = math.sin(b) * math.sin(c)
        if denom > 1e-12:
            cos_a = (math.cos(a) - math.cos(b) * math.cos(c)) / denom
            out[v - 1] = math.pi - math.acos(min(1.0, max(-1.0, cos_a)))
    return out


def euclidean_path(states: np.ndarray) -> tuple[float, np.ndarray]:
    """states (L, N, d) -> (chord / path, turning angles (L-2,)) of the column-centred pooled
    matrices as points of R^{N x d} (float64; see the module docstring)."""
    X = np.asarray(states, dtype=np.float64)
    X = X - X.mean(axis=1, keepdims=True)
    steps = np.diff(X, axis=0).reshape(X.shape[0] - 1, -1)  # (L-1, N*d)
    lengths = np.linalg.norm(steps, axis=1)
    path = float(lengths.sum())
    chord = float(np.linalg.norm((X[-1] - X[0]).ravel()))
    efficiency = chord / path if path > 0 else math.nan
    turns = np.full(len(steps) - 1, np.nan)
    for i in range(len(steps) - 1):
        denom = lengths[i] * lengths[i + 1]
        if denom > 0:
            cos = float(steps[i] @ steps[i + 1]) / denom
            turns[i] = math.acos(min(1.0, max(-1.0, cos)))
    return efficiency, turns


def _nanmean(v: np.ndarray) -> float:
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else math.nan


def geodesic_efficiency(S_or_states: np.ndarray, metric: str = "cka") -> TrajectoryGeometry:
    """Straightness of the layer trajectory (definition in the module docstring, SPEC 13).

    S_or_states: an (L, L) similarity matrix (CKA geometry only), or the pooled states
    (L, N, d) of h_1 .. h_L (S is computed with `metric`, and the Euclidean geometry is added).
    """
    arr = np.asarray(S_or_states)
    states = None
    if arr.ndim == 3:
        from deffcore.measures.similarity import similarity_matrix

        states = arr
        S = similarity_matrix(arr, metric)
    elif arr.ndim == 2 and arr.shape[0] == arr.shape[1]:
        S = arr.astype(np.float64)
    else:
        raise InvalidStatesError(
            "geodesic_efficiency takes an (L, L) similarity matrix or (L, N, d) states; "
            f"got shape {arr.shape}."
        )
    L = S.shape[0]
    if L < 2 or not np.all(np.isfinite(S)):
        raise InvalidStatesError(
            f"The trajectory needs at least 2 layers and a finite similarity matrix (L = {L})."
        )
    theta = _angles(S)
    steps = np.array([theta[l, l + 1] for l in range(L - 1)])
    path, chord = float(steps.sum()), float(theta[0, L - 1])
    turns = spherical_turning_angles(S)
    out = TrajectoryGeometry(
        layers=L,
        efficiency=chord / path if path > 0 else math.nan,
        chord=chord,
        path=path,
        step_angles=steps.tolist(),
        turning_angles=turns.tolist(),
        mean_turning=_nanmean(turns),
        metric=metric,
    )
    if metric != "cka":
        out.notes.append(
            f"arccos of {metric} is not a great-circle distance in general, so the efficiency "
            "can exceed 1 and the turning angles are formal."
        )
    if states is not None:
        eff, eturns = euclidean_path(states)
        out.euclidean_efficiency = eff
        out.euclidean_turning_angles = eturns.tolist()
        out.euclidean_mean_turning = _nanmean(eturns)
    return out


def reference_efficiency(L: int) -> float:
    """E_L of the orthogonal-update reference S = min/max (closed form, module docstring)."""
    if L < 2:
        raise InvalidStatesError(f"The reference trajectory needs L >= 2; got {L}.")
    return math.acos(1.0 / L) / sum(math.acos(l / (l + 1)) for l in range(1, L))
