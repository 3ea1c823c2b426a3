"""The depth-use atlas's consecutive-layer geometry (SPEC 16.3) against closed forms.

- A known rotation (the same angle θ in every plane of a block-diagonal rotation) gives θ and a
  residual of 0, with N > d and with N < d (the fit in the rows' span).
- A scaled copy gives angle 0 and residual 0 (the fit is scale-free) and the token-level
  displacement |s − 1| (the taps' r_l on states h_l = s h_{l−1}).
- The residual is 2 − 2 × the Procrustes similarity of `similarity_measures` (one definition),
  and the span-reduced fit equals the full d x d fit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from deffcore.extraction.atlas import rows_from_states
from deffcore.measures.atlas import consecutive_geometry, procrustes_step


def _rotation(d: int, theta: float) -> np.ndarray:
    q = np.zeros((d, d))
    c, s = np.cos(theta), np.sin(theta)
    for k in range(0, d, 2):
        q[k : k + 2, k : k + 2] = [[c, -s], [s, c]]
    return q


@pytest.mark.parametrize(("n", "d"), [(200, 8), (6, 40)])
@pytest.mark.parametrize("degrees", [0.0, 17.0, 90.0, 150.0])
def test_a_known_rotation_gives_its_angle(n, d, degrees):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, d)) + 3.0  # an offset: the fit is of the centred states
    y = x @ _rotation(d, np.radians(degrees))
    angle, residual = procrustes_step(x, y)
    assert angle == pytest.approx(degrees, abs=1e-5)
    assert residual == pytest.approx(0.0, abs=1e-9)


def test_a_scaled_copy_moves_by_s_minus_1_and_does_not_rotate():
    rng = np.random.default_rng(1)
    h0 = torch.tensor(rng.standard_normal((5, 7, 16)), dtype=torch.float32)
    scales = [1.5, 0.25, 3.0]
    states = [h0]
    for s in scales:
        states.append(states[-1] * s)
    rows = rows_from_states(states, torch.ones(5, 7, dtype=torch.int64))
    np.testing.assert_allclose(rows.r.mean(0), [abs(s - 1) for s in scales], rtol=1e-6)
    pooled = np.stack([h.mean(1).numpy() for h in states])
    geo = consecutive_geometry(pooled, rows.r.mean(0))
    np.testing.assert_allclose(geo["rotation_angle"], 0.0, atol=1e-3)
    np.testing.assert_allclose(geo["procrustes_residual"], 0.0, atol=1e-9)
    np.testing.assert_allclose(geo["displacement"], rows.r.mean(0))


@pytest.mark.parametrize(("n", "d"), [(30, 10), (7, 50)])
def test_the_residual_is_the_procrustes_similarity_and_the_reduced_fit_the_full_one(n, d):
    from deffcore.measures.similarity_measures import measure_matrix

    rng = np.random.default_rng(2)
    x = rng.standard_normal((n, d))
    y = x @ rng.standard_normal((d, d)) * 0.5 + rng.standard_normal((n, d))
    angle, residual = procrustes_step(x, y)
    S = measure_matrix(np.stack([x, y]), "procrustes")
    assert residual == pytest.approx(2 - 2 * float(S[0, 1]), abs=1e-9)
    # the full d x d fit, by hand
    a = (x - x.mean(0)) / np.linalg.norm(x - x.mean(0))
    b = (y - y.mean(0)) / np.linalg.norm(y - y.mean(0))
    u, _, vt = np.linalg.svd(a.T @ b)
    want = np.degrees(np.arccos(np.sum((a @ u @ vt) * a)))
    assert angle == pytest.approx(want, abs=1e-6)
    assert residual == pytest.approx(np.linalg.norm(a @ u @ vt - b) ** 2, abs=1e-9)


def test_a_layer_without_variance_has_no_geometry():
    x = np.ones((5, 4))
    assert all(np.isnan(v) for v in procrustes_step(x, np.random.default_rng(0).random((5, 4))))


def _snapshot(edit=None):
    import json

    from deffcore.views.run import DEFAULT_RUN_PATH

    data = json.loads(DEFAULT_RUN_PATH.read_text())
    L = data["layers"]
    data["atlas"]["geometry"] = {
        "displacement": data["atlas"]["relative_contribution"],
        "rotation_angle": [10.0] * L,
        "procrustes_residual": [0.1] * (L - 1) + [None],
    }
    if edit is not None:
        edit(data["atlas"]["geometry"])
    return data


def test_a_snapshot_carries_the_geometry_typed():
    from deffcore.measures.atlas import Atlas
    from deffcore.views.run_schema import check_snapshot

    data = check_snapshot(_snapshot())
    back = Atlas.from_dict(data["atlas"])
    assert back.geometry["rotation_angle"].shape == (data["layers"],)


@pytest.mark.parametrize(
    "edit",
    [
        lambda g: g["rotation_angle"].__setitem__(0, 181.0),
        lambda g: g["rotation_angle"].__setitem__(0, "10"),
        lambda g: g["procrustes_residual"].__setitem__(0, 2.5),
        lambda g: g["procrustes_residual"].__setitem__(0, -0.1),
        lambda g: g["displacement"].__setitem__(0, -1.0),
        lambda g: g.update(rotation_angle=[1.0]),
        lambda g: g.pop("rotation_angle"),
    ],
)
def test_a_snapshot_with_a_hostile_geometry_is_refused_in_one_sentence(edit):
    from deffcore.views.run_schema import SnapshotError, check_snapshot

    with pytest.raises(SnapshotError) as err:
        check_snapshot(_snapshot(edit), "run.json")
    text = str(err.value)
    assert text.startswith("run.json") and "\n" not in text and text.endswith("."), text
