"""Reading pages under `streamlit.testing.v1.AppTest`: their Plotly figures and their errors.

Importable from every test folder: pytest puts `tests/` on `sys.path` for `tests/conftest.py`.
"""

from __future__ import annotations

import base64
import json
import re
import string
from typing import Any

import numpy as np


def plotly_array(value: Any) -> np.ndarray:
    """A Plotly JSON array as numpy: a list, or the typed form {"dtype", "bdata", "shape"}."""
    if isinstance(value, dict) and "bdata" in value:
        out = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = value.get("shape")
        return out.reshape([int(s) for s in str(shape).split(",")]) if shape else out
    return np.asarray(value)


def charts(at: Any) -> list[dict]:
    """Every Plotly figure on the page as its JSON spec."""
    return [json.loads(el.proto.spec) for el in at.get("plotly_chart")]


def chart(at: Any, title_part: str) -> dict:
    """The first figure whose title contains `title_part`."""
    figs = charts(at)
    found = [c for c in figs if title_part in c["layout"]["title"]["text"]]
    assert found, f"no chart {title_part!r}; have {[c['layout']['title']['text'] for c in figs]}"
    return found[0]


def trace(fig: dict, name: str) -> dict:
    """The trace of `fig` named `name`."""
    found = [t for t in fig["data"] if t.get("name") == name]
    assert found, f"no trace {name!r}; have {[t.get('name') for t in fig['data']]}"
    return found[0]


def assert_clean(at: Any) -> None:
    """No exception and no st.error on the page."""
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]


_ESCAPED = re.compile(r"\\([" + re.escape(string.punctuation) + "])")


def plain(text: str) -> str:
    """What a visitor reads: an element's Markdown body with `deffcore.core.safe_text.md_escape`'s
    backslash escapes removed (the app shows user text escaped, never as Markdown)."""
    return _ESCAPED.sub(r"\1", text)
