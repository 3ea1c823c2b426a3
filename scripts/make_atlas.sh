#!/usr/bin/env bash
# Give the shipped precomputed runs their depth-use atlas and skip effect (issue 31, SPEC 16),
# then write their snapshots again (deffcore/data/default_run.json, deffcore/data/gallery/*):
#
#   bash scripts/make_atlas.sh            # every shipped run
#
# Step 1 (`deffcore atlas --skip-effect`) keeps the atlas and the skip effect (the run's first
# 64 passages) beside each run's cache entry: a run already in the cache gets one extra pass for
# the atlas, a run not yet there takes it during its extraction. Step 2 writes the snapshots with
# exactly the commands that made them (scripts/make_gallery.sh for the gallery); a snapshot
# carries whatever atlas and skip effect are kept beside its run.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
WINDOWS=(--dataset bbc-news --passages windows --max-tokens 128 --seed 0)

atlas() {  # atlas <model> <n>
  echo "== atlas of $1 (N=$2)"
  local t0=$SECONDS
  "$PY" -m deffcore atlas --model "$1" --n "$2" "${WINDOWS[@]}" --skip-effect >/dev/null
  echo "   $((SECONDS - t0)) s"
}

atlas smollm2-135m 4096
atlas gemma3-270m 512
atlas random:gemma3-270m:1 512
atlas random:smollm2-135m:1 4096

# the default with every extra it ships (scripts/make_default_run.sh), never a thinner command
PYTHON="$PY" bash scripts/make_default_run.sh
bash scripts/make_gallery.sh 512 gemma
bash scripts/make_gallery.sh 4096 smollm2-null
