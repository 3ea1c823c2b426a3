"""A run named by what tells it apart: labels, common labels, file-name slugs and stems."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from deffcore.inputs.model import Kind, ModelSpec
from deffcore.inputs.texts import DatasetKind, DatasetSpec

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


def _split_model(model: str) -> tuple[ModelSpec, str | None]:
    """`random:<base>:<seed>` -> (base, "random weights, init seed <seed>"); else (model, None).
    The base may hold colons itself (`random:loaded:my-ft@v3:1`, a notebook model's null)."""
    spec = ModelSpec.stored(model)
    if spec.base is not None:
        return spec.base, f"random weights, init seed {spec.seed}"
    return spec, None


def _short_dataset(dataset: str) -> str:
    """A dataset spec as a person names it: a local path by its file name (never the folder,
    which can be the cache's upload folder), with its `:column` kept; others as written."""
    text = str(dataset)
    kind = DatasetSpec.stored(text).kind
    if kind is DatasetKind.TEXTS:  # a notebook's list of strings (content hash)
        return f"texts {text[6:14]}"
    if kind is DatasetKind.HF or "/" not in text:
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
    if base.kind is Kind.LOADED:
        # a notebook model's fingerprint (deffcore.runs.external): the key's, not a name
        revision = None
    return {
        "model": base.text,
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
    model = ModelSpec.stored(full["model"])
    base = model.base if model.base is not None else model
    parts = [base.text.replace("/", "-")]
    if model.seed is not None:
        parts.append(f"random-s{model.seed}")
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
