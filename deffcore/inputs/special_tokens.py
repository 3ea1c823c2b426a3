"""What a tokenizer adds around a text by default: its special-token prefix and suffix, its BOS."""

from __future__ import annotations

from typing import Any

_PROBE = "a"


def special_tokens(tokenizer: Any) -> tuple[list[int], list[int]]:
    """(prefix, suffix): the ids the tokenizer adds before and after a text by default.

    Found by encoding one text with and without special tokens (`deffcore.inputs.tokens` builds
    every
    passage's ids from these).
    """
    with_special = list(tokenizer(_PROBE).input_ids)
    body = list(tokenizer(_PROBE, add_special_tokens=False).input_ids)
    for start in range(len(with_special) - len(body) + 1):
        if with_special[start : start + len(body)] == body:
            return with_special[:start], with_special[start + len(body) :]
    # a tokenizer that merges specials into the text's tokens: keep only a leading BOS
    bos = tokenizer.bos_token_id
    return ([bos] if with_special[:1] == [bos] else []), []


def adds_bos(tokenizer: Any) -> bool:
    """Whether the tokenizer puts a BOS token in front of a text by default."""
    prefix, _ = special_tokens(tokenizer)
    return tokenizer.bos_token_id is not None and tokenizer.bos_token_id in prefix
