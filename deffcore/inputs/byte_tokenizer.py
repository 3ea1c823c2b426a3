"""A byte-level tokenizer built in code, for the tiny test/demo models (no download).

Every UTF-8 byte is one token (one of ids 3..258), after three special tokens:
`<pad>` = 0, `<bos>` = 1, `<eos>` = 2. With `add_bos=True` (the default) the tokenizer puts
`<bos>` in front of every passage, like Llama/Gemma tokenizers; with `add_bos=False` it adds
nothing, like GPT-2's or SmolLM2's. Extraction relies only on the tokenizer's own defaults, so
the two variants exercise both BOS conventions of SPEC section 2.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors

SPECIAL_TOKENS: tuple[str, ...] = ("<pad>", "<bos>", "<eos>")
#: Specials + one token per byte.
BYTE_VOCAB_SIZE = len(SPECIAL_TOKENS) + 256


def byte_level_tokenizer(add_bos: bool = True):
    """A `PreTrainedTokenizerFast` over raw bytes; `add_bos`: whether `<bos>` is prepended."""
    from transformers import PreTrainedTokenizerFast

    # ByteLevel maps each byte to a printable unicode character; the BPE with no merges then
    # turns each character into exactly one id.
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in sorted(alphabet):
        vocab[ch] = len(vocab)
    assert len(vocab) == BYTE_VOCAB_SIZE, len(vocab)

    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    if add_bos:
        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", 1)]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        padding_side="right",
    )
