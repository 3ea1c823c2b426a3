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

import contextlib
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deffcore.core.constants import METRICS, POOLINGS
from deffcore.core.paths import DATA_DIR

#: Bump when the snapshot layout changes; the loader rejects other versions.
SNAPSHOT_FORMAT = 1
DEFAULT_RUN_PATH = DATA_DIR / "default_run.json"
#: Decimals kept in the JSON: 1e-6 is far below any difference the app displays.
_DECIMALS = 6
#: Precomputed runs shown beside the default on first start (Runs, Gap, Compare), one
#: snapshot each; `scripts/make_gallery.sh` makes them with the CLI.
GALLERY_DIR = DATA_DIR / "gallery"
#: The `RunSpec` fields a view carries, and the values a snapshot made before a field existed
#: had (an older snapshot or cache entry without `passages` measured whole documents).
SPEC_FIELDS: tuple[str, ...] = (
    "model",
    "revision",
    "dataset",
    "n",
    "max_tokens",
    "seed",
    "dtype",
    "intervention",
    "passages",
    "bos",
)
SPEC_DEFAULTS: dict[str, Any] = {
    "revision": None,
    "dtype": "float32",
    "intervention": "none",
    "passages": "documents",
    "bos": "default",
}


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
        from deffcore.measures.depth import (
            effective_depth,
            gap_percent,
            lag_profile,
            reference_depth,
        )
        from deffcore.measures.similarity import cka_finite_sample_bias

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

    def trust(
        self,
        pooling: str = "default",
        metric: str = "cka",
        K: int | None = None,
        ci: tuple[float, float] | None = None,
    ) -> Any:
        """How far to trust this headline (`deffcore.trust_rule.trust_badge`): N against d, whether
        the CKA bias moves D_eff/L (against unbiased CKA, when the run has it), the bootstrap
        interval `ci` when one was computed, the random-weight band when the run has one."""
        from deffcore.statistics.trust_rule import trust_badge

        h = self.headline(pooling, metric, K)
        unbiased = None
        if metric == "cka":
            with contextlib.suppress(KeyError):  # a snapshot may lack unbiased CKA
                unbiased = self.headline(pooling, "unbiased_cka", K).deff_over_L
        band = self.random_band(pooling, metric) or {}
        seeds = len(band.get("seeds") or band.get("deff_over_L") or [])
        null = (band["low"], band["high"]) if seeds and {"low", "high"} <= set(band) else None
        return trust_badge(
            h.n,
            h.d_model,
            metric=metric,
            value=h.deff_over_L,
            unbiased_value=unbiased,
            ci=ci,
            null_band=null,
            null_seeds=seeds,
            layers=h.layers,  # the gap's regime is part of the claim
        )

    def identity(self, pooling: str = "default", metric: str = "cka") -> dict[str, Any]:
        """`run_identity` of this run and view (what a downloaded table or figure carries)."""
        return run_identity(self.spec, pooling=pooling, metric=metric)

    def figure(self, name: str = "heatmap", **options: Any) -> Any:
        """The explorer's Plotly figure `name` ("heatmap", "lag", "gap", "controls") of this
        run; options: pooling, metric, K, paper (see `deffcore.notebook.run_figure`)."""
        from deffcore.views.notebook import run_figure

        return run_figure(self, name, **options)

    def _repr_html_(self) -> str:
        """Jupyter's view: headline numbers, trust level and a small heatmap."""
        from deffcore.views.notebook import run_html

        return run_html(self)


class MeasurementView(RunView):
    """A live `deffcore.measurement.Measurement` (its similarity matrices are memoised there)."""

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


class SnapshotView(RunView):
    """A run read from a snapshot dict (see `snapshot`). `source` is "precomputed" (shipped
    with the app) or "shared" (`read_snapshot`, with the file's `sha256` and `path`)."""

    source = "precomputed"
    sha256 = ""
    path: Path | None = None

    def __init__(self, data: dict[str, Any]):
        if data.get("format") != SNAPSHOT_FORMAT:
            raise ValueError(
                f"Snapshot format {data.get('format')!r} is not {SNAPSHOT_FORMAT}; "
                "regenerate it with `python -m deffcore measure ... --snapshot PATH`."
            )
        self.data = data
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
        return m.get("random_null", {}).get("results", {}).get(pooling, {})


def _split_model(model: str) -> tuple[str, str | None]:
    """`random:<base>:<seed>` -> (base, "random weights, init seed <seed>"); else (model, None).
    The base may hold colons itself (`random:loaded:my-ft@v3:1`, a notebook model's null)."""
    text = str(model)
    base, sep, seed = text.removeprefix("random:").rpartition(":")
    if text.startswith("random:") and sep and base and seed.isdigit():
        return base, f"random weights, init seed {seed}"
    return text, None


def _short_dataset(dataset: str) -> str:
    """A dataset spec as a person names it: a local path by its file name (never the folder,
    which can be the cache's upload folder), with its `:column` kept; others as written."""
    text = str(dataset)
    if re.fullmatch(r"texts:[0-9a-f]{16}", text):  # a notebook's list of strings (content hash)
        return f"texts {text[6:14]}"
    if text.startswith("hf:") or "/" not in text:
        return text
    path, sep, column = text.rpartition(":")
    if not sep or "/" in column:  # no column suffix (a ':' inside the path is not one)
        path, column = text, ""
    name = Path(path).name
    name = name.split("_", 1)[-1] if "/.uploads/" in path else name  # `<hash>_<user's name>`
    return f"{name}:{column}" if column else name


def label_fields(spec: dict[str, Any]) -> dict[str, str]:
    """Every field that can tell two runs apart, as its displayed text, in display order.

    Fields at their default (documents, the tokenizer's BOS, no intervention, trained weights,
    float32, the hub's main revision) read as words too, so that a run that differs from
    another only by, say, `windows` still says what the other one used.
    """
    full = {**SPEC_DEFAULTS, **spec}
    base, weights = _split_model(full["model"])
    revision = full.get("revision")
    if str(base).startswith("loaded:"):
        revision = None  # a notebook model's fingerprint (deffcore.external): the key's, not a name
    return {
        "model": base,
        "weights": weights or "trained",
        "revision": f"rev {revision}" if revision else "main revision",
        "dataset": _short_dataset(full["dataset"]),
        "n": f"N={full['n']}",
        "max_tokens": f"T={full['max_tokens']}",
        "passages": str(full["passages"]),
        "bos": f"BOS {full['bos']}",
        "intervention": (
            "no intervention"
            if full["intervention"] in (None, "none")
            else f"intervention {full['intervention']}"
        ),
        "seed": f"seed {full['seed']}",
        "dtype": str(full["dtype"]),
    }


#: Fields a single run's label leaves out while they are at these (default) texts.
_QUIET = {
    "weights": "trained",
    "revision": "main revision",
    "passages": "documents",
    "bos": "BOS default",
    "intervention": "no intervention",
    "dtype": "float32",
}


def run_label(spec: dict[str, Any]) -> str:
    """Short human label of one run: `smollm2-135m · bbc-news · N=512 · T=128 · seed 0`, plus
    whatever is not at its default (`windows`, `BOS add`, `intervention ...`, a revision, a
    dtype); a random-weight null reads `random:smollm2-135m:1 · ...`."""
    fields = label_fields(spec)
    # one run alone: its model as the CLI spells it (`random:smollm2-135m:1`)
    fields["model"], fields["weights"] = str(spec["model"]), "trained"
    return " · ".join(v for k, v in fields.items() if _QUIET.get(k) != v)


def common_label(specs: list[dict[str, Any]]) -> str:
    """What every run in `specs` shares, once (`gemma3-270m · bbc-news · T=128`); quiet
    defaults left out as in `run_label`. Empty when nothing is shared or `specs` is empty."""
    if not specs:
        return ""
    all_fields = [label_fields(s) for s in specs]
    first = all_fields[0]
    shared = [
        v for k, v in first.items() if all(f[k] == v for f in all_fields) and _QUIET.get(k) != v
    ]
    return " · ".join(shared)


def run_labels(specs: list[dict[str, Any]]) -> list[str]:
    """One label per run that names only what differs between the runs, in the same order.

    A single run gets its full `run_label`. With several, a field is shown when its value is
    not the same for all runs (the shared part is `common_label`), so two random-weight seeds
    read `random weights, init seed 1` / `... seed 2`, and an intervention variant reads
    `intervention rms_norm` beside `no intervention`. Runs whose fields are all equal (the
    same run twice) are numbered `(copy 2)`, ..., so no two labels are ever the same.
    """
    if len(specs) <= 1:
        return [run_label(s) for s in specs]
    all_fields = [label_fields(s) for s in specs]
    differing = [k for k in all_fields[0] if len({f[k] for f in all_fields}) > 1]
    labels = [
        " · ".join(f[k] for k in differing) or run_label(s)
        for f, s in zip(all_fields, specs, strict=True)
    ]
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if seen[label] == 1 else f"{label} (copy {seen[label]})")
    return out


def run_slug(spec: dict[str, Any]) -> str:
    """The run's identity as a file-name stem, e.g. `smollm2-135m_bbc-news_N4096_T128_windows`.

    Only [A-Za-z0-9._-]; fields at their default are left out like in `run_label`, so a
    download of the default run is `smollm2-135m_bbc-news_N512_T128_seed0_<what>.csv`.
    """
    full = {**SPEC_DEFAULTS, **spec}
    base, weights = _split_model(full["model"])
    parts = [base.replace("/", "-")]
    if weights:
        parts.append(f"random-s{str(full['model']).rpartition(':')[2]}")
    if full.get("revision"):
        parts.append(f"rev-{full['revision']}")
    parts += [_short_dataset(full["dataset"]), f"N{full['n']}", f"T{full['max_tokens']}"]
    if full["passages"] != "documents":
        parts.append(str(full["passages"]))
    if full["bos"] != "default":
        parts.append(f"bos-{full['bos']}")
    if full["intervention"] not in (None, "none"):
        parts.append(f"int-{full['intervention']}")
    parts.append(f"seed{full['seed']}")
    if full["dtype"] != "float32":
        parts.append(str(full["dtype"]))
    slug = "_".join(re.sub(r"[^A-Za-z0-9.-]+", "-", str(p)).strip("-") for p in parts)
    return slug[:120]


def run_identity(spec: dict[str, Any], *, pooling: str, metric: str) -> dict[str, Any]:
    """The columns a downloaded table carries so it says which run and view it came from."""
    full = {**SPEC_DEFAULTS, **spec}
    return {
        "run": run_label(full),
        **{k: full[k] for k in SPEC_FIELDS},
        "dataset": _short_dataset(full["dataset"]),
        "pooling": pooling,
        "metric": metric,
    }


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
            data = json.loads(path.read_text())
            view = SnapshotView(data) if isinstance(data, dict) else None
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


def download_stem(
    spec: dict[str, Any], what: str, *, pooling: str | None = None, metric: str | None = None
) -> str:
    """A download's file-name stem (and the figure's widget key) naming the run and the view,
    e.g. `smollm2-135m_bbc-news_N4096_T128_windows_seed0_default_cka_heatmap`."""
    view = [re.sub(r"[^A-Za-z0-9._-]+", "-", p) for p in (pooling, metric) if p]  # no spaces
    return "_".join([run_slug(spec), *view, re.sub(r"[^A-Za-z0-9.-]+", "-", what)])


#: The fields that make an identity a run's (`run_identity`), so its stem is the run's slug.
_RUN_IDENTITY = frozenset({"model", "dataset", "n", "max_tokens"})
#: Human labels an identity carries for its CSV columns, never in a file name.
_LABEL_KEYS = frozenset({"run", "runs", "label"})


def identity_stem(identity: dict[str, Any], what: str) -> str:
    """The file-name stem of a download tagged with `identity` (the explorer's one download
    helper, `explorer.cards.show_figure`): a run's identity (`run_identity`) gives
    `download_stem`; any other (a lab's settings, a construction's knobs, a comparison) its
    values in order, numbers after their key: `synthetic-story_h0_L24_N256_d64_heatmap`."""
    if set(identity) >= _RUN_IDENTITY:
        return download_stem(
            dict(identity), what, pooling=identity.get("pooling"), metric=identity.get("metric")
        )
    parts = []
    for key, value in identity.items():
        if value is None or value == "" or key in _LABEL_KEYS:  # labels: CSV columns only
            continue
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        parts.append(f"{key}{value:g}" if numeric else str(value))
    parts.append(what)
    stem = "_".join(re.sub(r"[^A-Za-z0-9._-]+", "-", p).strip("-") for p in parts)
    return stem[:150]
