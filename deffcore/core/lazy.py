"""A module imported on first use: `from deffcore.core.lazy import torch` (also `nn`, `pd`).

Importing torch takes a second or more, and a run read back from a snapshot (the app's first
screen, a shared file) never needs it: the numbers are stored. A module whose functions use
torch but whose import must stay light names `torch` through this proxy; the first attribute
read (`torch.float64`, `torch.where(...)`, `isinstance(x, torch.Tensor)`) imports the real
module and puts it in place of the stand-in in every deffcore module that holds it (a module
imported later gets the real one from here), so from then on each read is a plain global
read, as after `import torch`. Annotations stay strings
(`from __future__ import annotations`), so a signature never imports it.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class LazyModule(types.ModuleType):
    """A stand-in for the module `name` that imports it when an attribute is first read."""

    def __init__(self, name: str) -> None:
        super().__init__(name)

    def __getattribute__(self, attr: str) -> Any:  # every read goes to the real module
        own = types.ModuleType.__getattribute__(self, "__dict__")
        name = own["__name__"]
        module = sys.modules.get(name) or importlib.import_module(name)
        if not own.get("_swapped"):  # once: no deffcore module reads the stand-in after
            _swap(self, module)
            own["_swapped"] = True
        return getattr(module, attr)


def _swap(stand_in: LazyModule, module: types.ModuleType) -> None:
    """Once loaded, every deffcore module that holds the stand-in holds the module itself (a
    plain global read from then on, as `import torch` would give)."""
    for key, found in list(sys.modules.items()):
        if key == "deffcore" or key.startswith("deffcore."):
            names = vars(found)
            for k, v in list(names.items()):
                if v is stand_in:
                    names[k] = module


#: torch, imported when first used.
torch: Any = LazyModule("torch")
#: torch.nn, imported when first used.
nn: Any = LazyModule("torch.nn")
#: pandas (about a second with pyarrow), imported when first used: a chart never needs it.
pd: Any = LazyModule("pandas")
