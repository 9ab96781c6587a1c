"""The optimizer options of the paper's protocol: momentum SGD (its fine-tuning recipe), layer-wise
learning-rate decay (against timm's scales), and linear probing (`model.freeze: backbone`)."""
import json
import os
import re

import numpy as np
import paddle
import pytest

import paddle_vit
from paddle_vit import ConfigError
from paddle_vit.checkpoint import load_checkpoint
from paddle_vit.config import OptimizerConfig, load_config
from paddle_vit.engine.optim import WarmupCosineSchedule, build_optimizer, layer_decay_scales
from paddle_vit.engine.trainer import Trainer
from paddle_vit.weights.timm import RENAMES

from repo_paths import REPO
from test_train import final_weights, small_config, stop_after
from tiny_models import tiny_vit

FIXTURES = os.path.join(REPO, "tests", "fixtures")


# ---- layer-wise learning-rate decay against timm -----------------------------------------------

def our_name(timm_name):
    for pattern, replacement in RENAMES:
        if re.fullmatch(pattern, timm_name):
            return re.sub(pattern, replacement, timm_name)
    raise AssertionError(f"no rename for timm's {timm_name}")


with open(os.path.join(FIXTURES, "layer_decay_reference.json")) as _stream:
    LAYER_DECAY = json.load(_stream)["models"]


def our_overrides(timm_options):
    """The create_model overrides of the timm keyword arguments a fixture was built with: the
    sizes (`depth`, `embed_dim`, `num_heads`, `num_classes`) share their names, `global_pool`
    'avg' is `pool="mean"`."""
    overrides = dict(timm_options)
    if overrides.pop("global_pool", None) == "avg":
        overrides["pool"] = "mean"
    return overrides


@pytest.mark.parametrize("case", sorted(LAYER_DECAY))
def test_layer_decay_scales_are_timms_for_every_parameter(case):
    """Every parameter's scale is the lr_scale timm's param_groups_layer_decay gives it, for
    VisionTransformer's group_matcher and Eva's (DINOv3's cls/reg tokens and patch embedding in the
    stem, block i at i + 1, the final norm with the last block; mixed RoPE's frequencies unmatched
    by Eva's matcher, so at the top with the head)."""
    reference = LAYER_DECAY[case]
    options = our_overrides(reference["options"])
    with paddle.LazyGuard():  # the architecture's names, without drawing its weights
        model = paddle_vit.create_model(reference["timm_name"], **options)
    assert model.config.depth == reference["depth"]
    for decay, timm_scales in reference["cases"].items():
        expected = {our_name(name): scale for name, scale in timm_scales.items()}
        scales = layer_decay_scales(model, float(decay))
        assert set(scales) == set(expected)  # every parameter, none left over
        for name, scale in scales.items():
            assert scale == pytest.approx(expected[name], rel=1e-12), (decay, name)
    assert len(set(scales.values())) == len(set(timm_scales.values()))  # as many layers: no head, one fewer


def test_layer_decay_multiplies_the_scheduled_learning_rate_per_parameter(tmp_path):
    config = small_config(tmp_path / "run", optimizer={"layer_decay": 0.5, "head_lr_scale": 3.0})
    trainer = Trainer(config)
    by_name = dict(trainer.vit.named_parameters())
    # depth 2: patch embedding layer 0 -> 0.5 ** 3, block 1 -> layer 2 -> 0.5, head 1 x head_lr_scale
    assert by_name["patch_embed.class_token"].optimize_attr["learning_rate"] == 0.125
    assert by_name["encoder.layers.1.mlp.fc1.weight"].optimize_attr["learning_rate"] == 0.5
    assert by_name["head.weight"].optimize_attr["learning_rate"] == 3.0
    assert isinstance(trainer.parts.optimizer._grad_clip, paddle.nn.ClipGradByGlobalNorm)
    trainer.close()


# ---- momentum SGD against a hand-computed update -----------------------------------------------

def gradients(model, images, labels):
    """{name: gradient} of the cross-entropy of `model` on one batch; the gradients stay on the
    parameters for the optimizer."""
    loss = paddle.nn.functional.cross_entropy(model(images), labels)
    loss.backward()
    return {name: p.grad.numpy().astype("float64") for name, p in model.named_parameters()}


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_two_steps_follow_torch_and_optax_momentum(nesterov):
    """velocity = mu velocity + g (g: the clipped gradient + wd w on decayed parameters only),
    w -= lr_t * m * velocity, or w -= lr_t * m * (g + mu velocity) with Nesterov; lr_t from the
    schedule, m the layer decay's multiplier."""
    paddle.seed(0)
    model = tiny_vit(dropout=0.0)
    images, labels = paddle.randn([4, 3, 32, 32]), paddle.to_tensor([0, 1, 2, 3])
    config = OptimizerConfig(name="sgd", lr=0.1, momentum=0.9, nesterov=nesterov, weight_decay=0.01,
                             clip_grad_norm=0.05, layer_decay=0.5)
    schedule = WarmupCosineSchedule(peak_lr=0.1, total_steps=10, warmup_steps=2, warmup_start_lr=0.02)
    optimizer = build_optimizer(model, config, schedule)
    no_decay = {id(p) for p in model.no_weight_decay_parameters()}
    decayed = {name for name, p in model.named_parameters() if id(p) not in no_decay}
    assert "head.weight" in decayed and "encoder.layers.0.attn.qkv.weight" in decayed
    assert "head.bias" not in decayed and "patch_embed.position_embedding" not in decayed
    multiplier = layer_decay_scales(model, 0.5)

    weights = {name: p.numpy().astype("float64") for name, p in model.named_parameters()}
    velocity = {name: np.zeros_like(value) for name, value in weights.items()}
    for step, lr in enumerate((0.02, 0.06)):  # warm-up: 0.02, then 0.02 + 0.08 / 2
        assert optimizer.get_lr() == pytest.approx(lr)
        grads = gradients(model, images, labels)
        norm = np.sqrt(sum((g ** 2).sum() for g in grads.values()))
        assert norm > 0.05  # the clipping acts
        for name in weights:
            g = grads[name] * 0.05 / max(norm, 0.05)  # Paddle's ClipGradByGlobalNorm
            if name in decayed:
                g = g + 0.01 * weights[name]  # L2 after clipping, as torch.optim.SGD
            velocity[name] = 0.9 * velocity[name] + g
            direction = g + 0.9 * velocity[name] if nesterov else velocity[name]
            weights[name] = weights[name] - lr * multiplier[name] * direction
        optimizer.step()
        optimizer.clear_grad()
        schedule.step()
        for name, p in model.named_parameters():
            np.testing.assert_allclose(p.numpy(), weights[name], rtol=1e-5, atol=1e-7, err_msg=f"step {step} {name}")
    moved = np.abs(model.patch_embed.class_token.numpy() - weights["patch_embed.class_token"]).max()
    assert moved < 1e-6


def test_sgd_without_weight_decay_steps_by_the_gradient_alone():
    """The paper's recipe (no weight decay): the first step is w - lr g on every parameter."""
    paddle.seed(1)
    model = tiny_vit(dropout=0.0)
    before = {name: p.numpy().copy() for name, p in model.named_parameters()}
    optimizer = build_optimizer(model, OptimizerConfig(name="sgd", lr=0.5, weight_decay=0.0, clip_grad_norm=0.0),
                                0.5)
    grads = gradients(model, paddle.randn([2, 3, 32, 32]), paddle.to_tensor([1, 4]))
    optimizer.step()
    for name, p in model.named_parameters():
        np.testing.assert_allclose(p.numpy(), before[name] - 0.5 * grads[name], rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("overrides, words", [
    (["optimizer.name=sgdm"], "optimizer.name must be one of adamw, sgd"),
    (["optimizer.nesterov=true"], "optimizer.nesterov"),
    (["optimizer.name=sgd", "optimizer.momentum=1.0"], "optimizer.momentum must be in [0, 1)"),
    (["optimizer.layer_decay=0"], "optimizer.layer_decay must be in (0, 1]"),
    (["optimizer.layer_decay=1.5"], "optimizer.layer_decay must be in (0, 1]"),
    (["model.freeze=head"], "model.freeze must be one of backbone"),
    (["model.freeze=backbone", "model.num_classes=0"], "model.freeze: backbone trains the classifier head"),
])
def test_bad_optimizer_and_freeze_settings_name_the_key(overrides, words):
    with pytest.raises(ConfigError, match=re.escape(words)):
        load_config(overrides=overrides)


# ---- linear probing --------------------------------------------------------------------------

def probe_config(tmp_path, name, pretrained, **train):
    return small_config(tmp_path / name, model={"pretrained": str(pretrained / "last.pdparams"), "freeze": "backbone"},
                        optimizer={"name": "sgd", "lr": 0.05, "weight_decay": 0.0, "nesterov": True},
                        train={"epochs": 1, "ema": True, "ema_decay": 0.9, **train})


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    """Weights of a short run of small_config: the representation to probe."""
    folder = tmp_path_factory.mktemp("pretrain")
    Trainer(small_config(folder / "run", train={"epochs": 1})).fit()
    return folder / "run" / "checkpoints"


def test_a_linear_probe_trains_the_head_alone_on_the_frozen_backbone(tmp_path, pretrained, monkeypatch):
    trainer = Trainer(probe_config(tmp_path, "probe", pretrained))
    head = {id(p) for p in trainer.vit.head.parameters()}
    assert all(p.stop_gradient != (id(p) in head) for p in trainer.vit.parameters())
    assert not trainer.vit.head.weight.numpy().any() and not trainer.vit.head.bias.numpy().any()  # zero head
    modes = []
    original_forward = type(trainer.vit).forward

    def recording_forward(vit, x):
        if paddle.is_grad_enabled():  # training steps, not the evaluation
            modes.append((vit.encoder.training, vit.patch_embed.training, vit.head.training))
        return original_forward(vit, x)
    monkeypatch.setattr(type(trainer.vit), "forward", recording_forward)
    trainer.fit()
    assert modes and set(modes) == {(False, False, True)}  # dropout and drop-path off in the backbone

    start = {name: value.numpy() for name, value in load_checkpoint(str(pretrained / "last.pdckpt"))["model"].items()}
    state = load_checkpoint(str(tmp_path / "probe" / "checkpoints" / "last.pdckpt"))
    trained = {name: value.numpy() for name, value in state["model"].items()}
    ema = {name: value.numpy() for name, value in state["ema"].items()}
    backbone = [name for name in trained if not name.startswith("head.")]
    assert len(backbone) == len(trained) - 2
    for name in backbone:  # bit for bit: no update, no EMA rounding
        np.testing.assert_array_equal(trained[name], start[name], err_msg=name)
        np.testing.assert_array_equal(ema[name], start[name], err_msg=name)
    assert np.abs(trained["head.weight"]).max() > 1e-3 and np.abs(trained["head.bias"]).max() > 1e-4
    # the optimizer keeps SGD's velocity for the head's two tensors and nothing else
    velocities = [key for key in state["optimizer"] if "velocity" in key]
    assert sorted(velocities) == ["@head.bias_velocity_0", "@head.weight_velocity_0"]
    assert len(trainer.parts.optimizer._parameter_list) == 2


def test_a_frozen_backbone_gets_no_adamw_state_either(tmp_path, pretrained):
    config = small_config(tmp_path / "run", model={"pretrained": str(pretrained / "last.pdparams"),
                                                   "freeze": "backbone"})
    trainer = Trainer(config)
    images, labels = next(iter(trainer.parts.train_loader))
    trainer.loss(trainer.parts.model(images), labels).backward()
    assert all(p.grad is None for name, p in trainer.vit.named_parameters() if not name.startswith("head."))
    trainer.optimizer_step()
    accumulated = {name for accumulators in trainer.parts.optimizer._accumulators.values() for name in accumulators}
    assert accumulated == {p.name for p in trainer.vit.head.parameters()}
    trainer.close()


@pytest.mark.slow
def test_a_linear_probe_with_sgd_resumes_to_the_uninterrupted_run(tmp_path, pretrained):
    def config(name, **train):
        return probe_config(tmp_path, name, pretrained, epochs=2, **train)

    Trainer(config("straight")).fit()
    first = Trainer(config("broken"))
    stop_after(first, 4)  # inside the first epoch (6 batches)
    assert first.fit()["interrupted"]
    Trainer(config("broken", resume="auto")).fit()
    straight, broken = final_weights(tmp_path / "straight"), final_weights(tmp_path / "broken")
    for name in straight:
        np.testing.assert_array_equal(broken[name], straight[name], err_msg=name)
