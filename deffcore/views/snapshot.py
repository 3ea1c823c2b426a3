"""A run as a JSON snapshot: written from a `Measurement`, read back as a `SnapshotView`.

The app's first screen must show a result before anything is computed, so the default run
(smollm2-135m + bbc-news) ships as a small JSON snapshot in `deffcore/data/default_run.json`:
every similarity matrix (each pooling x metric, `(L, L)`), the position-0 norm ratios, the
update-based depth and the matched references; the gallery (`deffcore/data/gallery/`) holds
more, made by `scripts/make_gallery.sh`. Regenerate the shipped snapshot with `bash
scripts/make_default_run.sh` (one `measure ... --snapshot` with the random-weight seeds, the
bootstrap, the BOS diagnostics and the BOS on/off check, so every page of the first screen's
run is whole: `deffcore.lenses.run_extras`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from deffcore.core.constants import METRICS, POOLINGS
from deffcore.core.files import DATA_DIR
from deffcore.views.labels import SPEC_DEFAULTS, run_label
from deffcore.views.measurement_view import MeasurementView
from deffcore.views.notebook import NotebookDisplay

# the one schema of a snapshot file (and its format number, named here too)
from deffcore.views.run_schema import SNAPSHOT_FORMAT, check_snapshot, parse_snapshot_json
from deffcore.views.run_view import RunView

DEFAULT_RUN_PATH = DATA_DIR / "default_run.json"

#: Decimals kept in the JSON: 1e-6 is far below any difference the app displays.
_DECIMALS = 6

#: Precomputed runs shown beside the default on first start (Runs, Gap, Compare), one
#: snapshot each; `scripts/make_gallery.sh` makes them with the CLI.
GALLERY_DIR = DATA_DIR / "gallery"


class SnapshotView(NotebookDisplay, RunView):
    """A run read from a snapshot dict (see `snapshot`). `source` is "precomputed" (shipped
    with the app) or "shared" (`read_snapshot`, with the file's `sha256` and `path`)."""

    source = "precomputed"
    sha256 = ""
    path: Path | None = None

    def __init__(self, data: dict[str, Any], where: str = "The snapshot"):
        self.data = check_snapshot(data, where)  # SnapshotError (one sentence) unless valid
        self.spec = {**SPEC_DEFAULTS, **data["spec"]}
        self.layers = int(data["layers"])
        self.d_model = int(data["d_model"])
        self.n = int(data["n"])
        self.label = run_label(self.spec)
        self.command = data.get("command", "")
        self.key = data.get("key", "")

    def similarity(self, pooling: str = "default", metric: str = "cka") -> np.ndarray:
        try:
            return np.asarray(self.data["similarity"][pooling][metric], dtype=np.float64)
        except KeyError:
            raise KeyError(f"The snapshot has no similarity for {pooling} / {metric}.") from None

    def pos0_norm_ratio(self) -> np.ndarray:
        return np.asarray(self.data["pos0_norm_ratio"], dtype=np.float64)

    def _result(self, pooling: str, metric: str) -> dict[str, Any]:
        """The CLI JSON's per-pooling result; it exists only for the metric it was made with."""
        m = self.data.get("measurement") or {}
        return m.get("results", {}).get(pooling, {}) if m.get("metric") == metric else {}

    def update_depth(self, pooling: str = "default", metric: str = "cka") -> dict[str, Any] | None:
        return self._result(pooling, metric).get("update_depth")

    def matched_references(
        self, pooling: str = "default", metric: str = "cka"
    ) -> dict[str, Any] | None:
        return self._result(pooling, metric).get("matched_references")

    def random_band(self, pooling: str = "default", metric: str = "cka") -> dict[str, Any]:
        m = self.data.get("measurement") or {}
        if m.get("metric") != metric:
            return {}
        # the schema lets a file say null for the null and for one pooling's band: both absent
        return ((m.get("random_null") or {}).get("results") or {}).get(pooling) or {}

    def window_source(self) -> Any | None:
        """The stored `tokens.WindowSource` of the run's data (`measure --snapshot` writes it),
        checked; None when the snapshot has none."""
        from deffcore.inputs.texts import WindowSource

        stored = self.data.get("supply")
        try:
            return WindowSource.from_dict(stored) if isinstance(stored, dict) else None
        except (ValueError, KeyError, TypeError):
            return None

    def paired_bootstrap(self) -> Any | None:
        """The stored paired bootstrap (`measure --bootstrap B --snapshot`), checked; None when
        the snapshot has none or it does not match this run's L and N."""
        if not hasattr(self, "_paired"):
            from deffcore.core.errors import DeffError
            from deffcore.statistics.paired import PairedBootstrap

            self._paired = None
            stored = self.data.get("paired")
            if isinstance(stored, dict):
                try:
                    pb = PairedBootstrap.from_dict(stored)
                except DeffError:
                    pb = None
                if pb is not None and (pb.layers, pb.n) == (self.layers, self.n):
                    self._paired = pb
        return self._paired

    def stored_bootstrap(
        self, pooling: str = "default", metric: str = "cka", K: int | None = None
    ) -> dict[str, Any] | None:
        from deffcore.views.run_spread import stored_bootstrap

        if K not in (None, self.layers - 1):
            return None
        point = self.headline(pooling, metric).deff_over_L
        found = stored_bootstrap(
            self.data.get("measurement"), pooling=pooling, metric=metric, point=point
        )
        pb = self.paired_bootstrap() if found is None else None
        if pb is not None and pb.has(pooling, metric):  # the run's paired one, as live (SPEC 15)
            return pb.result(pooling, metric, K).to_dict()
        return found

    def measure_table(self, pooling: str = "default") -> Any | None:
        """The table across measures the snapshot carries for this pooling (SPEC 17.4)."""
        from deffcore.statistics.measure_table import MeasureTable

        found = (self.data.get("measures") or {}).get(pooling)
        return MeasureTable.from_dict(found) if isinstance(found, dict) else None

    def atlas(self) -> Any | None:
        """The atlas the snapshot carries (`snapshot()` writes it when the run has one)."""
        from deffcore.measures.atlas import Atlas

        found = self.data.get("atlas")
        return Atlas.from_dict(found) if isinstance(found, dict) else None


def _rounded(x: Any) -> Any:
    return np.round(np.asarray(x, dtype=np.float64), _DECIMALS).tolist()


def json_ready(obj: Any) -> Any:
    """Floats rounded, numpy values to Python values, NaN to None (JSON-ready)."""
    if isinstance(obj, dict):
        return {str(k): json_ready(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_ready(v) for v in obj]
    if hasattr(obj, "tolist"):
        return json_ready(obj.tolist())
    if isinstance(obj, float):
        return round(obj, _DECIMALS) if np.isfinite(obj) else None
    return obj


def snapshot(measurement: Any, *, command: str = "") -> dict[str, Any]:
    """Everything the pages read from a run, as a JSON-ready dict (~150 kB for L = 30).

    measurement: a `deffcore.runs.measure.Measurement` (with `random_null` when measured with
    `random_seeds`, so the Baselines page can show the null band without running anything).
    """
    view = MeasurementView(measurement)
    return {
        "format": SNAPSHOT_FORMAT,
        "command": command,
        "key": view.key,
        "spec": json_ready(view.spec),
        "layers": view.layers,
        "d_model": view.d_model,
        "n": view.n,
        "n_dropped_short": int(getattr(measurement.pooled, "n_dropped_short", 0)),
        "pos0_norm_ratio": _rounded(view.pos0_norm_ratio()),
        "similarity": {
            p: {m: _rounded(S) for m, S in _matrices(measurement, view, p).items()}
            for p in POOLINGS
        },
        # the CLI's JSON: per pooling, update depth, matched references, random-null band
        "measurement": json_ready(measurement.to_dict()),
        # the depth-use atlas stored beside the run (SPEC 16), when it has one
        "atlas": json_ready(atlas.to_dict()) if (atlas := view.atlas()) is not None else None,
        # the paired bootstrap the run's BOS answer and trust were given from, when it has one
        **({"paired": pb.to_dict()} if (pb := measurement.paired_latest()) is not None else {}),
        # the tables across similarity measures the run holds (SPEC 17.4), per pooling
        **({"measures": tables} if (tables := _measure_tables(measurement)) else {}),
    }


def _matrices(measurement: Any, view: Any, pooling: str) -> dict[str, Any]:
    """The metrics' matrices, then every SPEC 17 measure's the run holds (never computed)."""
    held = getattr(measurement, "held_measures", None)
    extra = held(pooling) if held is not None else {}
    return {**{m: view.similarity(pooling, m) for m in METRICS}, **extra}


def _measure_tables(measurement: Any) -> dict[str, Any]:
    out = {}
    for pooling in POOLINGS:
        table = measurement.stored_measure_table(pooling)
        if table is not None:
            out[pooling] = json_ready(table.to_dict())
    return out


def load_snapshot(path: Path | str = DEFAULT_RUN_PATH) -> SnapshotView | None:
    """The shipped default run, or None when the file is missing."""
    path = Path(path)
    if not path.is_file():
        return None
    return SnapshotView(parse_snapshot_json(path.read_text(), path.name))


def load_gallery(
    folder: Path | str = GALLERY_DIR, *, default: Path | str | None = DEFAULT_RUN_PATH
) -> list[SnapshotView]:
    """The precomputed runs a visitor can compare before running anything: the shipped
    default first, then every `*.json` snapshot in `folder` by file name; one per run key.

    A file that is not a readable snapshot of this format is skipped (a warning names it):
    a damaged gallery file must not take the app's first screen down with it.
    """
    import warnings

    paths = [Path(default)] if default is not None else []
    folder = Path(folder)
    paths += sorted(folder.glob("*.json")) if folder.is_dir() else []
    views: list[SnapshotView] = []
    keys: set[str] = set()
    for path in paths:
        if not path.is_file():
            continue
        try:
            data = parse_snapshot_json(path.read_text(), path.name)
            view = SnapshotView(data, path.name) if isinstance(data, dict) else None
        except (OSError, ValueError, KeyError, TypeError) as err:
            warnings.warn(f"Skipped gallery snapshot {path.name}: {err}", stacklevel=2)
            continue
        if view is None:
            warnings.warn(f"Skipped gallery snapshot {path.name}: not a JSON object", stacklevel=2)
            continue
        if view.key and view.key in keys:
            continue
        keys.add(view.key)
        views.append(view)
    return views
