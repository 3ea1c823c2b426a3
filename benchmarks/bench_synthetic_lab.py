"""Benchmark: the Synthetic lab's teaching mode answers a slider step in under 0.3 s.

    .venv/bin/python benchmarks/bench_synthetic_lab.py [--repeats 5] [--no-apptest]

For every preset of `deffcore.measures.teaching.PRESETS`, in one process:

  compute   the closed forms of the step (`teaching.story_step`) plus the three story figures
            (S heatmap, lag profiles, D_eff bars): what one slider step computes
  rerun     a whole AppTest rerun of pages/5_Synthetic_lab.py with that preset (the sidebar,
            both tabs, every widget and figure; Streamlit's own overhead included)
  sampled   the naive baseline the closed forms replace: drawing the construction at the
            preset's (N, d, L) (`teaching.sample_states`) and measuring it with linear CKA, as
            the old lab did on every slider step; skipped (reported "not run") beyond
            8 x SAMPLE_BUDGET numbers

and the free sweep at the old default (N = 256, d = 64, L = 24, s = 1): closed form vs the
sampled sweep of the old page. Medians of `--repeats` runs. Target: compute < 0.3 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from deffcore import figures  # noqa: E402
from deffcore.measures import teaching  # noqa: E402
from deffcore.measures.depth import lag_profile  # noqa: E402
from deffcore.measures.similarity import similarity_matrix  # noqa: E402


def median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compute(step: str, knobs: teaching.Knobs) -> None:
    res = teaching.story_step(step, knobs)
    figures.similarity_heatmap(res.S, metric="CKA", title="S")
    figures.story_lag_profiles({"closed": (res.rho, "closed")}, L=knobs.L, bias=res.bias)
    figures.story_depth_bars({"this step": res.deff}, F_L=res.F_L, L=knobs.L)


def sampled(step: str, knobs: teaching.Knobs) -> None:
    budget = teaching.SAMPLE_BUDGET
    teaching.SAMPLE_BUDGET = 8 * budget  # the baseline may go beyond the page's budget
    try:
        S = similarity_matrix(teaching.sample_states(step, knobs, knobs.n, knobs.d), "cka")
    finally:
        teaching.SAMPLE_BUDGET = budget
    lag_profile(S)


def apptest_rerun(repeats: int) -> dict[str, float]:
    from streamlit.testing.v1 import AppTest

    os.environ.setdefault("DEFF_CACHE_DIR", tempfile.mkdtemp(prefix="bench-syn-"))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=300).run()
    at.switch_page("pages/5_Synthetic_lab.py")
    at.run()
    out = {}
    for name in teaching.PRESETS:
        at.selectbox(key="syn_preset").set_value(name)

        def rerun() -> None:
            at.run()
            assert not at.exception and not at.error, [e.value for e in at.error]

        out[name] = median_time(rerun, repeats)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-apptest", action="store_true")
    args = parser.parse_args()

    reruns = {} if args.no_apptest else apptest_rerun(args.repeats)
    print("| preset | step | N, d, L | compute | page rerun | sampled + CKA | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for name, (step, knobs) in teaching.PRESETS.items():
        t_fast = median_time(lambda s=step, k=knobs: compute(s, k), args.repeats)
        cost = teaching.sample_cost(knobs, knobs.n, knobs.d)
        if cost <= 8 * teaching.SAMPLE_BUDGET:
            t_slow = median_time(lambda s=step, k=knobs: sampled(s, k), max(1, args.repeats // 2))
            slow, ratio = f"{t_slow:.3f} s", f"**{t_slow / t_fast:.0f}x**"
        else:
            slow, ratio = f"not run ({cost / 1e6:.0f} M numbers)", "–"
        rerun = f"{reruns[name]:.3f} s" if name in reruns else "–"
        print(
            f"| {name} | {step} | {knobs.n}, {knobs.d}, {knobs.L} | {t_fast * 1e3:.1f} ms | "
            f"{rerun} | {slow} | {ratio} |"
        )

    grid = [2, 3, 4, 5, 7, 9, 12, 15, 19, 24]  # the page's depth_grid(24)
    t_closed = median_time(lambda: teaching.sweep_closed_form(256, 64, grid, 1.0), args.repeats)

    def old_sweep() -> None:
        from deffcore.measures import synthetic

        for L in grid:
            for s in (
                synthetic.independent_states(256, 64, L),
                synthetic.orthogonal_states(256, 64, L),
                synthetic.orthogonal_updates(256, 64, L, scale=1.0),
            ):
                similarity_matrix(s.states, "cka")

    t_old = median_time(old_sweep, max(1, args.repeats // 2))
    print(
        f"\nfree sweep, N = 256, d = 64, L = 2..24 (10 depths): closed form "
        f"{t_closed * 1e3:.1f} ms, sampled (old page) {t_old:.3f} s, "
        f"speed-up {t_old / t_closed:.0f}x"
    )


if __name__ == "__main__":
    main()
