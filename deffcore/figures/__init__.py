"""Stage 5, Plotly figures: plain inputs (arrays, dicts, DataFrames) in, `go.Figure` out.

No Streamlit here, so every figure is testable on its own and usable from a notebook. Each
figure carries its numbers in the traces (hover shows the exact values), so `figure_data`
can export what is drawn as a table and `figure_html` as a self-contained page.

One module per subject; every public name is re-exported here, so `deffcore.figures.X` works:
`base` (palette, regime words, layout, export), `run` (one run's heatmap, rows, lag decay,
D_eff(K)), `compare` (gap bars and comparisons of runs), `bos` (pooling controls, position 0,
massive activations, sinks, passage inspector), `synthetic` (the Synthetic lab), `baselines`
(null, matched references, bootstrap), `models` (the Models page), `anytime` (a run's
estimates as passages land).
"""

from __future__ import annotations

from deffcore.figures.anytime import gap_vs_n
from deffcore.figures.base import (
    CLICK_TARGET,
    COLOR_ABOVE,
    COLOR_MEASURED,
    COLOR_PAPER,
    COLOR_REFERENCE,
    COLOR_SUB,
    COLOR_UPDATES,
    LAYOUT,
    OKABE_ITO,
    POOLING_COLORS,
    POOLING_SYMBOLS,
    REGIME_LESS,
    REGIME_MORE,
    figure_csv,
    figure_data,
    figure_html,
    for_display,
    integer_ticks,
    log_axis,
    plain_text_labels,
    projector,
    reference_hline,
    regime_color,
    regime_label,
    tag_run,
)
from deffcore.figures.baselines import bootstrap_histogram, matched_references_bars, null_baseline
from deffcore.figures.bos import (
    controls_dotplot,
    massive_ratio_figure,
    pos0_ratio,
    sink_fraction_figure,
    sink_scores_heatmap,
    token_norm_heatmap,
)
from deffcore.figures.compare import (
    RUN_COLORS,
    RUN_DASHES,
    RUN_SYMBOLS,
    compare_lag_profiles,
    gap_bars,
    run_style,
    side_by_side_heatmaps,
)
from deffcore.figures.models import (
    FAMILY_COLORS,
    MODEL_SYMBOLS,
    models_depth_scatter,
    models_gap_by_pooling,
)
from deffcore.figures.run import (
    deff_vs_K,
    lag_decay,
    reference_lag_profile,
    similarity_heatmap,
    similarity_rows,
)
from deffcore.figures.synthetic import (
    CONSTRUCTION_COLORS,
    CONSTRUCTION_SYMBOLS,
    STORY_STYLES,
    states_vs_updates,
    story_depth_bars,
    story_lag_profiles,
    synthetic_sweep,
)

__all__ = [
    "CLICK_TARGET",
    "COLOR_ABOVE",
    "COLOR_MEASURED",
    "COLOR_PAPER",
    "COLOR_REFERENCE",
    "COLOR_SUB",
    "COLOR_UPDATES",
    "CONSTRUCTION_COLORS",
    "CONSTRUCTION_SYMBOLS",
    "FAMILY_COLORS",
    "LAYOUT",
    "MODEL_SYMBOLS",
    "OKABE_ITO",
    "POOLING_COLORS",
    "POOLING_SYMBOLS",
    "REGIME_LESS",
    "REGIME_MORE",
    "RUN_COLORS",
    "RUN_DASHES",
    "RUN_SYMBOLS",
    "STORY_STYLES",
    "bootstrap_histogram",
    "compare_lag_profiles",
    "controls_dotplot",
    "deff_vs_K",
    "figure_csv",
    "figure_data",
    "figure_html",
    "for_display",
    "gap_bars",
    "gap_vs_n",
    "integer_ticks",
    "lag_decay",
    "log_axis",
    "massive_ratio_figure",
    "matched_references_bars",
    "models_depth_scatter",
    "models_gap_by_pooling",
    "null_baseline",
    "plain_text_labels",
    "pos0_ratio",
    "projector",
    "reference_hline",
    "reference_lag_profile",
    "regime_color",
    "regime_label",
    "run_style",
    "side_by_side_heatmaps",
    "similarity_heatmap",
    "similarity_rows",
    "sink_fraction_figure",
    "sink_scores_heatmap",
    "states_vs_updates",
    "story_depth_bars",
    "story_lag_profiles",
    "synthetic_sweep",
    "tag_run",
    "token_norm_heatmap",
]
