"""A checkpoint folder from a stranger: every value it brings is checked when it is loaded.

Each bad folder is a copy of a real one (written by timm's save_for_hf or transformers'
save_pretrained, tests/fixtures) with one value changed: one ``error:`` line naming the file and
the key, exit code 2, before any image is read. A value the library itself replaces by a default,
and keys nobody reads, are one ``warning:`` line each; the real folders load without any.
docs/troubleshooting.md's fault table lists these cases (to be merged into test_failures.py)."""
import glob
import json
import logging
import os
import resource
import shutil
import subprocess
import sys

import pytest
from PIL import Image

from paddle_vit import ConfigError, PaddleVitError, create_model
from paddle_vit import preprocess as preprocessing
from paddle_vit.models import list_models
from paddle_vit.preprocess.timm import timm_eval_config

from repo_paths import REPO, TOOLS, load_tool
from test_failures import assert_one_line_error, run_tool

PREDICT, EVAL = load_tool("predict"), load_tool("eval")
FIXTURES = os.path.join(REPO, "tests", "fixtures")
TIMM = os.path.join(FIXTURES, "timm_modern", "deit3_small_patch16_224")  # 32 x 32, patch 8, 5 classes
HF_CLASSIFIER = os.path.join(FIXTURES, "hf_vit_classifier")  # ViTForImageClassification, 10 classes
HF_DINOV2 = os.path.join(FIXTURES, "hf_modern", "dinov2")  # with a preprocessor_config.json
DELETE = object()


def edited(tmp_path, source, changes, file="config.json"):
    """A copy of the fixture folder `source` with `changes` ({"a.b": value or DELETE}) made to `file`."""
    folder = tmp_path / os.path.basename(source.rstrip("/"))
    shutil.copytree(source, folder)
    path = folder / file
    values = json.loads(path.read_text())
    for dotted, value in changes.items():
        *parents, key = dotted.split(".")
        place = values
        for parent in parents:
            place = place[parent]
        if value is DELETE:
            place.pop(key, None)
        else:
            place[key] = value
    path.write_text(json.dumps(values))
    return str(folder)


@pytest.fixture
def image(tmp_path):
    path = tmp_path / "img.png"
    Image.new("RGB", (40, 30), (120, 80, 40)).save(path)
    return str(path)


@pytest.fixture
def said():
    """The warning lines the library logs."""
    lines = []

    class Collect(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())
    logger = logging.getLogger("paddle_vit")
    handler, level = Collect(logging.WARNING), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    yield lines
    logger.removeHandler(handler)
    logger.setLevel(level)


# ---- one error line naming the file and the key ------------------------------------------------

LABELS_7 = {"id2label": {str(i): f"c{i}" for i in range(7)}, "label2id": {f"c{i}": i for i in range(7)}}

BAD_VALUES = [
    # timm's config.json: pretrained_cfg (the preprocessing), the top level, against the weights
    (TIMM, "config.json", {"pretrained_cfg.crop_pct": "abc"}, ["pretrained_cfg.crop_pct must be a number", "'abc'"]),
    (TIMM, "config.json", {"pretrained_cfg.crop_pct": -1}, ["pretrained_cfg.crop_pct must be a number in (0, 1]"]),
    (TIMM, "config.json", {"pretrained_cfg.crop_pct": 1e-6}, ["pretrained_cfg.crop_pct 1e-06", "resize to 32000000"]),
    (TIMM, "config.json", {"pretrained_cfg.mean": [1, 2]}, ["pretrained_cfg.mean must be three numbers"]),
    (TIMM, "config.json", {"pretrained_cfg.std": [0, 1, 1]}, ["pretrained_cfg.std must be three numbers > 0"]),
    (TIMM, "config.json", {"pretrained_cfg.interpolation": "lanczos"}, ["pretrained_cfg.interpolation 'lanczos'"]),
    (TIMM, "config.json", {"pretrained_cfg.crop_mode": "weird"}, ["pretrained_cfg.crop_mode must be one of"]),
    (TIMM, "config.json", {"pretrained_cfg.input_size": [3, 100000, 100000]}, ["pretrained_cfg.input_size",
                                                                                "at most 4096"]),
    (TIMM, "config.json", {"pretrained_cfg.input_size": "big"}, ["pretrained_cfg.input_size must be"]),
    (TIMM, "config.json", {"pretrained_cfg.fixed_input_size": "yes"}, ["pretrained_cfg.fixed_input_size"]),
    (TIMM, "config.json", {"pretrained_cfg": [1]}, ["pretrained_cfg must be a JSON object"]),
    (TIMM, "config.json", {"num_classes": "five"}, ["num_classes must be an integer", "'five'"]),
    (TIMM, "config.json", {"num_features": 0}, ["num_features must be an integer >= 1"]),
    (TIMM, "config.json", {"label_names": "cat"}, ["label_names must be a list"]),
    (TIMM, "config.json", {"num_classes": 7}, ["num_classes 7 contradicts the weights", "head.bias", "5 rows"]),
    (TIMM, "config.json", {"pretrained_cfg.num_classes": 7}, ["pretrained_cfg.num_classes 7 contradicts",
                                                              "5 rows"]),
    (TIMM, "config.json", {"label_names": ["a", "b"]}, ["label_names holds 2 names", "head.bias", "5 rows"]),
    (TIMM, "config.json", {"model_args.img_size": 64}, ["model_args.img_size 64", "pos_embed", "16 positions"]),
    (TIMM, "config.json", {"model_args.depth": -1}, ["model_args.depth = -1"]),
    # a Hugging Face config.json
    (HF_CLASSIFIER, "config.json", LABELS_7, ["id2label (7 classes) contradicts the weights", "classifier.bias",
                                              "10 rows"]),
    (HF_CLASSIFIER, "config.json", {"num_labels": 3}, ["class counts contradict each other", "num_labels 3"]),
    (HF_CLASSIFIER, "config.json", {"id2label": ["a"]}, ["id2label must map class indices"]),
    (HF_CLASSIFIER, "config.json", {"image_size": 100000}, ["image_size must be a square size of 1 to 4096"]),
    (HF_CLASSIFIER, "config.json", {"image_size": 64}, ["image_size 64", "position_embeddings", "17 positions"]),
    (HF_CLASSIFIER, "config.json", {"intermediate_size": 0}, ["intermediate_size must be an integer >= 1"]),
    (HF_CLASSIFIER, "config.json", {"hidden_dropout_prob": 2}, ["hidden_dropout_prob must be a number in [0, 1]"]),
    (HF_CLASSIFIER, "config.json", {"hidden_act": "relu"}, ["hidden_act 'relu'"]),
    # a Hugging Face preprocessor_config.json
    (HF_DINOV2, "preprocessor_config.json", {"size": {"shortest_edge": 60000}}, ["size {'shortest_edge': 60000}",
                                                                                 "resize to 60000"]),
    (HF_DINOV2, "preprocessor_config.json", {"crop_size": "abc"}, ["crop_size 'abc'"]),
    (HF_DINOV2, "preprocessor_config.json", {"image_mean": [1, 2]}, ["image_mean [1, 2]"]),
    (HF_DINOV2, "preprocessor_config.json", {"resample": 7}, ["resample 7"]),
    (HF_DINOV2, "preprocessor_config.json", {"rescale_factor": -1}, ["rescale_factor -1"]),
]


@pytest.mark.parametrize("source, file, changes, fragments", BAD_VALUES,
                         ids=[f"{os.path.basename(case[0])}:{','.join(case[2])}" for case in BAD_VALUES])
def test_a_bad_folder_value_is_one_error_line_naming_the_file_and_the_key(tmp_path, image, capsys, source, file,
                                                                          changes, fragments):
    folder = edited(tmp_path, source, changes, file)
    code, lines = run_tool(PREDICT, ["--weights", folder, image], capsys)
    assert_one_line_error(code, lines, os.path.join(folder, file), *fragments)


@pytest.mark.parametrize("changes, fragments", [
    ({"pretrained_cfg.crop_pct": "abc"}, ["pretrained_cfg.crop_pct"]),
    ({"num_classes": 7}, ["num_classes 7 contradicts"]),
])
def test_create_model_refuses_the_same_folders_with_the_message(tmp_path, changes, fragments):
    folder = edited(tmp_path, TIMM, changes)
    with pytest.raises(PaddleVitError) as error:
        create_model(pretrained=folder)
    assert os.path.join(folder, "config.json") in str(error.value) and "\n" not in str(error.value)
    assert all(fragment in str(error.value) for fragment in fragments)


def test_eval_refuses_a_bad_folder_value_in_one_line_too(tmp_path, capsys):
    folder = edited(tmp_path, TIMM, {"pretrained_cfg.interpolation": "lanczos"})
    code, lines = run_tool(EVAL, ["--weights", folder, "-o", "data.dataset=synthetic", "-o",
                                  "data.synthetic_val_size=4", "-o", "data.synthetic_classes=5",
                                  "-o", "train.device=cpu"], capsys)
    assert_one_line_error(code, lines, "config.json: pretrained_cfg.interpolation 'lanczos'")


def test_a_headless_folder_that_claims_classes_is_refused(tmp_path):
    source = os.path.join(FIXTURES, "timm_modern", "vit_small_patch14_dinov2")  # num_classes 0, no head
    with pytest.raises(PaddleVitError, match="num_classes 3 contradicts the weights: .* no classification head"):
        create_model(pretrained=edited(tmp_path, source, {"num_classes": 3}))


def test_a_preprocess_json_with_a_bad_value_names_the_key():
    values = {key: value for key, value in preprocessing.Preprocess(32).to_dict().items() if key != "resize_size"}
    for key, value, fragment in (("image_size", "abc", "image_size must be an integer"),
                                 ("resize_size", 10 ** 6, "resize to 1000000 pixels"),
                                 ("mean", [0.5], "mean must be three finite numbers"),
                                 ("eval_crop_pct", 0, "eval_crop_pct must be in"),
                                 ("exif_transpose", "no", "exif_transpose must be true or false")):
        with pytest.raises(ConfigError, match=fragment) as error:
            preprocessing.Preprocess.from_dict({**values, key: value}, "/x/preprocess.json")
        assert str(error.value).startswith("/x/preprocess.json: ")


def test_a_paddleclas_transform_list_with_a_bad_resize_names_it():
    ops = [{"ResizeImage": {"resize_short": "abc"}}, {"CropImage": {"size": 224}}]
    with pytest.raises(ConfigError, match="ResizeImage resize_short must be a positive integer"):
        preprocessing.preprocess_for_checkpoint({"pipeline": "paddleclas", "config": {"transform_ops": ops},
                                                 "source": "x.yaml"}, 224)


# ---- warnings: a library's own fallback, keys nobody reads --------------------------------------

@pytest.mark.parametrize("value", [0, None])
def test_a_false_crop_pct_is_timms_default_said_in_one_warning(tmp_path, said, value):
    model = create_model(pretrained=edited(tmp_path, TIMM, {"pretrained_cfg.crop_pct": value}))
    assert model.preprocess.eval_crop_pct == 0.875  # timm: pretrained_cfg.get('crop_pct') or DEFAULT_CROP_PCT
    assert len(said) == 1 and f"pretrained_cfg.crop_pct {value!r} is timm's default 0.875" in said[0], said


def test_keys_nobody_reads_are_named_in_one_warning_per_file(tmp_path, image, capsys):
    folder = edited(tmp_path, TIMM, {"my_key": 1, "pretrained_cfg.foo": "x", "pretrained_cfg.paper_ids": "2012.12877"})
    code, lines = run_tool(PREDICT, ["--weights", folder, image], capsys)
    assert code == 0, lines
    assert lines == [f"warning: {os.path.join(folder, 'config.json')}: not used: my_key, pretrained_cfg.foo"]


def test_an_unread_image_processor_key_is_named_in_its_files_warning(tmp_path, said):
    folder = edited(tmp_path, HF_DINOV2, {"do_pad": True}, file="preprocessor_config.json")
    create_model(pretrained=folder)
    assert said == [f"{os.path.join(folder, 'preprocessor_config.json')}: not used: do_pad"]


REAL_FOLDERS = sorted(
    [path for path in glob.glob(os.path.join(FIXTURES, "*", "*", "config.json")) +
     glob.glob(os.path.join(FIXTURES, "*", "config.json"))])


@pytest.mark.parametrize("config", REAL_FOLDERS, ids=[os.path.relpath(os.path.dirname(path), FIXTURES)
                                                      for path in REAL_FOLDERS])
def test_every_real_folder_loads_without_a_warning(config, said):
    create_model(pretrained=os.path.dirname(config))
    assert said == []


# ---- every resize bounded ----------------------------------------------------------------------

def test_the_limits_are_one_and_every_registered_timm_cfg_is_inside_them():
    for name in list_models():
        config = timm_eval_config(name)
        if config is not None:  # the 104 default pretrained_cfgs of timm's names (crop_pct 0.9 - 1)
            preprocessing.preprocess_for_checkpoint({"pipeline": "timm", "config": config}, None)


def test_a_panorama_is_refused_before_its_resize_allocates(tmp_path, image, capsys):
    panorama = tmp_path / "panorama.png"
    Image.new("RGB", (1, 100000), (10, 20, 30)).save(panorama)
    code, lines = run_tool(PREDICT, ["--weights", TIMM, str(panorama), image], capsys)
    assert code == 0, lines
    assert len(lines) == 1 and lines[0].startswith(f"warning: skipping {panorama}: a 1 x 100000 image would be "
                                                   f"resized to 35 x 3500000"), lines


@pytest.mark.slow  # a child process starting Paddle: 1.5 - 4 s
@pytest.mark.parametrize("source, file, changes", [
    (TIMM, "config.json", {"pretrained_cfg.crop_pct": 0.0003}),  # a resize to 106666 x 106666: 34 GB
    (HF_DINOV2, "preprocessor_config.json", {"size": {"height": 100000, "width": 100000}, "do_center_crop": True}),
])
def test_a_resize_of_tens_of_gigabytes_ends_in_one_line_under_a_memory_limit(tmp_path, image, source, file, changes):
    folder = edited(tmp_path, source, changes, file)
    limit = 4 * 1024 ** 3

    def limit_memory():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    result = subprocess.run([sys.executable, os.path.join(TOOLS, "predict.py"), "--weights", folder, image],
                            capture_output=True, text=True, preexec_fn=limit_memory, timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.strip() and "Warning" not in line
             and "warnings.warn" not in line]
    assert_one_line_error(result.returncode, lines, os.path.join(folder, file))
    assert "MemoryError" not in result.stderr
