"""Calibration of the stopping rule (`deffcore.statistics.stopping`) on states whose truth is known.

    nice -n 10 .venv/bin/python benchmarks/bench_stopping.py [--size full|tiny]
        [--bootstrap 0] [--save runs.json] [--load runs.json]

Optional stopping: a growing run looks at its number at 64, 128, 256, ... passages and stops
the first time the rule is met, so it stops exactly when chance made the number look good.
Here every dataset is one growing run: states sampled once at N_max from a teaching
construction (`deffcore.measures.teaching.sample_states`, population S in closed form via
`teaching.population_similarity`), its prefixes measured at the run's marks
(`deffcore.extraction.cache.schedule`) with the product's own estimator
(`anytime.pooling_estimate`:
the shown estimator, unbiased CKA where linear CKA's bias is material, and `deffcore.trust`).

For each stopping rule (target, CONFIRM, MIN_STOP_N) the table compares:

- **fixed N, solid**: every (dataset, N) the rule's trust calls solid, judged at that N: how
  often within 2% of the truth (the promise), within 5%, the largest error;
- **stopped (solid)**: each dataset's number where the rule stopped it: the same shares;
- **fixed N, settled / stopped (verdict)**: the regime (below / at / above F_L, SPEC 11.5)
  of a band that lies in one regime, against the population regime.

The goal: a stopped number within its promise as often as a fixed-N one ("solid": within 2% in
>= 95% of cases). Grids: `full` (no bootstrap: N_max 4,096, d up to 128), `boot` (with
`--bootstrap B`: N_max 2,048, d up to 32, the bootstrap being the costly part), `tiny` (the
unit test's slice). `--load` re-judges saved runs.

**The paired answer** (`--answers`, SPEC 15: what `--until verdict` and "Stop when settled"
stop on). Each growing run is a `synthetic.position0_construction` (population gaps, Delta and
T in closed form), measured at its marks by the product's own path (`anytime.estimate` with
one paired bootstrap of default and no_pos0, B = `--bootstrap`, default 50): the BOS answer
at every mark. Rows: every definite answer at a fixed N, judged against the population
(`bos_calibration.claim_is_right`); and per stopping rule (CONFIRM, MIN_STOP_N, the same
verdict at the confirming marks), the answer where the run stopped: how often wrong, and at
what N. Goal: a stopped answer wrong no more often than a fixed-N one (<= 1%).
"""

from __future__ import annotations

import itertools
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # deffcore
sys.path.insert(0, str(HERE))  # calibration_kit

# the closed-form constructions and the table helpers of the trust rule's calibration
import calibration_kit as kit  # noqa: E402

from deffcore.core.constants import REGIME_TOLERANCE  # noqa: E402
from deffcore.extraction.cache import schedule  # noqa: E402
from deffcore.measures import teaching  # noqa: E402
from deffcore.statistics.anytime import gap_of, pooling_estimate  # noqa: E402

#: (L, d, N_max, seeds, batch) per grid; batch = passages per extraction batch (marks).
GRIDS: dict[str, dict[str, Any]] = {
    "full": {"L": (6, 12), "d": (8, 32, 128), "N_max": 4096, "seeds": 4, "batch": 32},
    "boot": {"L": (6, 12), "d": (8, 32), "N_max": 2048, "seeds": 3, "batch": 32},
    "tiny": {"L": (6,), "d": (8,), "N_max": 512, "seeds": 1, "batch": 32},
}
#: Stopping rules compared: (confirm, min_n).
RULES: tuple[tuple[int, int], ...] = ((1, 64), (1, 128), (2, 64), (2, 128), (2, 256), (3, 128))


def grid(size: str) -> list[dict[str, Any]]:
    g = GRIDS[size]
    return [
        {"construction": c, "L": L, "d": d, "seed": s, "N_max": g["N_max"], "batch": g["batch"]}
        for c, L, d, s in itertools.product(kit.CONSTRUCTIONS, g["L"], g["d"], range(g["seeds"]))
    ]


def run_case(case: dict[str, Any], metric: str, B: int | None) -> dict[str, Any]:
    """One growing run: the truth and the shown estimate at every mark."""
    step, knobs, truth = kit.construction(case)
    x = teaching.sample_states(step, knobs, case["N_max"], case["d"], seed=2000 + case["seed"])
    with_h0 = np.concatenate([np.zeros((1, *x.shape[1:]), dtype=x.dtype), x])  # h_0 unused
    marks = []
    for k in schedule(case["N_max"], case["batch"]):
        e = pooling_estimate(with_h0[:, :k], metric=metric, bootstrap=B, seed=case["seed"])
        marks.append(
            {
                "n": k,
                "value": e.deff_over_L,
                "shown": e.metric,
                "level": e.level,
                "fixed": e.regime_fixed,
                "gap_low": e.settle_gap_low,
                "gap_high": e.settle_gap_high,
            }
        )
    return {**case, "metric": metric, "truth": truth, "marks": marks}


def _regime(gap: float) -> str:
    if abs(gap) <= REGIME_TOLERANCE:
        return "at"
    return "below" if gap > 0 else "above"


def _band_regime(mark: dict[str, Any]) -> str:
    return _regime((mark["gap_low"] + mark["gap_high"]) / 2)


def _first_stop(marks: list[dict[str, Any]], ok: list[bool], confirm: int, min_n: int) -> int:
    """Index of the mark where the rule stops (the last mark when it never does)."""
    for i in range(len(marks) - 1):  # the last mark is the full run, not a stop
        if marks[i]["n"] >= min_n and i + 1 >= confirm and all(ok[i - confirm + 1 : i + 1]):
            return i
    return len(marks) - 1


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The table: fixed-N and stopped shares per rule (module docstring)."""
    rows: dict[str, dict[str, Any]] = {}

    def error(run: dict[str, Any], mark: dict[str, Any]) -> float:
        return abs(mark["value"] / run["truth"] - 1)

    def regime_right(run: dict[str, Any], mark: dict[str, Any]) -> bool:
        return _band_regime(mark) == _regime(gap_of(run["truth"], run["L"]))

    fixed_solid = [error(r, m) for r in runs for m in r["marks"] if m["level"] == "solid"]
    rows["fixed N, solid"] = _shares(fixed_solid)
    fixed_settled = [regime_right(r, m) for r in runs for m in r["marks"] if m["fixed"]]
    rows["fixed N, settled verdict"] = {
        "cases": len(fixed_settled),
        "right": kit.share(fixed_settled),
    }
    for confirm, min_n in RULES:
        errors, ns, right, vns = [], [], [], []
        for r in runs:
            marks = r["marks"]
            i = _first_stop(marks, [m["level"] == "solid" for m in marks], confirm, min_n)
            if marks[i]["level"] == "solid" and i < len(marks) - 1:
                errors.append(error(r, marks[i]))
                ns.append(marks[i]["n"])
            j = _first_stop(marks, [m["fixed"] for m in marks], confirm, min_n)
            if marks[j]["fixed"] and j < len(marks) - 1:
                right.append(regime_right(r, marks[j]))
                vns.append(marks[j]["n"])
        rows[f"stopped solid, confirm {confirm}, N >= {min_n}"] = {
            **_shares(errors),
            "median_n": float(np.median(ns)) if ns else None,
        }
        rows[f"stopped verdict, confirm {confirm}, N >= {min_n}"] = {
            "cases": len(right),
            "right": kit.share(right),
            "median_n": float(np.median(vns)) if vns else None,
        }
    return {"runs": len(runs), "rows": rows}


def _shares(errors: list[float]) -> dict[str, Any]:
    return {
        "cases": len(errors),
        "within_2pct": kit.share(e <= 0.02 for e in errors),
        "within_5pct": kit.share(e <= 0.05 for e in errors),
        "max_error": max(errors, default=None),
    }


def markdown(summary: dict[str, Any], title: str) -> str:
    lines = [
        f"**{title}** ({summary['runs']} growing runs)",
        "",
        "| numbers judged | cases | within 2% of truth | within 5% | largest error | regime "
        "right | median N at stop |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in summary["rows"].items():
        median = r.get("median_n")
        lines.append(
            f"| {name} | {r['cases']} | {kit.pct(r.get('within_2pct'))} | "
            f"{kit.pct(r.get('within_5pct'))} | {kit.pct(r.get('max_error'))} | "
            f"{kit.pct(r.get('right'))} | "
            f"{'–' if median is None else f'{median:,.0f}'} |"
        )
    return "\n".join(lines)


def run(size: str, B: int | None) -> dict[str, list[dict[str, Any]]]:
    cases = grid(size)
    out: dict[str, list[dict[str, Any]]] = {"cka": [], "unbiased_cka": []}
    start = time.perf_counter()
    for i, case in enumerate(cases):
        for metric in out:
            out[metric].append(run_case(case, metric, B))
        print(f"[{i + 1}/{len(cases)}] {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return out


# ---------------------------------------------------------------------------------------------
# the paired BOS answer (what `--until verdict` stops on)

#: (L, d, N_max, seeds, batch, position-0 sizes x L/4, onsets) per grid of the answer's runs.
ANSWER_GRIDS: dict[str, dict[str, Any]] = {
    "full": {
        "L": (8, 16),
        "d": (32,),
        "N_max": 1024,
        "seeds": 2,
        "batch": 32,
        "pos0": (0.5, 4.0, 32.0),
        "onset": ("first", "third"),
    },
    "tiny": {
        "L": (6,),
        "d": (8,),
        "N_max": 256,
        "seeds": 1,
        "batch": 32,
        "pos0": (4.0,),
        "onset": ("first",),
    },
}


def answer_grid(size: str) -> list[dict[str, Any]]:
    g = ANSWER_GRIDS[size]
    keys = itertools.product(g["L"], g["d"], g["pos0"], g["onset"], range(g["seeds"]))
    return [
        {
            "L": L,
            "d": d,
            "pos0": pos0,
            "onset": onset,
            "seed": s,
            "N_max": g["N_max"],
            "batch": g["batch"],
        }
        for L, d, pos0, onset, s in keys
    ]


def run_answer_case(case: dict[str, Any], B: int) -> dict[str, Any]:
    """One growing run of a position-0 construction: the answer at every mark."""
    from deffcore.core.constants import EXTRACTED_POOLINGS
    from deffcore.extraction.forward import PooledStates
    from deffcore.measures.depth import effective_depth, gap_percent
    from deffcore.measures.synthetic import position0_construction
    from deffcore.statistics.anytime import estimate

    L = case["L"]
    onset = 1 if case["onset"] == "first" else max(1, L // 3)
    c = position0_construction(
        case["N_max"], case["d"], L, pos0=case["pos0"] * L / 4, onset=onset,
        seed=3000 + case["seed"],
    )  # fmt: skip
    pops = [gap_percent(effective_depth(S), L) for S in (c.S_default, c.S_no_pos0)]
    h0 = np.zeros((1, *c.default.shape[1:]), dtype=np.float32)  # h_0 is never measured
    stacks = {"default": c.default, "no_pos0": c.no_pos0}
    stacks = {p: np.concatenate([h0, stacks.get(p, c.no_pos0)]) for p in EXTRACTED_POOLINGS}
    marks = []
    for k in schedule(case["N_max"], case["batch"]):
        pooled = PooledStates(
            pooled={p: x[:, :k] for p, x in stacks.items()},
            pos0_norm_ratio=np.ones(L + 1, np.float32), n_dropped_short=0, tokens=0,
        )  # fmt: skip
        e = estimate(pooled, poolings=("default", "no_pos0"), bootstrap=B, seed=case["seed"],
                     bootstrap_poolings=("default", "no_pos0"))  # fmt: skip
        marks.append({"n": k, "verdict": e.answer, "metric": e.position0["metric"]})
    return {**case, "pops": pops, "marks": marks}


def summarise_answers(runs: list[dict[str, Any]]) -> dict[str, Any]:
    from deffcore.lenses.bos_calibration import claim_is_right
    from deffcore.statistics.stopping import DEFINITE

    rows: dict[str, dict[str, Any]] = {}
    fixed = [
        claim_is_right(m["verdict"], *r["pops"])
        for r in runs
        for m in r["marks"]
        if m["verdict"] in DEFINITE
    ]
    rows["fixed N, definite answer"] = _wrong(fixed, sum(len(r["marks"]) for r in runs))
    for confirm, min_n in RULES:
        judged, ns = [], []
        for r in runs:
            marks = r["marks"]
            for i in range(len(marks) - 1):
                last = marks[max(0, i - confirm + 1) : i + 1]
                same = {m["verdict"] for m in last}
                if (marks[i]["n"] >= min_n and i + 1 >= confirm and len(same) == 1
                        and marks[i]["verdict"] in DEFINITE):  # fmt: skip
                    judged.append(claim_is_right(marks[i]["verdict"], *r["pops"]))
                    ns.append(marks[i]["n"])
                    break
        rows[f"stopped answer, confirm {confirm}, N >= {min_n}"] = {
            **_wrong(judged, len(runs)),
            "median_n": float(np.median(ns)) if ns else None,
        }
    return {"runs": len(runs), "rows": rows}


def _wrong(flags: list[bool | None], looks: int) -> dict[str, Any]:
    claims = [f for f in flags if f is not None]
    wrong = sum(1 for f in claims if f is False)
    return {"claims": len(claims), "looks": looks, "wrong": wrong,
            "wrong_share": wrong / len(claims) if claims else None}  # fmt: skip


def answers_markdown(summary: dict[str, Any], B: int) -> str:
    lines = [
        f"**The paired BOS answer** ({summary['runs']} growing runs, B = {B} paired replicates "
        "at every mark)",
        "",
        "| answers judged | definite | of | wrong | median N at stop |",
        "|---|---|---|---|---|",
    ]
    for name, r in summary["rows"].items():
        median = r.get("median_n")
        share = "–" if r["wrong_share"] is None else f"{100 * r['wrong_share']:.1f}%"
        lines.append(
            f"| {name} | {r['claims']} | {r['looks']} | {r['wrong']} ({share}) | "
            f"{'–' if median is None else f'{median:,.0f}'} |"
        )
    return "\n".join(lines)


def run_answers(size: str, B: int) -> list[dict[str, Any]]:
    out, cases, start = [], answer_grid(size), time.perf_counter()
    for i, case in enumerate(cases):
        out.append(run_answer_case(case, B))
        print(f"[{i + 1}/{len(cases)}] {time.perf_counter() - start:.0f} s", file=sys.stderr)
    return out


def main() -> None:
    p = kit.parser(__doc__, GRIDS, 0, "0: no interval")
    p.add_argument("--answers", action="store_true", help="the paired BOS answer's stopping")
    args = p.parse_args()
    start = time.perf_counter()
    if args.answers:
        B = args.bootstrap or 50
        runs = kit.measured_or_loaded(args, lambda size, _: run_answers(size, B))
        print(answers_markdown(summarise_answers(runs), B))
        print(f"({time.perf_counter() - start:.0f} s)")
        return
    results = kit.measured_or_loaded(args, run)
    for metric, runs in results.items():
        boot = f", bootstrap B = {args.bootstrap}" if args.bootstrap else ", no bootstrap"
        print(markdown(summarise(runs), f"run metric {metric}{boot}"), end="\n\n")
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
