"""A model spec, parsed once: the one place that reads a model spec's string form.

The forms (SPEC section 8; `deffcore.inputs.catalog` lists the names):

    smollm2-135m, gemma3-270m        Kind.PACKAGED  a packaged GGUF
    tiny-<arch>, tiny-<arch>-nobos   Kind.TINY      a tiny test model (`catalog.TINY_MODELS`)
    llama-3.1-8b, qwen3-8b, ...      Kind.SHAPE     a published shape without weights (only its
                                                    random models load)
    random:<spec>:<seed>             Kind.RANDOM    `<spec>`'s config, freshly initialised
                                                    under `seed` (`base` is `<spec>` parsed)
    loaded:<id>                      Kind.LOADED    a model handed in from a notebook (a label)
    states:<name>                    Kind.STATES    states computed elsewhere (a label)
    <path>.gguf                      Kind.GGUF      a local GGUF file
    <folder>                         Kind.FOLDER    a local model folder (one that exists)
    <org>/<name>                     Kind.HUB       a Hugging Face id (its revision is a run's
                                                    own field), or anything else

`ModelSpec.parse(text)` is called at the doors (the CLI, `RunSpec`, the public functions that
take a string); everything downstream reads `kind`, `base`, `seed`, ... and `str(spec)` (the
text as given: cache keys and stored runs hold exactly that string). A malformed spec (a
`random:` without a whole-number seed, an unknown `tiny-` name, an empty one) is one sentence,
an UnknownModelError.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

from deffcore.core.errors import UnknownModelError

RANDOM_PREFIX = "random:"
LOADED_PREFIX = "loaded:"
STATES_PREFIX = "states:"
TINY_PREFIX = "tiny-"
GGUF_SUFFIX = ".gguf"


class Kind(enum.Enum):
    """What a model spec names (see the module docstring)."""

    PACKAGED = "packaged"
    TINY = "tiny"
    SHAPE = "shape"
    RANDOM = "random"
    LOADED = "loaded"
    STATES = "states"
    GGUF = "gguf"
    FOLDER = "folder"
    HUB = "hub"


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model spec. `text` is the spec as given (`str(spec)` returns it unchanged);
    `base` and `seed` are set for Kind.RANDOM only."""

    text: str
    kind: Kind
    base: ModelSpec | None = None
    seed: int | None = None

    def __str__(self) -> str:
        return self.text

    @classmethod
    def parse(cls, text: str | ModelSpec) -> ModelSpec:
        """The spec `text` names (a ModelSpec comes back as it is); UnknownModelError, one
        sentence naming the form, for a malformed one."""
        if isinstance(text, ModelSpec):
            return text
        return cls._read(str(text), strict=True)

    @classmethod
    def stored(cls, text: object) -> ModelSpec:
        """The spec a stored run holds, never an error: what no longer parses (a tiny model
        since renamed, a hand-edited or hostile file) reads as a hub id of that text, as the
        string-reading code took it (so its cache key is the one it had)."""
        if isinstance(text, ModelSpec):
            return text
        return cls._read(str(text), strict=False)

    @classmethod
    def _read(cls, text: str, *, strict: bool) -> ModelSpec:
        from deffcore.inputs.catalog import PACKAGED_MODELS, TINY_MODELS
        from deffcore.inputs.shapes import is_shape

        if not text.strip():
            if not strict:
                return cls(text, Kind.HUB)
            raise UnknownModelError("The model spec is empty; name a model.")
        try:
            random = split_random(text)
        except UnknownModelError:
            if strict:
                raise
            return cls(text, Kind.HUB)
        if random is not None:
            base = cls._read(random[0], strict=strict)
            return cls(text, Kind.RANDOM, base=base, seed=random[1])
        if text.startswith(LOADED_PREFIX):
            return cls(text, Kind.LOADED)
        if text.startswith(STATES_PREFIX):
            return cls(text, Kind.STATES)
        if text in PACKAGED_MODELS:
            return cls(text, Kind.PACKAGED)
        if is_shape(text):
            return cls(text, Kind.SHAPE)
        if text in TINY_MODELS:
            return cls(text, Kind.TINY)
        if text.startswith(TINY_PREFIX) and strict:
            raise UnknownModelError(
                f"Unknown tiny model {text!r}; tiny models are: {', '.join(TINY_MODELS)}."
            )
        path = Path(text).expanduser()
        if path.suffix == GGUF_SUFFIX:
            return cls(text, Kind.GGUF)
        if path.is_dir():
            return cls(text, Kind.FOLDER)
        return cls(text, Kind.HUB)

    @classmethod
    def random(cls, base: str | ModelSpec, seed: int) -> ModelSpec:
        """`random:<base>:<seed>`: the random-weight model of `base`'s config."""
        base, seed = cls.parse(base), int(seed)
        return cls(f"{RANDOM_PREFIX}{base.text}:{seed}", Kind.RANDOM, base=base, seed=seed)

    @property
    def is_random(self) -> bool:
        return self.kind is Kind.RANDOM

    @property
    def trained(self) -> ModelSpec:
        """The spec whose config and tokenizer this one reads: `base` for a random model
        (innermost), else itself."""
        spec = self
        while spec.base is not None:
            spec = spec.base
        return spec

    @property
    def random_weights(self) -> bool:
        """Weights that were never trained: a random model or a tiny test model."""
        return self.kind in (Kind.RANDOM, Kind.TINY)

    @property
    def external(self) -> bool:
        """A model that no spec loads: one handed in from a notebook (`loaded:`) or states
        computed elsewhere (`states:`)."""
        return self.kind in (Kind.LOADED, Kind.STATES)

    @property
    def path(self) -> Path:
        """The text as a local path (`~` expanded); meaningful for GGUF and FOLDER."""
        return Path(self.text).expanduser()

    @property
    def tiny_arch(self) -> str:
        """'tiny-llama-nobos' -> 'llama' (Kind.TINY)."""
        return self.text.removeprefix(TINY_PREFIX).removesuffix("-nobos")

    @property
    def tiny_adds_bos(self) -> bool:
        """Whether a tiny model's byte tokenizer adds a BOS (`-nobos`: no)."""
        return not self.text.endswith("-nobos")

    @property
    def label(self) -> str:
        """What follows `loaded:` or `states:` (Kind.LOADED, Kind.STATES); else the text."""
        if self.kind is Kind.LOADED:
            return self.text.removeprefix(LOADED_PREFIX)
        if self.kind is Kind.STATES:
            return self.text.removeprefix(STATES_PREFIX)
        return self.text

    @property
    def looks_local(self) -> bool:
        """Whether the spec would be read from the local disk rather than the hub
        (`names_local_path`)."""
        return names_local_path(self.text)


def split_random(text: str) -> tuple[str, int] | None:
    """'random:smollm2-135m:0' -> ('smollm2-135m', 0), the base left unread; None when `text` is
    not a random null; UnknownModelError for a `random:` spec without a whole-number seed.

    For a door that reports each model's own error later (a sweep's grid); elsewhere
    `ModelSpec.parse` reads the base too."""
    if not text.startswith(RANDOM_PREFIX):
        return None
    inner, sep, seed = text.removeprefix(RANDOM_PREFIX).rpartition(":")
    if not sep or not inner or not seed.lstrip("-").isdigit():
        raise UnknownModelError(
            f"Random-weight model spec {text!r} must look like 'random:<model>:<seed>', "
            "e.g. 'random:smollm2-135m:0'."
        )
    return inner, int(seed)


def names_local_path(text: str) -> bool:
    """Whether `text` would be read from the local disk rather than the hub (mirrors
    `deffcore.inputs.loading`): a `.gguf` name, anything that exists on disk, or text that
    starts like a path or has more than one '/' (a hub id is `org/name`)."""
    text = text.strip()
    if not text:
        return False
    return (
        text.endswith(GGUF_SUFFIX)
        or text.startswith((".", "/", "~"))
        or text.count("/") > 1
        or Path(text).expanduser().exists()
    )
