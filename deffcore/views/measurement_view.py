"""A live `Measurement` seen as a `RunView` (its similarity matrices are memoised there)."""

from __future__ import annotations

from typing import Any

import numpy as np

from deffcore.views.labels import SPEC_DEFAULTS, SPEC_FIELDS, run_label
from deffcore.views.notebook import NotebookDisplay
from deffcore.views.run_view import RunView


class MeasurementView(NotebookDisplay, RunView):
    """A live `deffcore.runs.measure.Measurement` (its similarity matrices are memoised there)."""

    source = "measured"

    def __init__(self, measurement: Any, label: str | None = None):
        self._m = measurement
        spec = measurement.spec
        self.spec = {k: getattr(spec, k, SPEC_DEFAULTS.get(k)) for k in SPEC_FIELDS}
        self.layers = int(measurement.layers)
        self.d_model = int(measurement.d_model)
        self.n = int(measurement.n)
        self.label = label or run_label(self.spec)
        self.key = spec.key()
        self._cache: dict[tuple[str, str, str], dict[str, Any]] = {}

    @property
    def measurement(self) -> Any:
        return self._m

    def similarity(self, pooling: str = "default", metric: str = "cka") -> np.ndarray:
        return np.asarray(self._m.similarity(pooling, metric), dtype=np.float64)

    def pos0_norm_ratio(self) -> np.ndarray:
        return np.asarray(self._m.pooled.pos0_norm_ratio, dtype=np.float64)

    def update_depth(self, pooling: str = "default", metric: str = "cka") -> dict[str, Any] | None:
        return self._memo(("update_depth", pooling, metric), self._m.update_depth)

    def matched_references(
        self, pooling: str = "default", metric: str = "cka"
    ) -> dict[str, Any] | None:
        # memoised here: Measurement recomputes matched references on every call
        return self._memo(("matched_references", pooling, metric), self._m.matched_references)

    def _memo(self, key: tuple[str, str, str], compute: Any) -> dict[str, Any]:
        if key not in self._cache:
            self._cache[key] = compute(key[1], key[2]).to_dict()
        return self._cache[key]

    def random_band(self, pooling: str = "default", metric: str = "cka") -> dict[str, Any]:
        return self._m.random_band(pooling, metric)

    def measure_table(self, pooling: str = "default") -> Any | None:
        """The table computed for the run or kept beside it (read again: it may come later)."""
        return self._m.stored_measure_table(pooling)

    def atlas(self) -> Any | None:
        """The atlas stored beside the run (read again each time: it may be computed later)."""
        from deffcore.views.atlas_read import stored_atlas

        return stored_atlas(self._m)

    def paired_bootstrap(self) -> Any | None:
        return self._m.paired_latest()

    def stored_bootstrap(
        self, pooling: str = "default", metric: str = "cka", K: int | None = None
    ) -> dict[str, Any] | None:
        """This headline's bootstrap from the run's paired bootstrap (one it computed, or the
        live estimates' on its passages that it adopted), so a trust level reads the run's
        measured spread, never the prior, when the run has one."""
        pb = self._m.paired_latest()
        if pb is None or not pb.has(pooling, metric):
            return None
        return pb.result(pooling, metric, K).to_dict()
