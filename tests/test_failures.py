"""Every failure a user can meet, inflicted for real: one clear line and exit code 2, nothing
half-written, nothing lost. docs/troubleshooting.md's fault table lists these cases; the ones of
checkpoint folders from strangers are in test_failures_folders.py, those of exports and published
folders written onto mounts, read-only and full disks in test_failures_exports.py."""
import errno
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import paddle
import pytest
from PIL import Image

from paddle_vit import TrainingError
from paddle_vit.cli import run
from paddle_vit import checkpoint as checkpoint_module
from paddle_vit.checkpoint import load_checkpoint
from paddle_vit.engine.trainer import Trainer

from repo_paths import REPO, TOOLS, load_tool
from test_train import final_weights, read_metrics, small_config

TRAIN, EVAL, VISUALIZE = load_tool("train"), load_tool("eval"), load_tool("visualize")

SMALL = {
    "model": "{name: vit_walkthrough, image_size: 14, embed_dim: 16, depth: 2, num_heads: 2}",
    "data": "{dataset: synthetic, synthetic_train_size: 48, synthetic_val_size: 16, synthetic_classes: 4}",
    "train": "{epochs: 1, batch_size: 16, device: cpu, log_interval: 1}",
}


def write_config(tmp_path, name="recipe.yaml", **sections):
    text = {**SMALL, **sections}
    path = tmp_path / name
    path.write_text("".join(f"{section}: {value}\n" for section, value in text.items()))
    return str(path)


def run_tool(tool, argv, capsys):
    """Run a tool's main in-process as the command line would; (exit code, stderr lines)."""
    code = run(tool.main, argv)
    captured = capsys.readouterr()
    return code, [line for line in captured.err.splitlines() if line.strip()]


def assert_one_line_error(code, lines, *fragments):
    assert code == 2, lines
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


# ---- configs -------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides, fragments", [
    (["train.epoch=3"], ["unknown key train.epoch", "epochs"]),
    (["train.epochs=three"], ["train.epochs must be an integer", "'three'"]),
    (["optimizer.lr=0"], ["optimizer.lr must be > 0.0"]),
    (["train.batch_size=0"], ["train.batch_size must be >= 1"]),
    (["train.epochs=-1"], ["train.epochs must be >= 1"]),
    (["model.drop_path=1.5"], ["model.drop_path must be in [0, 1)"]),
    (["model.dropout=-0.1"], ["model.dropout must be in [0, 1)"]),
    (["model.image_size=15"], ["image_size 15 is not divisible by patch_size 7"]),
    (["model.num_heads=3"], ["embed_dim 16 is not divisible by model.num_heads 3"]),
    (["train.epochs"], ["has no '='"]),
])
def test_bad_config_is_one_line_and_leaves_nothing_behind(tmp_path, capsys, overrides, fragments):
    assert_train_refuses(tmp_path, capsys, write_config(tmp_path), overrides, *fragments)


def assert_train_refuses(tmp_path, capsys, recipe, overrides, *fragments):
    """`train.py -c recipe -o override ...` ends with one error line holding `fragments`, exit
    code 2, and no run folder."""
    output = tmp_path / "out"
    argv = ["-c", recipe, "-o", f"train.output_dir={output}"]
    for override in overrides:
        argv += ["-o", override]
    assert_one_line_error(*run_tool(TRAIN, argv, capsys), *fragments)
    assert not output.exists()


def test_missing_and_invalid_config_files(tmp_path, capsys):
    assert_one_line_error(*run_tool(TRAIN, ["-c", str(tmp_path / "nope.yaml")], capsys), "nope.yaml does not exist")
    broken = tmp_path / "broken.yaml"
    broken.write_text("train: {epochs: 2\nmodel: [\n")
    assert_one_line_error(*run_tool(TRAIN, ["-c", str(broken)], capsys), "broken.yaml is not valid YAML at line")


def test_debug_shows_the_traceback(tmp_path):
    """--debug lets the error through to Python, which prints its traceback."""
    from paddle_vit import ConfigError

    with pytest.raises(ConfigError, match="nope.yaml does not exist"):
        TRAIN.main(["-c", str(tmp_path / "nope.yaml"), "--debug"])


def test_gpu_requested_without_one(tmp_path, capsys):
    if paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0:
        pytest.skip("this machine has a GPU, so asking for one is not an error")
    argv = ["-c", write_config(tmp_path), "-o", "train.device=gpu", "-o", f"train.output_dir={tmp_path / 'out'}"]
    assert_one_line_error(*run_tool(TRAIN, argv, capsys), "train.device is 'gpu' but this Paddle build has no CUDA")
    assert not (tmp_path / "out").exists()


# ---- data ----------------------------------------------------------------------------------

def image_folder(root, classes=("cat", "dog"), per_class=3, size=20):
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for name in classes:
            folder = root / split / name
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(per_class):
                pixels = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{index}.jpg")
    return root


def imagefolder_config(tmp_path, root, **train):
    settings = {"epochs": 1, "batch_size": 2, "device": "cpu", "log_interval": 1,
                "output_dir": str(tmp_path / "out"), **train}
    return write_config(tmp_path, data=f"{{dataset: imagefolder, root: '{root}'}}",
                        train="{" + ", ".join(f"{k}: {v}" for k, v in settings.items()) + "}")


def test_missing_dataset_folder(tmp_path, capsys):
    config = imagefolder_config(tmp_path, tmp_path / "nowhere")
    assert_one_line_error(*run_tool(TRAIN, ["-c", config], capsys), str(tmp_path / "nowhere"))
    assert not (tmp_path / "out").exists()


def test_empty_class_folder(tmp_path, capsys):
    root = image_folder(tmp_path / "images")
    (root / "train" / "bird").mkdir()
    (root / "val" / "bird").mkdir()
    assert_one_line_error(*run_tool(TRAIN, ["-c", imagefolder_config(tmp_path, root)], capsys), "bird")


def test_split_with_no_images(tmp_path, capsys):
    root = image_folder(tmp_path / "images")
    for path in (root / "val").rglob("*.jpg"):
        path.unlink()
    assert_one_line_error(*run_tool(TRAIN, ["-c", imagefolder_config(tmp_path, root)], capsys), "val")


@pytest.mark.parametrize("fraction, fragments", [
    # digits class sizes are 174..183: round(n * 0.999) = n takes every image of every class to val
    ("0.999", ["leaves no image for training", "1797 digits would split 0 train / 1797 val",
               "lower data.val_fraction (0.2 gives 1438 train / 359 val)"]),
    # round(183 * 0.002) = 0: no class gives val an image
    ("0.002", ["leaves no image for validation", "1797 train / 0 val", "raise data.val_fraction"]),
])
def test_a_val_fraction_that_empties_a_digits_split_names_the_key_and_sizes(tmp_path, capsys, fraction, fragments):
    output = tmp_path / "out"
    argv = ["-c", os.path.join(REPO, "configs", "vit_walkthrough_digits_28.yaml"), "-o", f"data.val_fraction={fraction}",
            "-o", f"train.output_dir={output}"]
    assert_one_line_error(*run_tool(TRAIN, argv, capsys), f"data.val_fraction {fraction} ", *fragments)
    assert not output.exists()  # refused before the run folder is made


def test_an_empty_digits_val_split_is_refused_by_eval_too(trained, capsys):
    config, checkpoints = trained
    argv = ["-c", config, "--weights", str(checkpoints / "last.pdparams"), "-o", "data.dataset=digits",
            "-o", "data.val_fraction=0.002"]
    assert_one_line_error(*run_tool(EVAL, argv, capsys), "data.val_fraction 0.002 leaves no image for validation")


def test_val_classes_differ_from_train(tmp_path, capsys):
    root = image_folder(tmp_path / "images")
    (root / "val" / "dog").rename(root / "val" / "wolf")
    code, lines = run_tool(TRAIN, ["-c", imagefolder_config(tmp_path, root)], capsys)
    assert_one_line_error(code, lines, "wolf")


def test_one_class_image_folder_is_an_error(tmp_path, capsys):
    root = image_folder(tmp_path / "images", classes=("cat",))
    assert_one_line_error(*run_tool(TRAIN, ["-c", imagefolder_config(tmp_path, root)], capsys),
                          "holds one class folder (cat)", "at least two")
    assert not (tmp_path / "out").exists()


def test_a_symlink_loop_counts_no_image_twice(tmp_path, caplog):
    from paddle_vit.data.imagefolder import build_imagefolder_sources

    root = image_folder(tmp_path / "images")
    os.symlink("..", root / "train" / "cat" / "up")  # cat/up -> train: every class again, forever
    os.symlink(".", root / "train" / "dog" / "again")  # dog/again -> dog itself
    os.symlink("../dog", root / "val" / "cat" / "dogs")  # a real folder reached by link: walked once
    train, val, classes = build_imagefolder_sources(str(root))
    assert classes == ["cat", "dog"] and len(train) == 6 and list(train.labels).count(0) == 3
    assert len(val) == 9  # val/cat counts val/dog's three images through its link, once
    warnings = caplog.text
    assert "cat/up" in warnings and "dog/again" in warnings and "a loop" in warnings


@pytest.mark.slow
def test_a_fifo_named_like_an_image_is_skipped_not_waited_on(tmp_path, capsys):
    root = image_folder(tmp_path / "images")
    os.mkfifo(root / "train" / "cat" / "x.png")
    os.symlink("missing.png", root / "train" / "dog" / "dangling.png")
    config = imagefolder_config(tmp_path, root)
    result = subprocess.run([sys.executable, os.path.join(TOOLS, "train.py"), "-c", config], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "x.png: not a regular file (a FIFO)" in result.stdout + result.stderr
    assert "dangling.png: not a regular file" in result.stdout + result.stderr
    assert read_metrics(tmp_path / "out")[0]["epoch"] == 1


def test_corrupt_image_fails_naming_the_file_in_error_mode(tmp_path, capsys):
    root = image_folder(tmp_path / "images")
    broken = root / "train" / "cat" / "0.jpg"
    broken.write_bytes(broken.read_bytes()[:60])  # a real JPEG cut short
    config = imagefolder_config(tmp_path, root)
    code, lines = run_tool(TRAIN, ["-c", config, "-o", "data.on_bad_image=error"], capsys)
    assert_one_line_error(code, lines, "0.jpg")


def test_corrupt_and_odd_images_are_skipped_or_converted_in_skip_mode(tmp_path, capsys):
    root = image_folder(tmp_path / "images")
    cat = root / "train" / "cat"
    (cat / "0.jpg").write_bytes((cat / "0.jpg").read_bytes()[:60])
    (cat / "notes.txt").write_text("not an image")
    Image.new("L", (20, 20), 128).save(cat / "gray.png")
    Image.new("RGBA", (20, 20), (255, 0, 0, 100)).save(cat / "alpha.png")
    Image.new("CMYK", (20, 20), (0, 50, 100, 0)).save(cat / "cmyk.jpg")
    Image.fromarray(np.full((20, 20), 40000, np.uint16)).save(cat / "sixteen.png")
    Image.new("RGB", (4, 4), (0, 255, 0)).save(cat / "tiny.png")  # smaller than the 14x14 input
    code = run(TRAIN.main, ["-c", imagefolder_config(tmp_path, root)])
    output = capsys.readouterr()
    assert code == 0, output.err
    assert "0.jpg" in output.out  # the skipped file is named in the log
    records = read_metrics(tmp_path / "out")
    assert len(records) == 1 and records[0]["skipped_images"] == 1 and "skipped_images 1" in output.out


@pytest.mark.parametrize("policy, fragments", [
    ("skip", ["ImageFolder split", "val has no readable image", "all 6 files tried fail to decode"]),
    ("error", ["cannot read image", "val/cat/0.jpg"]),
])
def test_a_validation_split_of_only_corrupt_images_is_refused_before_the_run_folder_is_made(tmp_path, capsys, policy,
                                                                                           fragments):
    root = image_folder(tmp_path / "images")
    for path in (root / "val").rglob("*.jpg"):
        path.write_bytes(b"\xff\xd8 not a jpeg" * 8)  # named .jpg, garbage inside
    code, lines = run_tool(TRAIN, ["-c", imagefolder_config(tmp_path, root), "-o", f"data.on_bad_image={policy}"],
                           capsys)
    assert_one_line_error(code, lines, str(root / "val"), *fragments)
    assert not (tmp_path / "out").exists()


# ---- weights -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A small trained run: (config path, checkpoint folder)."""
    folder = tmp_path_factory.mktemp("trained")
    config_path = write_config(folder, train=f"{{epochs: 1, batch_size: 16, device: cpu, output_dir: '{folder / 'run'}'}}")
    assert run(TRAIN.main, ["-c", config_path]) == 0
    return config_path, folder / "run" / "checkpoints"


def test_eval_missing_weights(trained, tmp_path, capsys):
    config, _ = trained
    code, lines = run_tool(EVAL, ["-c", config, "--weights", str(tmp_path / "none.pdparams")], capsys)
    assert_one_line_error(code, lines, "none.pdparams does not exist")


@pytest.mark.parametrize("name", ["last.pdparams", "last.pdckpt"])
def test_eval_truncated_weights(trained, tmp_path, capsys, name):
    config, checkpoints = trained
    cut = tmp_path / name
    data = (checkpoints / name).read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    code, lines = run_tool(EVAL, ["-c", config, "--weights", str(cut)], capsys)
    assert_one_line_error(code, lines, str(cut), "truncated or corrupt")


def test_eval_weights_of_another_architecture(trained, capsys):
    config, checkpoints = trained
    code, lines = run_tool(EVAL, ["-c", config, "--weights", str(checkpoints / "last.pdparams"),
                                  "-o", "model.embed_dim=32"], capsys)
    assert_one_line_error(code, lines, "[1, 1, 16]", "[1, 1, 32]", "another architecture")


def test_eval_class_count_mismatch_is_not_fine_tuning(trained, capsys):
    config, checkpoints = trained
    code, lines = run_tool(EVAL, ["-c", config, "--weights", str(checkpoints / "last.pdparams"),
                                  "-o", "data.synthetic_classes=3"], capsys)
    assert_one_line_error(code, lines, "does not fit the model for evaluation", "head")


@pytest.mark.parametrize("weights", ["last.pdckpt", "last.safetensors"])
def test_eval_on_data_with_other_class_names_is_refused(tmp_path, capsys, weights):
    root = image_folder(tmp_path / "images")
    config = imagefolder_config(tmp_path, root, weights_format="safetensors")
    assert run(TRAIN.main, ["-c", config]) == 0
    (root / "val" / "dog").rename(root / "val" / "wolf")
    (root / "train" / "dog").rename(root / "train" / "wolf")
    capsys.readouterr()
    code, lines = run_tool(EVAL, ["-c", config, "--weights", str(tmp_path / "out" / "checkpoints" / weights)],
                           capsys)
    assert_one_line_error(code, lines, "trained on other classes", "the checkpoint's dog not in the data",
                          "the data's wolf not in the checkpoint")


@pytest.mark.parametrize("option, fragment", [
    (["--rows", "0"], "argument --rows: expected an integer >= 1, got '0'"),
    (["--dpi", "0"], "argument --dpi: expected an integer in [1, 1000], got '0'"),
    (["--dpi", "100000"], "argument --dpi: expected an integer in [1, 1000]"), (["--out", "FILE"], "is a file; expected a folder"),
])
def test_visualize_options_are_checked_before_any_work(trained, tmp_path, capsys, option, fragment):
    config, checkpoints = trained
    image = tmp_path / "image.png"
    Image.new("RGB", (14, 14), (0, 128, 255)).save(image)
    (tmp_path / "FILE").write_text("a file")
    option = [str(tmp_path / "FILE") if value == "FILE" else value for value in option]
    argv = ["-c", config, "--weights", str(checkpoints / "last.pdparams"), "--image", str(image),
            "--out", str(tmp_path / "figures"), *option]
    assert_one_line_error(*run_tool(VISUALIZE, argv, capsys), fragment)


@pytest.mark.root
def test_visualize_and_eval_into_a_read_only_folder(trained, tmp_path, capsys, read_only_folder):
    config, checkpoints = trained
    image = tmp_path / "image.png"
    Image.new("RGB", (14, 14), (0, 128, 255)).save(image)
    argv = ["-c", config, "--weights", str(checkpoints / "last.pdparams"), "--image", str(image),
            "--out", str(read_only_folder / "figures")]
    assert_one_line_error(*run_tool(VISUALIZE, argv, capsys), "--out", "Read-only file system")
    argv = ["-c", config, "--weights", str(checkpoints / "last.pdparams"),
            "--confusion-matrix", str(read_only_folder / "cm.png")]
    code, lines = run_tool(EVAL, argv, capsys)
    assert_one_line_error(code, lines, "the folder of --confusion-matrix", "Read-only file system")
    assert "top1" not in capsys.readouterr().out  # refused before the evaluation ran


@pytest.mark.parametrize("name, fragment", [("cm.jpeg", "must end in .png or .svg or .pdf, not .jpeg"),
                                            ("cm", "not no extension")])
def test_eval_confusion_matrix_with_an_unknown_extension(trained, tmp_path, capsys, name, fragment):
    config, checkpoints = trained
    argv = ["-c", config, "--weights", str(checkpoints / "last.pdparams"), "--confusion-matrix", str(tmp_path / name)]
    assert_one_line_error(*run_tool(EVAL, argv, capsys), "--confusion-matrix", fragment)


@pytest.mark.slow
def test_eval_confusion_matrix_into_a_missing_folder_and_by_config(trained, tmp_path, capsys):
    config, checkpoints = trained
    figure = tmp_path / "new" / "folder" / "cm.svg"
    assert run(EVAL.main, ["-c", config, "--weights", str(checkpoints / "last.pdparams"),
                           "--confusion-matrix", str(figure)]) == 0
    assert figure.read_text().lstrip().startswith("<?xml") and f"confusion matrix: {figure}" in capsys.readouterr().out
    # eval.confusion_matrix=true: beside the run the weights belong to, named after them
    assert run(EVAL.main, ["-c", config, "--weights", str(checkpoints / "best.pdparams"),
                           "-o", "eval.confusion_matrix=true"]) == 0
    assert (checkpoints.parent / "confusion_matrix_best.png").stat().st_size > 1000


@pytest.mark.parametrize("extension", ["npz", "safetensors", "pdparams"])
@pytest.mark.parametrize("damage, fragment", [
    (lambda array: (array * 100).astype(np.int64), "is int64 (and 31 more tensors like it); expected floating-point"),
    (lambda array: np.where(np.arange(array.size).reshape(array.shape) < 2, np.nan, array).astype(np.float32),
     "holds 2 NaN of its"),
], ids=["integers", "nan"])
def test_eval_refuses_integer_or_nan_weights_in_every_format(trained, tmp_path, capsys, extension, damage, fragment):
    """Integer weights used to evaluate at chance, and NaN ones failed as 'not set by set_state_dict'."""
    from safetensors.numpy import save_file

    config, checkpoints = trained
    state = {name: damage(tensor.numpy()) for name, tensor in paddle.load(str(checkpoints / "last.pdparams")).items()}
    path = tmp_path / f"weights.{extension}"
    {"npz": lambda: np.savez(path, **state), "safetensors": lambda: save_file(state, str(path)),
     "pdparams": lambda: paddle.save({name: paddle.to_tensor(array) for name, array in state.items()}, str(path))
     }[extension]()
    figure = tmp_path / "figures" / "cm.png"
    code, lines = run_tool(EVAL, ["-c", config, "--weights", str(path), "--confusion-matrix", str(figure)], capsys)
    assert_one_line_error(code, lines, f"{path}: tensor ", fragment)
    assert not figure.parent.exists()


def test_convert_refuses_a_jax_npz_of_integers_and_writes_nothing(tmp_path, capsys):
    from repo_paths import REPO as repo

    fixture = np.load(os.path.join(repo, "tests", "fixtures", "timm_vit_cls.npz"))
    integers = tmp_path / "jax_int64.npz"
    np.savez(integers, **{name: np.round(fixture[name] * 10).astype(np.int64) for name in fixture.files})
    out = tmp_path / "converted" / "vit.safetensors"
    argv = ["--weights", str(integers), "--model", "vit_tiny_patch16_224", "-o", "image_size=32", "-o", "patch_size=8",
            "-o", "embed_dim=32", "-o", "depth=2", "-o", "num_heads=4", "--out", str(out)]
    code, lines = run_tool(load_tool("convert_weights"), argv, capsys)
    assert_one_line_error(code, lines, f"{integers}: tensor cls (the model's patch_embed.class_token) is int64",
                          "(and 31 more tensors like it); expected floating-point")
    assert not out.parent.exists()


def test_eval_pointed_at_optimizer_state(trained, tmp_path, capsys):
    config, checkpoints = trained
    optimizer_file = tmp_path / "last.pdopt"
    paddle.save(load_checkpoint(str(checkpoints / "last.pdckpt"))["optimizer"], str(optimizer_file))
    code, lines = run_tool(EVAL, ["-c", config, "--weights", str(optimizer_file)], capsys)
    assert_one_line_error(code, lines, "holds optimizer state")


@pytest.mark.slow
def test_safetensors_weights_from_training_evaluate(tmp_path, capsys):
    config = write_config(tmp_path, train=f"{{epochs: 1, batch_size: 16, device: cpu, output_dir: "
                                         f"'{tmp_path / 'run'}', weights_format: safetensors}}")
    assert run(TRAIN.main, ["-c", config]) == 0
    weights = tmp_path / "run" / "checkpoints" / "last.safetensors"
    assert weights.read_bytes()[8:9] == b"{"  # a safetensors header, no pickle
    capsys.readouterr()
    assert run(EVAL.main, ["-c", config, "--weights", str(weights)]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["top1"] == pytest.approx(read_metrics(tmp_path / "run")[0]["val_top1"], abs=1e-6)


# ---- interruptions -------------------------------------------------------------------------

def slow_config(tmp_path, epochs=1):
    output = tmp_path / "run"
    path = tmp_path / "slow.yaml"
    path.write_text(
        "model: {name: vit_walkthrough, image_size: 28, embed_dim: 32, depth: 2, num_heads: 2}\n"
        "data: {dataset: synthetic, synthetic_train_size: 4000, synthetic_val_size: 16}\n"
        f"train: {{epochs: {epochs}, batch_size: 8, device: cpu, log_interval: 1, output_dir: '{output}'}}\n")
    return str(path), output


def start_training(argv, **kwargs):
    return subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **kwargs)


def wait_for(process, text, seconds=120):
    deadline = time.time() + seconds
    for line in process.stdout:
        if text in line or time.time() > deadline:
            return line
    return ""


@pytest.mark.slow
def test_sigterm_saves_a_resumable_checkpoint(tmp_path):
    config, output = slow_config(tmp_path)
    process = start_training([os.path.join(TOOLS, "train.py"), "-c", config])
    wait_for(process, "step 2/")
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert "received SIGTERM" in stdout and "train.resume=auto" in stdout
    state = load_checkpoint(str(output / "checkpoints" / "last.pdckpt"))
    assert state["batch_in_epoch"] >= 2


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_whole_process_group_with_loader_workers_stops_cleanly(tmp_path, signum):
    """A terminal's Ctrl-C and a scheduler's `kill -- -PGID` reach the DataLoader workers too."""
    config, output = slow_config(tmp_path, epochs=2)
    process = start_training([os.path.join(TOOLS, "train.py"), "-c", config, "-o", "data.num_workers=2"],
                             start_new_session=True)
    wait_for(process, "step 3/")
    os.killpg(process.pid, signum)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr[-2000:]
    assert stderr.strip() == "", stderr[-2000:]  # no "DataLoader workers exit unexpectedly", no traceback
    assert stdout.count(f"received {signal.Signals(signum).name}") == 1  # the main process's line alone
    assert load_checkpoint(str(output / "checkpoints" / "last.pdckpt"))["batch_in_epoch"] >= 3


CTRL_C_TWICE_IN_BACKWARD = """
import os, signal, sys
sys.path.insert(0, {repo!r})
from paddle_vit import runtime
runtime.configure()  # first, as the tool does: its warning filters and quiet log apply
import paddle
real_backward, calls = paddle.Tensor.backward, []
def backward_interrupted(self, *args, **kwargs):
    calls.append(1)
    if len(calls) == 3:  # the user presses Ctrl-C twice while the third step runs its backward pass
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
    return real_backward(self, *args, **kwargs)
paddle.Tensor.backward = backward_interrupted
import runpy
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path({train!r}, run_name="__main__")
"""


@pytest.mark.slow
def test_a_second_ctrl_c_in_the_backward_pass_ends_the_run_at_once_in_one_line(tmp_path):
    config, output = slow_config(tmp_path)
    driver = tmp_path / "driver.py"
    driver.write_text(CTRL_C_TWICE_IN_BACKWARD.format(repo=REPO, train=os.path.join(TOOLS, "train.py")))
    result = subprocess.run([sys.executable, str(driver), "-c", config], capture_output=True, text=True, timeout=300)
    assert result.returncode == 130, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: interrupted (SIGINT twice; no checkpoint"), lines
    assert "received SIGINT" in result.stdout and "Traceback" not in result.stdout + result.stderr
    # the killed run's folder is left as a SIGKILL leaves it: a new run may resume or start there
    assert subprocess.run([sys.executable, os.path.join(TOOLS, "train.py"), "-c", config, "-o", "train.resume=auto",
                           "-o", "train.epochs=1", "-o", "data.synthetic_train_size=32"],
                          capture_output=True, text=True, timeout=300).returncode == 0


KILL_DURING_SAVE = """
import os, sys, time
sys.path.insert(0, {repo!r})
import paddle
from paddle_vit import checkpoint
real_save, saves = paddle.save, []
def slow_save(obj, path, *args, **kwargs):
    real_save(obj, path, *args, **kwargs)
    if isinstance(path, str) and ".pdckpt." in path:
        saves.append(path)
    if len(saves) == {stall_at} and saves[-1] == path:  # half written, then the machine dies
        size = os.path.getsize(path)
        with open(path, "r+b") as stream:
            stream.truncate(size // 2)
        print("MID-WRITE", flush=True)
        time.sleep(600)
checkpoint.paddle.save = slow_save
import runpy
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path({train!r}, run_name="__main__")
"""


@pytest.mark.slow
def test_sigkill_while_writing_a_checkpoint_loses_only_that_checkpoint(tmp_path):
    straight = small_config(tmp_path / "straight", train={"epochs": 2, "save_interval": 1})
    Trainer(straight).fit()
    config = small_config(tmp_path / "killed", train={"epochs": 2, "save_interval": 1})
    config.save(str(tmp_path / "killed.yaml"))
    # checkpoints per epoch: last.pdckpt, then epoch_000N.pdckpt; the 3rd is epoch 2's last.pdckpt
    driver = tmp_path / "driver.py"
    driver.write_text(KILL_DURING_SAVE.format(repo=REPO, stall_at=3, train=os.path.join(TOOLS, "train.py")))
    process = start_training([str(driver), "-c", str(tmp_path / "killed.yaml")])
    assert "MID-WRITE" in wait_for(process, "MID-WRITE")
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=60)
    folder = tmp_path / "killed" / "checkpoints"
    leftovers = [name for name in os.listdir(folder) if name.endswith(".tmp")]
    assert leftovers  # the killed write's temporary file is all that was damaged
    state = load_checkpoint(str(folder / "last.pdckpt"))  # the previous checkpoint still loads
    assert state["epoch"] == 1
    resumed = Trainer(small_config(tmp_path / "killed", train={"epochs": 2, "save_interval": 1, "resume": "auto"}))
    resumed.fit()
    assert not [name for name in os.listdir(folder) if name.endswith(".tmp")]  # cleaned on start
    expected, got = final_weights(tmp_path / "straight"), final_weights(tmp_path / "killed")
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], atol=1e-6, err_msg=name)


def test_full_disk_while_saving_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    config = small_config(tmp_path / "run", train={"epochs": 2})
    trainer = Trainer(config)
    real_save, calls = paddle.save, []

    def save_until_disk_is_full(obj, path, *args, **kwargs):
        if isinstance(path, str) and ".last.pdckpt." in path:
            calls.append(path)
        if len(calls) > 1:  # the first checkpoint fits; the next one fills the disk halfway
            with open(path, "wb") as stream:
                stream.write(b"\0" * 1000)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module.paddle, "save", save_until_disk_is_full)
    with pytest.raises(TrainingError, match="No space left on device; the previous one is kept"):
        trainer.fit()
    monkeypatch.undo()
    folder = tmp_path / "run" / "checkpoints"
    assert load_checkpoint(str(folder / "last.pdckpt"))["epoch"] == 1
    assert not [name for name in os.listdir(folder) if name.endswith(".tmp")]


def test_unwritable_output_folder(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    argv = ["-c", write_config(tmp_path), "-o", f"train.output_dir={blocker / 'run'}"]
    assert_one_line_error(*run_tool(TRAIN, argv, capsys), "is not writable")


# ---- output folders: a command that fails leaves none it made ------------------------------

def test_visualize_refused_weights_leave_no_out_folder(trained, tmp_path, capsys):
    config, _ = trained
    image = tmp_path / "image.png"
    Image.new("RGB", (14, 14), (0, 128, 255)).save(image)
    (tmp_path / "weights").mkdir()  # a folder where a weights file is meant
    out = tmp_path / "new" / "figures"
    argv = ["-c", config, "--weights", str(tmp_path / "weights"), "--image", str(image), "--out", str(out)]
    assert_one_line_error(*run_tool(VISUALIZE, argv, capsys), f"{tmp_path / 'weights'} is a directory without",
                          "expected a weights file")
    assert not (tmp_path / "new").exists()
    (tmp_path / "kept").mkdir()  # a folder the user made is theirs: it stays, empty as it was
    argv[-1] = str(tmp_path / "kept")
    assert_one_line_error(*run_tool(VISUALIZE, argv, capsys), "is a directory without")
    assert os.listdir(tmp_path / "kept") == []


@pytest.mark.slow
def test_export_refused_weights_or_a_failed_write_leave_no_out_folder(trained, tmp_path, capsys, monkeypatch):
    from paddle_vit.deploy import export as export_module

    config, checkpoints = trained
    export_tool, out = load_tool("export"), tmp_path / "new" / "exported"
    argv = ["-c", config, "--weights", str(tmp_path / "none.pdparams"), "--out", str(out)]
    assert_one_line_error(*run_tool(export_tool, argv, capsys), "none.pdparams does not exist")
    assert not (tmp_path / "new").exists()

    def disk_full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(export_module, "save_weights", disk_full)  # after the traced model was written
    argv[3] = str(checkpoints / "last.pdparams")
    assert_one_line_error(*run_tool(export_tool, argv, capsys), f"cannot write the export to {out}",
                          "No space left on device")
    assert not (tmp_path / "new").exists()  # nor the staging folder inside it


def test_an_interrupted_data_size_experiment_leaves_no_out_folder(tmp_path, capsys, monkeypatch):
    import paddle_vit.cli.data_size_experiment as command  # the name the command calls, bound at its import

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(command, "run_data_size_experiment", interrupted)
    code = run(load_tool("data_size_experiment").main, ["--out", str(tmp_path / "new" / "figures")])
    assert code == 130 and capsys.readouterr().err.strip() == "error: interrupted"
    assert not (tmp_path / "new").exists()


def test_convert_checks_out_first_and_leaves_no_folder_when_the_checkpoint_fails(trained, tmp_path, capsys):
    _, checkpoints = trained
    convert = load_tool("convert_weights")
    model = ["--model", "vit_walkthrough", "-o", "image_size=14", "-o", "embed_dim=16", "-o", "depth=2",
             "-o", "num_heads=2", "-o", "num_classes=4"]
    out = tmp_path / "new" / "vit.safetensors"
    code, lines = run_tool(convert, ["--weights", str(tmp_path / "none.npz"), *model, "--out", str(out)], capsys)
    assert_one_line_error(code, lines, "none.npz does not exist")
    assert not (tmp_path / "new").exists()
    (tmp_path / "taken.safetensors").mkdir()
    argv = ["--weights", str(checkpoints / "last.pdparams"), *model, "--out", str(tmp_path / "taken.safetensors")]
    assert_one_line_error(*run_tool(convert, argv, capsys), "--out", "taken.safetensors is a folder; expected a file "
                                                                     "name ending in .safetensors or .pdparams")
    assert "loaded" not in capsys.readouterr().out  # said before the checkpoint was read


@pytest.mark.slow
def test_a_fifo_where_a_file_or_folder_is_meant_is_named_and_never_waited_on(trained, exported, tmp_path, capsys):
    """export --labels FIFO waited forever for a writer; the others called a FIFO 'a file'."""
    config, checkpoints = trained
    weights = str(checkpoints / "last.pdparams")
    fifo = tmp_path / "pipe.png"
    os.mkfifo(fifo)
    image = tmp_path / "image.png"
    Image.new("RGB", (14, 14), (0, 128, 255)).save(image)
    for tool, argv, fragment in [
        ("export", ["-c", config, "--weights", weights, "--out", str(tmp_path / "e"), "--labels", str(fifo)],
         f"labels file {fifo} is a FIFO; expected a text file, one class name per line"),
        ("predict", ["--inference-model", str(exported), str(image), "--labels", str(fifo)], "is a FIFO"),
        ("export", ["-c", config, "--weights", weights, "--out", str(fifo)], f"--out {fifo} is a FIFO; expected a folder"),
        ("visualize", ["-c", config, "--weights", weights, "--image", str(image), "--out", str(fifo)],
         f"--out {fifo} is a FIFO; expected a folder"),
        ("eval", ["-c", config, "--weights", weights, "--confusion-matrix", str(fifo)],
         f"--confusion-matrix {fifo} is a FIFO; expected a file name ending in .png"),
    ]:
        assert_one_line_error(*run_tool(load_tool(tool), argv, capsys), fragment)
    assert not (tmp_path / "e").exists() and fifo.is_fifo()


def test_a_failed_command_keeps_what_it_wrote_into_a_folder_it_made(tmp_path):
    from paddle_vit.fileio import provisional_folders

    with pytest.raises(OSError), provisional_folders(tmp_path / "a" / "b" / "c"):
        os.makedirs(tmp_path / "a" / "b" / "c")
        (tmp_path / "a" / "b" / "numbers.json").write_text("{}")  # written before the failure: kept
        raise OSError(errno.ENOSPC, "disk full")
    assert sorted(os.listdir(tmp_path / "a" / "b")) == ["numbers.json"]
    with pytest.raises(OSError), provisional_folders(tmp_path / "x" / "y"):
        os.makedirs(tmp_path / "x")  # the block failed before it made y: x goes all the same
        raise OSError(errno.ENOSPC, "disk full")
    assert not (tmp_path / "x").exists()


# ---- numeric options: nan, inf, 0, negative ------------------------------------------------

TINY_BENCHMARK = ["vit_tiny_patch16_224", "-o", "model.image_size=32", "-o", "model.patch_size=16", "-o",
                  "model.depth=1", "--batch-size", "2", "--warmup", "0", "--iters", "1", "--rounds", "1"]


@pytest.mark.parametrize("option, fragment", [
    # nan passed "<= 0" and printed "MFU nan%"; inf (and 1e400, read as inf) printed an MFU of 0
    (["--peak-tflops", "nan"], "argument --peak-tflops: expected a finite number > 0, got 'nan'"),
    (["--peak-tflops", "inf"], "argument --peak-tflops: expected a finite number > 0, got 'inf'"),
    (["--peak-tflops", "1e400"], "argument --peak-tflops: expected a finite number > 0, got '1e400'"),
    (["--peak-tflops", "0"], "got '0'"), (["--peak-tflops=-1"], "got '-1'"),
    (["--threads", "0"], "argument --threads: expected an integer >= 1, got '0'"),
    (["--threads", "100000"], f"--threads must be from 1 to {os.cpu_count()} (the CPUs of this machine), "
                              f"got 100000"),  # Paddle's thread pool aborted with a C++ stack
    (["--batch-size", "-1"], "argument --batch-size: expected an integer >= 1, got '-1'"),
    (["--iters", "0"], "argument --iters: expected an integer >= 1"),
    (["--rounds", "0"], "argument --rounds: expected an integer >= 1"),
    (["--warmup", "-1"], "argument --warmup: expected an integer >= 0, got '-1'"),
    (["--num-workers", "-1"], "argument --num-workers: expected an integer >= 0, got '-1'"),
    # digits str.isdigit() accepts and int() does not, a float for an int, Python's own spellings
    (["--batch-size", "\u00b2"], "argument --batch-size: expected an integer >= 1, got '\u00b2'"),
    (["--iters", "1.5"], "argument --iters: expected an integer >= 1, got '1.5'"),
    (["--mode", "gemm", "--iters", "0"], "argument --iters: expected an integer >= 1"),  # gemm used max(iters, 1)
    (["--mode", "gemm", "--peak-tflops", "nan"], "argument --peak-tflops: expected a finite number > 0"),
    (["--batch-size", "two"], "argument --batch-size: expected an integer >= 1, got 'two'; see --help"),
    (["--warmpu", "1"], "unrecognized arguments: --warmpu 1; see --help"),
])
def test_benchmark_numeric_options_are_one_line_before_any_work(capsys, option, fragment):
    code, lines = run_tool(load_tool("benchmark"), [*TINY_BENCHMARK, *option], capsys)
    assert_one_line_error(code, lines, fragment)
    assert "images/s" not in capsys.readouterr().out


@pytest.mark.parametrize("option, fragment", [
    (["--gpus", "0"], "argument --gpus: expected an integer > 0, got '0'"),
    (["--mfu", "nan"], "argument --mfu: expected a finite number > 0, got 'nan'"),
    (["--peak-tflops", "inf"], "argument --peak-tflops: expected a finite number > 0, got 'inf'"),
    (["--memory-gib=-1"], "argument --memory-gib: expected a finite number > 0, got '-1'"),
    (["--micro-batch", "0"], "argument --micro-batch: expected an integer > 0"),
    (["--mfu", "2"], "--mfu is a fraction of the peak, in (0, 1]"),
    # two images cannot be shared out over three GPUs: the table would be silently wrong
    (["--gpus", "3", "--global-batch", "2"], "--global-batch 2 is smaller than --gpus 3"),
])
def test_scaling_estimate_numeric_options_are_one_line(capsys, option, fragment):
    assert_one_line_error(*run_tool(load_tool("scaling_estimate"), ["vit_base_patch16_224", *option], capsys), fragment)


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    config, checkpoints = trained
    folder = tmp_path_factory.mktemp("exported") / "model"
    assert run(load_tool("export").main, ["-c", config, "--weights", str(checkpoints / "last.pdparams"),
                                          "--out", str(folder)]) == 0
    return folder


@pytest.mark.parametrize("option, fragment", [
    (["--topk", "0"], "argument --topk: expected an integer >= 1, got '0'"),
    (["--batch-size", "-1"], "argument --batch-size: expected an integer >= 1, got '-1'"),
    (["--topk", "nan"], "argument --topk: expected an integer >= 1, got 'nan'"),
    (["--topk", "\u0663"], None),  # Arabic-Indic three: int() reads it, so it is a valid --topk
    (["--cpu-threads", "0"], "argument --cpu-threads: expected an integer >= 1, got '0'"),
    (["--cpu-threads", "100000"], "(the CPUs of this machine), got 100000"),
])
def test_predict_numeric_options_are_one_line(exported, tmp_path, capsys, option, fragment):
    image = tmp_path / "image.png"
    Image.new("RGB", (14, 14), (0, 128, 255)).save(image)
    argv = ["--inference-model", str(exported), str(image), *option]
    code, lines = run_tool(load_tool("predict"), argv, capsys)
    if fragment is None:
        assert code == 0, lines
    else:
        assert_one_line_error(code, lines, fragment)


def test_predict_given_only_a_fifo_or_a_folder_of_one_says_why_in_one_line(exported, tmp_path, capsys):
    """The reasons used to come as warnings before the error: three lines for one mistake."""
    predict = load_tool("predict")
    os.mkfifo(tmp_path / "pipe.png")
    assert_one_line_error(*run_tool(predict, ["--inference-model", str(exported), str(tmp_path / "pipe.png")], capsys),
                          f"no images found in {tmp_path / 'pipe.png'}: {tmp_path / 'pipe.png'}: not a regular file "
                          f"(a FIFO)")
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "folder" / "pipe.png")
    code, lines = run_tool(predict, ["--inference-model", str(exported), str(tmp_path / "folder")], capsys)
    assert_one_line_error(code, lines, "folder/pipe.png: not a regular file (a FIFO)",
                          f"folder {tmp_path / 'folder'}: no image file (.jpg")


@pytest.mark.parametrize("option, fragment", [
    (["--fractions", "0.01"], "--fractions 0.01 keeps 10 training images, fewer than one batch of 32; the smallest "
                              "fraction that keeps a batch is 0.024"),  # was "lower train.batch_size", no such option
    # -1 was Paddle's "Invoked with: <Generator"
    (["--seeds", "-1"], "argument --seeds: expected an integer in [0, 4294967295], got '-1'"),
    (["--fractions", "nan"], "argument --fractions: expected a finite number in (0, 1], got 'nan'"),
    (["--fractions", "1.5"], "argument --fractions: expected a finite number in (0, 1], got '1.5'"),
    (["--steps", "0"], "argument --steps: expected an integer >= 1, got '0'"),
    (["--shots", "5", "0"], "argument --shots: expected an integer >= 1, got '0'"),
])
def test_data_size_experiment_options_are_one_line_before_any_run(tmp_path, capsys, option, fragment):
    argv = ["--out", str(tmp_path / "figures"), *option]
    assert_one_line_error(*run_tool(load_tool("data_size_experiment"), argv, capsys), fragment)
    assert not (tmp_path / "figures").exists()


@pytest.mark.parametrize("override", ["train.seed=-1", "train.seed=4294967296", "data.split_seed=-1"])
def test_a_seed_out_of_numpys_range_is_a_config_error(tmp_path, capsys, override):
    output = tmp_path / "out"
    argv = ["-c", write_config(tmp_path), "-o", override, "-o", f"train.output_dir={output}"]
    assert_one_line_error(*run_tool(TRAIN, argv, capsys), f"{override.split('=')[0]} must be in [0, 2**32 - 1]")
    assert not output.exists()


# ---- numerical faults and memory -----------------------------------------------------------

def poison_images(trainer, from_call, to_call=None):
    """Make the training transform return NaN images for calls [from_call, to_call)."""
    transform, calls = trainer.train_set.transform, [0]

    def poisoned(image, rng):
        calls[0] += 1
        array = transform(image, rng)
        if calls[0] > from_call and (to_call is None or calls[0] <= to_call):
            array = np.full_like(array, np.nan)
        return array
    trainer.train_set.transform = poisoned


def test_one_nan_batch_is_detected_and_skipped(tmp_path, caplog):
    trainer = Trainer(small_config(tmp_path / "run", train={"epochs": 1}))
    poison_images(trainer, 16, 17)  # one image of batch 2 of 6
    with caplog.at_level("WARNING", logger="paddle_vit"):
        trainer.fit()
    assert "step 2 (epoch 1, batch 2): the loss is nan; this update is skipped" in caplog.text
    assert all(np.isfinite(value).all() for value in final_weights(tmp_path / "run").values())
    assert np.isfinite(read_metrics(tmp_path / "run")[0]["train_loss"])


def test_nan_steps_in_a_row_stop_the_run_and_keep_the_last_good_checkpoint(tmp_path):
    trainer = Trainer(small_config(tmp_path / "run", train={"epochs": 3, "max_bad_steps": 3}))
    poison_images(trainer, 96)  # epoch 1 (96 images) is clean, everything after is NaN
    with pytest.raises(TrainingError, match=r"NaN or Inf for 3 steps in a row, the last at step 9 \(epoch 2, "
                                            r"batch 3\); stopped: the last good checkpoint"):
        trainer.fit()
    assert load_checkpoint(str(tmp_path / "run" / "checkpoints" / "last.pdckpt"))["epoch"] == 1


def test_nan_found_at_log_time_when_per_step_check_is_off(tmp_path):
    trainer = Trainer(small_config(tmp_path / "run", train={"epochs": 1, "check_finite": False}))
    poison_images(trainer, 0)
    with pytest.raises(TrainingError, match="NaN or Inf"):
        trainer.fit()


OUT_OF_MEMORY = """
import resource, runpy, sys
limit = {limit}
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path({train!r}, run_name="__main__")
"""


@pytest.mark.slow
def test_batch_too_large_for_memory_suggests_accumulation(tmp_path):
    """A real allocation failure: the address space is capped at 4 GiB and one attention map of
    the walkthrough's 1,025 tokens at batch 256 needs 4.3 GB."""
    config = write_config(tmp_path, model="{name: vit_walkthrough}",
                          data="{dataset: synthetic, synthetic_train_size: 256, synthetic_val_size: 8}",
                          train=f"{{epochs: 1, batch_size: 256, device: cpu, output_dir: '{tmp_path / 'run'}'}}")
    driver = tmp_path / "capped.py"
    driver.write_text(OUT_OF_MEMORY.format(limit=4 * 2 ** 30, train=os.path.join(TOOLS, "train.py")))
    result = subprocess.run([sys.executable, str(driver), "-c", config], capture_output=True, text=True, timeout=300)
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2, result.stderr[-3000:]
    assert len(lines) == 1 and "out of memory" in lines[0]
    assert "-o train.batch_size=128 -o train.accumulate_steps=2" in lines[0]
    assert "Traceback" not in result.stderr
