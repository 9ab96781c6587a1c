"""PaddleClas's foundation ViTs (ppcls foundation_vit.py, paddleclas 2.6.0) computed as PaddleClas
computes them, against the outputs it recorded (tests/fixtures/make/
paddleclas_foundation_fixtures.py; tests/fixtures/README.md). paddleclas is not needed here.

The files are PaddleClas's own `VisionTransformer` built under its model names at toy sizes (dim
32, depth 2, 4 heads, MLP 64): ``CLIP_vit_base_patch16_224`` as an embedding model (image 32,
16x16 patches), ``CLIP_vit_large_patch14_224`` and ``MAE_vit_base_patch16`` as 5-class classifiers
(images 28 and 32). They load through `create_model(name, pretrained=...)` with the registered
name and the toy sizes; what PaddleClas computes with (epsilon, GELU, pre-norm, pooling, the
projection) is read from the file.
"""
import hashlib
import importlib.util
import json
import logging
import os

import numpy as np
import paddle
import pytest

from paddle_vit import ConfigError, WeightsError, create_model
from paddle_vit.preprocess import preprocess_for_checkpoint
from paddle_vit.weights import detect_family, implied_options, read_checkpoint

from repo_paths import REPO, load_tool

FIXTURES = os.path.join(REPO, "tests", "fixtures")
REFERENCE = dict(np.load(os.path.join(FIXTURES, "paddleclas_foundation_reference.npz")))
with open(os.path.join(FIXTURES, "paddleclas_foundation_reference.json")) as _stream:
    CASES = json.load(_stream)["cases"]
TOLERANCE = 1e-4
TOY = dict(embed_dim=32, depth=2, num_heads=4, mlp_ratio=2)
# case: (registered name, image size, patch size, the output recorded)
MODELS = {"clip": ("vit_base_patch16_clip_224", 32, 16, "embedding"),
          "clip_large": ("vit_large_patch14_clip_224", 28, 14, "logits"),
          "mae": ("vit_base_patch16_224", 32, 8, "logits")}


def fixture(case):
    return os.path.join(FIXTURES, f"paddleclas_foundation_{case}.pdparams")


def arrays(case):
    return {name: value.numpy() for name, value in paddle.load(fixture(case)).items()}


def create(case, source=None, **overrides):
    name, size, patch, _ = MODELS[case]
    return create_model(name, pretrained=fixture(case) if source is None else source,
                        **{**TOY, "image_size": size, "patch_size": patch, **overrides}).eval()


def outputs(model, images):
    with paddle.no_grad():
        return model(paddle.to_tensor(images)).numpy()


def difference(model, case, key=None):
    key = key or MODELS[case][3]
    return float(np.abs(outputs(model, REFERENCE[f"{case}/input"]) - REFERENCE[f"{case}/{key}"]).max())


def options(model):
    return {option: value for option, (value, _) in model.load_report.options.items()}


# ---- what PaddleClas computes: each file's options, and its outputs --------------------------

def test_clip_base_patch16_embedding_is_the_mean_of_the_normed_patch_tokens_through_proj():
    model = create("clip")
    report = model.load_report
    assert report.format == "paddleclas" and not (report.missing or report.ignored or report.reinitialized)
    implied = options(model)
    assert implied["pool"] == "mean" and implied["fc_norm"] is False and implied["pre_norm"] is True
    assert (implied["layer_norm_epsilon"], implied["gelu"], implied["num_classes"]) == (1e-5, "exact", 8)
    assert model.patch_embed.patch_embedding.bias is None  # PaddleClas's CLIP conv has no bias either
    assert not np.any(model.head.bias.numpy())  # x @ proj: a head without bias
    assert difference(model, "clip") < TOLERANCE


def test_clip_large_classifier_reads_the_class_token_and_ignores_proj():
    model = create("clip_large")
    report = model.load_report
    assert report.ignored == ["proj"] and not (report.missing or report.reinitialized)
    implied = options(model)
    assert (implied["pool"], implied["pre_norm"], implied["num_classes"]) == ("cls", True, 5)
    assert difference(model, "clip_large") < TOLERANCE


def test_mae_classifier_has_no_pre_norm_and_a_patch_conv_without_bias():
    model = create("mae")
    implied = options(model)
    assert (implied["pool"], implied["pre_norm"], implied["layer_norm_epsilon"]) == ("cls", False, 1e-5)
    assert not np.any(model.patch_embed.patch_embedding.bias.numpy())  # zeros for PaddleClas's missing bias
    assert model.load_report.ignored == ["proj"]
    assert difference(model, "mae") < TOLERANCE


@pytest.mark.parametrize("case", ["clip_large", "mae"])
def test_without_its_head_a_file_is_the_embedding_model_the_mean_of_every_token(case):
    state = {name: value for name, value in arrays(case).items() if not name.startswith("head.")}
    model = create(case, source=state)
    implied = options(model)
    assert (implied["pool"], implied["num_classes"], implied["fc_norm"]) == ("walkthrough", 8, False)
    assert difference(model, case, "embedding") < TOLERANCE


def test_mae_at_48_resamples_the_position_embedding_as_paddleclas_forward_does():
    model = create("mae", image_size=48)
    assert model.load_report.resample_method == "bicubic"
    images = REFERENCE["mae_48/input"]
    assert np.abs(outputs(model, images) - REFERENCE["mae_48/logits"]).max() < TOLERANCE


@pytest.mark.parametrize("case", ["clip", "clip_large", "mae"])
def test_epsilon_and_gelu_are_what_make_the_outputs_match(case):
    recorded = CASES[case]
    other_epsilon = create(case, layer_norm_epsilon=1e-6)
    gap = difference(other_epsilon, case)
    assert gap > 100 * TOLERANCE and gap == pytest.approx(recorded["epsilon_1e-6_moves_output_by"], rel=1e-2)
    quick = create(case, gelu="quick")  # OpenAI's CLIP activation, which PaddleClas does not use
    assert quick.load_report.overridden["gelu"][:2] == ("quick", "exact")
    gap = difference(quick, case)
    assert gap > 10 * TOLERANCE and gap == pytest.approx(recorded["quick_gelu_moves_output_by"], rel=1e-2)


# ---- what is refused, by the tensor that says it ------------------------------------------------

def test_clip_base_patch16_classifier_reads_the_first_patch_token_as_paddleclas():
    """PaddleX's CLIP_vit_base_patch16_224 classifier: foundation_vit drops the class token after
    the blocks and classifies token 0, the first patch token (pool="first_patch")."""
    head = {"head.fc_head.weight": REFERENCE["clip/classifier_head.weight"],
            "head.fc_head.bias": REFERENCE["clip/classifier_head.bias"]}
    model = create("clip", source={**arrays("clip"), **head})
    assert model.config.pool == "first_patch" and model.num_classes == 5
    with paddle.no_grad():
        logits = model(paddle.to_tensor(REFERENCE["clip/input"])).numpy()
    assert np.abs(logits - REFERENCE["clip/classifier_logits"]).max() < TOLERANCE
    class_token = create("clip", source={**arrays("clip"), **head}, pool="cls")  # the class token instead
    with paddle.no_grad():
        wrong = class_token(paddle.to_tensor(REFERENCE["clip/input"])).numpy()
    assert np.abs(wrong - REFERENCE["clip/classifier_logits"]).max() > 100 * TOLERANCE


@pytest.mark.parametrize("case, tensor", [("beitv2", "blocks.0.attn.relative_position_bias_table"),
                                          ("cae", "blocks.0.attn.relative_position_bias_table"),
                                          ("unicom", "feature.0.weight")])
def test_models_paddle_vit_does_not_build_are_refused_naming_the_tensor(case, tensor):
    with pytest.raises(WeightsError) as caught:
        create_model("vit_base_patch16_224", pretrained=fixture(case), image_size=32, patch_size=8, **TOY)
    message = str(caught.value)
    assert message.startswith(f"{fixture(case)}: {tensor} ") and "\n" not in message


def test_mae_huge_classifier_head_fails_in_paddleclas_and_is_refused():
    assert CASES["mae_huge_classifier"]["error"].startswith("ValueError")  # PaddleClas's own forward
    head_norm = {"head.fc_norm.weight": np.ones(32, "float32"), "head.fc_norm.bias": np.zeros(32, "float32")}
    with pytest.raises(WeightsError, match=r"^<dict>: head\.fc_norm\.weight .*MAE_vit_huge_patch14"):
        create("mae", source={**arrays("mae"), **head_norm})


def test_a_refused_file_is_one_error_line_from_the_tools(tmp_path, capsys):
    from PIL import Image

    from paddle_vit.cli import run
    Image.new("RGB", (40, 40)).save(tmp_path / "a.png")
    logger = logging.getLogger("paddle_vit")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    try:
        code = run(load_tool("predict").main, ["--weights", fixture("beitv2"), "--model", "vit_base_patch16_224",
                                               str(tmp_path / "a.png")])
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
    errors = capsys.readouterr().err
    assert code == 2 and errors.count("\n") == 1
    assert errors.startswith("error: ") and "relative_position_bias_table" in errors


# ---- the files themselves, at full size ---------------------------------------------------------

def full_size(patch, depth=1, head=False):
    """The tensor shapes of a full-size CLIP file of PaddleClas (D 768, ln_pre, proj 768 x 512)
    as zero-stride arrays, one block: the variant is read off the patch size."""
    grid = 224 // patch
    shapes = {"cls_token": (1, 1, 768), "pos_embed": (1, 1 + grid * grid, 768),
              "patch_embed.proj.weight": (768, 3, patch, patch), "ln_pre.weight": (768,), "ln_pre.bias": (768,),
              "norm.weight": (768,), "norm.bias": (768,), "proj": (768, 512)}
    for index in range(depth):
        block = f"blocks.{index}."
        shapes.update({block + "norm1.weight": (768,), block + "norm1.bias": (768,),
                       block + "attn.qkv.weight": (768, 2304), block + "attn.qkv.bias": (2304,),
                       block + "attn.proj.weight": (768, 768), block + "attn.proj.bias": (768,),
                       block + "norm2.weight": (768,), block + "norm2.bias": (768,),
                       block + "mlp.fc1.weight": (768, 3072), block + "mlp.fc1.bias": (3072,),
                       block + "mlp.fc2.weight": (3072, 768), block + "mlp.fc2.bias": (768,)})
    if head:
        shapes.update({"head.fc_head.weight": (768, 1000), "head.fc_head.bias": (1000,)})
    return {name: np.broadcast_to(np.float32(0.01), shape) for name, shape in shapes.items()}


def test_the_clip_variant_is_read_off_the_patch_size_at_full_size():
    assert detect_family(read_checkpoint(full_size(16))).name == "paddleclas"
    assert implied_options(full_size(16))["pool"].value == "mean"  # CLIP_vit_base_patch16_224
    assert implied_options(full_size(32))["pool"].value == "walkthrough"  # CLIP_vit_base_patch32_224
    assert implied_options(full_size(14, head=True))["pool"].value == "cls"  # CLIP_vit_large_patch14_*'s classifier
    assert implied_options(full_size(32, head=True))["num_classes"].value == 1000
    assert implied_options(full_size(16, head=True))["pool"].value == "first_patch"  # CLIP_vit_base_patch16_224's


def test_older_paddleclas_files_keep_their_own_reading():
    from paddle_vit.weights.source import resolve_weights
    reading = resolve_weights(os.path.join(FIXTURES, "paddleclas_vit_base.pdparams")).reading()
    assert reading.family.preprocessing(reading.checkpoint) == {"pipeline": "paddleclas"}
    assert "pool" not in reading.implied and "pre_norm" not in reading.implied


# ---- PaddleClas's eval transform ------------------------------------------------------------

def photo_paths(folder):
    """The photos of timm_hub_fixtures.photos (tests/photos.py), skipped without scikit-learn or
    when its china.jpg is not the one the references were recorded on."""
    if importlib.util.find_spec("sklearn") is None:
        pytest.skip("scikit-learn (whose sample photo is the input) is not installed")
    from photos import make_photos
    paths = make_photos(str(folder))
    with open(paths["china.jpg"], "rb") as handle:
        if hashlib.sha256(handle.read()).hexdigest() != CASES["mae"]["photos"]["sha256"]["china.jpg"]:
            pytest.skip("scikit-learn's china.jpg is not the photo the references were recorded on")
    return paths


def test_the_model_carries_paddlexs_clip_eval_transform():
    preprocess = create("clip_large").preprocess
    assert (preprocess.resize_mode, preprocess.resize_size, preprocess.image_size) == ("shorter_side", 28, 28)
    assert (preprocess.interpolation, preprocess.backend, preprocess.crop_offset) == ("bicubic", "pil", "floor")
    assert preprocess.mean == [0.485, 0.456, 0.406] and preprocess.std == [0.229, 0.224, 0.225]
    assert preprocess.rgb == "convert_shift16" and "CLIP_vit_base_patch16_224.yaml" in preprocess.origin
    at_224 = preprocess_for_checkpoint(create("clip_large").load_report.preprocessing, 224)
    assert (at_224.resize_size, at_224.image_size, at_224.long_side) == (224, 224, "scale_round")


def test_photos_through_the_models_preprocess_give_paddleclas_outputs(tmp_path):
    paths = photo_paths(tmp_path)
    for case in MODELS:
        model, output = create(case), MODELS[case][3]
        for photo, path in paths.items():
            pixels = model.preprocess.read(path)
            if f"photo_{model.config.image_size}/{photo}/input" in REFERENCE:
                np.testing.assert_allclose(pixels, REFERENCE[f"photo_{model.config.image_size}/{photo}/input"],
                                           atol=1e-6)
            ours = outputs(model, pixels[None])[0]
            assert np.abs(ours - REFERENCE[f"{case}/photo/{photo}/{output}"]).max() < TOLERANCE, (case, photo)


def test_a_transform_list_paddle_vit_cannot_compute_is_refused():
    recognition = [{"DecodeImage": {"to_rgb": True}}, {"ResizeImage": {"size": 224, "interpolation": "bicubic"}},
                   {"NormalizeImage": {"scale": 0.00392157, "order": ""}}]  # PP-ShiTuV2's: OpenCV bicubic
    with pytest.raises(ConfigError, match="resizes bilinearly only"):
        preprocess_for_checkpoint({"pipeline": "paddleclas", "config": {"transform_ops": recognition}}, 224)
    bgr = [{"DecodeImage": {"to_rgb": False}}, {"ResizeImage": {"resize_short": 256}}, {"CropImage": {"size": 224}}]
    with pytest.raises(ConfigError, match="BGR"):
        preprocess_for_checkpoint({"pipeline": "paddleclas", "config": {"transform_ops": bgr}}, 224)
    squash = [{"ResizeImage": {"size": 224}}, {"NormalizeImage": {"scale": "1.0/255.0", "order": ""}}]
    preprocess = preprocess_for_checkpoint({"pipeline": "paddleclas", "config": {"transform_ops": squash}}, 224)
    assert (preprocess.resize_mode, preprocess.backend, preprocess.interpolation) == ("both_sides", "cv2", "bilinear")
