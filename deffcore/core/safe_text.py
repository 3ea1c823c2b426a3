"""User text shown as itself where a Markdown renderer would interpret it (issue 17, Security 5).

Streamlit renders the body of st.markdown, st.caption, st.error, st.warning, st.info,
st.success, st.toast and st.subheader as GitHub-flavoured Markdown (plus LaTeX `$...$`, emoji
`:name:` and `:color[...]` directives), and has no switch to turn that off. Text a visitor
controls (a CSV header in an error, a file or model name, a passage) must not become an image
the browser fetches (`![x](http://...)`), a link, a heading or a formula. `md_escape` makes it
literal text: CommonMark lets any ASCII punctuation character be backslash-escaped, so every
one of them is, and the renderer shows the characters themselves. deffcore never imports
Streamlit: the app wraps user text in `md_escape` where it is shown.
"""

from __future__ import annotations

import html
import re
import string

_PUNCTUATION = re.compile("([" + re.escape(string.punctuation) + "])")


def md_escape(value: object) -> str:
    """`str(value)` with every ASCII punctuation character backslash-escaped, so a Markdown
    renderer shows it literally (no link, image, emphasis, code, heading, HTML or formula)."""
    return _PUNCTUATION.sub(r"\\\1", str(value))


def plotly_text(value: object) -> str:
    """`str(value)` for a Plotly label or title: Plotly renders a subset of HTML there (`<a
    href>`, `<b>`, `<br>`), so `&`, `<` and `>` become entities, which it shows as themselves."""
    return html.escape(str(value), quote=False)
