"""Benchmark: app responsiveness from a warm cache (AppTest reruns of the real scripts).

    .venv/bin/python benchmarks/bench_app.py [--model smollm2-135m --n 512 --max-tokens 128]
                                            [--repeats 5] [--cold]
    .venv/bin/python benchmarks/bench_app.py --browser [--repeats 3]

`--browser`: the first screen in Chromium against `streamlit run`, cold server and warm tab,
beside a one-metric, one-heatmap Streamlit page in the same run (`bench_first_screen.py`).

The run must be in the cache (`$DEFF_CACHE_DIR` or <repo>/cache); it is measured once first if
not. Then, in one AppTest session, the script times:

  open     pressing Run on a cached run (reads the pooled states; no forward pass)
  pooling  switching the pooling control, first visit (similarity computed) and repeats
           (memoised in the Measurement)
  metric   switching the metric, the same way
  K        moving the maximum-lag slider
  pages    switching to every page (first visit and repeats)

and, as the baseline that the cache avoids, the time `measure` takes to recompute the run from
the model (`--cold`, in a temporary cache; minutes on a CPU) or else the `elapsed_s` stored
with the cache entry when it was computed. Target: every warm rerun under 0.5 s.
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

from streamlit.testing.v1 import AppTest  # noqa: E402

from deffcore.core.constants import METRICS, POOLINGS  # noqa: E402

PAGES = sorted(
    (p for p in (REPO / "pages").glob("*.py") if p.name[0].isdigit()),
    key=lambda p: int(p.name.split("_", 1)[0]),
)[:7]  # the core pages 1-7 (lab pages compute on demand behind buttons)


def timed(at: AppTest) -> float:
    start = time.perf_counter()
    at.run(timeout=600)
    elapsed = time.perf_counter() - start
    if at.exception:
        raise RuntimeError(at.exception[0].value)
    return elapsed


def summary(name: str, times: list[float]) -> str:
    if not times:
        return f"{name:<28} -"
    return (
        f"{name:<28} median {1e3 * statistics.median(times):7.1f} ms   "
        f"max {1e3 * max(times):7.1f} ms   (n={len(times)})"
    )


def main() -> None:
    if "--browser" in sys.argv[1:]:  # the first screen in a real browser (its own module)
        from benchmarks.bench_first_screen import main as browser_main

        browser_main([a for a in sys.argv[1:] if a != "--browser"])
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--dataset", default="bbc-news")
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cold", action="store_true", help="also time a run from an empty cache")
    p.add_argument("--browser", action="store_true", help="the first screen in Chromium")
    args = p.parse_args()
    from deffcore.runs.measure import measure

    run = {"model": args.model, "dataset": args.dataset, "n": args.n, "max_tokens": args.max_tokens}
    start = time.perf_counter()
    m = measure(**run)
    warm_measure = time.perf_counter() - start
    baseline = float(m.meta.get("elapsed_s") or 0.0)
    if args.cold:
        with tempfile.TemporaryDirectory() as tmp:
            old = os.environ.get("DEFF_CACHE_DIR")
            os.environ["DEFF_CACHE_DIR"] = tmp
            start = time.perf_counter()
            measure(**run)
            baseline = time.perf_counter() - start
            if old is None:
                del os.environ["DEFF_CACHE_DIR"]
            else:
                os.environ["DEFF_CACHE_DIR"] = old
    print(f"run: {run}  L={m.layers} N={m.n} d={m.d_model}")
    print(f"measure() from the warm cache: {warm_measure:.2f} s (states read, no forward pass)")
    print(f"recompute from the model (baseline): {baseline:.1f} s")

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=600)
    start = time.perf_counter()
    at.run()
    first_render = time.perf_counter() - start
    if args.model in at.selectbox(key="model_packaged").options:
        at.selectbox(key="model_packaged").set_value(args.model)
    else:
        at.radio(key="model_source").set_value("Hugging Face id").run()
        at.text_input(key="model_hf").set_value(args.model)
    at.number_input(key="n").set_value(args.n)
    at.number_input(key="max_tokens").set_value(args.max_tokens)
    at.run()
    at.button(key="run").click()
    open_time = timed(at)

    results: dict[str, list[float]] = {}
    first_visit: dict[str, list[float]] = {}
    for rep in range(args.repeats):
        bucket = first_visit if rep == 0 else results
        for pooling in (*POOLINGS[1:], POOLINGS[0]):
            at.radio(key="pooling").set_value(pooling)
            bucket.setdefault("pooling switch", []).append(timed(at))
        for metric in (*METRICS[1:], METRICS[0]):
            at.selectbox(key="metric").set_value(metric)
            bucket.setdefault("metric switch", []).append(timed(at))
        slider = at.slider(key=f"K_L{m.layers}")
        for K in (5, m.layers - 1):
            slider.set_value(min(K, m.layers - 1))
            bucket.setdefault("K slider", []).append(timed(at))
        for page in PAGES:
            at.switch_page(str(page.relative_to(REPO)))
            bucket.setdefault("page switch", []).append(timed(at))
            bucket.setdefault(f"  {page.stem}", []).append(results_last(bucket, "page switch"))
        at.switch_page("app.py")
        bucket.setdefault("page switch", []).append(timed(at))

    print(f"\nfirst render (precomputed default): {first_render:.2f} s")
    print(f"Run on a cached run (open):          {open_time:.2f} s")
    print("\nfirst visit (similarity computed once per pooling/metric):")
    for name, times in first_visit.items():
        print("  " + summary(name, times))
    print(f"\nwarm, {args.repeats - 1} repeats:")
    for name, times in results.items():
        print("  " + summary(name, times))
    warm = [t for name, ts in results.items() if not name.startswith("  ") for t in ts]
    if warm and baseline:
        med = statistics.median(warm)
        print(
            f"\nslowest warm rerun {1e3 * max(warm):.0f} ms; median {1e3 * med:.0f} ms; "
            f"recompute / median warm rerun = {baseline / med:.0f}x"
        )


def results_last(bucket: dict[str, list[float]], name: str) -> float:
    return bucket[name][-1]


if __name__ == "__main__":
    main()
