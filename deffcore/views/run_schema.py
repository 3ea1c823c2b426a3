"""The one schema of a run snapshot: what every page, the notebook and the report may read.

A snapshot (`deffcore.views.run.Run.to_snapshot`, `deffcore measure --snapshot`) is also the
file a colleague sends, so it is hostile until it passes `check_snapshot`, the single door every
reader goes through (`Run.from_snapshot`, hence every reader in `sharing` and `run`). It checks,
in this order:

1. Text (`_check_text`): every string and key is text (`safe_text.NOT_TEXT`: no lone surrogate,
   no control character but tab and line feed), at most `MAX_TEXT` characters; the document is
   at most `MAX_DEPTH` deep.
2. Types and bounds (the pydantic models below): numbers are finite JSON numbers (a JSON `1e400`
   is `inf`, `NaN` is refused), integers are not booleans, strings are not numbers, counts lie
   in their bounds.
3. Self-consistency (`Snapshot._consistent`): every similarity matrix is L x L, symmetric, with
   a unit diagonal and values within its measure's bound; L + 1 position-0 ratios; the CLI
   JSON's sizes, key, bias d/(N+d) and each pooling's D_eff agree with the top level and the
   matrices; a random-weight band's mean is the mean of its seeds, inside [low, high].
4. The stored sections, each typed and of this run's L and N: the depth-use atlas
   (`StoredAtlas`, SPEC 16), the paired bootstrap (`StoredPaired`, SPEC 15), the BOS
   diagnostics of the current format (`Diagnostics`, SPEC 11), the measure tables (SPEC 17.4).

A file that breaks any rule gets one sentence (`SnapshotError`, naming the file and the
field) and nothing of it is shown. `parse_snapshot_json` also refuses a key named twice in one
object (`json.loads` would keep the last one silently).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    model_validator,
)

from deffcore.core.checks import MAX_SEED
from deffcore.core.constants import (
    BOS_OPTIONS,
    DIAG_FORMAT,
    METRICS,
    PASSAGE_MODES,
    POOLINGS,
    TABLE_MEASURES,
    similarity_bound,
)
from deffcore.core.errors import DeffError, SnapshotError
from deffcore.core.json_values import finite_number
from deffcore.core.safe_text import NOT_TEXT
from deffcore.measures.depth import SYMMETRY_TOL

# --- field types: plain JSON numbers, bounded counts and texts, the run's spec

#: Bump when the snapshot layout changes; the loader rejects other versions.
SNAPSHOT_FORMAT = 1
#: Largest L a snapshot may claim (every similarity matrix is L x L).
MAX_LAYERS = 2048
#: Largest N (passages) and d (features) a snapshot may claim: far above any real run, far
#: below what overflows a table's int64 or a float's exponent.
MAX_PASSAGES = 10**9
MAX_D_MODEL = 2**20
MAX_TOKENS = 2**24
#: Most random-weight seeds in one band.
MAX_SEEDS = 1000
#: Longest string anywhere in a snapshot (a command line), and longest name (model, dataset).
MAX_TEXT = 10_000
MAX_NAME = 1000
#: Deepest nesting of a snapshot (the real layout is 6 deep).
MAX_DEPTH = 12

# ---------------------------------------------------------------------------------------------
# Field types


def _plain_number(value: Any) -> Any:
    """A JSON number only: a bool or a numeric string is refused before pydantic converts it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("is not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("is not a finite number")
    return value


def Bounded(**bounds: float) -> Any:  # a type factory: named like the types it makes
    """A finite JSON number within `bounds` (pydantic's ge, le, gt, lt)."""
    return Annotated[float, BeforeValidator(_plain_number), Field(allow_inf_nan=False, **bounds)]


Number = Bounded()
NonNegative = Bounded(ge=0)
Share = Bounded(ge=0, le=1)
#: A confidence level of an interval.
Level = Bounded(gt=0, lt=1)


def Count(low: int, high: int) -> Any:
    return Annotated[int, Strict(), Field(ge=low, le=high)]


Name = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_NAME)]
Text = Annotated[str, Strict(), Field(max_length=MAX_TEXT)]
#: A run's key: 20 hex digits, or empty.
Key = Annotated[str, Strict(), Field(pattern=r"^([0-9a-f]{20})?$")]
Pooling = Literal[POOLINGS]  # type: ignore[valid-type]
Metric = Literal[METRICS]  # type: ignore[valid-type]
#: A similarity matrix's name: a metric, or a SPEC 17 measure the run held (SPEC 17.4)
Similarity = Literal[TABLE_MEASURES]  # type: ignore[valid-type]


class _Part(BaseModel):
    """A part of the CLI JSON: the fields readers use are typed, the rest kept as they are."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)


# ---------------------------------------------------------------------------------------------
# The layout


class Spec(BaseModel):
    """The run's `RunSpec` fields (missing ones take `SPEC_DEFAULTS`)."""

    model_config = ConfigDict(extra="forbid")

    model: Name
    revision: Name | None = None
    dataset: Name
    n: Count(1, MAX_PASSAGES)
    max_tokens: Count(1, MAX_TOKENS)
    seed: Count(0, MAX_SEED)
    dtype: Name = "float32"
    intervention: Name = "none"
    passages: Literal[PASSAGE_MODES] = "documents"  # type: ignore[valid-type]
    bos: Literal[BOS_OPTIONS] = "default"  # type: ignore[valid-type]


# --- stored sections, typed and held to the run's L and N: the depth-use atlas (SPEC 16),
# the paired bootstrap (SPEC 15), the BOS diagnostics (SPEC 11)


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
    ci: Level = 0.95
    meta: dict[Name, Text | Number | None] = Field(default_factory=dict)


class LogitLens(_Part):
    """Where predictions form (SPEC 16.2): per layer h_0 .. h_L the mean KL(p_L || p_l) (nats,
    >= 0) and top-1 agreement with the final layer (a share), and the prediction depth."""

    kl: list[NonNegative | None]
    top1_agreement: list[Share | None]
    prediction_depth: NonNegative | None = None


class BlockGeometry(_Part):
    """Consecutive-layer geometry per block (SPEC 16.3): the token-level displacement, the
    Procrustes rotation angle (degrees) and residual of the centred pooled states."""

    displacement: list[NonNegative | None] | None = None
    rotation_angle: list[Bounded(ge=0, le=180) | None]
    procrustes_residual: list[Bounded(ge=0, le=2) | None]


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
#: The logit lens's intervals over h_0 .. h_L (L + 1 values).
_LAYER_INTERVALS = ("logit_lens_kl", "logit_lens_top1")
#: The scalar intervals the Depth use page and the correlation lab read.
_SCALAR_INTERVALS = (
    "prediction_depth",
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
    ci: Level = 0.95
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
    logit_lens: LogitLens | None = None
    geometry: BlockGeometry | None = None
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
            elif name in _LAYER_INTERVALS:
                want[f"intervals.{name}"] = ((L + 1,), band.low)
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
        lens = self.logit_lens
        if lens is not None:
            for name in ("kl", "top1_agreement"):
                if _shape(getattr(lens, name)) != (L + 1,):
                    raise ValueError(f"the logit lens's {name} is not of shape ({L + 1},)")
            if (lens.prediction_depth or 0) > L:
                raise ValueError(f"the logit lens's prediction depth is past layer {L}")
        geo = self.geometry
        for name in ("displacement", "rotation_angle", "procrustes_residual"):
            value = None if geo is None else getattr(geo, name)
            if value is not None and _shape(value) != (L,):
                raise ValueError(f"the block geometry's {name} is not of shape ({L},)")
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
    ci: Level = 0.95
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
    key: Key = ""
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


# --- the snapshot

#: Agreement asked of numbers stored beside the matrix they came from (rounded to 1e-6).
_DIAGONAL_TOL = 1e-4
_AGREE_REL = 1e-3

#: What a one-line message may not repeat from a file: every control character (line feed and
#: tab too), the bidirectional controls, surrogates. (What a *field* may not hold is
#: `safe_text.NOT_TEXT`: text keeps its tabs and line feeds, e.g. a "\n" token.)
_NOT_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


# ---------------------------------------------------------------------------------------------
# Similarity matrices


def _similarity(rows: list[list[float]]) -> list[list[float]]:
    """A similarity matrix: square, symmetric, unit diagonal, values within the widest
    measure's bound (each measure's own bound is checked by `Snapshot`, which knows its name)."""
    L = len(rows)
    if L < 2 or any(len(r) != L for r in rows):
        raise ValueError("is not a square matrix of at least 2 x 2")
    S = np.asarray(rows, dtype=np.float64)
    widest = max(similarity_bound(m) for m in TABLE_MEASURES)
    if np.abs(S).max() > widest + 1e-6:
        raise ValueError(f"has a value outside [-{widest:g}, {widest:g}]")
    if np.abs(S - S.T).max() > SYMMETRY_TOL:  # D_eff's own (SPEC 3)
        raise ValueError("is not symmetric")
    if np.abs(np.diag(S) - 1.0).max() > _DIAGONAL_TOL:
        raise ValueError("does not have a unit diagonal (every layer is itself)")
    return rows


Matrix = Annotated[list[list[Number]], AfterValidator(_similarity)]


def _no_empty(value: Any) -> Any:
    return None if value == {} else value  # a pooling without a band is an empty object


# ---------------------------------------------------------------------------------------------
# The layout


class UpdateDepth(_Part):
    """What the Baselines page shows of the update-based depth."""

    deff_upd_over_L: Number
    rho1_upd: Number
    update_to_state_norm: NonNegative
    rho_upd: list[Number] | None = None


class MatchedReferences(_Part):
    """The matched references the Baselines page charts and tabulates."""

    deff: Number
    F_L: Number
    F_norm: Number
    F_h0_norm: Number = Field(alias="F_h0+norm")
    F_h0_corr: Number = Field(alias="F_h0+corr")
    gap_pct_F_L: Number
    gap_pct_F_norm: Number
    gap_pct_F_h0_norm: Number = Field(alias="gap_pct_F_h0+norm")
    gap_pct_F_h0_corr: Number = Field(alias="gap_pct_F_h0+corr")
    update_sizes: list[NonNegative] | None = None
    rho_upd: list[Number] | None = None


class PoolingResult(_Part):
    """One pooling's result in the CLI JSON (numbers null, with the reason, when undefined)."""

    undefined: Text | None = None
    deff: Number | None = None
    deff_over_L: Number | None = None
    gap_pct: Number | None = None
    rho1: Number | None = None
    deff_over_L_at_K: dict[Annotated[str, Field(pattern=r"[0-9]{1,5}")], Number | None] = Field(
        default_factory=dict
    )
    update_depth: UpdateDepth | None = None
    matched_references: MatchedReferences | None = None


class Band(_Part):
    """A random-weight band: D_eff/L of each seed, their mean and mean +- 2 sigma."""

    seeds: list[Annotated[str, Strict(), Field(pattern=r"^[0-9]{1,19}$")] | Count(0, MAX_SEED)] = (
        Field(min_length=1, max_length=MAX_SEEDS)
    )
    deff_over_L: list[Number] = Field(min_length=1, max_length=MAX_SEEDS)
    mean: Number
    sd: NonNegative = 0.0
    low: Number
    high: Number

    @model_validator(mode="after")
    def _consistent(self) -> Band:
        if len(self.seeds) != len(self.deff_over_L):
            raise ValueError("names a different number of seeds than it has values")
        if not self.low <= self.mean <= self.high:
            raise ValueError("has a mean outside its own [low, high]")
        if abs(float(np.mean(self.deff_over_L)) - self.mean) > 1e-4 + 1e-3 * abs(self.mean):
            raise ValueError("has a mean that is not the mean of its seeds")
        return self


class RandomNull(_Part):
    results: dict[Pooling, Annotated[Band | None, BeforeValidator(_no_empty)]] = Field(
        default_factory=dict
    )
    models: list[Name] | None = None


class Measurement(_Part):
    """The CLI's JSON of the run (`Measurement.to_dict`), as far as a reader reads it."""

    metric: Metric
    results: dict[Pooling, PoolingResult] = Field(default_factory=dict)
    random_null: RandomNull | None = None
    layers: Count(2, MAX_LAYERS) | None = None
    d_model: Count(1, MAX_D_MODEL) | None = None
    n: Count(1, MAX_PASSAGES) | None = None
    key: Text | None = None
    cka_bias: Number | None = None


def _current_diagnostics(value: Any) -> Any:
    """Diagnostics of another format are never read (`lenses.run_extras`: the page computes
    them again), so only the current format's are checked."""
    if isinstance(value, dict) and value.get("format") != DIAG_FORMAT:
        return None
    return value


class Snapshot(BaseModel):
    """A whole snapshot file (`deffcore.views.run.Run.to_snapshot`)."""

    model_config = ConfigDict(extra="allow")

    format: Literal[SNAPSHOT_FORMAT]  # type: ignore[valid-type]
    command: Text = ""
    key: Key = ""
    spec: Spec
    layers: Count(2, MAX_LAYERS)
    d_model: Count(1, MAX_D_MODEL)
    n: Count(1, MAX_PASSAGES)
    n_dropped_short: Count(0, MAX_PASSAGES) = 0
    pos0_norm_ratio: list[NonNegative | None]
    similarity: dict[Pooling, dict[Similarity, Matrix]]
    measurement: Measurement | None = None
    atlas: StoredAtlas | None = None
    paired: StoredPaired | None = None
    diagnostics: Annotated[Diagnostics | None, BeforeValidator(_current_diagnostics)] = None

    @model_validator(mode="after")
    def _consistent(self) -> Snapshot:
        L = self.layers
        if len(self.pos0_norm_ratio) != L + 1:
            raise ValueError(f"pos0_norm_ratio is not {L + 1} numbers (h_0 to h_L)")
        if all(r is None for r in self.pos0_norm_ratio):
            raise ValueError("pos0_norm_ratio holds no number")
        if "cka" not in self.similarity.get("default", {}):
            raise ValueError("it has no default-pooling linear CKA matrix")
        for pooling, per_metric in self.similarity.items():
            for metric, S in per_metric.items():
                if len(S) != L:
                    raise ValueError(f"the {pooling}/{metric} similarity is not {L} x {L}")
                bound = similarity_bound(metric)
                if np.abs(np.asarray(S, dtype=np.float64)).max() > bound + 1e-6:
                    raise ValueError(
                        f"the {pooling}/{metric} similarity has a value outside "
                        f"[-{bound:g}, {bound:g}]"
                    )
        if self.n > self.spec.n:
            raise ValueError(f"n = {self.n} is more passages than its spec asked for")
        if self.measurement is not None:
            self._agrees_with(self.measurement)
        for section in (self.atlas, self.paired):  # the stored sections: of this run's L, N
            if section is not None:
                section.check_against(L, self.n)
        if self.diagnostics is not None:
            self.diagnostics.check_against(L)
        return self

    def _agrees_with(self, m: Measurement) -> None:
        """The CLI JSON was computed from this run: its sizes and numbers must agree."""
        for name in ("layers", "d_model", "n"):
            if getattr(m, name) is not None and getattr(m, name) != getattr(self, name):
                raise ValueError(f"measurement.{name} differs from its {name}")
        if m.key and self.key and m.key != self.key:
            raise ValueError("measurement.key differs from its key")
        bias = self.d_model / (self.n + self.d_model)
        if m.cka_bias is not None and not _agree(m.cka_bias, bias):
            raise ValueError("measurement.cka_bias is not d/(N+d) of its N and d")
        from deffcore.measures.depth import effective_depth

        for pooling, r in m.results.items():
            S = self.similarity.get(pooling, {}).get(m.metric)
            computed = S is not None and r.undefined is None and r.deff is not None
            if computed and not _agree(r.deff, effective_depth(np.asarray(S, dtype=np.float64))):
                raise ValueError(f"measurement.results.{pooling}.deff is not its matrix's D_eff")
            upd = r.update_depth
            if upd is not None and upd.rho_upd is not None and len(upd.rho_upd) != self.layers - 1:
                raise ValueError(f"measurement.results.{pooling}.update_depth.rho_upd is not L-1")


def _agree(a: float, b: float) -> bool:
    return abs(a - b) <= _AGREE_REL * max(abs(a), abs(b), 1e-3)


# ---------------------------------------------------------------------------------------------
# The door


def parse_snapshot_json(text: str, where: str = "The snapshot") -> Any:
    """`json.loads(text)`, but an object that names one key twice is refused (SnapshotError,
    one sentence): `json.loads` keeps the last value silently, so a file could show a checker
    one value and a reader of the raw text another."""
    import json

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                shown = _dotted((key,))
                raise SnapshotError(f"{where} names the key {shown} twice in one object.")
            out[key] = value
        return out

    return json.loads(text, object_pairs_hook=unique)


def check_snapshot(data: Any, where: str = "The snapshot") -> dict[str, Any]:
    """`data` (a parsed snapshot file) if it follows the schema (module docstring); otherwise
    SnapshotError, one sentence that starts with `where` and names the field."""
    not_one = SnapshotError(
        f"{where} is not a run snapshot (the JSON that `deffcore measure --snapshot` writes)."
    )
    if not isinstance(data, dict) or "format" not in data:
        raise not_one
    if data["format"] != SNAPSHOT_FORMAT:
        shown = data["format"]
        small = isinstance(shown, int | float | None) and len(repr(shown)) <= 20
        shown = shown if small else "(not a small number)"  # a 10^400 stays out of the sentence
        raise SnapshotError(
            f"{where} has snapshot format {shown!r}; this deffcore reads format {SNAPSHOT_FORMAT}."
        )
    if "similarity" not in data or "spec" not in data:
        raise not_one
    _check_text(data, where)
    try:
        Snapshot.model_validate(data)
    except ValidationError as err:
        raise SnapshotError(_sentence(where, err)) from None
    _check_atlas(data.get("atlas"), data["layers"], where)
    _check_paired_and_supply(data, where)
    _check_measures(data.get("measures"), data["layers"], data["n"], where)
    return data


def _check_measures(tables: Any, L: int, N: int, where: str) -> None:
    """The tables across similarity measures a snapshot may carry (SPEC 17.4): per pooling, a
    `MeasureTable` of this run's L and N whose numbers are finite (or absent) and whose regimes
    are the three words."""
    if tables is None:  # most snapshots: no import of the measures' engine (scipy, torch)
        return
    from deffcore.statistics.measure_table import MeasureTable

    if not isinstance(tables, dict) or not set(tables) <= set(POOLINGS):
        raise SnapshotError(f"{where}: 'measures' is not a table per pooling.")
    for pooling, d in tables.items():
        try:
            table = MeasureTable.from_dict(d)
        except DeffError:
            raise SnapshotError(f"{where}: its {pooling} measure table is unreadable.") from None
        if (table.layers, table.n) != (L, N):
            raise SnapshotError(f"{where}: its {pooling} measure table is not of this run's L, N.")
        for r in table.rows:
            if not isinstance(r.undefined, str | None) or not isinstance(r.caveat, str | None):
                raise SnapshotError(f"{where}: its {pooling} measure table has a non-text reason.")
            numbers = (r.deff, r.deff_over_L, r.gap_pct, r.low, r.high, r.gap_low, r.gap_high)
            if any(v is not None and not finite_number(v) for v in (*numbers, r.cal)):
                raise SnapshotError(f"{where}: its {pooling} measure table has a non-number.")
            if r.regime not in (None, "below", "above", "at the reference"):
                raise SnapshotError(f"{where}: its {pooling} measure table has an unknown regime.")


def _check_paired_and_supply(data: dict[str, Any], where: str) -> None:
    """The stored paired bootstrap (SPEC section 15: of this run's L and N) and what the run's
    data can give (`tokens.WindowSource`: token counts per document), when the snapshot has
    them."""
    if "paired" in data:
        from deffcore.statistics.paired import PairedBootstrap

        try:  # its L and N are checked already (`StoredPaired`)
            PairedBootstrap.from_dict(data["paired"])
        except DeffError as err:
            raise SnapshotError(f"{where}: {err}") from None
    if "supply" in data:
        from deffcore.inputs.texts import WindowSource

        try:
            WindowSource.from_dict(data["supply"])
        except (ValueError, KeyError, TypeError, AttributeError):
            raise SnapshotError(f"{where}: 'supply' is not token counts per document.") from None


def _check_atlas(atlas: Any, L: int, where: str) -> None:
    """The depth-use atlas a snapshot may carry (`deffcore.measures.atlas.check_atlas_dict`)."""
    from deffcore.measures.atlas import AtlasFileError, check_atlas_dict

    if atlas is None:
        return
    try:
        check_atlas_dict(atlas, L)
    except AtlasFileError as err:
        raise SnapshotError(f"{where}: its depth-use atlas is unreadable: {err}") from None
    except (ValueError, TypeError, OverflowError, KeyError, AttributeError):  # ragged, odd types
        raise SnapshotError(
            f"{where}: its depth-use atlas is unreadable (not numbers of the shapes it names)."
        ) from None


def _check_text(data: Any, where: str) -> None:
    """Every string and key valid text (no lone surrogate, no control character, bounded),
    and the document at most MAX_DEPTH deep; walked without recursion."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while stack:
        node, path = stack.pop()
        if len(path) > MAX_DEPTH:
            raise SnapshotError(f"{where} is nested deeper than any run snapshot.")
        if isinstance(node, str):
            _check_string(node, path, where)
        elif isinstance(node, dict):
            for key, value in node.items():
                _check_string(str(key), (*path, "(key)"), where)
                stack.append((value, (*path, key)))
        elif isinstance(node, list) and any(isinstance(v, str | list | dict) for v in node):
            stack.extend((value, (*path, i)) for i, value in enumerate(node))


def _check_string(text: str, path: tuple[Any, ...], where: str) -> None:
    if len(text) > MAX_TEXT:
        raise SnapshotError(
            f"{where}: its field {_dotted(path)} is longer than {MAX_TEXT:,} characters."
        )
    if NOT_TEXT.search(text):
        raise SnapshotError(
            f"{where}: its field {_dotted(path)} holds a control character or a lone "
            "surrogate, which is not text."
        )


def _dotted(path: tuple[Any, ...]) -> str:
    text = ".".join(str(p) for p in path) or "(top level)"
    text = _NOT_ONE_LINE.sub("?", text)
    return repr(text if len(text) <= 80 else text[:77] + "...")


#: How a pydantic error type reads in the sentence.
_WHAT = {
    "missing": "is missing",
    "extra_forbidden": "is not a field of a run snapshot",
    "int_type": "is not a whole number",
    "float_type": "is not a number",
    "string_type": "is not text",
    "dict_type": "is not an object",
    "model_type": "is not an object",
    "list_type": "is not a list",
    "finite_number": "is not a finite number",
    "literal_error": "is not one of the values it may take",
    "string_pattern_mismatch": "is not in its expected form",
    "string_too_short": "is empty",
    "string_too_long": "is too long",
    "too_short": "has too few items",
    "too_long": "has too many items",
}
_BOUND = {"greater_than_equal": "ge", "less_than_equal": "le", "greater_than": "gt"}


def _sentence(where: str, err: ValidationError) -> str:
    """The first problem pydantic found, as one sentence naming the field."""
    first = err.errors(include_url=False)[0]
    kind, loc, ctx = first["type"], first["loc"], first.get("ctx") or {}
    if kind == "value_error":  # our own checks: the message is the predicate
        reason = str(ctx.get("error", first["msg"]))
        if not loc:
            return f"{where} is not consistent: {reason}."
        return f"{where}: its field {_dotted(loc)} {reason}."
    if kind in _BOUND:
        limit = ctx.get(_BOUND[kind])
        sign = {"ge": ">=", "le": "<=", "gt": ">"}[_BOUND[kind]]
        return f"{where}: its field {_dotted(loc)} is out of range (it must be {sign} {limit})."
    what = _WHAT.get(kind) or _NOT_ONE_LINE.sub("?", str(first["msg"])).rstrip(".").lower()[:120]
    return f"{where}: its field {_dotted(loc)} {what}."
