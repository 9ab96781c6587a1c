"""timm's plain-ViT names (its modules vision_transformer, deit, vision_transformer_hybrid): each is
registered with timm's parameter count, sizes, tokens, classes and default preprocessing, or refused
by name with the reason (paddle_vit.models.registry.NOT_BUILT), against what timm itself recorded
(tests/fixtures/timm_vit_registry.json, tests/fixtures/make/timm_vit_registry_fixtures.py). The
options added for them (RMSNorm, no final norm, pooling over the prefix tokens too) compute timm's
numbers on small models of timm's own classes, and so do the block parts the AIMv2, BEiT-3 and C-RADIO
names need (a norm on the patch tokens, bias-free projections and SwiGLU, norms inside the attention and
the MLP, registers without a final norm)."""
import json
import os
import re

import numpy as np
import paddle
import pytest

from paddle_vit import ConfigError, ViT, create_model, list_models
from paddle_vit.models import get_model_config
from paddle_vit.models.norms import RMSNorm
from paddle_vit.models.registry import NOT_BUILT
from paddle_vit.preprocess.timm import timm_eval_config

from repo_paths import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures")
with open(os.path.join(FIXTURES, "timm_vit_registry.json")) as _stream:
    RECORD = json.load(_stream)
MODULES = ("vision_transformer", "deit", "vision_transformer_hybrid")
NAMES = sorted(name for module in MODULES for name in RECORD["modules"][module])
REGISTERED = [name for name in NAMES if name in list_models()]
# one of each kind of addition in the fast loop; every name in the full suite
FAST = {"deit_tiny_patch16_224", "test_vit3", "test_vit4", "vit_base_r26_s32_224", "vit_intern300m_patch14_448",
        "aimv2_large_patch14_224", "beit3_base_patch16_224", "vit_base_patch16_radio_v3", "vit_small_resnet50d_s16_224"}
POOLS = {"token": "cls", "avg": "mean", "map": "map"}
NORMS = {"LayerNorm": "layernorm", "RmsNorm": "rmsnorm"}
ACTIVATIONS = {("GELU", "none"): "exact", ("GELUTanh", None): "tanh", ("GELU", "tanh"): "tanh",
               ("QuickGELU", None): "quick", ("SiLU", None): "silu"}
MLPS = {"Mlp": "standard", "GluMlp": "swiglu", "SwiGLU": "swiglu_split"}
# the paper's names registered with its 1000-class head (Table 1's counts, docs/design.md), where
# timm's default tag is the headless ImageNet-21k one
PAPER_HEADS = {"vit_base_r50_s16_224", "vit_large_patch32_224", "vit_huge_patch14_224"}


def lazy_model(name):
    with paddle.LazyGuard():  # shapes without initialising a billion numbers
        return ViT(get_model_config(name))


def test_every_name_of_the_three_modules_is_registered_or_refused_with_a_reason():
    assert len(NAMES) == 193
    assert [name for name in NAMES if name not in list_models() and name not in NOT_BUILT] == []
    eva = RECORD["modules"].get("eva", [])
    assert [name for name in NOT_BUILT if name not in NAMES + eva] == []  # the list names timm's names only
    assert not set(NOT_BUILT) & set(list_models())


def test_coverage_of_timms_vit_modules_counts_registered_and_refused_names():
    """Registered or refused by name, of every name of the three modules; with eva's names (registered
    elsewhere) counted when the record has them."""
    covered = [name for name in NAMES if name in list_models() or name in NOT_BUILT]
    assert len(covered) == len(NAMES) == 193
    assert len(REGISTERED) == 182 and len([name for name in NAMES if name in NOT_BUILT]) == 11
    eva = RECORD["modules"].get("eva", [])
    if eva:
        eva_covered = [name for name in eva if name in list_models() or name in NOT_BUILT]
        all_names = NAMES + eva
        assert len(all_names) == 258
        assert (len(covered) + len(eva_covered)) / len(all_names) >= 193 / 258
        registered = [name for name in all_names if name in list_models()]
        assert len(registered) == 241 and len(registered) / len(all_names) >= 0.9


@pytest.mark.parametrize("name", ["vit_base_patch16_18x2_224", "vit_base_patch16_rpn_224", "vit_base_mci_224"])
def test_a_refused_name_is_a_config_error_saying_why(name):
    with pytest.raises(ConfigError, match=re.escape(f"model {name!r} is timm's, but this project does not build it: "
                                                    f"{NOT_BUILT[name]}")):
        create_model(name)


@pytest.mark.parametrize("name", [name if name in FAST else pytest.param(name, marks=pytest.mark.slow)
                                  for name in REGISTERED])
def test_parameter_count_sizes_tokens_and_classes_match_timm(name):
    facts, model = RECORD["models"][name], lazy_model(name)
    config = model.config
    count = sum(int(np.prod(p.shape)) for p in model.parameters())
    if name in PAPER_HEADS:
        assert facts["num_classes"] == 0 and config.num_classes == 1000
        assert count == facts["param_count"] + (config.embed_dim + 1) * 1000
    else:
        assert count == facts["param_count"]
        assert facts["pretrained_cfg"]["num_classes"] == facts["num_classes"] == config.num_classes
    assert [config.image_size] * 2 == facts["img_size"] and [config.patch_size] * 2 == facts["patch_size"]
    assert (config.embed_dim, config.depth, config.num_heads) == (facts["embed_dim"], facts["depth"],
                                                                facts["num_heads"])
    assert config.class_token == facts["has_class_token"] and config.register_tokens == facts["reg_tokens"]
    assert config.num_prefix_tokens == facts["num_prefix_tokens"] and config.no_embed_class == facts["no_embed_class"]
    assert list(model.patch_embed.position_embedding.shape) == facts["pos_embed"]
    assert config.qkv_bias == facts["qkv_bias"] and config.proj_bias == facts["proj_bias"]
    assert facts["qk_norm"] == "Identity" and config.attention_norm == (facts["attn_out_norm"] != "Identity")
    assert config.patch_norm == (facts["embed_norm"] is not None and facts["embed_norm"]["type"] != "Identity")
    if config.patch_norm:
        assert facts["embed_norm"] == facts["norm1"]  # the blocks' kind and epsilon
    assert config.norm == NORMS[facts["norm1"]["type"]] and config.layer_norm_epsilon == facts["norm1"]["eps"]
    assert config.final_norm == (facts["norm"]["type"] != "Identity" or facts["fc_norm"]["type"] != "Identity")
    assert config.uses_fc_norm == (facts["fc_norm"]["type"] != "Identity")
    assert config.pool == POOLS[facts["global_pool"]] and config.pool_include_prefix == facts["pool_include_prefix"]
    activation = ACTIVATIONS[(facts["act"]["type"], facts["act"].get("approximate"))]
    assert config.mlp == MLPS[facts["mlp_cls"]] and (config.mlp != "standard" or config.gelu == activation)
    assert config.mlp_bias == facts["mlp_bias"] and config.mlp_norm == (facts["mlp_norm"] != "Identity")
    assert (config.layer_scale is not None) == facts["layer_scale"]
    if facts["layer_scale"]:
        assert config.layer_scale == pytest.approx(facts["layer_scale_init"])
    assert config.dynamic_img_size == facts["dynamic_img_size"]
    assert config.is_hybrid == (facts["hybrid"] is not None)
    if config.is_hybrid:
        hybrid = facts["hybrid"]
        # timm's ResNetV2, for vit_tiny_r_s16_p8 its stem alone (a Sequential), its ResNet-D features_only
        assert hybrid["cls"] in ("ResNetV2", "Sequential", "FeatureListNet")
        assert list(config.token_grid()) == hybrid["feature_size"]
        assert config.backbone == ("resnet_d" if hybrid["cls"] == "FeatureListNet" else "resnet_v2")
        assert [stage["blocks"] for stage in hybrid["stages"]] == config.backbone_layers


@pytest.mark.parametrize("name", [name if name in FAST else pytest.param(name, marks=pytest.mark.slow)
                                  for name in REGISTERED if timm_eval_config(name) is not None])
def test_each_names_default_eval_transform_is_timms_pretrained_cfg(name):
    expected, ours = RECORD["models"][name]["pretrained_cfg"], timm_eval_config(name)
    assert ours["interpolation"] == expected["interpolation"] and ours["crop_mode"] == expected["crop_mode"]
    assert ours["crop_pct"] == expected["crop_pct"]
    assert ours["mean"] == pytest.approx(expected["mean"]) and ours["std"] == pytest.approx(expected["std"])
    assert [3, get_model_config(name).image_size, get_model_config(name).image_size] == expected["input_size"]


def test_every_name_registered_here_carries_timms_default_eval_transform():
    before = {name for name in REGISTERED if name not in RECORD["models"] or timm_eval_config(name) is None}
    new = [name for name in REGISTERED if name not in before]
    assert len(new) >= 29 and "vit_base_patch16_224_miil" in new
    assert timm_eval_config("vit_base_patch16_224_miil")["interpolation"] == "bilinear"


# ---- the options added for them, against timm's outputs ---------------------------------------------
with open(os.path.join(FIXTURES, "timm_vit_registry_reference.json")) as _stream:
    CASES = json.load(_stream)["cases"]
REFERENCE = np.load(os.path.join(FIXTURES, "timm_vit_registry_reference.npz"))
TOLERANCE = 1e-4


def max_difference(ours, theirs):
    return float(np.abs(np.asarray(ours, "float64") - np.asarray(theirs, "float64")).max())


def test_rmsnorm_computes_timms_rmsnorm():
    case = CASES["rmsnorm"]
    norm = RMSNorm(case["width"], case["eps"])
    norm.weight.set_value(REFERENCE["rmsnorm/weight"])
    out = norm(paddle.to_tensor(REFERENCE["rmsnorm/input"])).numpy()
    assert max_difference(out, REFERENCE["rmsnorm/output"]) < 1e-5


@pytest.mark.parametrize("case", ["test_vit4", "vit_intern300m_patch14_448", "test_vit3", "aimv2_large_patch14_224",
                                  "beit3_base_patch16_224", "vit_base_patch16_radio_v3"])
def test_a_small_model_of_the_name_computes_timms_outputs(case):
    """test_vit4: RMSNorm in every block and after the mean; vit_intern300m_patch14_448: no final
    norm; test_vit3: the MAP head over the register token and the patches (pool_include_prefix);
    aimv2: RMSNorm on the patch tokens too, no bias in q/k/v, the projection and the SwiGLU (epsilon
    1e-5 read off the patch norm); beit3: LayerNorms inside the attention and the MLP (epsilon 1e-5
    read off the MLP's norm); radio: a class token and 7 registers, no final norm, layer scale."""
    spec, args = CASES[case], CASES[case]["model_args"]
    model = create_model(spec["name"], pretrained=os.path.join(FIXTURES, spec["file"]), image_size=args["img_size"],
                         patch_size=args["patch_size"], embed_dim=args["embed_dim"], depth=args["depth"],
                         num_heads=args["num_heads"], num_classes=args["num_classes"]).eval()
    assert model.load_report.format == "timm" and not model.load_report.missing
    images = paddle.to_tensor(REFERENCE[f"{case}/input"])
    with paddle.no_grad():
        features = model.forward_features(images)
        assert max_difference(model(images).numpy(), REFERENCE[f"{case}/logits"]) < TOLERANCE
        assert max_difference(features.numpy(), REFERENCE[f"{case}/features"]) < TOLERANCE
        pooled = model.forward_head(features, pre_logits=True)
        assert max_difference(pooled.numpy(), REFERENCE[f"{case}/pre_logits"]) < TOLERANCE


@pytest.mark.parametrize("overrides, message", [
    (dict(norm="batchnorm"), "model.norm must be one of layernorm, rmsnorm"),
    (dict(final_norm="no"), "final_norm must be true or false"),
    (dict(pool_include_prefix=True), "pool_include_prefix pools every token by 'mean' or 'map'"),
    (dict(norm="rmsnorm", pool="map", class_token=False), "MAP head's norm is a LayerNorm"),
    (dict(mlp_bias=False), "mlp_bias: false is built for model.mlp 'swiglu_split'"),
    (dict(proj_bias="no"), "proj_bias must be true or false"),
    (dict(patch_norm=1), "patch_norm must be true or false"),
    (dict(mlp="swiglu_packed", mlp_norm=True), "mlp_norm is built for model.mlp 'standard'"),
])
def test_bad_values_of_the_new_options_are_one_config_error_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        create_model("vit_tiny_patch16_224", image_size=32, depth=1, **overrides)
