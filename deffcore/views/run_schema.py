"""The one schema of a run snapshot: what every page, the notebook and the report may read.

Stage: views (beside `snapshot` and `sharing`; it imports only core's constants and errors,
`measures.depth` and `views.labels`' spec fields).

A snapshot (`deffcore.views.snapshot.snapshot`, `deffcore measure --snapshot`) is also the file a
colleague sends, so it is hostile until it passes `check_snapshot`, the single door every
reader goes through (`SnapshotView`, hence `sharing.read_snapshot`, `open_snapshot`,
`open_shared`, `list_shared`, `snapshot.load_snapshot` and `load_gallery`). It checks, in
this order:

1. Text (`_check_text`): every string and key is valid Unicode text: no lone surrogate (they
   raise `UnicodeEncodeError` wherever the text is sent to a browser), no control character
   (C0/C1 but tab and line feed, the bidirectional overrides: `safe_text.NOT_TEXT`, the one
   definition of text; a passage's "\n" token is text), at most `MAX_TEXT` characters; the
   document is at most `MAX_DEPTH` deep.
2. Types and bounds (the pydantic models below): every field a reader reads has its type,
   numbers are finite (a JSON `1e400` is `inf`, `NaN` is refused), integers are not booleans,
   strings are not numbers, counts lie in their bounds (N, L, d, max tokens, seeds).
3. Self-consistency (`Snapshot._consistent`): every similarity matrix is L x L, symmetric,
   with a unit diagonal and values in [-1, 1]; L + 1 position-0 ratios; N no more than the
   spec's N; the CLI JSON's N, L, d, key, finite-sample bias d/(N+d) and each pooling's D_eff
   agree with the top level and with the matrices they were computed from; a random-weight
   band's mean is the mean of its seeds and lies inside [low, high].
4. The stored sections every page, the report and the notebook read, each typed and of this
   run's L and N: the depth-use atlas (`StoredAtlas`, SPEC 16: every per-block measure L
   long, the angular distances (L+1) x (L+1), Gromov et al.'s curve, the sublayers, every
   interval of its measure's shape, the skip effect L x L), the paired bootstrap
   (`StoredPaired`, SPEC 15: of this run's L and N, one entry per pooling and metric), the
   BOS diagnostics of the current format (`Diagnostics`, SPEC 11: the massive-activation,
   Sun et al. and Gu et al. fields, the sink scores and the passage inspector, L or L + 1
   long), and a random-weight seed is a whole number (in a JSON number or in digits).

A file that breaks any rule gets one sentence (`SnapshotError`, naming the file and the
field) and nothing of it is shown. A file is parsed by `parse_snapshot_json`, which refuses a
duplicated key in any object (`json.loads` would keep the last one silently).
"""

from __future__ import annotations

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

from deffcore.core.constants import DIAG_FORMAT
from deffcore.core.errors import DeffError
from deffcore.core.safe_text import NOT_TEXT
from deffcore.views.schema_types import (  # re-exported: the one schema's names
    MAX_D_MODEL,
    MAX_DEPTH,
    MAX_LAYERS,
    MAX_PASSAGES,
    MAX_SEED,
    MAX_SEEDS,
    MAX_TEXT,
    SNAPSHOT_FORMAT,
    Count,
    Metric,
    Name,
    NonNegative,
    Number,
    Pooling,
    Spec,
    Text,
    _Part,
)
from deffcore.views.stored_sections import Diagnostics, StoredAtlas, StoredPaired

#: Agreement asked of numbers stored beside the matrix they came from (rounded to 1e-6).
_DIAGONAL_TOL = 1e-4
_SYMMETRY_TOL = 1e-6
_AGREE_REL = 1e-3

#: What a one-line message may not repeat from a file: every control character (line feed and
#: tab too), the bidirectional controls, surrogates. (What a *field* may not hold is
#: `safe_text.NOT_TEXT`: text keeps its tabs and line feeds, e.g. a "\n" token.)
_NOT_ONE_LINE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


class SnapshotError(DeffError):
    """A file that is not a readable run snapshot of this format (one sentence why)."""


# ---------------------------------------------------------------------------------------------
# Similarity matrices


def _similarity(rows: list[list[float]]) -> list[list[float]]:
    """A similarity matrix: square, symmetric, unit diagonal, values in [-1, 1]."""
    L = len(rows)
    if L < 2 or any(len(r) != L for r in rows):
        raise ValueError("is not a square matrix of at least 2 x 2")
    S = np.asarray(rows, dtype=np.float64)
    if np.abs(S).max() > 1 + 1e-6:
        raise ValueError("has a value outside [-1, 1]")
    if np.abs(S - S.T).max() > _SYMMETRY_TOL:
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
    """A whole snapshot file (`deffcore.views.snapshot.snapshot`)."""

    model_config = ConfigDict(extra="allow")

    format: Literal[SNAPSHOT_FORMAT]  # type: ignore[valid-type]
    command: Text = ""
    key: Annotated[str, Strict(), Field(pattern=r"^([0-9a-f]{20})?$")] = ""
    spec: Spec
    layers: Count(2, MAX_LAYERS)
    d_model: Count(1, MAX_D_MODEL)
    n: Count(1, MAX_PASSAGES)
    n_dropped_short: Count(0, MAX_PASSAGES) = 0
    pos0_norm_ratio: list[NonNegative | None]
    similarity: dict[Pooling, dict[Metric, Matrix]]
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
    return data


def _check_paired_and_supply(data: dict[str, Any], where: str) -> None:
    """The stored paired bootstrap (SPEC section 15: of this run's L and N) and what the run's
    data can give (`tokens.WindowSource`: token counts per document), when the snapshot has
    them."""
    if "paired" in data:
        from deffcore.statistics.paired import PairedBootstrap

        try:
            pb = PairedBootstrap.from_dict(data["paired"])
        except DeffError as err:
            raise SnapshotError(f"{where}: {err}") from None
        if (pb.layers, pb.n) != (data["layers"], data["n"]):
            raise SnapshotError(f"{where}: its paired bootstrap is not of this run's L and N.")
    if "supply" in data:
        from deffcore.inputs.tokens import WindowSource

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
