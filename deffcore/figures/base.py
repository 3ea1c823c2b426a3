"""What every figure shares: the palette, the regime words, the layout, and the exports.

Colours are the Okabe-Ito palette (distinguishable with every common colour-vision deficiency);
every chart also says its regime in words or shape, so colour is never the only cue. The
exports (`figure_data`, `figure_csv`, `figure_html`) read the numbers back from the traces, so
what a user downloads is exactly what is drawn; `tag_run` makes a download say its run.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

import numpy as np
import pandas as pd
import plotly.graph_objects as go

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
    "no_pos0": OKABE_ITO["black"],  # diag (issue 11): the symmetric position-0 control
    "top1_pc": OKABE_ITO["reddish purple"],
    "top3_pc": OKABE_ITO["vermillion"],
}
POOLING_SYMBOLS = {
    "default": "circle",
    "first_non_bos": "square",
    "token_normed": "diamond",
    "no_pos0": "x",  # diag (issue 11)
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
    if isinstance(run, dict):  # ui-views: downloads carry the run's identity (issue 12.5)
        data = pd.concat([pd.DataFrame({k: [v] * len(data) for k, v in run.items()}), data], axis=1)
    data.to_csv(buffer, index=False)
    return buffer.getvalue()


def tag_run(fig: go.Figure, identity: Mapping[str, object]) -> go.Figure:
    """Attach a run's identity (`snapshot.run_identity`) to a figure: `figure_csv` then writes
    it as leading columns of every row, so a downloaded table says which run it came from."""
    meta = fig.layout.meta if isinstance(fig.layout.meta, dict) else {}
    fig.update_layout(meta={**meta, "run": dict(identity)})
    return fig
