"""The packaged models' first run on this machine: the prior the plan line and the progress
box price a run by before this machine has run anything (`deffcore.runs.priors`, SPEC 14, ETA).

    .venv/bin/python benchmarks/bench_run_prior.py --write           # measure, write the JSON
    .venv/bin/python benchmarks/bench_run_prior.py --models smollm2-135m   # the ETA, checked

Each model runs in a fresh process (nothing loaded, nothing imported beyond what the app has
imported before Run) on a fresh cache folder, as the app's background job does it
(`deffcore.work.jobs`), with the app's default settings (bbc-news, N = 512 documents cut at
128 tokens, seed 0). The job's stages are polled every 50 ms; the job's own clocks give the parts.
`--write` puts the parts under this machine's class (`priors.machine_class`) in
deffcore/data/run_priors.json, after each model. Every run prints the ETA the plan showed
before Run (from the priors already in the file), the job's ETA at its start and at its first
batch, against the run's actual time, with the load average before and after.
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

REPO = Path(__file__).resolve().parent.parent
PY = sys.executable
MODELS = ("smollm2-135m", "gemma3-270m")
SETTINGS = {
    "revision": None,
    "dataset": "bbc-news",
    "n": 512,
    "max_tokens": 128,
    "seed": 0,
    "dtype": "float32",
    "passages": "documents",
}

_CHILD = """
import json, sys, time
sys.path.insert(0, {repo!r})
import torch, transformers  # the app's server has these imported before Run
from deffcore.inputs.run_spec import RunSpec
from deffcore.runs import planner, priors
from deffcore.work import jobs, job_state

spec = RunSpec(model={model!r}, **{settings!r})
plan = planner.plan_run(spec, "cpu", calibrate="cached")
t0 = time.monotonic()
job_id = jobs.start(spec, device="cpu")
stages, etas, first_eta = [], [], None
while True:
    st = jobs.status(job_id)
    now = time.monotonic() - t0
    if not stages or stages[-1][0] != st.stage:
        stages.append((st.stage, now))
    if st.eta_s is not None and (not etas or st.done > etas[-1][2] or len(etas) < 2):
        etas.append((now, st.stage, st.done, st.eta_s))  # the first ETA and one per batch
    if st.finished:
        break
    time.sleep(0.05)
job = job_state.JOBS[job_id]
assert st.state == "done", st.error
start = job.started
out = {{
    "model": {model!r},
    "machine": priors.machine_class("cpu"),
    "plan_s": plan.seconds, "plan_source": plan.time_source,
    "total_s": job.ended - start,
    "stages": [(name, round(t, 2)) for name, t in stages],
    "extract_from": job.extract_from - start, "first_batch": job.first[0] - start,
    "first_done": job.first[1], "last_batch": job.last[0] - start, "last_done": job.last[1],
    "tokens": spec.n * spec.max_tokens,
    "etas": etas,
}}
print("RESULT " + json.dumps(out))
"""


def one_run(model: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="jobs_prior_") as cache:
        env = {**os.environ, "DEFF_CACHE_DIR": cache}
        code = _CHILD.format(repo=str(REPO), model=model, settings=SETTINGS)
        done = subprocess.run([PY, "-c", code], env=env, capture_output=True, text=True,
                              check=False)  # fmt: skip
    line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    if not line:
        raise SystemExit(f"{model}: the run failed\n{done.stderr[-3000:]}")
    return json.loads(line[0][len("RESULT ") :])


def parts(run: dict) -> dict:
    """The prior's fields from one run's stage times (the job's own clocks)."""
    marks = dict(run["stages"])  # stage -> when it began (the first time)
    names = [name for name, _ in run["stages"]]

    def span(stage: str) -> float:
        if stage not in marks:
            return 0.0
        later = [t for name, t in run["stages"][names.index(stage) + 1 :]]
        return (later[0] if later else run["total_s"]) - marks[stage]

    load_end = marks.get("preparing", run["extract_from"])
    # passages per second after the first batch reported (tokenising and warm-up left out);
    # "preparing" is the tokenising before the first batch (SPEC 14, ETA: it ends with it)
    rate = (run["last_done"] - run["first_done"]) / (run["last_batch"] - run["first_batch"])
    prepare = run["first_batch"] - load_end - run["first_done"] / rate
    return {
        "dtype": "float32",
        "n": SETTINGS["n"],
        "max_tokens": SETTINGS["max_tokens"],
        "read_s": round(span("checking data"), 2),
        "assemble_s": round(span("assembling"), 2),
        "load_s": round(span("loading model"), 2),
        "prepare_s": round(max(prepare, 0.0), 2),
        "tokens_per_s": round(rate * SETTINGS["max_tokens"], 1),
        "numbers_s": round(run["total_s"] - run["last_batch"], 2),
        "total_s": round(run["total_s"], 2),
    }


def write(machine: str, rows: dict, load: tuple) -> None:
    """Put `rows` (model -> parts) under `machine` in deffcore/data/run_priors.json."""
    path = REPO / "deffcore" / "data" / "run_priors.json"
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    table.setdefault("format", 1)
    table["measured_by"] = "benchmarks/bench_run_prior.py --write"
    table["settings"] = SETTINGS
    entry = table.setdefault("machines", {}).setdefault(machine, {})
    entry.update(rows)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    entry["_measured"] = f"{when}, load average {load[0]:.2f}"
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true")
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    for model in args.models.split(","):
        load = os.getloadavg()
        run = one_run(model)
        row = parts(run)
        first = next((e for e in run["etas"] if e[2] > 0), None)
        start = run["etas"][0] if run["etas"] else None
        print(json.dumps({"model": model, "machine": run["machine"], "load_avg": load,
                          "plan_s": run["plan_s"], "plan_source": run["plan_source"],
                          "actual_s": run["total_s"], "stages": run["stages"],
                          "eta_at_start": start, "eta_at_first_batch": first,
                          "load_after": os.getloadavg(), "parts": row}),
              flush=True)  # fmt: skip
        if args.write:
            write(run["machine"], {model: row}, load)


if __name__ == "__main__":
    main()
