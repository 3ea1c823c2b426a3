"""Norm interventions (paper Table S6): Gemma-style norms replaced by identity at inference.

Gemma-2/3 blocks normalise each sub-layer's output before adding it to the residual stream
("post" norms: `post_attention_layernorm`, `post_feedforward_layernorm`) and normalise queries
and keys per head ("QK" norms: `self_attn.q_norm`, `self_attn.k_norm`). The paper asks how much
of the sub-reference effective depth these norms cause by running the same weights with them
removed:

    with norm_intervention(model, "no_post"):
        model(input_ids)          # post norms act as identity
    # here the model is exactly as before

Decisions (SPEC section 9 is silent on the mechanics):
- "Identity" is implemented with forward hooks that return the norm's input unchanged. No
  weight or module is touched, so leaving the block restores the model bit for bit (the hooks
  are removed in a `finally`, also when the body raises). The norm itself still runs and its
  result is discarded; that costs a few percent of the forward pass and keeps other people's
  hooks on the same modules working.
- Which modules are a model's post norms and QK norms is the architecture adapter's answer
  (`Adapter.post_norms`, `Adapter.qk_norms` in `deffcore.inputs.architecture`: Gemma's names
  by the generic rule, other names for the families that use them); the intervention applies
  to every such module in the model.

Part of a run's inputs (`deffcore.inputs.run_spec.open_run_inputs` applies
`RunSpec.intervention` around the forward passes); the lab that tabulates every pooling control
under each intervention is `deffcore.labs.interventions`, which re-exports these names.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from deffcore.core.errors import UnsupportedArchitectureError
from deffcore.core.lazy import nn, torch  # imported on first use: a run's spec never needs it
from deffcore.inputs.architecture import adapter_of

#: Intervention names, in the order the paper's Table S6 lists them.
INTERVENTIONS: tuple[str, ...] = ("none", "no_post", "no_qk", "no_post_no_qk")
#: How the paper (and paper_reference.csv's `note` column) writes each intervention.
PAPER_LABELS: dict[str, str] = {
    "none": "none",
    "no_post": "no post",
    "no_qk": "no QK",
    "no_post_no_qk": "no post/no QK",
}


def post_norm_modules(model: nn.Module) -> list[nn.Module]:
    """The post-attention and post-feed-forward norms of every block (empty if there are none;
    `Adapter.post_norms`)."""

    return adapter_of(model).post_norms(model)


def qk_norm_modules(model: nn.Module) -> list[nn.Module]:
    """The query and key norms of every attention module (empty if there are none)."""
    return adapter_of(model).qk_norms(model)


def intervention_targets(model: nn.Module, name: str) -> list[nn.Module]:
    """The norm modules that `name` replaces by identity; raises if the model lacks them."""
    if name not in INTERVENTIONS:
        raise UnsupportedArchitectureError(
            f"Unknown norm intervention {name!r}; choose one of {', '.join(INTERVENTIONS)}."
        )
    arch = type(model).__name__
    targets: list[nn.Module] = []
    if name in ("no_post", "no_post_no_qk"):
        post = post_norm_modules(model)
        if not post:
            raise UnsupportedArchitectureError(
                f"The {name!r} intervention needs Gemma-style post-sub-layer norms "
                f"(post_attention_layernorm and post_feedforward_layernorm applied to each "
                f"sub-layer's output), and {arch} has none; it applies to Gemma-2/3 and OLMo-2."
            )
        targets += post
    if name in ("no_qk", "no_post_no_qk"):
        qk = qk_norm_modules(model)
        if not qk:
            raise UnsupportedArchitectureError(
                f"The {name!r} intervention needs query/key norms (self_attn.q_norm and "
                f"self_attn.k_norm), and {arch} has none; it applies to Gemma-3, OLMo-2 and Qwen3."
            )
        targets += qk
    return targets


def _identity_hook(module: nn.Module, args: tuple[Any, ...], output: torch.Tensor) -> torch.Tensor:
    # The value a forward hook returns replaces the module's output: hand back its input.
    return args[0]


@contextlib.contextmanager
def norm_intervention(model: nn.Module, name: str) -> Iterator[nn.Module]:
    """Inside the `with`, the norms `name` names act as identity; on exit nothing is left over.

    name: one of `INTERVENTIONS` ("none" changes nothing and works on any model).
    Raises `UnsupportedArchitectureError` (before anything is changed) for an unknown name or a
    model lacking the norms. Inference only: the hooks also apply in training mode, but the
    paper's intervention is never trained with.
    """
    targets = intervention_targets(model, name)
    handles = [module.register_forward_hook(_identity_hook) for module in targets]
    try:
        yield model
    finally:
        for handle in handles:
            handle.remove()


def supported_interventions(model: nn.Module) -> list[str]:
    """The intervention names this model supports (always includes "none")."""
    supported = []
    for name in INTERVENTIONS:
        try:
            intervention_targets(model, name)
        except UnsupportedArchitectureError:
            continue
        supported.append(name)
    return supported
