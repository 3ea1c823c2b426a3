"""Tables as a page shows them: a missing cell reads "—", never "None".

`show_table` is `st.dataframe` with `placeholder=MISSING`: Streamlit draws a missing value (None,
NaN) as the word "None" unless told otherwise, even where a Styler's `na_rep` says "—", and a
published table that prints no value for a cell is not a value called None.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

#: What a missing cell reads.
MISSING = "—"


def show_table(data: Any, **kwargs: Any) -> Any:
    """`st.dataframe(data, **kwargs)` with missing cells shown as MISSING."""
    kwargs.setdefault("placeholder", MISSING)
    return st.dataframe(data, **kwargs)
