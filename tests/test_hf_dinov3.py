"""transformers' DINOv3 (DINOv3ViTModel and DINOv3ViTImageProcessor), read and computed as
transformers computes it.

The references are transformers' own (tests/fixtures/hf_dinov3*, tests/fixtures/make/
hf_dinov3_fixtures.py): two save_pretrained folders of small models (the plain GELU MLP with q/v
biases of ViT-S/B/L; the gated SiLU MLP without q/k/v bias of the 7B), their last_hidden_state and
pooler_output for a batch and at two other input sizes (48 x 80; 56 x 72, which the patch does not
divide: transformers floors the grid), and photos through the processor (rescale, then an
antialiased bilinear resize of the floats, then normalise). Nothing here needs torch.
"""
import json
import os
import shutil

import numpy as np
import paddle
import pytest
from PIL import Image
from safetensors.numpy import load_file, save_file

from paddle_vit import WeightsError, create_model
from paddle_vit.preprocess import preprocess_for_checkpoint
from paddle_vit.weights import detect_family, read_checkpoint

from photos import make_photos
from repo_paths import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures")
REFERENCE = dict(np.load(os.path.join(FIXTURES, "hf_dinov3_reference.npz")))
with open(os.path.join(FIXTURES, "hf_dinov3_reference.json")) as _stream:
    CASES = json.load(_stream)["cases"]
TOLERANCE = 1e-4
PIXEL_TOLERANCE = 1e-4
FOLDERS = ("dinov3_vit", "dinov3_vit_gated")
SIZES = ("", "/size_48x80", "/size_56x72")  # the batch at 64 x 64, then one image at each other size
# what each folder's config.json implies beside the sizes
OPTIONS = {
    "dinov3_vit": dict(num_classes=0, pool="cls", fc_norm=False, register_tokens=4, layer_scale=1.0, mlp="standard",
                       gelu="exact", qkv="separate", qkv_bias=True, layer_norm_epsilon=1e-5, rope="dinov3",
                       rope_temperature=100.0, rope_rotate_half=True, position_embedding="none",
                       dynamic_img_size=True, drop_remainder=True, mlp_ratio=4.0),
    "dinov3_vit_gated": dict(num_classes=0, pool="cls", register_tokens=4, mlp="swiglu_split", mlp_align_to=0,
                             mlp_ratio=2.0, qkv="separate", qkv_bias=False, rope="dinov3", rope_rotate_half=True),
}


def folder(case):
    return os.path.join(FIXTURES, "hf_dinov3", case)


def outputs(model, images):
    """(last_hidden_state, pooler_output) of `model` for `images`, as numpy arrays."""
    with paddle.no_grad():
        x = paddle.to_tensor(images)
        tokens = model.forward_features(x)
        return tokens.numpy(), model.forward_head(tokens, pre_logits=True).numpy()


def worst(model, case, size=""):
    hidden, pooled = outputs(model.eval(), REFERENCE[f"{case}{size}/input"])
    return max(float(np.abs(hidden - REFERENCE[f"{case}{size}/last_hidden_state"]).max()),
               float(np.abs(pooled - REFERENCE[f"{case}{size}/pooler_output"]).max()))


@pytest.fixture(scope="module")
def models():
    return {case: create_model(pretrained=folder(case)).eval() for case in FOLDERS}


# ---- the folders, with no model name ------------------------------------------------------------

@pytest.mark.parametrize("case", FOLDERS)
def test_a_dinov3_folder_without_a_name_computes_as_transformers(case, models):
    model = models[case]
    report = model.load_report
    assert report.format == "huggingface-dinov3" and not (report.missing or report.reinitialized)
    assert report.ignored == ["embeddings.mask_token"]  # masked image modelling's token
    for option, value in OPTIONS[case].items():
        assert getattr(model.config, option) == value, option
    assert worst(model, case) < TOLERANCE
    hidden, pooled = outputs(model, REFERENCE[f"{case}/input"])
    assert np.array_equal(pooled, model(paddle.to_tensor(REFERENCE[f"{case}/input"])).numpy())  # the model's output


@pytest.mark.parametrize("size", SIZES[1:])
@pytest.mark.parametrize("case", FOLDERS)
def test_other_input_sizes_recompute_the_rope_grid_and_floor_it_as_transformers(case, size, models):
    """48 x 80: a 3 x 5 grid; 56 x 72: the patch does not divide it and transformers' Conv2D floors
    the grid to 3 x 4 (the folder implies drop_remainder, so ours does the same instead of refusing)."""
    tokens = CASES[case]["other_sizes"][size.split("_")[1]]["tokens"]
    hidden, _ = outputs(models[case], REFERENCE[f"{case}{size}/input"])
    assert hidden.shape[1] == tokens
    assert worst(models[case], case, size) < TOLERANCE


@pytest.mark.parametrize("case", FOLDERS)
def test_forward_intermediates_runs_at_every_size(case, models):
    model = models[case]
    for size in SIZES:
        images = paddle.to_tensor(REFERENCE[f"{case}{size}/input"])
        intermediates = model.forward_intermediates(images, indices=2, output_fmt="NCHW", intermediates_only=True)
        rows, cols = images.shape[2] // 16, images.shape[3] // 16
        assert [list(tensor.shape) for tensor in intermediates] == [[images.shape[0], 48, rows, cols]] * 2
        tokens, _ = model.forward_intermediates(images, indices=1, norm=True)
        assert np.abs(tokens.numpy() - REFERENCE[f"{case}{size}/last_hidden_state"]).max() < TOLERANCE


def test_the_options_are_what_makes_the_outputs_match():
    """Each thing read from the folder matters: another epsilon, RoPE layout or base misses
    transformers' outputs by far; the tanh GELU by 8.7e-4 (the fixture's json records it)."""
    for wrong in (dict(layer_norm_epsilon=1e-6), dict(rope_rotate_half=False), dict(rope_temperature=10000.0),
                  dict(gelu="tanh")):
        assert worst(create_model(pretrained=folder("dinov3_vit"), **wrong), "dinov3_vit") > 5 * TOLERANCE, wrong


@pytest.mark.parametrize("case", FOLDERS)
def test_weights_without_config_json_take_dinov3s_defaults_and_what_the_tensors_say(case, tmp_path):
    """A bare model.safetensors: the tensors say the registers, the q/v biases and the MLP (gated or
    not, its width); DINOv3ViTConfig's defaults the rest (epsilon 1e-5, RoPE base 100)."""
    path = tmp_path / "model.safetensors"
    shutil.copy(os.path.join(folder(case), "model.safetensors"), path)
    model = create_model("vit_small_patch16_dinov3", pretrained=str(path), embed_dim=48, depth=2, num_heads=3,
                         image_size=64)
    assert model.load_report.format == "huggingface-dinov3"
    assert "no config.json" in model.load_report.options["layer_norm_epsilon"][1]
    for option in ("mlp", "mlp_ratio", "qkv_bias", "register_tokens", "pool"):
        assert getattr(model.config, option) == OPTIONS[case][option], option
    assert worst(model, case) < TOLERANCE


def test_only_the_dinov3_family_claims_its_files():
    for case in FOLDERS:
        weights = load_file(os.path.join(folder(case), "model.safetensors"))
        assert detect_family(read_checkpoint(weights)).name == "huggingface-dinov3"


# ---- what a config.json says that this ViT does not compute, named in one line -------------------

def edited(tmp_path, case, **changes):
    """A copy of the fixture folder `case` whose config.json has `changes`."""
    from test_failures_folders import edited as edited_copy
    return edited_copy(tmp_path, folder(case), changes)


@pytest.mark.parametrize("case, changes, expected", [
    ("dinov3_vit", dict(key_bias=True), "config.json: key_bias true asks for a bias on k"),
    ("dinov3_vit", dict(value_bias=False), "config.json: query_bias true with value_bias false"),
    ("dinov3_vit", dict(proj_bias=False), "config.json: proj_bias false asks for"),
    ("dinov3_vit", dict(mlp_bias=False), "config.json: mlp_bias false asks for"),
    ("dinov3_vit", dict(hidden_act="gelu_pytorch_tanh"), "config.json: hidden_act 'gelu_pytorch_tanh' with the plain"),
    ("dinov3_vit_gated", dict(hidden_act="gelu"), "config.json: hidden_act 'gelu' with the gated MLP"),
    ("dinov3_vit", dict(num_attention_heads=8), "config.json: num_attention_heads 8 gives heads of 48 / 8"),
    ("dinov3_vit", dict(patch_size=14), "config.json: patch_size 14 contradicts the weights"),
    ("dinov3_vit", dict(num_register_tokens=2), "config.json: num_register_tokens 2 contradicts the weights"),
    ("dinov3_vit", dict(rope_theta=0), "config.json: rope_theta must be a number > 0"),
    ("dinov3_vit", dict(layer_norm_eps=0.5), "config.json: layer_norm_eps must be a LayerNorm epsilon"),
])
def test_a_config_json_this_vit_does_not_compute_is_named_by_its_key(tmp_path, case, changes, expected):
    with pytest.raises(WeightsError) as caught:
        create_model(pretrained=edited(tmp_path, case, **changes))
    message = str(caught.value)
    assert expected in message and "\n" not in message


# ---- the processor and the photos ------------------------------------------------------------------

@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """The photos the fixture fed transformers' processor: china.jpg and its variants, flower.jpg and
    a wide 300 x 100 crop of it."""
    scratch = str(tmp_path_factory.mktemp("photos"))
    paths = make_photos(scratch)
    paths["flower.jpg"] = os.path.join(os.path.dirname(paths["china.jpg"]), "flower.jpg")
    paths["flower_wide.png"] = os.path.join(scratch, "flower_wide.png")
    with Image.open(paths["flower.jpg"]) as image:
        image.crop((100, 150, 400, 250)).save(paths["flower_wide.png"])
    assert sorted(paths) == sorted(CASES["processor"]["photos"])
    return paths


def test_the_processor_rescales_before_its_float_resize():
    preprocess = create_model(pretrained=folder("dinov3_vit")).preprocess
    assert (preprocess.backend, preprocess.rescale, preprocess.interpolation, preprocess.resize_mode,
            preprocess.image_size) == ("pil_float", "float32_multiply", "bilinear", "both_sides", 64)
    assert preprocess.mean == [0.485, 0.456, 0.406] and preprocess.std == [0.229, 0.224, 0.225]


def test_photos_through_the_folders_processor_give_transformers_pixels(photos):
    """Each file read as transformers' load_image reads it (convert("RGB")): the pixels of the
    processor within 1e-4 (measured ~2e-6); the uint8 resize of the other processors would be 1e-2
    off."""
    preprocess = create_model(pretrained=folder("dinov3_vit")).preprocess
    uint8_first = preprocess_for_checkpoint({"pipeline": "huggingface", "config": dict(
        CASES["processor"]["processor_config"], image_processor_type="ViTImageProcessor")}, 64)
    for name, path in photos.items():
        expected = REFERENCE[f"photo/{name}/pixel_values"]
        assert np.abs(preprocess.read(path)[None] - expected).max() < PIXEL_TOLERANCE, name
        assert np.abs(uint8_first.read(path)[None] - expected).max() > 1e-3, name


@pytest.mark.parametrize("case", FOLDERS)
def test_photos_give_transformers_outputs(case, photos, models):
    model = models[case]
    for name, path in photos.items():
        hidden, pooled = outputs(model, model.preprocess.read(path)[None])
        assert np.abs(hidden - REFERENCE[f"photo/{name}/{case}/last_hidden_state"]).max() < TOLERANCE, name
        assert np.abs(pooled - REFERENCE[f"photo/{name}/{case}/pooler_output"]).max() < TOLERANCE, name


def test_predict_json_prints_the_embedding_transformers_pools(photos, capsys):
    from paddle_vit.cli import run
    from repo_paths import load_tool
    for case in FOLDERS:
        capsys.readouterr()
        code = run(load_tool("predict").main, ["--weights", folder(case), "--json", photos["china.jpg"],
                                               photos["flower_wide.png"]])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        for name, line in zip(("china.jpg", "flower_wide.png"), captured.out.splitlines()):
            expected = REFERENCE[f"photo/{name}/{case}/pooler_output"][0]
            assert np.abs(np.array(json.loads(line)["embedding"]) - expected).max() < TOLERANCE, (case, name)


# ---- writing: --to huggingface as a DINOv3ViTModel folder, read back by transformers -----------------

PUBLISHED = os.path.join(FIXTURES, "hf_dinov3_publish")
PUBLISH_REFERENCE = dict(np.load(os.path.join(FIXTURES, "hf_dinov3_publish_reference.npz")))
with open(os.path.join(FIXTURES, "hf_dinov3_publish_reference.json")) as _stream:
    PUBLISH_CASES = json.load(_stream)["cases"]


def publish_case(case):
    import sys
    sys.path.insert(0, os.path.join(FIXTURES, "make"))
    from hf_dinov3_publish_fixtures import build_case
    return build_case(case)


@pytest.mark.parametrize("case", sorted(PUBLISH_CASES))
def test_writing_again_gives_the_committed_folder(case, tmp_path):
    from paddle_vit.weights import save_pretrained
    model, kwargs = publish_case(case)
    written = save_pretrained(model, str(tmp_path / case), **kwargs)
    for name in ("config.json", "preprocessor_config.json"):
        with open(os.path.join(written, name)) as ours, open(os.path.join(PUBLISHED, case, name)) as committed:
            assert json.load(ours) == json.load(committed), name
    ours, committed = (load_file(os.path.join(path, "model.safetensors")) for path in (written, os.path.join(PUBLISHED,
                                                                                                             case)))
    assert sorted(ours) == sorted(committed)
    assert all(np.array_equal(ours[name], committed[name]) for name in ours)


@pytest.mark.parametrize("case", sorted(PUBLISH_CASES))
def test_transformers_reads_our_folder_and_computes_our_outputs(case, photos):
    """transformers' DINOv3ViTModel.from_pretrained found no missing or unexpected key, and its
    last_hidden_state / pooler_output at 64 x 64 and 56 x 72 are the written model's; its processor's
    pixels are what the folder's preprocessing makes here."""
    info = PUBLISH_CASES[case]["loading_info"]
    assert not (info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"])
    assert PUBLISH_CASES[case]["processor_class"] == "DINOv3ViTImageProcessor"
    model, _ = publish_case(case)
    reread = create_model(pretrained=os.path.join(PUBLISHED, case)).eval()
    assert reread.load_report.format == "huggingface-dinov3"
    for size in ("64x64", "56x72"):
        for computed in (model, reread):
            hidden, pooled = outputs(computed, PUBLISH_REFERENCE[f"input/{size}"])
            assert np.abs(hidden - PUBLISH_REFERENCE[f"{case}/{size}/last_hidden_state"]).max() < TOLERANCE
            assert np.abs(pooled - PUBLISH_REFERENCE[f"{case}/{size}/pooler_output"]).max() < TOLERANCE
    china = photos["china.jpg"]
    pixels = reread.preprocess.read(china)[None]
    assert np.abs(pixels - PUBLISH_REFERENCE[f"{case}/china.jpg/pixel_values"]).max() < PIXEL_TOLERANCE


@pytest.mark.parametrize("name, overrides, expected", [
    ("eva02_tiny_patch14_224", dict(depth=1), "rope_kind 'axial'"),  # EVA-02: axial RoPE, SwiGLU packed, APE
    ("vit_small_patch16_rope_mixed_224", dict(depth=1, num_classes=0), "rope_kind 'mixed'"),
    ("vit_small_patch16_dinov3_qkvb", dict(depth=1), "pool 'mean' (its pooler_output is the class token)"),
    ("vit_small_patch16_dinov3", dict(depth=1, pool="cls", mlp="swiglu_packed"), "mlp 'swiglu_packed'"),
])
def test_a_model_dinov3vitmodel_cannot_express_is_refused_naming_to_timm(name, overrides, expected, tmp_path):
    from paddle_vit.weights import save_pretrained
    with pytest.raises(WeightsError) as caught:
        save_pretrained(create_model(name, **overrides), str(tmp_path / "out"), format="huggingface")
    message = str(caught.value)
    assert message.startswith("transformers' DINOv3ViTModel cannot compute this model")
    assert expected in message and "--to timm" in message and "\n" not in message
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")
