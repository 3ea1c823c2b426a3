"""A run's identity: every value that determines its pooled states, and its cache key."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from deffcore.core.constants import CODE_VERSION
from deffcore.inputs.model_spec import ModelSpec


@dataclass(frozen=True)
class RunSpec:
    """Everything that determines a run's pooled states; `key()` names its cache entry."""

    model: str
    revision: str | None
    dataset: str
    n: int
    max_tokens: int
    seed: int
    dtype: str
    intervention: str = "none"
    #: "documents", "windows" (SPEC section 12) or "packed": part of the dataset's identity.
    passages: str = "documents"
    #: BOS option "default", "add" or "none" (SPEC section 11.4).
    bos: str = "default"

    def __post_init__(self) -> None:
        # `model` may be given parsed; it is kept as its text, so the key, `asdict` and
        # `__dict__` (stored runs) hold the same string and fields as before. A new run's spec
        # is parsed, strictly, at its door (`runs.preflight.run_spec`); one read back from a
        # stored run is taken as it was written (a colleague's snapshot still opens).
        object.__setattr__(self, "model", str(self.model))

    @property
    def model_spec(self) -> ModelSpec:
        """`model`, parsed (`deffcore.inputs.model_spec`; `ModelSpec.stored`: never an
        error)."""
        return ModelSpec.stored(self.model)

    def sources(self) -> dict[str, dict[str, Any]]:
        """What the model and the dataset are, in plain values: {"model_identity": ...,
        "dataset_identity": ...} (`inputs.identity.model_identity`, `inputs.texts.dataset_identity`;
        a cache entry's meta records both)."""
        from deffcore.inputs.identity import model_identity
        from deffcore.inputs.texts import dataset_identity

        return {
            "model_identity": model_identity(self.model, self.revision),
            "dataset_identity": dataset_identity(self.dataset),
        }

    def identity(self) -> dict[str, Any]:
        """The plain values hashed into the key (model weights id and dataset content id too)."""
        sources = self.sources()
        return {
            **asdict(self),
            "weights_id": sources["model_identity"]["weights_id"],
            "dataset_id": sources["dataset_identity"]["content_id"],
            "code_version": CODE_VERSION,
        }

    def key(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]
