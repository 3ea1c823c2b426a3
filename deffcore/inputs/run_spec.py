"""A run's identity (`RunSpec`: every value that determines its pooled states, and its cache
key), then its inputs made ready for extraction (`RunInputs`, `open_run_inputs`)."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from deffcore.core.constants import CODE_VERSION, WINDOW_MODES
from deffcore.core.errors import RunCancelled
from deffcore.inputs.architecture import Architecture, architecture_of
from deffcore.inputs.interventions import norm_intervention
from deffcore.inputs.model import (
    LoadedModel,
    ModelSpec,
    Progress,
    default_device,
    lease,
    load_model,
    model_identity,
    needs_assembly,
    packaged_gguf,
)
from deffcore.inputs.texts import (
    DatasetSpec,
    dataset_identity,
    prepare_ids,
    run_texts,
    run_token_ids,
)


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
        # is parsed, strictly, at its door (`runs.measure.run_spec`); one read back from a
        # stored run is taken as it was written (a colleague's snapshot still opens).
        object.__setattr__(self, "model", str(self.model))
        # `dataset` likewise (a DatasetSpec given is kept as its text; `dataset_spec` reads it).
        object.__setattr__(self, "dataset", str(self.dataset))

    @property
    def model_spec(self) -> ModelSpec:
        """`model`, parsed (`ModelSpec.stored`: never an error)."""
        return ModelSpec.stored(self.model)

    @property
    def dataset_spec(self) -> DatasetSpec:
        """`dataset`, parsed (`DatasetSpec.stored`: never an error)."""
        return DatasetSpec.stored(self.dataset)

    def sources(self) -> dict[str, dict[str, Any]]:
        """What the model and the dataset are, in plain values: {"model_identity": ...,
        "dataset_identity": ...} (a cache entry's meta records both)."""
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


# ---------------------------------------------------------------------------------------------
# A run's inputs made ready for its extraction: texts, model, token ids, intervention.
#
# Stage: inputs (the last step of it: what `deffcore.extraction.forward.extract_run` takes).
#
#     inputs = open_run_inputs(spec, device="cpu")   # texts, then the model, then the ids
#     with inputs:                                    # the lease and the intervention, held
#         pooled = extract_run(inputs)                # the forward passes, nothing else
#
# The run's data goes one way: the dataset is opened before the model loads (a bad dataset fails
# in milliseconds), the model comes from the process's cache of loaded models unless one is
# given, windows are cut or documents tokenised here, and the architecture is read once, so
# extraction runs the model over ready ids and never asks this stage again. The intervention the
# spec names is applied until the inputs are closed (`with inputs:`, or `inputs.close()`).


@dataclass(frozen=True)
class RunInputs:
    """What one extraction runs over.

    loaded:      the model and its tokenizer, on its device
    arch:        where its residual stream is (`architecture_of(loaded.model)`)
    ids:         token ids of the kept passages, each of 2 .. max_tokens ids
    kept:        (len(ids),) each kept passage's index among the `given` passages
    given:       passages given (texts or windows), kept or not
    max_tokens:  the truncation the ids were made with
    bos:         the BOS option they were made with (SPEC section 11.4)
    held:        what `close()` releases (the model's lease, the intervention's hooks)
    """

    loaded: LoadedModel
    arch: Architecture
    ids: list[list[int]]
    kept: list[int]
    given: int
    max_tokens: int
    bos: str
    held: contextlib.ExitStack = field(default_factory=contextlib.ExitStack, compare=False)

    def close(self) -> None:
        """Release the lease and remove the intervention (idempotent)."""
        self.held.close()

    def __enter__(self) -> RunInputs:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @classmethod
    def of(
        cls,
        loaded: LoadedModel,
        passages: list[str] | None,
        token_ids: list[list[int]] | None,
        max_tokens: int,
        bos: str = "default",
    ) -> RunInputs:
        """The inputs of a model already in memory: `token_ids` (cut to `max_tokens`), else
        `passages` tokenised with the BOS option `bos`."""
        ids, kept, given = prepare_ids(loaded.tokenizer, passages, token_ids, max_tokens, bos)
        return cls(loaded, architecture_of(loaded.model), ids, kept, given, max_tokens, bos)


def open_run_inputs(
    spec: RunSpec,
    *,
    device: str | None = None,
    loaded: LoadedModel | None = None,
    documents: list[str] | None = None,
    progress: Progress | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> RunInputs:
    """The inputs of `spec`, holding the model's lease and the intervention until closed.

    `loaded` is a model already in memory (it must be `spec.model` at `spec.revision`); without
    it the model is leased from the process's cache of loaded models and placed on `device`
    (None: the default device). `documents` are the run's texts when they are not
    `spec.dataset`'s (a notebook's strings); `should_stop()` is asked before the model loads.
    Whatever was opened is released again when making the inputs fails.
    """
    documents = run_texts(spec) if documents is None else documents
    if should_stop is not None and should_stop():
        raise RunCancelled("The run was stopped before it started.")
    with contextlib.ExitStack() as stack:
        model = loaded
        if model is None:
            model = stack.enter_context(_leased(spec, device or default_device(), progress))
        token_ids = None
        if spec.passages in WINDOW_MODES:
            if progress is not None:
                progress(0, spec.n, "cutting windows")
            token_ids = run_token_ids(spec, model.tokenizer, documents)
        if spec.intervention != "none":
            stack.enter_context(norm_intervention(model.model, spec.intervention))
        made = RunInputs.of(model, documents, token_ids, spec.max_tokens, spec.bos)
        return replace(made, held=stack.pop_all())


def _leased(
    spec: RunSpec, device: str, progress: Progress | None
) -> contextlib.AbstractContextManager[LoadedModel]:
    """The process's loaded model of `spec` (`lease`), else a load; a packaged GGUF still in
    parts is assembled first, as a stage of its own."""

    if progress is not None and needs_assembly(spec.model):
        progress(0, spec.n, f"assembling {spec.model}")
        packaged_gguf(spec.model)
    return lease(spec.model, revision=spec.revision, device=device, dtype=spec.dtype,
                 progress=progress, total=spec.n, loader=load_model)  # fmt: skip
