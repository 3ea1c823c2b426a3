"""Model loading: the app's load against the CLI's, one read of a GGUF, the second job's start,
and the load estimate after one load. Results go to BENCHMARKS.md with the machine.

    .venv/bin/python benchmarks/bench_load.py --model smollm2-135m --rounds 2
    .venv/bin/python benchmarks/bench_load.py --skip-app        # without the browser part

Measured, each in a fresh process so nothing is warm, alternating so that the machine's load
affects every side alike:

1. `cli`    `load_model(spec)` in the main thread of a fresh process (what `deffcore measure`
            does), timed around the call alone (imports before it).
2. `plain`  transformers' own GGUF load (`from_pretrained(gguf_file=...)` for the model and
            the tokenizer) in a fresh process: the load before `gguf_reading.reads_once`.
3. `worker` the same load as a background job does it: `jobs` worker thread, while the main
            thread runs a Python loop the way Streamlit's script threads do (a page rerun
            every 50 ms), timed by the job's own "loading model" stage.
4. `app`    the real app: `streamlit run app.py` on a fresh cache, driven by Chromium
            (Playwright): N and max tokens set low, Run pressed; the app's "loading model"
            stage as `stage_times.json` recorded it, and its load parts.
5. `second` in one process, a run then the BOS on/off check of it as background jobs: seconds
            from the second job's start to its first extraction batch.
6. `estimate` the load estimate a fresh process shows (`stage_times`, recorded by the first
            app or worker load) against the next load's actual time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable

_CLI = """
import time, json, sys
sys.path.insert(0, {repo!r})
from deffcore.inputs.model import load_model
import deffcore.runs.measure  # what the CLI has imported before it loads
start = time.perf_counter()
load_model({spec!r}, device="cpu")
print(json.dumps({{"seconds": time.perf_counter() - start}}))
"""

_PLAIN = """
import time, json, sys
sys.path.insert(0, {repo!r})
import torch, transformers
from deffcore.inputs.model import PACKAGED_MODELS
from deffcore.inputs.model import packaged_gguf
import deffcore.runs.measure
spec = {spec!r}
path = packaged_gguf(spec) if spec in PACKAGED_MODELS else __import__("pathlib").Path(spec)
start = time.perf_counter()
transformers.AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                  dtype=torch.float32)
transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
print(json.dumps({{"seconds": time.perf_counter() - start}}))
"""

_WORKER = """
import json, sys, threading, time
sys.path.insert(0, {repo!r})
from deffcore.runs import stage_times
from deffcore.work import jobs
from deffcore.inputs.run_spec import RunSpec
spec = RunSpec(model={spec!r}, revision=None, dataset="bbc-news", n=8, max_tokens=16, seed=0,
               dtype="float32")
done = threading.Event()
def rerun_loop():  # a Streamlit-like script thread: Python work, then a short sleep
    while not done.is_set():
        text = json.dumps([{{"k": i, "v": [i] * 20}} for i in range(2000)])
        json.loads(text)
        jobs.active_jobs()
        time.sleep(0.05)
busy = threading.Thread(target=rerun_loop, daemon=True)
busy.start()
st = jobs.wait(jobs.start(spec), timeout=3600)
done.set()
from deffcore.inputs import model as loaded_models
assert st.state == "done" and loaded_models.MODELS.loads == 1, (st.state, st.error)  # it loaded
# the job recorded its own load: what this machine just took
print(json.dumps({{"seconds": stage_times.estimate("loading model", {spec!r}), "state": st.state}}))
"""

_SECOND = """
import json, sys, time
sys.path.insert(0, {repo!r})
from dataclasses import replace
from deffcore.inputs import model as loaded_models
from deffcore.work import jobs
from deffcore.lenses.bos_on_off import bos_on_off
from deffcore.inputs.run_spec import RunSpec
spec = RunSpec(model={spec!r}, revision=None, dataset="bbc-news", n=32, max_tokens=32, seed=0,
               dtype="float32", passages="windows")
first = jobs.wait(jobs.start(spec), timeout=3600)
assert first.state == "done", first.error
seen = {{}}
def work(progress, should_stop):
    def tap(done, total, stage):
        if stage == "extract" and "first" not in seen:
            seen["first"] = time.perf_counter()
        progress(done, total, stage)
    return bos_on_off(replace(spec, seed=1), progress=tap, should_stop=should_stop)
start = time.perf_counter()
job = jobs.start_task("onoff", work)
st = jobs.wait(job, timeout=3600)
print(json.dumps({{"seconds": seen["first"] - start, "loads": loaded_models.MODELS.loads,
                   "state": st.state}}))
"""


def _run(code: str, cache: Path, timeout: float = 3600) -> dict:
    env = {**os.environ, "DEFF_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run(
        [PY, "-c", code], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def app_load(spec: str, cache: Path) -> dict:
    """The app's load: streamlit + Chromium, one small run, its recorded stage times."""
    sys.path.insert(0, str(REPO / "tests" / "e2e"))
    from browser_helpers import chromium_browser, streamlit_server
    from test_browser import WINDOW, wait_idle

    env = {**os.environ, "DEFF_CACHE_DIR": str(cache), "HF_HUB_OFFLINE": "1"}
    with streamlit_server(env, cache / "streamlit.log") as url, chromium_browser() as browser:
        page = browser.new_context(viewport=WINDOW).new_page()
        page.set_default_timeout(600_000)
        page.goto(url)
        wait_idle(page)
        sidebar = page.locator('[data-testid="stSidebar"]')
        if spec != "smollm2-135m":
            sidebar.get_by_label("Model").fill(spec)
            sidebar.get_by_label("Model").press("Enter")
            wait_idle(page)
        for label, value in (("N passages", "8"), ("Max tokens", "16")):
            sidebar.get_by_label(label).fill(value)
            sidebar.get_by_label(label).press("Enter")
            wait_idle(page)
        sidebar.get_by_role("button", name="Run", exact=True).click()
        sidebar.get_by_text("Current run (measured)").wait_for(timeout=3_600_000)
    times = json.loads((cache / "stage_times.json").read_text())
    return {k.split("|")[0]: v for k, v in times.items() if k.endswith(f"|{spec}")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--skip-app", action="store_true")
    args = parser.parse_args()
    rows: dict[str, list] = {}
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            fmt = {"repo": str(REPO), "spec": args.model}
            rows.setdefault("cli", []).append(_run(_CLI.format(**fmt), tmp / "c")["seconds"])
            rows.setdefault("plain", []).append(_run(_PLAIN.format(**fmt), tmp / "p")["seconds"])
            worker_cache = tmp / "w"
            rows.setdefault("worker", []).append(
                _run(_WORKER.format(**fmt), worker_cache)["seconds"]
            )
            # the estimate a fresh process shows for its next load, against that load: a new
            # cache folder holding only this machine's stage times (the same cache would serve
            # the run without loading anything, and record nothing new)
            est = json.loads((worker_cache / "stage_times.json").read_text())
            shown = est[f"loading model|{args.model}"]
            next_cache = tmp / "w2"
            next_cache.mkdir()
            shutil.copy(worker_cache / "stage_times.json", next_cache / "stage_times.json")
            again = _run(_WORKER.format(**fmt), next_cache)["seconds"]
            rows.setdefault("estimate", []).append({"shown": shown, "actual": again})
            if not args.skip_app:
                rows.setdefault("app", []).append(app_load(args.model, tmp / "a"))
            rows.setdefault("second", []).append(_run(_SECOND.format(**fmt), tmp / "s"))
            load = os.getloadavg()[0]
            rows.setdefault("load_average", []).append(round(load, 1))
            print(f"round {r + 1}: {json.dumps({k: v[-1] for k, v in rows.items()})}", flush=True)
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
