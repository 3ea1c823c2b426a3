"""What every figure shares: the palette, the regime words, the layout, and the exports.

Colours are the Okabe-Ito palette (distinguishable with every common colour-vision deficiency);
every chart also says its regime in words or shape, so colour is never the only cue. The
exports (`figure_data`, `figure_csv`, `figure_html`) read the numbers back from the traces, so
what a user downloads is exactly what is drawn; `tag_run` makes a download say its run.
"""

from __future__ import annotations

__all__ = [
    "CLICK_TARGET",
    "COLOR_ABOVE",
    "COLOR_MEASURED",
    "COLOR_PAPER",
    "COLOR_REFERENCE",
    "COLOR_SUB",
    "COLOR_UPDATES",
    "LAYOUT",
    "OKABE_ITO",
    "POOLING_COLORS",
    "POOLING_SYMBOLS",
    "REGIME_LESS",
    "REGIME_MORE",
    "figure_csv",
    "figure_data",
    "figure_html",
    "for_display",
    "integer_ticks",
    "log_axis",
    "plain_text_labels",
    "projector",
    "reference_hline",
    "regime_color",
    "regime_label",
    "rgba",
    "tag_run",
    "theme_safe_colors",
]

import html
import io
import re
from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go

from deffcore.core.lazy import pd  # imported on first use: a chart never needs it
from deffcore.core.safe_text import csv_safe, plotly_text

#: The Okabe-Ito palette: distinguishable with every common colour-vision deficiency.
OKABE_ITO = {
    "orange": "#E69F00",
    "sky blue": "#56B4E9",
    "bluish green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish purple": "#CC79A7",
    "black": "#000000",
}
#: Colours: measured vs published values, and the two regimes of the gap to F_L. The regimes
#: are vermillion vs sky blue (never red vs green), and every chart also says them in words
#: or shape (bar side, text, marker), so colour is never the only cue.
COLOR_MEASURED = OKABE_ITO["blue"]
COLOR_PAPER = "#9e9e9e"
COLOR_SUB = OKABE_ITO["vermillion"]  # gap > 0: D_eff < F_L, more redundant than orth. updates
COLOR_ABOVE = OKABE_ITO["sky blue"]  # gap < 0: D_eff > F_L, less redundant
COLOR_REFERENCE = "#7f7f7f"
#: Updates (vs accumulated states) on the synthetic charts.
COLOR_UPDATES = OKABE_ITO["orange"]
#: A fixed colour and marker shape per pooling control, the same on every page.
POOLING_COLORS = {
    "default": OKABE_ITO["blue"],
    "first_non_bos": OKABE_ITO["orange"],
    "token_normed": OKABE_ITO["bluish green"],
    "no_pos0": OKABE_ITO["black"],  # the symmetric position-0 control
    "top1_pc": OKABE_ITO["reddish purple"],
    "top3_pc": OKABE_ITO["vermillion"],
}
POOLING_SYMBOLS = {
    "default": "circle",
    "first_non_bos": "square",
    "token_normed": "diamond",
    "no_pos0": "x",
    "top1_pc": "triangle-up",
    "top3_pc": "triangle-down",
}
#: The regimes in words (the glossary's wording, not "sub-reference").
REGIME_MORE = "more redundant than orthogonal updates"
REGIME_LESS = "less redundant than orthogonal updates"
# No template here: building a plotly template object costs ~0.3 s per figure, and
# st.plotly_chart applies the app theme anyway.
LAYOUT = {"margin": {"l": 60, "r": 20, "t": 60, "b": 50}}


def integer_ticks(fig: go.Figure, n: int, axes: str = "x") -> None:
    """Whole-number ticks on layer / lag axes of short runs (plotly would label 1.5, 2.5)."""
    if n <= 12:
        if "x" in axes:
            fig.update_xaxes(dtick=1)
        if "y" in axes:
            fig.update_yaxes(dtick=1)


def rgba(hex_color: str, alpha: float) -> str:
    """A "#rrggbb" colour with opacity `alpha`, as plotly's "rgba(r,g,b,a)"."""
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def regime_color(gap_pct: float) -> str:
    """Vermillion for gap > 0 (more redundant), sky blue for gap <= 0 (less redundant)."""
    return COLOR_SUB if gap_pct > 0 else COLOR_ABOVE


def regime_label(gap_pct: float) -> str:
    """The regime in words: "more/less redundant than orthogonal updates (D_eff < / ≥ F_L)"."""
    if not np.isfinite(gap_pct):
        return "undefined"
    return f"{REGIME_MORE} (D_eff < F_L)" if gap_pct > 0 else f"{REGIME_LESS} (D_eff ≥ F_L)"


#: `meta` of helper traces that carry no data of their own (skipped by `figure_data`).
CLICK_TARGET = "click-target"


def figure_html(fig: go.Figure) -> str:
    """A self-contained HTML page of the figure (plotly.js inlined: opens offline)."""
    return fig.to_html(include_plotlyjs=True, full_html=True)


def figure_data(fig: go.Figure) -> pd.DataFrame:
    """The numbers drawn in a figure as a long table: one row per point (or heatmap cell).

    Columns: `trace`, `x`, `y`, and `z` for heatmaps, `customdata` where a trace has it.
    """
    frames = []
    for i, trace in enumerate(fig.data):
        if getattr(trace, "meta", None) == CLICK_TARGET:
            continue
        name = trace.name if trace.name is not None else f"trace {i}"
        if trace.type == "heatmap":
            z = np.asarray(trace.z, dtype=np.float64)
            xs = list(trace.x) if trace.x is not None else list(range(z.shape[1]))
            ys = list(trace.y) if trace.y is not None else list(range(z.shape[0]))
            rows = [
                {"trace": name, "x": xs[c], "y": ys[r], "z": z[r, c]}
                for r in range(z.shape[0])
                for c in range(z.shape[1])
            ]
            frames.append(pd.DataFrame(rows))
            continue
        x = list(trace.x) if getattr(trace, "x", None) is not None else None
        y = list(trace.y) if getattr(trace, "y", None) is not None else None
        length = len(x) if x is not None else len(y) if y is not None else 0
        frame = pd.DataFrame(
            {
                "trace": [name] * length,
                "x": x if x is not None else [None] * length,
                "y": y if y is not None else [None] * length,
            }
        )
        custom = getattr(trace, "customdata", None)
        if custom is not None and len(custom) == length:
            frame["customdata"] = ["; ".join(map(str, c)) if np.ndim(c) else c for c in custom]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def figure_csv(fig: go.Figure) -> str:
    """`figure_data` as CSV text; a figure tagged with `tag_run` leads with the run's identity."""
    buffer = io.StringIO()
    data = figure_data(fig)
    run = fig.layout.meta.get("run") if isinstance(fig.layout.meta, dict) else None
    if isinstance(run, dict):  # downloads carry the run's identity
        data = pd.concat([pd.DataFrame({k: [v] * len(data) for k, v in run.items()}), data], axis=1)
    csv_safe(data).to_csv(buffer, index=False)  # a label is never a spreadsheet formula
    return buffer.getvalue()


def tag_run(fig: go.Figure, identity: Mapping[str, object]) -> go.Figure:
    """Attach a run's identity (`labels.run_identity`) to a figure: `figure_csv` then writes
    it as leading columns of every row, so a downloaded table says which run it came from."""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    fig.update_layout(meta={**meta, "run": dict(identity)})
    return fig


# ---------------------------------------------------------------------------------------------
# Layout for a page: titles clear of the toolbars, log axes fitted to the data

#: The top strip of a chart on a page belongs to the toolbars (Plotly's modebar and
#: Streamlit's element toolbar, shown on hover): titles and legends sit below it.
TOOLBAR_PX = 34
#: Height of one title line (Streamlit's theme: 16 px text) and of a line of annotation text.
TITLE_LINE_PX = 24
NOTE_LINE_PX = 20


#: A title longer than this is broken in two (at " (" or ": "): it must fit a half-page column
#: at 1400 px (about 55 characters of the theme's bold 16 px title).
TITLE_MAX_CHARS = 52


def _lines(text: object) -> int:
    return 1 + str(text).count("<br>") if text else 0


def wrap_title(text: str, limit: int = TITLE_MAX_CHARS) -> str:
    """`text` on two lines when longer than `limit`: broken before its last " (" or after its
    last ": " that leaves a first line of at most `limit` characters (else at a space)."""
    if not text or len(text) <= limit or "<br>" in text:
        return text
    cuts = [i for i in range(1, limit + 1) if text.startswith(" (", i)]
    cuts += [i + 1 for i in range(1, limit) if text.startswith(": ", i)]
    cuts = cuts or [i for i in range(1, limit + 1) if text[i] == " "]
    if not cuts:
        return text
    at = max(cuts)
    return text[:at].rstrip() + "<br>" + text[at:].lstrip()


def _shown_as_text(value: str) -> str:
    """`plotly_text`, idempotent: a label some figure already escaped is not escaped twice."""
    return plotly_text(html.unescape(value))


def _escaped(values: object) -> object:
    if isinstance(values, str):
        return _shown_as_text(values)
    if isinstance(values, list | tuple | np.ndarray) and any(isinstance(v, str) for v in values):
        return [_shown_as_text(v) if isinstance(v, str) else v for v in values]
    return values


def _escaped_cells(values: Any) -> Any:
    """customdata (1-D or 2-D) with every string cell shown as text, numbers unchanged."""
    cells = np.asarray(values, dtype=object)
    flat = [_shown_as_text(v) if isinstance(v, str) else v for v in cells.ravel().tolist()]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(cells.shape)


def plain_text_labels(fig: go.Figure) -> go.Figure:
    """A copy of `fig` whose data-borne text shows as text: trace names, categorical x / y
    values, customdata (what hover templates substitute) and tick labels can hold what a user
    typed (a run's model or dataset name, a passage's tokens), and Plotly renders a subset of
    HTML in them (`<a href>`, `<b>`), so their `&`, `<`, `>`, `%` become entities
    (`safe_text.plotly_text`). The figure's own titles, notes, texts and hover templates are
    left alone: they are ours, with their `<br>`, and a figure escapes the user's part of them
    where it builds them. For the page and the HTML download; the CSV is built from the
    figure as made (the user's text, unescaped, through `safe_text.csv_safe`)."""
    shown = go.Figure(fig)
    for trace in shown.data:
        if isinstance(getattr(trace, "name", None), str):
            trace.name = _shown_as_text(trace.name)
        for axis in ("x", "y"):
            if axis in trace and trace[axis] is not None:
                trace[axis] = _escaped(trace[axis])
        custom = getattr(trace, "customdata", None)
        if custom is not None and np.asarray(custom, dtype=object).dtype == object:
            trace.customdata = _escaped_cells(custom)
    for name in shown.layout:
        if name.startswith(("xaxis", "yaxis")):
            ax = shown.layout[name]
            if ax.ticktext is not None:
                ax.ticktext = _escaped(ax.ticktext)
            if ax.categoryarray is not None:
                ax.categoryarray = _escaped(ax.categoryarray)
    return shown


#: Colour strings Streamlit's chart theme treats as placeholders and replaces in the browser
#: with its own theme colours ("#000001" .. "#000040", streamlit_plotly_theme.py), whatever
#: trace holds them: Magma's darkest stop "#000004" is one, so the GW heatmap's largest
#: distances were drawn pale pink.
_THEME_PLACEHOLDER = re.compile(r"#0000(?:[0-3][0-9]|40)")


def _theme_safe(value: object, found: list[bool]) -> object:
    if isinstance(value, str) and _THEME_PLACEHOLDER.fullmatch(value.lower()):
        found.append(True)
        return f"rgb(0, 0, {int(value[5:], 16)})"  # the same colour, another spelling
    if isinstance(value, dict):  # a template's placeholders are the theme's own: kept
        return {k: v if k == "template" else _theme_safe(v, found) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_theme_safe(v, found) for v in value)
    return value


def theme_safe_colors(fig: go.Figure) -> go.Figure:
    """`fig` with its colours drawn as given on a page: every colour string of its traces and
    layout that Streamlit's theme would swap for one of its own (`_THEME_PLACEHOLDER`) spelled
    as the same rgb() colour instead (a new figure; `fig` itself when it has none, the common
    case, at no copy's cost). The layout's template is left alone: Streamlit's own template
    (the default once Streamlit is imported) is made of those placeholders, on purpose.
    `explorer.cards.show_figure` applies it."""
    found: list[bool] = []
    safe = _theme_safe(fig.to_dict(), found)
    return go.Figure(safe) if found else fig


def for_display(fig: go.Figure) -> go.Figure:
    """The one layout rule of a chart on a page (`explorer.cards.show_figure` applies it):
    the title sits directly above the plot area, from the figure's left edge, above any text
    the figure puts there (subplot titles, a legend line); the top margin leaves the toolbar strip
    (`TOOLBAR_PX`) free, so no toolbar ever covers a title. Returns `fig`, changed."""
    above = [
        a
        for a in fig.layout.annotations or ()
        if a.yref == "paper" and isinstance(a.y, int | float) and a.y >= 1.0 and a.yanchor != "top"
    ]
    notes = max((_lines(a.text) for a in above), default=0)
    if fig.layout.title.text:
        fig.update_layout(title_text=wrap_title(fig.layout.title.text))
    lines = _lines(fig.layout.title.text)
    legend = fig.layout.legend
    top_legend = legend.orientation == "h" and legend.y is not None and legend.y >= 1.0
    extra = NOTE_LINE_PX * notes + (NOTE_LINE_PX if top_legend else 0)
    need = TOOLBAR_PX + TITLE_LINE_PX * lines + extra + 6
    if (fig.layout.margin.t or 0) < need:
        fig.update_layout(margin_t=need)
    if lines:  # from just under the toolbar strip down (plotly anchors a title's first line)
        height = fig.layout.height or 450
        fig.update_layout(
            title_x=0,
            title_xref="container",  # the figure's left edge: long tick labels take no width
            title_xanchor="left",
            title_pad_l=8,
            title_y=1.0 - TOOLBAR_PX / height,
            title_yref="container",
            title_yanchor="top",
        )
    return fig


def _tick_text(value: float) -> str:
    """A log-axis tick as a person reads it: 1, 20, 500, 1,000, 1e+05 -> 10⁵."""
    if 1e-3 <= value < 1e5:
        return f"{value:,.10g}"
    power = round(float(np.log10(value)))
    return f"10<sup>{power}</sup>" if np.isclose(value, 10.0**power) else f"{value:.1e}"


def log_axis(values: object, *, include: tuple[float, ...] = (), pad: float = 1.6) -> dict:
    """A log axis fitted to `values` (and the reference values `include`, e.g. a threshold
    line), `pad` times beyond them on both sides: its range (log10 units) and readable ticks,
    1-2-5 steps over at most 2.5 decades, powers of ten beyond (every k-th past 8 decades)."""
    v = np.asarray([x for x in np.ravel(np.asarray(values, dtype=object)) if x is not None], float)
    v = np.concatenate([v[np.isfinite(v) & (v > 0)], [x for x in include if x > 0]])
    lo, hi = (float(v.min()) / pad, float(v.max()) * pad) if v.size else (0.1, 10.0)
    decades = np.log10(hi / lo)
    first, last = int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi)))
    if decades <= 2.5:
        ticks = [m * 10.0**k for k in range(first, last + 1) for m in (1, 2, 5)]
    else:
        step = max(1, int(np.ceil(decades / 8)))
        ticks = [10.0**k for k in range(first, last + 1, step)]
    ticks = [t for t in ticks if lo <= t <= hi]
    return {
        "type": "log",
        "range": [float(np.log10(lo)), float(np.log10(hi))],
        "tickvals": ticks,
        "ticktext": [_tick_text(t) for t in ticks],
    }


def reference_hline(fig: go.Figure, y: float, text: str, *, log: bool = False, **line) -> None:
    """A dashed horizontal reference line with its label just above its left end. Plotly's
    `add_hline(annotation_text=...)` puts the label at 10^y on a log axis (annotations there
    are in log10 units), far from the line: the label is placed here in the axis' units."""
    fig.add_hline(y=y, line={"color": COLOR_REFERENCE, "dash": "dash", **line})
    fig.add_annotation(
        x=0,
        xref="paper",
        y=float(np.log10(y)) if log else y,
        yref="y",
        text=text,
        showarrow=False,
        xanchor="left",
        yanchor="bottom",
        font={"size": 11, "color": COLOR_REFERENCE},
    )


def projector(fig: go.Figure, size: int = 20) -> go.Figure:
    """Every text of the figure at `size` (the title a little larger), for the back of a room:
    the global font alone does not reach the axes, legend and annotations, which Streamlit's
    theme sizes on their own. Returns `fig`, changed (and taller)."""
    fig.update_layout(
        font_size=size,
        title_font_size=size + 4,
        legend_font_size=size,
        hoverlabel_font_size=size,
        height=(fig.layout.height or 400) + 150,
    )
    fig.update_xaxes(title_font_size=size, tickfont_size=size - 2)
    fig.update_yaxes(title_font_size=size, tickfont_size=size - 2)
    for note in fig.layout.annotations or ():
        note.font.size = size - 2
    fig.for_each_trace(lambda t: t.update(textfont_size=size - 2) if "textfont" in t else None)
    fig.for_each_trace(
        lambda t: t.update(colorbar_tickfont_size=size - 2) if "colorbar" in t else None
    )
    return fig
