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

Token windows (SPEC section 12, mode `windows`): each document's body (no special tokens) is
cut into consecutive non-overlapping chunks of `max_tokens - len(prefix) - len(suffix)` tokens,
each chunk wrapped in the same prefix and suffix, so every window has exactly `max_tokens`
tokens; a last chunk shorter than that is dropped. Mode `packed` (not in the SPEC; README
"Decisions") first joins the bodies, in source order, into one stream with the ids of the
plain-text separator "\n\n" between documents, then cuts that stream the same way: a window may
span two documents, and only the stream's last partial chunk is lost, so short documents
give more windows (BBC, SmolLM2, 128 tokens: 8,884 against 7,741). The separator is text, not
an EOS or BOS, so the only special tokens in a window are its own prefix and suffix, and the
BOS/position-0 controls mean the same in both modes. Decision: the stream joins the bodies
*tokenised separately* with the separator's own ids, so its text is exactly the joined text
but not always its tokenisation: a byte-level BPE (GPT-2's pre-tokenizer, as SmolLM2's) gives
"\n\n" alone one token (1116) and "\n\n" before a letter two ("\n" "\n"), so the stream
holds one token per document boundary that tokenising the joined text would split (Gemma-3's
tokenizer gives the same ids both ways; tests/test_packed_tokenisation.py shows both).
Tokenising the joined text would change every cached packed run under its key, so it waits
for a cache-key change. `sample_windows` draws N windows with the
run's seed (`numpy.random.default_rng(seed).permutation`, like documents). `count_windows` says
how many windows a (model, dataset, max_tokens, bos, mode) choice yields from the tokenizer
alone.
"""

from __future__ import annotations

import hashlib
import json
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from deffcore.core.constants import BOS_OPTIONS, WINDOW_MODES
from deffcore.core.errors import DeffError, TooFewPassagesError
from deffcore.inputs.identity import model_identity
from deffcore.inputs.loading import load_tokenizer

# `special_tokens` and `adds_bos` live where tokenizers are loaded (models), so a LoadedModel
# and this module answer "does it add a BOS" the one same way; they are re-exported here.
from deffcore.inputs.special_tokens import adds_bos as adds_bos
from deffcore.inputs.special_tokens import special_tokens as special_tokens
from deffcore.inputs.texts import all_documents, dataset_identity, load_passages


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
    """Ids of each text, special tokens per `bos`, truncated to `max_tokens` (specials count).

    A long text is cut before it is tokenised (`cut_text`), so one 50 MB passage costs what a
    few kB do; the ids are those of the whole text."""
    prefix, suffix = prefix_suffix(tokenizer, bos)
    room = body_length(max_tokens, prefix, suffix)
    cut = [cut_text(tokenizer, text, room) for text in texts]
    return [prefix + body[:room] + suffix for body in _bodies(tokenizer, cut)]


#: A text this short (characters per body token times the body) is tokenised whole.
CUT_CHARS_PER_TOKEN = 16
#: Tokens past `room` a cut must yield, so the cut's own boundary is far from token `room`.
CUT_MARGIN_TOKENS = 16


def cut_text(tokenizer: Any, text: str, room: int) -> str:
    """A prefix of `text` whose first `room` body tokens are those of the whole `text`.

    Tokenising a whole text only to keep its first `room` tokens costs time linear in its
    length (115 s for one 50 MB passage). Instead a prefix of c characters is tried, from c =
    CUT_CHARS_PER_TOKEN x (room + margin), growing 4x: it is accepted when it yields at least
    room + CUT_MARGIN_TOKENS tokens and the prefix of 2c characters gives the same first
    `room` tokens (a cut changes only the tokens at its boundary: the pre-token it splits and,
    for merges that span pre-tokens, its neighbours; both cuts lie far past token `room`).
    A text no longer than 2c is returned whole, so ordinary passages are never cut.
    """
    need = room + CUT_MARGIN_TOKENS
    chars = CUT_CHARS_PER_TOKEN * need
    while 2 * chars < len(text):
        head = _bodies(tokenizer, [text[:chars], text[: 2 * chars]])
        if len(head[0]) >= need and head[0][:room] == head[1][:room]:
            return text[:chars]
        chars *= 4
    return text


#: Between two documents of a `packed` stream (its token ids, no special tokens).
PACKED_SEPARATOR = "\n\n"


def _check_mode(mode: str) -> None:
    if mode not in WINDOW_MODES:
        raise DeffError(f"Unknown window mode {mode!r}; choose one of {', '.join(WINDOW_MODES)}.")


#: Tokenised corpora kept per tokenizer (`_streams`): a second run on a loaded model cuts its
#: windows from them instead of tokenising the whole corpus again.
STREAMS_KEPT = 4
_STREAMS_MEMO: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_STREAMS_LOCK = threading.Lock()


def _documents_digest(documents: Sequence[str]) -> str:
    h = hashlib.sha256()
    for doc in documents:
        data = doc.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def _streams(tokenizer: Any, documents: Sequence[str], mode: str) -> list[list[int]]:
    """The id sequences windows are cut from: each body (`windows`) or one joined stream.

    Memoised per tokenizer object (weakly: a tokenizer that is gone takes its entries) on the
    documents' content and the mode, the last STREAMS_KEPT; the lists are shared, so callers
    only read them."""
    key = (_documents_digest(documents), mode)
    try:
        with _STREAMS_LOCK:
            kept = _STREAMS_MEMO.setdefault(tokenizer, {})
            if key in kept:
                return kept[key]
    except TypeError:  # a tokenizer that cannot be weakly referenced: not memoised
        return _tokenised_streams(tokenizer, documents, mode)
    found = _tokenised_streams(tokenizer, documents, mode)
    with _STREAMS_LOCK:
        kept[key] = found
        while len(kept) > STREAMS_KEPT:
            kept.pop(next(iter(kept)))
    return found


def _tokenised_streams(tokenizer: Any, documents: Sequence[str], mode: str) -> list[list[int]]:
    bodies = _bodies(tokenizer, documents)
    if mode == "windows" or not bodies:
        return bodies
    separator = _bodies(tokenizer, [PACKED_SEPARATOR])[0]
    stream = list(bodies[0])
    for body in bodies[1:]:
        stream += separator + body
    return [stream]


def cut_windows(
    tokenizer: Any,
    documents: Sequence[str],
    max_tokens: int,
    bos: str = "default",
    mode: str = "windows",
) -> list[list[int]]:
    """Every full window of `max_tokens` ids, in document order (see the module docstring).

    `windows`: a document whose body has b text tokens gives floor(b / room) windows, room =
    `max_tokens` minus the special tokens; window j holds body[j*room : (j+1)*room].
    `packed`: the same over the one stream body_1 + sep + body_2 + sep + ... + body_D.
    """
    _check_mode(mode)
    prefix, suffix = prefix_suffix(tokenizer, bos)
    room = body_length(max_tokens, prefix, suffix)
    windows: list[list[int]] = []
    for body in _streams(tokenizer, documents, mode):
        for start in range(0, len(body) - room + 1, room):
            windows.append(prefix + body[start : start + room] + suffix)
    return windows


_LENGTHS_MEMO: dict[tuple[Any, ...], WindowSource] = {}
#: The most documents a stored (possibly shared) window source may list.
MAX_STORED_DOCUMENTS = 1_000_000


@dataclass(frozen=True)
class WindowSource:
    """What the window counts of one (tokenizer, dataset, BOS option) follow from: the body
    length (text tokens) of each document in source order, the special tokens around every
    window and the packed separator's length."""

    bodies: tuple[int, ...]
    specials: int
    separator: int

    def to_dict(self) -> dict[str, Any]:
        return {"bodies": list(self.bodies), "specials": self.specials, "separator": self.separator}

    @classmethod
    def from_dict(cls, data: Any) -> WindowSource:
        """The inverse of `to_dict`, checked (ValueError): counts >= 0, at most MAX_DOCUMENTS."""
        bodies, specials, separator = data["bodies"], data["specials"], data["separator"]
        counts = [specials, separator, *bodies] if isinstance(bodies, list) else None
        if (
            counts is None
            or len(bodies) > MAX_STORED_DOCUMENTS
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in counts)
        ):
            raise ValueError("A stored window source is counts of tokens per document.")
        return cls(tuple(bodies), specials, separator)

    def count(self, max_tokens: int, mode: str = "windows") -> int:
        """Windows of `max_tokens` tokens in `mode` (as `cut_windows` cuts them)."""
        _check_mode(mode)
        room = max_tokens - self.specials
        if room < 1:
            raise DeffError(
                f"max_tokens={max_tokens} leaves no room for text after the tokenizer's "
                f"{self.specials} special token(s); ask for more tokens."
            )
        if mode == "windows" or not self.bodies:
            return sum(b // room for b in self.bodies)
        return (sum(self.bodies) + (len(self.bodies) - 1) * self.separator) // room


def window_source(
    model: str,
    dataset: str,
    bos: str = "default",
    revision: str | None = None,
    *,
    n: int | None = None,
    seed: int = 0,
) -> WindowSource:
    """The `WindowSource` of `dataset` for `model`'s tokenizer (never the weights), memoised on
    the tokenizer's and the dataset's identities: one tokenisation serves every window length
    and mode. A streamed `hf:` dataset needs `n` (and the run's `seed`): its first `n`
    shuffled documents are what a run of `n` passages cuts windows from."""
    streamed = dataset.startswith("hf:")
    if streamed and n is None:
        raise DeffError(
            f"Counting the windows of the streamed dataset {dataset!r} needs the number of "
            "documents to stream (n)."
        )
    tokenizer_id = model_identity(model, revision)
    tokenizer_id = tokenizer_id.get("base", tokenizer_id)  # random:<m>:<s> tokenises like <m>
    memo_key = (
        json.dumps(tokenizer_id, sort_keys=True),
        json.dumps(dataset_identity(dataset), sort_keys=True),
        bos,
        (n, seed) if streamed else None,
    )
    if memo_key not in _LENGTHS_MEMO:
        tokenizer = load_tokenizer(model, revision)
        prefix, suffix = prefix_suffix(tokenizer, bos)
        documents = all_documents(dataset, n or 0, seed=seed)
        bodies = tuple(len(b) for b in _bodies(tokenizer, documents))
        separator = len(_bodies(tokenizer, [PACKED_SEPARATOR])[0])
        _LENGTHS_MEMO[memo_key] = WindowSource(bodies, len(prefix) + len(suffix), separator)
    return _LENGTHS_MEMO[memo_key]


def count_windows(
    model: str,
    dataset: str,
    max_tokens: int,
    bos: str = "default",
    revision: str | None = None,
    *,
    n: int | None = None,
    seed: int = 0,
    mode: str = "windows",
) -> int:
    """How many windows of `max_tokens` tokens `dataset` yields for `model` in `mode`.

    Loads only the tokenizer (`models.load_tokenizer`), never the weights, so the app can say
    "this choice yields N windows" before a run (`window_source`: memoised, one tokenisation
    for every length and mode). A streamed `hf:` dataset needs `n` and the run's `seed`.
    """
    _check_mode(mode)
    source = window_source(model, dataset, bos, revision, n=n, seed=seed)
    return source.count(max_tokens, mode)


def sample_windows(windows: list[list[int]], n: int, seed: int) -> list[list[int]]:
    """`n` windows drawn without replacement with `seed` (TooFewPassagesError if too few)."""
    if len(windows) < n:
        raise TooFewPassagesError(
            f"The dataset yields {len(windows)} windows of this length, fewer than n={n}; ask "
            f"for n <= {len(windows)} or shorter windows (--max-tokens)."
        )
    order = np.random.default_rng(seed).permutation(len(windows))[:n]
    return [windows[i] for i in order]


# ---------------------------------------------------------------------------------------------
# A run's texts and token ids (what extraction and the BOS diagnostics feed the model)


def run_texts(spec: Any) -> list[str]:
    """The texts behind a run: its sampled passages (documents mode) or the documents its
    windows are cut from; opened before any model loads, so a bad dataset fails fast."""
    if spec.passages in WINDOW_MODES:
        return all_documents(spec.dataset, spec.n, seed=spec.seed)
    return load_passages(spec.dataset, spec.n, seed=spec.seed)


def run_token_ids(spec: Any, tokenizer: Any, texts: list[str]) -> list[list[int]]:
    """The token ids of a run's sample, in the run's order: `texts` from `run_texts(spec)`."""
    if spec.passages in WINDOW_MODES:
        windows = cut_windows(tokenizer, texts, spec.max_tokens, spec.bos, spec.passages)
        return sample_windows(windows, spec.n, spec.seed)
    return encode_documents(tokenizer, texts, spec.max_tokens, spec.bos)


def tokenize(
    tokenizer: Any, passages: list[str], max_tokens: int, bos: str = "default"
) -> tuple[list[list[int]], list[int]]:
    """Token ids per passage with the tokenizer's special tokens (adjusted by the BOS option
    `bos`), truncated to `max_tokens` (special tokens count).

    Returns (ids of kept passages, original index of each kept passage); passages with fewer
    than 2 tokens are not kept.
    """
    if max_tokens < 2:
        raise TooFewPassagesError(f"max_tokens must be at least 2, got {max_tokens}.")
    return keep_long_enough(encode_documents(tokenizer, list(passages), max_tokens, bos))


def keep_long_enough(encoded: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """(sequences with >= 2 tokens, their original indices)."""
    ids, kept = [], []
    for i, seq in enumerate(encoded):
        if len(seq) >= 2:
            ids.append(list(seq))
            kept.append(i)
    return ids, kept


def prepare_ids(
    tokenizer: Any,
    passages: list[str] | None,
    token_ids: list[list[int]] | None,
    max_tokens: int,
    bos: str,
) -> tuple[list[list[int]], list[int], int]:
    """(ids of the kept passages, their original indices, passages given): `token_ids` cut to
    `max_tokens`, else `passages` tokenised. TooFewPassagesError when fewer than 2 are kept."""
    if token_ids is not None:
        given = len(token_ids)
        ids, kept = keep_long_enough([list(s[:max_tokens]) for s in token_ids])
    else:
        given = len(passages or [])
        ids, kept = tokenize(tokenizer, list(passages or []), max_tokens, bos)
    if len(kept) < 2:
        raise TooFewPassagesError(
            f"Only {len(kept)} of {given} passages have at least 2 tokens; at least 2 are needed."
        )
    return ids, kept, given
