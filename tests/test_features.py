"""The model surface dense tasks build on: `forward_intermediates`, `prune_intermediate_layers`,
`dynamic_img_size` and `dynamic_img_pad`, against what timm 1.0.31 computes for the same weights
(tests/fixtures/features_reference.*, made by tests/fixtures/make/features_fixtures.py from
the timm family's files) and transformers' interpolate_pos_encoding (hf_reference.npz)."""
import json
import os

import numpy as np
import paddle
import pytest

from paddle_vit import ConfigError, ViT, create_model
from paddle_vit.models import ViTConfig
from paddle_vit.models.features import feature_take_indices
from paddle_vit.models.patch_embed import sincos_2d_embedding
from paddle_vit.models.resize import RESIZE_METHODS, resize_grid_embedding, sincos_2d_grid
from paddle_vit.variants import use_cpu_fast_paths
from paddle_vit.weights.resample import RESAMPLE_METHODS, resample_position_embedding

from repo_paths import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures")
TOLERANCE = 1e-4
REFERENCE = dict(np.load(os.path.join(FIXTURES, "features_reference.npz")))
with open(os.path.join(FIXTURES, "features_reference.json")) as _stream:
    CASES = json.load(_stream)["cases"]
HF = dict(np.load(os.path.join(FIXTURES, "hf_reference.npz")))
PLAIN = dict(image_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4)  # timm_vit_cls / timm_vit_avg
HYBRID = dict(image_size=32, patch_size=2, embed_dim=32, depth=2, num_heads=4, backbone_layers=[1])


def timm_model(weights, **options):
    """The timm family's fixture `weights` loaded by create_model, as timm built it."""
    hybrid = weights.startswith("timm_hybrid")
    name, sizes = ("vit_base_r50_s16_224", HYBRID) if hybrid else ("vit_tiny_patch16_224", PLAIN)
    return create_model(name, pretrained=os.path.join(FIXTURES, f"{weights}.safetensors"),
                        **dict(sizes, mlp_ratio=4, **options)).eval()


def tensor(case):
    return paddle.to_tensor(REFERENCE[f"{case}/input"])


def assert_matches_recorded(case, result):
    """`result` of forward_intermediates (final and list, or list; entries tensors or pairs)
    equals timm's recording of `case`, shape and values."""
    if isinstance(result, tuple):
        np.testing.assert_allclose(result[0].numpy(), REFERENCE[f"{case}/final"], atol=TOLERANCE, rtol=0)
        result = result[1]
    assert len(result) == sum(key.startswith(f"{case}/intermediate_") for key in REFERENCE)
    for index, entry in enumerate(result):
        spatial, prefix = entry if isinstance(entry, tuple) else (entry, None)
        expected = REFERENCE[f"{case}/intermediate_{index}"]
        assert tuple(spatial.shape) == expected.shape
        np.testing.assert_allclose(spatial.numpy(), expected, atol=TOLERANCE, rtol=0)
        assert (prefix is None) == (f"{case}/prefix_{index}" not in REFERENCE)
        if prefix is not None:
            np.testing.assert_allclose(prefix.numpy(), REFERENCE[f"{case}/prefix_{index}"], atol=TOLERANCE, rtol=0)


# ---- forward_intermediates and prune_intermediate_layers --------------------------------------

@pytest.mark.parametrize("case", [case for case in CASES if case.startswith("fi_")])
def test_forward_intermediates_returns_what_timm_returns(case):
    model = timm_model(CASES[case]["weights"])
    with paddle.no_grad():
        assert_matches_recorded(case, model.forward_intermediates(tensor(case), **CASES[case]["arguments"]))


def test_forward_intermediates_final_tokens_are_forward_features_and_cpu_fast_paths_agree():
    model = timm_model("timm_vit_cls")
    images = tensor("fi_all")
    with paddle.no_grad():
        final, intermediates = model.forward_intermediates(images, indices=[1])
        np.testing.assert_allclose(final.numpy(), model.forward_features(images).numpy(), atol=1e-6, rtol=0)
        use_cpu_fast_paths(model)
        fast = model.forward_intermediates(images, indices=[1])
    np.testing.assert_allclose(fast[1][0].numpy(), intermediates[0].numpy(), atol=1e-5, rtol=0)


def test_intermediates_only_output_dict_and_stop_early():
    model = timm_model("timm_vit_cls")
    images = tensor("fi_all")
    with paddle.no_grad():
        only = model.forward_intermediates(images, indices=[0], intermediates_only=True)
        as_dict = model.forward_intermediates(images, indices=[0], output_dict=True, return_prefix_tokens=True)
        early_final, early = model.forward_intermediates(images, indices=[0], stop_early=True)
    assert isinstance(only, list) and len(only) == 1
    np.testing.assert_allclose(only[0].numpy(), REFERENCE["fi_all/intermediate_0"], atol=TOLERANCE, rtol=0)
    assert set(as_dict) == {"image_intermediates", "image_intermediates_prefix", "image_features"}
    np.testing.assert_allclose(as_dict["image_features"].numpy(), REFERENCE["fi_all/final"], atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(early[0].numpy(), REFERENCE["fi_all/intermediate_0"], atol=TOLERANCE, rtol=0)
    # stopping after layer 0, the "final" tokens are layer 0's through the final norm
    patch_tokens = early[0].flatten(2).transpose([0, 2, 1])  # [B, D, h, w] -> [B, N, D]
    np.testing.assert_allclose(early_final[:, 1:].numpy(), model.encoder.norm(patch_tokens).numpy(), atol=1e-5, rtol=0)


def test_prune_intermediate_layers_keeps_what_timm_keeps():
    case = CASES["prune"]
    model = timm_model("timm_vit_cls")
    kept = model.prune_intermediate_layers(**case["prune"])
    assert kept == case["kept"]
    assert len(model.encoder.layers) == model.config.depth == case["blocks_left"]
    assert model.config.num_classes == 0 and isinstance(model.head, paddle.nn.Identity)
    with paddle.no_grad():
        assert_matches_recorded("prune", model.forward_intermediates(tensor("prune"), **case["then"]))
        assert model(tensor("prune")).shape == [1, 32]  # the class token's features, no head


def test_pruning_the_head_drops_pre_logits_fc_norm_and_classifier_and_keeps_the_head_with_prune_head_false():
    def model():
        return ViT(ViTConfig(**dict(PLAIN, depth=3), num_classes=4, representation_size=8, pool="mean")).eval()

    pruned, kept_head = model(), model()
    assert pruned.prune_intermediate_layers(2, prune_norm=True) == [1, 2]
    assert not [name for name in pruned.state_dict() if name.startswith(("pre_logits", "fc_norm", "head"))]
    assert (pruned.config.depth, pruned.config.num_classes, pruned.config.representation_size) == (3, 0, None)
    assert kept_head.prune_intermediate_layers([0], prune_head=False) == [0]
    assert kept_head.config.depth == 1 and kept_head(paddle.zeros([1, 3, 32, 32])).shape == [1, 4]


@pytest.mark.parametrize("indices,taken", [(None, [0, 1, 2, 3]), (2, [2, 3]), ([-1, 0], [3, 0]), ((1,), [1])])
def test_feature_take_indices_reads_ints_lists_and_negatives_as_timm(indices, taken):
    assert feature_take_indices(4, indices) == (taken, max(taken))


@pytest.mark.parametrize("indices,message", [(0, "last 0 layers"), (5, "last 5 layers"), ([4], "index 4"),
                                             ([-5], "index -5"), ([], "empty"), ([0.5], "ints"),
                                             ([True], "ints"), ("a", "None, an int"), (2.0, "None, an int")])
def test_feature_take_indices_out_of_range_or_not_layer_numbers_is_a_config_error(indices, message):
    with pytest.raises(ConfigError, match=message):
        feature_take_indices(4, indices)


def test_features_for_a_dense_head_are_a_pyramid_of_the_last_layers():
    """The docs' example: the last 4 layers as [B, D, H/16, W/16] maps, at an input size the
    model was not built for."""
    paddle.seed(1)
    model = create_model("vit_tiny_patch16_224", image_size=32, depth=4, embed_dim=24, num_heads=2,
                         num_classes=0, dynamic_img_size=True).eval()
    with paddle.no_grad():
        features = model.forward_intermediates(paddle.randn([2, 3, 64, 48]), indices=4, intermediates_only=True)
    assert [tuple(feature.shape) for feature in features] == [(2, 24, 4, 3)] * 4


# ---- dynamic_img_size and dynamic_img_pad ------------------------------------------------------

DYNAMIC_CASES = [case for case in CASES if "dyn_" in case and "intermediates" not in case or "pad_" in case]


@pytest.mark.parametrize("case", DYNAMIC_CASES)
def test_dynamic_img_size_logits_match_timm_at_other_sizes(case):
    config = CASES[case]
    model = timm_model(config["weights"], dynamic_img_size=True, dynamic_img_pad=config.get("dynamic_img_pad", False))
    assert list(REFERENCE[f"{case}/input"].shape[2:]) == config["size"] != [32, 32]
    with paddle.no_grad():
        logits = model(tensor(case)).numpy()
    np.testing.assert_allclose(logits, REFERENCE[f"{case}/logits"], atol=TOLERANCE, rtol=0)


@pytest.mark.parametrize("case", ["dyn_intermediates", "hybrid_dyn_intermediates"])
def test_dynamic_img_size_intermediates_match_timm(case):
    config = CASES[case]
    model = timm_model(config["weights"], dynamic_img_size=True)
    with paddle.no_grad():
        assert_matches_recorded(case, model.forward_intermediates(tensor(case), **config["arguments"]))


def test_dynamic_model_at_its_own_size_is_the_static_model():
    static, dynamic = timm_model("timm_vit_cls"), timm_model("timm_vit_cls", dynamic_img_size=True)
    images = tensor("fi_all")
    with paddle.no_grad():
        np.testing.assert_allclose(dynamic(images).numpy(), static(images).numpy(), atol=1e-6, rtol=0)


def test_static_model_still_refuses_another_size_with_the_same_message():
    with pytest.raises(ConfigError, match=r"input is 48x24 but the model was built for 32x32: resize the images"):
        timm_model("timm_vit_cls")(tensor("dyn_48x24"))


def test_dynamic_size_the_patch_does_not_divide_is_refused_unless_padded():
    with pytest.raises(ConfigError, match="input is 30x21, which patch_size 8 does not divide: .*dynamic_img_pad=True"):
        timm_model("timm_vit_cls", dynamic_img_size=True)(tensor("pad_30x21"))
    with pytest.raises(ConfigError, match="ResNet's feature map of the input is 9x5, which patch_size 2"):
        timm_model("timm_hybrid_stage", dynamic_img_size=True)(tensor("hybrid_pad_36x20"))


@pytest.mark.parametrize("options,message", [
    (dict(dynamic_img_pad=True), "dynamic_img_pad .* model.dynamic_img_size: true"),
    (dict(dynamic_img_size=True, position_embedding="learned_2d"), "not 'learned_2d'"),
    (dict(dynamic_img_size=True, pos_embed_resample="nearest"), "pos_embed_resample must be null"),
    (dict(dynamic_img_size="yes"), "dynamic_img_size must be true or false")])
def test_dynamic_options_that_cannot_work_are_one_config_error(options, message):
    with pytest.raises(ConfigError, match=message):
        ViTConfig(**PLAIN, **options).validate()


def test_hugging_face_dynamic_model_computes_interpolate_pos_encoding():
    """transformers' logits at 48 with interpolate_pos_encoding=True, from the model built at 32:
    the checkpoint implies bicubic without antialias; timm's method would differ."""
    folder = os.path.join(FIXTURES, "hf_vit_classifier")
    model = create_model("vit_tiny_patch16_224", pretrained=folder, **PLAIN, mlp_ratio=2, dynamic_img_size=True).eval()
    assert model.config.pos_embed_resample == "bicubic"
    images = paddle.to_tensor(HF["hf_vit_classifier_48/input"])
    expected = HF["hf_vit_classifier_48/logits"]
    with paddle.no_grad():
        assert np.abs(model(images).numpy() - expected).max() < TOLERANCE
        timm_way = create_model("vit_tiny_patch16_224", pretrained=folder, **PLAIN, mlp_ratio=2, dynamic_img_size=True,
                                pos_embed_resample="bicubic_antialias").eval()
        assert np.abs(timm_way(images).numpy() - expected).max() > 10 * TOLERANCE


@pytest.mark.parametrize("method", RESIZE_METHODS)
def test_forward_time_resampling_matrices_equal_load_time_resampling(method):
    assert set(RESIZE_METHODS) == set(RESAMPLE_METHODS)
    table = np.random.default_rng(3).standard_normal((1, 1 + 4 * 5, 8)).astype("float32")
    for new_grid in [(6, 3), (2, 7), (4, 5), (9, 12)]:
        expected = resample_position_embedding(table, new_grid, old_grid=(4, 5), method=method)[:, 1:]
        ours = resize_grid_embedding(paddle.to_tensor(table[:, 1:]), (4, 5), new_grid, method).numpy()
        np.testing.assert_allclose(ours, expected, atol=2e-6, rtol=0, err_msg=str(new_grid))


def test_sincos_2d_is_computed_at_the_new_grid():
    np.testing.assert_allclose(sincos_2d_grid(3, 5, 16).numpy()[0], sincos_2d_embedding(3, 5, 16), atol=1e-6)
    paddle.seed(2)
    dynamic = ViT(ViTConfig(**PLAIN, num_classes=3, position_embedding="sincos_2d", dynamic_img_size=True)).eval()
    built_there = ViT(ViTConfig(**dict(PLAIN, image_size=48), num_classes=3, position_embedding="sincos_2d")).eval()
    built_there.set_state_dict(dynamic.state_dict())
    images = paddle.randn([1, 3, 48, 48])
    with paddle.no_grad():
        np.testing.assert_allclose(dynamic(images).numpy(), built_there(images).numpy(), atol=1e-5, rtol=0)


def test_config_keys_build_a_dynamic_model():
    from paddle_vit.config import load_config
    from paddle_vit.factory import build_model

    config = load_config(overrides=["model.name=vit_tiny_patch16_224", "model.image_size=32", "model.depth=1",
                                    "model.dynamic_img_size=true", "model.dynamic_img_pad=true",
                                    "model.pos_embed_resample=bicubic"])
    model = build_model(config, num_classes=3).eval()
    assert (model.config.dynamic_img_size, model.config.dynamic_img_pad, model.config.pos_embed_resample) == (
        True, True, "bicubic")
    with paddle.no_grad():
        assert model(paddle.zeros([1, 3, 40, 20])).shape == [1, 3]


# ---- export -----------------------------------------------------------------------------------

@pytest.mark.slow  # 3-6 s (a subprocess, a tool run or a traced graph): out of the fast loop
@pytest.mark.parametrize("weights", ["timm_vit_cls", pytest.param("timm_hybrid_stage", marks=pytest.mark.slow)])
def test_a_traced_dynamic_graph_computes_the_eager_numbers_at_any_size(weights):
    """Traced once for [None, 3, None, None] with the traceable variants (the padding written
    out), the graph gives the eager logits at sizes that need padding and sizes that do not."""
    from paddle.static import InputSpec

    from paddle_vit.variants import traceable

    model = timm_model(weights, dynamic_img_size=True, dynamic_img_pad=True)
    cases = ["pad_13x35", "dyn_16x40"] if weights == "timm_vit_cls" else ["hybrid_pad_36x20", "hybrid_dyn_16x48"]
    with paddle.no_grad(), traceable(model):
        assert type(model.patch_embed.input_size).__name__.startswith("Traceable")
        traced = paddle.jit.to_static(model.forward, input_spec=[InputSpec([None, 3, None, None], "float32")],
                                      full_graph=True)
        for case in cases:
            np.testing.assert_allclose(traced(tensor(case)).numpy(), REFERENCE[f"{case}/logits"], atol=TOLERANCE,
                                       rtol=0, err_msg=case)

@pytest.mark.slow
def test_dynamic_export_takes_any_size_in_paddle_inference_and_onnx(tmp_path):
    """A dynamic_img_size (and _pad) model exported with input [None, 3, None, None]: both
    backends give the eager logits at sizes other than the built one, one the patch divides and
    one it does not."""
    import importlib.util

    from paddle_vit.config import DataConfig
    from paddle_vit.deploy.export import export_classifier
    from paddle_vit.preprocess import Preprocess
    from paddle_vit.deploy.inference import load_export
    from paddle_vit.deploy.predict import Classifier

    model = timm_model("timm_vit_cls", dynamic_img_size=True, dynamic_img_pad=True)
    formats = ("paddle", "onnx") if importlib.util.find_spec("paddle2onnx") and importlib.util.find_spec(
        "onnxruntime") else ("paddle",)
    export_classifier(Classifier.for_model(model, Preprocess.from_config(DataConfig(), 32), None, "custom"),
                      tmp_path / "export", formats=formats)
    metadata = json.loads((tmp_path / "export" / "preprocess.json").read_text())
    assert metadata["input_shape"] == [-1, 3, -1, -1]
    for case in ("dyn_48x24", "pad_13x35"):
        batch = REFERENCE[f"{case}/input"]
        with paddle.no_grad():
            eager = model(paddle.to_tensor(batch)).numpy()
        np.testing.assert_allclose(eager, REFERENCE[f"{case}/logits"], atol=TOLERANCE, rtol=0)
        for backend in ("paddle", "onnxruntime")[:len(formats)]:
            outputs = load_export(tmp_path / "export", backend=backend).outputs(batch)
            np.testing.assert_allclose(outputs, eager, atol=1e-5, rtol=0, err_msg=f"{backend} at {case}")


def test_static_export_keeps_its_fixed_input_shape():
    from paddle_vit.deploy.tracing import input_shape

    assert input_shape(ViTConfig(**PLAIN)) == [-1, 3, 32, 32]
    assert input_shape(ViTConfig(**PLAIN), unknown=None) == [None, 3, 32, 32]
