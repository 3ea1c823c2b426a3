#!/usr/bin/env bash
# Build the shipped precomputed runs whole, with their depth-use atlas and skip effect (SPEC 16):
# deffcore/data/default_run.json and deffcore/data/gallery/*.json.
#
#   bash scripts/make_atlas.sh            # every shipped run
#
# scripts/build_shipped.py runs each file's own command (`measure ... --snapshot`, every section;
# a cache hit, or one extraction that takes the atlas on the way), computes the skip effect on
# its first 64 passages (the trained models), checks that the run is the file's (key, every
# similarity matrix, the bootstrap's replicates), and writes the file whole.
# Cost on a quiet 2-core CPU with an empty cache: one extraction per run (SmolLM2 at 4,096
# windows: about 15 minutes) plus L + 1 passes of 64 passages for the skip effect, plus what
# the file's command asks for (random seeds, BOS on/off runs) that the cache does not hold.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
# the default with every section; the gallery's runs as their commands made them; the trained
# models with their skip effect, the random-weight nulls with the atlas alone
"$PY" scripts/build_shipped.py deffcore/data/default_run.json
"$PY" scripts/build_shipped.py --no-extras deffcore/data/gallery/gemma3-270m_*.json
"$PY" scripts/build_shipped.py --no-extras --no-skip-effect deffcore/data/gallery/random-*.json
