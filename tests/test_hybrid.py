"""The paper's hybrid ResNet + ViT (Section 3.1): the ResNet-v2 against hand computations, the
registry against timm's parameter counts, checkpoints of timm and of vit_jax against the logits
those codes recorded, and the hybrid through every path the plain ViT takes."""
import json
import os

import numpy as np
import paddle
import pytest

from paddle_vit import ViT, WeightsError, create_model, list_models, load_pretrained
from paddle_vit.models.resnet import STAGE_CHANNELS, ResNetV2, StdConv2D, backbone_feature_size

from repo_paths import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures")
TOLERANCE = 1e-4
TIMM = dict(np.load(os.path.join(FIXTURES, "timm_reference.npz")))
JAX = dict(np.load(os.path.join(FIXTURES, "jax_reference.npz")))
with open(os.path.join(FIXTURES, "timm_reference.json")) as _stream:
    TIMM_CASES = json.load(_stream)["cases"]

# timm 1.0.31, `sum(p.numel() for p in timm.create_model(name, num_classes=1000).parameters())`
TIMM_PARAMETERS = {
    "vit_tiny_r_s16_p8_224": 6_337_704, "vit_tiny_r_s16_p8_384": 6_355_944,
    "vit_small_r26_s32_224": 36_431_912, "vit_small_r26_s32_384": 36_468_392,
    "vit_base_r50_s16_224": 98_659_112, "vit_base_r50_s16_384": 98_950_952,
    "vit_large_r50_s32_224": 328_994_856, "vit_large_r50_s32_384": 329_092_136,
    "vit_base_r26_s32_224": 101_383_976,  # timm's vision_transformer_hybrid, recorded in timm_vit_registry.json
}
TOY = dict(embed_dim=32, depth=2, num_heads=4, image_size=32, patch_size=2)


def fixture(name):
    return os.path.join(FIXTURES, name)


# ---- the ResNet-v2 against hand computations ---------------------------------------------------

def tf_same_pad(size, kernel, stride):
    """TensorFlow's "SAME": (before, after) padding, the odd pixel after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def numpy_conv(x, weight, stride):
    """A "SAME" convolution written out: [C, H, W] x [O, C, k, k] -> [O, H', W']."""
    kernel = weight.shape[-1]
    (top, bottom), (left, right) = tf_same_pad(x.shape[1], kernel, stride), tf_same_pad(x.shape[2], kernel, stride)
    padded = np.pad(x, ((0, 0), (top, bottom), (left, right)))
    rows, cols = -(-x.shape[1] // stride), -(-x.shape[2] // stride)
    out = np.zeros((weight.shape[0], rows, cols))
    for row in range(rows):
        for col in range(cols):
            window = padded[:, row * stride:row * stride + kernel, col * stride:col * stride + kernel]
            out[:, row, col] = np.tensordot(weight, window, axes=([1, 2, 3], [0, 1, 2]))
    return out


@pytest.mark.parametrize("style", ["timm", "jax"])
@pytest.mark.parametrize("size,kernel,stride", [(9, 7, 2), (8, 3, 2), (7, 1, 2), (6, 3, 1)])
def test_std_conv_standardises_and_pads_same_by_hand(style, size, kernel, stride):
    paddle.seed(0)
    conv = StdConv2D(3, 4, kernel, stride=stride, style=style)
    with paddle.no_grad():
        conv.weight.set_value(paddle.randn(conv.weight.shape) * 1e-3 + 1e-3)  # std ~1e-3: epsilons matter
    x = np.random.default_rng(0).standard_normal((1, 3, size, size))
    weight = conv.weight.numpy().astype("float64")
    centred = weight - weight.mean(axis=(1, 2, 3), keepdims=True)
    variance = (centred ** 2).mean(axis=(1, 2, 3), keepdims=True)
    standardised = (centred / np.sqrt(variance + 1e-8) if style == "timm"  # timm: eps 1e-8 inside the root
                    else centred / (np.sqrt(variance) + 1e-5))  # vit_jax: eps 1e-5 added to the std
    expected = numpy_conv(x[0], standardised, stride)
    with paddle.no_grad():
        ours = conv(paddle.to_tensor(x.astype("float32"))).numpy()[0]
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("style,epsilon", [("timm", 1e-5), ("jax", 1e-6)])
def test_group_norm_has_32_groups_and_the_styles_epsilon(style, epsilon):
    from paddle_vit.models.resnet import group_norm

    norm = group_norm(64, style)
    x = np.random.default_rng(1).standard_normal((2, 64, 3, 3)) * 1e-3  # variance near the epsilon
    groups = x.reshape(2, 32, -1)
    expected = ((groups - groups.mean(-1, keepdims=True)) / np.sqrt(groups.var(-1, keepdims=True) + epsilon))
    with paddle.no_grad():
        ours = norm(paddle.to_tensor(x.astype("float32"))).numpy()
    np.testing.assert_allclose(ours, expected.reshape(x.shape), atol=2e-4)


def test_stem_pools_same_with_the_odd_pixel_after():
    backbone = ResNetV2(layers=(), style="timm")
    x = paddle.randn([1, 3, 10, 10])
    with paddle.no_grad():
        after_conv = backbone.stem.act(backbone.stem.norm(backbone.stem.conv(x))).numpy()[0]  # [64, 5, 5]
        pooled = backbone(x).numpy()[0]  # [64, 3, 3]
    (top, bottom), (left, right) = tf_same_pad(5, 3, 2), tf_same_pad(5, 3, 2)
    padded = np.pad(after_conv, ((0, 0), (top, bottom), (left, right)), constant_values=-np.inf)
    expected = np.stack([[padded[:, 2 * r:2 * r + 3, 2 * c:2 * c + 3].max(axis=(1, 2)) for c in range(3)]
                         for r in range(3)]).transpose(2, 0, 1)
    np.testing.assert_allclose(pooled, expected, atol=1e-6)


@pytest.mark.parametrize("layers,image,expected", [((), 224, (56, 56)), ((3, 4, 9), 224, (14, 14)),
                                                   ((2, 2, 2, 2), 384, (12, 12)), ((3, 4, 9), 230, (15, 15))])
def test_feature_map_size_is_the_ceil_of_each_stride(layers, image, expected):
    assert backbone_feature_size(layers, image) == expected
    if len(layers) < 3:  # small enough to run
        backbone = ResNetV2(layers)
        with paddle.no_grad():
            assert tuple(backbone(paddle.zeros([1, 3, image, image])).shape[2:]) == expected


def test_units_start_as_their_shortcut_and_gradients_reach_every_backbone_parameter():
    model = create_model("vit_tiny_r_s16_p8_224", **dict(TOY, backbone_layers=[1, 1]))
    norm3 = [layer.norm3.weight.numpy() for stage in model.patch_embed.backbone.stages for layer in stage.blocks]
    assert all(not np.any(weight) for weight in norm3)  # timm's zero_init_last
    with paddle.no_grad():  # but train from a perturbed point, so that every gradient is non-zero
        for parameter in model.parameters():
            parameter.set_value(parameter + paddle.randn(parameter.shape) * 0.05)
    model(paddle.randn([2, 3, 32, 32])).sum().backward()
    backbone = [name for name, _ in model.named_parameters() if ".backbone." in name]
    assert len(backbone) == 3 + 2 * (3 + 6 + 3)  # stem conv + norm; 2 units: 3 convs, 3 norms, a projection
    missing = [name for name, parameter in model.named_parameters()
               if parameter.grad is None or not np.any(parameter.grad.numpy())]
    assert missing == []


# ---- the registry: timm's parameter counts -----------------------------------------------------

def count_hybrid(config):
    """Parameters of a hybrid counted by hand from its config (not from the modules)."""
    d, hidden = config.embed_dim, int(config.embed_dim * config.mlp_ratio)
    width = config.backbone_width
    count = 64 * width * config.in_channels * 49 + 2 * 64 * width  # stem conv + GroupNorm
    channels = 64 * width
    for stage, depth in enumerate(config.backbone_layers):
        out = STAGE_CHANNELS[stage] * width
        mid = out // 4
        for unit in range(depth):
            unit_in = channels if unit == 0 else out
            count += unit_in * mid + mid * mid * 9 + mid * out + 2 * (mid + mid + out)  # convs + norms
            if unit == 0:
                count += unit_in * out + 2 * out  # projection + its norm
        channels = out
    count += channels * d * config.patch_size ** 2 + d  # the patch projection on the feature map
    count += d + (config.num_patches + 1) * d  # class token + position embedding
    layer = 4 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * hidden + hidden) + (hidden * d + d)
    return count + config.depth * layer + 2 * d + d * config.num_classes + config.num_classes


@pytest.mark.slow
def test_every_hybrid_name_has_timms_parameter_count():
    from paddle_vit.models import get_model_config

    # the paper's ResNet-v2 hybrids; timm's ResNet-D ones are tests/test_resnet_d.py's
    assert sorted(name for name in list_models() if get_model_config(name).is_hybrid
                  and get_model_config(name).backbone == "resnet_v2") == sorted(TIMM_PARAMETERS)
    for name, expected in TIMM_PARAMETERS.items():
        assert count_hybrid(get_model_config(name).validate()) == expected, name
    for name in ("vit_tiny_r_s16_p8_224", "vit_small_r26_s32_224"):  # built, not only counted
        model = create_model(name)
        assert sum(int(np.prod(parameter.shape)) for parameter in model.parameters()) == TIMM_PARAMETERS[name]


def test_hybrid_macs_match_paddle_flops(paddle_flops_with_numpy2):
    """The analytic count (ViTConfig.count_macs, the backbone's convolutions included) against
    paddle.flops, which counts each layer from its output; our StdConv2D is taught to it as a
    Conv2D, Linear as a product of weight and input, the attention products are counted from the Softmax output."""
    import paddle.nn as nn

    model = ViT(**dict(TOY, backbone_layers=[1, 1], num_classes=10, fused_attention=False))

    from mac_counting import count_attention_products, count_conv, count_linear, no_macs

    counted = paddle.flops(model, [1, 3, 32, 32], print_detail=False, custom_ops={
        StdConv2D: count_conv, nn.Linear: count_linear, nn.Softmax: count_attention_products(32 // 4),
        nn.GroupNorm: no_macs,
        nn.ReLU: no_macs})
    assert counted == model.config.count_macs() + model.config.num_patches * 32  # + the patch projection's bias


# ---- checkpoints, each computed as its own code computes it -----------------------------------

def logits(model, references, case):
    with paddle.no_grad():
        return model(paddle.to_tensor(references[f"{case}/input"])).numpy()


@pytest.mark.parametrize("case,name", [("timm_hybrid_stem", "vit_tiny_r_s16_p8_224"),
                                       ("timm_hybrid_stage", "vit_base_r50_s16_224"),
                                       ("timm_hybrid_resample", "vit_base_r50_s16_224")])
def test_timm_hybrid_matches_timm_logits(case, name):
    config = TIMM_CASES[case]
    model = create_model(name, pretrained=fixture(f"{config.get('weights', case)}.safetensors"),
                         **dict(TOY, image_size=config["image_size"], backbone_layers=config["backbone_layers"],
                                mlp_ratio=4)).eval()
    assert model.config.backbone_style == "timm" and model.load_report.format == "timm"
    assert np.abs(logits(model, TIMM, case) - TIMM[f"{case}/logits"]).max() < TOLERANCE
    if case == "timm_hybrid_resample":
        assert model.load_report.resampled[0][1:] == ((4, 4), (6, 6))


def test_jax_hybrid_in_the_released_layout_matches_vit_jax():
    options = dict(TOY, mlp_ratio=2, backbone_layers=[1])
    model = create_model("vit_base_r50_s16_224", pretrained=fixture("jax_hybrid_released.npz"), **options).eval()
    assert (model.config.backbone_style, model.config.gelu) == ("jax", "tanh")
    assert np.abs(logits(model, JAX, "jax_hybrid") - JAX["jax_hybrid/logits"]).max() < TOLERANCE
    # timm's standardisation and GroupNorm epsilon are not vit_jax's: the same file computes otherwise
    timm_style = create_model("vit_base_r50_s16_224", pretrained=fixture("jax_hybrid_released.npz"),
                              backbone_style="timm", **options).eval()
    assert np.abs(logits(timm_style, JAX, "jax_hybrid") - JAX["jax_hybrid/logits"]).max() > 100 * TOLERANCE


def test_a_hybrid_file_into_a_plain_model_names_the_hybrids():
    with pytest.raises(WeightsError, match=r"implies backbone_layers=\[1\].*hybrid ResNet \+ ViT checkpoint.*vit_base_r50"):
        create_model("vit_tiny_patch16_224", pretrained=fixture("timm_hybrid_stage.safetensors"),
                     **dict(TOY, mlp_ratio=4))
    with pytest.raises(WeightsError, match="implies backbone_layers=None.*plain ViT checkpoint"):
        load_pretrained(ViT(**dict(TOY, mlp_ratio=4, num_classes=10, backbone_layers=[])),
                        fixture("timm_vit_cls.safetensors"))


def test_a_timm_hybrid_into_a_jax_style_model_is_refused_unless_chosen():
    model = ViT(**dict(TOY, mlp_ratio=4, num_classes=10, backbone_layers=[1], backbone_style="jax"))
    with pytest.raises(WeightsError, match="implies backbone_style='timm'"):
        load_pretrained(model, fixture("timm_hybrid_stage.safetensors"))
    report = load_pretrained(model, fixture("timm_hybrid_stage.safetensors"), explicit={"backbone_style"})
    assert report.overridden["backbone_style"][:2] == ("jax", "timm")


# ---- the rest of the ViT is unchanged -----------------------------------------------------------

@pytest.mark.parametrize("pool", ["cls", "mean", "walkthrough"])
@pytest.mark.parametrize("position_embedding", ["learned", "learned_2d", "sincos_2d", "none"])
def test_every_pool_and_position_embedding_with_a_hybrid(pool, position_embedding):
    model = ViT(**dict(TOY, backbone_layers=[], num_classes=3, pool=pool, position_embedding=position_embedding))
    x = paddle.randn([2, 3, 32, 32])
    assert model.forward_features(x).shape == [2, 17, 32]
    maps = model.get_attention_maps(x)
    assert len(maps) == 2 and maps[0].shape == [2, 4, 17, 17]
    model(x).mean().backward()


@pytest.mark.slow
def test_hybrid_exports_to_paddle_inference_and_onnx_with_its_logits(tmp_path):
    import importlib.util

    from paddle_vit.config import DataConfig
    from paddle_vit.deploy.export import export_classifier
    from paddle_vit.preprocess import Preprocess
    from paddle_vit.deploy.inference import load_export
    from paddle_vit.deploy.predict import Classifier

    model = create_model("vit_base_r50_s16_224", pretrained=fixture("jax_hybrid_released.npz"),
                         **dict(TOY, mlp_ratio=2, backbone_layers=[1])).eval()
    batch = JAX["jax_hybrid/input"]
    formats = ("paddle", "onnx") if importlib.util.find_spec("paddle2onnx") else ("paddle",)
    export_classifier(Classifier.for_model(model, Preprocess.from_config(DataConfig(), 32), None, "hybrid"),
                      tmp_path / "x", formats=formats)
    for backend in ("paddle", "onnxruntime")[:len(formats)]:
        outputs = load_export(tmp_path / "x", backend=backend).outputs(batch)
        np.testing.assert_allclose(outputs, JAX["jax_hybrid/logits"], atol=TOLERANCE, rtol=0, err_msg=backend)


def test_the_figures_of_a_model_without_a_transformer_are_refused(tmp_path):
    from paddle_vit import ConfigError, viz

    model = ViT(**dict(TOY, backbone_layers=[], depth=0, pool="mean", num_classes=3))
    with pytest.raises(ConfigError, match="no Transformer layer"):
        viz.write_figures(model, np.zeros((1, 3, 32, 32), "float32"), [0.5] * 3, [0.5] * 3, str(tmp_path))


def test_hybrid_figures_read_the_stem_filters_and_token_pixels():
    from paddle_vit import viz

    model = ViT(**dict(TOY, backbone_layers=[], num_classes=3))
    assert model.patch_embed.token_pixels == 8  # stride 4 x 2x2 patches
    figure, numbers = viz.embedding_filters_figure(model)
    assert numbers["components"].shape[1:] == (3, 7, 7)  # the ResNet stem's RGB filters
    _, distance = viz.attention_distance_figure(model, np.random.default_rng(0).standard_normal((2, 3, 32, 32)))
    assert distance["distance"].shape == (2, 4) and distance["distance"].max() <= 32 * np.sqrt(2)


# ---- the data-size experiment's three families (notebooks/03, tools/data_size_experiment.py) ---

def test_the_three_families_are_configs_of_one_model_of_about_the_same_size(tmp_path):
    from paddle_vit import experiments

    sizes = {}
    for family in experiments.FAMILIES:
        config = experiments.experiment_config(family, 1.0, 0, str(tmp_path))
        model = ViT(create_model_config(config))
        sizes[family] = sum(int(np.prod(parameter.shape)) for parameter in model.parameters())
        # the three families average their tokens; DeiT's rows read a class and a distillation token
        deit = family in ("ViT distilled", "ViT two tokens")
        assert model.config.token_grid() == (4, 4) and model.config.pool == ("cls" if deit else "mean")
        assert model.config.distilled == deit
    assert (experiments.experiment_config("ResNet", 1.0, 0, str(tmp_path)).model.depth,
            create_model_config(experiments.experiment_config("ViT", 1.0, 0, str(tmp_path))).is_hybrid) == (0, False)
    assert max(sizes.values()) < 1.5 * min(sizes.values())
    # the same number of optimizer steps whatever the fraction: 150 x 32 images over 143 or 1,438
    assert [experiments.experiment_config("ViT", f, 0, str(tmp_path)).train.epochs for f in (0.1, 1.0)] == [34, 4]


def create_model_config(config):
    from paddle_vit.factory import resolve_model_config
    return resolve_model_config(config, num_classes=10)


@pytest.mark.slow
def test_the_experiment_runs_side_by_side_in_child_processes(tmp_path):
    from paddle_vit import TrainingError, experiments

    lines = []
    results = experiments.run_data_size_experiment(
        str(tmp_path), fractions=(0.1, 0.2), seeds=(0,), families=("ViT", "ResNet"), steps=2, workers=2,
        progress=lambda *line: lines.append(line))
    assert sorted((family, fraction) for family, fraction, *_ in lines) == [
        ("ResNet", 0.1), ("ResNet", 0.2), ("ViT", 0.1), ("ViT", 0.2)]
    assert results["train_images"] == [143, 287] and set(results["parameters"]) == {"ViT", "ResNet"}
    assert all(0.0 <= accuracy <= 1.0 for rows in results["accuracy"].values() for row in rows for accuracy in row)
    # the few-shot numbers come back from the children too: [fractions][seeds][draws] per shots
    assert list(results["fewshot_draws"]["ResNet"]) == ["1", "5", "10"]
    assert np.asarray(results["fewshot_draws"]["ResNet"]["5"]).shape == (2, 1, 3)
    assert all(0.0 <= value <= 1.0 for value in np.ravel(results["fewshot_draws"]["ViT"]["10"]))
    with pytest.raises(TrainingError, match="runs did not finish: KeyError: 'nope'"):
        experiments.run_data_size_experiment(str(tmp_path), fractions=(0.1,), seeds=(0, 1), families=("nope",),
                                             steps=2, workers=2)


@pytest.mark.slow
def test_the_predictor_of_a_hybrid_or_mean_pooled_model_prints_nothing(tmp_path):
    """A traced `mean` makes Paddle Inference's oneDNN pass print "ReduceMeanCheckIfOneDNNSupport"
    on stdout, once per op: into predict.py's predictions. The models trace none."""
    import subprocess
    import sys

    script = ("import numpy as np, paddle_vit\n"
              "from paddle_vit.deploy.inference import engine_for_model\n"
              "for options in ({'backbone_layers': [1]}, {'pool': 'mean'}):\n"
              "    model = paddle_vit.ViT(image_size=32, patch_size=2, embed_dim=32, depth=1, num_heads=4, **options)\n"
              "    engine_for_model(model.eval(), 'predictor')(np.zeros((1, 3, 32, 32), 'float32'))\n"
              "print('done')\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["done"]
