"""A difference of two runs, paired by passage when both hold the same passages (SPEC 15).

Stage: runs (it reads two `Measurement`s; the numbers are `deffcore.statistics.paired`'s).

    d = run_difference(baseline, variant, pooling="default", metric="cka", B=50)
    d.delta, d.interval, d.paired, d.why_unpaired     # gap(variant) - gap(baseline), points

Two runs hold the same passages, in the same order, when their specs differ only in what
does not change the token ids: the norm intervention (the same model and tokenizer), the
weights (`random:<m>:<seed>` reads with <m>'s tokenizer) or, in documents mode, the BOS option
(the same documents, one BOS token more or less). Then row a of one run and row a of the other
are one passage, and the difference gets one bootstrap of both (`paired.paired_bootstrap` on
the two runs' states, the same multisets). Otherwise (another N, seed, dataset, length, or BOS
option in a window mode, where the windows themselves move) the two are independent samples:
the difference comes from two independent bootstraps and says why it is unpaired.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from deffcore.inputs.model import ModelSpec
from deffcore.statistics.paired import (
    PairedDifference,
    difference_of,
    paired_bootstrap,
    unpaired_difference,
)

#: The spec fields that must agree for two runs to hold the same passages (every mode).
SAME_SAMPLE = ("dataset", "n", "seed", "passages", "max_tokens", "revision")


def _tokenizer_of(model: str) -> str:
    """The model whose tokenizer a run reads with (`random:<m>:<seed>` reads with <m>'s)."""
    spec = ModelSpec.stored(model)
    return spec.base.text if spec.base is not None else spec.text


def same_passages(a: Any, b: Any) -> str | None:
    """None when runs `a` and `b` (Measurements) hold the same passages in the same order;
    otherwise why not, in words."""
    sa, sb = a.spec, b.spec
    differ = [f for f in SAME_SAMPLE if getattr(sa, f, None) != getattr(sb, f, None)]
    if differ:
        return f"the runs differ in {', '.join(differ)}, so they hold other passages"
    if _tokenizer_of(sa.model) != _tokenizer_of(sb.model):
        return "the runs read with different tokenizers, so their passages differ"
    if sa.bos != sb.bos and sa.passages != "documents":
        return (
            f"bos={sa.bos} and bos={sb.bos} cut other windows (the BOS takes a token of each), "
            "so the windows differ"
        )
    if int(a.n) != int(b.n):
        return f"the runs kept {a.n} and {b.n} passages"
    kept = [getattr(m.pooled, "meta", {}).get("kept_indices") for m in (a, b)]
    if kept[0] is not None and kept[1] is not None and list(kept[0]) != list(kept[1]):
        return "the runs kept different passages (too-short ones dropped differently)"
    return None


def run_difference(
    a: Any,
    b: Any,
    *,
    pooling: str = "default",
    metric: str = "cka",
    K: int | None = None,
    B: int = 50,
    seed: int = 0,
) -> PairedDifference:
    """gap(b) - gap(a) of one pooling (points) with its interval: paired by passage when the
    runs hold the same passages (`same_passages`), else from independent bootstraps and
    `paired=False` with `why_unpaired`."""
    why = same_passages(a, b)
    if why is None:
        pb = paired_bootstrap(
            {"a": a.states(pooling), "b": b.states(pooling)}, metrics=(metric,), B=B, seed=seed
        )
        d = pb.difference(("b", metric), ("a", metric), K)
        return difference_of(d.delta, d.samples, a="variant", b="baseline", ci=pb.ci)
    one = paired_bootstrap({"a": a.states(pooling)}, metrics=(metric,), B=B, seed=seed)
    two = paired_bootstrap({"b": b.states(pooling)}, metrics=(metric,), B=B, seed=seed + 1)
    d = unpaired_difference(
        two.gap("b", metric, K), one.gap("a", metric, K), names=("variant", "baseline")
    )
    return replace(d, why_unpaired=why)
