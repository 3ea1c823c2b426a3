"""What the chosen data can give: an action never asks for more passages (SPEC section 15).

Stage: inputs (it reads the dataset and the tokenizer, never a model's weights).

    passages_action(16_384, spec)
    # "use ≥ 16,384 passages: bbc-news gives 7,741 windows of 128 tokens here; 16,637 windows
    #  of 64 tokens would give them, or a larger corpus (an hf: dataset)"

Every "use ≥ n passages" the project says (the trust sentence, the BOS answer, the app, the
CLI) goes through `passages_action`: when the run's data, passage mode and length can yield n
passages, the action is just that; when they cannot, it says how many they yield and what
would give n: shorter windows (the longest length that gives n, halving from the run's),
packed windows (a window may span two documents: more windows of long lengths), windows
instead of whole documents, or a larger corpus such as an `hf:` dataset. The counts come from
the tokenizer alone (`texts.window_source`: one tokenisation, memoised, serves every length
and mode); a streamed `hf:` dataset cannot be counted offline, nor a packaged model's data
before its file is assembled by a run (the count never writes that file), so its action is n
alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from deffcore.core.constants import WINDOW_MODES

#: Shortest window the alternatives ever propose (tokens).
MIN_WINDOW = 16
#: What always gives more passages.
LARGER_CORPUS = (
    "a larger corpus (an hf: dataset, e.g. hf:Salesforce/wikitext:wikitext-103-raw-v1:train)"
)


@dataclass(frozen=True)
class Supply:
    """How many passages a run's choice yields (None: not countable here) and the unit."""

    available: int | None
    unit: str  # "windows of 128 tokens", "documents"


def _fields(spec: Any) -> dict[str, Any]:
    if isinstance(spec, Mapping):
        return dict(spec)
    return {
        k: getattr(spec, k, None)
        for k in ("model", "revision", "dataset", "max_tokens", "passages", "bos", "seed")
    }


def _source(f: Mapping[str, Any]) -> Any:
    from deffcore.inputs.model import ModelSpec, needs_assembly
    from deffcore.inputs.texts import window_source

    if needs_assembly(ModelSpec.parse(str(f["model"])).trained.text):
        # its tokenizer lies in a packaged file not yet assembled: an action is never worth
        # writing that file into the cache (hundreds of MB), so the data is not counted here
        raise LookupError(f"{f['model']}'s packaged file is not assembled")
    return window_source(
        str(f["model"]), str(f["dataset"]), str(f.get("bos") or "default"), f.get("revision")
    )


def supply(spec: Any, source: Any = None) -> Supply:
    """The passages `spec` (a RunSpec or its fields) can yield; None when not countable here
    (a streamed hf: dataset, a tokenizer that cannot load). `source`: the data's
    `texts.WindowSource` when the caller holds it (no tokenizer is loaded then)."""
    from deffcore.inputs.texts import DatasetSpec

    f = _fields(spec)
    dataset, mode = str(f.get("dataset") or ""), str(f.get("passages") or "documents")
    T = int(f.get("max_tokens") or 0)
    unit = f"windows of {T} tokens" if mode == "windows" else (
        f"packed windows of {T} tokens" if mode == "packed" else "documents"
    )  # fmt: skip
    if not dataset or DatasetSpec.stored(dataset).streamed:
        return Supply(None, unit)
    try:
        if mode in WINDOW_MODES:
            return Supply((source or _source(f)).count(T, mode), unit)
        if source is not None:
            return Supply(len(source.bodies), unit)
        from deffcore.inputs.texts import all_passages

        return Supply(len(all_passages(dataset)), unit)
    except Exception:  # not countable here (no tokenizer offline, a file gone): say n alone
        return Supply(None, unit)


def _alternatives(f: Mapping[str, Any], need: int, source: Any = None) -> list[str]:
    """What would give `need` passages from the same corpus, best first."""
    out: list[str] = []
    mode, T = str(f.get("passages") or "documents"), int(f.get("max_tokens") or 0)
    try:
        source = source or _source(f)
    except Exception:
        return out
    if mode != "packed":
        packed = source.count(T, "packed")
        if packed >= need:
            out.append(f"packed windows of {T} tokens ({packed:,})")
    if mode == "documents":
        windows = source.count(T, "windows")
        if windows >= need:
            out.append(f"token windows of {T} tokens ({windows:,})")
    length = T // 2
    while length >= MIN_WINDOW and length > source.specials:
        got = source.count(length, "packed" if mode == "packed" else "windows")
        if got >= need:
            kind = "packed windows" if mode == "packed" else "windows"
            out.append(f"{kind} of {length} tokens ({got:,})")
            break
        length //= 2
    return out


def passages_action(need: int, spec: Any = None, source: Any = None) -> str:
    """`use ≥ need passages`, checked against what `spec`'s data can yield (module docstring);
    without a spec (numbers alone), the plain action. `source`: see `supply`."""
    plain = f"use ≥ {int(need):,} passages"
    if spec is None or not _fields(spec).get("dataset"):
        return plain
    have = supply(spec, source)
    if have.available is None or have.available >= need:
        return plain
    f = _fields(spec)
    ways = [*_alternatives(f, int(need), source), LARGER_CORPUS]
    shown = str(f.get("dataset"))
    shown = Path(shown).name if "/" in shown else shown  # a file by its name, never its folder
    return (
        f"{plain}: {shown} gives {have.available:,} {have.unit} here; "
        f"{' or '.join(ways)} would give them"
    )
