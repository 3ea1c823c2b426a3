"""One clear error on the page instead of a traceback: `with guarded("This step"): ...`."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import streamlit as st

from deffcore.core.errors import DeffError
from deffcore.core.safe_text import md_escape  # user text is shown as text, never as Markdown


@contextlib.contextmanager
def guarded(what: str = "This step") -> Iterator[None]:
    """Show bad input as one clear error on the page instead of a traceback; the app goes on.

    DeffError text is already a complete sentence for a person. Anything else (a torch error,
    an OSError) is unexpected: name its type so it can be reported.
    """
    shown = md_escape(what)  # `what` may name a run: its label is text, never Markdown
    try:
        yield
    except DeffError as err:
        st.error(md_escape(err))
    except MemoryError:
        st.error(f"{shown} ran out of memory; lower N or max tokens and try again.")
    except Exception as err:  # keep the app usable whatever a third-party library raises
        st.error(f"{shown} failed unexpectedly ({type(err).__name__}): {md_escape(err)}")
