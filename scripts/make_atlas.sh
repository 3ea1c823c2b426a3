#!/usr/bin/env bash
# Give the shipped precomputed runs their depth-use atlas and skip effect (issue 31, SPEC 16):
# deffcore/data/default_run.json and deffcore/data/gallery/*.json.
#
#   bash scripts/make_atlas.sh            # every shipped run
#
# scripts/add_atlas.py measures each file's own run as `measure` does (a cache hit, or one
# extraction that takes the atlas on the way), computes the skip effect on its first 64
# passages (the trained models), checks that the run is the file's (key and every similarity
# matrix), and writes the file's `atlas` field only; the rest stays as its command made it.
# Cost on a quiet 2-core CPU with an empty cache: one extraction per run (SmolLM2 at 4,096
# windows: about 15 minutes) plus L + 1 passes of 64 passages for the skip effect.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
# the trained models with their skip effect; the random-weight nulls with the atlas alone
"$PY" scripts/add_atlas.py deffcore/data/default_run.json deffcore/data/gallery/gemma3-270m_*.json
"$PY" scripts/add_atlas.py --no-skip-effect deffcore/data/gallery/random-*.json
