"""Architecture adapters: the generic rule and the family adapters that override it (stage:
inputs).

    adapter_for("mamba")   -> the Mamba adapter;  adapter_for("llama") -> the generic rule

`deffcore.inputs.adapters.generic.Adapter` answers every question about a decoder's residual
stream by a rule that holds in general; a module here per family holds the one or two answers
that rule gets wrong for it (see each module's docstring for what and why).
`deffcore.inputs.architecture` is the interface the rest of deffcore uses.
"""

from __future__ import annotations

from deffcore.inputs.adapters.bos import BOS
from deffcore.inputs.adapters.generic import Adapter
from deffcore.inputs.adapters.norm_names import NORM_NAMES
from deffcore.inputs.adapters.recurrent import RECURRENT
from deffcore.inputs.adapters.streams import STREAMS

_GENERIC = Adapter()
#: model type -> its family adapter (every other type uses the generic rule)
ADAPTERS: dict[str, Adapter] = {}
for _adapter in (*BOS, *NORM_NAMES, *RECURRENT, *STREAMS):
    for _kind in _adapter.types:
        ADAPTERS[_kind] = _adapter


def adapter_for(model_type: str) -> Adapter:
    """The adapter of `model_type` (a config's `model_type`): its family's, else the generic."""
    return ADAPTERS.get(model_type, _GENERIC)
