"""The training helpers the carry and pretraining labs share (`deffcore.labs.training`): presets
with overrides, nanoGPT's schedule, and the steps of one run, against hand-made cases."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

from deffcore.core.errors import DeffError
from deffcore.labs.training import from_preset, lr_schedule, train_steps


@dataclass
class _Knobs:
    iters: int = 10
    lr: float = 1e-3


def test_a_preset_with_overrides_ignores_the_options_left_out():
    presets = {"cpu": _Knobs(), "gpu": _Knobs(iters=100)}
    assert from_preset(presets, "gpu", "toy", {"iters": None, "lr": 0.5}) == _Knobs(100, 0.5)
    assert presets["gpu"] == _Knobs(iters=100)  # the preset itself is left alone
    with pytest.raises(DeffError, match=r"Unknown toy preset 'tpu'; choose one of cpu, gpu\."):
        from_preset(presets, "tpu", "toy", {})


def test_the_schedule_warms_up_linearly_then_decays_to_a_tenth():
    lr, warmup, iters = 1.0, 4, 14
    assert [lr_schedule(s, lr, warmup, iters) for s in range(warmup)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_schedule(warmup, lr, warmup, iters) == pytest.approx(1.0)  # cosine starts at lr
    middle = lr_schedule(warmup + 5, lr, warmup, iters)  # half-way: 0.1 + 0.45 * (1 + cos pi/2)
    assert middle == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi / 2)))
    assert lr_schedule(iters, lr, warmup, iters) == pytest.approx(0.1)
    assert lr_schedule(10 * iters, lr, warmup, iters) == pytest.approx(0.1)  # held after iters


def test_train_steps_evaluates_ticks_clips_and_follows_the_schedule():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    x = torch.randn(8, 3)
    rates, norms, evaluated, ticks = [], [], [], []

    def batch_loss() -> torch.Tensor:
        rates.append(opt.param_groups[0]["lr"])
        return 1e3 * model(x).pow(2).mean()  # gradients far above norm 1

    def evaluate(step: int) -> None:
        evaluated.append((step, model.training))

    real_step = opt.step

    def step_and_look() -> None:
        norms.append(torch.cat([p.grad.flatten() for p in model.parameters()]).norm().item())
        real_step()

    opt.step = step_and_look
    model.eval()
    train_steps(
        model, opt, batch_loss, evaluate, iters=5, eval_interval=2, lr=0.1, warmup=2,
        tick=ticks.append,
    )  # fmt: skip
    assert evaluated == [(0, True), (2, True), (4, True), (5, True)]  # and after the last step
    assert ticks == [1, 2, 3, 4, 5]
    assert rates == pytest.approx([lr_schedule(s, 0.1, 2, 5) for s in range(5)])
    assert max(norms) == pytest.approx(1.0, rel=1e-5)  # clipped at norm 1
