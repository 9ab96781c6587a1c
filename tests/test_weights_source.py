"""A weights source is resolved once, at the command's edge, and every layer below takes that
object: one predict reads each file of a weights folder once (the .safetensors twice: its header,
then its tensors), and a .safetensors file written by `save_weights` is a complete --weights
source, its model built without --model."""
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import paddle
import pytest
from PIL import Image

from paddle_vit import checkpoint as ckpt
from paddle_vit.cli import predict
from paddle_vit.weights import save_weights
from paddle_vit.weights.source import WeightsSource, resolve_weights
from repo_paths import REPO
from tiny_models import perturbed_tiny_vit

FIXTURES = os.path.join(REPO, "tests", "fixtures")
TIMM_FOLDER = os.path.join(FIXTURES, "timm_hub_folder")
HF_FOLDER = os.path.join(FIXTURES, "hf_modern", "dinov2")  # config.json, preprocessor_config.json, model.safetensors

# predict run in a child with an audit hook that counts the opens of the weights' files: every open
# made from Python (config.json, preprocessor_config.json, the .safetensors header, a .pdckpt)
COUNT_OPENS = """
import collections, json, os, sys
folder, argv = sys.argv[1], sys.argv[2:]
opens = collections.Counter()
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        path = os.path.abspath(os.fsdecode(args[0]))
        if os.path.dirname(path) == folder:
            opens[os.path.basename(path)] += 1
sys.addaudithook(hook)
from paddle_vit.cli import predict
code = predict.main(argv)
print(json.dumps({"code": code, "opens": opens}))
"""


@pytest.fixture
def photo(tmp_path):
    path = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (40, 52, 3), dtype=np.uint8)).save(path)
    return str(path)


def opens_of_predict(folder, argv):
    result = subprocess.run([sys.executable, "-c", COUNT_OPENS, os.path.abspath(folder), *argv],
                            capture_output=True, text=True, timeout=300, cwd=REPO)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["code"] == 0, result.stderr[-2000:]
    return report["opens"]


def tiny_training_checkpoint(folder):
    """A .pdckpt as the trainer writes it (its recipe, model config, class names), of a tiny ViT."""
    model = perturbed_tiny_vit()
    recipe = {"model": {"name": "vit_walkthrough", "image_size": 32, "patch_size": 8, "embed_dim": 32, "depth": 2,
                        "num_heads": 4, "num_classes": 5, "pool": "cls"}}
    path = os.path.join(folder, "last.pdckpt")
    ckpt.save_checkpoint({"model": model.state_dict(), "model_config": model.config.__dict__, "config": recipe,
                          "class_names": list("abcde")}, path)
    return path


@pytest.mark.slow  # a whole predict or export run: the full suite's, out of the fast loop
def test_one_predict_opens_each_file_of_a_weights_folder_once(tmp_path, photo):
    for folder in (TIMM_FOLDER, HF_FOLDER):
        opens = opens_of_predict(folder, ["--weights", folder, photo])
        expected = {"config.json": 1, "model.safetensors": 1}  # from Python: the header; the tensors from Rust
        if os.path.isfile(os.path.join(folder, "preprocessor_config.json")):
            expected["preprocessor_config.json"] = 1
        assert opens == expected, (folder, opens)
    (tmp_path / "run").mkdir()
    checkpoint = tiny_training_checkpoint(str(tmp_path / "run"))  # its recipe and its tensors: one read
    assert opens_of_predict(str(tmp_path / "run"), ["--weights", checkpoint, photo]) == {"last.pdckpt": 1}


@pytest.mark.slow  # a predict under strace: 3-5 s
@pytest.mark.skipif(shutil.which("strace") is None, reason="counting every open (Rust's too) needs strace")
def test_one_predict_opens_the_safetensors_twice_at_most_counted_by_the_system(tmp_path, photo):
    trace = tmp_path / "trace"
    result = subprocess.run(["strace", "-f", "-e", "trace=openat", "-o", str(trace), sys.executable,
                             os.path.join(REPO, "tools", "predict.py"), "--weights", HF_FOLDER, photo],
                            capture_output=True, text=True, timeout=300, cwd=REPO)
    if result.returncode != 0 and "ptrace" in result.stderr:
        pytest.skip("strace may not trace here")
    assert result.returncode == 0, result.stderr[-2000:]
    opened = [line for line in trace.read_text().splitlines() if HF_FOLDER in line and "ENOENT" not in line]
    counts = {name: sum(f"/{name}\"" in line for line in opened)
              for name in ("config.json", "preprocessor_config.json", "model.safetensors")}
    assert counts == {"config.json": 1, "preprocessor_config.json": 1, "model.safetensors": 2}, counts


def test_a_source_reads_its_tensors_once_and_passes_through_resolution(monkeypatch):
    from paddle_vit.weights import reading
    source = resolve_weights(TIMM_FOLDER)
    assert isinstance(source, WeightsSource) and resolve_weights(source) is source
    assert source.config.kind == "timm" and source.model.name == "vit_tiny_patch16_224"
    reads = []
    original = reading.read_checkpoint
    monkeypatch.setattr("paddle_vit.weights.source.read_checkpoint",
                        lambda *args, **kwargs: reads.append(args) or original(*args, **kwargs))
    first = source.reading()
    assert source.reading() is first and source.checkpoint() is first.checkpoint and len(reads) == 1
    assert first.checkpoint.config is source.config  # the families read the folder's config.json from it


# ---- a .safetensors written by save_weights names its model ------------------------------------------

def run_predict(argv, capsys):
    code = predict.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def probabilities(output):
    return json.loads(output.strip().splitlines()[-1])


def test_a_safetensors_of_save_weights_is_a_complete_weights_source(tmp_path, photo, capsys):
    model = perturbed_tiny_vit(layer_norm_epsilon=1e-5, gelu="tanh")  # sizes no registered name has
    path = str(tmp_path / "tiny.safetensors")
    save_weights(model, path, model_name="vit_walkthrough")
    code, out, err = run_predict(["--weights", path, photo, "--json"], capsys)
    assert code == 0, err
    # the same model given by name and keys: the same probabilities
    keys = ["-o", "model.image_size=32", "-o", "model.patch_size=8", "-o", "model.embed_dim=32", "-o", "model.depth=2",
            "-o", "model.num_heads=4", "-o", "model.pool=cls", "-o", "model.layer_norm_epsilon=1e-5",
            "-o", "model.gelu=tanh"]
    code, named, err = run_predict(["--weights", path, "--model", "vit_walkthrough", *keys, photo, "--json"], capsys)
    assert code == 0, err
    assert probabilities(out) == probabilities(named)


def test_without_the_name_the_nearest_registered_model_is_built_with_the_recorded_fields(tmp_path, photo, capsys):
    from paddle_vit.factory import model_keys_for_recorded
    from paddle_vit.models import ViT, get_model_config
    model = perturbed_tiny_vit(gelu="tanh")
    named, unnamed = str(tmp_path / "named.safetensors"), str(tmp_path / "unnamed.safetensors")
    save_weights(model, named, model_name="vit_walkthrough")
    save_weights(model, unnamed)  # no model_name: as an older paddle-vit wrote it
    keys = model_keys_for_recorded(json.loads(json.dumps(model.config.__dict__)))
    name = keys.pop("name")
    assert ViT(get_model_config(name, **keys)).config == model.config
    results = []
    for path in (named, unnamed):
        code, out, err = run_predict(["--weights", path, photo, "--json"], capsys)
        assert code == 0, err
        results.append(probabilities(out))
    assert results[0] == results[1]


def test_a_safetensors_without_a_recorded_model_still_needs_a_name(tmp_path, photo, capsys):
    model = perturbed_tiny_vit()
    path = str(tmp_path / "plain.safetensors")
    state = {name: value.numpy() for name, value in model.state_dict().items()}
    save_weights(state, path)  # a state dict alone records no model
    code, _, err = run_predict(["--weights", path, photo], capsys)
    assert code == 2 and err.count("\n") == 1 and "name the model with a recipe (-c CONFIG)" in err
    header = struct.unpack("<Q", open(path, "rb").read(8))[0]
    assert "model_config" not in json.loads(open(path, "rb").read(8 + header)[8:])["__metadata__"]


def test_a_folders_warning_is_given_once_by_a_command_that_reads_it_once(tmp_path, photo, capsys):
    folder = tmp_path / "dinov2"
    shutil.copytree(HF_FOLDER, folder)
    processor = json.loads((folder / "preprocessor_config.json").read_text())
    (folder / "preprocessor_config.json").write_text(json.dumps(dict(processor, do_pad=True)))
    code, _, err = run_predict(["--weights", str(folder), photo], capsys)
    assert code == 0 and err.count("not used: do_pad") == 1, err


@pytest.mark.parametrize("metadata, expected", [
    ("{not json", "its model_config metadata is not JSON"),
    (json.dumps({"image_size": 32, "warp": 3}), "holds keys that are not ViTConfig fields (warp)"),
    ("EMBED_DIM_WIDE", "its recorded recipe: model.embed_dim must be an integer"),
])
def test_a_damaged_recorded_model_is_one_error_naming_the_file(tmp_path, photo, capsys, metadata, expected):
    from safetensors.numpy import save_file
    model = perturbed_tiny_vit()
    if metadata == "EMBED_DIM_WIDE":
        metadata = json.dumps(dict(model.config.__dict__, embed_dim="wide"))
    path = str(tmp_path / "damaged.safetensors")
    save_file({name: value.numpy() for name, value in model.state_dict().items()}, path,
              metadata={"format": "paddle-vit", "model_config": metadata})
    code, _, err = run_predict(["--weights", path, photo], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {path}") and expected in err, err


@pytest.mark.slow  # a whole predict or export run: the full suite's, out of the fast loop
def test_a_runs_safetensors_is_evaluated_as_the_run_validated_it(tmp_path):
    """The trainer records the model and the data keys of its eval transform: the weights alone,
    without -c, evaluate to the numbers of the .pdckpt, which stores the whole recipe."""
    from paddle_vit.engine.evaluator import run_evaluation
    from paddle_vit.engine.trainer import Trainer
    from paddle_vit.recipe import config_for_weights
    from test_train import small_config
    run = tmp_path / "run"
    Trainer(small_config(run, train={"epochs": 1, "weights_format": "safetensors"},
                         data={"interpolation": "bilinear", "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.3, 0.4]})).fit()
    same_data = ["data.dataset=synthetic", "data.synthetic_train_size=96", "data.synthetic_val_size=40",
                 "data.synthetic_classes=4"]
    metrics = {}
    for name in ("last.pdckpt", "last.safetensors"):
        source = resolve_weights(str(run / "checkpoints" / name))
        config = config_for_weights(source, overrides=same_data)
        assert (config.data.interpolation, config.data.mean) == ("bilinear", [0.5, 0.4, 0.3]), name
        metrics[name] = {key: run_evaluation(config, source)[key] for key in ("top1", "loss")}
    assert metrics["last.pdckpt"] == metrics["last.safetensors"]
