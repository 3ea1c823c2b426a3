#!/usr/bin/env bash
# The GPU check, ready to run on a machine with a CUDA GPU (BENCHMARKS.md "GPU at full speed"
# has the lease plan: which call runs which sections, and their time on one H200):
#   bash benchmarks/device_check.sh [OUT] [--stash DIR] [device_check.py options]
#   bash benchmarks/device_check.sh "$OUT" --stash .device/call1 --sections cka
#   bash benchmarks/device_check.sh "$OUT" --stash .device/call2 --sections extract,scale,sweep
#   bash benchmarks/device_check.sh OUT --quick --device cpu    # smoke test of the script on a CPU
#   bash benchmarks/device_check.sh "$OUT" --sections pretrain --budget-s 540   # issue 20, apart
#   bash benchmarks/device_check.sh "$OUT" --sections gw --budget-s 540         # (POT: CPU-bound)
#
# Offline machines (a lent GPU reaches no registry): `bash benchmarks/device_payload.sh` on a
# connected machine puts the wheels the check needs, split into pieces that fit one call's
# transfer, into .device/call1 and .device/call2. `--stash DIR` copies DIR's files into
# $DEFF_PAYLOAD (default /tmp/deff-payload, which lasts while the machine stays warm between
# calls), joins a file's pieces once all have arrived (checked against MANIFEST.sha256) and
# installs the wheels into $DEFF_PAYLOAD/site, put first on PYTHONPATH. The machine's own torch
# is kept (never the CPU pin over a CUDA build).
#
# Connected machines without the project's packages: the missing ones are installed with pip, at
# the versions requirements.txt pins (transformers, huggingface_hub, tokenizers and gguf must
# match those pins for the packaged models' tokenizers: transformers 5.17 mis-tokenizes
# Gemma-3's GGUF; the issue-22 sections use only random-weight shapes and synthetic ids).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-device-check}}
shift || true
STASH=""
ARGS=()
while [[ $# -gt 0 ]]; do
  if [[ "$1" == --stash ]]; then STASH=$2; shift 2; else ARGS+=("$1"); shift; fi
done
PAYLOAD=${DEFF_PAYLOAD:-/tmp/deff-payload}

# The project's venv when there is one (scripts/setup.sh), else the machine's python3 (a GPU
# image with a CUDA torch); $PYTHON overrides both.
PY=${PYTHON:-python3}
[[ -z "${PYTHON:-}" && -x .venv/bin/python ]] && PY=.venv/bin/python

# 1. this call's share of the payload, kept for the next call; whole files once complete
if [[ -n "$STASH" ]]; then
  mkdir -p "$PAYLOAD/files"
  cp -f "$STASH"/* "$PAYLOAD/files/"
  (
    cd "$PAYLOAD/files"
    [[ -f MANIFEST.sha256 ]] || exit 0
    while read -r sum name; do
      if [[ ! -f "$name" ]] && ls "$name".part-* >/dev/null 2>&1; then
        cat "$name".part-* > "$name.tmp"
        if [[ "$(sha256sum "$name.tmp" | cut -d' ' -f1)" == "$sum" ]]; then
          mv "$name.tmp" "$name" && rm -f "$name".part-*
        else
          rm -f "$name.tmp"  # not all pieces yet: the next call brings the rest
        fi
      fi
    done < MANIFEST.sha256
  )
fi
shopt -s nullglob
wheels=("$PAYLOAD"/files/*.whl)
if [[ ${#wheels[@]} -gt 0 ]]; then
  for w in "${wheels[@]}"; do
    [[ -f "$PAYLOAD/site/.installed-$(basename "$w")" ]] && continue
    if "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$PAYLOAD/site" "$w"; then
      touch "$PAYLOAD/site/.installed-$(basename "$w")"
    else
      echo "could not install $(basename "$w") (the sections that need it are skipped)" >&2
    fi
  done
  export PYTHONPATH="$PAYLOAD/site${PYTHONPATH:+:$PYTHONPATH}"
fi
[[ -f "$PAYLOAD/files/extract_before.py" ]] && ARGS+=(--before-extract "$PAYLOAD/files/extract_before.py")

# 2. on a connected machine: packages absent, or (those that decide the packaged models' token
# ids) at another version than requirements.txt pins
missing=$("$PY" - <<'EOF'
import importlib.metadata as md
import importlib.util
import re
pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", open("requirements.txt").read(), re.M))
need = {"transformers": "transformers", "huggingface_hub": "huggingface_hub",
        "tokenizers": "tokenizers", "gguf": "gguf", "accelerate": "accelerate",
        "filelock": "filelock", "tqdm": "tqdm", "ray": "ray", "scipy": "scipy",
        "pandas": "pandas", "ot": "pot"}
exact = {"transformers"}
out = []
for mod, dist in need.items():
    if importlib.util.find_spec(mod) is None:
        out.append(dist)
    elif dist in exact and md.version(dist) != pins.get(dist, md.version(dist)):
        out.append(dist)
print(" ".join(out))
EOF
)
if [[ -n "$missing" && -n "$STASH" ]]; then
  echo "not on this machine: $missing (not installed: a lent machine reaches no registry)" >&2
elif [[ -n "$missing" ]]; then
  echo "installing: $missing (a machine without a registry: use --stash, see above)" >&2
  for dist in $missing; do
    pin=$(grep -E "^${dist}==" requirements.txt || echo "$dist")
    "$PY" -m pip install -q --no-deps "$pin" || echo "could not install $pin" >&2
  done
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
export DEFF_CACHE_DIR=${DEFF_CACHE_DIR:-/tmp/deff-device-cache}
# a lent machine's memory grows as it is used (it reports far less at the start): the random
# 8B shapes' host-memory check takes the kind's 128 GiB instead (deffcore.models.check_fits)
[[ -z "$STASH" ]] || export DEFF_HOST_MEMORY_GIB=${DEFF_HOST_MEMORY_GIB:-120}
exec "$PY" benchmarks/device_check.py --out "$OUT_DIR" "${ARGS[@]}"
