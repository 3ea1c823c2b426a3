"""Which transformers causal-LM types deffcore measures, each verified on a tiny random model
(stage: lenses).

    row = verify_type("mixtral")      # SupportRow(status="verified", family=..., ...)
    rows = support_rows()             # every type of transformers' causal-LM mapping
    markdown = support_markdown(rows) # docs/support.md (scripts/support_table.py writes it)

For each type of `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`: a type refused by design
(`deffcore.inputs.model.refusal_by_design`, from `small_configs.BY_DESIGN`: encoders,
encoder-decoder decoders) is refused with its reason, the reason a model folder of the type is
refused with when it loads.
Every other type is built from its small config (`small_configs.small_config`, seeded weights,
float32) and measured with `dc.measure(model, tokenizer, texts)` on `TEXTS` (the byte
tokenizer, with a BOS when the family's convention has one). The run is *verified* when

- its pooled h_0 .. h_{L-1} (default mean and first_non_bos) equal those pooled by hand from
  `output_hidden_states` of the whole causal LM, one passage at a time without padding
  (rtol `RTOL`; h_L is the final norm's input, which `output_hidden_states` does not return);
- an attention-only decoder's states are the same with left padding (a block the adapters
  missed as recurrent would change them);
- the blocks `attention_blocks` names are those `output_attentions` returns (eager attention),
  so the sink diagnostics read every attention block and only those.

Anything else refuses the type with one sentence saying which step failed and how. The table
holds only what does not depend on the machine (no timings, no differences), so the test can
regenerate it and compare it with docs/support.md byte for byte.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from deffcore.core.errors import DeffError

#: Relative tolerance of the pooled states against output_hidden_states.
RTOL = 1e-5
#: Largest tiny model the walk builds (parameters): a small config that is still big is a bug.
MAX_PARAMS = 3_000_000
#: The passages every type is measured on (byte tokens: 14 to 52 per passage).
TEXTS: tuple[str, ...] = (
    "The committee met on Tuesday.",
    "Rain is expected across the north later this week.",
    "Shares rose sharply after record profits.",
    "A new museum opened its doors to the public.",
    "The striker scored twice in the second half.",
    "Engineers test a faster way to charge cars.",
    "Voters go to the polls next month.",
    "The band announced a farewell tour.",
)
MAX_TOKENS = 64


@dataclass(frozen=True)
class SupportRow:
    """One causal-LM type: verified, or refused with the reason (a sentence)."""

    model_type: str
    model_class: str
    status: str  # "verified" or "refused"
    reason: str = ""
    family: str = ""
    blocks: str = ""  # where the blocks are, e.g. "model.layers" (2 blocks)
    final_norm: str = ""
    bos: bool | None = None
    interventions: tuple[str, ...] = ()
    sink_blocks: str = ""

    @property
    def verified(self) -> bool:
        return self.status == "verified"


class _Refused(DeffError):
    """Internal: one step refused the type (its message is the table's reason)."""


def _first_line(err: BaseException) -> str:
    text = (str(err).strip().splitlines() or [""])[0].strip()
    return f"{type(err).__name__}: {text[:160]}" if text else type(err).__name__


def build_small(model_type: str) -> tuple[Any, Any]:
    """(tiny causal LM of `model_type` in eval mode, the byte tokenizer of its BOS convention);
    `_Refused` when no small model builds."""
    from deffcore.inputs.architecture import adapter_for
    from deffcore.inputs.model import byte_level_tokenizer
    from deffcore.inputs.small_configs import causal_lm_class, default_special_ids, small_config

    try:
        config = small_config(model_type)
        cls = causal_lm_class(model_type)
        config = _config_for(cls, config)
        with torch.device("meta"):
            params = sum(p.numel() for p in cls(config).parameters())
        if params > MAX_PARAMS:
            raise _Refused(f"its small config still has {params:,} parameters")
        with torch.random.fork_rng():
            torch.manual_seed(0)
            model = cls(config).float().eval()
    except _Refused:
        raise
    except Exception as err:  # a config or model transformers cannot build small
        raise _Refused(f"no small model builds ({_first_line(err)})") from err
    bos = adapter_for(model_type).adds_bos(default_special_ids(model_type))
    return model, byte_level_tokenizer(add_bos=bos)


def _config_for(cls: type, config: Any) -> Any:
    """The config `cls` takes: a composite config's text config when the causal-LM class is
    text-only (Llama-4, Qwen3.5, Emu3 ...)."""
    wanted = getattr(cls, "config_class", None)
    if not isinstance(wanted, type) or isinstance(config, wanted):
        return config
    for name in ("text_config", "language_config", "decoder_config"):
        sub = getattr(config, name, None)
        if isinstance(sub, wanted):
            return sub
    return config


def _module_path(root: torch.nn.Module, target: torch.nn.Module | None) -> str:
    if target is None:
        return ""
    return next((name for name, m in root.named_modules() if m is target), "?")


def _reference(model: Any, arch: Any, ids: list[list[int]]) -> dict[str, np.ndarray]:
    """The states `output_hidden_states` gives, one unpadded passage at a time, pooled in
    float64: "default" and "first_non_bos" (L - offset, N, d) for h_offset .. h_{L-1} (`offset`
    the adapter's `hidden_states_offset`: 1 when the family reports no h_0), and "h_L" (N, d),
    the mean of the final norm's input, checked to be the norm that makes the last entry of
    `output_hidden_states` (absent when no final norm was found)."""
    L, offset, norm = arch.layers, arch.adapter.hidden_states_offset, arch.final_norm
    means, seconds, last = [], [], []
    for seq in ids:
        seen: dict[str, torch.Tensor] = {}
        handle = None
        if norm is not None:
            handle = norm.register_forward_hook(
                lambda _m, args, out, seen=seen: seen.update(h_in=args[0], h_out=out)
            )
        try:
            with torch.inference_mode():
                out = model(
                    input_ids=torch.tensor([seq]), output_hidden_states=True, use_cache=False
                )
        finally:
            if handle is not None:
                handle.remove()
        states = getattr(out, "hidden_states", None)
        if states is None or len(states) != L + 1:
            got = "none" if states is None else len(states)
            raise _Refused(f"output_hidden_states gives {got} states for {L} blocks")
        if norm is not None:
            if "h_in" not in seen or not torch.allclose(seen["h_out"], states[-1]):
                raise _Refused(
                    "the module found as its final norm does not make the last hidden state"
                )
            last.append(seen["h_in"][0].flatten(1).double().mean(0))
        if offset:  # no embedding entry (Mamba, RWKV): (h_1 .. h_L, normed h_L)
            states = (None, *states[:-1])
        # (L - offset, T, d); stacked hyper-connection streams (T, n, d) as one (T, n x d)
        stack = torch.stack([h[0].flatten(1) for h in states[offset:L]]).double()
        means.append(stack.mean(1))
        seconds.append(stack[:, 1])
    ref = {
        "default": torch.stack(means, 1).numpy(),
        "first_non_bos": torch.stack(seconds, 1).numpy(),
    }
    if last:
        ref["h_L"] = torch.stack(last).numpy()
    return ref


def _close(ours: np.ndarray, ref: np.ndarray) -> bool:
    scale = float(np.abs(ref).max()) or 1.0
    return bool(np.allclose(ours, ref, rtol=RTOL, atol=RTOL * scale))


def _check_states(model: Any, tokenizer: Any, arch: Any) -> None:
    """The measured pooled states against output_hidden_states (module docstring)."""
    from deffcore.inputs.texts import tokenize
    from deffcore.runs.measure import measure  # dc.measure(model, tokenizer, texts)

    m = measure(model, tokenizer, list(TEXTS), max_tokens=MAX_TOKENS)
    L = arch.layers
    if m.layers != L:
        raise _Refused(f"the run has {m.layers} blocks, the model {L}")
    ids, _ = tokenize(tokenizer, list(TEXTS), MAX_TOKENS)
    ref = _reference(model, arch, ids)
    offset = arch.adapter.hidden_states_offset
    for pooling in ("default", "first_non_bos"):
        ours, expected = m.pooled.pooled[pooling][offset:L], ref[pooling]
        if ours.shape != expected.shape:
            raise _Refused(f"pooled {pooling} has shape {ours.shape}, expected {expected.shape}")
        if not _close(ours, expected):
            worst = offset + int(np.argmax(np.abs(ours - expected).max(axis=(1, 2))))
            raise _Refused(
                f"pooled {pooling} differs from output_hidden_states at h_{worst} "
                f"(beyond rtol {RTOL:g})"
            )
    if "h_L" in ref and not _close(m.pooled.pooled["default"][L], ref["h_L"]):
        raise _Refused("pooled h_L differs from the input of its final norm")
    if not arch.recurrent:
        _check_left_padding(model, tokenizer, m)


def _check_left_padding(model: Any, tokenizer: Any, m: Any) -> None:
    from deffcore.extraction.forward import extract_pooled
    from deffcore.runs.external import wrap_loaded

    loaded = wrap_loaded(model, tokenizer, "support")
    left = extract_pooled(loaded, list(TEXTS), max_tokens=MAX_TOKENS, padding_side="left")
    if not _close(left.pooled["default"], m.pooled.pooled["default"]):
        raise _Refused(
            "its states change with left padding, but no block was recognised as recurrent"
        )


def _sink_blocks(model: Any, tokenizer: Any, arch: Any) -> str:
    """Which blocks the sink diagnostics score, from a real `bos_diagnostics` pass: its blocks
    with a finite score in [0, 1] must be exactly the adapter's attention blocks."""
    from deffcore.lenses.diagnostics import bos_diagnostics
    from deffcore.runs.external import wrap_loaded

    expected = arch.attention_blocks()
    if not expected:
        return "none (no attention blocks)"
    try:
        diag = bos_diagnostics(
            wrap_loaded(model, tokenizer, "support"), list(TEXTS), max_tokens=MAX_TOKENS
        )
    except DeffError as err:
        return f"not available: {str(err).rstrip('.')}"
    except Exception as err:  # an attention that cannot run eagerly
        return f"not available: {_first_line(err)}"
    scores = diag.sink_scores  # (L, H)
    scored = [i for i in range(arch.layers) if np.isfinite(scores[i]).all()]
    if scored != expected or not ((scores[scored] >= 0) & (scores[scored] <= 1 + 1e-6)).all():
        raise _Refused(
            f"the sink diagnostics scored blocks {scored}, but its attention blocks are {expected}"
        )
    L = arch.layers
    return "every block" if len(expected) == L else f"{len(expected)} of {L} blocks"


def verify_type(model_type: str, model_class: str | None = None) -> SupportRow:
    """Build, measure and check one causal-LM type (module docstring)."""
    from deffcore.inputs.architecture import architecture_of
    from deffcore.inputs.interventions import supported_interventions
    from deffcore.inputs.model import refusal_by_design
    from deffcore.inputs.small_configs import causal_lm_types

    cls_name = model_class or causal_lm_types().get(model_type, "")
    by_design = refusal_by_design(model_type)  # the same refusal as a model folder's load
    if by_design is not None:
        return SupportRow(model_type, cls_name, "refused", f"Refused by design: {by_design}.")
    try:
        model, tokenizer = build_small(model_type)
        arch = architecture_of(model)
        bos = bool(tokenizer("a").input_ids[:1] == [1])
        _check_states(model, tokenizer, arch)
        sinks = _sink_blocks(model, tokenizer, arch)
    except (_Refused, DeffError) as err:
        return SupportRow(model_type, cls_name, "refused", _sentence(str(err)))
    except Exception as err:  # measuring failed somewhere inside transformers
        return SupportRow(
            model_type, cls_name, "refused", _sentence(f"measuring fails ({_first_line(err)})")
        )
    return SupportRow(
        model_type,
        cls_name,
        "verified",
        family=arch.family,
        blocks=f"{_module_path(model, arch.blocks)} ({arch.layers})",
        final_norm=_module_path(model, arch.final_norm) or "none",
        bos=bos,
        interventions=tuple(n for n in supported_interventions(model) if n != "none"),
        sink_blocks=sinks,
    )


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".")
    return text[:1].upper() + text[1:] + "."


def support_rows(types: list[str] | None = None) -> list[SupportRow]:
    """`verify_type` of every causal-LM type (or of `types`), in transformers' order, with
    transformers' own warnings silenced (tiny configs trip many of them)."""
    import transformers

    from deffcore.inputs.small_configs import causal_lm_types

    names = causal_lm_types()
    chosen = list(names) if types is None else list(types)
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [verify_type(kind, names.get(kind)) for kind in chosen]
    finally:
        transformers.logging.set_verbosity(verbosity)


def _cell(text: str) -> str:
    """Table-cell text: no pipe or newline breaks the Markdown row."""
    return " ".join(str(text).replace("|", "/").split())


def support_markdown(rows: list[SupportRow]) -> str:
    """docs/support.md: a header with the counts, then one row per type."""
    import transformers

    verified = sum(r.verified for r in rows)
    design = sum(r.reason.startswith("Refused by design") for r in rows)
    lines = [
        "# Supported architectures",
        "",
        f"Generated by `scripts/support_table.py` (checked by `tests/test_support.py`) from "
        f"transformers {transformers.__version__}'s {len(rows)} causal-LM types "
        "(`MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`). **"
        f"{verified} verified**, {design} refused by design (encoders and the decoders of "
        f"encoder-decoder models), {len(rows) - verified - design} refused for the reason "
        "given. A model folder, hub id or GGUF file of a type refused by design is refused on "
        "load with the same reason (`deffcore.inputs.model.refusal_by_design`).",
        "",
        "*Verified*: a tiny random model of the type (`deffcore.inputs.small_configs`: 2 blocks, "
        "d = 32, seeded) is measured with `dc.measure(model, tokenizer, texts)`, and its pooled "
        "h_0 .. h_{L-1} equal those of `output_hidden_states` (rtol 1e-5), h_L equals the final "
        "norm's input, an attention-only decoder gives the same states with left padding, and the "
        "sink diagnostics score exactly its attention blocks (`deffcore.lenses.support`). Named "
        "models of a verified type (hub ids, folders, .gguf files) go through the same "
        "architecture adapters (`deffcore.inputs.architecture`).",
        "",
        "| type | model class | family | blocks (L) | final norm | BOS | interventions | "
        "sink diagnostics | status |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.verified:
            bos = "yes" if r.bos else "no"
            cells = [r.family, r.blocks, r.final_norm, bos, ", ".join(r.interventions) or "—",
                     r.sink_blocks, "verified"]  # fmt: skip
        else:
            cells = ["", "", "", "", "", "", f"refused: {r.reason}"]
        lines.append(
            "| " + " | ".join(_cell(c) for c in [r.model_type, r.model_class, *cells]) + " |"
        )
    return "\n".join(lines) + "\n"
