"""The encoder layer of training as one compiled op each way (variants/fused_layer.py,
kernels/encoder_layer.cc): its output and every gradient against the walkthrough's layer of
modules in float64, the op asked for exactly where it computes what that layer computes; a
value of every ViTConfig field either computed as the modules compute it or making the layer
step aside, and every sublayer it does not know (swapped, added, hooked) making it step aside."""
import contextlib
import copy
import os
import shutil
import subprocess
import sys
import threading
import time
import types

import numpy as np
import paddle
import pytest

import paddle_vit
from paddle_vit import variants
from paddle_vit.models.config import ViTConfig
from paddle_vit.models.encoder import DropPath, EncoderLayer
from paddle_vit import paddle_versions
from paddle_vit.variants import fused_layer
from paddle_vit.variants.slice_random import slice_stream

from kernel_calls import count_calls
from repo_paths import REPO

pytestmark = pytest.mark.skipif(not variants.compiled.build_possible(),
                                reason="no C++ compiler: the layer of modules is kept")


def perturbed_layer(**overrides):
    """An EncoderLayer 192 wide (ViT-Ti's), 3 heads, MLP 768, its parameters (LayerNorms too) off
    their initial values, with the compiled layer's class; in train mode."""
    paddle.seed(7)
    arguments = dict(embed_dim=192, depth=1, num_heads=3)
    arguments.update(overrides)
    layer = EncoderLayer(ViTConfig(**arguments))
    with paddle.no_grad():
        for parameter in layer.parameters():
            parameter.set_value(parameter + paddle.randn(parameter.shape) * 0.2)
    layer.__class__ = variants.FusedCpuEncoderLayer
    return layer.train()


def walkthrough_float64(layer):
    reference = variants.use_walkthrough_modules(copy.deepcopy(layer))
    reference.to(dtype="float64")
    return reference


def output_and_gradients(layer, x, grad_out):
    x = paddle.to_tensor(x, stop_gradient=False)
    out = layer(x)
    (out * paddle.to_tensor(grad_out)).sum().backward()
    gradients = {name: parameter.grad.numpy() for name, parameter in layer.named_parameters()}
    return out.numpy(), x.grad.numpy(), gradients


@pytest.fixture
def calls(monkeypatch):
    """The compiled layer's op calls, counted ([count]); the op still computes."""
    return count_calls(monkeypatch, fused_layer, "paddle_vit_encoder_layer")


def relative_errors(got, reference):
    """{what: largest error / largest reference value} of output_and_gradients' results."""
    (out, grad_x, gradients), (ref_out, ref_grad_x, ref_gradients) = got, reference
    errors = {"out": (out, ref_out), "x": (grad_x, ref_grad_x)}
    errors.update({name: (gradients[name], ref_gradients[name]) for name in ref_gradients})
    return {what: float(np.abs(a - b).max() / np.abs(b).max()) for what, (a, b) in errors.items()}


@pytest.mark.parametrize("qk_scale", [None, 0.3])
def test_the_compiled_layer_is_as_near_the_float64_layer_as_the_walkthrough_layer(calls, qk_scale):
    """Output, input gradient and the 12 parameter gradients against the layer of modules in
    float64: as near as that layer computing in float32 (its error at most 1.5x, and 5e-5)."""
    layer = perturbed_layer(qk_scale=qk_scale)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 17, 192)).astype(np.float32)
    grad_out = rng.normal(size=(2, 17, 192)).astype(np.float32)
    compiled = output_and_gradients(layer, x, grad_out)
    assert calls[0] == 1
    float32 = output_and_gradients(variants.use_walkthrough_modules(copy.deepcopy(layer)), x, grad_out)
    float64 = output_and_gradients(walkthrough_float64(layer), x.astype(np.float64), grad_out.astype(np.float64))
    ours, walkthroughs = relative_errors(compiled, float64), relative_errors(float32, float64)
    assert len(ours) == 14
    for what, error in ours.items():
        assert error <= max(1.5 * walkthroughs[what], 2e-6) and error < 5e-5, (what, error, walkthroughs[what])


def test_frozen_parameters_and_input_get_no_gradient_and_the_rest_the_walkthroughs(calls):
    layer = perturbed_layer()
    for parameter in (layer.norm1.weight, layer.attn.qkv.bias, layer.mlp.fc2.weight):
        parameter.stop_gradient = True
    reference = variants.use_walkthrough_modules(copy.deepcopy(layer))
    x = paddle.randn([2, 9, 192])  # stop_gradient: an input that wants no gradient
    grad_out = paddle.randn([2, 9, 192])
    for model in (layer, reference):
        (model(x) * grad_out).sum().backward()
    assert calls[0] == 1 and x.grad is None
    for (name, ours), theirs in zip(layer.named_parameters(), reference.parameters()):
        if ours.stop_gradient:
            assert ours.grad is None and theirs.grad is None, name
        else:
            np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=0,
                                       atol=1e-4 * np.abs(theirs.grad.numpy()).max(), err_msg=name)


@pytest.mark.parametrize("seeded", [False, True])
def test_drop_path_drops_the_samples_the_module_drops(calls, seeded):
    """The same coins as the layer of modules (the global generator, or a slice's seed stream),
    so the same output and gradients to float rounding, some samples' branches dropped."""
    layer = perturbed_layer()
    layer.drop_path = DropPath(0.5)  # the Encoder spreads config.drop_path over its layers
    if seeded:
        variants.use_cpu_fast_paths(layer)
    reference = variants.use_walkthrough_modules(copy.deepcopy(layer))
    if seeded:
        variants.use_cpu_fast_paths(reference)
        reference.__class__ = EncoderLayer
    x, grad_out = paddle.randn([8, 5, 192]), paddle.randn([8, 5, 192])
    results = []
    for model in (layer, reference):
        paddle.seed(123)
        with slice_stream(99, 1) if seeded else contextlib.nullcontext():
            x_leaf = x.detach()
            x_leaf.stop_gradient = False
            out = model(x_leaf)
        (out * grad_out).sum().backward()
        results.append((out.numpy(), x_leaf.grad.numpy(), [p.grad.numpy() for p in model.parameters()]))
    assert calls[0] == 1
    (out, grad_x, grads), (ref_out, ref_grad_x, ref_grads) = results
    np.testing.assert_allclose(out, ref_out, rtol=0, atol=1e-4 * np.abs(ref_out).max())
    np.testing.assert_allclose(grad_x, ref_grad_x, rtol=0, atol=1e-4 * np.abs(ref_grad_x).max())
    for ours, theirs in zip(grads, ref_grads):
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-4 * np.abs(theirs).max())
    paddle.seed(123)
    with slice_stream(99, 1) if seeded else contextlib.nullcontext():
        factors = np.concatenate([layer._drop_path_factors(x).numpy(), layer._drop_path_factors(x).numpy()])
    assert set(factors.tolist()) == {0.0, 2.0}  # some branches dropped, the others scaled by 1 / 0.5


def test_a_model_built_on_a_cpu_trains_its_wide_layers_with_the_compiled_layer(calls):
    model = paddle_vit.create_model("vit_tiny_patch16_224", image_size=32, patch_size=8, depth=2, num_classes=10)
    assert all(type(layer) is variants.FusedCpuEncoderLayer for layer in model.encoder.layers)
    model.train()
    model(paddle.randn([2, 3, 32, 32])).sum().backward()
    assert calls[0] == 2
    model.eval()
    with paddle.no_grad():
        model(paddle.randn([2, 3, 32, 32]))
    assert calls[0] == 2  # evaluation: the inference op (below), not the training op


@pytest.mark.parametrize("case", ["eval", "no_grad", "dropout",
                                  "attention_dropout", "layer_scale", "tanh GELU", "swiglu", "64 wide",
                                  "attention weights", "float64", "Paddle 3.9"])
def test_the_layer_of_modules_computes_where_the_compiled_layer_would_not(calls, monkeypatch, case):
    overrides = {"dropout": dict(dropout=0.1),
                 "attention_dropout": dict(attention_dropout=0.1), "layer_scale": dict(layer_scale=1e-5),
                 "tanh GELU": dict(gelu="tanh"), "swiglu": dict(mlp="swiglu"),
                 "64 wide": dict(embed_dim=64, num_heads=2)}.get(case, {})
    layer = perturbed_layer(**overrides)
    if case == "eval":
        layer.eval()
    if case == "float64":
        layer.to(dtype="float64")
    if case == "Paddle 3.9":  # a release whose C++ API and private attributes it was not written for
        monkeypatch.setattr(paddle_versions, "running_release", lambda: "3.9")
    width = layer.norm1.weight.shape[0]
    x = paddle.randn([2, 5, width], dtype="float64" if case == "float64" else "float32")
    if case == "no_grad":
        with paddle.no_grad():
            layer(x)
    elif case == "attention weights":
        out, weights = layer(x, return_attention=True)
        assert weights.shape == [2, 3, 5, 5]
    else:
        layer(x)
    assert calls[0] == 0


# ---- the proof: what the compiled layer accepts is what it computes ----------------------------

SMALL = dict(image_size=32, patch_size=8, embed_dim=128, depth=1, num_heads=2, num_classes=10)  # 128: the kernels'
# a value other than the default of every ViTConfig field, with what it needs beside it (a field
# added to ViTConfig fails test_every_config_field until it has one here)
NON_DEFAULT = {
    "image_size": [dict(image_size=48)],
    "patch_size": [dict(patch_size=16)],
    "in_channels": [dict(in_channels=1)],
    "num_classes": [dict(num_classes=0), dict(num_classes=3)],
    "embed_dim": [dict(embed_dim=192)],
    "depth": [dict(depth=2)],
    "num_heads": [dict(num_heads=4)],
    "mlp_ratio": [dict(mlp_ratio=5.0)],  # 640 wide: the GELU kernel's width or more
    "qkv_bias": [dict(qkv_bias=False)],
    "qk_scale": [dict(qk_scale=0.3)],
    "layer_norm_epsilon": [dict(layer_norm_epsilon=1e-5)],
    "gelu": [dict(gelu="tanh"), dict(gelu="quick")],
    "dropout": [dict(dropout=0.1)],
    "attention_dropout": [dict(attention_dropout=0.1)],
    "drop_path": [dict(drop_path=0.5, depth=2)],  # the first layer's rate is 0
    "pool": [dict(pool="mean"), dict(pool="map")],
    "representation_size": [dict(representation_size=64)],
    "position_embedding": [dict(position_embedding="sincos_2d"), dict(position_embedding="none"),
                           dict(position_embedding="rope_axial"), dict(position_embedding="rope_mixed")],
    "fused_attention": [dict(fused_attention=False)],
    "init": [dict(init="jax")],
    "backbone_layers": [dict(backbone_layers=[1], patch_size=1)],
    "backbone": [dict(backbone_layers=[1], patch_size=1, backbone="resnet_d")],
    "backbone_width": [dict(backbone_layers=[1], patch_size=1, backbone_width=2)],
    "backbone_style": [dict(backbone_layers=[1], patch_size=1, backbone_style="jax")],
    "dynamic_img_size": [dict(dynamic_img_size=True)],
    "dynamic_img_pad": [dict(dynamic_img_size=True, dynamic_img_pad=True)],
    "pos_embed_resample": [dict(dynamic_img_size=True, pos_embed_resample="bicubic")],
    "class_token": [dict(class_token=False, pool="mean")],
    "register_tokens": [dict(register_tokens=2)],
    "no_embed_class": [dict(no_embed_class=True)],
    "pre_norm": [dict(pre_norm=True)],
    "layer_scale": [dict(layer_scale=1e-5)],
    "mlp": [dict(mlp="swiglu"), dict(mlp="swiglu_packed"), dict(mlp="swiglu_split")],
    "fc_norm": [dict(fc_norm=True)],
    "distilled": [dict(distilled=True)],
    "drop_remainder": [dict(image_size=36, drop_remainder=True)],
    "recompute": [dict(recompute=1)],
    "rope": [dict(rope="axial"), dict(rope="mixed"), dict(rope="dinov3", rope_rotate_half=True)],
    "rope_temperature": [dict(rope_temperature=100.0)],  # the rope fields: unread without a rope
    "rope_grid_offset": [dict(rope_grid_offset=1.0)],
    "rope_grid_indexing": [dict(rope_grid_indexing="xy")],
    "rope_rotate_half": [dict(rope_rotate_half=True)],
    "rope_ref_grid": [dict(rope_ref_grid=[3, 5])],
    "qkv": [dict(qkv="fused_qv_bias"), dict(qkv="separate")],
    "attention_norm": [dict(attention_norm=True)],
    "mlp_norm": [dict(mlp="swiglu_split", mlp_norm=True), dict(mlp_norm=True)],
    "mlp_align_to": [dict(mlp="swiglu_split", mlp_align_to=8)],
    "attn_pool_heads": [dict(pool="map", attn_pool_heads=8)],
    "attn_pool_mlp_ratio": [dict(pool="map", attn_pool_mlp_ratio=2.0)],
    "norm": [dict(norm="rmsnorm")],
    "final_norm": [dict(final_norm=False)],
    "pool_include_prefix": [dict(pool="mean", pool_include_prefix=True)],
    "proj_bias": [dict(proj_bias=False)],
    "mlp_bias": [dict(mlp="swiglu_split", mlp_bias=False)],
    "patch_norm": [dict(patch_norm=True)],
}


def test_every_config_field_is_classified_for_the_compiled_layer_and_given_a_value_here():
    fields = set(ViTConfig.field_names())
    assert not fields - set(fused_layer.CONFIG_FIELDS), ("ViTConfig fields fused_layer.CONFIG_FIELDS does not "
                                                         f"classify: {sorted(fields - set(fused_layer.CONFIG_FIELDS))}")
    assert set(fused_layer.CONFIG_FIELDS) == fields, sorted(set(fused_layer.CONFIG_FIELDS) - fields)
    assert set(NON_DEFAULT) == fields, f"give these fields a value here: {sorted(fields - set(NON_DEFAULT))}"


def computed_by_the_table(name, value, evaluation=False):
    role = fused_layer.CONFIG_FIELDS[name]
    if evaluation and name in fused_layer.EVALUATION_IGNORES:
        return True
    return role.role != fused_layer.OFF and (role.values is None or value in role.values)


def perturbed_model(config):
    """A ViT of `config` with the CPU fast paths (the compiled layer), its parameters off their
    initial values (zero biases and unit LayerNorms hide mistakes), in train mode."""
    paddle.seed(5)
    model = paddle_vit.ViT(config)
    with paddle.no_grad():
        for parameter in model.parameters():
            parameter.set_value(parameter + paddle.randn(parameter.shape) * 0.1)
    return variants.use_cpu_fast_paths(model).train()


def model_outputs(model, images, grad_out):
    paddle.seed(9)  # the same coins for drop path
    images = paddle.to_tensor(images, stop_gradient=False)
    out = model(images)
    (out * paddle.to_tensor(grad_out)).sum().backward()
    return [("out", out.numpy()), ("images", images.grad.numpy())] + [
        (name, parameter.grad.numpy()) for name, parameter in model.named_parameters() if parameter.grad is not None]


# each ViTConfig field at each value NON_DEFAULT gives it: the training op's test and the inference op's
EVERY_FIELD_AT_ANOTHER_VALUE = [pytest.param(name, overrides, id=f"{name}={overrides.get(name)!r}")
                                for name in ViTConfig.field_names() for overrides in NON_DEFAULT.get(name, [{}])]


@pytest.mark.parametrize("name, overrides", EVERY_FIELD_AT_ANOTHER_VALUE)
def test_a_value_of_every_config_field_is_computed_as_the_modules_compute_it_or_makes_the_layer_step_aside(
        calls, name, overrides):
    config = ViTConfig(**{**SMALL, **overrides}).validate()
    value = getattr(config, name)
    assert value != getattr(ViTConfig(**SMALL), name)
    model = perturbed_model(config)
    reference = variants.use_walkthrough_modules(copy.deepcopy(model))
    rng = np.random.default_rng(1)
    images = rng.normal(size=(2, config.in_channels, config.image_size, config.image_size)).astype(np.float32)
    with paddle.no_grad():
        out_shape = model(paddle.to_tensor(images)).shape
    calls[0] = 0
    grad_out = rng.normal(size=out_shape).astype(np.float32)
    ours = model_outputs(model, images, grad_out)
    if not computed_by_the_table(name, value):
        assert calls[0] == 0, f"{name}={value!r}: the compiled layer computed what it does not"
        return
    assert calls[0] == config.depth, f"{name}={value!r} is classified as computed, but the layer stepped aside"
    theirs = dict(model_outputs(reference, images, grad_out))
    assert [what for what, _ in ours] == list(theirs)
    for what, array in ours:
        np.testing.assert_allclose(array, theirs[what], rtol=0, atol=2e-4 * np.abs(theirs[what]).max(),
                                   err_msg=f"{name}={value!r}: {what}")


@pytest.mark.parametrize("name", [name for name, role in fused_layer.CONFIG_FIELDS.items() if role.values])
def test_a_config_value_the_compiled_layer_does_not_compute_makes_it_step_aside_by_itself(calls, name):
    """The config is read, not only the modules: the same plain modules, the config saying
    otherwise (a field read inside a module's forward, which no sublayer shows)."""
    layer = perturbed_layer()
    x = paddle.randn([2, 5, 192])
    layer(x)
    assert calls[0] == 1
    overrides = next(overrides for overrides in NON_DEFAULT[name] if not computed_by_the_table(name, overrides[name]))
    layer.config = layer.config.replace(**overrides)
    layer(x)
    assert calls[0] == 1


def test_a_config_field_the_table_does_not_classify_or_no_config_makes_it_step_aside(calls, monkeypatch):
    layer = perturbed_layer()
    x = paddle.randn([2, 5, 192])
    table = fused_layer.CONFIG_FIELDS
    monkeypatch.setattr(fused_layer, "CONFIG_FIELDS", {name: role for name, role in table.items() if name != "init"})
    layer(x)
    assert calls[0] == 0
    monkeypatch.setattr(fused_layer, "CONFIG_FIELDS", table)
    layer(x)
    assert calls[0] == 1
    layer.config = None  # a layer that does not say what it was built from
    layer(x)
    assert calls[0] == 1


def test_the_table_of_sublayers_is_the_walkthrough_layers_and_an_unknown_class_anywhere_makes_it_step_aside(calls):
    """Every sublayer, at any depth, given a subclass of its class (which may compute something
    else): the layer of modules computes; its own class back: the compiled layer."""
    layer = perturbed_layer()
    sublayers = list(layer.named_sublayers())
    assert [name for name, _ in sublayers] == list(fused_layer.SUBLAYER_CLASSES)
    x = paddle.randn([2, 5, 192])
    for name, sublayer in sublayers:
        cls = type(sublayer)
        sublayer.__class__ = type(f"Users{cls.__name__}", (cls,), {})
        layer(x)
        assert calls[0] == 0, name
        sublayer.__class__ = cls
    layer(x)
    assert calls[0] == 1


@pytest.mark.parametrize("change", ["swapped in", "appended", "appended inside", "hooked"])
def test_a_module_swapped_in_added_or_hooked_by_a_user_makes_it_step_aside(calls, change):
    layer = perturbed_layer()
    if change == "swapped in":
        layer.mlp.act = paddle.nn.Silu()
    elif change == "appended":
        layer.rotary = paddle.nn.Identity()  # a module a subclass's forward might use
    elif change == "appended inside":
        layer.attn.q_norm = paddle.nn.LayerNorm(96)
    elif change == "hooked":  # the op would not call it
        layer.attn.register_forward_post_hook(lambda module, inputs, output: output * 2)
    layer(paddle.randn([2, 5, 192]))
    assert calls[0] == 0


# ---- evaluation: the inference op (no gradient, eval mode) ---------------------------------------

@pytest.fixture
def inference_calls(monkeypatch):
    """The inference op's calls, counted ([count]); the op still computes."""
    return count_calls(monkeypatch, fused_layer, "paddle_vit_encoder_layer_inference")


def evaluated(layer, x):
    with paddle.no_grad():
        return layer(paddle.to_tensor(x)).numpy()


@pytest.mark.parametrize("overrides", [{}, dict(qk_scale=0.3), dict(dropout=0.1, attention_dropout=0.1)],
                         ids=["default", "qk_scale", "dropout in eval mode"])
def test_the_inference_op_is_as_near_the_float64_layer_as_the_walkthrough_layer(inference_calls, overrides):
    """Its output against the layer of modules in float64: as near as that layer computing in
    float32 (its error at most 1.5x, and 1e-5 of the largest value); a dropout, which passes
    its input through in eval mode, computed at its rate."""
    layer = perturbed_layer(**overrides).eval()
    x = np.random.default_rng(0).normal(size=(3, 17, 192)).astype(np.float32)
    ours = evaluated(layer, x)
    assert inference_calls[0] == 1
    float32 = evaluated(variants.use_walkthrough_modules(copy.deepcopy(layer)), x)
    float64 = evaluated(walkthrough_float64(layer), x.astype(np.float64))
    error, walkthroughs = (float(np.abs(out - float64).max() / np.abs(float64).max()) for out in (ours, float32))
    assert error <= max(1.5 * walkthroughs, 2e-6) and error < 1e-5, (error, walkthroughs)


def test_a_model_built_on_a_cpu_evaluates_its_wide_layers_with_the_inference_op(inference_calls):
    model = paddle_vit.create_model("vit_tiny_patch16_224", image_size=32, patch_size=8, depth=2, num_classes=10)
    images = paddle.randn([2, 3, 32, 32])
    model.eval()
    with paddle.no_grad():
        logits = model(images).numpy()
    assert inference_calls[0] == 2
    reference = variants.use_walkthrough_modules(copy.deepcopy(model))
    with paddle.no_grad():
        expected = reference(images).numpy()
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-5 * np.abs(expected).max())
    model.train()
    model(images).sum().backward()
    assert inference_calls[0] == 2  # training: the training op


@pytest.mark.parametrize("case", ["train mode", "gradient recorded", "downscaled dropout", "attention weights",
                                  "float64", "hooked", "64 wide", "tanh GELU", "Paddle 3.9", "kernels off"])
def test_the_layer_of_modules_evaluates_where_the_inference_op_would_not(inference_calls, monkeypatch, case):
    overrides = {"64 wide": dict(embed_dim=64, num_heads=2), "tanh GELU": dict(gelu="tanh"),
                 "downscaled dropout": dict(dropout=0.1)}.get(case, {})
    layer = perturbed_layer(**overrides).eval()
    if case == "train mode":
        layer.train()
    if case == "downscaled dropout":  # in eval mode this dropout multiplies by 1 - p
        layer.mlp.dropout.mode = "downscale_in_infer"
    if case == "float64":
        layer.to(dtype="float64")
    if case == "hooked":
        layer.mlp.fc1.register_forward_post_hook(lambda module, inputs, output: output * 2)
    if case == "Paddle 3.9":
        monkeypatch.setattr(paddle_versions, "running_release", lambda: "3.9")
    if case == "kernels off":  # PADDLE_VIT_COMPILED_KERNELS=0 or no compiler: no library
        monkeypatch.setattr(fused_layer, "kernel_library", lambda: None)
    width = layer.norm1.weight.shape[0]
    x = paddle.randn([2, 5, width], dtype="float64" if case == "float64" else "float32")
    if case == "gradient recorded":  # e.g. a saliency map: the layer of modules records the backward pass
        x.stop_gradient = False
        layer(x).sum().backward()
        assert x.grad is not None
    elif case == "attention weights":
        with paddle.no_grad():
            assert layer(x, return_attention=True)[1].shape == [2, 3, 5, 5]
    else:
        with paddle.no_grad():
            out = layer(x)
        if case == "downscaled dropout":
            reference = variants.use_walkthrough_modules(copy.deepcopy(layer))
            with paddle.no_grad():
                np.testing.assert_allclose(out.numpy(), reference(x).numpy(), rtol=0, atol=1e-5)
    assert inference_calls[0] == 0


@pytest.mark.parametrize("name, overrides", EVERY_FIELD_AT_ANOTHER_VALUE)
def test_in_evaluation_a_value_of_every_config_field_is_computed_as_the_modules_compute_it_or_makes_the_op_step_aside(
        inference_calls, name, overrides):
    config = ViTConfig(**{**SMALL, **overrides}).validate()
    value = getattr(config, name)
    model = perturbed_model(config).eval()
    reference = variants.use_walkthrough_modules(copy.deepcopy(model))
    images = np.random.default_rng(1).normal(size=(2, config.in_channels, config.image_size, config.image_size))
    ours = evaluated(model, images.astype(np.float32))
    if not computed_by_the_table(name, value, evaluation=True):
        assert inference_calls[0] == 0, f"{name}={value!r}: the inference op computed what it does not"
        return
    assert inference_calls[0] == config.depth, f"{name}={value!r} is computed by the table, but the op stepped aside"
    theirs = evaluated(reference, images.astype(np.float32))
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=2e-5 * np.abs(theirs).max(), err_msg=f"{name}={value!r}")


def openmp_blocktime():
    """Intel's OpenMP runtime's blocktime for this thread's teams (kmp_get_blocktime), or None
    where Paddle's wheel has not loaded it."""
    import ctypes
    import os
    try:
        runtime = ctypes.CDLL(os.path.join(os.path.dirname(paddle.__file__), "libs", "libiomp5.so"),
                              mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
    except OSError:
        return None
    return runtime.kmp_get_blocktime()


@pytest.mark.parametrize("mode", ["training", "evaluation"])
def test_the_ops_leave_the_openmp_runtimes_blocktime_alone(monkeypatch, mode):
    """The kernels share the products' team of threads and leave its setting as they found it: a
    team put to sleep after each kernel woke for each product (vector_math.h), and Paddle's own
    graphs of many short products need the spin (docs/design.md)."""
    before = openmp_blocktime()
    if before is None:
        pytest.skip("Paddle's wheel has no Intel OpenMP runtime here")
    op = "paddle_vit_encoder_layer" if mode == "training" else "paddle_vit_encoder_layer_inference"
    called = count_calls(monkeypatch, fused_layer, op)
    layer = perturbed_layer()
    x = paddle.randn([2, 5, 192])
    if mode == "training":
        x.stop_gradient = False
        layer(x).sum().backward()  # the forward op and the backward op
    else:
        layer.eval()
        with paddle.no_grad():
            layer(x)
    assert called[0] == 1 and openmp_blocktime() == before


THREADS_AFTER_KERNELS = """
import os, sys
import numpy as np, paddle
from paddle_vit.variants import compiled
paddle.base.core.set_num_threads(2)
library = compiled.kernel_library()
scores = paddle.to_tensor(np.random.default_rng(0).normal(size=(8, 6, 197, 197)).astype("float32"))
paddle.matmul(scores, scores)  # the products' team started
products_only = len(os.listdir("/proc/self/task"))
for _ in range(3):
    library.paddle_vit_softmax(scores, 2)
    library.paddle_vit_gelu(scores, 2)
print(products_only, len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts the process's threads in Linux's /proc")
def test_the_kernels_keep_no_threads_of_their_own():
    """After the kernels the process has no thread more than the products' team gave it: where
    Paddle runs its products on Intel's OpenMP runtime the kernels run on that team, and
    elsewhere their threads are joined before each call returns (a pool or a team of their own
    would take the cores from the products')."""
    output = subprocess.run([sys.executable, "-c", THREADS_AFTER_KERNELS], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": REPO}, check=True).stdout.split()
    assert int(output[1]) == int(output[0])


def needed_libraries(path):
    """The shared libraries an ELF file names as needed (its dynamic section, read by readelf)."""
    listing = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    return [line.split("[")[1].split("]")[0] for line in listing.splitlines() if "(NEEDED)" in line]


@pytest.mark.skipif(shutil.which("readelf") is None, reason="reads the library's dynamic section with readelf")
def test_the_kernels_are_linked_to_the_runtime_that_runs_paddles_products():
    """Built where Paddle's wheel has Intel's OpenMP runtime (its x86 builds), the kernels are
    OpenMP regions linked to that library and no other OpenMP runtime; without it, none."""
    library = variants.compiled.kernel_library()
    needed = needed_libraries(library.__file__)
    if variants.compiled.openmp_runtime() is None:
        assert "-fopenmp" not in variants.compiled.machine_flags()
        assert not [name for name in needed if "omp" in name]
    else:
        assert {"-fopenmp", "-DPADDLE_VIT_OPENMP"} <= set(variants.compiled.machine_flags())
        assert [name for name in needed if "omp" in name] == ["libiomp5.so"]


def test_the_training_ops_first_call_is_made_by_one_thread_at_a_time_and_later_calls_together(monkeypatch):
    """Paddle writes the op's graph entry at its first call with gradients, unguarded and without
    the GIL (fused_layer.py): two threads starting a step together must not both write it. The
    op here waits 0.2 s inside each call and records how many threads were in it at once."""
    inside, most = [0], []
    guard = threading.Lock()
    library = variants.compiled.kernel_library()

    def slow_op(*arguments):
        with guard:
            inside[0] += 1
            most.append(inside[0])
        time.sleep(0.2)  # releases the GIL, as the op does
        with guard:
            inside[0] -= 1
        return library.paddle_vit_encoder_layer(*arguments)
    fake = types.SimpleNamespace(**{name: getattr(library, name) for name in dir(library) if name.startswith("paddle_vit_")})
    fake.paddle_vit_encoder_layer = slow_op
    monkeypatch.setattr(fused_layer, "kernel_library", lambda: fake)
    monkeypatch.setitem(fused_layer._GRAPH_ENTRY, "written", False)  # a process that has not called it yet
    layers = [perturbed_layer(), perturbed_layer()]

    def step(layer):
        x = paddle.randn([2, 5, 192])
        x.stop_gradient = False
        layer(x).sum().backward()

    def together():
        most.clear()
        threads = [threading.Thread(target=step, args=(layer,)) for layer in layers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return max(most)
    assert together() == 1  # the first calls: one after the other
    assert fused_layer._GRAPH_ENTRY["written"]
    assert together() == 2  # the entry written: the threads' calls overlap
