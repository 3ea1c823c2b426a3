"""A run in a notebook: its HTML summary (`_repr_html_`) and the explorer's Plotly figures.

    m = dc.measure(model, tokenizer, texts)
    m                              # Jupyter shows run_html(m): headline, trust, small heatmap
    m.figure("heatmap")            # "heatmap", "lag", "gap", "controls" (deffcore.figures)

Both work for any `run.Run`, live or opened from a shared snapshot (`Run.figure` and
`Run._repr_html_` call these; they take the run as an untyped `view`, since `run` imports this
module), so a run a colleague sent looks the same as one measured here. The HTML is
self-contained: an inline SVG heatmap (Viridis, like the explorer's), no script, no external
resource; every user-provided string (model, dataset, labels) is escaped.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING, Any

import numpy as np

from deffcore.core.checks import check_choice
from deffcore.core.constants import METRICS, POOLINGS
from deffcore.core.errors import DeffError

if TYPE_CHECKING:
    import plotly.graph_objects as go

#: The figures `figure(name)` returns, as the explorer's pages draw them.
FIGURE_NAMES: tuple[str, ...] = ("heatmap", "lag", "gap", "controls")
#: Side of the inline heatmap in pixels (each cell at least 2 px).
HEATMAP_PX = 180
#: Most cells per side of the inline heatmap (larger L: block means of layers).
MAX_CELLS = 64


#: The options `figure(name, **options)` takes (`run_figure`'s keyword arguments).
FIGURE_OPTIONS: tuple[str, ...] = ("pooling", "metric", "K", "paper")


def figure_of(view: Any, name: str, options: dict[str, Any]) -> go.Figure:
    """`run_figure(view, name, **options)`, each option checked by name first: an unknown
    one, or a `paper` that is not True/False, is a sentence naming it (not a TypeError)."""
    unknown = [k for k in options if k not in FIGURE_OPTIONS]
    if unknown:
        raise DeffError(
            f"figure() has no option {unknown[0]!r}; its options are {', '.join(FIGURE_OPTIONS)}."
        )
    if not isinstance(options.get("paper", True), bool):
        raise DeffError(f"paper must be True or False, got {options['paper']!r}.")
    return run_figure(view, name, **options)


def run_figure(
    view: Any,
    name: str,
    *,
    pooling: str = "default",
    metric: str = "cka",
    K: int | None = None,
    paper: bool = True,
) -> go.Figure:
    """The explorer's figure `name` of this run (tagged with the run's identity for exports).

    heatmap: S (L x L); lag: rho(k) with the orthogonal-update reference (and, for linear CKA,
    the iid-bias floor d/(N+d)); gap: this run's gap to F_L beside its random-weight seeds and,
    with `paper`, the paper's published models; controls: the gap under every pooling control.
    K applies to the gap and controls figures (default L-1).
    """
    for value, allowed, what in (
        (name, FIGURE_NAMES, "figure"),
        (pooling, POOLINGS, "pooling"),
        (metric, METRICS, "metric"),
    ):
        check_choice(value, allowed, what)
    from deffcore import figures

    if name == "heatmap":
        fig = figures.similarity_heatmap(
            view.similarity(pooling, metric), metric=metric, pooling=pooling
        )
    elif name == "lag":
        linear = metric == "cka"
        fig = figures.lag_decay(
            view.lag_profile(pooling, metric),
            n=view.n if linear else None,
            d=view.d_model if linear else None,
            label=view.label,
        )
    elif name == "gap":
        fig = figures.gap_bars(_gap_table(view, pooling, metric, K, paper))
    else:
        table, undefined = _controls_table(view, metric, K)
        if table.empty:
            raise DeffError(f"No pooling control is defined for this run: {undefined[0]}")
        fig = figures.controls_dotplot(table)
        if undefined:  # said on the figure, never dropped silently
            fig.add_annotation(
                text="Undefined here: " + "; ".join(undefined),
                xref="paper",
                yref="paper",
                x=0,
                y=-0.25,
                showarrow=False,
                xanchor="left",
            )
    return figures.tag_run(fig, view.identity(pooling, metric))


def _gap_table(view: Any, pooling: str, metric: str, K: int | None, paper: bool):
    import pandas as pd

    from deffcore.measures.depth import gap_percent
    from deffcore.views.models_overview import model_family
    from deffcore.views.paper import paper_default_gaps, paper_table

    h = view.headline(pooling, metric, K)
    rows = [_gap_row(f"this run: {view.label}", "this run", "this run", h.gap_pct, h.layers)]
    band = view.random_band(pooling, metric) or {}
    for seed, value in zip(band.get("seeds", []), band.get("deff_over_L", []), strict=False):
        gap = float(gap_percent(value * view.layers, view.layers))
        rows.append(
            _gap_row(
                f"random weights, seed {seed}", "random-weight null", "cached", gap, view.layers
            )
        )
    published = paper_table() if paper else None
    if published is not None:
        for r in paper_default_gaps(published).itertuples():
            rows.append(
                _gap_row(f"{r.model} (paper)", model_family(r.model), "paper", r.value, r.layers)
            )
    return pd.DataFrame(rows)


def _gap_row(label: str, family: str, source: str, gap: float, layers: Any) -> dict[str, Any]:
    return {"label": label, "family": family, "source": source, "gap_pct": gap, "layers": layers}


def _controls_table(view: Any, metric: str, K: int | None):
    """(one row per pooling control, the controls that are undefined for this run and why)."""
    import pandas as pd

    from deffcore.core.errors import InvalidStatesError

    rows, undefined = [], []
    for pooling in POOLINGS:
        try:
            h = view.headline(pooling, metric, K)
        except KeyError:  # a snapshot made before this pooling existed
            continue
        except InvalidStatesError as err:  # e.g. first_non_bos when every passage starts alike
            undefined.append(f"{pooling} ({err})")
            continue
        rows.append(
            {"label": "this run", "pooling": pooling, "gap_pct": h.gap_pct, "source": "this run"}
        )
    return pd.DataFrame(rows), undefined


# ---------------------------------------------------------------------------------------------
# HTML


def heatmap_svg(S: np.ndarray, *, metric: str = "cka", px: int = HEATMAP_PX) -> str:
    """S (L, L) as an inline SVG: one rect per cell, Viridis over [min(0, min S), 1] like the
    explorer's heatmap, layer 1 at the top left, each cell's value in its tooltip (<title>).
    Beyond `MAX_CELLS` layers a cell is the mean of a block of layers, so the HTML stays a few
    hundred kB whatever L is (L = 512 would otherwise be 262,144 rects)."""
    from plotly.colors import sample_colorscale

    S = np.asarray(S, dtype=np.float64)
    blocks = np.array_split(np.arange(S.shape[0]), min(S.shape[0], MAX_CELLS))
    if len(blocks) < S.shape[0]:  # (L, L) -> (MAX_CELLS, MAX_CELLS) block means
        S = np.array([[S[np.ix_(a, b)].mean() for b in blocks] for a in blocks])
    names = [f"{b[0] + 1}" if len(b) == 1 else f"{b[0] + 1}-{b[-1] + 1}" for b in blocks]
    L = S.shape[0]
    cell = max(2, px // L)
    lo = min(0.0, float(np.nanmin(S)))
    scaled = np.clip((S - lo) / (1.0 - lo if lo < 1.0 else 1.0), 0.0, 1.0)
    colors = sample_colorscale("Viridis", scaled.ravel().tolist())
    rects = []
    for idx, color in enumerate(colors):
        i, j = divmod(idx, L)
        rects.append(
            f'<rect x="{j * cell}" y="{i * cell}" width="{cell}" height="{cell}" fill="{color}">'
            f"<title>layer {names[i]} vs {names[j]}: {S[i, j]:.4g}</title></rect>"
        )
    side = cell * L
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{side}" height="{side}" '
        f'viewBox="0 0 {side} {side}" role="img" aria-label="layer similarity heatmap '
        f'({html.escape(metric)})">{"".join(rects)}</svg>'
    )


def headline_rows(
    view: Any, *, pooling: str = "default", metric: str = "cka", K: int | None = None
) -> list[tuple[str, str]]:
    """The run's headline numbers as (name, value in words) rows, the random-weight band last
    when the run has one: the notebook's summary and the run report (`run_report`) show these."""
    h = view.headline(pooling, metric, K)
    regime = "more redundant" if h.gap_pct > 0 else "less redundant"
    rows = [
        ("D_eff", f"{h.deff:.3f}  (K = {h.K}, L = {h.layers})"),
        ("D_eff / L", f"{h.deff_over_L:.4f}"),
        (
            "gap to F_L",
            f"{h.gap_pct:+.1f}%  ({regime} than orthogonal updates, F_L = {h.reference_FL:.3f})",
        ),
        ("ρ̂(1)", f"{h.rho1:.3f}"),
        ("position-0 norm ratio", f"{h.pos0_ratio:.1f}x at layer {h.pos0_layer}"),
        ("N, d", f"{h.n:,} passages, d = {h.d_model}  (CKA bias d/(N+d) = {h.cka_bias:.3f})"),
    ]
    band = view.random_band(pooling, metric) or {}
    if band:
        rows.append(
            (
                "random-weight null",
                f"D_eff/L {band['mean']:.4f}, band [{band['low']:.4f}, {band['high']:.4f}] "
                f"over {len(band['seeds'])} seed(s)",
            )
        )
    return rows


def run_html(view: Any, *, pooling: str = "default", metric: str = "cka") -> str:
    """The run as a small HTML block: headline numbers, trust level, the BOS answer
    (`bos_answer.run_answer`, as every surface says it), heatmap (escaped)."""
    from deffcore.statistics.bos_answer import answer_lines

    e = html.escape
    h = view.headline(pooling, metric)
    answer = answer_lines(view, metric)  # first: a live run pairs it (and the trust) here
    trust = view.trust(pooling, metric)
    rows = headline_rows(view, pooling=pooling, metric=metric)
    table = "".join(
        f'<tr><th style="text-align:left;padding-right:1em">{e(k)}</th><td>{e(v)}</td></tr>'
        for k, v in rows
    )
    return (
        '<div class="deffcore-run" style="display:flex;gap:1.5em;align-items:flex-start;'
        'font-family:sans-serif;font-size:13px">'
        f'<div><div style="font-weight:bold;margin-bottom:.4em">{e(view.label)}</div>'
        f'<div style="color:#555;margin-bottom:.4em">pooling {e(pooling)} · metric {e(metric)}'
        f" · {e(view.source)}</div>"
        f"<table>{table}</table>"
        f'<div style="margin-top:.5em"><b>Trust: {e(trust.badge)}</b> — {e(trust.sentence())}</div>'
        f'<div style="margin-top:.5em;max-width:40em"><b>{e(answer[0])}</b> {e(answer[1])} '
        f"<i>{e(answer[2])}</i></div>"
        "</div>"
        f"<div>{heatmap_svg(view.similarity(pooling, metric), metric=metric)}"
        f'<div style="color:#555">S(i, j), layers 1..{h.layers}</div></div>'
        "</div>"
    )
