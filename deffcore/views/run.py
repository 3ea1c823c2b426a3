"""A run as it is shown: one `Run`, live (with its states) or opened from its plain form.

A live run (`Run.from_measurement`) holds its `Measurement`, so the bootstrap and anything else
can still be computed; a run opened from a snapshot (`Run.from_snapshot`) is the same run
without its states, read through the same methods (`Run.measurement` is None). Headline numbers
are always recomputed from the similarity matrix with the engine's own functions, so a snapshot
and a live run of the same data give the same numbers for every pooling, metric and K.

The first screen shows the default run (smollm2-135m + bbc-news) before anything is computed:
it ships as a whole snapshot, `deffcore/data/default_run.json` (`bash
scripts/make_default_run.sh` remakes it); the gallery (`deffcore/data/gallery/`,
`scripts/make_gallery.sh`) holds more.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deffcore.core.constants import METRICS, POOLINGS
from deffcore.core.errors import NotInRunError
from deffcore.core.files import DATA_DIR
from deffcore.core.json_values import json_safe
from deffcore.views.labels import SPEC_DEFAULTS, SPEC_FIELDS, run_identity, run_label

DEFAULT_RUN_PATH = DATA_DIR / "default_run.json"

#: Precomputed runs shown beside the default on first start (Runs, Gap, Compare), one
#: snapshot each; `scripts/make_gallery.sh` makes them with the CLI.
GALLERY_DIR = DATA_DIR / "gallery"
#: {path under deffcore/data: sha256} of the shipped snapshots as the one schema accepted them
#: (`scripts/build_shipped.py` writes it; `shipped_digests`).
CHECKED_DIGESTS = DATA_DIR / "checked_snapshots.json"

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


class Run:
    """One run, read-only. `source`: "measured" (live, with its `measurement`), "precomputed"
    (a snapshot shipped with the app) or "shared" (`sharing.read_snapshot`, with the file's
    `sha256` and `path`). A run without states reads everything from `data`, its plain form."""

    sha256 = ""
    path: Path | None = None

    def __init__(
        self,
        spec: dict[str, Any],
        *,
        layers: int,
        d_model: int,
        n: int,
        source: str,
        label: str | None = None,
        key: str = "",
        measurement: Any | None = None,
        data: dict[str, Any] | None = None,
    ):
        """The parts as given, unchecked: `from_measurement` and `from_snapshot` are the ways
        in; a construction's matrices are `data={"similarity": {pooling: {metric: S}},
        "pos0_norm_ratio": ...}` (`lenses.bos_calibration.pooled_view`)."""
        self.spec, self.source, self.key = spec, source, key
        self.layers, self.d_model, self.n = int(layers), int(d_model), int(n)
        self.label = label or run_label(spec)
        self._m = measurement
        self.data: dict[str, Any] = data if data is not None else {}
        self.command = self.data.get("command", "")
        self._cache: dict[tuple[str, str, str], dict[str, Any]] = {}

    @classmethod
    def from_measurement(cls, measurement: Any, label: str | None = None) -> Run:
        """A live `deffcore.runs.measure.Measurement` (its similarity matrices are memoised
        there)."""
        spec = measurement.spec
        fields = {k: getattr(spec, k, SPEC_DEFAULTS.get(k)) for k in SPEC_FIELDS}
        return cls(
            fields,
            layers=measurement.layers,
            d_model=measurement.d_model,
            n=measurement.n,
            source="measured",
            label=label,
            key=spec.key(),
            measurement=measurement,
        )

    @classmethod
    def from_snapshot(cls, data: dict[str, Any], where: str = "The snapshot") -> Run:
        """A run from its plain form (see `to_snapshot`), checked first: `SnapshotError` (one
        sentence naming `where`) unless it is a valid snapshot of this format."""
        from deffcore.views.run_schema import check_snapshot

        return cls._from_checked(check_snapshot(data, where))

    @classmethod
    def _from_checked(cls, data: dict[str, Any]) -> Run:
        """A run from a plain form the one schema has accepted (`from_snapshot`, or a shipped
        file whose bytes are the ones that were checked: `load_snapshot`)."""
        return cls(
            {**SPEC_DEFAULTS, **data["spec"]},
            layers=data["layers"],
            d_model=data["d_model"],
            n=data["n"],
            source="precomputed",
            key=data.get("key", ""),
            data=data,
        )

    @property
    def measurement(self) -> Any | None:
        """The live `Measurement`, or None for a run without states."""
        return self._m

    def to_snapshot(self, *, command: str = "") -> dict[str, Any]:
        """Everything the pages read from a run, as a JSON-ready dict (~150 kB for L = 30):
        a live run's (`command`: the command line that made it; with `random_null` when
        measured with `random_seeds`, so the Baselines page can show the null band without
        running anything), or the plain form a run without states was opened from."""
        m = self._m
        if m is None:
            return self.data
        from deffcore.statistics.bos_answer import answer_bootstrap_of
        from deffcore.views.run_schema import SNAPSHOT_FORMAT

        if m.metric in METRICS:  # its states are at hand: the file answers paired, as the run
            answer_bootstrap_of(m, m.metric)  # does (kept with it; drawn now if it has none)

        tables = {p: t.to_dict() for p in POOLINGS if (t := m.stored_measure_table(p)) is not None}
        # the SPEC 17 measures' matrices a live run holds (a stand-in without the method: none)
        held = getattr(m, "held_measures", None) or (lambda pooling: {})
        atlas = self.atlas()
        return {
            "format": SNAPSHOT_FORMAT,
            "command": command,
            "key": self.key,
            "spec": json_safe(self.spec, _DECIMALS),
            "layers": self.layers,
            "d_model": self.d_model,
            "n": self.n,
            "n_dropped_short": int(getattr(m.pooled, "n_dropped_short", 0)),
            "pos0_norm_ratio": _rounded(self.pos0_norm_ratio()),
            # the metrics' matrices, then every SPEC 17 measure's the run holds (never computed)
            "similarity": {
                p: {
                    **{k: _rounded(self.similarity(p, k)) for k in METRICS},
                    **{k: _rounded(S) for k, S in held(p).items()},
                }
                for p in POOLINGS
            },
            # the CLI's JSON: per pooling, update depth, matched references, random-null band
            "measurement": json_safe(m.to_dict(), _DECIMALS),
            # the depth-use atlas stored beside the run (SPEC 16), when it has one
            "atlas": None if atlas is None else json_safe(atlas.to_dict(), _DECIMALS),
            # the paired bootstrap the run's BOS answer and trust were given from, when it has one
            **({"paired": pb.to_dict()} if (pb := m.paired_latest()) is not None else {}),
            # the tables across similarity measures the run holds (SPEC 17.4), per pooling
            **({"measures": json_safe(tables, _DECIMALS)} if tables else {}),
        }

    # -- what the run holds ------------------------------------------------------------------

    def similarity(self, pooling: str = "default", metric: str = "cka") -> np.ndarray:
        if self._m is not None:
            return np.asarray(self._m.similarity(pooling, metric), dtype=np.float64)
        held = self.data["similarity"]
        try:
            return np.asarray(held[pooling][metric], dtype=np.float64)
        except (KeyError, TypeError):  # an unknown or unhashable name: one sentence, below
            pass
        metrics = (held.get(pooling) if isinstance(pooling, str) else None) or next(
            iter(held.values()), {}
        )
        raise NotInRunError(
            f"This run holds no similarity for pooling {pooling!r} / metric {metric!r}; it "
            f"holds poolings {', '.join(held)} and metrics {', '.join(metrics)}."
        )

    def pos0_norm_ratio(self) -> np.ndarray:
        """(L+1,) ratios for h_0 .. h_L."""
        if self._m is not None:
            return np.asarray(self._m.pooled.pos0_norm_ratio, dtype=np.float64)
        return np.asarray(self.data["pos0_norm_ratio"], dtype=np.float64)

    def _result(self, pooling: str, metric: str) -> dict[str, Any]:
        """The CLI JSON's per-pooling result; it exists only for the metric it was made with."""
        m = self.data.get("measurement") or {}
        return m.get("results", {}).get(pooling, {}) if m.get("metric") == metric else {}

    def _memo(self, name: str, pooling: str, metric: str) -> dict[str, Any] | None:
        """A live run's `name` result as a dict, memoised here (Measurement recomputes matched
        references on every call); a snapshot's stored one, or None."""
        if self._m is None:
            return self._result(pooling, metric).get(name)
        key = (name, pooling, metric)
        if key not in self._cache:
            self._cache[key] = getattr(self._m, name)(pooling, metric).to_dict()
        return self._cache[key]

    def update_depth(self, pooling: str = "default", metric: str = "cka") -> dict[str, Any] | None:
        """`UpdateDepth.to_dict()` of this pooling, or None when the run does not hold it."""
        return self._memo("update_depth", pooling, metric)

    def matched_references(
        self, pooling: str = "default", metric: str = "cka"
    ) -> dict[str, Any] | None:
        """`MatchedReferences.to_dict()` of this pooling, or None when the run does not hold it."""
        return self._memo("matched_references", pooling, metric)

    def random_band(self, pooling: str = "default", metric: str = "cka") -> dict[str, Any]:
        """`Measurement.random_band` (random-weight null seeds), {} when there is none."""
        if self._m is not None:
            return self._m.random_band(pooling, metric)
        m = self.data.get("measurement") or {}
        if m.get("metric") != metric:
            return {}
        # the schema lets a file say null for the null and for one pooling's band: both absent
        return ((m.get("random_null") or {}).get("results") or {}).get(pooling) or {}

    def window_source(self) -> Any | None:
        """The run's data as a stored `tokens.WindowSource` (`measure --snapshot` writes it),
        checked, so an action is checked against the data without a tokenizer; else None."""
        from deffcore.inputs.texts import WindowSource

        stored = self.data.get("supply")
        try:
            return WindowSource.from_dict(stored) if isinstance(stored, dict) else None
        except (ValueError, KeyError, TypeError):
            return None

    def paired_bootstrap(self) -> Any | None:
        """The run's `paired.PairedBootstrap` (one bootstrap of its poolings and metrics on the
        same passages, SPEC section 15), or None when it has none (never computes one). A
        snapshot's stored one (`measure --bootstrap B --snapshot`) is checked, and None when it
        does not match this run's L and N."""
        if self._m is not None:
            return self._m.paired_latest()
        if not hasattr(self, "_paired"):
            from deffcore.core.errors import DeffError
            from deffcore.statistics.paired import PairedBootstrap

            pb, stored = None, self.data.get("paired")
            if isinstance(stored, dict):
                with contextlib.suppress(DeffError):
                    pb = PairedBootstrap.from_dict(stored)
            ok = pb is not None and (pb.layers, pb.n) == (self.layers, self.n)
            self._paired = pb if ok else None
        return self._paired

    def stored_bootstrap(
        self, pooling: str = "default", metric: str = "cka", K: int | None = None
    ) -> dict[str, Any] | None:
        """The passage bootstrap this run was stored with for this headline (`BootstrapResult
        .to_dict()`), or None: a live run's from its paired bootstrap, a snapshot's
        (`run_spread.stored_bootstrap`) else from its paired one."""
        if self._m is not None:
            pb = self._m.paired_latest()
            if pb is None or not pb.has(pooling, metric):
                return None
            return pb.result(pooling, metric, K).to_dict()
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
        """The run's table across similarity measures of this pooling
        (`statistics.measure_table.MeasureTable`, SPEC 17.4), or None (never computes one): a
        live run's computed or kept beside it (read again: it may come later)."""
        if self._m is not None:
            return self._m.stored_measure_table(pooling)
        from deffcore.statistics.measure_table import MeasureTable

        found = (self.data.get("measures") or {}).get(pooling)
        return MeasureTable.from_dict(found) if isinstance(found, dict) else None

    def atlas(self) -> Any | None:
        """The run's depth-use atlas (`deffcore.measures.atlas.Atlas`, SPEC 16), or None: a live
        run's stored beside it (read again each time: it may be computed later), a snapshot's
        carried in it (`to_snapshot` writes it when the run has one)."""
        if self._m is not None:
            from deffcore.views.atlas_read import stored_atlas

            return stored_atlas(self._m)
        from deffcore.measures.atlas import Atlas

        found = self.data.get("atlas")
        return Atlas.from_dict(found) if isinstance(found, dict) else None

    # -- computed from `similarity`, the same way for both kinds of run ------------------------

    def lag_profile(self, pooling: str = "default", metric: str = "cka") -> np.ndarray:
        from deffcore.measures.depth import lag_profile

        return lag_profile(self.similarity(pooling, metric))

    def deff_over_L_by_K(self, pooling: str = "default", metric: str = "cka") -> dict[int, float]:
        """D_eff(K)/L for every K = 1..L-1."""
        from deffcore.measures.depth import effective_depth

        S = self.similarity(pooling, metric)
        L = S.shape[0]
        return {K: effective_depth(S, K=K) / L for K in range(1, L)}

    def headline(
        self, pooling: str = "default", metric: str = "cka", K: int | None = None
    ) -> Headline:
        from deffcore.core.checks import check_int
        from deffcore.measures.depth import (
            effective_depth,
            gap_percent,
            lag_profile,
            reference_depth,
        )
        from deffcore.measures.similarity import cka_finite_sample_bias

        S = self.similarity(pooling, metric)
        L = S.shape[0]
        K = L - 1 if K is None else min(check_int(K, "K", 1), L - 1)  # "K must be ..."
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

    def trust(
        self,
        pooling: str = "default",
        metric: str = "cka",
        K: int | None = None,
        ci: tuple[float, float] | None = None,
        bootstrap_mean: float | None = None,
    ) -> Any:
        """How far to trust this headline (`trust_rule.trust_badge`): the bootstrap interval
        `ci` (and its replicates' mean) when one was computed, else the one the run was stored
        with (`stored_bootstrap`); unbiased CKA's D_eff/L beside linear CKA's when the run has
        it; the random-weight band when it has one."""
        from deffcore.statistics.trust_rule import trust_badge, with_supply

        if ci is None:
            boot = self.stored_bootstrap(pooling, metric, K)
            if boot is not None:
                ci, bootstrap_mean = (boot["low"], boot["high"]), boot["mean"]
        h = self.headline(pooling, metric, K)
        unbiased = None
        if metric == "cka":
            with contextlib.suppress(NotInRunError):  # a snapshot may lack unbiased CKA
                unbiased = self.headline(pooling, "unbiased_cka", K).deff_over_L
        band = self.random_band(pooling, metric) or {}
        seeds = len(band.get("seeds") or band.get("deff_over_L") or [])
        null = (band["low"], band["high"]) if seeds and {"low", "high"} <= set(band) else None
        t = trust_badge(
            self.n,
            self.d_model,
            metric=metric,
            value=h.deff_over_L,
            unbiased_value=unbiased,
            ci=ci,
            null_band=null,
            null_seeds=seeds,
            layers=h.layers,  # the gap's regime is part of the claim
            bootstrap_mean=bootstrap_mean if ci is not None else None,
        )
        return with_supply(t, self.spec or None, self.window_source())  # actions the data gives

    def identity(self, pooling: str = "default", metric: str = "cka") -> dict[str, Any]:
        """`run_identity` of this run and view (what a downloaded table or figure carries)."""
        return run_identity(self.spec, pooling=pooling, metric=metric)

    # -- in a notebook (`deffcore.views.notebook`) ---------------------------------------------

    def figure(self, name: str = "heatmap", **options: Any) -> Any:
        """The explorer's Plotly figure `name` ("heatmap", "lag", "gap", "controls") of this
        run; options: pooling, metric, K, paper (see `run_figure`), each checked by name."""
        from deffcore.views.notebook import figure_of

        return figure_of(self, name, options)

    def _repr_html_(self) -> str:
        """Jupyter's view: headline numbers, trust level and a small heatmap."""
        from deffcore.views.notebook import run_html

        return run_html(self)


def _rounded(x: Any) -> Any:
    return np.round(np.asarray(x, dtype=np.float64), _DECIMALS).tolist()


def shipped_digests() -> dict[str, str]:
    """{path under deffcore/data: sha256 of its bytes} of the shipped snapshots the one schema
    accepted when `scripts/build_shipped.py` wrote them (CHECKED_DIGESTS; {} without it)."""
    import json

    try:
        digests = json.loads(CHECKED_DIGESTS.read_text())
    except (OSError, ValueError):
        return {}
    return digests if isinstance(digests, dict) else {}


def _open_snapshot_file(path: Path) -> Run:
    """A snapshot file as a `Run`, checked by the one schema, unless it is a shipped file whose
    bytes hash to the digest recorded when they were checked (the same bytes, so the same
    verdict): the first screen opens the shipped run without importing pydantic. The bytes are
    read once, and the bytes hashed are the bytes parsed."""
    import hashlib
    import json

    raw = path.read_bytes()
    try:
        name = path.resolve().relative_to(DATA_DIR.resolve()).as_posix()
    except ValueError:  # not under deffcore/data: a file like any other
        name = None
    if name is not None and shipped_digests().get(name) == hashlib.sha256(raw).hexdigest():
        return Run._from_checked(json.loads(raw))
    from deffcore.views.run_schema import parse_snapshot_json

    return Run.from_snapshot(parse_snapshot_json(raw.decode("utf-8"), path.name), path.name)


def load_snapshot(path: Path | str = DEFAULT_RUN_PATH) -> Run | None:
    """The shipped default run, or None when the file is missing."""
    path = Path(path)
    if not path.is_file():
        return None
    return _open_snapshot_file(path)


def load_gallery(
    folder: Path | str = GALLERY_DIR, *, default: Path | str | None = DEFAULT_RUN_PATH
) -> list[Run]:
    """The precomputed runs a visitor can compare before running anything: the shipped
    default first, then every `*.json` snapshot in `folder` by file name; one per run key.

    A file that is not a readable snapshot of this format is skipped (a warning names it):
    a damaged gallery file must not take the app's first screen down with it.
    """
    import warnings

    paths = [Path(default)] if default is not None else []
    folder = Path(folder)
    paths += sorted(folder.glob("*.json")) if folder.is_dir() else []
    runs: list[Run] = []
    keys: set[str] = set()
    for path in paths:
        if not path.is_file():
            continue
        try:
            run = _open_snapshot_file(path)
        except (OSError, ValueError, KeyError, TypeError) as err:
            warnings.warn(f"Skipped gallery snapshot {path.name}: {err}", stacklevel=2)
            continue
        if run.key and run.key in keys:
            continue
        keys.add(run.key)
        runs.append(run)
    return runs
