"""Sun et al.'s massive activations, per activation, as their paper defines them (stage: measures).

Sun, Chen, Kolter & Liu, "Massive Activations in Large Language Models" (2024): an activation
a = h_l[b, t, j] is *massive* when

    |a| > SUN_MIN_ABS (100)   and   |a| >= SUN_MIN_RATIO (1,000) x median_l,

median_l the median magnitude of its own state: the median of |h_l[b', t', j']| over every real
token of every diagnosed passage and every feature (SPEC 11.2; `activations.median_abs`). Both
conditions grow with |a|, so a passage has a massive activation in state l exactly when its
largest |h_l| does: the per-passage maxima m_b (`activations.passage_maxima`) decide it, and
where that maximum sits is where the (largest) massive activation sits.

Reported per state h_0 .. h_L:

    sun_share_l     share of diagnosed passages with at least one massive activation in h_l
    sun_onset       the first state with sun_share_l > 0 (a massive activation in any passage;
                    None when no state has one), reported with its share
    sun_most        the states where most passages (at least SUN_MOST, half) have one, as runs
                    of consecutive layers (`sun_most_runs`): where the share's chart is high
    sun_position_l  the most frequent position of the massive activation over the passages
                    that have one (ties: the smaller; -1 where none has one)

The project's own summary is a different number and keeps its own name: `massive_ratio_l` =
mean_b m_b / median_l, with its onset at a ratio > 100 (`activations.massive_onset`). It
averages the maxima first and so can call a state massive when only a few passages have a huge
activation (or miss one present in half of them); the share counts the passages themselves.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: Sun et al.'s criterion: |a| > SUN_MIN_ABS and |a| >= SUN_MIN_RATIO x its state's median.
SUN_MIN_ABS = 100.0
SUN_MIN_RATIO = 1000.0
#: "Most passages": a state where at least this share of passages has a massive activation.
SUN_MOST = 0.5


def sun_flags(passage_max: np.ndarray, median: Sequence[float]) -> np.ndarray:
    """passage_max (n, L+1) largest |h_l| of each passage, median (L+1,) -> (n, L+1) bool:
    passage b has a massive activation in state l (module docstring)."""
    top = np.asarray(passage_max, dtype=np.float64)
    med = np.asarray([np.nan if v is None else v for v in median], dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return (top > SUN_MIN_ABS) & (top >= SUN_MIN_RATIO * med[None, :])


def sun_share(passage_max: np.ndarray, median: Sequence[float]) -> np.ndarray:
    """(L+1,) share of passages with at least one massive activation, per state."""
    flags = sun_flags(passage_max, median)
    return flags.mean(axis=0) if flags.shape[0] else np.zeros(flags.shape[1])


def sun_positions(flags: np.ndarray, passage_max_position: np.ndarray) -> np.ndarray:
    """(L+1,) int: per state, the most frequent position of the flagged passages' largest |h|
    (ties: the smaller); -1 where no passage is flagged. flags, passage_max_position (n, L+1)."""
    positions = np.asarray(passage_max_position, dtype=np.int64)
    out = np.full(flags.shape[1], -1, dtype=np.int64)
    for layer in range(flags.shape[1]):
        hits = positions[flags[:, layer], layer]
        if hits.size:
            values, counts = np.unique(hits, return_counts=True)
            out[layer] = int(values[np.argmax(counts)])  # sorted: the first maximum is smallest
    return out


def sun_onset(share: Sequence[float | None]) -> int | None:
    """The first state whose share of passages with a massive activation is above 0."""
    for layer, value in enumerate(share):
        if value is not None and np.isfinite(value) and value > 0:
            return layer
    return None


def sun_most_runs(share: Sequence[float | None], most: float = SUN_MOST) -> list[tuple[int, int]]:
    """The states where at least `most` of the passages have a massive activation, as runs
    (first, last) of consecutive layers, in order; [] when no state reaches `most`."""
    runs: list[tuple[int, int]] = []
    for layer, value in enumerate(share):
        if value is None or not np.isfinite(value) or value < most:
            continue
        if runs and runs[-1][1] == layer - 1:
            runs[-1] = (runs[-1][0], layer)
        else:
            runs.append((layer, layer))
    return runs
