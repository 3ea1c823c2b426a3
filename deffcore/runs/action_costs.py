"""What a page action will take, said before it starts (stage: runs).

    runs_cost([spec_add, spec_none], "cpu").line()   # the BOS on/off check: two runs
    diagnostics_cost(spec, "cpu").line()             # one eager pass over min(N, 64) passages
    forward_cost("smollm2-135m", tokens, "cpu")      # any lab's forward passes (pruning)

A run that is already in the cache costs nothing (it is read). A forward pass costs what this
machine measured (`planner.plan_run` with `calibrate="cached"`: a calibration of this model,
else one scaled from another model's by block parameters; never loads a model), and where this
machine has measured nothing yet, a prior: PRIOR_TOKENS_PER_S (SmolLM2-135M on a quiet
2-core CPU, BENCHMARKS.md "Extraction") scaled by block parameters, plus the model load's stage
estimate (`stage_times`). A task's runs share one model load. The diagnostic pass is the load
plus its passages at EAGER_FACTOR times the extraction rate (eager attention that returns every
block's probabilities; measured by benchmarks/bench_action_costs.py against extraction).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

#: SmolLM2-135M's extraction on a quiet 2-core CPU (tokens/s; BENCHMARKS.md, extraction).
PRIOR_TOKENS_PER_S = 600.0
#: The prior's model (its block parameters scale the prior to other models).
PRIOR_MODEL = "smollm2-135m"
#: The diagnostic pass's time per token against extraction's (eager attention, all weights):
#: 1.74 measured by benchmarks/bench_action_costs.py (SmolLM2, 64 x 128 tokens; BENCHMARKS.md).
EAGER_FACTOR = 1.75
#: Passages of the diagnostic pass (`diagnostics.DIAG_PASSAGES`, SPEC 11).
DIAG_PASSAGES = 64
#: Passages of the skip effect (`lenses.atlas_skip.SKIP_PASSAGES`, SPEC 16; a test keeps both).
SKIP_PASSAGES = 64
#: An action at or above this many seconds says its estimate before it starts.
SAY_ABOVE_S = 60.0
#: An action that writes this many bytes or more into the cache says so before it starts.
SAY_ABOVE_BYTES = 4_000_000


@dataclass(frozen=True)
class Cost:
    """Seconds an action will take here (None: unknown) and where the number comes from."""

    seconds: float | None
    source: str
    cached: bool = False  # everything it needs is already in the cache
    disk: int = 0  # bytes it writes into the cache folder (SPEC 14, "Writes said first")

    def line(self) -> str:
        """`about 4 min here (calibrated: …)`, `seconds: read from the cache`, or why unknown;
        then what it writes into the cache, when that is SAY_ABOVE_BYTES or more."""
        from deffcore.runs.planner import human_time

        if self.cached:
            return "seconds: read from the cache"
        if self.seconds is None:
            when = f"time unknown here ({self.source})"
        else:
            when = f"about {human_time(self.seconds)} here ({self.source})"
        writes = self.writes()
        return f"{when}; {writes}" if writes else when

    def writes(self) -> str:
        """`writes about X into the cache folder` when `disk` is SAY_ABOVE_BYTES or more, else
        "" (SPEC 14, "Writes said first"); a lab with its own time estimate says only this."""
        from deffcore.runs.planner import human_bytes

        if self.cached or self.disk < SAY_ABOVE_BYTES:
            return ""
        return f"writes about {human_bytes(self.disk)} into the cache folder"

    @property
    def long(self) -> bool:
        """Whether it may take a minute or more (unknown counts as long)."""
        return not self.cached and (self.seconds is None or self.seconds >= SAY_ABOVE_S)


def _prior(model: str, tokens: int, revision: str | None, factor: float = 1.0) -> Cost:
    from deffcore.inputs.model import model_size
    from deffcore.runs.stage_times import estimate

    size, ref = model_size(model, revision), model_size(PRIOR_MODEL)
    if size is None or ref is None:
        return Cost(None, "the model's size is not known before it loads")
    rate = PRIOR_TOKENS_PER_S * ref.block_params / size.block_params
    load = estimate("loading model", model) or 0.0
    source = (
        f"a prior: {PRIOR_MODEL} at {PRIOR_TOKENS_PER_S:,.0f} tokens/s on a quiet 2-core CPU, "
        "scaled by block parameters; nothing measured on this machine yet"
    )
    return Cost(load + factor * tokens / rate, source)


def forward_cost(
    model: str,
    tokens: int,
    device: str,
    *,
    revision: str | None = None,
    dtype: str = "float32",
    max_tokens: int = 128,
    factor: float = 1.0,
) -> Cost:
    """One model load and `tokens` tokens of forward passes (times `factor`) on `device`."""
    from deffcore.inputs.run_spec import RunSpec
    from deffcore.runs.planner import plan_run

    n = max(1, -(-int(tokens) // int(max_tokens)))
    spec = RunSpec(
        model=model, revision=revision, dataset="bbc-news", n=n, max_tokens=int(max_tokens),
        seed=0, dtype=dtype, passages="windows",
    )  # fmt: skip
    try:
        plan = plan_run(spec, device, live=False, calibrate="cached")
    except Exception:  # a model this machine cannot size: the prior says so
        plan = None
    disk = _assembly(model)
    if plan is None or plan.seconds is None:
        return replace(_prior(model, tokens, revision, factor), disk=disk)
    parts = plan.time_parts
    seconds = parts.get("load", 0.0) + factor * parts.get("extract", 0.0)
    return Cost(seconds, plan.time_source, disk=disk)


def _forward_of(spec: Any, tokens: int, device: str, factor: float = 1.0) -> Cost:
    """`forward_cost` of `tokens` tokens with the model, revision, dtype and length of `spec`."""
    return forward_cost(spec.model, tokens, device, revision=spec.revision, dtype=spec.dtype,
                        max_tokens=spec.max_tokens, factor=factor)  # fmt: skip


def _assembly(model: str) -> int:
    """Bytes of the packaged file loading `model` first joins into the cache (0: none)."""
    from deffcore.inputs.model import assembly_bytes

    try:
        return assembly_bytes(model)
    except Exception:  # a model spec this machine cannot resolve: the action says why
        return 0


def _entries(specs: Sequence[Any]) -> int:
    """Bytes of the cache entries of the runs `specs` (0 for a model of unknown size)."""
    from deffcore.inputs.model import model_size
    from deffcore.runs.planner import entry_bytes

    total = 0
    for spec in specs:
        try:
            size = model_size(spec.model, spec.revision)
        except Exception:  # not sized before it loads: its time line says so
            size = None
        total += 0 if size is None else entry_bytes(size, spec.n)
    return total


def _cached(spec: Any) -> bool:
    from deffcore.extraction import cache

    try:
        cache.load_meta(spec.key())
    except Exception:  # not stored, or not readable: it will be measured
        return False
    return True


def runs_cost(specs: Sequence[Any], device: str) -> Cost:
    """The runs `specs` (RunSpecs) one after another with one model load; cached ones are read."""
    todo = [s for s in specs if not _cached(s)]
    if not todo:
        return Cost(0.0, "cached", cached=True)
    cost = _forward_of(todo[0], sum(s.n * s.max_tokens for s in todo), device)
    return replace(cost, disk=cost.disk + _entries(todo))


def diagnostics_cost(spec: Any, device: str) -> Cost:
    """The diagnostic pass of the run `spec`: a model load, min(N, 64) passages eagerly."""
    return _forward_of(spec, min(spec.n, DIAG_PASSAGES) * spec.max_tokens, device, EAGER_FACTOR)


def with_variants(spec: Any, field: str, values: Sequence[Any]) -> list[Any]:
    """`spec` once per value of `field` (the BOS on/off check's bos=add and bos=none)."""
    return [replace(spec, **{field: v}) for v in values]


#: Seconds of one all-pairs matrix per SPEC 17 measure at N = 4,096, d = 576, 31 states, one
#: core of the 2-core sandbox (BENCHMARKS.md "Similarity measures beside CKA", full size; the
#: RSA, SVCCA and PWCCA cells were measured at load 12-21, so they price a loaded machine).
MEASURE_BENCH_S: dict[str, float] = {
    "cka": 5.89,
    "unbiased_cka": 5.81,
    "cosine": 0.50,
    "procrustes": 88.2,
    "mutual_knn": 80.0,
    "cknna": 96.7,
    "rsa": 671.0,
    "svcca": 572.0,
    "pwcca": 617.0,
}
#: The benchmark's size: passages, width, states.
MEASURE_BENCH_SIZE = (4096, 576, 31)


def _measure_work(measure: str, n: int, d: int, states: int) -> float:
    """The measure's work up to a constant (BENCHMARKS.md's "where the time goes"): an SVD of
    a min(N, d)^2 matrix per pair (procrustes, svcca, pwcca), an N x N cosine product per layer
    (mutual_knn, cknna), a sort of N(N-1)/2 distances per layer (rsa), streamed Gram products
    (the CKA family)."""
    import math

    r = min(n, d)
    pairs = states * (states - 1) / 2
    if measure in ("procrustes", "svcca", "pwcca"):
        return pairs * (n * r * r + 10 * r**3)
    if measure in ("mutual_knn", "cknna"):
        return states * n * n * d
    if measure == "rsa":
        m = n * (n - 1) / 2
        return states * m * math.log2(max(m, 2.0))
    return n * n * (states * d + states * states)


def measure_cost(measure: str, *, n: int, d: int, layers: int) -> Cost:
    """One all-pairs matrix of `measure` on L = `layers` states of N = `n` passages, width `d`
    (`Measurement.measure_similarity`): the benchmark's seconds (`MEASURE_BENCH_S`) scaled by
    the measure's work at this size against the benchmark's (`_measure_work`). A prior, never
    measured on this machine; a row of the table across measures costs B + 1 + permutations
    such passes."""
    bn, bd, bs = MEASURE_BENCH_SIZE
    ratio = _measure_work(measure, n, d, layers) / _measure_work(measure, bn, bd, bs)
    source = (
        f"scaled from BENCHMARKS.md's {MEASURE_BENCH_S[measure]:.0f} s at N = 4,096, d = 576 "
        "on one core of a loaded 2-core CPU"
    )
    return Cost(MEASURE_BENCH_S[measure] * ratio, source)


def atlas_cost(spec: Any, device: str, *, n: int, layers: int, part: str) -> Cost:
    """A Depth use button on the run `spec` of N = `n` passages and L = `layers` blocks (SPEC
    16): part "atlas" (one pass over the passages), "lens" (that pass with the logit lens) or
    "skip" (each block skipped on the first min(N, 64) passages: L + 1 passes of them). It
    writes the atlas file (`extraction.atlas.rows_bytes`) or the skip-effect file
    (`skip_bytes`), plus the model's file joined first (`forward_cost`)."""
    from deffcore.extraction.atlas import rows_bytes, skip_bytes

    if part not in ("atlas", "lens", "skip"):
        raise ValueError(f"part must be atlas, lens or skip, got {part!r}")
    if part == "skip":
        passages = min(int(n), SKIP_PASSAGES)
        tokens, disk = (layers + 1) * passages * spec.max_tokens, skip_bytes(passages, layers)
    else:
        tokens, disk = int(n) * spec.max_tokens, rows_bytes(n, layers, lens=part == "lens")
    cost = _forward_of(spec, tokens, device)
    return replace(cost, disk=cost.disk + disk)
