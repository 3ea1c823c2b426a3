"""The residual-carry lab's model: a small character-level GPT whose blocks compute
`h_l = gamma * h_{l-1} + block(h_{l-1})` (paper Table S14, Figure S7).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from deffcore.core.errors import DeffError


@dataclass
class CarryConfig:
    """Architecture of the character GPT. `gamma` is the residual carry of every block."""

    vocab_size: int = 96
    block_size: int = 64
    n_layer: int = 12
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0
    gamma: float = 1.0


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: CarryConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, T, d) -> (B, T, d)."""
        B, T, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (t.view(B, T, self.n_head, d // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        return self.proj(y.transpose(1, 2).reshape(B, T, d))


class MLP(nn.Module):
    def __init__(self, cfg: CarryConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.proj(F.gelu(self.fc(x))))


class CarryBlock(nn.Module):
    """h -> gamma * h + block(h); `block(h)` is what an ordinary pre-LN block adds to h."""

    def __init__(self, cfg: CarryConfig):
        super().__init__()
        self.gamma = cfg.gamma
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def update(self, h: torch.Tensor) -> torch.Tensor:
        """block(h) (B, T, d): the attention output plus the MLP output on h + attention."""
        a = self.attn(self.ln1(h))
        return a + self.mlp(self.ln2(h + a))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return self.gamma * h + self.update(h)


class CarryGPT(nn.Module):
    """Character GPT with residual carry gamma. forward(idx (B, T)) -> logits (B, T, V), loss."""

    def __init__(self, cfg: CarryConfig):
        super().__init__()
        self.config = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(CarryBlock(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # weight tying, as nanoGPT
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):  # GPT-2's scaled init of residual projections
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def states(self, idx: torch.Tensor) -> list[torch.Tensor]:
        """idx (B, T) -> [h_0, h_1, ..., h_L], each (B, T, d), h_L before the final norm."""
        n_pos = idx.shape[1]
        if n_pos > self.config.block_size:
            raise DeffError(
                f"A window of {n_pos} characters exceeds the model's block size "
                f"{self.config.block_size}."
            )
        pos = torch.arange(n_pos, device=idx.device)
        h = self.drop(self.wte(idx) + self.wpe(pos))
        out = [h]
        for block in self.blocks:
            h = block(h)
            out.append(h)
        return out

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        logits = self.lm_head(self.ln_f(self.states(idx)[-1]))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss
