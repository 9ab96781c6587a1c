"""timm Hub folders (config.json + model.safetensors, as timm's save_for_hf / push_to_hf_hub write
them) as a source; the model name left out where a folder says what it is; and the
preprocessing a checkpoint implies, wired into create_model, predict, eval and export.

The references are timm's own (tests/fixtures/timm_hub_*, tests/fixtures/make/
timm_hub_fixtures.py): the folder written by timm's saving function, read back by timm, its
logits for a fixed batch and its class probabilities for scikit-learn's china.jpg and variants
fed through timm's resolve_data_config + create_transform.
"""
import json
import logging
import os
import shutil

import numpy as np
import paddle
import pytest
from PIL import Image

from paddle_vit import WeightsError, create_model

from photos import make_photos
from repo_paths import REPO

FIXTURES = os.path.join(REPO, "tests", "fixtures")
FOLDER = os.path.join(FIXTURES, "timm_hub_folder")
HF_FOLDER = os.path.join(FIXTURES, "hf_vit_classifier")
REFERENCE = dict(np.load(os.path.join(FIXTURES, "timm_hub_reference.npz")))
with open(os.path.join(FIXTURES, "timm_hub_reference.json")) as _stream:
    CASES = json.load(_stream)["cases"]
LABELS = ["cormorant", "heron", "kingfisher", "osprey", "puffin"]
TOLERANCE = 1e-4


def logits(model, images):
    with paddle.no_grad():
        return model.eval()(paddle.to_tensor(images)).numpy()


def edited_folder(tmp_path, **changes):
    """A copy of the timm folder whose config.json has `changes` (None deletes a key; a dict
    value is merged into model_args when the key is "model_args")."""
    folder = tmp_path / "hub"
    shutil.copytree(FOLDER, folder)
    with open(folder / "config.json") as stream:
        config = json.load(stream)
    for key, value in changes.items():
        if key == "model_args":
            config["model_args"].update(value)
        elif value is None:
            config.pop(key, None)
        else:
            config[key] = value
    with open(folder / "config.json", "w") as stream:
        json.dump(config, stream)
    return str(folder)


def run_tool(name, argv, capsys):
    """(exit code, stdout lines, stderr) of tools/<name>.py run in this process."""
    from paddle_vit.cli import run
    from repo_paths import load_tool

    logger = logging.getLogger("paddle_vit")
    saved = (list(logger.handlers), logger.level, logger.propagate)
    capsys.readouterr()
    try:
        code = run(load_tool(name).main, [str(arg) for arg in argv])
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


# ---- the folder as a source ------------------------------------------------------------------

def test_a_timm_hub_folder_builds_and_computes_as_timm_without_a_model_name():
    model = create_model(pretrained=FOLDER)
    config = model.config
    # architecture vit_tiny_patch16_224, made small by model_args: all of it read from config.json
    assert (config.image_size, config.patch_size, config.embed_dim, config.depth, config.num_heads) == (32, 8, 32, 2, 4)
    assert config.num_classes == 5 and config.pool == "cls"
    assert np.abs(logits(model, REFERENCE["input"]) - REFERENCE["logits"]).max() < TOLERANCE
    assert model.class_names == LABELS  # timm's label_names
    assert model.load_report.options["depth"][1].endswith("model_args.depth = 2")


def test_the_folders_own_name_with_another_image_size_resamples_as_timm():
    model = create_model("vit_tiny_patch16_224", pretrained=FOLDER, image_size=48)
    assert model.config.image_size == 48 and model.config.embed_dim == 32
    assert model.load_report.resampled[0][1:] == ((4, 4), (6, 6))


def test_a_name_that_contradicts_the_folder_is_an_error_naming_both():
    with pytest.raises(WeightsError) as error:
        create_model("vit_small_patch16_224", pretrained=FOLDER)
    message = str(error.value)
    assert message.startswith("create_model's name vit_small_patch16_224 but ")
    assert f"{FOLDER}/config.json says vit_tiny_patch16_224" in message and "\n" not in message


def test_a_hugging_face_folder_needs_no_model_name_either():
    reference = dict(np.load(os.path.join(FIXTURES, "hf_reference.npz")))
    model = create_model(pretrained=HF_FOLDER)  # hidden_size 32, 2 layers, ...: no registered size
    assert (model.config.embed_dim, model.config.depth, model.config.mlp_ratio, model.config.patch_size) == (32, 2, 2.0, 8)
    assert model.config.layer_norm_epsilon == 1e-12
    difference = logits(model, reference["hf_vit_classifier/input"]) - reference["hf_vit_classifier/logits"]
    assert np.abs(difference).max() < TOLERANCE
    with pytest.raises(WeightsError, match=r"create_model's name vit_small_patch16_224 but .*config.json says "
                                           r"embed_dim 32.*: patch_size 16, not 8"):
        create_model("vit_small_patch16_224", pretrained=HF_FOLDER)


def test_a_name_of_another_resolution_fine_tunes_at_its_size():
    """vit_tiny_patch16_384 for the 32-pixel timm folder of vit_tiny_patch16_224's sizes is no
    contradiction: the model is built at 384 and the position embedding resampled."""
    model = create_model("vit_tiny_patch16_384", pretrained=FOLDER, patch_size=8, embed_dim=32, depth=2, num_heads=4)
    assert model.config.image_size == 384 and model.load_report.resampled[0][1:] == ((4, 4), (48, 48))


@pytest.mark.parametrize("changes, expected", [
    (dict(model_args={"qk_norm": True}), "model_args.qk_norm = True asks for q/k normalisation"),
    (dict(model_args={"patch_drop_rate": 0.5}), "model_args.patch_drop_rate = 0.5 asks for patch dropout"),
    (dict(model_args={"norm_layer": "batchnorm"}), "model_args.norm_layer = 'batchnorm': this ViT builds the norms "
                                                   "layernorm, rmsnorm"),
    (dict(model_args={"act_layer": "relu"}), "model_args.act_layer = 'relu': this ViT computes GELU"),
    (dict(model_args={"img_size": [32, 48]}), "model_args.img_size [32, 48] is not square"),
    (dict(model_args={"block_fn": "ParallelScalingBlock"}), "model_args.block_fn is a timm argument this ViT "
                                                            "does not build"),
    (dict(global_pool="avgmax"), "global_pool 'avgmax' is not a pooling this ViT computes"),
])
def test_what_the_folder_asks_for_that_this_vit_does_not_build_is_refused_in_one_line(tmp_path, changes, expected):
    with pytest.raises(WeightsError) as error:
        create_model(pretrained=edited_folder(tmp_path, **changes))
    assert expected in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("model_args, missing", [
    ({"reg_tokens": 4}, r"pos_embed has 17 rows, which is not 5 prefix token\(s\) \+ a square grid"),
    ({"init_values": 1e-5}, r"encoder\.layers\.0\.ls1\.gamma"), ({"pre_norm": True}, r"encoder\.norm_pre\.weight"),
    ({"scale_attn_norm": True}, r"encoder\.layers\.0\.attn\.proj\.norm\.weight"),
    ({"scale_mlp_norm": True}, r"encoder\.layers\.0\.mlp\.norm\.weight"),
])
def test_todays_options_in_model_args_are_built_and_then_the_tensors_must_be_there(tmp_path, model_args, missing):
    """reg_tokens, init_values, pre_norm are read (no longer refused): the model is built with
    them, and a folder whose weights lack their tensors is refused naming the tensor."""
    with pytest.raises(WeightsError, match=missing):
        create_model(pretrained=edited_folder(tmp_path, model_args=model_args))


def test_an_unregistered_architecture_needs_a_name_and_then_the_tensors_decide(tmp_path):
    folder = edited_folder(tmp_path, architecture="vit_tiny_patch16_clip_224")
    with pytest.raises(WeightsError, match="names timm's vit_tiny_patch16_clip_224, which is not a registered model"):
        create_model(pretrained=folder)
    model = create_model("vit_tiny_patch16_224", pretrained=folder)  # model_args still apply
    assert np.abs(logits(model, REFERENCE["input"]) - REFERENCE["logits"]).max() < TOLERANCE


def test_deit_names_map_to_the_vit_of_the_same_size(tmp_path):
    model = create_model(pretrained=edited_folder(tmp_path, architecture="deit_tiny_patch16_224"))
    assert np.abs(logits(model, REFERENCE["input"]) - REFERENCE["logits"]).max() < TOLERANCE


def test_the_folder_kind_is_told_from_config_json_not_from_the_weights(tmp_path):
    """A timm config.json beside timm weights is not read as Hugging Face's (its epsilon would be
    1e-12), and a config.json of neither kind names no model."""
    from paddle_vit.weights.source import read_folder_config, resolve_weights
    assert read_folder_config(FOLDER).kind == "timm" and read_folder_config(HF_FOLDER).kind == "huggingface"
    assert create_model(pretrained=FOLDER).config.layer_norm_epsilon == 1e-6
    folder = tmp_path / "other"
    folder.mkdir()
    shutil.copy(os.path.join(FOLDER, "model.safetensors"), folder / "model.safetensors")
    (folder / "config.json").write_text(json.dumps({"hidden": 32}))
    assert resolve_weights(str(folder)).model is None
    with pytest.raises(WeightsError, match="does not say what model it is"):
        create_model(pretrained=str(folder))


def test_an_unreadable_config_json_is_an_error_for_its_folder_and_ignored_beside_a_named_file(tmp_path):
    folder = tmp_path / "hub"
    shutil.copytree(FOLDER, folder)
    (folder / "config.json").write_text("[1, 2]")
    with pytest.raises(WeightsError, match=r"config.json \(the config of the weights beside it\) must hold a JSON"):
        create_model(pretrained=str(folder))
    model = create_model("vit_tiny_patch16_224", pretrained=str(folder / "model.safetensors"), image_size=32,
                         patch_size=8, embed_dim=32, depth=2, num_heads=4)
    assert model.preprocess is None and model.class_names is None
    assert np.abs(logits(model, REFERENCE["input"]) - REFERENCE["logits"]).max() < TOLERANCE


def test_a_folder_with_pytorch_model_bin_is_read_under_the_rules_of_a_pth(tmp_path, monkeypatch):
    """pytorch_model.bin goes through the same reader as a .pth: torch.load with
    weights_only=True (tensors only, never arbitrary objects)."""
    from paddle_vit.weights import reading
    folder = tmp_path / "bin"
    folder.mkdir()
    shutil.copy(os.path.join(FOLDER, "config.json"), folder / "config.json")
    (folder / "pytorch_model.bin").write_bytes(b"not read")
    from safetensors.numpy import load_file
    arrays = load_file(os.path.join(FOLDER, "model.safetensors"))
    calls = []
    monkeypatch.setattr(reading, "_read_torch", lambda path: calls.append(path) or arrays)
    model = create_model(pretrained=str(folder))
    assert calls == [str(folder / "pytorch_model.bin")]
    assert np.abs(logits(model, REFERENCE["input"]) - REFERENCE["logits"]).max() < TOLERANCE


# ---- the tools -------------------------------------------------------------------------------

def test_predict_takes_a_timm_folder_without_model_and_prints_its_label_names(tmp_path, capsys):
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(tmp_path / "a.png")
    code, lines, errors = run_tool("predict", ["--weights", FOLDER, "--json", "--topk", "5", tmp_path / "a.png"],
                                   capsys)
    assert code == 0, errors
    predictions = json.loads(lines[0])["predictions"]
    assert sorted(item["label"] for item in predictions) == LABELS


def test_predict_takes_a_hugging_face_folder_of_unregistered_sizes_without_model(tmp_path, capsys):
    Image.new("RGB", (40, 40), (200, 30, 90)).save(tmp_path / "a.png")
    code, lines, errors = run_tool("predict", ["--weights", HF_FOLDER, "--json", "--topk", "1", tmp_path / "a.png"],
                                   capsys)
    assert code == 0, errors
    assert json.loads(lines[0])["predictions"][0]["label"] in ("airplane", "automobile", "bird", "cat", "deer", "dog",
                                                               "frog", "horse", "ship", "truck")


def test_the_tools_refuse_a_model_name_that_contradicts_the_folder(tmp_path, capsys):
    Image.new("RGB", (40, 40)).save(tmp_path / "a.png")
    code, _, errors = run_tool("predict", ["--weights", FOLDER, "--model", "vit_base_patch16_224", tmp_path / "a.png"],
                               capsys)
    assert code == 2 and errors.count("\n") == 1
    assert errors.startswith(f"error: --model vit_base_patch16_224 but {FOLDER}/config.json says vit_tiny_patch16_224")
    code, _, errors = run_tool("eval", ["--weights", FOLDER, "--model", "vit_small_patch16_224"], capsys)
    assert code == 2 and errors.startswith("error: --model vit_small_patch16_224 but ")


# ---- the preprocessing a checkpoint implies --------------------------------------------------

def photos(folder):
    paths = make_photos(folder)
    assert list(paths) == CASES["photos"]
    return paths


def timm_probabilities(name):
    return REFERENCE[f"photo/{name}/probabilities"]


def predicted_probabilities(lines):
    """[images, classes] probabilities of predict --json lines with --topk 5 (every class)."""
    rows = []
    for line in lines:
        row = np.zeros(len(LABELS))
        for item in json.loads(line)["predictions"]:
            row[item["index"]] = item["probability"]
        rows.append(row)
    return np.array(rows)


def test_the_families_say_their_preprocessing_and_the_model_carries_it():
    from paddle_vit.weights.source import resolve_weights
    model = create_model(pretrained=FOLDER)
    hint = model.load_report.preprocessing
    assert hint["pipeline"] == "timm" and hint["config"]["crop_pct"] == 0.9
    preprocess = model.preprocess
    assert (preprocess.image_size, preprocess.resize_size, preprocess.interpolation) == (32, 35, "bicubic")
    assert preprocess.mean == [0.485, 0.456, 0.406] and preprocess.rgb == "convert"
    assert f"{FOLDER}/config.json" in preprocess.origin
    expected = {"paddleclas_vit_base.pdparams": {"pipeline": "paddleclas"}, "jax_vit_released.npz": {"pipeline": "vit_jax"},
                "timm_vit_cls.safetensors": None, "hf_vit_classifier": None}  # no pretrained_cfg, no processor config
    for name, hint in expected.items():
        reading = resolve_weights(os.path.join(FIXTURES, name)).reading()
        assert reading.family.preprocessing(reading.checkpoint) == hint, name


def test_a_hugging_face_folder_with_a_processor_config_carries_that_pipeline(tmp_path):
    folder = tmp_path / "hf"
    shutil.copytree(HF_FOLDER, folder)
    processor = {"do_resize": True, "size": {"height": 32, "width": 32}, "resample": 2, "do_rescale": True,
                 "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5, 0.4, 0.3],
                 "image_std": [0.2, 0.3, 0.4], "image_processor_type": "ViTImageProcessor"}
    (folder / "preprocessor_config.json").write_text(json.dumps(processor))
    model = create_model(pretrained=str(folder))
    assert model.load_report.preprocessing["config"] == processor
    assert model.preprocess.mean == [0.5, 0.4, 0.3] and model.preprocess.interpolation == "bilinear"


def test_predict_on_a_timm_folder_gives_timms_own_probabilities_for_real_photos(tmp_path, capsys):
    paths = photos(str(tmp_path))
    code, lines, errors = run_tool("predict", ["--weights", FOLDER, "--json", *paths.values()], capsys)
    assert code == 0, errors
    expected = np.array([timm_probabilities(name) for name in paths])
    assert np.abs(predicted_probabilities(lines) - expected).max() < TOLERANCE
    assert "warning" not in errors.lower()


def test_an_explicit_data_option_replaces_that_value_only_and_says_so(tmp_path, capsys):
    from paddle_vit.deploy.predict import load_classifier
    paths = photos(str(tmp_path))
    code, lines, errors = run_tool("predict", ["--weights", FOLDER, "--json", "-o", "data.interpolation=bilinear",
                                               paths["china.jpg"]], capsys)
    assert code == 0, errors
    assert "interpolation='bilinear' from -o data.interpolation (the checkpoint's: 'bicubic')" in errors
    assert np.abs(predicted_probabilities(lines)[0] - timm_probabilities("china.jpg")).max() > 1e-3
    classifier = load_classifier(FOLDER, overrides=["data.interpolation=bilinear", "data.eval_crop_pct=0.5"])
    preprocess, own = classifier.preprocess, classifier.model.preprocess
    assert (preprocess.interpolation, preprocess.eval_crop_pct, preprocess.resize_size) == ("bilinear", 0.5, 64)
    assert preprocess.mean == own.mean == [0.485, 0.456, 0.406]  # not chosen: still the checkpoint's
    assert (preprocess.resize_mode, preprocess.rgb) == (own.resize_mode, own.rgb)
    assert preprocess.origin.startswith(own.origin)


@pytest.mark.slow  # an export traces and saves the model: seconds
def test_export_writes_the_checkpoints_preprocessing_into_preprocess_json(tmp_path, capsys):
    paths = photos(str(tmp_path))
    out = tmp_path / "export"
    code, _, errors = run_tool("export", ["--weights", FOLDER, "--out", out], capsys)
    assert code == 0, errors
    with open(out / "preprocess.json") as stream:
        metadata = json.load(stream)
    preprocess = metadata["preprocess"]
    assert preprocess["resize_size"] == 35 and preprocess["interpolation"] == "bicubic"
    assert preprocess["mean"] == [0.485, 0.456, 0.406] and preprocess["rgb_conversion"] == "convert"
    assert "timm pretrained_cfg" in preprocess["origin"] and metadata["class_names"] == LABELS
    code, lines, errors = run_tool("predict", ["--inference-model", out, "--json", paths["china_rgba.png"]], capsys)
    assert code == 0, errors
    assert np.abs(predicted_probabilities(lines)[0] - timm_probabilities("china_rgba.png")).max() < TOLERANCE


def test_eval_on_an_image_folder_decodes_and_preprocesses_as_the_checkpoints_pipeline(tmp_path, capsys):
    """An RGBA photo is converted as timm converts it (alpha dropped, not composited on white):
    the loss of the evaluation is the one timm's probabilities give."""
    paths = photos(str(tmp_path))
    root = tmp_path / "data"
    labels = [("china_rgba.png", 0), ("china.jpg", 1), ("china_gray.png", 2), ("china_tiny.png", 3),
              ("china_rgba.png", 4)]
    for split in ("train", "val"):
        for name, label in labels:
            (root / split / LABELS[label]).mkdir(parents=True)
            shutil.copy(paths[name], root / split / LABELS[label] / name)
    code, lines, errors = run_tool("eval", ["--weights", FOLDER, "-o", "data.dataset=imagefolder", "-o",
                                            f"data.root={root}", "-o", "eval.engine=dynamic"], capsys)
    assert code == 0, errors
    summary = json.loads(lines[-1])
    expected = np.mean([-np.log(timm_probabilities(name)[label]) for name, label in labels])
    assert summary["num_samples"] == 5 and abs(summary["loss"] - expected) < TOLERANCE


def test_convert_takes_a_folder_without_model_and_refuses_a_contradicting_one(tmp_path, capsys):
    out = tmp_path / "converted.safetensors"
    code, _, errors = run_tool("convert_weights", ["--weights", FOLDER, "--out", out], capsys)
    assert code == 0, errors
    reloaded = create_model("vit_tiny_patch16_224", pretrained=str(out), image_size=32, patch_size=8, embed_dim=32,
                            depth=2, num_heads=4)
    assert np.abs(logits(reloaded, REFERENCE["input"]) - REFERENCE["logits"]).max() < TOLERANCE
    code, _, errors = run_tool("convert_weights", ["--weights", FOLDER, "--model", "vit_base_patch16_224", "--out",
                                                   tmp_path / "x.safetensors"], capsys)
    assert code == 2 and errors.startswith("error: --model vit_base_patch16_224 but ")


def test_predict_gives_timms_probabilities_on_the_awkward_images_of_the_preprocessing_fixtures(tmp_path, capsys):
    """The preprocessing fixtures' timm model and pipeline (crop_pct 0.875, bicubic, ImageNet
    statistics) made into a Hub folder: predict, without --model, on CMYK, palette, 16-bit,
    EXIF-rotated, tiny and portrait files gives the probabilities timm's pipeline gave."""
    import hashlib
    import importlib.util
    with open(os.path.join(FIXTURES, "preprocess_reference.json")) as stream:
        recorded = json.load(stream)
    pipeline = "timm_0875_bicubic_imagenet"
    expected = np.load(os.path.join(FIXTURES, "preprocess_reference.npz"))[f"{pipeline}/probabilities"]
    sizes = recorded["model"]
    folder = tmp_path / "hub"
    folder.mkdir()
    shutil.copy(os.path.join(FIXTURES, "preprocess_vit_tiny.safetensors"), folder / "model.safetensors")
    model_args = {key: sizes[key] for key in ("img_size", "patch_size", "embed_dim", "depth", "num_heads")}
    (folder / "config.json").write_text(json.dumps({
        "architecture": "vit_tiny_patch16_224", "num_classes": sizes["num_classes"], "global_pool": "token",
        "model_args": model_args, "pretrained_cfg": recorded["pipelines"][pipeline]["hint"]["config"]}))
    sklearn_images = os.path.join(os.path.dirname(importlib.util.find_spec("sklearn").origin), "datasets", "images")
    paths = []
    for image in recorded["image_order"]:
        entry = recorded["images"][image]
        path = (os.path.join(sklearn_images, image) if entry["file"].startswith("<scikit-learn>")
                else os.path.join(FIXTURES, entry["file"]))
        with open(path, "rb") as handle:
            assert hashlib.sha256(handle.read()).hexdigest() == entry["sha256"], path
        paths.append(path)
    code, lines, errors = run_tool("predict", ["--weights", folder, "--json", "--topk", "10", *paths], capsys)
    assert code == 0, errors
    rows = []
    for line in lines:
        row = np.zeros(sizes["num_classes"])
        for item in json.loads(line)["predictions"]:
            row[item["index"]] = item["probability"]
        rows.append(row)
    assert np.abs(np.array(rows) - expected).max() < TOLERANCE
    assert (np.array(rows).argmax(1) == expected.argmax(1)).all()
