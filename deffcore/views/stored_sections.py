"""The stored sections of a run snapshot in the one schema (`deffcore.views.run_schema`):
the depth-use atlas (SPEC 16), the paired bootstrap (SPEC 15), the BOS diagnostics (SPEC 11).
Each model types its fields; `check_against` holds its shapes to the run's L and N.

Stage: views.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, BeforeValidator, Field, Strict, model_validator

from deffcore.views.schema_types import (
    MAX_LAYERS,
    MAX_PASSAGES,
    MAX_SEED,
    MAX_TOKENS,
    Count,
    Metric,
    Name,
    NonNegative,
    Number,
    Pooling,
    Spec,
    Text,
    _Part,
    _plain_number,
)


def _numbers_array(value: Any) -> Any:
    """Nested lists (rectangular) of finite JSON numbers or null: a measure and its interval
    ends (null: undefined, e.g. the skip effect's cells l <= s)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif node is not None:
            _plain_number(node)
    try:
        np.asarray(
            np.where(np.equal(np.asarray(value, dtype=object), None), np.nan, value),
            dtype=np.float64,
        )
    except (ValueError, TypeError, OverflowError):
        raise ValueError("is not a rectangular array of numbers") from None
    return value


Numbers = Annotated[Any, AfterValidator(_numbers_array)]
Values = list[Number | None]


def _shape(value: Any) -> tuple[int, ...]:
    return np.shape(np.asarray(value, dtype=object)) if isinstance(value, list) else ()


class Interval(_Part):
    """A measure's interval: its low and high ends, each of the measure's shape."""

    low: Numbers
    high: Numbers

    @model_validator(mode="after")
    def _same_shape(self) -> Interval:
        if _shape(self.low) != _shape(self.high):
            raise ValueError("has ends of different shapes")
        return self


class Gromov(_Part):
    """Gromov et al.'s drop at the budget and the best block per size n = 1..L."""

    budget: NonNegative
    n_drop: Count(0, MAX_LAYERS)
    first_dropped_block: Count(1, MAX_LAYERS) | None = None
    best_distance: Values
    best_start: list[Count(0, MAX_LAYERS) | None]


class SublayerPart(_Part):
    relative_contribution: Values
    alignment: Values


class Sublayers(_Part):
    """The attention and MLP writes of a block (SPEC 16), where the architecture has them."""

    kind: Name
    attention: SublayerPart
    mlp: SublayerPart


class StoredSkip(_Part):
    """The skip effect (Csordás et al.): later (L x L), later_max (L x L), kl (L)."""

    layers: Count(2, MAX_LAYERS)
    passages: Count(1, MAX_PASSAGES)
    later: list[Values]
    later_max: list[Values]
    kl: Values
    intervals: dict[Name, Interval] = Field(default_factory=dict)
    B: Count(1, MAX_PASSAGES) = 100
    ci: Annotated[float, BeforeValidator(_plain_number), Field(gt=0, lt=1)] = 0.95
    meta: dict[Name, Text | Number | None] = Field(default_factory=dict)


class AtlasRun(_Part):
    """The run an atlas was computed beside (`lenses.atlas.run_info`)."""

    key: Text | None = None
    spec: Spec | None = None
    metric: Metric | None = None
    layers: Count(2, MAX_LAYERS) | None = None
    n: Count(1, MAX_PASSAGES) | None = None
    deff: Number | None = None
    deff_over_L: Number | None = None
    gap_pct: Number | None = None
    rho1: Number | None = None
    lag_profile: Values | None = None


#: An atlas interval's shape by its name (others: a scalar interval, e.g. phase_point).
_PER_BLOCK_INTERVALS = (
    "relative_contribution",
    "alignment",
    "block_influence",
    "block_influence_tokens",
    *(
        f"{part}_{m}"
        for part in ("attention", "mlp")
        for m in ("relative_contribution", "alignment")
    ),
)
#: The scalar intervals the Depth use page and the correlation lab read.
_SCALAR_INTERVALS = (
    "phase_point",
    "gromov_n_drop",
    "phase_share",
    "bi_second_half",
    "gromov_keep_share",
    "r_late_over_early",
)


class StoredAtlas(_Part):
    """A depth-use atlas as a snapshot carries it (`measures.atlas.Atlas.to_dict`, SPEC 16)."""

    format: Literal[1]
    layers: Count(2, MAX_LAYERS)
    n: Count(1, MAX_PASSAGES)
    B: Count(1, MAX_PASSAGES) = 100
    ci: Annotated[float, BeforeValidator(_plain_number), Field(gt=0, lt=1)] = 0.95
    seed: Count(0, MAX_SEED) = 0
    relative_contribution: Values
    alignment: Values
    block_influence: Values
    block_influence_tokens: Values
    angular_distance: list[Values]
    phase_point: Count(0, MAX_LAYERS)
    gromov: Gromov
    sublayers: Sublayers | None = None
    intervals: dict[Name, Interval]
    columns: dict[Name, Number | None] = Field(default_factory=dict)
    skip_effect: StoredSkip | None = None
    run: AtlasRun | None = None
    meta: dict[Name, Text | Number | None] = Field(default_factory=dict)

    def check_against(self, L: int, N: int) -> None:
        """Every array of this run's L blocks (h_0..h_L: L + 1), its n the run's N."""
        if self.layers != L or self.n != N:
            raise ValueError(f"its depth-use atlas is not of this run's L = {L} and N = {N}")
        want: dict[str, tuple[tuple[int, ...], Any]] = {
            name: ((L,), getattr(self, name))
            for name in (
                "relative_contribution",
                "alignment",
                "block_influence",
                "block_influence_tokens",
            )
        }
        want["angular_distance"] = ((L + 1, L + 1), self.angular_distance)
        want["gromov.best_distance"] = ((L,), self.gromov.best_distance)
        want["gromov.best_start"] = ((L,), self.gromov.best_start)
        for part in ("attention", "mlp") if self.sublayers is not None else ():
            for m in ("relative_contribution", "alignment"):
                want[f"sublayers.{part}.{m}"] = ((L,), getattr(getattr(self.sublayers, part), m))
        for name, band in self.intervals.items():
            if name in _PER_BLOCK_INTERVALS:
                want[f"intervals.{name}"] = ((L,), band.low)
            elif name == "angular_distance":
                want[f"intervals.{name}"] = ((L + 1, L + 1), band.low)
            elif name in _SCALAR_INTERVALS:
                want[f"intervals.{name}"] = ((), band.low)
        if "phase_point" not in self.intervals:
            raise ValueError("its depth-use atlas has no phase-point interval")
        for name, (shape, value) in want.items():
            if _shape(value) != shape:
                raise ValueError(f"the depth-use atlas's {name} is not of shape {shape}")
        g = self.gromov
        if g.n_drop > L or (g.first_dropped_block or 1) + g.n_drop - 1 > L:
            raise ValueError("the depth-use atlas drops blocks past its last")
        if self.phase_point > L:
            raise ValueError(f"the depth-use atlas's phase point is past block {L}")
        if self.run is not None and (self.run.layers or L, self.run.n or N) != (L, N):
            raise ValueError("the depth-use atlas's run is not of this run's L and N")
        skip = self.skip_effect
        if skip is not None:
            if skip.layers != L or skip.passages > N:
                raise ValueError("the depth-use atlas's skip effect is not of this run")
            shapes = {"later": (L, L), "later_max": (L, L), "kl": (L,)}
            for name, shape in shapes.items():
                if _shape(getattr(skip, name)) != shape:
                    raise ValueError(f"the skip effect's {name} is not of shape {shape}")
            for name, band in skip.intervals.items():
                if name in shapes and _shape(band.low) != shapes[name]:
                    raise ValueError(f"the skip effect's {name} interval is not of its shape")


class StoredPaired(_Part):
    """The paired bootstrap a snapshot carries (`statistics.paired.PairedBootstrap.to_dict`,
    SPEC 15): replicates of the run's own passages, one per (pooling, metric) key."""

    layers: Count(2, MAX_LAYERS)
    n: Count(2, MAX_PASSAGES)
    B: Count(2, 100_000)
    seed: Count(0, MAX_SEED) = 0
    ci: Annotated[float, BeforeValidator(_plain_number), Field(gt=0, lt=1)] = 0.95
    keys: list[tuple[Pooling, Metric]]
    points: list[list[Number]]
    profiles: list[list[list[Number]]]

    def check_against(self, L: int, N: int) -> None:
        if (self.layers, self.n) != (L, N):
            raise ValueError(f"its paired bootstrap is not of this run's L = {L} and N = {N}")
        if len(set(self.keys)) != len(self.keys):
            raise ValueError("its paired bootstrap names a pooling and metric twice")
        if not len(self.keys) == len(self.points) == len(self.profiles):
            raise ValueError("its paired bootstrap has not one point and profile per key")
        if any(len(p) != L - 1 for p in self.points) or any(
            len(p) != self.B or any(len(row) != L - 1 for row in p) for p in self.profiles
        ):
            raise ValueError("its paired bootstrap's profiles are not B x (L - 1)")


Counts = list[Count(0, 2**53)]
Share = Annotated[float, BeforeValidator(_plain_number), Field(ge=0, le=1)]


class Inspector(_Part):
    """The passage inspector: per passage its tokens and, per state, their norms."""

    token_ids: list[Counts] | None = None
    tokens: list[list[Annotated[str, Strict(), Field(max_length=200)]]]
    token_norms: list[list[Values]]
    max_position: list[Counts]
    max_dim: list[Counts]
    max_value: list[Values]


class Diagnostics(_Part):
    """The BOS diagnostics (`lenses.diagnostics.BosDiagnostics.to_dict`, SPEC 11): massive
    activations (the project's ratio, Sun et al.'s criterion), attention sinks (ours, Gu et
    al.'s on whole passages and on 64 tokens), the passage inspector."""

    format: Count(0, 1000)
    key: Annotated[str, Strict(), Field(pattern=r"^([0-9a-f]{20})?$")] = ""
    spec: Spec | None = None
    created: Text | None = None
    elapsed_s: NonNegative | None = None
    layers: Count(2, MAX_LAYERS) | None = None
    heads: Count(1, 2**16) | None = None
    n_passages: Count(1, MAX_PASSAGES)
    massive_ratio: Values
    massive_position: Counts
    massive_dim: Counts
    massive_max: Values | None = None
    massive_median: Values | None = None
    massive_onset: Count(0, MAX_LAYERS) | None = None
    massive_threshold: NonNegative | None = None
    sun_share: list[Share | None] | None = None
    sun_position: list[Count(-1, 2**53) | None] | None = None  # -1: no such activation
    sun_onset: Count(0, MAX_LAYERS) | None = None
    sun_min_abs: NonNegative | None = None
    sun_min_ratio: NonNegative | None = None
    sink_fraction: list[Share | None]
    sink_scores: list[Values]
    sink_threshold: Share | None = None
    sink_passages: Count(0, MAX_PASSAGES) | None = None
    sink_baseline: Share | None = None
    sink_min_length: Count(0, MAX_TOKENS) | None = None
    gu_passages: Count(0, MAX_PASSAGES) | None = None
    gu_sink_rate: list[Values] | None = None
    gu_sink_fraction: list[Share | None] | None = None
    gu_sink_metric: Share | None = None
    gu_baseline: Share | None = None
    gu64_sink_rate: list[Values] | None = None
    gu64_sink_fraction: list[Share | None] | None = None
    gu64_sink_metric: Share | None = None
    gu64_baseline: Share | None = None
    gu_threshold: Share | None = None
    gu_tokens: Count(1, MAX_TOKENS) | None = None
    gu_min_length: Count(0, MAX_TOKENS) | None = None
    meta: dict[Name, Text | Number | bool | None] = Field(default_factory=dict)
    inspector: Inspector | None = None

    @model_validator(mode="after")
    def _gu_whole(self) -> Diagnostics:
        """A window of Gu et al.'s metric is shown with its metric, baseline and passages."""
        for prefix in ("gu_", "gu64_"):
            if getattr(self, f"{prefix}sink_fraction") is not None:
                parts = (
                    f"{prefix}sink_metric",
                    f"{prefix}baseline",
                    "gu_passages",
                    "gu_min_length",
                )
                missing = [p for p in parts if getattr(self, p) is None]
                if missing:
                    raise ValueError(f"has {prefix}sink_fraction without {missing[0]}")
        return self

    def check_against(self, L: int) -> None:
        """Per state (h_0..h_L) L + 1 values, per block L; every block's heads alike."""
        for name in ("massive_ratio", "massive_position", "massive_dim", "massive_max",
                     "massive_median", "sun_share", "sun_position"):  # fmt: skip
            value = getattr(self, name)
            if value is not None and len(value) != L + 1:
                raise ValueError(f"its diagnostics' {name} is not {L + 1} values (h_0 to h_L)")
        for name in ("sink_fraction", "gu_sink_fraction", "gu64_sink_fraction"):
            value = getattr(self, name)
            if value is not None and len(value) != L:
                raise ValueError(f"its diagnostics' {name} is not {L} values (one per block)")
        for name in ("sink_scores", "gu_sink_rate", "gu64_sink_rate"):
            rows = getattr(self, name)
            if rows is None:
                continue
            heads = self.heads or (len(rows[0]) if rows else 0)
            if len(rows) != L or heads < 1 or any(len(r) != heads for r in rows):
                raise ValueError(f"its diagnostics' {name} is not {L} blocks of one head count")
        if self.layers is not None and self.layers != L:
            raise ValueError(f"its diagnostics are not of this run's L = {L}")
        ins = self.inspector
        if ins is None:
            return
        n = len(ins.tokens)
        for name in ("token_norms", "max_position", "max_dim", "max_value"):
            if len(getattr(ins, name)) != n:
                raise ValueError(f"its diagnostics' inspector's {name} is not one per passage")
        for t, rows in zip(ins.tokens, ins.token_norms, strict=True):
            if len(rows) != L + 1 or any(len(r) != len(t) for r in rows):
                raise ValueError(
                    "its diagnostics' inspector's token norms are not one per state and token"
                )
        for name in ("max_position", "max_dim", "max_value"):
            if any(len(r) != L + 1 for r in getattr(ins, name)):
                raise ValueError(f"its diagnostics' inspector's {name} is not one value per state")
