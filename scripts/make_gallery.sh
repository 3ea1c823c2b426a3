#!/usr/bin/env bash
# Make the precomputed runs the explorer shows on first start (deffcore/data/gallery/*.json),
# beside the shipped default (deffcore/data/default_run.json, made by the lead's long run).
#
#   bash scripts/make_gallery.sh [N] [which...]     # N passages (default 1024), which: gemma
#                                                   # (Gemma-3-270M + its random null) and/or
#                                                   # smollm2-null (SmolLM2's random nulls)
#
# Every run is `python -m deffcore measure ... --snapshot PATH`: the forward passes land in the
# cache ($DEFF_CACHE_DIR), so the random-weight null measured with --random-seeds is a cache hit
# when written again with --random-seeds (or as its own snapshot). Passages are 128-token windows of BBC news
# (SPEC section 12), the same data as the default run; seeds: sample 0, init 1.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1024}
shift || true
WHICH=${*:-gemma smollm2-null}
OUT=deffcore/data/gallery
PY=${PYTHON:-.venv/bin/python}
mkdir -p "$OUT"
COMMON=(--dataset bbc-news --passages windows --n "$N" --max-tokens 128 --seed 0)

snap() {  # snap <file stem> <model> [extra args]
  local stem=$1 model=$2
  shift 2
  echo "== $model (N=$N) -> $OUT/$stem.json"
  local t0=$SECONDS
  "$PY" -m deffcore measure --model "$model" "${COMMON[@]}" "$@" \
    --snapshot "$OUT/$stem.json" >/dev/null
  echo "   $((SECONDS - t0)) s, $(stat -c %s "$OUT/$stem.json") bytes"
}

for which in $WHICH; do
  case $which in
    gemma)
      # trained first, then its null as its own run (each snapshot is written as soon as its
      # forward pass is done), then the trained one again with --random-seeds: all cache hits,
      # it only adds the null band the Baselines page draws
      snap "gemma3-270m_N${N}_windows" gemma3-270m
      snap "random-gemma3-270m-1_N${N}_windows" random:gemma3-270m:1
      snap "gemma3-270m_N${N}_windows" gemma3-270m --random-seeds 1
      ;;
    smollm2-null)
      snap "random-smollm2-135m-1_N${N}_windows" random:smollm2-135m:1
      ;;
    *)
      echo "unknown gallery part: $which (gemma, smollm2-null)" >&2
      exit 2
      ;;
  esac
done

# the app opens these exact bytes without checking them again: record their digests
"$PY" scripts/build_shipped.py --digests
