"""Give shipped snapshots the depth-use atlas of their own run (SPEC 16), nothing else.

    .venv/bin/python scripts/add_atlas.py deffcore/data/default_run.json deffcore/data/gallery/*
    .venv/bin/python scripts/add_atlas.py --no-skip-effect FILE     # the atlas alone

For each snapshot file: its run (the spec in the file) is measured as `measure` measures it (a
cache hit, or one extraction that takes the atlas on the way), its atlas and the skip effect on
the run's first 64 passages are computed or read back (`dc.atlas(..., skip_effect=True)`;
`--no-skip-effect`: the atlas alone, one extraction and no skip passes), and
the file's `atlas` field becomes what `deffcore measure --snapshot` would write there. Every
other field stays as it was, so the file's `command` still remakes it whole
(scripts/make_default_run.sh, scripts/make_gallery.sh).

The run must be the file's own: its key, and every similarity matrix of the fresh snapshot,
must equal the file's (to the file's rounding), else the file is left alone and the script
exits 1. The result is checked by the one schema (`views.run_schema.check_snapshot`) and
replaced atomically (`core.files.write_output`).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _same_run(fresh: dict, shipped: dict) -> str | None:
    """Why `fresh` (a snapshot dict made now) is not the run of `shipped`, or None."""
    if fresh["key"] != shipped["key"]:
        return f"the key is {fresh['key']}, the file's {shipped['key']}"
    for pooling, by_metric in shipped["similarity"].items():
        for metric, matrix in by_metric.items():
            a = np.asarray(fresh["similarity"][pooling][metric], dtype=float)
            b = np.asarray(matrix, dtype=float)
            if a.shape != b.shape or not np.allclose(a, b, atol=2e-6, equal_nan=True):
                return f"its {pooling} {metric} similarity differs from the file's"
    return None


def add_atlas(path: Path, *, skip_effect: bool = True) -> None:
    from deffcore.core.files import write_output
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.lenses.atlas import atlas_of
    from deffcore.runs.measure import measure_spec
    from deffcore.views.run_schema import check_snapshot
    from deffcore.views.snapshot import snapshot

    t0 = time.perf_counter()
    shipped = check_snapshot(json.loads(path.read_text()), str(path))
    m = measure_spec(RunSpec(**shipped["spec"]), metric=shipped["measurement"]["metric"])
    atlas_of(m, skip_effect=skip_effect)
    fresh = snapshot(m, command=shipped["command"])
    why = _same_run(fresh, shipped)
    if why is not None:
        sys.exit(f"{path}: not the file's run ({why}); the file is left alone")
    out = check_snapshot({**shipped, "atlas": fresh["atlas"]}, str(path))
    body = json.dumps(out, separators=(",", ":")).encode()
    write_output(path, body, str(path))
    skip = out["atlas"].get("skip_effect") or {}
    print(
        f"{path}: atlas of {m.n} passages, skip effect on {skip.get('passages', 'no')} passages; "
        f"{len(body) / 1024:.0f} kB, {time.perf_counter() - t0:.0f} s"
    )


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    from deffcore.core.errors import DeffError

    skip = "--no-skip-effect" not in sys.argv[1:]
    for arg in (a for a in sys.argv[1:] if a != "--no-skip-effect"):
        try:
            add_atlas(Path(arg), skip_effect=skip)
        except DeffError as err:  # a file that is no snapshot, a run that cannot be measured
            sys.exit(f"{arg}: {err} (the file is left alone)")
