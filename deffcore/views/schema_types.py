"""The field types of a run snapshot's one schema (`deffcore.views.run_schema`): plain JSON
numbers, bounded counts and texts, the run's spec.

Stage: views (imports only core's constants).
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict

from deffcore.core.constants import BOS_OPTIONS, METRICS, PASSAGE_MODES, POOLINGS

#: Bump when the snapshot layout changes; the loader rejects other versions.
SNAPSHOT_FORMAT = 1
#: Largest L a snapshot may claim (every similarity matrix is L x L).
MAX_LAYERS = 2048
#: Largest N (passages) and d (features) a snapshot may claim: far above any real run, far
#: below what overflows a table's int64 or a float's exponent.
MAX_PASSAGES = 10**9
MAX_D_MODEL = 2**20
MAX_TOKENS = 2**24
MAX_SEED = 2**63 - 1
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


Number = Annotated[float, BeforeValidator(_plain_number), Field(allow_inf_nan=False)]
NonNegative = Annotated[float, BeforeValidator(_plain_number), Field(ge=0, allow_inf_nan=False)]


def Count(low: int, high: int) -> Any:  # a type factory: named like the types it makes
    return Annotated[int, Strict(), Field(ge=low, le=high)]


Name = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_NAME)]
Text = Annotated[str, Strict(), Field(max_length=MAX_TEXT)]
Pooling = Literal[POOLINGS]  # type: ignore[valid-type]
Metric = Literal[METRICS]  # type: ignore[valid-type]


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
