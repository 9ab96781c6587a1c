"""Every writer killed at each of its file-system calls (tests/crash_points.py), and after each
kill the writer's promise checked: the previous result whole or the new one whole, and the user's
next command working (predict on an export, reading a published folder, resuming a run, running
the export again). docs/deployment.md and docs/training.md list what survives a kill where, one
row per test here.

Each writer runs once to list its calls, then once stopped at each kill point, where what a kill
would leave is copied (crash_points.stopped_states); three of the points (the first, the swap,
the last) are also killed for real and the kill's result compared with the copy. The number of
kill points is printed in the summary and the test fails if a writer makes none. Slow: the checks
after each point (the next run, once per kind of state left) cost a tool run each.
"""
import json
import os
import shutil
import tempfile

import numpy as np
import pytest

import crash_points
from repo_paths import REPO

def compiled_kernels_available():
    from paddle_vit.variants import compiled
    return compiled.build_possible() and os.environ.get(compiled.SWITCH_VARIABLE, "").strip() != "0"


pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not crash_points.available(), reason="needs Linux and a C compiler")]

SMALL = {"image_size": 14, "embed_dim": 16, "depth": 2, "num_heads": 2, "num_classes": 4}
MODEL_FLAGS = ["--model", "vit_walkthrough"] + [argument for key, value in SMALL.items()
                                                for argument in ("-o", f"model.{key}={value}")]
PUBLISHED = os.path.join(REPO, "tests", "fixtures", "publish")


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("crash_points"))
    runner = crash_points.ToolRunner(crash_points.build_library(folder), folder)
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def export_runner(runner, tmp_path_factory):
    """The tool runner with the export's code converted to static graphs once, before its forks."""
    runner.warm(os.path.join(REPO, "tests", "export_conversions.py"), "convert",
                [tmp_path_factory.mktemp("conversions"), json.dumps(SMALL)])
    return runner


def run(runner, tool_argv):
    """Run (tool, argv) unwatched; returns its exit code, asserting success."""
    code, output = runner.run(*tool_argv, watched=os.path.join(runner.folder, "nothing"))
    assert code == 0, output[-3000:]


def visible(folder):
    """{name: bytes} of the files of `folder` a user sees (hidden entries left out), or None when
    there is no such folder."""
    if not os.path.isdir(folder):
        return None
    found = {}
    for name in sorted(os.listdir(folder)):
        if not name.startswith("."):
            path = os.path.join(folder, name)
            found[name] = open(path, "rb").read() if os.path.isfile(path) else "a folder"
    return found


def state(folder):
    """What a kill left, as far as the next run can tell: the visible files' names and the hidden
    entries' kinds (a staging folder's random name left out)."""
    hidden = sorted(name.split("-")[0] + ("/" if os.path.isdir(os.path.join(os.path.dirname(folder), name))
                                          or os.path.isdir(os.path.join(folder, name)) else "")
                    for name in leftovers(folder))
    return tuple(sorted(visible(folder) or ())), tuple(hidden)


def next_run_works(runner, tool_argv, out, whole, point, seen):
    """Run the writer again after the kill at `point` (once per kind of state left, `seen`): it
    succeeds and leaves `whole`, with no leftover."""
    left = state(out)
    if left in seen:
        return
    seen.add(left)
    code, output = runner.run(*tool_argv, watched=out)
    assert code == 0, f"{point}: the next run failed: {output[-2000:]}"
    assert _same_export(visible(out), whole) and not leftovers(out), f"{point}: {state(out)}"


def leftovers(folder):
    """Hidden entries in `folder` and hidden siblings named after it: what a killed run leaves."""
    parent, name = os.path.split(folder)
    inside = [name_ for name_ in os.listdir(folder) if name_.startswith(".")] if os.path.isdir(folder) else []
    beside = [name_ for name_ in os.listdir(parent) if name_.startswith("." + name)]
    return inside + beside


def each_kill(runner, tool_argv, out, prepare, record_property):
    """Yield each kill point of the tool run `tool_argv` with what a kill there leaves in place,
    `prepare()` making the starting state before each run; the count is recorded (the summary
    prints it).

    The states come from one run stopped at each point (crash_points.stopped_states); at up to
    three points (the first, the swap, the last: crash_points.points_to_kill_for_real) the run is
    also killed for real, and what the kill leaves is asserted to be what the stopped run's copy
    holds."""
    prepare()
    points = crash_points.kill_points(crash_points.calls(runner, *tool_argv, out), out)
    record_property("kill_points", len(points))
    assert points, "the writer made no file-system call under its folder"
    prepare()
    folder = tempfile.mkdtemp(prefix="states-", dir=runner.folder)
    try:
        states = crash_points.stopped_states(runner, *tool_argv, out, points, folder)
        for point in crash_points.points_to_kill_for_real(points, out):
            prepare()
            crash_points.kill(runner, *tool_argv, out, point)
            killed = crash_points.layout(out)
            crash_points.restore_state(states[point], out)
            assert crash_points.layout(out) == killed, f"{point}: the kill left another state than the stop"
        for point in points:
            crash_points.restore_state(states[point], out)
            yield point
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---- export --------------------------------------------------------------------------------

def export_argv(weights, out, *formats):
    return "export", ["--weights", weights, *MODEL_FLAGS, "--out", out, *formats]


@pytest.fixture(scope="module")
def two_weights(tmp_path_factory):
    """Two weight files of the small walkthrough ViT (old and new) and a batch to tell their exports apart."""
    from paddle_vit import create_model
    from paddle_vit.weights import save_weights
    import paddle
    folder = tmp_path_factory.mktemp("weights")
    paths = []
    for seed in (0, 1):
        paddle.seed(seed)
        paths.append(str(folder / f"weights{seed}.safetensors"))
        save_weights(create_model("vit_walkthrough", **SMALL), paths[-1])
    batch = np.random.default_rng(0).standard_normal((2, 3, 14, 14)).astype(np.float32)
    from PIL import Image
    images = folder / "gate"  # two small photos for the int8 gate: the recipe's 359 would cost seconds a point
    images.mkdir()
    for index in range(2):
        pixels = np.random.default_rng(index).integers(0, 256, (14, 14, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(images / f"{index}.png")
    return paths, batch, str(images)


def export_outputs(folder, batch, backend):
    from paddle_vit.deploy.inference import load_export
    return load_export(folder, backend=backend).outputs(batch)


def test_an_export_over_an_export_killed_anywhere_leaves_one_whole_export_and_predict_works(
        export_runner, two_weights, tmp_path, record_property):
    """Every format at once (a Paddle-only export makes the same calls for its files, fewer of
    them, so it is not run again on its own)."""
    (old_weights, new_weights), batch, gate = two_weights
    formats = ("--format", "paddle", "--format", "onnx", "--quantize", "int8", "--gate-images", gate)
    backends = ("paddle", "onnxruntime")
    out, reference = str(tmp_path / "export"), str(tmp_path / "reference")
    for weights, folder in ((old_weights, reference + "-old"), (new_weights, reference + "-new")):
        run(export_runner, export_argv(weights, folder, *formats))
    whole = {"old": visible(reference + "-old"), "new": visible(reference + "-new")}
    outputs = {generation: {backend: export_outputs(f"{reference}-{generation}", batch, backend)
                            for backend in backends} for generation in whole}

    def prepare():
        crash_points.remove_state(out)
        shutil.copytree(reference + "-old", out)

    argv, seen = export_argv(new_weights, out, *formats), set()
    for point in each_kill(export_runner, argv, out, prepare, record_property):
        generation = _generation(visible(out), whole, point)
        for backend in backends:  # predict works on what the kill left
            np.testing.assert_allclose(export_outputs(out, batch, backend), outputs[generation][backend],
                                       rtol=1e-5, atol=1e-6, err_msg=f"{point}: {backend}")
        next_run_works(export_runner, argv, out, whole["new"], point, seen)


def test_an_export_into_a_new_folder_killed_anywhere_leaves_nothing_or_the_whole_export(
        export_runner, two_weights, tmp_path, record_property):
    (_, new_weights), _, _ = two_weights
    out, reference = str(tmp_path / "export"), str(tmp_path / "reference")
    argv, seen = export_argv(new_weights, out), set()
    run(export_runner, export_argv(new_weights, reference))
    whole = visible(reference)

    def prepare():
        crash_points.remove_state(out)

    for point in each_kill(export_runner, argv, out, prepare, record_property):
        left = visible(out)
        assert left in (None, {}) or _same_export(left, whole), f"{point}: {sorted(left)}"
        next_run_works(export_runner, argv, out, whole, point, seen)


def _generation(left, whole, point):
    """Which whole export (old or new) the visible files `left` are; fails when neither."""
    for generation, files in whole.items():
        if _same_export(left, files):
            return generation
    raise AssertionError(f"killed at {point}, the folder holds neither export whole: {sorted(left or {})}")


def _same_export(left, files):
    """The same files; the same bytes but for model.safetensors, whose header Paddle writes in no
    fixed order: the same tensors there."""
    if left is None or sorted(left) != sorted(files):
        return False
    return all(left[name] == files[name] or (name.endswith(".safetensors") and _same_tensors(left[name], files[name]))
               for name in files)


def _same_tensors(first, second):
    from safetensors.numpy import load
    a, b = load(first), load(second)
    return sorted(a) == sorted(b) and all(np.array_equal(a[name], b[name]) for name in a)


# ---- published folders -----------------------------------------------------------------------

@pytest.mark.parametrize("to, old_source, new_source", [
    ("timm", "trained_run", "plain_mean"),
    ("huggingface", "hf_vit", "trained_run"),
])
def test_a_published_folder_over_another_killed_anywhere_is_one_whole_folder_that_loads(
        runner, tmp_path, to, old_source, new_source, record_property):
    out, reference = str(tmp_path / "published"), str(tmp_path / "reference")
    for source, folder in ((old_source, reference + "-old"), (new_source, reference + "-new")):
        run(runner, ("convert", ["--weights", os.path.join(PUBLISHED, source), "--out", folder, "--to", to]))
    whole = {"old": visible(reference + "-old"), "new": visible(reference + "-new")}
    argv = ("convert", ["--weights", os.path.join(PUBLISHED, new_source), "--out", out, "--to", to,
                                "--overwrite"])
    seen = set()

    def prepare():
        crash_points.remove_state(out)
        shutil.copytree(reference + "-old", out)

    from paddle_vit import create_model
    for point in each_kill(runner, argv, out, prepare, record_property):
        _generation(visible(out), whole, point)
        create_model(pretrained=out)  # the user's next command: read it back
        next_run_works(runner, argv, out, whole["new"], point, seen)


@pytest.mark.parametrize("suffix", [".safetensors", ".pdparams"])
def test_converted_weights_over_a_file_killed_anywhere_are_one_whole_file_that_loads(
        runner, tmp_path, suffix, record_property):
    """`tools/convert_weights.py --out FILE` over an earlier FILE: the file is one conversion or
    the other, whole, and loads; no temporary file is left that the next run does not remove."""
    from paddle_vit.weights import read_checkpoint
    folder = str(tmp_path / "weights")
    out = os.path.join(folder, "model" + suffix)

    def converted(source, target):
        run(runner, ("convert", ["--weights", os.path.join(PUBLISHED, source), "--out", target]))
        return read_checkpoint(target).arrays
    whole = {"old": converted("trained_run", str(tmp_path / ("old" + suffix))),
             "new": converted("plain_mean", str(tmp_path / ("new" + suffix)))}
    argv = ("convert", ["--weights", os.path.join(PUBLISHED, "plain_mean"), "--out", out])

    def prepare():
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        shutil.copyfile(str(tmp_path / ("old" + suffix)), out)

    for point in each_kill(runner, argv, folder, prepare, record_property):
        left = read_checkpoint(out).arrays
        assert any(sorted(left) == sorted(weights) and all(np.array_equal(left[name], weights[name]) for name in left)
                   for weights in whole.values()), f"{point}: neither conversion whole"
        run(runner, argv)  # the next run succeeds and leaves the new file alone in the folder
        assert os.listdir(folder) == ["model" + suffix], f"{point}: {os.listdir(folder)}"


# ---- training --------------------------------------------------------------------------------

def test_a_training_run_killed_at_any_call_resumes_to_the_unbroken_runs_result(runner, tmp_path, record_property):
    """A 2-epoch run of the small walkthrough ViT, killed at each call under its output folder (the
    run folder, its lock, config.yaml, train.log, the VisualDL records, metrics.jsonl, the
    checkpoints), then `train.resume=auto`: the same metrics (but for timings) and the same final
    weights as the run never killed."""
    from test_runs import metrics  # the metrics reader of the resume tests (timings left out)
    from test_train import small_config  # a seconds-long recipe
    from paddle_vit.checkpoint import load_checkpoint
    unbroken, root = tmp_path / "unbroken", str(tmp_path / "run")
    config_path = str(tmp_path / "run.yaml")
    small_config(unbroken, train={"epochs": 2}).save(config_path)
    run(runner, ("train", ["-c", config_path]))
    expected = metrics(unbroken)
    weights = load_checkpoint(str(unbroken / "checkpoints" / "last.pdckpt"))["model"]
    argv = ("train", ["-c", config_path, "-o", f"train.output_dir={root}"])
    resume = ("train", ["-c", config_path, "-o", f"train.output_dir={root}", "-o", "train.resume=auto"])

    def prepare():
        shutil.rmtree(root, ignore_errors=True)

    for point in each_kill(runner, argv, root, prepare, record_property):
        code, output = runner.run(*resume, watched=root)
        assert code == 0, f"{point}: resume failed: {output[-2000:]}"
        assert metrics(root) == expected, point
        final = load_checkpoint(os.path.join(root, "checkpoints", "last.pdckpt"))["model"]
        temporaries = [os.path.join(where, name) for where, _, names in os.walk(root) for name in names
                       if name.endswith(".tmp") or name.startswith(".write-test")]
        assert not temporaries, f"{point}: a killed write's temporary file outlived the resumed run: {temporaries}"
        for name, value in weights.items():
            np.testing.assert_allclose(final[name].numpy(), value.numpy(), atol=1e-6, err_msg=f"{point}: {name}")


# ---- the compiled kernels' cache --------------------------------------------------------------

CACHE_WRITER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_cache_writer.py")


@pytest.mark.skipif(not compiled_kernels_available(), reason="no C++ compiler: no kernels to cache")
def test_the_kernel_cache_killed_at_any_call_loads_after_and_holds_one_intact_library(runner, tmp_path,
                                                                                   record_property):
    """The cache's own calls (the sources copied in, the build's log, the library's hash
    recorded), the compiler's output stood in for by a library built once: after a kill at each,
    the next process loads the kernels, the cache holds one intact library (built again only when
    the kill came before its hash was recorded) and no file of a process."""
    from paddle_vit.variants import compiled
    built = compiled.kernel_library().__file__  # the machine's own build, copied as the compiler's output
    cache = str(tmp_path / "cache")
    folder = os.path.join(cache, "paddle_vit", "kernels")
    writer = (f"call:{CACHE_WRITER}:main", [cache, built])

    def prepare():
        shutil.rmtree(cache, ignore_errors=True)

    for point in each_kill(runner, writer, folder, prepare, record_property):
        code, output = runner.run(*writer, watched=os.path.join(runner.folder, "nothing"))
        assert code == 0, f"{point}: the next load failed: {output[-2000:]}"
        (key_folder,) = [os.path.join(folder, name) for name in os.listdir(folder)]
        key = os.path.basename(key_folder)
        assert compiled.library_intact(key_folder, key), point
        assert not [name for name in os.listdir(os.path.dirname(compiled.library_path(key_folder, key)))
                    if name.endswith(".py")], point
