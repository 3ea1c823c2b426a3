"""A measured run's depth-use atlas as stored beside it, summarised (nothing is run here;
`deffcore.lenses.atlas` computes one)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from deffcore.extraction import atlas as atlas_store
from deffcore.measures.atlas import (
    Atlas,
    SkipEffect,
    consecutive_geometry,
    summarize,
    summarize_skip,
)
from deffcore.measures.depth import lag_profile


def run_info(m: Any) -> dict[str, Any]:
    """The run's own numbers the atlas is read beside (default pooling, the run's metric):
    key, spec, metric, layers, n, D_eff, D_eff/L, gap%, rho_hat(1), the lag profile."""
    s = m.summary("default")
    return {
        "key": m.spec.key(),
        "spec": asdict(m.spec),
        "metric": m.metric,
        "layers": int(m.layers),
        "n": int(m.n),
        "deff": s.deff,
        "deff_over_L": s.deff_over_L,
        "gap_pct": s.gap_pct,
        "rho1": s.rho1,
        "lag_profile": [float(x) for x in lag_profile(m.similarity("default"))],
    }


def stored_skip(
    m: Any, passages: int | None = None, *, B: int = 100, seed: int = 0, ci: float = 0.95
) -> SkipEffect | None:
    """The run's stored skip effect on its first min(passages, N) passages (None: on however
    many it was computed), or None."""
    found = atlas_store.read_skip(m.spec, None if passages is None else min(passages, m.n))
    if found is None:
        return None
    return summarize_skip(
        found["later"], found["later_max"], found["kl"], B=B, seed=seed, ci=ci,
        meta={"passages_rule": "the run's first kept passages"},
    )  # fmt: skip


def stored_atlas(
    m: Any, *, B: int = 100, seed: int = 0, ci: float = 0.95, skip_passages: int | None = None
) -> Atlas | None:
    """The atlas of a measured run (`Measurement`) as stored beside it, with its skip effect
    when one is stored; None when the run has no atlas yet."""
    rows = atlas_store.read_rows(m.spec)
    if rows is None or rows.n != m.n:
        return None
    out = summarize(rows, B=B, seed=seed, ci=ci)
    out.geometry = consecutive_geometry(m.states_with_h0("default"), out.relative_contribution)
    out.run = run_info(m)
    out.skip_effect = stored_skip(m, skip_passages, B=B, seed=seed, ci=ci)
    return out


def phase_words(atlas: Any) -> dict[str, str]:
    """The phase point in words for a reader (SPEC section 16.1, item 6): `value` and `help` of
    the phase point, `share` of the blocks past it. p = L means r_l never stays below its
    threshold: nothing was found, said as such (never "after block L", "0% past it")."""
    L, p = int(atlas.layers), int(atlas.phase_point)
    lo, hi = atlas.intervals["phase_point"]
    band = f"95% interval: blocks {lo:.0f}–{hi:.0f}"
    if p >= L:
        return {
            "value": "none found",
            "help": "r_l does not stay below half its first-half median up to the last block, "
            f"so no block is past a phase point ({band})",
            "share": "none found",
        }
    return {
        "value": f"after block {p}",
        "help": f"{band}; {L - p} of {L} blocks past it",
        "share": f"{atlas.columns()['phase_share']:.0%}",
    }
