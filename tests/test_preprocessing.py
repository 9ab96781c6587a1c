"""Eval preprocessing per checkpoint family (paddle_vit.preprocess).

Unit tests with hand-computed values: what each family's config maps to, the resize and crop
arithmetic that differs between libraries, the RGB conversions, the OpenCV/TensorFlow resize
kernels, and that a preprocess.json written before the library fields existed still loads to
the recipe transform. The parity with each library's own pipeline on real photos is checked
against recorded fixtures further down.
"""
import hashlib
import importlib.util
import json
import os

import numpy as np
import pytest
from PIL import Image

from paddle_vit.data.config import DataConfig
from paddle_vit.preprocess import Preprocess, preprocess_for_checkpoint
from paddle_vit.preprocess.pipeline import crop_box, resized_size, to_rgb
from paddle_vit.preprocess.resize_kernels import cv2_resize_linear, tf_resize_bilinear
from paddle_vit.data.transforms import build_transforms
from paddle_vit.errors import ConfigError

IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def timm_hint(**cfg):
    return {"pipeline": "timm", "config": {"input_size": [3, 224, 224], **cfg}}


def random_image(width, height, mode="RGB", seed=0):
    channels = {"RGB": 3, "RGBA": 4, "L": 1}[mode]
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, channels), dtype=np.uint8)
    return Image.fromarray(pixels[..., 0] if channels == 1 else pixels, mode)


# ---- old files, the recipe transform -----------------------------------------------------------

def test_preprocess_json_written_before_the_library_fields_loads_to_the_recipe_transform():
    old = {"image_size": 14, "eval_crop_pct": 0.875, "resize": "shorter_side", "resize_size": 16,
           "center_crop": 14, "interpolation": "bicubic", "channel_order": "RGB", "scale": "pixel / 255",
           "mean": IMAGENET_MEAN, "std": IMAGENET_STD, "layout": "NCHW", "dtype": "float32"}
    preprocess = Preprocess.from_dict(old)
    assert preprocess == Preprocess(14, 0.875, IMAGENET_MEAN, IMAGENET_STD, "bicubic")  # the recipe's, every field
    image = random_image(23, 17)
    expected = build_transforms(DataConfig(mean=IMAGENET_MEAN, std=IMAGENET_STD, eval_crop_pct=0.875), 14,
                                train=False)(image, None)
    np.testing.assert_array_equal(preprocess.transform()(image), expected)


@pytest.mark.parametrize("hint", [timm_hint(crop_pct=0.9, crop_mode="border"),
                                  {"pipeline": "huggingface", "config": {"size": {"shortest_edge": 256},
                                                                         "do_center_crop": True,
                                                                         "crop_size": {"height": 224, "width": 224}}},
                                  {"pipeline": "paddleclas"}, {"pipeline": "vit_jax"}, {"pipeline": "torchvision"}])
def test_every_pipeline_survives_the_json_round_trip(hint):
    preprocess = preprocess_for_checkpoint(hint, 224)
    again = Preprocess.from_dict(json.loads(json.dumps(preprocess.to_dict())))
    assert again == preprocess and again.origin


def test_a_malformed_entry_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="crop_offset"):
        Preprocess.from_dict({"image_size": 8, "mean": [0] * 3, "std": [1] * 3, "crop_offset": "middle"})
    with pytest.raises(ConfigError, match="pipeline"):
        preprocess_for_checkpoint({"pipeline": "keras"}, 224)


# ---- what each family's config says -------------------------------------------------------------

def test_timm_center_crop_resizes_the_shorter_side_to_floor_of_size_over_crop_pct():
    preprocess = preprocess_for_checkpoint(timm_hint(crop_pct=0.9, interpolation="bicubic",
                                                     mean=[0.5] * 3, std=[0.5] * 3), 224)
    assert (preprocess.resize_mode, preprocess.resize_size, preprocess.long_side) == ("shorter_side", 248, "truncate")
    assert (preprocess.rgb, preprocess.exif_transpose, preprocess.interpolation) == ("convert", False, "bicubic")
    # timm's defaults where the pretrained_cfg says nothing: bicubic, 0.875, ImageNet statistics
    default = preprocess_for_checkpoint({"pipeline": "timm", "config": {}}, 224)
    assert (default.resize_size, default.interpolation, default.mean) == (256, "bicubic", IMAGENET_MEAN)
    assert preprocess_for_checkpoint(timm_hint(crop_pct=0.95), 224).resize_size == 235  # floor(235.79)


def test_timm_squash_and_border_modes():
    squash = preprocess_for_checkpoint(timm_hint(crop_pct=0.875, crop_mode="squash"), 224)
    assert (squash.resize_mode, squash.resize_size) == ("both_sides", 256)
    border = preprocess_for_checkpoint(timm_hint(crop_pct=1.0, crop_mode="border"), 224)
    assert (border.resize_mode, border.resize_size, border.crop_fill) == ("longer_side", 224, "mean")


def test_a_whole_timm_hub_config_json_is_read_through_its_pretrained_cfg():
    hint = {"pipeline": "timm", "config": {"architecture": "vit_tiny_patch16_384",
                                           "pretrained_cfg": {"input_size": [3, 384, 384], "crop_pct": 1.0,
                                                              "interpolation": "bilinear"}}}
    preprocess = preprocess_for_checkpoint(hint, 384)
    assert (preprocess.image_size, preprocess.resize_size, preprocess.interpolation) == (384, 384, "bilinear")


def test_huggingface_processor_configs():
    vit = preprocess_for_checkpoint({"pipeline": "huggingface", "config": {
        "do_resize": True, "size": {"height": 224, "width": 224}, "resample": 2, "do_rescale": True,
        "rescale_factor": 0.00392156862745098, "do_normalize": True, "image_mean": [0.5] * 3,
        "image_std": [0.5] * 3}}, 224)
    assert (vit.resize_mode, vit.resize_size, vit.interpolation, vit.rescale) == \
        ("both_sides", 224, "bilinear", "float64_multiply")
    assert (vit.rgb, vit.read_rgb, vit.exif_transpose) == ("convert", "convert", True)  # load_image's steps
    deit = preprocess_for_checkpoint({"pipeline": "huggingface", "config": {
        "size": {"shortest_edge": 256}, "resample": 3, "do_center_crop": True,
        "crop_size": {"height": 224, "width": 224}, "do_convert_rgb": True,
        "image_mean": IMAGENET_MEAN, "image_std": IMAGENET_STD}}, 224)
    assert (deit.resize_mode, deit.resize_size, deit.crop_offset, deit.rgb) == \
        ("shorter_side", 256, "floor", "alpha_on_white")
    # older files give sizes as one number (transformers reads it as height = width)
    old_style = preprocess_for_checkpoint({"pipeline": "huggingface", "config": {"size": 224, "resample": 3}}, 224)
    assert (old_style.resize_mode, old_style.resize_size, old_style.interpolation) == ("both_sides", 224, "bicubic")
    with pytest.raises(ConfigError, match="resample"):
        preprocess_for_checkpoint({"pipeline": "huggingface", "config": {"resample": 1}}, 224)  # LANCZOS
    with pytest.raises(ConfigError, match="384"):
        preprocess_for_checkpoint({"pipeline": "huggingface", "config": {"size": {"height": 384, "width": 384}}},
                                  224)


# ---- the arithmetic that differs between libraries -----------------------------------------------

def test_the_longer_side_is_truncated_by_torchvision_and_rounded_by_paddleclas_and_the_recipes():
    # 640 x 427, shorter side to 256: 256 * 640 / 427 = 383.70...
    truncate = preprocess_for_checkpoint({"pipeline": "torchvision"}, 224)
    assert resized_size(640, 427, truncate) == (383, 256)
    assert resized_size(427, 640, truncate) == (256, 383)
    assert resized_size(640, 427, preprocess_for_checkpoint({"pipeline": "paddleclas"}, 224)) == (384, 256)
    assert resized_size(640, 427, Preprocess(224, 0.875)) == (384, 256)


def test_timm_border_scales_the_longer_side_and_rounds_the_other():
    border = preprocess_for_checkpoint(timm_hint(crop_pct=1.0, crop_mode="border"), 224)
    assert resized_size(640, 427, border) == (224, 149)  # 427 / (640 / 224) = 149.45 -> 149
    assert resized_size(17, 11, border) == (224, 145)  # 11 / (17 / 224) = 144.94 -> 145


def test_centre_crop_offsets_and_padding():
    assert crop_box(300, 256, 224, "round") == (38, 16)
    assert crop_box(225, 225, 224, "round") == (0, 0)  # round(0.5) = 0: half to even
    assert crop_box(227, 227, 224, "round") == (2, 2)  # round(1.5) = 2
    assert crop_box(227, 227, 224, "floor") == (1, 1)
    # smaller than the crop: torchvision pads (c - w) // 2 on the left, transformers ceil((c - w) / 2)
    assert crop_box(221, 224, 224, "round") == (-1, 0)
    assert crop_box(221, 224, 224, "floor") == (-2, 0)


def test_an_image_smaller_than_the_crop_is_padded_with_zeros_or_timms_mean():
    image = Image.new("RGB", (2, 4), (255, 255, 255))
    torchvision_like = Preprocess(4, mean=[0.0] * 3, std=[1.0] * 3, resize_mode="none", rgb="convert")
    expected_columns = [0.0, 1.0, 1.0, 0.0]  # padding 1 left, 1 right
    np.testing.assert_array_equal(torchvision_like.transform()(image)[0, 0], expected_columns)
    border = Preprocess(4, mean=[0.5] * 3, std=[1.0] * 3, resize_mode="none", crop_fill="mean", rgb="convert")
    # the fill is round(255 * 0.5) = 128, so (128 / 255 - 0.5) there
    np.testing.assert_allclose(border.transform()(image)[0, 0], [128 / 255 - 0.5, 0.5, 0.5, 128 / 255 - 0.5],
                               atol=1e-7)


def test_rescale_arithmetic_follows_the_library():
    pixels = np.arange(256, dtype=np.uint8).reshape(16, 16, 1).repeat(3, axis=2)
    image = Image.fromarray(pixels)
    common = dict(mean=[0.0] * 3, std=[1.0] * 3, resize_mode="none", rgb="convert")
    torch_like = Preprocess(16, **common).transform()(image)[0].ravel()
    np.testing.assert_array_equal(torch_like, np.arange(256, dtype=np.float32) / np.float32(255))
    hf_like = Preprocess(16, rescale="float64_multiply", **common).transform()(image)[0].ravel()
    np.testing.assert_array_equal(hf_like, (np.arange(256) * (1 / 255)).astype(np.float32))
    paddleclas_like = Preprocess(16, rescale="float32_multiply", **common).transform()(image)[0].ravel()
    np.testing.assert_array_equal(paddleclas_like, np.arange(256, dtype=np.float32) * np.float32(1 / 255))
    assert not np.array_equal(torch_like, paddleclas_like)  # one ulp apart on some values: the rule matters


# ---- RGB conversion ------------------------------------------------------------------------------

def test_convert_drops_alpha_while_the_recipes_and_transformers_composite_on_white():
    rgba = Image.new("RGBA", (1, 1), (200, 100, 0, 0))  # fully transparent orange
    assert to_rgb(rgba, "convert").getpixel((0, 0)) == (200, 100, 0)
    assert to_rgb(rgba, "composite_white").getpixel((0, 0)) == (255, 255, 255)
    assert to_rgb(rgba, "alpha_on_white").getpixel((0, 0)) == (255, 255, 255)
    assert to_rgb(rgba, "convert_shift16").getpixel((0, 0)) == (200, 100, 0)
    half = Image.new("LA", (1, 1), (100, 128))
    assert to_rgb(half, "alpha_on_white").getpixel((0, 0)) == to_rgb(half, "composite_white").getpixel((0, 0))


def test_sixteen_bit_gray_is_shifted_as_opencv_and_tensorflow_decode_it():
    gray = Image.fromarray(np.array([[1000, 40000]], dtype=np.uint16))
    assert gray.mode.startswith("I;16")
    assert to_rgb(gray, "convert_shift16").getpixel((1, 0)) == (40000 >> 8,) * 3
    assert to_rgb(gray, "composite_white").getpixel((1, 0)) == (round(40000 / 257),) * 3


# ---- the resize kernels ------------------------------------------------------------------------

def test_cv2_linear_kernel_by_hand():
    # 2 -> 4 pixels: source x = (d + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75, 1.25; outside the
    # centres the edge pixel alone, inside (1 - f) * a + f * b with f in 1/2048 steps
    row = np.array([[[0], [200]]], dtype=np.uint8)  # [1, 2, 1]
    assert cv2_resize_linear(row, 4, 1)[0, :, 0].tolist() == [0, 50, 150, 200]
    assert cv2_resize_linear(np.full((3, 5, 3), 7, np.uint8), 9, 2).tolist() == np.full((2, 9, 3), 7).tolist()


def test_tf_bilinear_kernel_by_hand():
    row = np.array([[[0.0], [200.0]]], dtype=np.float32)
    np.testing.assert_allclose(tf_resize_bilinear(row, 4, 1)[0, :, 0], [0.0, 50.0, 150.0, 200.0])
    # 3 -> 2: x = (d + 0.5) * 1.5 - 0.5 = 0.25, 1.75
    row = np.array([[[0.0], [100.0], [40.0]]], dtype=np.float32)
    np.testing.assert_allclose(tf_resize_bilinear(row, 2, 1)[0, :, 0], [25.0, 55.0])


def test_read_applies_exif_only_where_the_library_does(tmp_path):
    pixels = np.random.default_rng(1).integers(0, 256, (8, 12, 3), dtype=np.uint8)
    exif = Image.Exif()
    exif[0x0112] = 6  # shown rotated 90 degrees clockwise
    Image.fromarray(pixels).save(tmp_path / "rotated.png", exif=exif.tobytes())
    plain = Preprocess(8, mean=[0.0] * 3, std=[1.0] * 3, resize_mode="none", rgb="convert",
                       exif_transpose=False)
    np.testing.assert_array_equal(plain.read(tmp_path / "rotated.png"), plain.transform()(Image.fromarray(pixels)))
    upright = Preprocess(8, mean=[0.0] * 3, std=[1.0] * 3, resize_mode="none", rgb="convert")
    rotated = Image.fromarray(pixels).transpose(Image.Transpose.ROTATE_270)  # 8 wide, 12 high
    np.testing.assert_array_equal(upright.read(tmp_path / "rotated.png"), upright.transform()(rotated))


# ---- the recipes' eval transform, pinned (tests/fixtures/recipe_eval_reference.json) ---------------
# Recorded by tests/fixtures/make/recipe_eval_fixtures.py from training's own eval transform as it
# was before predict, export and training ran one pipeline: every array bit for bit the same.

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
with open(os.path.join(FIXTURES, "recipe_eval_reference.json")) as _handle:
    RECIPE_EVAL = json.load(_handle)


def digest(array):
    array = np.ascontiguousarray(array, dtype=np.float32)
    return {"sha256": hashlib.sha256(array.tobytes()).hexdigest(), "sum": float(array.astype(np.float64).sum()),
            "shape": list(array.shape)}


@pytest.mark.parametrize("case", sorted(RECIPE_EVAL["cases"]))
def test_the_recipe_eval_transform_gives_the_recorded_arrays_in_training_and_prediction(case):
    from paddle_vit.data.imagefolder import decode_image
    size, keys = RECIPE_EVAL["cases"][case]["image_size"], RECIPE_EVAL["cases"][case]["data"]
    training = build_transforms(DataConfig(**keys), size, train=False)  # the validation split's
    prediction = Preprocess.from_config(DataConfig(**keys), size)  # predict's and export's
    for image in RECIPE_EVAL["images"]:
        path = image_path(image)
        recorded = RECIPE_EVAL["photos"][f"{case}/{image}"]
        assert digest(training(decode_image(path), None)) == recorded, (case, image)
        assert digest(prediction.read(path)) == recorded, (case, image)


def test_training_validates_through_the_pipeline_predict_runs():
    from paddle_vit.preprocess.pipeline import EvalTransform
    data_config = DataConfig(mean=IMAGENET_MEAN, std=IMAGENET_STD, eval_crop_pct=0.875, interpolation="bilinear")
    training = build_transforms(data_config, 24, train=False)
    assert isinstance(training, EvalTransform)  # one implementation of the steps, not a second one
    assert training.preprocess == Preprocess(24, 0.875, IMAGENET_MEAN, IMAGENET_STD, "bilinear",
                                             origin=training.preprocess.origin)


@pytest.mark.parametrize("split", sorted(RECIPE_EVAL["splits"]))
def test_a_whole_validation_split_gives_the_recorded_arrays(split):
    from paddle_vit.data import build_datasets
    entry = RECIPE_EVAL["splits"][split]
    _, val, _ = build_datasets(DataConfig(**entry["data"]), entry["image_size"])
    ours = digest(np.stack([val[index][0] for index in range(len(val))]))
    assert ours == {key: entry[key] for key in ("sha256", "sum", "shape")}


# ---- parity with each library's own pipeline (tests/fixtures/preprocess_reference.*) ---------------
# Recorded by tests/fixtures/make/preprocess_fixtures.py with timm, transformers, torchvision,
# PaddleClas's own operators (OpenCV) and TensorFlow, on scikit-learn's two photos and variants.

with open(os.path.join(FIXTURES, "preprocess_reference.json")) as _handle:
    RECORDED = json.load(_handle)
PARITY = 1e-4
# Where the library decodes the file with a decoder of its own whose pixels differ from PIL's
# (OpenCV's CMYK conversion; TensorFlow's fast integer IDCT for every JPEG), our PIL-decoded
# input is compared with the library's operators run on PIL's pixels ("@pil_decode"), and with
# the library's own decode only within the difference recorded for that decoder.
OWN_DECODER_DIFFERS = {"paddleclas": {"cmyk.jpg"},
                       "vit_jax": {"china.jpg", "flower.jpg", "portrait.jpg", "exif_rotated.jpg", "cmyk.jpg"}}


def image_path(image):
    """The input file; scikit-learn's photos from the installed package (skip when absent or
    not the recorded file)."""
    entry = RECORDED["images"][image]
    if not entry["file"].startswith("<scikit-learn>"):
        return os.path.join(FIXTURES, entry["file"])
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        pytest.skip("scikit-learn (whose sample photos are the inputs) is not installed")
    path = os.path.join(os.path.dirname(spec.origin), "datasets", "images", image)
    with open(path, "rb") as handle:
        if hashlib.sha256(handle.read()).hexdigest() != entry["sha256"]:
            pytest.skip(f"{path} is not the photo the references were recorded on")
    return path


@pytest.fixture(scope="module")
def tiny_vit():
    """The timm ViT whose probabilities the fixtures hold, loaded from timm's file."""
    import paddle
    from paddle_vit import ViT, load_pretrained
    config = RECORDED["model"]
    model = ViT(image_size=config["img_size"], patch_size=config["patch_size"], embed_dim=config["embed_dim"],
                depth=config["depth"], num_heads=config["num_heads"], num_classes=config["num_classes"]).eval()
    load_pretrained(model, os.path.join(FIXTURES, "preprocess_vit_tiny.safetensors"))

    def probabilities(batch):
        with paddle.no_grad():
            return paddle.nn.functional.softmax(model(paddle.to_tensor(batch)).astype("float64"), -1).numpy()
    return probabilities


def our_inputs(pipeline):
    """float32 [N, 3, S, S]: our preprocessing of every recorded image, as the pipeline reads it."""
    entry = RECORDED["pipelines"][pipeline]
    preprocess = preprocess_for_checkpoint(entry["hint"], entry["size"])
    if pipeline.endswith("@opened"):  # the image as Image.open gives it, handed to the transform
        transform = preprocess.transform()
        return np.stack([transform(Image.open(image_path(image))) for image in RECORDED["image_order"]])
    return np.stack([preprocess.read(image_path(image)) for image in RECORDED["image_order"]])


def reference(pipeline, quantity):
    return np.load(os.path.join(FIXTURES, "preprocess_reference.npz"))[f"{pipeline}/{quantity}"]


def input_differences(ours, pipeline):
    """Largest |ours - library| over the sample, and over the (weighted) sums per image."""
    size = ours.shape[-1]
    rows, columns = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    pattern = ((3 * rows + 5 * columns) % 7 - 3).astype(np.float64)
    as_float = ours.astype(np.float64)
    return (np.abs(ours[:, :, 5::29, 5::29] - reference(pipeline, "sample")).max(axis=(1, 2, 3)),
            np.abs(as_float.sum(axis=(2, 3)) - reference(pipeline, "sums")).max(axis=1),
            np.abs((as_float * pattern).sum(axis=(2, 3)) - reference(pipeline, "weighted_sums")).max(axis=1))


LIBRARY_PIPELINES = sorted(name for name in RECORDED["pipelines"] if not name.endswith("@pil_decode"))


@pytest.mark.parametrize("pipeline", LIBRARY_PIPELINES)
def test_our_input_and_probabilities_match_the_librarys_own_pipeline(pipeline, tiny_vit):
    assert not RECORDED["refused"], RECORDED["refused"]
    ours = our_inputs(pipeline)
    own_decoder_differs = OWN_DECODER_DIFFERS.get(pipeline, set())
    compared = [i for i, image in enumerate(RECORDED["image_order"]) if image not in own_decoder_differs]
    sample, sums, weighted = input_differences(ours, pipeline)
    # sums over S * S values: one pixel off by one level (>= 0.0078) shows above 1e-3
    assert sample[compared].max() < PARITY and sums[compared].max() < 1e-3 and weighted[compared].max() < 1e-3, \
        (pipeline, dict(zip(RECORDED["image_order"], zip(sample, sums))))
    summary = f"{pipeline}: input max |ours - library| {sample[compared].max():.2e} (sampled)"
    if own_decoder_differs:  # PIL's pixels through the library's operators: exact as well
        rows = [i for i in range(len(ours)) if i not in compared]
        own_decoder = sample[rows].max()
        sample, sums, weighted = input_differences(ours, pipeline + "@pil_decode")
        assert sample[rows].max() < PARITY and sums[rows].max() < 1e-3 and weighted[rows].max() < 1e-3
        summary += f" ({own_decoder:.2e} with the library's own decoder on {', '.join(sorted(own_decoder_differs))})"
    if ours.shape[-1] != RECORDED["model"]["img_size"]:
        print(summary)  # the figures of docs/pretrained.md: pytest -s -k own_pipeline
        return
    probabilities = tiny_vit(ours)
    expected = reference(pipeline, "probabilities")
    print(f"{summary}, probabilities {np.abs(probabilities[compared] - expected[compared]).max():.2e}"
          + (f" ({np.abs(probabilities - expected).max():.2e} with the library's own decoder)"
             if own_decoder_differs else ""))
    np.testing.assert_allclose(probabilities[compared], expected[compared], atol=PARITY, rtol=0)
    assert (probabilities[compared].argmax(1) == expected[compared].argmax(1)).all()
    for row in (i for i in range(len(ours)) if i not in compared):  # the decoders' own difference
        image = RECORDED["image_order"][row]
        recorded = RECORDED["decode_differences"][f"{pipeline}/{image}"]["probabilities"]
        assert np.abs(probabilities[row] - expected[row]).max() <= recorded + PARITY, image
