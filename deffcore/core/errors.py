"""Every error deffcore raises on bad input, one class per situation.

All derive from `DeffError` (a `ValueError`), so callers (the CLI, the app) can catch one type
and show `str(err)`, which is always a complete, specific sentence for a person to read.
"""

from __future__ import annotations

import re


class DeffError(ValueError):
    """Base class: bad input or an environment problem with a clear message."""


class InvalidStatesError(DeffError):
    """States have the wrong shape, too few layers/passages, or NaN/inf values."""


class NonFiniteActivationsError(InvalidStatesError):
    """The model produced NaN or inf in its residual stream."""


class UnknownModelError(DeffError):
    """A model id that is neither packaged, a local path, nor reachable on the hub."""


class HubUnavailableError(DeffError):
    """The Hugging Face hub cannot be reached; the message names the offline models."""


class UnknownDatasetError(DeffError):
    """A dataset spec that names nothing we can read."""


class TooFewPassagesError(DeffError):
    """Fewer usable passages than the measurement needs."""


class CacheCorruptError(DeffError):
    """A cache entry failed validation (truncated, wrong checksum, unreadable)."""


class UnsupportedArchitectureError(DeffError):
    """The model lacks what an operation needs (e.g. Gemma-style post norms for an intervention)."""


class OutOfMemoryError(DeffError):
    """Even batch size 1 does not fit in memory."""


# Resumable runs: raised between batches when a caller's `should_stop()` says so.
class RunCancelled(DeffError):
    """A run was stopped on request; its finished batches are kept and a rerun resumes them."""


class InvalidArgumentError(DeffError):
    """An argument out of its range: a negative seed, a zero batch size, max_tokens beyond the
    model's context, an output path that cannot be written."""


class DeviceUnavailableError(DeffError):
    """An unknown device name, or a device this machine does not have (CUDA without a GPU)."""


class ForeignCacheEntryError(CacheCorruptError):
    """Something in the cache folder named like a run's entry or lock that deffcore did not make
    (a symbolic link, a folder where a file belongs, a file it never writes): it is never read,
    written or deleted through."""


class CacheWriteError(DeffError):
    """The cache folder cannot be written: the disk is full, permissions, a read-only disk."""


class UndefinedSimilarityError(InvalidStatesError):
    """A layer's states give no similarity: they do not vary across passages (its centred
    matrix is zero), so CKA is undefined for it."""


class MeasureNotComputedError(DeffError):
    """A run holds no matrix of this similarity measure yet (SPEC 17.4): it is computed only
    on request (minutes at N in the thousands), never as a side effect of reading the run."""


class SnapshotError(DeffError):
    """A file that is not a readable run snapshot of this format (one sentence why; the one
    schema is `deffcore.views.run_schema`)."""


class NotInRunError(SnapshotError, KeyError):
    """A stored run holds no similarity for the pooling or metric asked of it (a name it never
    had, or one made after it was written). A KeyError too, so a surface that skips what an
    older snapshot lacks keeps skipping it; its message is the sentence, not a key's repr."""

    __str__ = DeffError.__str__


class GWSolverError(DeffError):
    """A Gromov–Wasserstein solve gave no valid coupling (e.g. an entropic epsilon so small
    that Sinkhorn underflows): its number is not a GW value and is never stored."""


def non_finite_advice(dtype: str | None) -> str:
    """What to try when a model's states hold NaN or inf, for a run in `dtype` (never "try
    float32" to a run that is already in float32)."""
    if dtype in (None, "float32", "torch.float32"):
        return (
            "the run is already in float32 (the states' norms overflow its range, or the model "
            "produced NaN), so check the weights"
        )
    return "try float32 (--dtype float32), or check the weights"


_TRY_FLOAT32 = re.compile(r"([Tt])ry float32 \(--dtype float32\),? or check the weights")


def fit_advice(err: NonFiniteActivationsError, dtype: str | None) -> NonFiniteActivationsError:
    """`err` with its "try float32" advice replaced by `non_finite_advice(dtype)` (the
    extraction's hooks do not know the run's dtype; the run does)."""
    advice = non_finite_advice(dtype)

    def fitted(m: re.Match) -> str:
        return advice[0].upper() + advice[1:] if m.group(1) == "T" else advice

    text = _TRY_FLOAT32.sub(fitted, str(err))
    return err if text == str(err) else type(err)(text)
