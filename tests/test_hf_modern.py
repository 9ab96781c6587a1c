"""Today's ViT families in Hugging Face transformers, computed as transformers computes them:
DINOv2 (with SwiGLU, with registers), CLIP's image tower (with its projection), SigLIP's with its
MAP head, distilled DeiT with its teacher head, and ViTMAE's encoder.

The references are transformers' own (tests/fixtures/hf_modern*, tests/fixtures/make/
hf_modern_fixtures.py): save_pretrained folders of small models, their outputs for a fixed batch
and for one image at another size (``interpolate_pos_encoding=True``), and scikit-learn's
china.jpg and variants fed through each family's image processor (PIL backend). Nothing here
needs torch or transformers.
"""
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import paddle
import pytest
from PIL import Image
from safetensors.numpy import load_file, save_file

from paddle_vit import ConfigError, WeightsError, create_model
from paddle_vit.preprocess import preprocess_for_checkpoint
from paddle_vit.weights import detect_family, families, read_checkpoint
from paddle_vit.weights.folders import FolderConfig, describe_config

from photos import make_photos
from repo_paths import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures")
REFERENCE = dict(np.load(os.path.join(FIXTURES, "hf_modern_reference.npz")))
with open(os.path.join(FIXTURES, "hf_modern_reference.json")) as _stream:
    CASES = json.load(_stream)["cases"]
TOLERANCE = 1e-4  # outputs of magnitude ~1-10
PIXEL_TOLERANCE = 1e-5


def folder(case):
    return os.path.join(FIXTURES, "hf_modern", case)


def pooled(model, x):
    return model(x)


def features(model, x):
    return model.forward_features(x)


def last_layer(model, x):
    """The last layer's tokens before any final LayerNorm (CLIP's last_hidden_state): the prefix
    tokens and the patch tokens of forward_intermediates, joined again."""
    (patches, prefix), = model.forward_intermediates(x, indices=1, norm=False, output_fmt="NLC",
                                                     intermediates_only=True, return_prefix_tokens=True)
    return paddle.concat([prefix, patches], axis=1)


def class_head(model, x):
    return model.head(model.forward_features(x)[:, 0])


def distillation_head(model, x):
    return model.head_dist(model.forward_features(x)[:, 1])


# case: (family, {transformers' output: how this ViT computes it}, the dynamic-size resampling)
EXPECTED = {
    "dinov2": ("huggingface-dinov2", {"pooler_output": pooled, "last_hidden_state": features}, "bicubic"),
    "dinov2_swiglu": ("huggingface-dinov2", {"pooler_output": pooled, "last_hidden_state": features}, "bicubic"),
    "dinov2_registers": ("huggingface-dinov2-registers", {"pooler_output": pooled, "last_hidden_state": features},
                         "bicubic_antialias"),
    "clip_vision": ("huggingface-clip", {"pooler_output": pooled, "last_hidden_state": last_layer}, "bicubic"),
    "clip_vision_projection": ("huggingface-clip", {"image_embeds": pooled, "last_hidden_state": last_layer},
                               "bicubic"),
    "siglip_vision": ("huggingface-siglip", {"pooler_output": pooled, "last_hidden_state": features}, "bicubic"),
    "deit_distilled": ("huggingface-deit", {"logits": pooled, "cls_logits": class_head,
                                            "distillation_logits": distillation_head,
                                            "last_hidden_state": features}, "bicubic"),
    "vit_mae": ("huggingface", {"last_hidden_state": features}, "bicubic"),
}
# the options each folder's config.json implies beside the sizes
OPTIONS = {
    "dinov2": dict(num_classes=0, pool="cls", layer_scale=1.0, mlp="standard", layer_norm_epsilon=1e-6, gelu="exact"),
    "dinov2_swiglu": dict(num_classes=0, mlp="swiglu", mlp_ratio=176 / 32, layer_scale=1.0),
    "dinov2_registers": dict(num_classes=0, register_tokens=4, no_embed_class=True, layer_scale=1.0),
    "clip_vision": dict(num_classes=0, pre_norm=True, gelu="quick", layer_norm_epsilon=1e-5),
    "clip_vision_projection": dict(num_classes=16, pre_norm=True, gelu="quick", layer_norm_epsilon=1e-5),
    "siglip_vision": dict(num_classes=0, class_token=False, pool="map", gelu="tanh", layer_norm_epsilon=1e-6),
    "deit_distilled": dict(num_classes=5, distilled=True, layer_norm_epsilon=1e-12, gelu="exact"),
    "vit_mae": dict(num_classes=0, pool="cls", layer_norm_epsilon=1e-12, representation_size=None),
}
# the toy sizes as overrides of a registered name
P14 = dict(image_size=42, patch_size=14, embed_dim=32, depth=2, num_heads=4, mlp_ratio=4)
P8 = dict(image_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2)


def compute(model, how, images):
    with paddle.no_grad():
        return how(model.eval(), paddle.to_tensor(images)).numpy()


def worst(model, case, key=None):
    """The largest difference over every output of `case` (or the one `key`) from transformers'."""
    _, outputs, _ = EXPECTED[case]
    return max(float(np.abs(compute(model, how, REFERENCE[f"{case}/input"]) - REFERENCE[f"{case}/{name}"]).max())
               for name, how in outputs.items() if key in (None, name))


# ---- the folders, with no model name ------------------------------------------------------------

@pytest.mark.parametrize("case", EXPECTED)
def test_a_folder_without_a_name_computes_as_transformers(case):
    model = create_model(pretrained=folder(case))
    family, _, _ = EXPECTED[case]
    report = model.load_report
    assert report.format == family and not (report.missing or report.reinitialized)
    for option, value in OPTIONS[case].items():
        actual = getattr(model.config, option)
        assert (math.isclose(actual, value) if isinstance(value, float) else actual == value), (option, actual)
    assert worst(model, case) < TOLERANCE


@pytest.mark.parametrize("case", EXPECTED)
def test_another_input_size_resamples_as_interpolate_pos_encoding(case):
    model = create_model(pretrained=folder(case), dynamic_img_size=True)
    _, outputs, method = EXPECTED[case]
    assert model.config.pos_embed_resample == method
    images = REFERENCE[f"{case}/interpolated/input"]
    for name, how in outputs.items():
        if f"{case}/interpolated/{name}" in REFERENCE:
            assert np.abs(compute(model, how, images) - REFERENCE[f"{case}/interpolated/{name}"]).max() < TOLERANCE


@pytest.mark.parametrize("case, other", [("dinov2_registers", "bicubic"), ("dinov2", "bicubic_antialias")])
def test_dinov2_with_registers_resamples_with_antialias_and_dinov2_without(case, other):
    """transformers' Dinov2WithRegisters resizes its table with antialias=True (PyTorch's
    antialiased bicubic, which is not plain bicubic even upsampling: bicubic_antialias), Dinov2
    without; the other method misses transformers' outputs."""
    assert CASES[case]["interpolate_calls"][0]["antialias"] == (case == "dinov2_registers")
    model = create_model(pretrained=folder(case), dynamic_img_size=True, pos_embed_resample=other)
    moved = np.abs(compute(model, pooled, REFERENCE[f"{case}/interpolated/input"])
                   - REFERENCE[f"{case}/interpolated/pooler_output"]).max()
    assert moved > 10 * TOLERANCE


def test_the_options_are_what_makes_the_outputs_match():
    """Each option read from config.json matters: another epsilon or GELU misses transformers'."""
    assert worst(create_model(pretrained=folder("clip_vision"), gelu="exact"), "clip_vision", "pooler_output") > \
        10 * TOLERANCE
    assert worst(create_model(pretrained=folder("siglip_vision"), layer_norm_epsilon=1e-5), "siglip_vision",
                 "pooler_output") > 10 * TOLERANCE
    assert worst(create_model(pretrained=folder("deit_distilled"), layer_norm_epsilon=1e-6), "deit_distilled",
                 "logits") > 10 * TOLERANCE


def test_the_checkpoints_record_what_they_hold():
    deit = create_model(pretrained=folder("deit_distilled"))
    assert deit.class_names == ["cormorant", "heron", "kingfisher", "osprey", "puffin"]  # id2label
    registers = create_model(pretrained=folder("dinov2_registers")).load_report
    assert "embeddings.mask_token" in registers.ignored  # masked image modelling's token
    projection = create_model(pretrained=folder("clip_vision_projection")).load_report
    assert projection.options["num_classes"][0] == 16 and "visual_projection" in projection.options["num_classes"][1]


def saved_as(tmp_path, case, rename, extra, config):
    """The folder of `case` with its tensors renamed by `rename`, `extra` tensors beside them and
    `config` as config.json: another transformers class holding the same model."""
    target = tmp_path / f"{case}_as"
    target.mkdir()
    state = {rename(name): array for name, array in load_file(os.path.join(folder(case), "model.safetensors")).items()}
    save_file(dict(state, **extra), str(target / "model.safetensors"), metadata={"format": "pt"})
    (target / "config.json").write_text(json.dumps(config))
    shutil.copy(os.path.join(folder(case), "preprocessor_config.json"), target)
    return str(target)


def test_the_image_tower_of_a_whole_clip_or_siglip_model_and_mae_pretraining(tmp_path):
    """CLIPModel and SiglipModel hold the image tower under vision_model. beside a text tower (skipped),
    their config.json its sizes under vision_config; ViTMAEForPreTraining holds the encoder under
    vit. beside the decoder (skipped)."""
    text = {"text_model.embeddings.token_embedding.weight": np.zeros((64, 32), "float32"),
            "text_projection.weight": np.zeros((16, 32), "float32"), "logit_scale": np.zeros((), "float32")}
    clip = saved_as(tmp_path, "clip_vision_projection", lambda name: name, text,
                    {"model_type": "clip", "architectures": ["CLIPModel"], "projection_dim": 16,
                     "vision_config": CASES["clip_vision_projection"]["config"], "text_config": {"hidden_size": 32}})
    model = create_model(pretrained=clip)
    assert model.load_report.format == "huggingface-clip" and "logit_scale" in model.load_report.ignored
    assert worst(model, "clip_vision_projection", "image_embeds") < TOLERANCE
    siglip = saved_as(tmp_path, "siglip_vision", lambda name: "vision_model." + name,
                      dict(text, logit_bias=np.zeros((1,), "float32")),
                      {"model_type": "siglip", "vision_config": CASES["siglip_vision"]["config"]})
    assert worst(create_model(pretrained=siglip), "siglip_vision") < TOLERANCE
    decoder = {"decoder.decoder_embed.weight": np.zeros((16, 32), "float32"),
               "decoder.mask_token": np.zeros((1, 1, 16), "float32")}
    mae = saved_as(tmp_path, "vit_mae", lambda name: "vit." + name, decoder,
                   dict(CASES["vit_mae"]["config"], architectures=["ViTMAEForPreTraining"], mask_ratio=0.75))
    model = create_model(pretrained=mae)
    assert model.load_report.format == "huggingface" and "decoder.mask_token" in model.load_report.ignored
    assert worst(model, "vit_mae") < TOLERANCE  # the encoder on every patch, in order, whatever mask_ratio says


# ---- a registered name with the folder ------------------------------------------------------------

@pytest.mark.parametrize("name, case, sizes", [
    ("vit_small_patch14_reg4_dinov2", "dinov2_registers", P14),
    ("vit_small_patch14_dinov2", "dinov2_registers", P14),  # the folder's registers all the same
    ("vit_giant_patch14_dinov2", "dinov2_swiglu", dict(P14, mlp_ratio=5.5)),
    ("vit_base_patch16_clip_224", "clip_vision_projection", P8),  # exact GELU by name, QuickGELU by the folder
    ("vit_base_patch16_siglip_gap_224", "siglip_vision", P8),  # the folder's MAP head
    ("deit_small_distilled_patch16_224", "deit_distilled", P8),
    ("vit_tiny_patch16_224", "vit_mae", P8),
])
def test_a_registered_name_takes_every_option_from_the_folder(name, case, sizes):
    model = create_model(name, pretrained=folder(case), **sizes)
    for option, value in OPTIONS[case].items():
        actual = getattr(model.config, option)
        assert (math.isclose(actual, value) if isinstance(value, float) else actual == value), (option, actual)
    assert worst(model, case) < TOLERANCE


def test_a_name_that_contradicts_the_folder_is_an_error_naming_both():
    with pytest.raises(WeightsError, match=r"create_model's name vit_small_patch16_224 but .*dinov2_swiglu/config.json "
                                           r"says model_type 'dinov2' with embed_dim 32.*: patch_size 16, not 14"):
        create_model("vit_small_patch16_224", pretrained=folder("dinov2_swiglu"))


def hub_config(model_type, **values):
    return FolderConfig("huggingface", "/hub/config.json", dict(values, model_type=model_type))


BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, patch_size=16, image_size=224,
            intermediate_size=3072)
SMALL14 = dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, patch_size=14, image_size=518)


@pytest.mark.parametrize("config, name", [
    (hub_config("dinov2", **SMALL14), "vit_small_patch14_dinov2"),  # facebook/dinov2-small
    (hub_config("dinov2_with_registers", **SMALL14), "vit_small_patch14_reg4_dinov2"),
    (hub_config("dinov2", hidden_size=1536, num_hidden_layers=40, num_attention_heads=24, patch_size=14,
                image_size=518, use_swiglu_ffn=True), "vit_giant_patch14_dinov2"),  # 8192 / 1536 vs timm's 5.33334
    (hub_config("clip", vision_config=BASE), "vit_base_patch16_clip_quickgelu_224"),  # openai/clip-vit-base-patch16
    (hub_config("clip_vision_model", **BASE, hidden_act="gelu"), "vit_base_patch16_clip_224"),
    (hub_config("siglip", vision_config=BASE), "vit_base_patch16_siglip_224"),  # google/siglip-base-patch16-224
    (hub_config("siglip_vision_model", **BASE, vision_use_head=False), "vit_base_patch16_siglip_gap_224"),
    (hub_config("deit", **dict(BASE, hidden_size=384, num_attention_heads=6, intermediate_size=1536)),
     "deit_small_distilled_patch16_224"),
    (hub_config("vit_mae", **BASE), "vit_base_patch16_224"),  # facebook/vit-mae-base
])
def test_a_hub_config_names_the_registered_model_of_its_family(config, name):
    assert describe_config(config).name == name


# ---- what a folder says wrong is named in one line ------------------------------------------------

def edited(tmp_path, case, **changes):
    """A copy of the fixture folder `case` whose config.json has `changes`."""
    from test_failures_folders import edited as edited_copy
    return edited_copy(tmp_path, folder(case), changes)


@pytest.mark.parametrize("case, changes, expected", [
    ("dinov2", dict(model_type="swin"), "config.json: model_type 'swin' is not one this project reads"),
    ("dinov2", dict(model_type="clip_vision_model"), "config.json: model_type 'clip_vision_model' contradicts the "
                                                     "weights beside it"),
    ("vit_mae", dict(model_type="dinov2"), "config.json: model_type 'dinov2' contradicts"),
    ("dinov2_swiglu", dict(use_swiglu_ffn="yes"), "config.json: use_swiglu_ffn must be true or false, got 'yes'"),
    ("dinov2_registers", dict(num_register_tokens=-1), "config.json: num_register_tokens must be an integer >= 0"),
    ("clip_vision", dict(model_type="clip"), "config.json: vision_config must be a JSON object"),
    ("siglip_vision", dict(hidden_act="relu"), "config.json: hidden_act 'relu' is not a GELU this ViT computes"),
    ("deit_distilled", dict(layer_norm_eps=0.1), "config.json: layer_norm_eps 0.1 is not a LayerNorm epsilon"),
    ("clip_vision", dict(hidden_size="32"), "config.json: hidden_size must be an integer >= 1, got '32'"),
])
def test_a_damaged_or_contradicting_config_json_is_named_in_one_line(tmp_path, case, changes, expected):
    with pytest.raises(WeightsError) as caught:
        create_model(pretrained=edited(tmp_path, case, **changes))
    assert expected in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("changes, expected", [
    (dict(image_processor_type="ConvNextImageProcessor"), "image_processor_type 'ConvNextImageProcessor' is not"),
    (dict(image_mean=[0.5, 0.5]), "image_mean [0.5, 0.5] must be a number or three numbers"),
    (dict(do_convert_rgb="yes"), "do_convert_rgb must be true or false"),
    (dict(resample=1), "resample 1 is not one of"),
    (dict(crop_size={"height": 42, "width": 40}), "crop_size {'height': 42, 'width': 40} must be square"),
])
def test_a_damaged_preprocessor_config_is_named_with_its_key(tmp_path, changes, expected):
    path = os.path.join(folder("dinov2"), "preprocessor_config.json")
    with open(path) as stream:
        config = dict(json.load(stream), **changes)
    with pytest.raises(ConfigError) as caught:
        preprocess_for_checkpoint({"pipeline": "huggingface", "config": config, "source": path}, 42)
    assert str(caught.value).startswith(f"{path}: ") and expected in str(caught.value)


def test_a_processor_config_that_leaves_keys_out_takes_its_classes_defaults():
    bit = preprocess_for_checkpoint({"pipeline": "huggingface",  # facebook/dinov2-*: CLIP's mean and std
                                     "config": {"image_processor_type": "BitImageProcessor"}}, 224)
    assert (bit.resize_mode, bit.resize_size, bit.interpolation, bit.rgb) == ("shorter_side", 224, "bicubic",
                                                                              "alpha_on_white")
    assert bit.mean == [0.48145466, 0.4578275, 0.40821073]
    siglip = preprocess_for_checkpoint({"pipeline": "huggingface", "config": {
        "image_processor_type": "SiglipImageProcessorFast"}}, 224)
    assert (siglip.resize_mode, siglip.mean, siglip.rgb) == ("both_sides", [0.5] * 3, "alpha_on_white")
    deit = preprocess_for_checkpoint({"pipeline": "huggingface", "config": {"feature_extractor_type":
                                                                            "DeiTFeatureExtractor"}}, 224)
    assert (deit.resize_mode, deit.resize_size, deit.image_size, deit.rgb) == ("both_sides", 256, 224, "convert")
    # an older file's size as one number: the shortest edge where the class does not default to square
    clip = preprocess_for_checkpoint({"pipeline": "huggingface", "config": {
        "feature_extractor_type": "CLIPFeatureExtractor", "size": 224, "crop_size": 224}}, 224)
    assert (clip.resize_mode, clip.resize_size, clip.image_size) == ("shorter_side", 224, 224)
    deit = preprocess_for_checkpoint({"pipeline": "huggingface", "config": {
        "image_processor_type": "DeiTImageProcessor", "size": 256, "crop_size": 224}}, 224)
    assert (deit.resize_mode, deit.resize_size) == ("both_sides", 256)


# ---- detection ------------------------------------------------------------------------------------

def test_each_family_claims_its_own_folders_and_nobody_elses():
    ours = {family.name: family for family in families() if family.name.startswith("huggingface")}
    for case, (expected, _, _) in EXPECTED.items():
        weights = load_file(os.path.join(folder(case), "model.safetensors"))
        assert detect_family(read_checkpoint(weights)).name == expected, case
    others = [os.path.join(root, name) for root, _, files in os.walk(FIXTURES) for name in sorted(files)
              if name.endswith((".safetensors", ".pdparams")) or
              (name.startswith("jax_") and name.endswith(".npz") and "reference" not in name)]
    ours_on_disk = [folder(case) for case in EXPECTED] + [os.path.join(FIXTURES, "hf_vit_classifier"),
                                                          os.path.join(FIXTURES, "hf_vit_model")]
    ours_on_disk += [os.path.join(FIXTURES, "hf_dinov3", case) for case in ("dinov3_vit", "dinov3_vit_gated")]
    ours_on_disk += [os.path.join(FIXTURES, "hf_dinov3_publish", case) for case in os.listdir(
        os.path.join(FIXTURES, "hf_dinov3_publish"))]
    published = os.path.join(FIXTURES, "publish")  # ViTForImageClassification folders written by --to huggingface
    ours_on_disk += [os.path.join(published, name) for name in sorted(os.listdir(published)) if name.startswith("hf_")]
    others = [path for path in others if os.path.dirname(path) not in ours_on_disk]  # OpenCLIP's files stay in
    assert len(others) > 30
    for path in others:
        checkpoint = read_checkpoint(path)
        assert not [name for name, family in ours.items() if family.detect(checkpoint)], path


def test_weights_without_config_json_take_transformers_defaults_for_their_tensors(tmp_path):
    for case, sizes in (("dinov2_registers", P14), ("siglip_vision", P8), ("clip_vision_projection", P8)):
        shutil.copy(os.path.join(folder(case), "model.safetensors"), tmp_path / f"{case}.safetensors")
        model = create_model("vit_base_patch16_224", pretrained=str(tmp_path / f"{case}.safetensors"), **sizes)
        assert "default" in model.load_report.options["layer_norm_epsilon"][1]
        assert worst(model, case, key=next(iter(EXPECTED[case][1]))) < TOLERANCE


# ---- the photos, through the checkpoint's own image processor ------------------------------------

@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    paths = make_photos(str(tmp_path_factory.mktemp("photos")))
    assert sorted(paths) == sorted(CASES["dinov2"]["photos"])
    return paths


@pytest.mark.parametrize("case", EXPECTED)
def test_photos_through_the_checkpoints_preprocess_give_transformers_pixels_and_outputs(case, photos):
    """The processor fed the photo as PIL opened it; BitImageProcessor, CLIPImageProcessor and
    SiglipImageProcessor composite transparency on white themselves, DeiT's and ViT's processors
    were given convert("RGB") by the caller (the json records which)."""
    model = create_model(pretrained=folder(case)).eval()
    transform = model.preprocess.transform()
    _, outputs, _ = EXPECTED[case]
    for name, path in photos.items():
        recorded = CASES[case]["photos"][name]
        with Image.open(path) as image:
            image.load()
            if recorded["converted_by"].startswith("caller"):
                image = image.convert("RGB")
            pixels = transform(image)[None]
        assert np.abs(pixels - REFERENCE[f"photo/{case}/{name}/pixel_values"]).max() < PIXEL_TOLERANCE, name
        for output, how in outputs.items():
            if f"photo/{case}/{name}/{output}" in REFERENCE:
                difference = np.abs(compute(model, how, pixels) - REFERENCE[f"photo/{case}/{name}/{output}"]).max()
                assert difference < TOLERANCE, (name, output)


def run_predict(argv, capsys):
    from paddle_vit.cli import run
    from repo_paths import load_tool
    capsys.readouterr()
    code = run(load_tool("predict").main, [str(arg) for arg in argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return [json.loads(line) for line in captured.out.splitlines()]


def softmax(logits):
    exponentials = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exponentials / exponentials.sum(axis=-1, keepdims=True)


def test_predict_gives_the_deit_teachers_probabilities_and_dinov2s_embedding(photos, capsys):
    """predict reads a file as transformers' load_image does (convert("RGB"), which is what the
    DeiT references were given), and prints the embedding of a headless model and of one whose
    head is CLIP's projection."""
    lines = run_predict(["--weights", folder("deit_distilled"), "--json", "--topk", 5, *photos.values()], capsys)
    for name, line in zip(photos, lines):
        expected = softmax(REFERENCE[f"photo/deit_distilled/{name}/logits"][0])
        for item in line["predictions"]:
            assert abs(item["probability"] - expected[item["index"]]) < TOLERANCE
        assert sorted(item["label"] for item in line["predictions"]) == \
            sorted(CASES["deit_distilled"]["config"]["id2label"].values())
    lines = run_predict(["--weights", folder("dinov2_registers"), "--json", photos["china.jpg"]], capsys)
    expected = REFERENCE["photo/dinov2_registers/china.jpg/pooler_output"][0]
    assert np.abs(np.array(lines[0]["embedding"]) - expected).max() < TOLERANCE
    # CLIPVisionModelWithProjection: its head is visual_projection, so the output is image_embeds
    lines = run_predict(["--weights", folder("clip_vision_projection"), "--json", photos["china.jpg"]], capsys)
    expected = REFERENCE["photo/clip_vision_projection/china.jpg/image_embeds"][0]
    assert np.abs(np.array(lines[0]["embedding"]) - expected).max() < TOLERANCE


@pytest.mark.slow
def test_predict_as_a_process_on_a_siglip_folder(photos):
    result = subprocess.run([sys.executable, os.path.join(REPO, "tools", "predict.py"), "--weights",
                             folder("siglip_vision"), "--json", photos["china.jpg"], photos["china_tiny.png"]],
                            capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr
    for name, line in zip(("china.jpg", "china_tiny.png"), result.stdout.splitlines()):
        expected = REFERENCE[f"photo/siglip_vision/{name}/pooler_output"][0]
        assert np.abs(np.array(json.loads(line)["embedding"]) - expected).max() < TOLERANCE


def test_a_folder_whose_processor_makes_smaller_images_is_built_at_the_processors_size(tmp_path):
    """facebook/dinov2-*: config.json says 518, the processor crops 224, and transformers feeds
    the model 224 px (the position embedding interpolated). Here: the 42 px folder with a 28 px
    crop: the model is built at 28 (the grid resampled at load, as interpolate_pos_encoding does
    it in the forward pass) and its pipeline makes 28 px inputs."""
    folder = tmp_path / "dinov2"
    shutil.copytree(os.path.join(FIXTURES, "hf_modern", "dinov2"), folder)
    processor = json.loads((folder / "preprocessor_config.json").read_text())
    processor.update(crop_size={"height": 28, "width": 28}, size={"shortest_edge": 32})
    (folder / "preprocessor_config.json").write_text(json.dumps(processor))
    model = create_model(pretrained=str(folder))
    assert model.config.image_size == 28 and model.preprocess.image_size == 28
    assert model.load_report.resampled[0][1:] == ((3, 3), (2, 2))
    assert create_model(pretrained=str(folder), image_size=42).config.image_size == 42  # the user's choice wins
