"""Token ids of passages: the tokenizer's special tokens, the BOS option, token windows.

A tokenizer adds special tokens around every text by default (Llama and Gemma put a BOS in
front; GPT-2 and SmolLM2 add nothing). `special_tokens` finds them by encoding one text with and
without them. A passage's ids are then

    prefix + body[: max_tokens - len(prefix) - len(suffix)] + suffix

which is what `tokenizer(text, truncation=True, max_length=max_tokens)` gives (special tokens
kept inside the budget), with the prefix adjusted by the BOS option (SPEC section 11.4):

    default   the tokenizer's own prefix
    add       exactly one BOS at position 0 (prepended when the tokenizer adds none)
    none      the prefix without BOS, even where the tokenizer adds one

Token windows (SPEC section 12): each document's body (no special tokens) is cut into
consecutive non-overlapping chunks of `max_tokens - len(prefix) - len(suffix)` tokens, each
chunk wrapped in the same prefix and suffix, so every window has exactly `max_tokens` tokens;
a last chunk shorter than that is dropped. `sample_windows` draws N of them with the run's
seed (`numpy.random.default_rng(seed).permutation`, like documents).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from deffcore.constants import BOS_OPTIONS
from deffcore.errors import DeffError, TooFewPassagesError

_PROBE = "a"


def special_tokens(tokenizer: Any) -> tuple[list[int], list[int]]:
    """(prefix, suffix): the ids the tokenizer adds before and after a text by default."""
    with_special = list(tokenizer(_PROBE).input_ids)
    body = list(tokenizer(_PROBE, add_special_tokens=False).input_ids)
    for start in range(len(with_special) - len(body) + 1):
        if with_special[start : start + len(body)] == body:
            return with_special[:start], with_special[start + len(body) :]
    # a tokenizer that merges specials into the text's tokens: keep only a leading BOS
    bos = tokenizer.bos_token_id
    return ([bos] if with_special[:1] == [bos] else []), []


def prefix_suffix(tokenizer: Any, bos: str = "default") -> tuple[list[int], list[int]]:
    """The special ids around every passage under the BOS option `bos`."""
    if bos not in BOS_OPTIONS:
        raise DeffError(f"Unknown BOS option {bos!r}; choose one of {', '.join(BOS_OPTIONS)}.")
    prefix, suffix = special_tokens(tokenizer)
    if bos == "default":
        return prefix, suffix
    bos_id = tokenizer.bos_token_id
    if bos == "none":
        return [i for i in prefix if i != bos_id], suffix
    if bos_id is None:
        raise DeffError(
            "The BOS option 'add' needs a tokenizer with a BOS token, and this tokenizer has "
            "none; use --bos default or --bos none."
        )
    return ([bos_id, *[i for i in prefix if i != bos_id]]), suffix


def adds_bos(tokenizer: Any) -> bool:
    """Whether the tokenizer puts a BOS token in front of a text by default."""
    prefix, _ = special_tokens(tokenizer)
    return tokenizer.bos_token_id is not None and tokenizer.bos_token_id in prefix


def _bodies(tokenizer: Any, texts: Sequence[str]) -> list[list[int]]:
    if not texts:
        return []
    return [list(ids) for ids in tokenizer(list(texts), add_special_tokens=False).input_ids]


def body_length(max_tokens: int, prefix: list[int], suffix: list[int]) -> int:
    """Text tokens per passage once the special tokens are inside the `max_tokens` budget."""
    room = max_tokens - len(prefix) - len(suffix)
    if room < 1:
        raise DeffError(
            f"max_tokens={max_tokens} leaves no room for text after the tokenizer's "
            f"{len(prefix) + len(suffix)} special token(s); ask for more tokens."
        )
    return room


def encode_documents(
    tokenizer: Any, texts: Sequence[str], max_tokens: int, bos: str = "default"
) -> list[list[int]]:
    """Ids of each text, special tokens per `bos`, truncated to `max_tokens` (specials count)."""
    prefix, suffix = prefix_suffix(tokenizer, bos)
    room = body_length(max_tokens, prefix, suffix)
    return [prefix + body[:room] + suffix for body in _bodies(tokenizer, texts)]


def cut_windows(
    tokenizer: Any, documents: Sequence[str], max_tokens: int, bos: str = "default"
) -> list[list[int]]:
    """Every full window of `max_tokens` ids of every document, in document order."""
    prefix, suffix = prefix_suffix(tokenizer, bos)
    room = body_length(max_tokens, prefix, suffix)
    windows: list[list[int]] = []
    for body in _bodies(tokenizer, documents):
        for start in range(0, len(body) - room + 1, room):
            windows.append(prefix + body[start : start + room] + suffix)
    return windows


def sample_windows(windows: list[list[int]], n: int, seed: int) -> list[list[int]]:
    """`n` windows drawn without replacement with `seed` (TooFewPassagesError if too few)."""
    if len(windows) < n:
        raise TooFewPassagesError(
            f"The dataset yields {len(windows)} windows of this length, fewer than n={n}; ask "
            f"for n <= {len(windows)} or shorter windows (--max-tokens)."
        )
    order = np.random.default_rng(seed).permutation(len(windows))[:n]
    return [windows[i] for i in order]
