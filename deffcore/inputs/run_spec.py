"""A run's identity: every value that determines its pooled states, and its cache key."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from deffcore.core.constants import CODE_VERSION


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

    def identity(self) -> dict[str, Any]:
        """The plain values hashed into the key (model weights id and dataset content id too)."""
        from deffcore.inputs.identity import model_identity
        from deffcore.inputs.texts import dataset_identity

        return {
            **asdict(self),
            "weights_id": model_identity(self.model, self.revision)["weights_id"],
            "dataset_id": dataset_identity(self.dataset)["content_id"],
            "code_version": CODE_VERSION,
        }

    def key(self) -> str:
        blob = json.dumps(self.identity(), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:20]
