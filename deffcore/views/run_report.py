"""A run as one HTML file (stage: views): results to send that open without Python.

    html = report_html(view, **run_extras.report_parts(view))   # `deffcore report`, Overview

One self-contained page: plotly.js inlined once (no <script src>, no CDN, no font or image
fetched: it opens offline in any browser), then the run's headline numbers, its trust and what
would make it solid, the BOS answer, the similarity heatmap, the lag decay, the gap to F_L
beside the paper's published models, the pooling controls, the random-weight band and the
bootstrap when the run holds them, the diagnostics (massive activations, sinks) and the BOS
on/off check when present, and the command that remakes the run.

Every string that comes from the run (its label, model, dataset, the command, a colleague's
file) is HTML-escaped in the page and shown as text in the figures
(`figures.plain_text_labels`); plotly's JSON escapes `<` and `/`, so no label can close a
script. The parts this stage cannot compute (the BOS answer, diagnostics, on/off: the lenses
stage) are passed in as plain dicts (`run_extras.report_parts`).
"""

from __future__ import annotations

import html
import shlex
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from deffcore.core.files import REPORT_MARK

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from deffcore.views.run import Run

#: Plotly's toolbar in the file: no logo link, no cloud export.
PLOTLY_CONFIG = {"displaylogo": False, "responsive": True}
_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2em auto;
       max-width: 1100px; padding: 0 1.5em; color: #1a1a1a; line-height: 1.45; }
h1 { font-size: 1.7em; margin-bottom: .2em; } h2 { margin-top: 1.8em; font-size: 1.3em; }
.meta { color: #555; } table { border-collapse: collapse; margin: .6em 0; }
th, td { text-align: left; padding: .25em .9em .25em 0; border-bottom: 1px solid #e4e4e4; }
.box { border-left: 4px solid #1f77b4; background: #f3f6fa; padding: .6em 1em; margin: .8em 0; }
.solid { border-color: #009e73; } .indicative { border-color: #e69f00; }
.noise { border-color: #d55e00; } pre { background: #f3f6fa; padding: .8em; overflow-x: auto;
white-space: pre-wrap; word-break: break-all; } .fig { margin: .6em 0 1.2em; }
"""


def remake_command(
    spec: Mapping[str, Any],
    *,
    random_seeds: Sequence[int] = (),
    bootstrap: int | None = None,
    extras: Sequence[str] = (),
) -> str:
    """`python -m deffcore measure ...` with every field that sets this run apart (quoted):
    model, dataset, N, max tokens, seed and dtype always (the CLI's dtype default depends on
    the device: a float32 run remade on a GPU would be bfloat16 without it); passages, BOS,
    intervention and revision when not at their defaults; the random-weight seeds, bootstrap
    and `extras` flags (e.g. "--diagnostics") that made its snapshot."""
    q = shlex.quote
    parts = [
        "python -m deffcore measure",
        f"--model {q(str(spec['model']))}",
        f"--dataset {q(str(spec['dataset']))}",
        f"--n {int(spec['n'])}",
        f"--max-tokens {int(spec['max_tokens'])}",
        f"--seed {int(spec['seed'])}",
    ]
    for flag, field, default in (
        ("--passages", "passages", "documents"),
        ("--bos", "bos", "default"),
        ("--intervention", "intervention", "none"),
        ("--revision", "revision", None),
        ("--dtype", "dtype", None),
    ):
        value = spec.get(field)
        if value is not None and value != default:  # what sets the run apart is in the command
            parts.append(f"{flag} {q(str(value))}")
    if random_seeds:
        parts.append("--random-seeds " + ",".join(str(int(s)) for s in random_seeds))
    if bootstrap is not None:
        parts.append(f"--bootstrap {int(bootstrap)}")
    parts += list(extras)
    return " ".join(parts)


def _figure_div(fig: go.Figure, first: bool) -> str:
    from deffcore import figures

    shown = figures.plain_text_labels(fig)
    shown.update_xaxes(automargin=True).update_yaxes(automargin=True)  # long run labels whole
    body = shown.to_html(
        full_html=False,
        include_plotlyjs=first,  # inlined once, in the first figure's div: nothing fetched
        include_mathjax=False,
        config=PLOTLY_CONFIG,
        default_width="100%",
    )
    return f'<div class="fig">{body}</div>'


class _Page:
    """The report's body, section by section; figures share one inlined plotly.js."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.figures = 0

    def h2(self, text: str) -> None:
        self.parts.append(f"<h2>{html.escape(text)}</h2>")

    def p(self, text: str, cls: str = "") -> None:
        attr = f' class="{cls}"' if cls else ""
        self.parts.append(f"<p{attr}>{html.escape(text)}</p>")

    def box(self, title: str, text: str, cls: str = "") -> None:
        self.parts.append(
            f'<div class="box {cls}"><b>{html.escape(title)}</b> {html.escape(text)}</div>'
        )

    def table(self, rows: Sequence[Sequence[Any]], head: Sequence[str] | None = None) -> None:
        e = html.escape
        top = "<tr>" + "".join(f"<th>{e(str(h))}</th>" for h in head) + "</tr>" if head else ""
        body = "".join(
            "<tr>" + "".join(f"<td>{e(_cell(v))}</td>" for v in r) + "</tr>" for r in rows
        )
        self.parts.append(f"<table>{top}{body}</table>")

    def figure(self, fig: go.Figure) -> None:
        self.parts.append(_figure_div(fig, first=self.figures == 0))
        self.figures += 1

    def code(self, text: str) -> None:
        self.parts.append(f"<pre><code>{html.escape(text)}</code></pre>")


def _cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return "—"
    return f"{v:+.2f}" if isinstance(v, float) else str(v)


def _headline_section(page: _Page, view: Run, pooling: str, metric: str, K: Any) -> None:
    from deffcore.views.notebook import headline_rows

    page.h2("Headline")
    page.table(headline_rows(view, pooling=pooling, metric=metric, K=K))
    trust = view.trust(pooling, metric, K)
    page.box(f"Trust: {trust.badge}.", trust.sentence(), trust.level)


def _answer_section(page: _Page, answer: Mapping[str, Any] | None) -> None:
    from deffcore.statistics.bos_answer import QUESTION, answer_trust_line

    page.h2(QUESTION)
    if not answer:
        page.p("The BOS answer was not computed for this report.")
        return

    cls = {"not_artefact": "solid", "artefact": "noise"}.get(answer.get("verdict"), "")
    said = f"{answer.get('sentence', '')} {answer_trust_line(answer.get('trust'))}"
    page.box("The BOS answer:", said, cls)
    if answer.get("how"):
        e = html.escape
        page.parts.append(
            f"<details><summary>How this was decided</summary><p>{e(answer['how'])}</p></details>"
        )


def _figures_section(page: _Page, view: Run, pooling: str, metric: str, K: Any) -> None:
    from deffcore.views.notebook import run_figure

    page.h2("Similarity between layers and lag decay")
    page.figure(run_figure(view, "heatmap", pooling=pooling, metric=metric))
    page.figure(run_figure(view, "lag", pooling=pooling, metric=metric))
    page.h2("Gap to F_L beside the paper's models")
    page.p(
        "Grey hatched bars labelled (paper) are the paper's published values (default pooling, "
        "linear CKA, N = 10,000 FineWeb-Edu passages), never re-measured here."
    )
    page.figure(run_figure(view, "gap", pooling=pooling, metric=metric, K=K))
    page.h2("Pooling controls")
    page.figure(run_figure(view, "controls", metric=metric, K=K))
    _controls_table(page, view, metric, K)


def _controls_table(page: _Page, view: Run, metric: str, K: Any) -> None:
    from deffcore.core.constants import POOLINGS
    from deffcore.core.errors import DeffError

    rows = []
    for pooling in POOLINGS:
        try:
            h = view.headline(pooling, metric, K)
        except (KeyError, DeffError):  # an older snapshot, or a control undefined here
            continue
        rows.append((pooling, h.gap_pct, f"{h.deff_over_L:.4f}", f"{h.rho1:.4f}"))
    page.table(rows, head=("pooling", "gap to F_L (%)", "D_eff/L", "ρ̂(1)"))


def _baselines_section(
    page: _Page, view: Run, pooling: str, metric: str, boot: Mapping[str, Any] | None
) -> None:
    from deffcore import figures

    band = view.random_band(pooling, metric) or {}
    if not band and not boot:
        return
    page.h2("Baselines")
    if band:
        h = view.headline(pooling, metric)
        page.figure(figures.null_baseline(h.deff_over_L, band["deff_over_L"], label="trained"))
        page.p(
            f"Random-weight null over seeds {', '.join(map(str, band['seeds']))}: D_eff/L mean "
            f"{band['mean']:.4f}, band [{band['low']:.4f}, {band['high']:.4f}]; trained "
            f"{h.deff_over_L:.4f}."
        )
    if boot:
        page.p(
            f"Passage bootstrap of pooling {pooling} (B = {boot['B']}): D_eff/L 95% interval "
            f"[{boot['low']:.4f}, {boot['high']:.4f}]."
        )


def _measures_section(page: _Page, view: Run, pooling: str) -> None:
    """The table across similarity measures (SPEC 17.4), when the run holds one."""
    table = view.measure_table(pooling)
    if table is None:
        return
    page.h2("Across similarity measures")
    page.table(table.display_rows(), head=table.head())
    page.p(table.caption())


def _diagnostics_section(page: _Page, diag: Mapping[str, Any] | None) -> None:
    from deffcore import figures

    page.h2("Massive activations and attention sinks")
    if not diag:
        page.p(
            "Not computed for this run (`deffcore bos` with the run's settings computes them, "
            "or measure with --diagnostics --snapshot)."
        )
        return
    page.figure(
        figures.massive_ratio_figure(
            diag["massive_ratio"], diag["massive_position"], diag["massive_dim"]
        )
    )
    page.figure(figures.sink_fraction_figure(diag["sink_fraction"]))
    where = "shipped in the run's snapshot" if diag.get("shipped") else "stored beside the run"
    page.p(f"From one eager-attention pass over the first {diag['n_passages']} passages ({where}).")


def _on_off_section(page: _Page, on_off: Mapping[str, Any] | None) -> None:
    if not on_off:
        return
    page.h2("BOS on or off")
    page.box("Conclusion:", str(on_off["conclusion"]))
    page.table(
        [
            (f"bos={bos}", on_off[bos]["gaps"]["default"], f"{on_off[bos]['pos0'][0]:.1f}×")
            for bos in ("add", "none")
        ],
        head=("run", "gap to F_L, default (%)", "peak position-0 norm ratio"),
    )


def report_html(
    view: Run,
    *,
    answer: Mapping[str, Any] | None = None,
    diagnostics: Mapping[str, Any] | None = None,
    bos_on_off: Mapping[str, Any] | None = None,
    bootstrap: Mapping[str, Any] | None = None,
    pooling: str = "default",
    metric: str = "cka",
    K: int | None = None,
) -> str:
    """The run as one self-contained HTML page (module docstring). answer:
    `Position0Answer.to_dict()`; diagnostics: a `diagnose` dict; bos_on_off: `bos_on_off`'s
    result; bootstrap: a `BootstrapResult.to_dict()` of this pooling and metric (None: absent,
    said so where the page would show it)."""
    page = _Page()
    source = {"precomputed": "shipped with the app", "shared": "a shared snapshot file"}
    page.p(
        f"{source.get(view.source, view.source)} · pooling "
        f"{pooling} · metric {metric} · K = {K or view.layers - 1} · written "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by deffcore",
        "meta",
    )
    _headline_section(page, view, pooling, metric, K)
    _answer_section(page, answer)
    _figures_section(page, view, pooling, metric, K)
    _baselines_section(page, view, pooling, metric, bootstrap)
    _measures_section(page, view, pooling)
    _diagnostics_section(page, diagnostics)
    _on_off_section(page, bos_on_off)
    page.h2("The command that remakes this run")
    page.code(getattr(view, "command", "") or remake_command(view.spec))
    title = html.escape(f"Effective depth: {view.label}")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head>'
        f'{REPORT_MARK}<meta charset="utf-8">'  # how `report -o` knows its own file
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{title}</h1>{''.join(page.parts)}</body></html>\n"
    )
