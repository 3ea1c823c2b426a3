"""Residual-carry lab (paper Table S14, Figure S7): how much of the past does each block keep?

A small character-level GPT (nanoGPT layout: pre-LayerNorm blocks, causal self-attention, a
4x GELU MLP) whose blocks scale the carried residual by gamma:

    h_l = gamma * h_{l-1} + block(h_{l-1})          block(h) = a + m(h + a),  a = attn(ln1(h)),
                                                                 m(u) = mlp(ln2(u))

gamma = 1 is the ordinary block (h + a, then + m). Smaller gamma forgets the accumulated
stream geometrically, which should raise D_eff(h)/L. Several (gamma, seed) runs are trained on
BBC-news characters; at every evaluation the lab records the validation loss and, on a fixed
set of validation windows, D_eff(h)/L, D_eff(update)/L, rho_hat(1) and ||f||/||h||.

Decisions:
- Measured states: h_1 .. h_L = the block outputs (before the final LayerNorm); h_0 = token +
  position embedding. Pooling is SPEC's `default` (mean over the window's positions); the
  update is f_l = h_l - h_{l-1} (SPEC section 6), so with gamma < 1 it includes the
  (gamma - 1) h_{l-1} "forgetting" term: it is what the stream actually changes by.
- The probe windows (`n_probe` windows of `block_size` characters from the validation split)
  are drawn with a fixed generator, independent of the training seed, so every run and step
  is measured on the same text.
- Text: the first `max_chars` characters of the BBC-news articles in corpus order, joined with
  blank lines; the first 90% train, the rest validation. The vocabulary is every character of
  the whole corpus (so checkpoints from different settings share ids).
- Optimiser as nanoGPT's shakespeare_char: AdamW (beta2 = 0.99, weight decay 0.1), linear
  warm-up then cosine decay to lr/10. Dropout defaults to 0 (the small CPU runs underfit).
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from deffcore.core.errors import DeffError
from deffcore.core.files import (
    CARRY_CHECKPOINT,
    CARRY_SIDECAR,
    LAB_RECORDS,
    check_output,
    has_mark,
    write_output,
)
from deffcore.labs.carry_model import CarryConfig, CarryGPT
from deffcore.labs.training import bbc_documents, evaluating, from_preset, train_grid, train_steps
from deffcore.measures.depth import depth_summary
from deffcore.measures.references import update_depth
from deffcore.measures.similarity import similarity_matrix
from deffcore.runs.action_costs import Cost
from deffcore.views.paper import paper_rows

ProgressFn = Callable[[int, int, str], None]


@dataclass
class CharData:
    """Character ids of the train and validation text, and the vocabulary (id -> char)."""

    chars: str
    train: torch.Tensor  # (n_train,) int64
    val: torch.Tensor  # (n_val,) int64

    def encode(self, text: str) -> torch.Tensor:
        index = {c: i for i, c in enumerate(self.chars)}
        return torch.tensor([index[c] for c in text], dtype=torch.long)


def char_data(
    max_chars: int = 1_000_000, *, text: str | None = None, val_frac: float = 0.1
) -> CharData:
    """BBC-news characters (offline), or `text` when given; split train / validation by position."""
    if text is None:
        articles = bbc_documents()
        chars = "".join(sorted(set("".join(articles))))
        pieces, total = [], 0
        for article in articles:
            if total >= max_chars:
                break
            pieces.append(article)
            total += len(article) + 2
        text = "\n\n".join(pieces)[:max_chars]
    else:
        chars = "".join(sorted(set(text)))
    index = {c: i for i, c in enumerate(chars)}
    data = torch.tensor([index[c] for c in text], dtype=torch.long)
    n_val = max(int(len(data) * val_frac), 1)
    return CharData(chars=chars, train=data[:-n_val], val=data[-n_val:])


def sample_windows(
    data: torch.Tensor, n: int, block_size: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """n random windows (n, block_size) and their next-character targets."""
    if len(data) <= block_size + 1:
        raise DeffError(
            f"The text split has {len(data)} characters, too few for windows of {block_size}."
        )
    starts = torch.randint(len(data) - block_size - 1, (n,), generator=generator)
    x = torch.stack([data[s : s + block_size] for s in starts.tolist()])
    y = torch.stack([data[s + 1 : s + 1 + block_size] for s in starts.tolist()])
    return x, y


@torch.no_grad()
def probe_depth(model: CarryGPT, probe: torch.Tensor, metric: str = "cka") -> dict[str, float]:
    """D_eff(h)/L, D_eff(update)/L, rho_hat(1), ||f||/||h|| on the probe windows (N, T).

    States are pooled per window (mean over positions): `pooled` (L+1, N, d), h_0 included.
    """
    with evaluating(model):
        states = model.states(probe)
    pooled = torch.stack([h.float().mean(dim=1) for h in states])  # (L+1, N, d)
    summary = depth_summary(similarity_matrix(pooled[1:], metric))
    upd = update_depth(pooled, metric=metric)
    return {
        "deff_h_over_L": summary.deff_over_L,
        "gap_pct": summary.gap_pct,
        "rho1": summary.rho1,
        "deff_upd_over_L": upd.deff_upd_over_L,
        "rho1_upd": upd.rho1_upd,
        "f_over_h": upd.update_to_state_norm,
    }


@dataclass
class CarrySettings:
    """Everything one sweep needs. The defaults finish on a 2-core CPU in a few minutes."""

    gammas: tuple[float, ...] = (1.0, 0.75, 0.5, 0.25)
    seeds: tuple[int, ...] = (0, 1)
    n_layer: int = 12
    n_head: int = 4
    n_embd: int = 48
    block_size: int = 64
    dropout: float = 0.0
    batch_size: int = 16
    iters: int = 300
    eval_interval: int = 50
    eval_batches: int = 8
    lr: float = 2e-3
    warmup: int = 30
    n_probe: int = 128
    max_chars: int = 1_000_000
    metric: str = "cka"
    device: str = "cpu"
    checkpoint_dir: str | None = None
    #: torch CPU threads during the sweep (None: leave torch's setting). On a busy 2-core
    #: machine 1 thread is ~10x faster than an oversubscribed 2.
    threads: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


#: Named settings: "cpu" (minutes here), "gpu" (nanoGPT shakespeare_char scale).
PRESETS: dict[str, CarrySettings] = {
    "cpu": CarrySettings(iters=240, eval_interval=40, n_probe=64),
    "tiny": CarrySettings(
        gammas=(1.0, 0.5),
        seeds=(0,),
        n_layer=4,
        n_embd=32,
        iters=40,
        eval_interval=20,
        eval_batches=2,
        n_probe=32,
        max_chars=200_000,
    ),
    "gpu": CarrySettings(
        gammas=(1.0, 0.75, 0.5, 0.25),
        seeds=(0, 1, 2),
        n_layer=12,
        n_head=6,
        n_embd=384,
        block_size=256,
        dropout=0.2,
        batch_size=64,
        iters=5000,
        eval_interval=250,
        eval_batches=50,
        lr=1e-3,
        warmup=100,
        n_probe=512,
        max_chars=5_100_000,
        device="cuda",
    ),
}


@torch.no_grad()
def _val_loss(model: CarryGPT, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    with evaluating(model):
        losses = [model(x, y)[1].item() for x, y in batches]
    return float(np.mean(losses))


def checkpoint_path(root: str | Path, gamma: float, seed: int, step: int) -> Path:
    return Path(root) / f"gamma{gamma:g}_seed{seed}" / f"step{step:06d}.pt"


def save_checkpoint(
    path: Path,
    model: CarryGPT,
    data: CharData,
    step: int,
    tokens: int,
    settings: CarrySettings | None = None,
) -> None:
    """Model weights, config, vocabulary, step/tokens and the sweep settings (for re-probing).

    Written under the one output rule (`core.files.check_output`, `write_output`): whole or not
    at all, never through a link, and an existing file is replaced only when it is one of our
    checkpoints (its sidecar says so) -- never a file of the user's that shares its name."""
    side = checkpoint_sidecar(path)
    check_output(side, "--checkpoint-dir", marks=(CARRY_SIDECAR,), kind="carry checkpoint")
    ours = has_mark(side, (CARRY_SIDECAR,))  # a sidecar deffcore wrote
    check_output(
        path,
        "--checkpoint-dir",
        marks=(CARRY_CHECKPOINT,),
        kind="carry checkpoint",
        replaceable=lambda _: None if ours else "has no carry-lab sidecar beside it",
    )
    buffer = io.BytesIO()
    torch.save(
        {
            "kind": "deffcore-carry-gpt",
            "config": asdict(model.config),
            "state_dict": model.state_dict(),
            "chars": data.chars,
            "step": step,
            "tokens": tokens,
            "settings": settings.to_dict() if settings is not None else None,
        },
        buffer,
    )
    write_output(path, buffer.getvalue(), "--checkpoint-dir")
    # A plain-JSON sidecar lets a folder listing show step and tokens without opening the .pt.
    sidecar = {"kind": "deffcore-carry-gpt", "step": step, "tokens": tokens}
    write_output(side, json.dumps(sidecar).encode(), "--checkpoint-dir")


def checkpoint_sidecar(path: str | Path) -> Path:
    """`step000100.pt` -> `step000100.json` (step and tokens, readable without torch.load)."""
    return Path(path).with_suffix(".json")


def load_checkpoint(path: str | Path, device: str = "cpu") -> tuple[CarryGPT, dict[str, Any]]:
    """A saved carry-lab checkpoint -> (model in eval mode, meta: step, tokens, chars, config)."""
    # weights_only=True: a checkpoint is a file a user can name, and unpickling arbitrary
    # objects from it could run code. Ours holds only tensors, numbers, strings, lists, dicts.
    try:
        blob = torch.load(path, map_location=device, weights_only=True)
    except Exception as err:  # pickle, zip and I/O errors all mean "not a readable checkpoint"
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise DeffError(f"Cannot read the carry-lab checkpoint {path}: {reason[:200]}") from err
    if not isinstance(blob, dict) or blob.get("kind") != "deffcore-carry-gpt":
        raise DeffError(f"{path} is not a residual-carry lab checkpoint.")
    try:
        model = CarryGPT(CarryConfig(**blob["config"])).to(device)
        model.load_state_dict(blob["state_dict"])
    except (KeyError, TypeError, RuntimeError) as err:
        raise DeffError(f"The carry-lab checkpoint {path} is incomplete or damaged: {err}") from err
    model.eval()
    meta = {k: blob.get(k) for k in ("step", "tokens", "chars", "config", "settings")}
    return model, meta


def train_run(
    gamma: float,
    seed: int,
    settings: CarrySettings,
    data: CharData,
    *,
    progress: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """Train one (gamma, seed) model; returns one record per evaluation (step 0 included)."""
    s = settings
    device = torch.device(s.device)
    torch.manual_seed(seed)
    cfg = CarryConfig(
        vocab_size=len(data.chars),
        block_size=s.block_size,
        n_layer=s.n_layer,
        n_head=s.n_head,
        n_embd=s.n_embd,
        dropout=s.dropout,
        gamma=gamma,
    )
    model = CarryGPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=(0.9, 0.99), weight_decay=0.1)
    fixed = torch.Generator().manual_seed(1234)  # same probe and val batches for every run
    probe = sample_windows(data.val, s.n_probe, s.block_size, fixed)[0].to(device)
    val_batches = [
        tuple(t.to(device) for t in sample_windows(data.val, s.batch_size, s.block_size, fixed))
        for _ in range(s.eval_batches)
    ]
    train_gen = torch.Generator().manual_seed(seed)
    records = []

    def evaluate(step: int) -> None:
        tokens = step * s.batch_size * s.block_size
        rec = {"gamma": gamma, "seed": seed, "step": step, "tokens": tokens}
        rec["val_loss"] = _val_loss(model, val_batches)
        rec.update(probe_depth(model, probe, s.metric))
        records.append(rec)
        if s.checkpoint_dir:
            path = checkpoint_path(s.checkpoint_dir, gamma, seed, step)
            save_checkpoint(path, model, data, step, tokens, s)

    def batch_loss() -> torch.Tensor:
        x, y = sample_windows(data.train, s.batch_size, s.block_size, train_gen)
        return model(x.to(device), y.to(device))[1]

    train_steps(
        model, opt, batch_loss, evaluate, iters=s.iters, eval_interval=s.eval_interval,
        lr=s.lr, warmup=s.warmup, tick=progress,
    )  # fmt: skip
    return records


QUANTITIES: tuple[str, ...] = ("val_loss", "deff_h_over_L", "deff_upd_over_L", "rho1", "f_over_h")


@dataclass
class CarryResult:
    settings: CarrySettings
    records: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    def final_table(self) -> list[dict[str, Any]]:
        """Per gamma, each quantity at the last step: mean and [min, max] across seeds."""
        rows = []
        last = max(r["step"] for r in self.records)
        for gamma in self.settings.gammas:
            final = [r for r in self.records if r["gamma"] == gamma and r["step"] == last]
            if not final:
                continue
            row: dict[str, Any] = {"gamma": gamma, "seeds": len(final), "step": last}
            for q in QUANTITIES:
                vals = np.array([r[q] for r in final], dtype=np.float64)
                row[q] = float(vals.mean())
                row[f"{q}_min"] = float(vals.min())
                row[f"{q}_max"] = float(vals.max())
            rows.append(row)
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {
            "lab": "residual_carry",
            "settings": self.settings.to_dict(),
            "seconds": self.seconds,
            "final": self.final_table(),
            "records": self.records,
        }


#: Characters of the BBC-news corpus: every carry model's vocabulary (`char_data`; a test
#: reads the corpus and checks it).
BBC_CHARS = 88
#: Bytes torch.save adds to a checkpoint per tensor, and per file (config, settings, vocabulary
#: and the JSON sidecar); measured on the tiny preset's checkpoints.
SAVE_TENSOR_BYTES, SAVE_FILE_BYTES = 128, 1024


def checkpoints_per_run(s: CarrySettings) -> int:
    """Evaluations of one (gamma, seed) run, each saving a checkpoint: step 0, every
    `eval_interval` steps and the last (`training.train_steps`)."""
    return 1 + s.iters // s.eval_interval + (1 if s.iters % s.eval_interval else 0)


def carry_cost(s: CarrySettings) -> Cost:
    """What the sweep writes into its checkpoint folder (`action_costs.Cost`, disk only; the
    page estimates its time from the preset's): one checkpoint per evaluation of each (gamma,
    seed) run, the model's float32 weights (sized on the meta device, nothing allocated) plus
    torch.save's own bytes. 0 without a checkpoint folder. SPEC 14, "Writes said first"."""
    source = "the preset's estimate above"
    if not s.checkpoint_dir:
        return Cost(None, source)
    cfg = CarryConfig(
        vocab_size=BBC_CHARS, block_size=s.block_size, n_layer=s.n_layer, n_head=s.n_head,
        n_embd=s.n_embd,
    )  # fmt: skip
    with torch.device("meta"):
        weights = CarryGPT(cfg).state_dict()
    one = sum(t.numel() * t.element_size() + SAVE_TENSOR_BYTES for t in weights.values())
    files = len(s.gammas) * len(s.seeds) * checkpoints_per_run(s)
    return Cost(None, source, disk=files * (one + SAVE_FILE_BYTES))


def run_carry_sweep(
    settings: CarrySettings | None = None,
    *,
    data: CharData | None = None,
    progress: ProgressFn | None = None,
) -> CarryResult:
    """Train every (gamma, seed) of `settings`; progress(done_steps, total_steps, stage)."""
    s = settings or CarrySettings()
    if not s.gammas or not s.seeds:
        raise DeffError("The residual-carry sweep needs at least one gamma and one seed.")
    if s.n_embd % s.n_head:
        raise DeffError(f"n_embd = {s.n_embd} is not divisible by n_head = {s.n_head}.")
    if s.n_layer < 2 or s.n_probe < 4:
        raise DeffError("The residual-carry lab needs at least 2 layers and 4 probe windows.")
    if s.device.startswith("cuda") and not torch.cuda.is_available():
        raise DeffError("The settings ask for a CUDA device, and none is available here.")
    data = data or char_data(s.max_chars)
    result = CarryResult(settings=s)
    runs = [(gamma, seed) for gamma in s.gammas for seed in s.seeds]

    def train_one(run: tuple[float, int], tick: Callable[[int], None]) -> list[dict[str, Any]]:
        return train_run(run[0], run[1], s, data, progress=tick)

    result.records, result.seconds = train_grid(
        runs, s.iters, train_one, progress=progress, threads=s.threads,
        stage=lambda run: f"gamma={run[0]:g} seed={run[1]}",
    )  # fmt: skip
    if s.checkpoint_dir:
        records = json.dumps(result.to_dict(), indent=1).encode()
        path = Path(s.checkpoint_dir) / "records.json"
        check_output(path, "--checkpoint-dir", marks=(LAB_RECORDS,), kind="lab's records file")
        write_output(path, records, "--checkpoint-dir")  # whole or not at all
    return result


def settings_from(preset: str = "cpu", **overrides: Any) -> CarrySettings:
    """A preset with some fields replaced (None values are ignored)."""
    return from_preset(PRESETS, preset, "residual-carry", overrides)


def paper_carry_rows() -> list[dict[str, Any]]:
    """Table S14 of the paper (12-layer nanoGPT on shakespeare_char, iter 5000), display only:
    one dict per gamma (`gamma, val_loss, deff_h_over_L, rho1, f_over_h`), largest first."""
    names = {
        "val_loss": "val_loss",
        "deff_over_L": "deff_h_over_L",
        "rho1": "rho1",
        "update_to_state_norm": "f_over_h",
    }
    by_gamma: dict[float, dict[str, Any]] = {}
    for row in paper_rows("Table S14"):
        gamma = float(row["setting"].removeprefix("gamma="))
        if row["quantity"] in names:
            entry = by_gamma.setdefault(gamma, {"gamma": gamma})
            entry[names[row["quantity"]]] = float(row["value"])
    return [by_gamma[g] for g in sorted(by_gamma, reverse=True)]
