"""User text shown as itself, wherever it is shown.

Stage: core. The one escaping path for every string a user or a colleague controls (a run's
model or dataset name, a CSV header, a file name, a passage's tokens, a shared run's fields):

- `as_text`: the value as printable text: a lone surrogate (which raises UnicodeEncodeError
  wherever the text is sent to a browser or a terminal) or a control character (an escape
  sequence, a bidirectional override) becomes U+FFFD, so nothing downstream can fail on it.
- `md_escape`: for every Streamlit element that renders Markdown (st.markdown, st.caption,
  st.error, st.warning, st.info, st.success, st.toast, st.subheader, widget labels). It renders
  GitHub-flavoured Markdown plus LaTeX `$...$`, emoji `:name:` and `:color[...]` directives,
  and has no switch to turn that off. Text a visitor controls must not become an image the
  browser fetches (`![x](http://...)`), a link, a heading or a formula: CommonMark lets any
  ASCII punctuation character be backslash-escaped, so every one of them is.
- `md_code`: a user's text as a Markdown code span (a command line), shown literally.
- `plotly_text`: for every Plotly label, hover text and template field: Plotly renders a subset
  of HTML there (`<a href>`, `<b>`, `<br>`) and substitutes `%{...}` in templates, so `&`, `<`,
  `>` and `%` become entities, which it shows as themselves.
- `csv_cell` / `csv_safe`: a CSV cell that begins with `=`, `+`, `-`, `@`, a tab or a carriage
  return is a formula to a spreadsheet (OWASP "CSV injection"): it gets a leading `'`.

deffcore never imports Streamlit: the app wraps user text in these where it is shown.
"""

from __future__ import annotations

import html
import re
import string
from typing import Any

_PUNCTUATION = re.compile("([" + re.escape(string.punctuation) + "])")
#: Not text: C0/C1 control characters but tab and line feed, the bidirectional overrides and
#: isolates, surrogates.
NOT_TEXT = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
#: First characters that make a spreadsheet read a cell as a formula (OWASP).
CSV_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def as_text(value: object) -> str:
    """`str(value)` with every lone surrogate and control character (but tab and line feed)
    replaced by U+FFFD."""
    return NOT_TEXT.sub("\ufffd", str(value))


def md_escape(value: object) -> str:
    """`as_text(value)` with every ASCII punctuation character backslash-escaped, so a
    Markdown renderer shows it literally (no link, image, emphasis, code, heading, HTML or
    formula)."""
    return _PUNCTUATION.sub(r"\\\1", as_text(value))


def md_code(value: object) -> str:
    """`as_text(value)` on one line as a Markdown code span, shown literally: its fence is
    longer than any run of backticks inside it (CommonMark), so nothing breaks out of it."""
    text = " ".join(as_text(value).splitlines())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def plotly_text(value: object) -> str:
    """`as_text(value)` for a Plotly label, hover text, title or template: `&`, `<`, `>` and `%`
    become entities (`&amp;`, `&lt;`, `&gt;`, `&#37;`), which Plotly shows as themselves, so
    no tag is rendered and no `%{...}` is substituted."""
    return html.escape(as_text(value), quote=False).replace("%", "&#37;")


def csv_cell(value: Any) -> Any:
    """A CSV cell a spreadsheet reads as text: a string beginning with a formula character
    (`CSV_FORMULA_STARTS`) gets a leading `'`; anything else is returned unchanged."""
    if isinstance(value, str) and value.startswith(CSV_FORMULA_STARTS):
        return "'" + value
    return value


def csv_safe(frame: Any) -> Any:
    """A copy of the pandas DataFrame `frame` with every cell and column name through
    `csv_cell` (numbers are left alone), ready for `to_csv`."""
    out = frame.map(csv_cell)
    out.columns = [csv_cell(c) for c in out.columns]
    return out
