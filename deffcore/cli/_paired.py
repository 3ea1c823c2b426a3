"""The commands' paired bootstrap options (`measure`, `bos`; SPEC 15).

    python -m deffcore measure ... --bootstrap 100 --json     # position0_answer, paired
    python -m deffcore bos ... --json                          # the same answer

Without `--bootstrap` the BOS answer is paired all the same: from the bootstrap the run holds,
else one of `ANSWER_B` replicates drawn now and kept with the run (the BOS page's). `--bootstrap
B` draws one for the run (`Measurement.answer_bootstrap`) over the poolings of
`--bootstrap-poolings` and the metrics of `--bootstrap-metrics` (with unbiased CKA beside
linear CKA), all on the same B passage multisets; the default pooling's `bootstrap`, the trust
interval and `position0_answer` come from those replicates.
"""

from __future__ import annotations

import argparse
from typing import Any

from deffcore.core.constants import METRICS, POOLINGS
from deffcore.core.errors import DeffError
from deffcore.statistics.bos_answer import ANSWER_POOLINGS, answer_bootstrap_of


def add_paired_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap-poolings",
        default=",".join(ANSWER_POOLINGS),
        metavar="A,B",
        help="the poolings one --bootstrap pairs (same passage multisets for all): pooling "
        "controls or 'all' (default: default,no_pos0, what the BOS answer compares)",
    )
    p.add_argument(
        "--bootstrap-metrics",
        default=None,
        metavar="A,B",
        help="more metrics the --bootstrap replicates are evaluated under (always --metric, "
        "and unbiased CKA beside linear CKA: its replicates answer the BOS question); linear "
        "and unbiased CKA together cost one pass per pooling",
    )


def _names(text: str | None, allowed: tuple[str, ...], flag: str) -> tuple[str, ...] | None:
    if text is None:
        return None
    names = [x.strip() for x in text.split(",") if x.strip()]
    names = list(allowed) if names == ["all"] else names
    bad = [x for x in names if x not in allowed]
    if bad or not names:
        raise DeffError(
            f"{flag} takes {', '.join(allowed)} or 'all'; got {', '.join(bad) or 'nothing'}."
        )
    return tuple(dict.fromkeys(names))


def check_paired_args(args: argparse.Namespace) -> None:
    """The paired options' checks (cheap, before anything loads)."""
    poolings = _names(args.bootstrap_poolings, POOLINGS, "--bootstrap-poolings")
    if "default" not in (poolings or ()):
        raise DeffError("--bootstrap-poolings must include default (every pair compares with it).")
    _names(args.bootstrap_metrics, METRICS, "--bootstrap-metrics")


def paired_of(m: Any, args: argparse.Namespace) -> Any:
    """The run's paired bootstrap under the options; the run's metric and its BOS answer's
    stand-in are always among its metrics (SPEC 15). Without --bootstrap, the one the run
    already holds (drawn before and kept with its cache entry, or its live estimates'), else
    the page's: `ANSWER_B` replicates (`bos_answer.answer_bootstrap_of`), kept with the run."""
    if getattr(args, "bootstrap", None) is None:
        return answer_bootstrap_of(m, args.metric)
    poolings = _names(args.bootstrap_poolings, POOLINGS, "--bootstrap-poolings")
    also = _names(args.bootstrap_metrics, METRICS, "--bootstrap-metrics") or ()
    return m.answer_bootstrap(poolings, args.metric, also=also, B=args.bootstrap, seed=args.seed)
