"""Short-pretraining norm probes (paper Table S8): does a Gemma-style model trained briefly from
random initialisation develop the pretrained model's anomaly under any norm variant?

A small Gemma-3 text model (transformers `Gemma3ForCausalLM` from a `Gemma3TextConfig`: RMSNorm
pre- and post-norms around attention and MLP, QK norms, sliding/global attention layers,
embeddings scaled by sqrt(d)) is trained from its default random initialisation under each of
the four norm variants of Table S6/S8 and several seeds, on BBC-news token windows; at every
evaluation the lab records the validation loss and, on fixed probe windows, the gap to F_L of
every pooling control, D_eff/L and the largest position-0 norm ratio.

The variants are the same as the inference-time interventions (`deffcore.inputs.interventions`):
"no_post" makes the post-attention and post-feed-forward norms identities, "no_qk" the
query/key norms, "no_post_no_qk" both. Here they are applied for the *whole* run, training
and measurement (the hooks pass the norm's input through, so its weight gets no gradient and
the block trains as if the norm were absent).

Decisions:
- Data: the BBC-news documents split by a fixed permutation (seed 1234, independent of the
  training seed): 90% train, 10% validation. Both are cut into token windows of `block_size`
  tokens exactly as a `windows` run (SPEC 12: each window starts with the tokenizer's BOS).
  Training batches are drawn with the run's seed; the probe windows (`n_probe`) and validation
  batches are fixed across runs and steps.
- Measurement: `deffcore.extraction.forward.extract_pooled` on the probe windows (the model
  wrapped as a `LoadedModel`; h_L before the final norm as always), then per pooling of
  `deffcore.core.constants.POOLINGS` the depth summary of the lab's metric; `max_pos0_ratio`
  is the maximum over h_0 .. h_L of the position-0 norm ratio (SPEC 2).
- Optimiser: AdamW (beta2 = 0.95, weight decay 0.1), linear warm-up then cosine decay to
  lr/10, gradient clipping at 1 (`deffcore.labs.training.train_steps`).
- Results are stored (`deffcore.labs.store`, lab "pretrain", keyed by every setting except
  `threads` (which changes the speed, not the numbers), the device kind and the BBC text's
  content id): a repeated probe is read back (`cached`), and the app shows stored probes. A
  probe given its own `data` is never stored (the key could not name that data).
- Presets: "cpu" (a 6-block, d = 64 model with the byte tokenizer; a few minutes on 2 cores),
  "tiny" (tests), "gpu" (Gemma-3-270M's own shape and Gemma-3 tokenizer, the paper's model,
  with a short budget; see the README for what still differs from the paper's setting).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from deffcore.core.constants import PC_CONTROLS, POOLINGS
from deffcore.core.errors import DeffError
from deffcore.extraction.forward import extract_pooled
from deffcore.inputs.interventions import INTERVENTIONS, PAPER_LABELS, norm_intervention
from deffcore.inputs.model import LoadedModel, byte_level_tokenizer, load_tokenizer
from deffcore.inputs.texts import cut_windows, dataset_identity
from deffcore.labs import store as lab_store
from deffcore.labs.training import bbc_documents, evaluating, from_preset, train_grid, train_steps
from deffcore.measures.controls import apply_pc_control
from deffcore.measures.depth import depth_summary
from deffcore.measures.similarity import similarity_matrix
from deffcore.views.paper import paper_norm_probe

ProgressFn = Callable[[int, int, str], None]
#: Fixed seed of the document split, the probe windows and the validation batches.
DATA_SEED = 1234


@dataclass
class PretrainSettings:
    """One probe sweep: model shape, data, budget, variants and seeds."""

    variants: tuple[str, ...] = ("none", "no_post", "no_qk", "no_post_no_qk")
    seeds: tuple[int, ...] = (0, 1, 2)
    tokenizer: str = "byte"  # "byte" (built-in, 259 ids) or "gemma3" (the packaged GGUF's)
    layers: int = 6
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 1
    head_dim: int = 16
    intermediate: int = 256
    sliding_window: int = 32
    block_size: int = 64
    batch_size: int = 16
    iters: int = 300
    eval_interval: int = 100
    eval_batches: int = 4
    lr: float = 3e-3
    warmup: int = 30
    n_probe: int = 128
    metric: str = "cka"
    device: str = "cpu"
    dtype: str = "float32"
    threads: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


PRESETS: dict[str, PretrainSettings] = {
    "cpu": PretrainSettings(),
    "tiny": PretrainSettings(
        variants=("none", "no_post"),
        seeds=(0,),
        layers=3,
        hidden=32,
        heads=2,
        head_dim=16,
        intermediate=64,
        sliding_window=8,
        block_size=16,
        batch_size=4,
        iters=4,
        eval_interval=2,
        eval_batches=1,
        n_probe=16,
    ),
    # Gemma-3-270M's shape (18 blocks, d = 640, 4 heads of 256, 1 KV head, MLP 2048, window
    # 512, vocabulary 262,144) and tokenizer; 2,000 steps of 32 x 512 tokens (33M tokens).
    "gpu": PretrainSettings(
        tokenizer="gemma3",
        layers=18,
        hidden=640,
        heads=4,
        kv_heads=1,
        head_dim=256,
        intermediate=2048,
        sliding_window=512,
        block_size=512,
        batch_size=32,
        iters=2000,
        eval_interval=500,
        eval_batches=20,
        lr=1e-3,
        warmup=200,
        n_probe=1024,
        device="cuda",
        dtype="bfloat16",
    ),
}


def settings_from(preset: str = "cpu", **overrides: Any) -> PretrainSettings:
    """A preset with some fields replaced (None values are ignored)."""
    return from_preset(PRESETS, preset, "pretraining", overrides)


def check_settings(s: PretrainSettings) -> None:
    """Everything a sweep needs, checked before any data or model is built (one sentence)."""
    bad = [v for v in s.variants if v not in INTERVENTIONS]
    if bad or not s.variants:
        raise DeffError(
            f"Unknown norm variant(s) {', '.join(bad) or '(none given)'}; choose from "
            f"{', '.join(INTERVENTIONS)}."
        )
    if not s.seeds:
        raise DeffError("The pretraining probe needs at least one seed.")
    if s.tokenizer not in ("byte", "gemma3"):
        raise DeffError(f"Unknown tokenizer {s.tokenizer!r}; choose byte or gemma3.")
    if s.layers < 2 or s.n_probe < 4 or s.block_size < 4:
        raise DeffError("The probe needs at least 2 layers, 4 probe windows of 4 tokens.")
    if s.heads % s.kv_heads:
        raise DeffError(f"--heads ({s.heads}) must be a multiple of --kv-heads ({s.kv_heads}).")
    if s.device.startswith("cuda") and not torch.cuda.is_available():
        raise DeffError("The settings ask for a CUDA device, and none is available here.")


# ---------------------------------------------------------------------------------------------
# Model and data


def gemma_config(s: PretrainSettings, vocab_size: int, special: dict[str, int]) -> Any:
    """The Gemma3TextConfig of the probe model."""
    from transformers import Gemma3TextConfig

    return Gemma3TextConfig(
        vocab_size=vocab_size,
        hidden_size=s.hidden,
        intermediate_size=s.intermediate,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads,
        head_dim=s.head_dim,
        query_pre_attn_scalar=s.head_dim,
        sliding_window=s.sliding_window,
        max_position_embeddings=max(2 * s.block_size, 128),
        tie_word_embeddings=True,
        attn_implementation="sdpa",
        **special,
    )


def probe_tokenizer(name: str) -> Any:
    if name == "byte":
        return byte_level_tokenizer(add_bos=True)
    return load_tokenizer("gemma3-270m")


@dataclass
class TokenData:
    """Token windows (W, T) int64 of the train and validation documents."""

    train: torch.Tensor
    val: torch.Tensor


def token_data(tokenizer: Any, block_size: int, documents: list[str] | None = None) -> TokenData:
    """BBC-news (or `documents`) split by document, cut into windows (module docstring)."""
    if documents is None:
        documents = bbc_documents()
    order = np.random.default_rng(DATA_SEED).permutation(len(documents))
    n_val = max(len(documents) // 10, 1)
    val_docs = [documents[i] for i in order[:n_val]]
    train_docs = [documents[i] for i in order[n_val:]]
    out = []
    for docs in (train_docs, val_docs):
        windows = cut_windows(tokenizer, docs, block_size, mode="windows")
        if len(windows) < 2:
            raise DeffError(f"Too few token windows of {block_size} tokens in the text.")
        out.append(torch.tensor(windows, dtype=torch.long))
    return TokenData(train=out[0], val=out[1])


def _special_ids(tokenizer: Any) -> dict[str, int]:
    names = ("pad_token_id", "bos_token_id", "eos_token_id")
    return {n: int(getattr(tokenizer, n)) for n in names if getattr(tokenizer, n, None) is not None}


def build_model(s: PretrainSettings, tokenizer: Any, seed: int) -> torch.nn.Module:
    """A freshly initialised probe model (the architecture's default init, seeded)."""
    from transformers import Gemma3ForCausalLM

    vocab = len(tokenizer)
    config = gemma_config(s, vocab, _special_ids(tokenizer))
    torch.manual_seed(seed)
    return Gemma3ForCausalLM(config).to(device=s.device, dtype=getattr(torch, s.dtype))


# ---------------------------------------------------------------------------------------------
# Measurement


def _as_loaded(model: torch.nn.Module, tokenizer: Any, s: PretrainSettings, name: str) -> Any:
    return LoadedModel(
        spec=name,
        revision=None,
        model=model,
        tokenizer=tokenizer,
        layers=s.layers,
        d_model=s.hidden,
        architecture=type(model).__name__,
        weights_id=name,
        device=s.device,
        dtype=s.dtype,
    )


def probe_depth(loaded: Any, probe: torch.Tensor, metric: str = "cka") -> dict[str, float]:
    """gap% and D_eff/L of every pooling, max position-0 norm ratio, on the probe windows."""
    with evaluating(loaded.model):
        pooled = extract_pooled(loaded, None, max_tokens=probe.shape[1], token_ids=probe.tolist())
    out: dict[str, float] = {}
    for pooling in POOLINGS:
        if pooling in PC_CONTROLS:
            states = apply_pc_control(pooled.pooled["default"], pooling)[1:]
        else:
            states = pooled.pooled[pooling][1:]
        summary = depth_summary(similarity_matrix(states, metric))
        out[f"gap_{pooling}"] = summary.gap_pct
        out[f"deff_over_L_{pooling}"] = summary.deff_over_L
    out["max_pos0_ratio"] = float(np.nanmax(np.asarray(pooled.pos0_norm_ratio, dtype=float)))
    return out


@torch.no_grad()
def _val_loss(model: torch.nn.Module, batches: list[torch.Tensor]) -> float:
    with evaluating(model):
        losses = [float(model(input_ids=b, labels=b, use_cache=False).loss) for b in batches]
    return float(np.mean(losses))


# ---------------------------------------------------------------------------------------------
# Training


def train_probe(
    variant: str,
    seed: int,
    s: PretrainSettings,
    tokenizer: Any,
    data: TokenData,
    *,
    tick: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Train one (variant, seed) model; one record per evaluation (step 0 included)."""
    model = build_model(s, tokenizer, seed)
    loaded = _as_loaded(model, tokenizer, s, f"pretrain:{variant}:{seed}")
    fixed = torch.Generator().manual_seed(DATA_SEED)
    probe = data.val[torch.randperm(len(data.val), generator=fixed)[: s.n_probe]]
    if len(probe) < 4:
        raise DeffError(f"Only {len(probe)} validation windows; the probe needs at least 4.")
    val = [
        data.val[torch.randint(len(data.val), (s.batch_size,), generator=fixed)].to(s.device)
        for _ in range(s.eval_batches)
    ]
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=(0.9, 0.95), weight_decay=0.1)
    gen = torch.Generator().manual_seed(seed)
    records: list[dict[str, Any]] = []

    def evaluate(step: int) -> None:
        rec = {"variant": variant, "seed": seed, "step": step}
        rec["tokens"] = step * s.batch_size * s.block_size
        rec["val_loss"] = _val_loss(model, val)
        rec.update(probe_depth(loaded, probe, s.metric))
        records.append(rec)

    def batch_loss() -> torch.Tensor:
        batch = data.train[torch.randint(len(data.train), (s.batch_size,), generator=gen)]
        batch = batch.to(s.device)
        return model(input_ids=batch, labels=batch, use_cache=False).loss

    with norm_intervention(model, variant):
        train_steps(
            model, opt, batch_loss, evaluate, iters=s.iters, eval_interval=s.eval_interval,
            lr=s.lr, warmup=s.warmup, tick=tick,
        )  # fmt: skip
    return records


# ---------------------------------------------------------------------------------------------
# The sweep and its summary

#: Table S8's columns, in its order.
COLUMNS: tuple[str, ...] = (*(f"gap_{p}" for p in POOLINGS), "max_pos0_ratio", "val_loss")


@dataclass
class PretrainResult:
    settings: PretrainSettings
    records: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    tokens_per_run: int = 0
    #: True when read back from the lab store instead of trained
    cached: bool = False

    def final_table(self) -> list[dict[str, Any]]:
        """Per variant, each column at the last step: mean and sd (ddof 1) over seeds, beside
        the paper's Table S8 value where it has one."""
        paper = paper_norm_probe("Table S8")
        last = max(r["step"] for r in self.records)
        rows = []
        for variant in self.settings.variants:
            final = [r for r in self.records if r["variant"] == variant and r["step"] == last]
            if not final:
                continue
            row: dict[str, Any] = {"variant": variant, "seeds": len(final), "step": last}
            published = paper.get(PAPER_LABELS[variant], {})
            for col in COLUMNS:
                vals = np.array([r[col] for r in final], dtype=np.float64)
                row[col] = float(vals.mean())
                row[f"{col}_sd"] = float(vals.std(ddof=1)) if len(vals) > 1 else math.nan
                key = col.removeprefix("gap_")
                row[f"paper_{col}"] = published.get(key, {}).get("value")
                row[f"paper_{col}_sd"] = published.get(key, {}).get("sd")
            rows.append(row)
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "lab": "pretrain",
            "settings": self.settings.to_dict(),
            "seconds": self.seconds,
            "tokens_per_run": self.tokens_per_run,
            "final": self.final_table(),
            "records": self.records,
            "cached": self.cached,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PretrainResult:
        """The inverse of `to_dict` (for stored results; `final` is recomputed)."""
        fields = dict(d["settings"])
        for name in ("variants", "seeds"):
            fields[name] = tuple(fields[name])
        return cls(
            settings=PretrainSettings(**fields),
            records=[dict(r) for r in d["records"]],
            seconds=float(d["seconds"]),
            tokens_per_run=int(d["tokens_per_run"]),
        )


def pretrain_identity(s: PretrainSettings) -> dict[str, Any]:
    """The plain values that determine a probe (its key in the lab store): every setting but
    `threads`, the device kind (cuda:0 and cuda:1 train the same) and the text's content id."""
    settings = {k: v for k, v in s.to_dict().items() if k != "threads"}
    settings["device"] = str(s.device).split(":")[0]
    return {
        "settings": settings,
        "dataset_id": dataset_identity("bbc-news")["content_id"],
        "data_seed": DATA_SEED,
    }


def stored_probes() -> list[PretrainResult]:
    """Every stored probe, newest first (marked `cached`)."""
    out = []
    for record in lab_store.list_results("pretrain"):
        try:
            result = PretrainResult.from_dict(record["result"])
        except (KeyError, TypeError, ValueError):
            continue  # stored by an older version
        result.cached = True
        out.append(result)
    return out


def pretrain_probe(
    settings: PretrainSettings | None = None,
    *,
    data: TokenData | None = None,
    progress: ProgressFn | None = None,
    store: bool = True,
) -> PretrainResult:
    """Train every (variant, seed) of `settings`; progress(done_steps, total_steps, stage).

    `store`: read a stored probe of the same settings instead of training, and store a trained
    one (`deffcore.labs.store`, lab "pretrain"); never when `data` is given."""
    s = settings or PretrainSettings()
    check_settings(s)
    store = store and data is None
    identity = pretrain_identity(s) if store else None
    if identity is not None:
        found = lab_store.read_result("pretrain", identity)
        if found is not None:
            result = PretrainResult.from_dict(found)
            result.settings = s  # the caller's (threads included)
            result.cached = True
            return result
    tokenizer = probe_tokenizer(s.tokenizer)
    data = data or token_data(tokenizer, s.block_size)
    result = PretrainResult(settings=s, tokens_per_run=s.iters * s.batch_size * s.block_size)
    runs = [(v, seed) for v in s.variants for seed in s.seeds]

    def train_one(run: tuple[str, int], tick: Callable[[int], None]) -> list[dict[str, Any]]:
        return train_probe(run[0], run[1], s, tokenizer, data, tick=tick)

    result.records, result.seconds = train_grid(
        runs, s.iters, train_one, progress=progress, threads=s.threads,
        stage=lambda run: f"{run[0]} seed={run[1]}",
    )  # fmt: skip
    if identity is not None:
        lab_store.write_result("pretrain", identity, result.to_dict())
    return result
