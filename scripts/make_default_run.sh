#!/usr/bin/env bash
# Make the shipped default run, whole: deffcore/data/default_run.json, the first screen's run.
#
#   bash scripts/make_default_run.sh [N] [OUT]      # N passages (default 4096), OUT file
#   DEVICE=cuda bash scripts/make_default_run.sh    # the same run on a GPU (float32 there too)
#   MODEL=tiny-llama MAX_TOKENS=32 bash scripts/make_default_run.sh 16 /tmp/x.json   # (tests)
#
# One `python -m deffcore measure ... --snapshot OUT` with everything a page would otherwise
# compute on request, each computed by the CLI and labelled in the app as shipped with it:
#   --random-seeds 1..MIN_NULL_SEEDS   the random-weight band (the trust rule's null statement
#                                      needs that many seeds: deffcore.statistics.trust_rule.MIN_NULL_SEEDS)
#   --bootstrap 100 --bootstrap-poolings all --bootstrap-metrics cka,unbiased_cka
#                                      the run's one paired bootstrap (SPEC 15): the trust
#                                      badge's interval, and every difference the pages show
#                                      (the BOS answer, the controls' moves, linear vs unbiased)
#                                      from the same passage multisets
#   --diagnostics                      massive activations and sinks (BOS page, inspector)
#   --bos-on-off                       the run with bos=add and bos=none (BOS page)
# Every forward pass lands in the cache ($DEFF_CACHE_DIR), so a second call is read back.
# Cost: SmolLM2-135M, 4,096 windows of 128 tokens, 1 + 5 null seeds + 2 BOS variants = 8 runs
# (4.2M tokens): about 2 hours on a quiet 2-core CPU, minutes on one GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-4096}
OUT=${2:-deffcore/data/default_run.json}
PY=${PYTHON:-.venv/bin/python}
MODEL=${MODEL:-smollm2-135m}
MAX_TOKENS=${MAX_TOKENS:-128}
# the paired bootstrap's metrics (tests on 8 passages use cka alone: unbiased CKA's replicates
# need 4 distinct passages each)
BOOTSTRAP_METRICS=${BOOTSTRAP_METRICS:-cka,unbiased_cka}
SEEDS=$("$PY" -c "from deffcore.statistics.trust_rule import MIN_NULL_SEEDS as k; print(','.join(map(str, range(1, k + 1))))")
DEVICE_ARGS=()
if [[ -n "${DEVICE:-}" ]]; then
  DEVICE_ARGS=(--device "$DEVICE")
fi
echo "== $MODEL (N=$N, random seeds $SEEDS) -> $OUT"
t0=$SECONDS
"$PY" -m deffcore measure --model "$MODEL" --dataset bbc-news --passages windows \
  --n "$N" --max-tokens "$MAX_TOKENS" --seed 0 --dtype float32 --random-seeds "$SEEDS" --bootstrap 100 \
  --bootstrap-poolings all --bootstrap-metrics "$BOOTSTRAP_METRICS" \
  --diagnostics --bos-on-off --no-anytime "${DEVICE_ARGS[@]}" --snapshot "$OUT" >/dev/null
echo "   $((SECONDS - t0)) s, $(stat -c %s "$OUT") bytes"
