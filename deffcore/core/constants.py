"""Names shared by every module: poolings, metrics, the code version that enters cache keys."""

from __future__ import annotations

#: Every pooling control the project reports (SPEC section 2).
POOLINGS: tuple[str, ...] = (
    "default",
    "first_non_bos",
    "token_normed",
    "no_pos0",
    "top1_pc",
    "top3_pc",
)
#: The poolings computed during the forward pass; the PC controls derive from `default`.
EXTRACTED_POOLINGS: tuple[str, ...] = ("default", "first_non_bos", "token_normed", "no_pos0")
#: PC controls and how many principal directions each projects out.
PC_CONTROLS: dict[str, int] = {"top1_pc": 1, "top3_pc": 3}
#: Similarity metrics between layers (SPEC section 3).
METRICS: tuple[str, ...] = ("cka", "unbiased_cka", "cosine")
#: The similarity measures beyond the metrics (SPEC section 17.1), in the table's order.
SPEC17_MEASURES: tuple[str, ...] = ("procrustes", "mutual_knn", "cknna", "rsa", "svcca", "pwcca")
#: Every measure of the table across measures (SPEC 17.4): the metrics, then SPEC 17.1's.
TABLE_MEASURES: tuple[str, ...] = (*METRICS, *SPEC17_MEASURES)
#: The largest |S| a measure's matrix can hold (SPEC 17.1): 1 for every measure but CKNNA, whose
#: kNN-restricted HSIC is not an inner product, so Cauchy-Schwarz does not bound it (1.001 seen
#: on random states); a stored or shared matrix beyond its bound is refused.
SIMILARITY_BOUNDS: dict[str, float] = {"cknna": 2.0}


def similarity_bound(measure: str) -> float:
    """The largest |S| `measure`'s matrix can hold (`SIMILARITY_BOUNDS`, else 1)."""
    return SIMILARITY_BOUNDS.get(measure, 1.0)


#: Maximum lags reported by the lag-sensitivity check (SPEC section 8), plus K = L-1.
SENSITIVITY_LAGS: tuple[int, ...] = (5, 10, 15, 25)

#: How a dataset becomes passages (SPEC section 12): whole documents (truncated to max_tokens),
#: consecutive non-overlapping token windows of max_tokens tokens cut from each document, or
#: the same cut from all documents packed into one stream (README "Decisions"; not in the SPEC).
PASSAGE_MODES: tuple[str, ...] = ("documents", "windows", "packed")
#: The passage modes that cut token windows (deffcore.inputs.texts.cut_windows).
WINDOW_MODES: tuple[str, ...] = ("windows", "packed")
#: BOS handling (SPEC section 11.4): the tokenizer's choice, exactly one BOS, or none.
BOS_OPTIONS: tuple[str, ...] = ("default", "add", "none")

#: Fewer passages than this: noise whatever else (the trust rule's floor, calibrated: the
#: bootstrap and the spread model are not reliable below it); also a live run's first look.
NOISE_MIN_N: int = 32

#: A gap to F_L within this many points of 0 (without an interval) is "at the reference"
#: (SPEC section 11.5); with a bootstrap interval, the gap's interval containing 0 decides.
REGIME_TOLERANCE: float = 1.0

#: Bump when a change alters extracted numbers; it is part of every cache key.
CODE_VERSION = "2"

#: Format of a run's BOS diagnostics (`lenses.diagnostics_store`, SPEC 11); the snapshot
#: schema checks the current format's fields. 2: sink scores on passages long enough to beat
#: uniform attention; 3: Sun et al.'s criterion per activation (sun_share; the old sun_massive
#: applied it to mean_b m_b), Gu et al.'s metric.
DIAG_FORMAT = 3
