"""A run's extras beyond its similarity matrices (stage: lenses): the BOS diagnostics and the
BOS on/off check, carried in its snapshot and read back checked.

The shipped default must be whole at first visit, so the CLI computes what the BOS page would
otherwise compute on request and writes it into the snapshot
(`deffcore measure ... --diagnostics --bos-on-off --snapshot PATH`, scripts/make_default_run.sh):

    data["diagnostics"]  `diagnostics.diagnose(spec)`'s dict; its passage inspector trimmed to
                         the first INSPECTOR_PASSAGES passages, norms to NORM_DIGITS digits
    data["bos_on_off"]   `bos_answer.bos_on_off(spec, metric, K)` plus the metric and K it used

A snapshot may come from someone else (a shared file): a section is used only when it passes
`check_diagnostics` / `check_bos_on_off` (types, lengths, the run's key, the current
diagnostics format), else it is ignored (the page computes on request as if it were absent),
and no text of it is shown: the on/off sentence is recomputed from its numbers. `report_parts`
gathers what a run's report shows beyond the views stage's reach (the BOS answer, diagnostics,
on/off) for `deffcore.views.run_report.report_html`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from deffcore.core.constants import METRICS, POOLINGS
from deffcore.core.json_values import finite_number
from deffcore.statistics.paired import PairedDifference

#: Passages of the inspector kept in a snapshot (all 64 would be ~2 MB of token norms).
INSPECTOR_PASSAGES = 8
#: Significant digits of the inspector's token norms in a snapshot (a log colour scale).
NORM_DIGITS = 4
_MAX_TOKEN_CHARS = 200


def _round(x: Any, digits: int) -> Any:
    if isinstance(x, list):
        return [_round(v, digits) for v in x]
    if isinstance(x, float) and math.isfinite(x) and x != 0:
        return float(f"{x:.{digits}g}")
    return x


def snapshot_section(diagnostics: Mapping[str, Any]) -> dict[str, Any]:
    """A `diagnose` dict as a snapshot carries it: without `cached`, its inspector trimmed."""
    out = {k: v for k, v in diagnostics.items() if k != "cached"}
    ins = out.get("inspector")
    if isinstance(ins, dict):
        keep = {k: v[:INSPECTOR_PASSAGES] for k, v in ins.items() if isinstance(v, list)}
        keep["token_norms"] = _round(keep.get("token_norms", []), NORM_DIGITS)
        out["inspector"] = keep
    return out


def with_extras(
    data: dict[str, Any],
    *,
    diagnostics: Mapping[str, Any] | None = None,
    bos_on_off: Mapping[str, Any] | None = None,
    metric: str = "cka",
    K: int | None = None,
) -> dict[str, Any]:
    """`data` (a `Run.to_snapshot` dict) with the sections given, changed in place."""
    if diagnostics is not None:
        data["diagnostics"] = snapshot_section(diagnostics)
    if bos_on_off is not None:
        data["bos_on_off"] = {**bos_on_off, "metric": metric, "K": K}
    return data


# ---------------------------------------------------------------------------------------------
# Checks: a section from a file is used only when every field the pages read is sound
# ---------------------------------------------------------------------------------------------


def numbers_or_none(x: Any, length: int | None = None, *, none_ok: bool = True) -> bool:
    """`x` is a list (of `length`) of finite numbers, or None where `none_ok`."""
    ok = isinstance(x, list) and (length is None or len(x) == length)
    return ok and all(finite_number(v) or (none_ok and v is None) for v in x)


def _counts(x: Any, length: int) -> bool:
    ok = isinstance(x, list) and len(x) == length
    return ok and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in x)


def _check_inspector(ins: Any, layers: int) -> str | None:
    if not isinstance(ins, dict):
        return "its inspector is not an object"
    tokens = ins.get("tokens")
    ok = isinstance(tokens, list) and all(
        isinstance(t, list) and all(isinstance(s, str) and len(s) <= _MAX_TOKEN_CHARS for s in t)
        for t in tokens
    )
    if not ok:
        return "its inspector's tokens are not lists of short strings"
    n = len(tokens)
    norms = ins.get("token_norms")
    if not isinstance(norms, list) or len(norms) != n:
        return "its inspector's token norms do not match its passages"
    for t, rows in zip(tokens, norms, strict=True):
        if not isinstance(rows, list) or len(rows) != layers + 1:
            return "its inspector's token norms are not one row per state"
        if not all(numbers_or_none(r, len(t)) for r in rows):
            return "its inspector's token norms are not numbers per token"
    for name in ("max_position", "max_dim", "max_value"):
        rows = ins.get(name)
        if not isinstance(rows, list) or len(rows) != n:
            return f"its inspector's {name} does not match its passages"
        check = numbers_or_none if name == "max_value" else _counts
        if not all(check(r, layers + 1) for r in rows):
            return f"its inspector's {name} is not one value per state"
    return None


def check_diagnostics(d: Any, *, layers: int, key: str, diag_format: int) -> str | None:
    """Why a snapshot's diagnostics section cannot be used (None: it can): the pages read
    n_passages, massive_* (L+1 per state), sink_fraction (L), sink_scores (L x H), the verdict's
    optional numbers and, when present, the inspector."""
    if not isinstance(d, dict):
        return "it is not an object"
    if d.get("format") != diag_format:
        return f"it has diagnostics format {d.get('format')!r}, not {diag_format}"
    if key and d.get("key") != key:
        return "it was computed for another run"
    n = d.get("n_passages")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        return "its passage count is not a positive count"
    if not numbers_or_none(d.get("massive_ratio"), layers + 1):
        return f"its massive-activation ratio is not {layers + 1} numbers"
    for name in ("massive_position", "massive_dim"):
        if not _counts(d.get(name), layers + 1):
            return f"its {name} is not {layers + 1} counts"
    for name in ("massive_max", "massive_median"):
        if name in d and not numbers_or_none(d[name], layers + 1):
            return f"its {name} is not {layers + 1} numbers"
    if not numbers_or_none(d.get("sink_fraction"), layers):
        return f"its sink shares are not {layers} numbers"
    scores = d.get("sink_scores")
    if not isinstance(scores, list) or len(scores) != layers:
        return f"its sink scores are not {layers} rows"
    if not scores or not all(numbers_or_none(r, len(scores[0])) for r in scores):
        return "its sink scores are not rows of numbers of one length"
    for name in ("sink_baseline", "sink_passages"):
        if d.get(name) is not None and not finite_number(d[name]):
            return f"its {name} is not a number"
    if "inspector" in d:
        return _check_inspector(d["inspector"], layers)
    return None


def check_bos_on_off(d: Any) -> str | None:
    """Why a snapshot's BOS on/off section cannot be used (None: it can)."""
    if not isinstance(d, dict):
        return "it is not an object"
    if d.get("metric") not in METRICS:
        return "it names no metric"
    K = d.get("K")
    if K is not None and (not isinstance(K, int) or isinstance(K, bool) or K < 1):
        return "its maximum lag is not a count"
    for bos in ("add", "none"):
        r = d.get(bos)
        if not isinstance(r, dict):
            return f"its bos={bos} run is missing"
        gaps = r.get("gaps")
        if not isinstance(gaps, dict) or "default" not in gaps or not set(gaps) <= set(POOLINGS):
            return f"its bos={bos} gaps are not per pooling control"
        if not all(finite_number(v) for v in gaps.values()):
            return f"its bos={bos} gaps are not numbers"
        pos0 = r.get("pos0")
        if not (isinstance(pos0, list) and len(pos0) == 2 and numbers_or_none(pos0, none_ok=False)):
            return f"its bos={bos} position-0 ratio is not [ratio, layer]"
    if d.get("difference") is not None:
        try:
            _on_off_difference(d["difference"], "")
        except ValueError as err:
            return f"its paired gap move is not well-formed: {err}"
    return None


def _on_off_difference(d: Any, scale: str) -> PairedDifference:
    """The on/off section's stored gap move bos=none - bos=add (ValueError when malformed)."""
    return PairedDifference.from_dict(d, a="bos=none", b="bos=add", scale=scale)


# ---------------------------------------------------------------------------------------------
# Reading: the checked sections of a view (None when absent or unusable)
# ---------------------------------------------------------------------------------------------


def extras_source(view: Any) -> str:
    """Where a snapshot's extras come from, in words: shipped with the app (computed by the
    CLI) or in a shared file (as its sender computed them)."""
    command = getattr(view, "command", "")
    how = f" (`{command}`)" if command else ""
    if getattr(view, "source", "") == "shared":
        return f"read from the shared file, as its sender computed them{how}"
    return f"shipped with the app, computed by the CLI{how}"


def snapshot_diagnostics(view: Any) -> dict[str, Any] | None:
    """The checked diagnostics a snapshot view carries, with `shipped: True`; None for a live
    run, a snapshot without them, or a section that fails `check_diagnostics`."""
    from deffcore.lenses.diagnostics_store import DIAG_FORMAT

    section = (getattr(view, "data", None) or {}).get("diagnostics")
    if section is None:
        return None
    why = check_diagnostics(
        section, layers=view.layers, key=getattr(view, "key", ""), diag_format=DIAG_FORMAT
    )
    return None if why else {**section, "cached": True, "shipped": True}


def snapshot_bos_on_off(view: Any, metric: str, K: int | None) -> dict[str, Any] | None:
    """The checked BOS on/off check a snapshot view carries for this metric and K (None: K =
    L-1), its conclusion recomputed from its numbers (never the file's text); else None."""
    from deffcore.lenses.bos_on_off import entries_conclusion

    section = (getattr(view, "data", None) or {}).get("bos_on_off")
    if section is None or check_bos_on_off(section):
        return None
    full = view.layers - 1
    if section["metric"] != metric or (section["K"] or full) != (K or full):
        return None
    add, none, diff = section["add"], section["none"], section.get("difference")
    diff = None if diff is None else _on_off_difference(diff, "gap points")
    c = entries_conclusion(add, none, diff)
    keep = ("gaps", "pos0")
    return {
        "add": {k: add[k] for k in keep},
        "none": {k: none[k] for k in keep},
        "conclusion": c.sentence,
        "kind": c.kind,
        "shipped": True,
    }


def snapshot_bootstrap(view: Any, pooling: str, metric: str) -> dict[str, Any] | None:
    """The passage bootstrap a snapshot carries (`measure --bootstrap B`: the default pooling,
    the snapshot's metric) when it is checked and of this very headline
    (`view.stored_bootstrap`, `deffcore.views.run_spread`) and holds its samples; else None."""
    stored = getattr(view, "stored_bootstrap", None)
    boot = stored(pooling, metric) if callable(stored) else None
    if boot is None or not boot.get("samples"):
        return None
    return {**boot, "shipped": True}


def run_diagnostics(view: Any) -> dict[str, Any] | None:
    """The diagnostics of a run: stored beside it in the cache (or computed in this process),
    else those its snapshot carries; None when there are none yet."""
    from deffcore.lenses.diagnostics_store import read_diagnostics, spec_from_fields

    m = getattr(view, "measurement", None)
    spec = m.spec if m is not None else spec_from_fields(view.spec)
    found = read_diagnostics(spec)
    return found if found is not None else snapshot_diagnostics(view)


def report_parts(
    view: Any, metric: str = "cka", K: int | None = None, pooling: str = "default"
) -> dict[str, Any]:
    """What `run_report.report_html` shows that the views stage cannot compute or check: the
    BOS answer (`answer`, a dict: `bos_answer.run_answer`, paired wherever the run's states are
    at hand, as on every surface), the diagnostics, the BOS on/off check and the snapshot's
    bootstrap (None when absent)."""
    from deffcore.statistics.bos_answer import run_answer

    return {
        "answer": run_answer(view, metric, K).to_dict(),  # first: a live run pairs it here
        "diagnostics": run_diagnostics(view),
        "bos_on_off": snapshot_bos_on_off(view, metric, K),
        "bootstrap": snapshot_bootstrap(view, pooling, metric),
    }
