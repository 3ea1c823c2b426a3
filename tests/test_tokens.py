"""Token ids of passages: the BOS option (SPEC 11.4) and token windows (SPEC 12).

The tiny models' byte tokenizer makes every count checkable by hand: one token per UTF-8 byte,
`<bos>` = 1 in front of every text for `tiny-llama`, nothing for `tiny-llama-nobos`. Both tiny
variants have the same weights, so "nobos + add" must give exactly the ids (and states) of
"bos + default".
"""

from __future__ import annotations

import pytest

from deffcore.core.errors import DeffError, TooFewPassagesError
from deffcore.inputs.model import load_tokenizer
from deffcore.inputs.texts import (
    adds_bos,
    all_passages,
    count_windows,
    cut_windows,
    encode_documents,
    prefix_suffix,
    sample_windows,
    tokenize,
)

BOS = 1
LONG = "The quick brown fox jumps over the lazy dog. " * 6  # 270 ASCII bytes


@pytest.fixture(scope="module")
def bos_tok():
    return load_tokenizer("tiny-llama")


@pytest.fixture(scope="module")
def nobos_tok():
    return load_tokenizer("tiny-llama-nobos")


def _n_bytes(text: str) -> int:
    return len(text.encode("utf-8"))


# ---------------------------------------------------------------------------------------------
# Window cutting


@pytest.mark.parametrize("max_tokens", [2, 8, 16, 33])
def test_window_counts_are_floor_body_over_room(bos_tok, nobos_tok, tiny_passages, max_tokens):
    docs = [*tiny_passages, LONG, "é" * 20]  # a 2-byte character: 40 tokens
    for tok, specials in ((bos_tok, 1), (nobos_tok, 0)):
        room = max_tokens - specials
        windows = cut_windows(tok, docs, max_tokens)
        assert len(windows) == sum(_n_bytes(d) // room for d in docs)
        assert all(len(w) == max_tokens for w in windows)


def test_windows_are_consecutive_and_do_not_overlap(bos_tok, nobos_tok, tiny_passages):
    for tok, prefix in ((bos_tok, [BOS]), (nobos_tok, [])):
        for doc in [*tiny_passages, LONG]:
            windows = cut_windows(tok, [doc], 16)
            room = 16 - len(prefix)
            assert all(w[: len(prefix)] == prefix for w in windows)
            joined = [i for w in windows for i in w[len(prefix) :]]
            body = tok(doc, add_special_tokens=False).input_ids
            assert joined == body[: len(windows) * room]  # a prefix of the document's body
            assert len(body) - len(joined) < room  # only a last partial window is dropped
            # decoded independently of the ids: the windows spell the document's start
            assert tok.decode(joined) == doc[: len(joined)]


@pytest.mark.parametrize("max_tokens", [2, 8, 16, 33])
def test_packed_windows_cut_one_stream_of_all_documents(
    bos_tok, nobos_tok, tiny_passages, max_tokens
):
    # the byte tokenizer makes the closed form exact: the stream is the documents' bytes joined
    # by the 2-byte separator "\n\n", cut into windows of `room` bytes, last partial dropped
    docs = [*tiny_passages, LONG, "é" * 20]
    stream = "\n\n".join(docs)
    for tok, prefix in ((bos_tok, [BOS]), (nobos_tok, [])):
        room = max_tokens - len(prefix)
        windows = cut_windows(tok, docs, max_tokens, mode="packed")
        assert len(windows) == _n_bytes(stream) // room
        assert all(len(w) == max_tokens and w[: len(prefix)] == prefix for w in windows)
        joined = [i for w in windows for i in w[len(prefix) :]]
        assert joined == tok(stream, add_special_tokens=False).input_ids[: len(windows) * room]
        # packing never loses more than one partial window; per document loses up to one each
        assert len(windows) >= len(cut_windows(tok, docs, max_tokens))


def test_packed_windows_span_documents_and_hold_no_special_token_inside(bos_tok):
    docs = ["abc", "defgh", "ij"]  # stream "abc\n\ndefgh\n\nij": 14 bytes
    windows = cut_windows(bos_tok, docs, 7, mode="packed")  # room 6: 2 windows, 2 bytes dropped
    assert [bos_tok.decode(w[1:]) for w in windows] == ["abc\n\nd", "efgh\n\n"]
    assert all(BOS not in w[1:] for w in windows)  # the separator is text, not a BOS/EOS
    assert cut_windows(bos_tok, docs, 7) == []  # per document: no document has 6 bytes
    assert cut_windows(bos_tok, [], 7, mode="packed") == []
    with pytest.raises(DeffError, match="Unknown window mode 'documents'"):
        cut_windows(bos_tok, docs, 7, mode="documents")


def test_special_tokens_per_window(bos_tok, nobos_tok):
    with_bos = cut_windows(bos_tok, [LONG], 32)
    assert all(w[0] == BOS and BOS not in w[1:] for w in with_bos)
    assert all(BOS not in w for w in cut_windows(nobos_tok, [LONG], 32))
    stripped = cut_windows(bos_tok, [LONG], 32, bos="none")
    assert all(BOS not in w and len(w) == 32 for w in stripped)
    # with the same weights and byte ids, "none" on tiny-llama is tiny-llama-nobos's default
    assert stripped == cut_windows(nobos_tok, [LONG], 32)
    assert cut_windows(nobos_tok, [LONG], 32, bos="add") == with_bos


def test_sample_windows_is_seeded_and_without_replacement(bos_tok):
    windows = cut_windows(bos_tok, [LONG * 4], 8)  # 1080 bytes / 7 = 154 windows
    assert len(windows) == 1080 // 7
    a, b = sample_windows(windows, 20, seed=0), sample_windows(windows, 20, seed=0)
    c = sample_windows(windows, 20, seed=1)
    assert a == b and a != c
    # without replacement: 20 distinct positions (windows can repeat text, so count indices)
    tagged = [[i, *w] for i, w in enumerate(windows)]
    assert len({s[0] for s in sample_windows(tagged, 20, seed=0)}) == 20
    assert sample_windows(windows, len(windows), seed=3) != windows  # permuted, all kept


def test_sample_windows_refuses_too_many(bos_tok):
    windows = cut_windows(bos_tok, ["x" * 70], 8)  # 70 // 7 = 10 windows
    with pytest.raises(TooFewPassagesError, match=r"yields 10 windows .* fewer than n=11"):
        sample_windows(windows, 11, seed=0)


def test_window_with_no_room_for_text_is_refused(bos_tok):
    with pytest.raises(DeffError, match="leaves no room for text"):
        cut_windows(bos_tok, [LONG], 1)


# ---------------------------------------------------------------------------------------------
# count_windows: tokenizer only


def test_count_windows_matches_the_closed_form(tiny_dataset, tiny_passages, monkeypatch):
    from deffcore.inputs import model as loading

    # no weights may be built for a count: only the tokenizer
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    monkeypatch.setattr(loading, "init_from_config", lambda *a: pytest.fail("weights built"))
    want_bos = sum(_n_bytes(p) // 15 for p in tiny_passages)
    want_nobos = sum(_n_bytes(p) // 16 for p in tiny_passages)
    assert count_windows("tiny-llama", tiny_dataset, 16) == want_bos
    assert count_windows("random:tiny-llama:7", tiny_dataset, 16) == want_bos
    assert count_windows("tiny-llama-nobos", tiny_dataset, 16) == want_nobos
    assert count_windows("tiny-llama", tiny_dataset, 16, bos="none") == want_nobos
    assert count_windows("tiny-llama-nobos", tiny_dataset, 16, bos="add") == want_bos
    tok = load_tokenizer("tiny-llama")
    assert want_bos == len(cut_windows(tok, tiny_passages, 16))
    # packed: one stream of every passage joined by "\n\n" (2 bytes each)
    want_packed = (sum(map(_n_bytes, tiny_passages)) + 2 * (len(tiny_passages) - 1)) // 15
    assert count_windows("tiny-llama", tiny_dataset, 16, mode="packed") == want_packed
    assert want_packed == len(cut_windows(tok, tiny_passages, 16, mode="packed"))


def test_count_windows_bbc_reaches_paper_scale_for_tiny_llama():
    want = sum(_n_bytes(doc) // 63 for doc in all_passages("bbc-news"))
    got = count_windows("tiny-llama", "bbc-news", 64)
    assert got == want and got >= 10_000


@pytest.mark.slow
def test_bbc_windows_of_128_tokens_for_smollm2_per_document_and_packed():
    # the goal was >= 8,000 windows of 128 tokens for SmolLM2; SPEC section 12's per-document
    # cut gives 7,741 (2,225 documents each lose a last partial window), packing gives 8,884
    per_document = count_windows("smollm2-135m", "bbc-news", 128)
    packed = count_windows("smollm2-135m", "bbc-news", 128, mode="packed")
    tok = load_tokenizer("smollm2-135m")
    docs = all_passages("bbc-news")
    bodies = tok(docs, add_special_tokens=False).input_ids
    sep = len(tok("\n\n", add_special_tokens=False).input_ids)
    assert per_document == sum(len(b) // 128 for b in bodies) == 7_741
    assert packed == (sum(map(len, bodies)) + sep * (len(docs) - 1)) // 128 == 8_884


def test_count_windows_of_a_streamed_dataset_needs_n():
    with pytest.raises(DeffError, match="needs the number of documents"):
        count_windows("tiny-llama", "hf:org/name:train", 64)


# ---------------------------------------------------------------------------------------------
# The BOS option on documents


def test_bos_add_on_a_tokenizer_without_bos_adds_exactly_one(nobos_tok, bos_tok):
    short, long_ = "Short text.", LONG
    default = encode_documents(nobos_tok, [short, long_], 64)
    added = encode_documents(nobos_tok, [short, long_], 64, bos="add")
    assert BOS not in default[0] and not adds_bos(nobos_tok)
    assert added[0] == [BOS, *default[0]] and len(added[0]) == _n_bytes(short) + 1
    assert len(added[1]) == 64 == len(default[1])  # budget kept: one text token fewer
    assert added[1] == [BOS, *default[1][:63]]
    # and it is exactly what the BOS-adding tokenizer does by default (same ids)
    assert added == encode_documents(bos_tok, [short, long_], 64)
    # "add" where the tokenizer already adds one: still exactly one BOS
    twice = encode_documents(bos_tok, [short], 64, bos="add")[0]
    assert twice.count(BOS) == 1 and twice[0] == BOS


def test_bos_none_on_a_bos_adding_tokenizer_removes_it(bos_tok, nobos_tok):
    short = "Short text."
    default = encode_documents(bos_tok, [short, LONG], 64)
    none = encode_documents(bos_tok, [short, LONG], 64, bos="none")
    assert adds_bos(bos_tok) and default[0][0] == BOS
    assert none[0] == default[0][1:] and BOS not in none[0]
    assert len(none[1]) == 64 and none[1][:63] == default[1][1:]  # the freed slot holds text
    assert none == encode_documents(nobos_tok, [short, LONG], 64)


def test_extraction_tokenises_with_the_bos_option(bos_tok, nobos_tok):
    ids, kept = tokenize(nobos_tok, ["ab", "c"], 8, bos="add")
    assert ids == [[BOS, *nobos_tok("ab").input_ids], [BOS, *nobos_tok("c").input_ids]]
    assert kept == [0, 1]
    ids, kept = tokenize(bos_tok, ["ab", "c"], 8, bos="none")
    assert ids == [nobos_tok("ab").input_ids] and kept == [0]  # "c" alone is 1 token: dropped


def test_bos_add_without_a_bos_token_is_a_clear_error():
    from transformers import PreTrainedTokenizerFast

    from deffcore.inputs.model import byte_level_tokenizer

    base = byte_level_tokenizer(add_bos=False)
    no_bos_token = PreTrainedTokenizerFast(tokenizer_object=base.backend_tokenizer)
    assert no_bos_token.bos_token_id is None
    with pytest.raises(DeffError, match="needs a tokenizer with a BOS token"):
        encode_documents(no_bos_token, ["text"], 8, bos="add")
    with pytest.raises(DeffError, match="needs a tokenizer with a BOS token"):
        cut_windows(no_bos_token, ["text"], 2, bos="add")
    # "none" and "default" still work: there is nothing to remove
    assert encode_documents(no_bos_token, ["ab"], 8, bos="none") == [base("ab").input_ids]


def test_unknown_bos_option_is_refused(bos_tok):
    with pytest.raises(DeffError, match="Unknown BOS option 'twice'"):
        prefix_suffix(bos_tok, "twice")


def test_load_tokenizer_is_memoised_and_matches_the_model(tiny_model):
    assert load_tokenizer("tiny-llama") is load_tokenizer("tiny-llama")
    lm = tiny_model("llama", bos=False)
    text = "Tokenizers agree."
    assert load_tokenizer("tiny-llama-nobos")(text).input_ids == lm.tokenizer(text).input_ids
    assert (
        load_tokenizer("random:tiny-llama-nobos:3")(text).input_ids == lm.tokenizer(text).input_ids
    )


# ---------------------------------------------------------------------------------------------
# Tokenizers that append a suffix (an EOS after every text)


class _WithEOS:
    """The byte tokenizer, plus an EOS (id 2) after every text when special tokens are on."""

    EOS = 2

    def __init__(self, inner):
        self.inner = inner
        self.bos_token_id = inner.bos_token_id

    def __call__(self, text, add_special_tokens=True):
        out = self.inner(text, add_special_tokens=add_special_tokens)
        if add_special_tokens:
            ids = out.input_ids
            out.input_ids = (
                [*ids, self.EOS] if isinstance(text, str) else [[*s, self.EOS] for s in ids]
            )
        return out


def test_windows_of_a_tokenizer_with_a_suffix_end_with_it_inside_the_budget(bos_tok, tiny_passages):
    from deffcore.inputs.texts import special_tokens

    tok = _WithEOS(bos_tok)
    assert special_tokens(tok) == ([BOS], [_WithEOS.EOS])
    max_tokens = 10
    room = max_tokens - 2  # the BOS and the EOS count
    windows = cut_windows(tok, tiny_passages, max_tokens)
    bodies = [bos_tok(t, add_special_tokens=False).input_ids for t in tiny_passages]
    assert len(windows) == sum(len(b) // room for b in bodies)
    want = [[BOS, *b[j : j + room], _WithEOS.EOS] for b in bodies
            for j in range(0, len(b) - room + 1, room)]  # fmt: skip
    assert windows == want
    assert all(len(w) == max_tokens and w[-1] == _WithEOS.EOS for w in windows)
    assert all(_WithEOS.EOS not in w[1:-1] for w in windows)  # only at the end
    # documents mode keeps the suffix inside the budget too
    docs = encode_documents(tok, tiny_passages, max_tokens)
    assert docs == [[BOS, *b[:room], _WithEOS.EOS] for b in bodies]
    # bos=none drops the BOS but keeps the suffix
    none = cut_windows(tok, tiny_passages, max_tokens, bos="none")
    assert all(w[0] != BOS and w[-1] == _WithEOS.EOS and len(w) == max_tokens for w in none)


# ---------------------------------------------------------------------------------------------
# A long passage is cut before it is tokenised


class _Counting:
    """A tokenizer that records the length of every text it is asked to tokenise."""

    def __init__(self, inner):
        self.inner = inner
        self.sizes: list[int] = []

    def __call__(self, text, **kwargs):
        self.sizes += [len(text)] if isinstance(text, str) else [len(t) for t in text]
        return self.inner(text, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def _whole(tok, texts, max_tokens):
    """The reference: every text tokenised whole, then truncated."""
    prefix, suffix = prefix_suffix(tok)
    room = max_tokens - len(prefix) - len(suffix)
    bodies = tok(list(texts), add_special_tokens=False).input_ids
    return [prefix + list(b)[:room] + suffix for b in bodies]


@pytest.mark.parametrize("chars_per_token", [16, 1])  # 1: every passage is cut, hard
@pytest.mark.parametrize("spec", ["tiny-llama", "smollm2-135m"])
def test_cutting_before_tokenising_gives_the_ids_of_the_whole_text(
    spec, chars_per_token, monkeypatch
):
    from deffcore.inputs import texts as tokens

    monkeypatch.setattr(tokens, "CUT_CHARS_PER_TOKEN", chars_per_token)
    tok = load_tokenizer(spec)
    docs = all_passages("bbc-news")[:600]
    docs.append(" ".join(docs[:50]))  # one long text (~100k characters)
    for max_tokens in (16, 128):
        assert encode_documents(tok, docs, max_tokens) == _whole(tok, docs, max_tokens)


def test_a_huge_passage_is_never_tokenised_whole(bos_tok, tiny_passages):
    huge = ("All work and no play makes a long passage. " * 120_000)[:5_000_000]
    texts = [*tiny_passages[:10], huge, *tiny_passages[10:]]
    tok = _Counting(bos_tok)
    got = encode_documents(tok, texts, 32)
    assert got == _whole(bos_tok, [*tiny_passages[:10], huge[:10_000], *tiny_passages[10:]], 32)
    assert max(tok.sizes) < 20_000 and sum(tok.sizes) < 50_000, (max(tok.sizes), len(huge))
    # the work does not grow with the passage: ten times longer, the same texts tokenised
    tok10 = _Counting(bos_tok)
    encode_documents(tok10, [*tiny_passages[:10], huge * 10, *tiny_passages[10:]], 32)
    assert tok10.sizes == tok.sizes


def test_a_corpus_is_tokenised_once_per_tokenizer(monkeypatch):
    """A second run's windows come from the kept streams: the same windows, no new encode."""
    from deffcore.inputs import texts as tokens

    tok = load_tokenizer("tiny-llama")
    docs = ["one two three four five six seven eight nine ten " * 3, "a short one here"]
    first = tokens.cut_windows(tok, docs, 8)
    calls = []
    real = tokens._bodies
    monkeypatch.setattr(tokens, "_bodies", lambda t, d: calls.append(1) or real(t, d))
    assert tokens.cut_windows(tok, docs, 8) == first and calls == []
    assert tokens.cut_windows(tok, [*docs, "another text entirely"], 8) != first and calls
