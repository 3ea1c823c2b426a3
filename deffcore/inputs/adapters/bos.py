"""Families whose BOS convention the config does not show (stage: inputs).

`Adapter.adds_bos` reads a family's convention from its config (a BOS id that is not also its
EOS id); for tiny and random models whose tokenizer deffcore builds in code. Two well-known
families break that rule:

    GPT-NeoX (Pythia)   the config names BOS 0 and EOS 2, but its tokenizer adds no BOS
    OPT                 the config gives one id (2, `</s>`) for both, and its tokenizer puts
                        `</s>` in front of every text
"""

from __future__ import annotations

from deffcore.inputs.adapters.generic import Adapter


class NoBos(Adapter):
    types = ("gpt_neox",)
    bos_convention = False


class LeadingEos(Adapter):
    types = ("opt",)
    bos_convention = True


BOS: tuple[Adapter, ...] = (NoBos(), LeadingEos())
