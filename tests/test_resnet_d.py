"""timm's ResNet-D hybrids (vit_{small,base}_resnet26d_224, vit_small_resnet50d_s16_224,
vit_base_resnet50d_224; models/resnet_d.py): their parameter counts against timm's record, a small
one of timm's own building (tests/fixtures/make/timm_resnet_d_fixtures.py) read from timm's state
dict and computing timm's eval-mode outputs with the BatchNorm running statistics it carries, and
written back under timm's names."""
import json
import os

import numpy as np
import paddle
import pytest
from safetensors.numpy import load_file

from paddle_vit import ConfigError, ViT, WeightsError, create_model
from paddle_vit.models import get_model_config
from paddle_vit.models.resnet_d import BatchNorm2D, ResNetD
from paddle_vit.weights.publish_timm import timm_architecture, timm_export, timm_tensors

from repo_paths import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures")
with open(os.path.join(FIXTURES, "timm_resnet_d_reference.json")) as _stream:
    CASE = json.load(_stream)["cases"]["vit_small_resnet26d_224"]
REFERENCE = np.load(os.path.join(FIXTURES, "timm_resnet_d_reference.npz"))
WEIGHTS = os.path.join(FIXTURES, CASE["file"])
TOLERANCE = 1e-4
# timm 1.0.31, sum(p.numel() for p in timm.create_model(name).parameters()), 1000 classes (its default)
TIMM_PARAMETERS = {"vit_small_resnet26d_224": 63_608_392, "vit_small_resnet50d_s16_224": 57_531_976,
                   "vit_base_resnet26d_224": 101_403_208, "vit_base_resnet50d_224": 110_965_064}


def small_model():
    args = CASE["model_args"]
    return create_model(CASE["name"], pretrained=WEIGHTS, image_size=args["img_size"], embed_dim=args["embed_dim"],
                        depth=args["depth"], num_heads=args["num_heads"], mlp_ratio=args["mlp_ratio"],
                        num_classes=args["num_classes"], backbone_layers=CASE["backbone_layers"]).eval()


def max_difference(ours, theirs):
    return float(np.abs(np.asarray(ours, "float64") - np.asarray(theirs, "float64")).max())


@pytest.mark.parametrize("name", sorted(TIMM_PARAMETERS))
def test_each_resnet_d_hybrid_has_timms_parameter_count_with_the_running_statistics_as_buffers(name):
    with paddle.LazyGuard():
        model = ViT(get_model_config(name))
    assert sum(int(np.prod(parameter.shape)) for parameter in model.parameters()) == TIMM_PARAMETERS[name]
    assert isinstance(model.patch_embed.backbone, ResNetD)
    buffers = [key for key in model.state_dict() if key.endswith(("running_mean", "running_var"))]
    assert buffers and not [key for key, _ in model.named_parameters() if key.endswith(("running_mean",
                                                                                        "running_var"))]


def test_a_small_resnet_d_hybrid_computes_timms_eval_outputs():
    model = small_model()
    report = model.load_report
    assert report.format == "timm" and not report.missing and model.config.backbone == "resnet_d"
    counters = [name for name in CASE["state_names"] if name.endswith("num_batches_tracked")]
    assert sorted(report.ignored) == sorted(counters)
    images = paddle.to_tensor(REFERENCE[f"{CASE['name']}/input"])
    with paddle.no_grad():
        feature_map = model.patch_embed.backbone(images)
        features = model.forward_features(images)
        pooled = model.forward_head(features, pre_logits=True)
        logits = model(images)
    assert list(feature_map.shape) == CASE["shapes"]["feature_map"]  # 36 px: 18, 9, then 5 (ceil)
    for key, ours in (("feature_map", feature_map), ("features", features), ("pre_logits", pooled),
                      ("logits", logits)):
        assert max_difference(ours.numpy(), REFERENCE[f"{CASE['name']}/{key}"]) < TOLERANCE, key


def test_loading_sets_the_batch_norm_running_statistics_which_eval_mode_uses():
    model, original = small_model(), load_file(WEIGHTS)
    state = model.state_dict()
    for name in ("bn1", "conv1.4", "layer2.0.downsample.2", "layer1.1.bn3"):
        for statistic in ("running_mean", "running_var"):
            key = f"patch_embed.backbone.{name}.{statistic}"
            np.testing.assert_array_equal(state[key].numpy(), original[key], err_msg=key)
    images = paddle.to_tensor(REFERENCE[f"{CASE['name']}/input"])
    with paddle.no_grad():
        model.train()  # the batch's statistics instead: another output
        trained = model.patch_embed.backbone(images).numpy()
    assert max_difference(trained, REFERENCE[f"{CASE['name']}/feature_map"]) > 1e-2


def test_batch_norm_is_pytorchs_epsilon_and_momentum():
    paddle.seed(0)
    norm = BatchNorm2D(3)
    x = paddle.randn([4, 3, 5, 5]) * 2.0 + 1.0
    norm.train()
    norm(x)
    np.testing.assert_allclose(norm.running_mean.numpy(), 0.1 * x.mean(axis=[0, 2, 3]).numpy(), rtol=1e-5)
    norm.eval()
    mean, var = norm.running_mean.reshape([1, 3, 1, 1]), norm.running_var.reshape([1, 3, 1, 1])
    expected = (x - mean) / paddle.sqrt(var + 1e-5)
    assert max_difference(norm(x).numpy(), expected.numpy()) < 1e-5
    assert list(norm.state_dict()) == ["weight", "bias", "running_mean", "running_var"]


def test_the_resnet_d_goes_back_out_under_the_names_and_values_timm_saved_it_with():
    """Every tensor of timm's file, running statistics included, written back by the timm writer
    (`--to timm`, save_pretrained's timm folder) name for name, value for value; the counters
    timm's BatchNorm fills in itself when they are absent."""
    model, original = small_model(), load_file(WEIGHTS)
    written = timm_tensors(model, model.config)
    assert sorted(written) == sorted(name for name in original if not name.endswith("num_batches_tracked"))
    for key, array in written.items():
        np.testing.assert_array_equal(array, original[key], err_msg=key)


def test_the_registered_architectures_go_out_as_timms_names():
    for name in TIMM_PARAMETERS:
        assert timm_architecture(get_model_config(name))[0] == name


def test_a_resnet_d_of_no_timm_architecture_is_one_error_naming_the_stages():
    with pytest.raises(WeightsError, match="backbone_layers"):
        timm_export(small_model())


@pytest.mark.parametrize("overrides, message", [
    (dict(backbone="resnet_c"), "model.backbone must be one of resnet_v2, resnet_d"),
    (dict(backbone="resnet_d", backbone_width=2), "backbone_width 2 is built for backbone 'resnet_v2'"),
])
def test_bad_backbone_values_are_one_config_error_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        create_model("vit_base_r26_s32_224", image_size=32, depth=1, **overrides)


def test_a_resnet_d_checkpoint_into_a_resnet_v2_model_is_an_error_naming_the_backbone():
    args = CASE["model_args"]
    with pytest.raises((WeightsError, ConfigError), match="backbone"):
        create_model("vit_small_r26_s32_224", pretrained=WEIGHTS, image_size=args["img_size"],
                     embed_dim=args["embed_dim"], depth=args["depth"], num_heads=args["num_heads"],
                     mlp_ratio=args["mlp_ratio"], num_classes=args["num_classes"],
                     backbone_layers=CASE["backbone_layers"])


def test_resnet_d_macs_match_paddle_flops(paddle_flops_with_numpy2):
    """ViTConfig.count_macs with the ResNet-D's deep stem and average-pool shortcuts against
    paddle.flops, every Conv2D (the patch projection's too) counted without its bias."""
    import paddle.nn as nn

    model = ViT(embed_dim=32, depth=2, num_heads=4, image_size=36, patch_size=1, num_classes=10,
                backbone_layers=[2, 1], backbone="resnet_d", fused_attention=False)

    from mac_counting import count_attention_products, count_conv, count_linear, no_macs

    counted = paddle.flops(model, [1, 3, 36, 36], print_detail=False, custom_ops={
        nn.Conv2D: count_conv, nn.Linear: count_linear, nn.Softmax: count_attention_products(32 // 4),
        BatchNorm2D: no_macs,
        nn.ReLU: no_macs, nn.MaxPool2D: no_macs, nn.AvgPool2D: no_macs})
    assert counted == model.config.count_macs()
