"""AdamW's update as one compiled op (variants/fused_adamw.py, kernels/adamw.cc) against Paddle's
own AdamW and ClipGradByGlobalNorm: the same parameters and accumulators after several steps
(layer-wise learning rates, weight decay by name, clipping that bites and that does not, a
schedule), state dicts that load into either, and Paddle's step wherever the fused one does not
apply."""
import copy

import numpy as np
import paddle
import paddle.nn as nn
import pytest

import paddle_vit
from paddle_vit.config import OptimizerConfig
from paddle_vit.engine import optim
from paddle_vit import paddle_versions
from paddle_vit.variants import compiled, fused_adamw
from paddle_vit.variants.fused_adamw import FusedCpuAdamW

from kernel_calls import count_calls

pytestmark = pytest.mark.skipif(not compiled.build_possible(), reason="no C++ compiler: Paddle's AdamW is kept")


def small_model():
    paddle.seed(11)
    return nn.Sequential(nn.Linear(12, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 5))


def optimizer_for(cls, model, clip, schedule=None):
    decayed = {model[0].weight.name, model[3].weight.name}
    model[3].weight.optimize_attr["learning_rate"] = 0.5  # a layer-wise rate
    return cls(learning_rate=schedule or 0.02, parameters=model.parameters(), beta1=0.8, beta2=0.95, epsilon=1e-6,
               weight_decay=0.1, apply_decay_param_fun=lambda name: name in decayed,
               grad_clip=nn.ClipGradByGlobalNorm(clip) if clip else None)


def train(model, optimizer, steps, seed=0, schedule=None):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        x = paddle.to_tensor(rng.normal(size=(16, 12)).astype(np.float32))
        y = paddle.to_tensor(rng.integers(0, 5, 16))
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.clear_grad()
        if schedule is not None:
            schedule.step()


def accumulators(optimizer, model):
    """[moment1, moment2, beta1 power, beta2 power] of each parameter, in the model's order."""
    kinds = ("moment1", "moment2", "beta1_pow_acc", "beta2_pow_acc")
    return [optimizer._accumulators[kind][parameter.name].numpy() for parameter in model.parameters()
            for kind in kinds]


@pytest.fixture
def calls(monkeypatch):
    return count_calls(monkeypatch, fused_adamw, "paddle_vit_adamw")


@pytest.mark.parametrize("clip", [0.05, 100.0, None])
def test_the_fused_update_gives_paddles_adamw(calls, clip):
    ours, theirs = small_model(), small_model()
    schedules = [optim.WarmupCosineSchedule(0.02, 8, warmup_steps=2) for _ in range(2)]
    fused = optimizer_for(FusedCpuAdamW, ours, clip, schedules[0])
    paddles = optimizer_for(paddle.optimizer.AdamW, theirs, clip, schedules[1])
    start = [parameter.numpy().copy() for parameter in theirs.parameters()]
    train(ours, fused, 6, schedule=schedules[0])
    train(theirs, paddles, 6, schedule=schedules[1])
    assert calls[0] == 6
    for ours_now, theirs_now, before in zip(ours.parameters(), theirs.parameters(), start):
        moved = np.abs(theirs_now.numpy() - before).max()
        assert moved > 1e-3  # every parameter trained
        np.testing.assert_allclose(ours_now.numpy(), theirs_now.numpy(), rtol=0, atol=1e-4 * moved)
    for got, expected in zip(accumulators(fused, ours), accumulators(paddles, theirs)):
        np.testing.assert_allclose(got, expected, rtol=2e-4, atol=1e-9)


def test_a_state_dict_of_either_optimizer_continues_in_the_other(calls):
    model = small_model()
    fused = optimizer_for(FusedCpuAdamW, model, 0.05)
    with paddle.utils.unique_name.guard():  # accumulators named as in a new process, which a checkpoint meets
        train(model, fused, 3)
    saved_parameters = [parameter.numpy().copy() for parameter in model.parameters()]
    saved_state = {key: paddle.to_tensor(value.numpy()) if isinstance(value, paddle.Tensor) else copy.deepcopy(value)
                   for key, value in fused.state_dict().items()}
    train(model, fused, 3, seed=1)
    continued = [parameter.numpy().copy() for parameter in model.parameters()]
    for parameter, value in zip(model.parameters(), saved_parameters):
        parameter.set_value(value)
    paddles = optimizer_for(paddle.optimizer.AdamW, model, 0.05)
    paddles.set_state_dict(saved_state)
    with paddle.utils.unique_name.guard():
        train(model, paddles, 3, seed=1)
    assert calls[0] == 6
    for parameter, value in zip(model.parameters(), continued):
        np.testing.assert_allclose(parameter.numpy(), value, rtol=0, atol=1e-5)


def test_a_parameter_without_a_gradient_is_left_as_it_was(calls):
    model = small_model()
    fused = optimizer_for(FusedCpuAdamW, model, 1.0)
    model[3].bias.stop_gradient = True
    before = model[3].bias.numpy().copy()
    train(model, fused, 2)
    np.testing.assert_array_equal(model[3].bias.numpy(), before)
    assert model[3].bias.name not in fused._accumulators["moment1"]


def test_the_trainers_optimizer_updates_with_the_fused_op(calls):
    model = paddle_vit.create_model("vit_tiny_patch16_224", image_size=32, patch_size=8, depth=1, num_classes=5)
    built = optim.build_optimizer(model, OptimizerConfig(clip_grad_norm=1.0), 0.001)
    assert type(built) is FusedCpuAdamW
    model(paddle.randn([2, 3, 32, 32])).sum().backward()
    built.step()
    assert calls[0] == 1


@pytest.mark.parametrize("case", ["amsgrad", "by_norm", "groups", "need_clip", "Paddle 3.9"])
def test_paddles_step_runs_where_the_fused_update_does_not_apply(calls, monkeypatch, case):
    if case == "Paddle 3.9":  # a release whose AdamW's private state it was not written for
        monkeypatch.setattr(paddle_versions, "running_release", lambda: "3.9")
    model = small_model()
    reference_model = copy.deepcopy(model)

    def arguments(model):
        given = dict(learning_rate=0.01, parameters=model.parameters(), grad_clip=nn.ClipGradByGlobalNorm(1.0))
        if case == "amsgrad":
            given["amsgrad"] = True
        if case == "by_norm":
            given["grad_clip"] = nn.ClipGradByNorm(1.0)
        if case == "groups":
            given["parameters"] = [{"params": model[0].parameters()}, {"params": model[3].parameters()}]
        if case == "need_clip":
            model[0].weight.need_clip = False
        return given
    train(model, FusedCpuAdamW(**arguments(model)), 2)
    train(reference_model, paddle.optimizer.AdamW(**arguments(reference_model)), 2)
    assert calls[0] == 0
    for ours, theirs in zip(model.parameters(), reference_model.parameters()):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
