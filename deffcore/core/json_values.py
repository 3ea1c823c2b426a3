"""Values any JSON parser reads: NaN and inf as null, arrays as lists, keys as strings."""

from __future__ import annotations

import math
from typing import Any


def finite_number(x: Any) -> bool:
    """A number read from JSON that is usable as a float: an int or float (never a bool), finite
    as a float (an int beyond float's range, e.g. 10**400, is not: `math.isfinite` raises)."""
    if not isinstance(x, int | float) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(float(x))
    except OverflowError:
        return False


def json_safe(obj: Any, decimals: int | None = None) -> Any:
    """`obj` with every float NaN/inf replaced by None, numpy values by Python ones, and the
    other floats rounded to `decimals` when given."""
    if isinstance(obj, float):  # numpy's float64 too: a Python float out
        if not math.isfinite(obj):
            return None
        return float(obj) if decimals is None else round(float(obj), decimals)
    if isinstance(obj, dict):
        return {str(k): json_safe(v, decimals) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v, decimals) for v in obj]
    if hasattr(obj, "tolist"):
        return json_safe(obj.tolist(), decimals)
    return obj
