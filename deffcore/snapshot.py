"""One read-only view of a run for the explorer, backed by a live `Measurement` or a JSON snapshot.

The app's first screen must show a result before anything is computed, so the default run
(smollm2-135m + bbc-news) ships as a small JSON snapshot in `deffcore/data/default_run.json`:
every similarity matrix (each pooling x metric, `(L, L)`), the position-0 norm ratios, the
update-based depth and the matched references. Pages read both kinds of run through the same
`RunView` methods; what only a live run can do (the bootstrap, which needs the pooled states)
is reached through `RunView.measurement`, which is None for a snapshot.

Headline numbers are always recomputed from the similarity matrix with the engine's own
functions (`lag_profile`, `effective_depth`, `gap_percent`), so a snapshot and a live run of
the same data give the same numbers for every pooling, metric and K.

Regenerate the shipped snapshot with

    python -m deffcore measure --model smollm2-135m --dataset bbc-news --n 512 \
        --max-tokens 128 --seed 0 --random-seeds 1,2,3 --snapshot deffcore/data/default_run.json
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deffcore.constants import METRICS, POOLINGS

#: Bump when the snapshot layout changes; the loader rejects other versions.
SNAPSHOT_FORMAT = 1
DEFAULT_RUN_PATH = Path(__file__).parent / "data" / "default_run.json"
#: Decimals kept in the JSON: 1e-6 is far below any difference the app displays.
_DECIMALS = 6


@dataclass
class Headline:
    """The numbers on the first screen for one pooling, metric and maximum lag K."""

    layers: int
    d_model: int
    n: int
    K: int
    deff: float
    deff_over_L: float
    gap_pct: float
    reference_FL: float
    rho1: float
    pos0_ratio: float
    pos0_layer: int
    cka_bias: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RunView:
    """What every page reads. Subclasses provide `similarity`, `pos0_norm_ratio` and the rest."""

    label: str
    source: str  # "precomputed" or "measured"
    spec: dict[str, Any]
    layers: int
    d_model: int
    n: int

    def similarity(self, pooling: str = "default", metric: str = "cka") -> np.ndarray:
        raise NotImplementedError

    def pos0_norm_ratio(self) -> np.ndarray:
        """(L+1,) ratios for h_0 .. h_L."""
        raise NotImplementedError

    def update_depth(self, pooling: str = "default", metric: str = "cka") -> dict[str, Any] | None:
        """`UpdateDepth.to_dict()` of this pooling, or None when the run does not hold it."""
        return None

    def matched_references(
        self, pooling: str = "default", metric: str = "cka"
    ) -> dict[str, Any] | None:
        """`MatchedReferences.to_dict()` of this pooling, or None when the run does not hold it."""
        return None

    def random_band(self, pooling: str = "default", metric: str = "cka") -> dict[str, Any]:
        """`Measurement.random_band` (random-weight null seeds), {} when there is none."""
        return {}

    @property
    def measurement(self) -> Any | None:
        """The live `Measurement`, or None for a snapshot."""
        return None

    # Everything below is computed from `similarity`, the same way for both kinds of run.

    def lag_profile(self, pooling: str = "default", metric: str = "cka") -> np.ndarray:
        from deffcore.depth import lag_profile

        return lag_profile(self.similarity(pooling, metric))

    def deff_over_L_by_K(self, pooling: str = "default", metric: str = "cka") -> dict[int, float]:
        """D_eff(K)/L for every K = 1..L-1."""
        from deffcore.depth import effective_depth

        S = self.similarity(pooling, metric)
        L = S.shape[0]
        return {K: effective_depth(S, K=K) / L for K in range(1, L)}

    def headline(
        self, pooling: str = "default", metric: str = "cka", K: int | None = None
    ) -> Headline:
        from deffcore.depth import effective_depth, gap_percent, lag_profile, reference_depth
        from deffcore.similarity import cka_finite_sample_bias

        S = self.similarity(pooling, metric)
        L = S.shape[0]
        K = L - 1 if K is None else min(int(K), L - 1)
        deff = float(effective_depth(S, K=K))
        ratios = self.pos0_norm_ratio()
        peak = int(np.nanargmax(ratios))
        return Headline(
            layers=L,
            d_model=self.d_model,
            n=self.n,
            K=K,
            deff=deff,
            deff_over_L=deff / L,
            gap_pct=float(gap_percent(deff, L)),
            reference_FL=float(reference_depth(L)),
            rho1=float(lag_profile(S)[0]),
            pos0_ratio=float(ratios[peak]),
            pos0_layer=peak,
            cka_bias=float(cka_finite_sample_bias(self.n, self.d_model)),
        )


class MeasurementView(RunView):
    """A live `deffcore.measurement.Measurement` (its similarity matrices are memoised there)."""

    source = "measured"

    def __init__(self, measurement: Any, label: str | None = None):
        self._m = measurement
        spec = measurement.spec
        self.spec = {
            k: getattr(spec, k)
            for k in ("model", "revision", "dataset", "n", "max_tokens", "seed", "dtype")
        }
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


class SnapshotView(RunView):
    """A run read from a snapshot dict (see `snapshot`)."""

    source = "precomputed"

    def __init__(self, data: dict[str, Any]):
        if data.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(
                f"Snapshot format {data.get('format')!r} is not {SNAPSHOT_FORMAT}; "
                "regenerate it with `python -m deffcore measure ... --snapshot PATH`."
            )
        self.data = data
        self.spec = dict(data["spec"])
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
        return m.get("random_null", {}).get("results", {}).get(pooling, {})


def run_label(spec: dict[str, Any]) -> str:
    """Short human label: `smollm2-135m · bbc-news · N=512 · T=128 · seed 0`."""
    return (
        f"{spec['model']} · {spec['dataset']} · N={spec['n']} · T={spec['max_tokens']}"
        f" · seed {spec['seed']}"
    )


def _rounded(x: Any) -> Any:
    return np.round(np.asarray(x, dtype=np.float64), _DECIMALS).tolist()


def _plain(obj: Any) -> Any:
    """Floats rounded, numpy values to Python values, NaN to None (JSON-ready)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if hasattr(obj, "tolist"):
        return _plain(obj.tolist())
    if isinstance(obj, float):
        return round(obj, _DECIMALS) if np.isfinite(obj) else None
    return obj


def snapshot(measurement: Any, *, command: str = "") -> dict[str, Any]:
    """Everything the pages read from a run, as a JSON-ready dict (~150 kB for L = 30).

    measurement: a `deffcore.measurement.Measurement` (with `random_null` when measured with
    `random_seeds`, so the Baselines page can show the null band without running anything).
    """
    view = MeasurementView(measurement)
    return {
        "format": SNAPSHOT_FORMAT,
        "command": command,
        "key": view.key,
        "spec": _plain(view.spec),
        "layers": view.layers,
        "d_model": view.d_model,
        "n": view.n,
        "n_dropped_short": int(getattr(measurement.pooled, "n_dropped_short", 0)),
        "pos0_norm_ratio": _rounded(view.pos0_norm_ratio()),
        "similarity": {p: {m: _rounded(view.similarity(p, m)) for m in METRICS} for p in POOLINGS},
        # the CLI's JSON: per pooling, update depth, matched references, random-null band
        "measurement": _plain(measurement.to_dict()),
    }


def load_snapshot(path: Path | str = DEFAULT_RUN_PATH) -> SnapshotView | None:
    """The shipped default run, or None when the file is missing."""
    path = Path(path)
    if not path.is_file():
        return None
    return SnapshotView(json.loads(path.read_text()))
