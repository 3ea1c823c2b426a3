"""Tables as a page shows them: a missing cell reads "—", never "None".

`markdown_table` draws a few rows of numbers as a Markdown table, every cell escaped: no pandas
(the first screen's linear-vs-unbiased table is drawn without importing it).

`show_table` is `st.dataframe` with `placeholder=MISSING`: Streamlit draws a missing value (None,
NaN) as the word "None" unless told otherwise, even where a Styler's `na_rep` says "—", and a
published table that prints no value for a cell is not a value called None.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from deffcore.core.safe_text import md_escape

#: What a missing cell reads.
MISSING = "—"


def show_table(data: Any, **kwargs: Any) -> Any:
    """`st.dataframe(data, **kwargs)` with missing cells shown as MISSING."""
    kwargs.setdefault("placeholder", MISSING)
    return st.dataframe(data, **kwargs)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """`rows` (dicts with the same keys, in column order) as a Markdown table whose every
    header and cell is shown literally (`md_escape`); a missing cell (None) reads MISSING."""
    if not rows:
        return ""
    columns = list(rows[0])

    def line(cells: list[Any]) -> str:
        return "| " + " | ".join(MISSING if c is None else md_escape(c) for c in cells) + " |"

    return "\n".join(
        [
            line(columns),
            "|" + "---|" * len(columns),
            *(line([r.get(c) for c in columns]) for r in rows),
        ]
    )
