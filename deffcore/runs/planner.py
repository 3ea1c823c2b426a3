"""What a run will cost before it starts: time on this device, peak memory, disk; refusals.

    plan = plan_run(spec, device, batch_size=None, bootstrap=100, max_memory="8GiB")
    print(plan.line())          # one line: passages, tokens, time, memory, disk
    plan.refusal                # one sentence when it will not fit, else None

Everything here is computed from shapes (`deffcore.inputs.model`: L, d, d_ff, heads, vocab from
a config or GGUF header, never the weights) and, for time, from this machine's measured
throughput (`deffcore.runs.calibration`), so a plan that refuses never loads a model.

Time = model load + extraction (tokens / calibrated tokens per second) + the estimates shown
while it runs (one at each mark of `anytime.schedule`, priced by the calibration's two timed
estimates: a fixed part plus a part per multiply-add of the cheaper route,
`similarity.route_costs`) + the numbers computed after it (ANALYSIS_PASSES / ESTIMATE_PASSES
estimates' worth at N) + bootstraps (`bootstrap.bootstrap_costs` over the calibrated
similarity rate). Not priced: reading the dataset and cutting windows (about a second for
bbc-news). Without a calibration of this model, the time comes from this machine's last
finished run of it (`deffcore.runs.observed`: its extraction rate, its numbers scaled by N, the load
`stage_times` recorded), else, for a packaged model, from its prior measured on this class of
machine (`deffcore.runs.priors`: reading, assembling, loading and preparing priced too), else
its tokens per second are scaled from another calibration on this device by block parameters
(a forward costs about 2 multiply-adds per block parameter per token); the line says which.

Peak memory (bytes; float32 states; SPEC-independent engineering):

    extraction  max(weights + activations + pooled (1 + live), pooled (3 + live))
                weights = params x dtype bytes (+ the GGUF file while it is read); activations
                of one batch = b T (6 d + 3 d_ff) x dtype bytes + b H T^2 x 4 (attention
                scores); pooled = 4 extracted poolings x (L+1) N d x 4; live = 1 when
                anytime estimates keep their own copy of the rows; storing an entry holds the
                arrays, the npz buffer and its bytes (3 pooled)
    similarity  6 poolings x (L+1) N d x 4 (4 extracted + 2 PC controls) + a centred float32
                copy and the updates (2 L N d x 4) + one Gram strip (`similarity._gram_rows`
                rows x L x N x 4, within DEFAULT_BLOCK_ELEMENTS) + two float64 chunks of
                CONTRACT_ELEMENTS
    bootstrap   the similarity step's states + a centred copy + its strip, two float64 chunks
                and the (pairs x rows x B) accumulator (`bootstrap._weighted_gram_sums`) + the
                (B, L, N) float64 terms twice

Disk: the entry's states.npz, 4 x (L+1) N d x 4 bytes; while it runs its partial batches hold
as much again (removed when the entry lands); before it, a packaged file still in parts is
joined into the cache once (`assemble`, its size; SPEC 14, "Writes said first").

Refusal: the largest step above the limit (`--max-memory`, else the memory this machine has
available now: MemAvailable; on CUDA the device's free memory for extraction), or the entry
above the cache folder's free disk: one sentence saying which step needs how much.

GPU plans for another machine (`gpu_time`): the H200 figures of BENCHMARKS.md ("GPU check"),
scaled by block parameters from the larger packaged model measured there (Gemma-3-270M,
198,637 tokens/s at bfloat16, batch 256 x 64 tokens); small models are overhead-bound, so for
billion-parameter models that is an upper bound; the lower bound is a compute-bound forward
(2 flops per block parameter per token) at GPU_MFU of the H200's dense bfloat16 peak.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass, field
from typing import Any

from deffcore.core.errors import DeffError
from deffcore.inputs.model import ModelSize, model_size

#: Similarity passes `measure` makes after extraction: per pooling (6) the headline, the
#: updates' depth and the matched references' update profile (3), plus the trust badge's
#: unbiased check and the PC controls' SVDs (about 2).
ANALYSIS_PASSES = 20
#: Similarity passes per anytime estimate: per pooling (6) the linear trust (its value and
#: the unbiased check) and, at small N, the unbiased value shown (3).
ESTIMATE_PASSES = 18
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_UNITS = {"": 1, "b": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
#: Largest memory size a user may give (1 PiB: beyond any machine, far inside an int64).
MAX_BYTES = 2**50
#: The one-off stages of a run (`priors.ONE_OFF`, in run order) and their names in a plan's
#: `time_parts`.
STAGE_PARTS = (
    ("checking data", "read"),
    ("assembling", "assemble"),
    ("loading model", "load"),
    ("preparing", "prepare"),
)

#: The H200 figures of BENCHMARKS.md's GPU check (gemma3-270m, bfloat16, batch 256 x 64 tokens).
H200 = {
    "name": "one NVIDIA H200",
    "tokens_per_s": 198_637.0,
    "block_params": 100_270_080,  # Gemma-3-270M's blocks (`model_size`)
    "memory_bytes": 143_771 * 2**20,
    "peak_flops": 989e12,  # dense bfloat16
}
#: Share of the H200's peak a large, compute-bound forward reaches (the lower time bound).
GPU_MFU = 0.4


def parse_bytes(text: str) -> int:
    """'8GiB', '8G', '512 MB', '2e9' -> bytes (binary units: 1 GiB = 1 G = 2^30)."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmgt]?)(i?b?)\s*", str(text).lower())
    if m is None:
        raise DeffError(
            f"--max-memory must be a size such as 8GiB, 512MiB or 2e9 (bytes), got {text!r}."
        )
    value = float(m.group(1)) * _UNITS[m.group(2)]
    if not 1 <= value <= MAX_BYTES:  # 1e400 is inf; 0.5 would be 0 bytes
        raise DeffError(
            f"--max-memory must be from 1 byte to {MAX_BYTES // 2**50} PiB, got {text!r}."
        )
    return int(value)


def human_bytes(n: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def human_time(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    if s < 48 * 3600:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"


def available_memory() -> int | None:
    """Bytes of memory this machine can still give (`models.host_memory_bytes`: the
    `$DEFF_HOST_MEMORY_GIB` override, else MemAvailable, else the total), None when unknown."""
    from deffcore.inputs.model import host_memory_bytes

    return host_memory_bytes()


# ---------------------------------------------------------------------------------------------
# Memory and disk from shapes


def pooled_bytes(size: ModelSize, n: int, poolings: int = 4) -> int:
    """`poolings` pooled stacks (L+1, N, d) float32."""
    return poolings * (size.layers + 1) * n * size.d_model * 4


def device_bytes(
    size: ModelSize, n: int, max_tokens: int, batch: int, dtype: str, file_bytes: int = 0
) -> int:
    """Memory on the extraction's device: weights, one batch's activations, pooled buffers."""
    nbytes = _DTYPE_BYTES.get(dtype, 4)
    weights = size.params * nbytes + file_bytes
    b, T = batch, max_tokens
    act = b * T * (6 * size.d_model + 3 * size.d_ff) * nbytes + b * size.heads * T * T * 4
    return weights + act + pooled_bytes(size, n)


def extraction_bytes(
    size: ModelSize,
    n: int,
    max_tokens: int,
    batch: int,
    dtype: str,
    *,
    live: bool,
    file_bytes: int = 0,
) -> int:
    """Peak memory of the extraction step (module docstring)."""
    pooled = pooled_bytes(size, n)
    on_device = device_bytes(size, n, max_tokens, batch, dtype, file_bytes)
    return max(on_device + pooled * live, pooled * (3 + live))


def similarity_bytes(size: ModelSize, n: int) -> int:
    """Peak memory of the similarity step (module docstring)."""
    from deffcore.measures.similarity import CONTRACT_ELEMENTS, DEFAULT_BLOCK_ELEMENTS, _gram_rows

    L, d = size.layers, size.d_model
    states = pooled_bytes(size, n, poolings=6)
    copies = 2 * L * n * d * 4
    strip = min(DEFAULT_BLOCK_ELEMENTS, L * _gram_rows(n, L, DEFAULT_BLOCK_ELEMENTS) * n) * 4
    return states + copies + strip + 2 * CONTRACT_ELEMENTS * 8


def bootstrap_bytes(size: ModelSize, n: int, B: int) -> int:
    """Peak memory of a B-replicate passage bootstrap after the similarity step."""
    from deffcore.measures.similarity import CONTRACT_ELEMENTS, DEFAULT_BLOCK_ELEMENTS, _gram_rows

    L, d = size.layers, size.d_model
    pairs, budget = L * (L + 1) // 2, DEFAULT_BLOCK_ELEMENTS
    rows = max(1, min(_gram_rows(n, L, budget), budget // max(1, pairs * 2 * B)))
    width = max(1, min(budget, CONTRACT_ELEMENTS) // max(1, L * rows))
    work = L * rows * n * 4 + 2 * L * rows * width * 8 + pairs * rows * 2 * B * 8
    return pooled_bytes(size, n, poolings=6) + L * n * d * 4 + work + 2 * B * L * n * 8


def entry_bytes(size: ModelSize, n: int) -> int:
    """A complete cache entry: its states.npz (four extracted poolings, float32) and the
    depth-use atlas the extraction keeps beside it (`extraction.atlas.rows_bytes`, SPEC 14)."""
    from deffcore.extraction.atlas import rows_bytes

    return pooled_bytes(size, n) + rows_bytes(n, size.layers)


# ---------------------------------------------------------------------------------------------
# Time


def pass_cost(size: ModelSize, n: int) -> float:
    """Multiply-adds of one similarity pass at N passages (the cheaper route)."""
    from deffcore.measures.similarity import route_costs

    return min(route_costs(n, size.d_model, size.layers).values())


def numbers_seconds(
    size: ModelSize,
    n: int,
    cal: Any,
    *,
    marks: list[int],
    bootstrap: int | None,
    live_bootstrap: tuple[int, int] | None = None,
) -> float:
    """Seconds for the live estimates at `marks` (with `live_bootstrap` = (B, poolings)
    replicates at each) and the numbers at N after extraction (with a `bootstrap`), priced by
    a calibration `cal` (`calibration.Calibration`: its timed estimates and similarity rate).
    The numbers after extraction are ANALYSIS_PASSES / ESTIMATE_PASSES estimates' worth."""
    from deffcore.statistics.bootstrap import bootstrap_costs

    def boot(k: int, B: int) -> float:
        return min(bootstrap_costs(k, size.d_model, size.layers, B).values())

    seconds = sum(cal.estimate_seconds(pass_cost(size, k)) for k in marks)
    seconds += ANALYSIS_PASSES / ESTIMATE_PASSES * cal.estimate_seconds(pass_cost(size, n))
    work = 0.0
    if live_bootstrap and live_bootstrap[0]:
        work += sum(live_bootstrap[1] * boot(k, live_bootstrap[0]) for k in marks)
    if bootstrap:
        work += boot(n, bootstrap)
    return seconds + work / cal.similarity_rate


def gpu_time(size: ModelSize, tokens: int) -> tuple[float, float]:
    """(lower, upper) seconds to extract `tokens` on one H200 (module docstring)."""
    upper_rate = H200["tokens_per_s"] * H200["block_params"] / size.block_params
    lower_rate = GPU_MFU * H200["peak_flops"] / (2.0 * size.block_params)
    return tokens / max(lower_rate, upper_rate), tokens / upper_rate


@dataclass
class Plan:
    """The cost of one run (module docstring); `line()` says it in one line."""

    model: str
    n: int
    max_tokens: int
    device: str
    dtype: str
    batch: int
    size: ModelSize | None
    memory: dict[str, int] = field(default_factory=dict)
    limit: int | None = None
    limit_source: str = ""
    disk: int | None = None
    disk_free: int | None = None
    assemble: int = 0  # the packaged file joined into the cache first (SPEC 14, writes)
    seconds: float | None = None
    time_parts: dict[str, float] = field(default_factory=dict)
    time_source: str = ""
    refusal: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return self.n * self.max_tokens

    @property
    def fits(self) -> bool:
        return self.refusal is None

    def line(self) -> str:
        """What the run costs, or why it is refused, in one line."""
        if self.refusal:
            return f"Refused: {self.refusal}"
        head = (
            f"Plan: {self.model} on {self.n:,} passages x {self.max_tokens} tokens "
            f"({self.tokens:,} tokens at most)"
        )
        if self.seconds is None:
            when = f"time unknown ({self.time_source})" if self.time_source else "time unknown"
        else:
            extract = self.time_parts.get("extract", 0.0)
            when = (
                f"~{human_time(self.seconds)} on {self.device} (extraction "
                f"{human_time(extract)}; {self.time_source})"
            )
        parts = [head, when]
        if self.memory:
            peaks = ", ".join(f"{human_bytes(v)} {k}" for k, v in self.memory.items())
            limit = f" of {human_bytes(self.limit)} {self.limit_source}" if self.limit else ""
            parts.append(f"peak memory {peaks}{limit}")
        if self.disk is not None:
            free = f", {human_bytes(self.disk_free)} free" if self.disk_free is not None else ""
            parts.append(
                f"cache entry {human_bytes(self.disk)} ({human_bytes(2 * self.disk)} "
                f"while it runs{free})"
            )
        if self.assemble:
            parts.append(
                f"first the model's file, {human_bytes(self.assemble)}, joined into the cache"
            )
        return " · ".join(parts) + "."

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "n": self.n,
            "max_tokens": self.max_tokens,
            "tokens": self.tokens,
            "device": self.device,
            "dtype": self.dtype,
            "batch": self.batch,
            "size": None if self.size is None else self.size.to_dict(),
            "memory_bytes": dict(self.memory),
            "limit_bytes": self.limit,
            "limit_source": self.limit_source,
            "disk_bytes": self.disk,
            "disk_free_bytes": self.disk_free,
            "assemble_bytes": self.assemble,
            "seconds": self.seconds,
            "time_parts": dict(self.time_parts),
            "time_source": self.time_source,
            "fits": self.fits,
            "refusal": self.refusal,
            "line": self.line(),
            "notes": list(self.notes),
        }


def _limit(device: str, max_memory: int | None) -> tuple[int | None, str]:
    if max_memory is not None:
        return max_memory, "allowed (--max-memory)"
    if device.startswith("cuda"):
        try:
            import torch

            return int(torch.cuda.mem_get_info()[0]), "free on the GPU"
        except Exception:  # no CUDA here: the extraction's device limit is unknown
            return None, ""
    available = available_memory()
    return available, "available now" if available is not None else ""


def _refusal(plan: Plan) -> str | None:
    """One sentence for the first step that does not fit, else None."""
    if plan.limit is not None:
        for step, need in plan.memory.items():
            if need > plan.limit:
                return (
                    f"the {step} step of {plan.model} at N = {plan.n:,} x {plan.max_tokens} "
                    f"tokens needs about {human_bytes(need)}, more than the "
                    f"{human_bytes(plan.limit)} {plan.limit_source}; lower N or max tokens"
                    + (", or use a GPU or bfloat16." if step == "extraction" else ".")
                )
    need = None if plan.disk is None else 2 * plan.disk + plan.assemble
    if need is not None and plan.disk_free is not None and need > plan.disk_free:
        joined = " (with the model's file joined first)" if plan.assemble else ""
        return (
            f"the cache entry of {plan.model} at N = {plan.n:,} needs about "
            f"{human_bytes(need)} of disk while it runs{joined}, more than the "
            f"{human_bytes(plan.disk_free)} free in the cache folder; lower N or free space."
        )
    return None


def memory_plan(
    plan: Plan, *, live: bool, bootstrap: int | None, file_bytes: int = 0
) -> dict[str, int]:
    """{step: peak bytes} of the plan's run (its size, N, max tokens, batch and dtype) for
    extraction, similarity and (with B) the bootstrap."""
    size, n = plan.size, plan.n
    assert size is not None
    extraction = extraction_bytes(
        size, n, plan.max_tokens, plan.batch, plan.dtype, live=live, file_bytes=file_bytes
    )
    out = {"extraction": extraction, "similarity": similarity_bytes(size, n)}
    if bootstrap:
        out["bootstrap"] = bootstrap_bytes(size, n, bootstrap)
    return out


def _file_bytes(model: str) -> int:
    """Bytes of the GGUF file a packaged or .gguf model is read from (0 otherwise)."""
    from pathlib import Path

    from deffcore.inputs import model as gguf
    from deffcore.inputs.model import Kind, ModelSpec

    spec = ModelSpec.stored(model)
    if spec.kind not in (Kind.PACKAGED, Kind.GGUF):
        return 0  # a random null is built from the config, not read from the file
    try:
        if spec.kind is Kind.PACKAGED:  # its parts, never assembled to be measured
            return gguf.packaged_bytes(spec.text)
        path = Path(spec.text)
        return path.stat().st_size if path.is_file() else 0
    except OSError:
        return 0


def plan_run(
    spec: Any,
    device: str,
    *,
    batch_size: int | None = None,
    bootstrap: int | None = None,
    live: bool | None = None,
    max_memory: int | str | None = None,
    calibrate: str = "auto",
    known: dict[str, ModelSize] | None = None,
    live_bootstrap: tuple[int, int] | None = None,
) -> Plan:
    """The cost of a run of `spec` (a RunSpec) on `device` (module docstring).

    calibrate: "auto" (a cached calibration, else the short one is measured now: the model
    loads, and only when the memory fits), "cached" (never loads: a cached calibration or one
    scaled from another model's), "never" (no time). live: anytime estimates (default: in the
    window modes). known: model sizes for models this machine has no config of.
    live_bootstrap: (B, poolings) bootstrap replicates of the live estimates at each mark.
    """
    from deffcore.extraction.cache import batch_rows, prefix_refusal, schedule

    if calibrate not in ("auto", "cached", "never"):
        raise DeffError(f"calibrate must be 'auto', 'cached' or 'never', got {calibrate!r}.")
    limit_bytes = parse_bytes(max_memory) if isinstance(max_memory, str) else max_memory
    batch = batch_rows(spec.max_tokens, device, batch_size)
    windows = prefix_refusal(spec.passages, spec.dataset_spec) is None
    live = windows if live is None else live
    size = model_size(spec.model, spec.revision, known)
    plan = Plan(spec.model, spec.n, spec.max_tokens, device, spec.dtype, batch, size)
    if size is None:
        plan.time_source = "model size unknown here (no config on this machine)"
        plan.notes.append(
            "Memory and time need the model's size: give its config or a manifest size."
        )
        return plan
    plan.memory = memory_plan(
        plan, live=live, bootstrap=bootstrap, file_bytes=_file_bytes(spec.model)
    )
    plan.limit, plan.limit_source = _limit(device, limit_bytes)
    plan.disk = entry_bytes(size, spec.n)
    plan.assemble = _assembly_bytes(spec.model)
    plan.disk_free = _disk_free()
    plan.refusal = _refusal(plan)
    if plan.refusal is None and calibrate != "never":
        marks = schedule(spec.n, batch) if live else []  # N too: `measure` estimates it
        _price(plan, spec, marks, (bootstrap, live_bootstrap), calibrate, windows)
    return plan


def _assembly_bytes(model: str) -> int:
    """Bytes of the packaged file a run of `model` joins into the cache first (0: none)."""
    from deffcore.inputs.model import assembly_bytes

    try:
        return assembly_bytes(model)
    except (DeffError, OSError):  # the package is missing: the run says so when it starts
        return 0


def _disk_free() -> int | None:
    from deffcore.core.files import cache_dir

    folder = cache_dir()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return int(shutil.disk_usage(folder).free)
    except OSError:
        return None


def _price(plan: Plan, spec: Any, marks: list[int], boots: tuple, mode: str, windows: bool) -> None:
    """Fill the plan's time from a calibration (cached, measured now, or scaled)."""
    from deffcore.runs import calibration

    # the rate's setting: what keys a stored calibration, and what a new one measures
    setting = {"revision": spec.revision, "device": plan.device, "dtype": spec.dtype,
               "max_tokens": spec.max_tokens, "batch": plan.batch}  # fmt: skip
    key = calibration.calibration_key(spec.model, **setting)
    cal, source = calibration.cached(key), "calibrated"
    if cal is None and mode == "auto":
        cal, source = calibration.calibrate(spec.model, **setting), "calibrated now"
    if cal is not None:
        plan.time_source = f"{source}: {cal.describe()}"
    elif _price_observed(plan, spec, windows) or _price_prior(plan, spec):
        return
    else:
        scaled = _scaled(plan, spec)
        if scaled is None:
            plan.time_source = (
                "no calibration on this device yet (`measure --plan` without --no-calibrate, "
                "or the app's \"Measure this machine's speed\", measures one)"
            )
            return
        cal, plan.time_source = scaled
    size = plan.size
    assert size is not None
    parts = {
        "load": cal.load_s,
        "extract": plan.tokens / cal.tokens_per_s,
        "numbers": numbers_seconds(
            size, spec.n, cal, marks=marks, bootstrap=boots[0], live_bootstrap=boots[1]
        ),
    }
    plan.time_parts = parts
    plan.seconds = sum(parts.values())
    if not windows:
        plan.notes.append("Documents are truncated to max_tokens: the time is an upper bound.")


def _price_observed(plan: Plan, spec: Any, windows: bool) -> bool:
    """The plan's time from this machine's last finished run of the same model, device and
    dtype (`deffcore.runs.observed`): extraction at its rate, its numbers scaled by N, the load
    this machine last took (`stage_times`); else from another model's run on this device,
    its rate and load scaled by block parameters. False when no run finished here."""
    from deffcore.runs.observed import latest, on_device
    from deffcore.runs.stage_times import estimate

    seen, factor = latest(spec.model, plan.device, spec.dtype), 1.0
    source = "" if seen is None else seen.describe()
    if seen is None:  # another model's run here, scaled by block parameters
        assert plan.size is not None
        for other in on_device(plan.device, spec.dtype):
            ref = model_size(other.model)
            if ref is not None and ref.block_params and plan.size.block_params:
                seen, factor = other, ref.block_params / plan.size.block_params
                source = f"scaled by block parameters {other.describe()}"
                break
    if seen is None:
        return False
    load = estimate("loading model", spec.model)
    if load is None:
        load = (estimate("loading model", seen.model) or 0.0) / factor
    plan.time_parts = {
        "load": load,
        "extract": plan.tokens / (seen.tokens_per_s * factor),
        "numbers": seen.numbers_s * spec.n / seen.n,
    }
    plan.seconds = sum(plan.time_parts.values())
    plan.time_source = source
    if not windows:
        plan.notes.append("Documents are truncated to max_tokens: the time is an upper bound.")
    return True


def model_in_memory(model: str, device: str, dtype: str) -> bool:
    """Whether this process holds `model` loaded on `device` in `dtype` (its next run has no
    load stage: `deffcore.inputs.model`)."""
    from deffcore.inputs.model import MODELS

    return any(
        m["model"] == model and m["device"] == device and m["dtype"] == dtype for m in MODELS.held()
    )


def _price_prior(plan: Plan, spec: Any) -> bool:
    """The plan's time from the packaged model's measured prior for this machine's class
    (`deffcore.runs.priors`, SPEC 14, ETA): reading the data, assembling its file (only while it
    is still in parts), the load (this machine's last load when it has one, none when the
    model is in memory), preparing, extraction at the prior's rate and its numbers scaled by
    N. False when there is no prior for the model here."""
    from deffcore.inputs.model import needs_assembly
    from deffcore.runs import priors
    from deffcore.runs.stage_times import estimate

    found = priors.prior(spec.model, plan.device, spec.dtype)
    if found is None:
        return False
    try:
        assemble = needs_assembly(spec.model)
    except Exception:  # a packaged file that cannot be looked at: priced as if in parts
        assemble = True
    expected = priors.expected_run(
        found,
        spec.n,
        spec.max_tokens,
        plan.batch,
        load_s=estimate("loading model", spec.model),
        cached_model=model_in_memory(spec.model, plan.device, spec.dtype),
        assembled=not assemble,
    )
    stages = dict(expected.stages)
    first = min(plan.batch, spec.n) / expected.rate  # in "preparing" there, in "extract" here
    plan.time_parts = {part: stages.get(stage, 0.0) for stage, part in STAGE_PARTS}
    plan.time_parts["prepare"] = max(plan.time_parts["prepare"] - first, 0.0)
    plan.time_parts.update(extract=expected.extract_s + first, numbers=expected.numbers_s)
    plan.seconds = expected.total_s
    plan.time_source = found.describe()
    return True


def expected_of(plan: Plan) -> Any:
    """The plan's time as a run's expected parts (`priors.Expected`) for its progress, None
    when the plan has no time (SPEC 14, ETA)."""
    from deffcore.runs.priors import Expected

    if plan.seconds is None:
        return None
    parts = plan.time_parts
    stages = tuple((stage, parts.get(part, 0.0)) for stage, part in STAGE_PARTS)
    extract = float(parts.get("extract", 0.0))
    rate = plan.n / extract if extract > 0 else 0.0
    if rate > 0:  # the first batch is reported at its end: "preparing" holds it
        first = min(plan.batch, plan.n) / rate
        stages = (*stages[:3], ("preparing", float(parts.get("prepare", 0.0)) + first))
        extract -= first
    return Expected(
        stages=tuple((k, float(v)) for k, v in stages if v > 0),
        extract_s=extract,
        numbers_s=float(parts.get("numbers", 0.0)),
        rate=rate,
    )


def _scaled(plan: Plan, spec: Any) -> tuple[Any, str] | None:
    """The newest calibration of another model on this device, its extraction rate and load
    time scaled by block parameters (its estimate timings kept: they price passes)."""
    from dataclasses import replace

    from deffcore.runs import calibration

    assert plan.size is not None
    for cal in calibration.any_cached(plan.device, spec.dtype):
        ref = model_size(cal.key["model"])
        if ref is None:
            continue
        factor = ref.block_params / plan.size.block_params
        source = (
            f"scaled from {cal.key['model']} ({cal.describe()}) by block parameters "
            f"({ref.block_params / 1e6:,.0f}M -> {plan.size.block_params / 1e6:,.0f}M)"
        )
        return replace(
            cal, tokens_per_s=cal.tokens_per_s * factor, load_s=cal.load_s / factor
        ), source
    return None
