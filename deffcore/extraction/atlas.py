"""The depth-use atlas's accumulators (per-passage sums taken during extraction's forward pass)
and their store beside the run's cache entry (SPEC section 16).

Stage: extraction (beside `deffcore.extraction.forward`, whose hook point feeds it; no second
pass).

`AtlasTap` is a second consumer of the states the extraction hooks capture (h_0 = block 1's
input, h_l = block l's output, l = 1..L, the pre-final-norm residual stream of SPEC section 1).
Per block l and per real token t it computes, in float32 from the captured states (padding
zeroed first),

    u_l = h_l - h_{l-1}                                  block l's write to the residual stream
    r_l(t) = ||u_l|| / ||h_{l-1}||                       relative contribution (Csordás et al. §3)
    c_l(t) = cos(u_l, h_{l-1})                           alignment (Csordás et al. §3)
    b_l(t) = 1 - cos(h_{l-1}, h_l)                       Block Influence's token term (ShortGPT)

and averages each over the passage's real tokens in float64 (a per-passage mean: `AtlasRows`
holds one row per passage, so the statistics can weigh passages equally and resample them).
Where the architecture is verified (`SPLIT_ARCHITECTURES`) the MLP's write m_l is captured by a
forward hook on the module whose output the block adds to the stream (`mlp_write_module`) and
the attention write is a_l = u_l - m_l exactly; each sublayer is compared with the residual it
reads (SPEC 16.1 item 3; `layer_terms`).

At each passage's last real token T, h_0^T .. h_L^T are kept for the batch and turned into the
passage's (L+1) x (L+1) angular distance matrix d(i, j) = arccos(cos(h_i^T, h_j^T)) / π
(Gromov et al.), from float64 unit vectors, exactly symmetric with a zero diagonal.

Nothing here synchronises with the device during the forward pass (except the logit lens,
on request, whose gather of the batch's real tokens does once per batch): each batch's
per-passage values stay on the device until `rows()` collects them at the end. A passage
whose batch did not run here (resumed from a checkpoint, served from another run's cache entry)
has no row, and `rows()` then returns None: an atlas is kept only when every passage of the
run has its row.
A token whose norm is 0 gets ratio and cosine 0 (division by `EPS`), never NaN.

The logit lens (SPEC 16.2; `AtlasTap(lens=True)`, taken on request): where the head is verified
(`LENS_ARCHITECTURES`, `lens_head`) each batch's h_0 .. h_L are held in the model's dtype until
h_L arrives, then `lens_terms` takes KL, top-1 agreement and prediction depth per token in
chunks of at most `LENS_CHUNK_BYTES` of logits, averaged per passage in float64. Another
architecture's atlas has no lens (`AtlasRows.lens_refused` says why, one sentence).

The store — a run's atlas kept beside its cache entry (per-passage rows, versioned, checked;
a side file of `deffcore.extraction.cache`'s run entry, like the BOS diagnostics):

    <cache>/<key>/atlas.npz         the run's `AtlasRows`: r, c, bi (N, L), angular (N, L+1, L+1),
                                    lengths (N,), the split's four (N, L) arrays when known, the
                                    logit lens's lens_kl, lens_top1 (N, L+1), lens_depth (N,) when
                                    taken, and `meta` (JSON bytes: format, key, spec, split_kind,
                                    lens_refused, created)
    <cache>/<key>/skip_effect.npz   the skip effect's per-passage rows (`atlas_skip.SkipRows`)
                                    and `meta` (format, key, spec, passages, created)

The run's own files (meta.json, states.npz) and its key are never touched: the atlas is an
addition beside the numbers the key names. A file is used only when its format is this
version's (`ROWS_FORMAT`, `SKIP_FORMAT`: bump them when the content changes), its key and spec
are the run's, and every array has the shape, finiteness and range its meaning allows; anything
else reads as absent (recomputed on request), never as numbers. Written atomically, never
through a link (`deffcore.core.files`), and only into an entry that exists: a run without one
(the shipped snapshots, a notebook run that is not cached) keeps its rows in this process's
memory (the last `MEMORY_RUNS` runs), as the diagnostics do.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deffcore.core.files import npz_arrays, utc_stamp
from deffcore.core.lazy import nn, torch  # imported on first use

#: Architectures (config.model_type) whose sublayer writes are verified against independent hooks
#: (tests/test_atlas.py): -> how the MLP reads the stream, "sequential" or "parallel".
SPLIT_ARCHITECTURES: dict[str, str] = {
    "llama": "sequential",
    "qwen2": "sequential",
    "qwen3": "sequential",
    "gemma3_text": "sequential",
    "gemma3": "sequential",
    "gpt2": "sequential",
    "olmo2": "sequential",
    "gpt_neox": "sequential",  # "parallel" when config.use_parallel_residual (the default)
}
#: Children of a block whose output is the MLP's write, most specific first.
_WRITE_NAMES: tuple[str, ...] = ("post_feedforward_layernorm", "post_mlp_dropout", "mlp")
#: The per-passage quantities, (N, L) each; SPLIT_QUANTITIES only where the split is known.
QUANTITIES: tuple[str, ...] = ("r", "c", "bi")
SPLIT_QUANTITIES: tuple[str, ...] = ("r_attn", "c_attn", "r_mlp", "c_mlp")
EPS = 1e-12
#: Architectures whose logits are exactly `lens_head(model).log_probs(h_L)`
#: (tests/test_atlas_lens.py checks it against the model's own logits on each).
LENS_ARCHITECTURES: frozenset[str] = frozenset(SPLIT_ARCHITECTURES)
#: The logit lens's per-passage arrays: kl and top1 (N, L+1) over h_0 .. h_L, depth (N,).
LENS_QUANTITIES: tuple[str, ...] = ("kl", "top1", "depth")
#: Bytes of float32 logits one chunk of tokens may hold (per distribution; three are alive).
LENS_CHUNK_BYTES = 1 << 27


@dataclass
class AtlasRows:
    """Per-passage atlas values of one run (rows in the run's passage order).

    r, c, bi:  (N, L) float64, the passage means over its real tokens of r_l(t), c_l(t), b_l(t)
    angular:   (N, L+1, L+1) float64, d(i, j) at the passage's last real token (h_0 .. h_L)
    lengths:   (N,) int64 real tokens per passage (token-weighted means use them)
    split:     {"r_attn", "c_attn", "r_mlp", "c_mlp": (N, L)} or None (architecture not verified)
    split_kind: "sequential" / "parallel" / None
    lens:      {"kl", "top1": (N, L+1) over h_0 .. h_L, "depth": (N,)} float64, the logit lens's
               passage means, or None (not taken; `lens_refused`: why, when refused)
    """

    r: np.ndarray
    c: np.ndarray
    bi: np.ndarray
    angular: np.ndarray
    lengths: np.ndarray
    split: dict[str, np.ndarray] | None = None
    split_kind: str | None = None
    lens: dict[str, np.ndarray] | None = None
    lens_refused: str | None = None

    @property
    def layers(self) -> int:
        return int(self.r.shape[1])

    @property
    def n(self) -> int:
        return int(self.r.shape[0])

    def subset(self, rows: np.ndarray) -> AtlasRows:
        """The same values for some passages (indices into the rows)."""
        split = None if self.split is None else {k: v[rows] for k, v in self.split.items()}
        lens = None if self.lens is None else {k: v[rows] for k, v in self.lens.items()}
        return AtlasRows(
            self.r[rows],
            self.c[rows],
            self.bi[rows],
            self.angular[rows],
            self.lengths[rows],
            split,
            self.split_kind,
            lens,
            self.lens_refused,
        )


def split_kind(model: nn.Module) -> str | None:
    """How the MLP of `model`'s blocks reads the residual stream ("sequential" / "parallel"),
    None when the architecture's sublayer split is not verified here."""
    config = getattr(model, "config", None)
    kind = SPLIT_ARCHITECTURES.get(str(getattr(config, "model_type", "")))
    if kind is not None and getattr(config, "use_parallel_residual", False):
        return "parallel"
    return kind


def mlp_write_module(block: nn.Module) -> nn.Module | None:
    """The child of `block` whose output the block adds to the stream as the MLP's write."""
    for name in _WRITE_NAMES:
        sub = getattr(block, name, None)
        if isinstance(sub, nn.Module):
            return sub
    return None


def _first(output: Any) -> torch.Tensor:
    return output[0] if isinstance(output, tuple | list) else output


def _mean(values: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Per-passage float64 mean over real tokens: values (B, T), w (B, T) = 1/n_b at real tokens."""
    return (values.double() * w).sum(-1)


def _ratio(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    return num / den.clamp_min(EPS)


def layer_terms(
    prev: torch.Tensor,
    cur: torch.Tensor,
    w: torch.Tensor,
    mlp: torch.Tensor | None = None,
    parallel: bool = False,
) -> dict[str, torch.Tensor]:
    """One block's per-passage means: prev = h_{l-1}, cur = h_l, mlp = m_l (B, T, d) float32 with
    padding zeroed; w (B, T) float64. Returns {"r", "c", "bi"} (+ the split) as (B,) float64."""
    u = cur - prev
    n_prev = torch.linalg.vector_norm(prev, dim=-1)
    n_cur = torch.linalg.vector_norm(cur, dim=-1)
    n_u = torch.linalg.vector_norm(u, dim=-1)
    dot = torch.linalg.vecdot(u, prev)  # u . h_{l-1}; h_{l-1} . h_l = ||h_{l-1}||^2 + dot
    out = {
        "r": _mean(_ratio(n_u, n_prev), w),
        "c": _mean(_ratio(dot, n_u * n_prev), w),
        "bi": _mean(1.0 - _ratio(n_prev * n_prev + dot, n_prev * n_cur), w),
    }
    if mlp is None:
        return out
    attn = u.sub_(mlp)  # in place: u is not needed any more (one (B, T, d) buffer less)
    base = prev if parallel else cur - mlp  # the residual the MLP reads
    n_a, n_m = torch.linalg.vector_norm(attn, dim=-1), torch.linalg.vector_norm(mlp, dim=-1)
    n_base = n_prev if parallel else torch.linalg.vector_norm(base, dim=-1)
    out["r_attn"] = _mean(_ratio(n_a, n_prev), w)
    out["c_attn"] = _mean(_ratio(torch.linalg.vecdot(attn, prev), n_a * n_prev), w)
    out["r_mlp"] = _mean(_ratio(n_m, n_base), w)
    out["c_mlp"] = _mean(_ratio(torch.linalg.vecdot(mlp, base), n_m * n_base), w)
    return out


def angular_matrix(last: torch.Tensor) -> torch.Tensor:
    """last (L+1, B, d) states at each passage's last token -> (B, L+1, L+1) float64 angular
    distances arccos(cos) / π, exactly symmetric, zero diagonal."""
    x = last.double()
    x = x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp_min(EPS)
    cos = torch.einsum("lbd,mbd->blm", x, x).clamp(-1.0, 1.0)
    d = torch.arccos(cos) / torch.pi
    d = (d + d.transpose(1, 2)) / 2
    return d * (1 - torch.eye(d.shape[-1], dtype=d.dtype, device=d.device))


# ---------------------------------------------------------------------------------------------
# The logit lens


@dataclass(frozen=True)
class LensHead:
    """The model's head as the logit lens applies it to any h_l: final norm, unembedding, then the
    config's final-logit soft-capping (cap * tanh(z / cap)) when it has one."""

    norm: nn.Module
    unembed: nn.Module
    softcap: float | None = None

    @property
    def device(self) -> torch.device:
        return self.unembed.weight.device

    @property
    def vocab(self) -> int:
        return int(self.unembed.weight.shape[0])

    def log_probs(self, h: torch.Tensor) -> torch.Tensor:
        """h (n, d) -> (n, V) float32 log-probabilities of the next token (the model's dtype up
        to the logits, as its own forward; log-softmax in float32)."""
        x = h.to(device=self.device, dtype=self.unembed.weight.dtype)
        z = self.unembed(self.norm(x[None]))[0]
        if self.softcap:
            z = torch.tanh(z / self.softcap) * self.softcap
        return torch.log_softmax(z.float(), dim=-1)


def lens_head(model: nn.Module) -> LensHead:
    """The head the logit lens applies (`LensHead`); UnsupportedArchitectureError (one sentence)
    when the architecture is not one whose logits it is verified to reproduce."""
    from deffcore.core.errors import UnsupportedArchitectureError
    from deffcore.inputs.architecture import final_norm, model_type

    kind = model_type(model)
    get = getattr(model, "get_output_embeddings", None)
    unembed = get() if callable(get) else None
    norm = final_norm(model) if kind in LENS_ARCHITECTURES else None
    weight = getattr(unembed, "weight", None)
    if norm is None or not isinstance(unembed, nn.Module) or not isinstance(weight, torch.Tensor):
        raise UnsupportedArchitectureError(
            f"The logit lens is verified only for {', '.join(sorted(LENS_ARCHITECTURES))} "
            f"causal LMs with their head, not for a {kind[:60]} model."
        )
    config = getattr(model, "config", None)
    text = getattr(config, "text_config", None) or config
    cap = getattr(text, "final_logit_softcapping", None)
    return LensHead(norm, unembed, float(cap) if cap else None)


def prediction_depth(top1: torch.Tensor) -> torch.Tensor:
    """top1 (L+1, n) the top-1 token at h_0 .. h_L per token -> (n,) int64: the first layer l
    from which top1_k = top1_L for every k = l..L (L when only the last layer agrees)."""
    agree = (top1 == top1[-1:]).flip(0).long().cumprod(0)  # 1 while every later layer agrees
    return top1.shape[0] - agree.sum(0)


def lens_terms(
    head: LensHead, states: list[torch.Tensor], keep: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The logit lens of one batch: states h_0 .. h_L (B, T, d) in the model's dtype, keep (B, T)
    bool real tokens -> per-passage means over real tokens (sums / counts in float64):
    "kl" (B, L+1) of KL(p_L || p_l), "top1" (B, L+1) of [top1_l = top1_L], "depth" (B,)."""
    dev = head.device
    b, t = keep.to(dev).nonzero(as_tuple=True)
    layers, count = len(states), int(b.shape[0])
    chunk = max(1, LENS_CHUNK_BYTES // (4 * head.vocab))
    kl = torch.zeros(layers, count, dtype=torch.float32, device=dev)
    top = torch.zeros(layers, count, dtype=torch.int64, device=dev)
    with torch.no_grad():
        for lo in range(0, count, chunk):
            rows = slice(lo, min(lo + chunk, count))
            sel = (b[rows], t[rows])
            final = head.log_probs(states[-1].to(dev)[sel])
            p_final = final.exp()
            for layer in range(layers):
                logp = final if layer == layers - 1 else head.log_probs(states[layer].to(dev)[sel])
                kl[layer, rows] = (p_final * (final - logp)).sum(-1).clamp_min(0.0)
                top[layer, rows] = logp.argmax(-1)
                del logp
    B = keep.shape[0]
    tokens = keep.to(dev).sum(1).double()  # real tokens per passage

    def per_passage(values: torch.Tensor) -> torch.Tensor:  # (..., count) -> (..., B) means
        out = torch.zeros((*values.shape[:-1], B), dtype=torch.float64, device=dev)
        return out.index_add_(-1, b, values.double()) / tokens

    return {
        "kl": per_passage(kl).T,
        "top1": per_passage((top == top[-1:]).double()).T,
        "depth": per_passage(prediction_depth(top).double()),
    }


@dataclass
class _Batch:
    """The batch in flight: token weights and real-token mask on the input device, the last
    real position per passage, and the per-layer results as they come."""

    w: torch.Tensor  # (B, T) float64
    keep: torch.Tensor  # (B, T, 1) bool
    last: torch.Tensor  # (B,) int64
    terms: dict[str, list[torch.Tensor | None]]
    last_states: list[torch.Tensor | None]
    lens_states: list[torch.Tensor | None] = field(default_factory=list)
    lens: dict[str, torch.Tensor] | None = None
    elsewhere: dict[torch.device, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = field(
        default_factory=dict
    )

    def on(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(w, keep, last) on `device` (a model spread over several devices)."""
        if device == self.w.device:
            return self.w, self.keep, self.last
        if device not in self.elsewhere:
            self.elsewhere[device] = (self.w.to(device), self.keep.to(device), self.last.to(device))
        return self.elsewhere[device]


class AtlasTap:
    """Hook target of the atlas: `extract_pooled(..., taps=[AtlasTap()])` (see the module doc).

    attach(model, n) registers the MLP-write hooks and returns their handles; then per batch
    begin(mask), tap(layer, hidden) for h_0 .. h_L in order, end(slots) (or abandon() when the
    forward failed); rows() gives the `AtlasRows` once every passage has its row, else None.
    """

    def __init__(self, *, split: bool = True, lens: bool = False) -> None:
        self.want_split, self.want_lens = split, lens
        self.kind: str | None = None
        self.head: LensHead | None = None
        self.lens_refused: str | None = None
        self.layers = self.n = 0
        self._batch: _Batch | None = None
        self._prev: torch.Tensor | None = None
        self._mlp: dict[int, torch.Tensor] = {}
        self._done: list[tuple[list[int], dict[str, torch.Tensor], torch.Tensor, Any]] = []

    def attach(self, model: nn.Module, n: int) -> list[Any]:
        """Start a run of `n` passages on `model`; the handles of the hooks it needs."""
        from deffcore.inputs.architecture import decoder_layers

        blocks = decoder_layers(model)
        head = None
        if self.want_lens:
            from deffcore.core.errors import DeffError

            try:
                head = lens_head(model)
            except DeffError as err:
                self.lens_refused = str(err)
        self.start(n, len(blocks), split_kind(model) if self.want_split else None, head)
        writes = [mlp_write_module(b) for b in blocks] if self.kind else []
        if self.kind and any(m is None for m in writes):
            self.kind = None
        handles = []
        for layer, module in enumerate(writes if self.kind else [], start=1):
            handles.append(module.register_forward_hook(self._mlp_hook(layer)))
        return handles

    def start(
        self, n: int, layers: int, kind: str | None = None, head: LensHead | None = None
    ) -> None:
        """Start a run of `n` passages through `layers` blocks (no model: states given by hand;
        `head`: the logit lens's, `lens_head`)."""
        self.n, self.layers, self.kind, self.head = int(n), int(layers), kind, head
        self._done = []

    def _mlp_hook(self, layer: int):
        def hook(_module: nn.Module, _args: Any, output: Any) -> None:
            if self._batch is not None:
                self._mlp[layer] = _first(output)

        return hook

    def begin(self, mask: torch.Tensor) -> None:
        """A new batch; mask (B, T), 1 at real tokens (any padding side)."""
        m = mask.bool()
        count = m.sum(1, keepdim=True).double()
        T = m.shape[1]
        last = T - 1 - m.flip(1).int().argmax(1)
        names = QUANTITIES + (SPLIT_QUANTITIES if self.kind else ())
        self._batch = _Batch(
            w=m.double() / count,
            keep=m[..., None],
            last=last.long(),
            terms={q: [None] * self.layers for q in names},
            last_states=[None] * (self.layers + 1),
            lens_states=[None] * (self.layers + 1) if self.head is not None else [],
        )
        self._prev, self._mlp = None, {}

    def __call__(self, layer: int, hidden: torch.Tensor) -> None:
        batch = self._batch
        assert batch is not None, "begin() a batch before its forward"
        w, keep, last = batch.on(hidden.device)
        hz = torch.where(keep, hidden, 0.0).float()
        batch.last_states[layer] = hz[torch.arange(hz.shape[0], device=hz.device), last]
        if layer > 0:
            prev = self._prev if self._prev.device == hz.device else self._prev.to(hz.device)
            mlp = self._mlp.pop(layer, None) if self.kind else None
            if mlp is not None:
                mlp = torch.where(keep, mlp.to(hz.device), 0.0).float()
            terms = layer_terms(prev, hz, w, mlp, parallel=self.kind == "parallel")
            for name, value in terms.items():
                batch.terms[name][layer - 1] = value.to(batch.w.device)
        self._prev = hz
        if self.head is not None:
            batch.lens_states[layer] = hidden.detach().clone()  # the model's dtype, as its head
            if layer == self.layers and all(x is not None for x in batch.lens_states):
                states, batch.lens_states = batch.lens_states, []
                batch.lens = lens_terms(self.head, states, batch.keep[..., 0])

    def end(self, slots: list[int]) -> None:
        """The batch's forward is queued: keep its values (on the device) for passages `slots`."""
        batch, self._batch, self._prev, self._mlp = self._batch, None, None, {}
        assert batch is not None
        dev = batch.w.device
        stacked = {
            q: torch.stack([t for t in v if t is not None], 1) for q, v in batch.terms.items()
        }
        last = torch.stack([s.to(dev) for s in batch.last_states])  # (L+1, B, d)
        lens = None if batch.lens is None else {k: v.to(dev) for k, v in batch.lens.items()}
        self._done.append((list(slots), stacked, angular_matrix(last), lens))

    def abandon(self) -> None:
        self._batch, self._prev, self._mlp = None, None, {}

    def rows(self, lengths: list[int] | np.ndarray) -> AtlasRows | None:
        """Every passage's row (collected from the device here), or None when some passage's
        batch did not run in this extraction; `lengths` (N,) are the passages' token counts."""
        n, L = self.n, self.layers
        filled = np.zeros(n, dtype=bool)
        names = QUANTITIES + (SPLIT_QUANTITIES if self.kind else ())
        out = {q: np.full((n, L), np.nan) for q in names}
        angular = np.full((n, L + 1, L + 1), np.nan)
        lens: dict[str, np.ndarray] | None = None
        if self.head is not None:
            lens = {"kl": np.full((n, L + 1), np.nan), "top1": np.full((n, L + 1), np.nan)}
            lens["depth"] = np.full(n, np.nan)
        for slots, stacked, ang, batch_lens in self._done:
            if any(stacked[q].shape[1] != L for q in names):
                return None  # a block that never reported (not a decoder stack we know)
            idx = np.asarray(slots, dtype=np.int64)
            for q in names:
                out[q][idx] = stacked[q].cpu().numpy()
            angular[idx] = ang.cpu().numpy()
            filled[idx] = True
            if lens is not None and batch_lens is None:
                lens = None  # a batch without its lens: no lens for the run (never a partial one)
            for q in lens or ():
                lens[q][idx] = batch_lens[q].cpu().numpy()
        if n == 0 or not filled.all():
            return None
        split = {q: out[q] for q in SPLIT_QUANTITIES} if self.kind else None
        return AtlasRows(
            r=out["r"],
            c=out["c"],
            bi=out["bi"],
            angular=angular,
            lengths=np.asarray(lengths, dtype=np.int64),
            split=split,
            split_kind=self.kind,
            lens=lens,
            lens_refused=self.lens_refused,
        )


def rows_from_states(
    states: list[torch.Tensor], mask: torch.Tensor, *, chunk: int = 64
) -> AtlasRows:
    """`AtlasRows` of token states computed elsewhere: h_0 .. h_L, each (N, T, d), with the
    attention mask (N, T); the same arithmetic as the hooks (no sublayer split: the states do
    not carry the MLP's write)."""
    N = int(states[0].shape[0])
    tap = AtlasTap(split=False)
    tap.start(N, len(states) - 1)
    mask = torch.as_tensor(mask).bool()
    for start in range(0, N, chunk):
        rows = slice(start, min(start + chunk, N))
        tap.begin(mask[rows])
        for layer, h in enumerate(states):
            tap(layer, torch.as_tensor(h[rows]))
        tap.end(list(range(rows.start, rows.stop)))
    got = tap.rows(mask.sum(1).numpy())
    assert got is not None  # every row was computed here
    return got


# ---------------------------------------------------------------------------------------------
# The store

ROWS_FILE = "atlas.npz"
SKIP_FILE = "skip_effect.npz"
#: Bump when what the files hold changes (older files then read as absent).
ROWS_FORMAT = 1  # the logit lens's arrays are optional: a file without them has no lens
SKIP_FORMAT = 1
MEMORY_RUNS = 16
_MEMORY: OrderedDict[tuple[str, str, str], dict[str, np.ndarray]] = OrderedDict()
#: Largest |value| of each quantity: ratios are non-negative (a relative contribution of 1e6
#: would be a broken state, not a block), cosines within [-1, 1], BI within [0, 2].
_RANGES = {
    "r": (0.0, 1e6),
    "c": (-1.0, 1.0),
    "bi": (0.0, 2.0),
    "r_attn": (0.0, 1e6),
    "c_attn": (-1.0, 1.0),
    "r_mlp": (0.0, 1e6),
    "c_mlp": (-1.0, 1.0),
}
_TOL = 1e-6


def _folder(spec: Any) -> Path:
    from deffcore.core.files import cache_dir

    return cache_dir() / spec.key()


def _in_cache(folder: Path) -> bool:
    """The run's folder is a cache entry of ours (else its files live in memory only)."""
    from deffcore.extraction.cache import is_run_entry

    return is_run_entry(folder)


def _meta(spec: Any, fmt: int, **extra: Any) -> dict[str, Any]:
    return {
        "format": fmt,
        "key": spec.key(),
        "spec": asdict(spec),
        "created": utc_stamp(),
        **extra,
    }


def _keep(spec: Any, name: str, arrays: dict[str, np.ndarray], meta: dict[str, Any]) -> None:
    """Write `name` beside the run's entry (atomic), or keep it in memory without one."""
    from deffcore.core.files import atomic_write, npz_bytes, writable_entry

    arrays = {**arrays, "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)}
    folder = _folder(spec)
    memo = (str(folder.parent), spec.key(), name)
    if _in_cache(folder):
        # writable_entry refuses a folder that is not provably ours (a link, a user's folder)
        atomic_write(writable_entry(folder, create=False) / name, npz_bytes(arrays))
        _MEMORY.pop(memo, None)
        return
    _MEMORY[memo] = arrays
    _MEMORY.move_to_end(memo)
    while len(_MEMORY) > MEMORY_RUNS:
        _MEMORY.popitem(last=False)


def _load(spec: Any, name: str, fmt: int) -> tuple[dict[str, np.ndarray], dict] | None:
    """The arrays and meta of `name` for `spec`, or None (absent, unreadable, another format,
    another run's)."""
    arrays, folder = None, _folder(spec)
    if _in_cache(folder) and (folder / name).is_file():
        try:
            arrays = npz_arrays((folder / name).read_bytes())
        except Exception:  # a damaged file is absent, never a crash
            arrays = None
    if arrays is None:
        arrays = _MEMORY.get((str(folder.parent), spec.key(), name))
    if arrays is None or "meta" not in arrays or arrays["meta"].dtype != np.uint8:
        return None
    try:
        meta = json.loads(arrays["meta"].tobytes().decode())
    except (UnicodeDecodeError, ValueError):
        return None
    mine = isinstance(meta, dict) and meta.get("format") == fmt and meta.get("key") == spec.key()
    if not mine or meta.get("spec") != asdict(spec):
        return None
    return arrays, meta


# ---------------------------------------------------------------------------------------------
# The atlas rows


def atlas_taps(lens: bool = False) -> tuple[AtlasTap]:
    """The taps an extraction takes the atlas with (`measurement.measure_spec`); `lens`: the
    logit lens too (on request: L + 1 unembeddings per token, SPEC 16.2)."""
    return (AtlasTap(lens=lens),)


def keep_atlas(spec: Any, taps: tuple, pooled: Any) -> AtlasRows | None:
    """After an extraction with `atlas_taps()`: keep the rows when every passage ran here
    (a resumed or served run has none); a failed write warns and loses only the atlas."""
    import warnings

    from deffcore.core.errors import DeffError

    rows = None
    for tap in taps:
        if isinstance(tap, AtlasTap) and pooled.lengths is not None:
            rows = tap.rows(pooled.lengths) if tap.n == pooled.n else None
    if rows is None:
        return None
    try:
        write_rows(spec, rows)
    except DeffError as err:
        warnings.warn(f"The run's depth-use atlas was not kept: {err}", stacklevel=2)
    return rows


#: Bytes np.savez adds per array (zip headers, the .npy header, the meta array's JSON).
NPZ_ARRAY_BYTES = 256


def rows_bytes(n: int, layers: int, *, split: bool = True, lens: bool = False) -> int:
    """Bytes of the atlas file `write_rows` keeps for N = `n` passages and L = `layers`
    (float64): r, c, bi (N, L); angular (N, L+1, L+1); lengths (N,); the split's four (N, L);
    the lens's kl, top1 (N, L+1) and depth (N,). The angular term dominates: a SmolLM2 run of
    4,096 passages keeps about 38 MB (SPEC 14, "Writes said first")."""
    L = int(layers)
    floats = n * (3 * L + (L + 1) ** 2 + 1)
    arrays = len(QUANTITIES) + 3  # + angular, lengths, meta
    if split:
        floats, arrays = floats + 4 * n * L, arrays + len(SPLIT_QUANTITIES)
    if lens:
        floats, arrays = floats + n * (2 * (L + 1) + 1), arrays + len(LENS_QUANTITIES)
    return 8 * floats + NPZ_ARRAY_BYTES * arrays


def skip_bytes(passages: int, layers: int) -> int:
    """Bytes of the skip-effect file `write_skip` keeps: later and later_max (P, L, L) and kl
    (P, L), float64, for P = `passages` (min(N, 64))."""
    L = int(layers)
    return 8 * passages * L * (2 * L + 1) + NPZ_ARRAY_BYTES * 4


def write_rows(spec: Any, rows: AtlasRows) -> None:
    """Keep a run's atlas rows (see the module docstring)."""
    arrays = {q: getattr(rows, q) for q in QUANTITIES}
    arrays.update(angular=rows.angular, lengths=rows.lengths)
    if rows.split is not None:
        arrays.update(rows.split)
    if rows.lens is not None:
        arrays.update({f"lens_{q}": rows.lens[q] for q in LENS_QUANTITIES})
    meta = _meta(spec, ROWS_FORMAT, split_kind=rows.split_kind, lens_refused=rows.lens_refused)
    _keep(spec, ROWS_FILE, arrays, meta)


def _valid(a: np.ndarray | None, shape: tuple[int, ...], low: float, high: float) -> bool:
    if a is None or a.shape != shape or a.dtype.kind != "f" or not np.isfinite(a).all():
        return False
    return bool(a.size == 0 or (a.min() >= low - _TOL and a.max() <= high + _TOL))


def _check_lens(arrays: dict[str, np.ndarray], N: int, L: int) -> dict[str, np.ndarray] | None:
    """The logit lens's stored arrays when valid; None when absent; ValueError when damaged."""
    if not any(f"lens_{q}" in arrays for q in LENS_QUANTITIES):
        return None
    shapes = {"kl": ((N, L + 1), 0.0, 1e6), "top1": ((N, L + 1), 0.0, 1.0), "depth": ((N,), 0, L)}
    if not all(_valid(arrays.get(f"lens_{q}"), *shapes[q]) for q in LENS_QUANTITIES):
        raise ValueError("a damaged logit lens")
    return {q: arrays[f"lens_{q}"].astype(np.float64) for q in LENS_QUANTITIES}


def check_rows(
    arrays: dict[str, np.ndarray], split_kind: Any, lens_refused: Any = None
) -> AtlasRows | None:
    """`AtlasRows` of stored arrays when every one has its shape, finiteness and range."""
    r, lengths = arrays.get("r"), arrays.get("lengths")
    if r is None or r.ndim != 2 or lengths is None or lengths.shape != (r.shape[0],):
        return None
    (N, L), kind = r.shape, split_kind if split_kind in ("sequential", "parallel") else None
    if N < 1 or L < 1 or lengths.dtype.kind not in "iu" or (lengths < 1).any():
        return None
    names = QUANTITIES + (SPLIT_QUANTITIES if kind else ())
    if not all(_valid(arrays.get(q), (N, L), *_RANGES[q]) for q in names):
        return None
    ang = arrays.get("angular")
    if not _valid(ang, (N, L + 1, L + 1), 0.0, 1.0):
        return None
    if np.abs(ang - ang.transpose(0, 2, 1)).max() > _TOL:
        return None
    split = {q: arrays[q].astype(np.float64) for q in SPLIT_QUANTITIES} if kind else None
    try:
        lens = _check_lens(arrays, N, L)
    except ValueError:
        return None
    return AtlasRows(
        r=r.astype(np.float64),
        c=arrays["c"].astype(np.float64),
        bi=arrays["bi"].astype(np.float64),
        angular=ang.astype(np.float64),
        lengths=lengths.astype(np.int64),
        split=split,
        split_kind=kind,
        lens=lens,
        lens_refused=lens_refused[:300] if isinstance(lens_refused, str) and lens is None else None,
    )


def read_rows(spec: Any) -> AtlasRows | None:
    """The run's atlas rows, or None (never stored, or not a valid file of this version)."""
    found = _load(spec, ROWS_FILE, ROWS_FORMAT)
    if found is None:
        return None
    arrays, meta = found
    rows = check_rows(arrays, meta.get("split_kind"), meta.get("lens_refused"))
    if rows is None or (isinstance(spec.n, int) and rows.n > spec.n):
        return None
    return rows


# ---------------------------------------------------------------------------------------------
# The skip effect's rows


def write_skip(spec: Any, rows: Any) -> None:
    """Keep a run's skip-effect rows (`deffcore.lenses.atlas_skip.SkipRows`)."""
    arrays = {"later": rows.later, "later_max": rows.later_max, "kl": rows.kl}
    _keep(spec, SKIP_FILE, arrays, _meta(spec, SKIP_FORMAT, passages=int(rows.kl.shape[0])))


def read_skip(spec: Any, passages: int | None = None) -> dict[str, np.ndarray] | None:
    """The stored skip-effect arrays of the run (for `passages` passages; None: whichever
    count it was computed on), or None."""
    found = _load(spec, SKIP_FILE, SKIP_FORMAT)
    if found is None or (passages is not None and found[1].get("passages") != passages):
        return None
    arrays = found[0]
    kl = arrays.get("kl")
    if kl is None or kl.ndim != 2 or kl.shape[0] != found[1].get("passages"):
        return None
    P, L = kl.shape
    later, top = arrays.get("later"), arrays.get("later_max")
    upper = np.triu(np.ones((L, L), dtype=bool), k=1)
    for a in (later, top):
        if a is None or a.shape != (P, L, L) or a.dtype.kind != "f":
            return None
        inside = a[:, upper]
        if not np.isfinite(inside).all() or (inside.size and inside.min() < 0):
            return None
    if not np.isfinite(kl).all() or kl.min() < -_TOL:
        return None
    return {"later": later, "later_max": top, "kl": kl}
