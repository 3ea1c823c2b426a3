"""Benchmark: why the app's background work was slow: Streamlit's post-run GC.

    nice -n 10 .venv/bin/python benchmarks/bench_app_gc.py [--model smollm2-135m]
        [--n 4096] [--polls-per-s 1] [--save out.json]

Streamlit runs `gc.collect(2)` after every script run (`runner.postScriptGC`, default true),
and a page that follows background work reruns a fragment every second (the BOS page's
diagnostics bar, the run panel). A full collection walks every live object while holding the
GIL: seconds while a GGUF model is being read (hundreds of thousands of small objects), so
the jobs worker thread, which does the real work in the same process, barely runs.

Each case runs in a fresh subprocess (its own heap) on a fresh cache folder: the BOS page's
work on the shipped default run (`diagnostics.diagnose` of smollm2-135m, BBC windows: model
load, window cut, one eager pass over 64 passages) in a worker thread, while the main thread
either sleeps (`nogc`: `postScriptGC = false`, as .streamlit/config.toml now sets) or calls
`gc.collect(2)` `--polls-per-s` times a second (`gc`: Streamlit's default with one polling
page open). Prints each case's wall time, the collections' total pause and the ratio.

Absolute times depend on the machine and its load: the output records the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def one_case(mode: str, model: str, n: int, polls_per_s: float) -> dict:
    """The worker's diagnostic pass with (`gc`) or without (`nogc`) the polling collections."""
    import gc
    import threading

    sys.path.insert(0, str(REPO))
    from deffcore.lenses.diagnostics_store import diagnose, spec_from_fields

    fields = {"model": model, "dataset": "bbc-news", "n": n, "max_tokens": 128, "seed": 0}
    spec = spec_from_fields({**fields, "passages": "windows"})
    done, out = threading.Event(), {}

    def work() -> None:
        start = time.perf_counter()
        try:
            out["passages"] = diagnose(spec)["n_passages"]
        finally:
            out["seconds"] = time.perf_counter() - start
            done.set()

    worker = threading.Thread(target=work)
    worker.start()
    pauses: list[float] = []
    while not done.wait(1.0 / polls_per_s):
        if mode == "gc":  # what Streamlit does after each fragment rerun
            start = time.perf_counter()
            gc.collect(2)
            pauses.append(time.perf_counter() - start)
    worker.join()
    return {
        "mode": mode,
        "seconds": out["seconds"],
        "passages": out.get("passages"),
        "collections": len(pauses),
        "pause_s": sum(pauses),
        "max_pause_s": max(pauses, default=0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--polls-per-s", type=float, default=1.0)
    parser.add_argument("--case", choices=("gc", "nogc"), help=argparse.SUPPRESS)
    parser.add_argument("--save", type=Path, default=None)
    args = parser.parse_args()
    if args.case:  # the child process: one case, one JSON line
        print(json.dumps(one_case(args.case, args.model, args.n, args.polls_per_s)))
        return
    rows = []
    for mode in ("nogc", "gc"):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "DEFF_CACHE_DIR": cache, "HF_HUB_OFFLINE": "1"}
            cmd = [sys.executable, __file__, "--case", mode, "--model", args.model,
                   "--n", str(args.n), "--polls-per-s", str(args.polls_per_s)]  # fmt: skip
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        r = rows[-1]
        print(
            f"{mode:<5} {r['seconds']:7.1f} s  ({r['collections']} collections, "
            f"{r['pause_s']:.1f} s paused, longest {r['max_pause_s']:.2f} s)",
            flush=True,
        )
    ratio = rows[1]["seconds"] / rows[0]["seconds"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(f"gc / nogc = {ratio:.2f}x   (load average {load:.1f}, {os.cpu_count()} CPUs)")
    if args.save:
        args.save.write_text(json.dumps({"rows": rows, "ratio": ratio, "load": load}, indent=1))


if __name__ == "__main__":
    main()
