"""Packed windows and the joined text: the documented difference, shown.

`cut_windows(mode="packed")` joins the documents' *separately tokenised* bodies with the ids
of the separator "\\n\\n" tokenised on its own. The text is exactly the joined text, but a
byte-level BPE (GPT-2's pre-tokenizer, as SmolLM2's) tokenises "\\n\\n" before a letter as
two tokens "\\n" "\\n", and "\\n\\n" alone as one, so at every document boundary the stream
holds one token that the joined text's tokenisation would split in two. SentencePiece-style
tokenizers (Gemma-3) give the same ids both ways. Changing the packed ids would change every
cached packed run's numbers under the same key, so it waits for a cache-key change (README
"Decisions").
"""

from __future__ import annotations

import itertools

import pytest

from deffcore.inputs.texts import PACKED_SEPARATOR, cut_windows

DOCS = ["one two.", "three four.", "five six."]


def _byte_level_bpe():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator([d + PACKED_SEPARATOR for d in DOCS] * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok)


def test_packed_stream_differs_from_the_joined_text_by_one_token_per_boundary():
    tok = _byte_level_bpe()
    enc = lambda text: tok(text, add_special_tokens=False).input_ids  # noqa: E731
    joined_text = PACKED_SEPARATOR.join(DOCS)
    joined = enc(joined_text)
    sep = enc(PACKED_SEPARATOR)
    assert len(sep) == 1  # "\n\n" on its own: one merged token
    total = sum(len(enc(d)) for d in DOCS) + 2 * len(sep)
    (stream,) = cut_windows(tok, DOCS, max_tokens=total, mode="packed")
    assert tok.decode(stream) == tok.decode(joined) == joined_text  # the same text
    assert stream != joined and len(joined) == len(stream) + 2  # one more token per boundary
    newline = enc("\n")
    for i in range(len(stream)):  # where they part: "\n\n" against "\n" "\n"
        if stream[i] != joined[i]:
            assert stream[i : i + 1] == sep and joined[i : i + 2] == newline * 2
            break


@pytest.mark.slow
@pytest.mark.parametrize(("model", "differs"), [("smollm2-135m", True), ("gemma3-270m", False)])
def test_packaged_tokenizers_at_bbc_document_boundaries(model, differs):
    """SmolLM2: every boundary differs (id 1116 "\\n\\n" against "\\n" "\\n"); Gemma-3: none."""
    from deffcore.inputs.model import load_tokenizer
    from deffcore.inputs.texts import all_documents

    tok = load_tokenizer(model, None)
    enc = lambda text: tok(text, add_special_tokens=False).input_ids  # noqa: E731
    docs = all_documents("bbc-news", 0, seed=0)[:40]
    sep = enc(PACKED_SEPARATOR)
    parted = 0
    for a, b in itertools.pairwise(docs):
        a, b = a[-200:], b[:200]
        parted += enc(a) + sep + enc(b) != enc(a + PACKED_SEPARATOR + b)
    assert parted == (len(docs) - 1 if differs else 0)
