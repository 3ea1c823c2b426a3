#!/usr/bin/env bash
# Prepare what a lent GPU machine (no registry, 64 MiB of files per call) needs for
# `benchmarks/device_check.sh`, on a machine that reaches PyPI:
#   bash benchmarks/device_payload.sh [--before REV]
# It downloads the wheels (Python 3.12, manylinux x86_64: the H200 image's python3) of what that
# image lacks or has at another version: ray (sweeps) and the jsonschema packages ray imports,
# transformers at the version requirements.txt pins; writes `git show REV:deffcore/extract.py`
# (the extraction before issue 22, default 13212b1) as extract_before.py; splits files over
# PIECE_MB into pieces and fills .device/call1 then .device/call2 (each under CALL_MB, leaving room
# for the repository itself); files under 1 MiB and MANIFEST.sha256 go to both. .device/ is in
# .gitignore, so it never travels unless a call names it in `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
BEFORE=13212b1
[[ "${1:-}" == --before ]] && BEFORE=$2
PIECE_MB=${PIECE_MB:-56}
CALL_MB=${CALL_MB:-58}
PY=${PYTHON:-python3}
[[ -z "${PYTHON:-}" && -x .venv/bin/python ]] && PY=.venv/bin/python
pin() { grep -E "^$1==" requirements.txt | head -1; }
version() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }

WORK=.device/work
rm -rf .device && mkdir -p "$WORK" .device/call1 .device/call2
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$WORK" "$(pin ray)" "$(pin transformers)" "jsonschema==$(version jsonschema)" \
  "jsonschema-specifications==$(version jsonschema-specifications)" \
  "referencing==$(version referencing)" "rpds-py==$(version rpds-py)"
git show "$BEFORE:deffcore/extract.py" > "$WORK/extract_before.py"
(cd "$WORK" && sha256sum -- * > ../MANIFEST.sha256)

# pieces: the largest files first, each piece to the first call with room for it
"$PY" - "$WORK" "$PIECE_MB" "$CALL_MB" <<'PYEOF'
import os, shutil, sys
work, piece, limit = sys.argv[1], int(sys.argv[2]) << 20, int(sys.argv[3]) << 20
calls = [".device/call1", ".device/call2"]
used = dict.fromkeys(calls, 0)
files = sorted(os.listdir(work), key=lambda f: -os.path.getsize(os.path.join(work, f)))
for name in files:
    data = open(os.path.join(work, name), "rb").read()
    if len(data) < 1 << 20:  # small: in every call, so a call that finds a cold machine has it
        for call in calls:
            open(os.path.join(call, name), "wb").write(data)
            used[call] += len(data)
        continue
    chunks = [data[i:i + piece] for i in range(0, len(data), piece)] if len(data) > piece else [data]
    for k, chunk in enumerate(chunks):
        call = next((c for c in calls if used[c] + len(chunk) <= limit), None)
        if call is None:
            sys.exit(f"the payload does not fit two calls of {limit >> 20} MiB")
        target = f"{name}.part-{k:02d}" if len(chunks) > 1 else name
        open(os.path.join(call, target), "wb").write(chunk)
        used[call] += len(chunk)
for call in calls:
    shutil.copy(".device/MANIFEST.sha256", call)
    print(f"{call}: {used[call] / 2**20:.1f} MiB: {', '.join(sorted(os.listdir(call)))}")
PYEOF
rm -rf "$WORK"
echo "Now, on the lease, two calls back to back (the machine stays warm ~30 s between them):"
echo "  run(carry=['.device/call1'], command='bash benchmarks/device_check.sh \$OUT --stash .device/call1 --sections cka', timeout_s=300)"
echo "  run(carry=['.device/call2'], command='bash benchmarks/device_check.sh \$OUT --stash .device/call2 --sections extract,scale,sweep --budget-s 480', timeout_s=560)"
