"""Stage 5, Plotly figures: plain inputs (arrays, dicts, DataFrames) in, `go.Figure` out.

No Streamlit here, so every figure is testable on its own and usable from a notebook. Each
figure carries its numbers in the traces (hover shows the exact values), so `figure_data`
can export what is drawn as a table and `figure_html` as a self-contained page.

One module per subject, each naming its public figures and styles in `__all__`; every one is
re-exported here, so `deffcore.figures.X` works:
`base` (palette, regime words, layout, export), `run` (one run's heatmap, rows, lag decay,
D_eff(K)), `compare` (gap bars and comparisons of runs), `bos` (pooling controls, position 0,
massive activations, sinks, passage inspector), `synthetic` (the Synthetic lab), `baselines`
(null, matched references, bootstrap), `models` (the Models page), `anytime` (a run's
estimates as passages land), `paper_lenses` (the papers' massive-activation and sink
definitions beside the project's), `atlas` (the depth-use atlas of SPEC 16).
"""

from __future__ import annotations

from deffcore.figures import (
    anytime,
    atlas,
    base,
    baselines,
    bos,
    compare,
    models,
    paper_lenses,
    run,
    synthetic,
)
from deffcore.figures.anytime import *  # noqa: F403
from deffcore.figures.atlas import *  # noqa: F403
from deffcore.figures.base import *  # noqa: F403
from deffcore.figures.baselines import *  # noqa: F403
from deffcore.figures.bos import *  # noqa: F403
from deffcore.figures.compare import *  # noqa: F403
from deffcore.figures.models import *  # noqa: F403
from deffcore.figures.paper_lenses import *  # noqa: F403
from deffcore.figures.run import *  # noqa: F403
from deffcore.figures.synthetic import *  # noqa: F403

_SUBJECTS = (anytime, atlas, base, baselines, bos, compare, models, paper_lenses, run, synthetic)
__all__ = sorted(name for module in _SUBJECTS for name in module.__all__)
