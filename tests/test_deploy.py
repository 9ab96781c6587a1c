"""From checkpoint to prediction: tools/predict.py, tools/export.py, paddle.inference and ONNX.

One small model is trained once (the walkthrough ViT at 14x14 on the synthetic set, with a
non-trivial eval transform: shorter side to 16, centre crop 14, ImageNet mean/std) and exported
once per variant; the tests compare what the exported models and the tools give with the
dynamic model.
"""
import contextlib
import importlib.util
import shutil
import json
import logging
import os
import subprocess
import sys

import numpy as np
import paddle
import pytest
from PIL import Image

from paddle_vit import ViT, ViTConfig, load_pretrained
from paddle_vit.config import DataConfig, load_config
from paddle_vit.data.imagefolder import decode_image
from paddle_vit.data.transforms import build_transforms
from paddle_vit.engine.trainer import Trainer
from paddle_vit.deploy.export import export_classifier
from paddle_vit.deploy.inference import InferenceOptions, find_paddle_model, load_export
from paddle_vit.deploy.predict import load_classifier, softmax

from repo_paths import REPO, TOOLS, load_tool

SMALL_MODEL = {"name": "vit_walkthrough", "image_size": 14, "embed_dim": 16, "depth": 2, "num_heads": 2}
MODEL_FLAGS = ["--model", "vit_walkthrough"] + [arg for key, value in SMALL_MODEL.items() if key != "name"
                                                for arg in ("-o", f"model.{key}={value}")]


PREDICT, EXPORT = load_tool("predict"), load_tool("export")


@contextlib.contextmanager
def kept_logger():
    """The tools reconfigure the "paddle_vit" logger; give later tests theirs back."""
    logger = logging.getLogger("paddle_vit")
    state = (list(logger.handlers), logger.level, logger.propagate)
    try:
        yield
    finally:
        logger.handlers[:], logger.level, logger.propagate = state[0], state[1], state[2]


def run_tool(tool, argv, capsys):
    """(exit code, stdout lines, stderr lines) of a tool's main() run in this process."""
    capsys.readouterr()
    with kept_logger():
        code = tool.main([str(arg) for arg in argv])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A trained run: its output folder, config.yaml and last.pdckpt."""
    root = tmp_path_factory.mktemp("deploy")
    config = load_config(data={
        "model": dict(SMALL_MODEL, num_classes=None),
        "data": {"dataset": "synthetic", "synthetic_train_size": 32, "synthetic_val_size": 8, "synthetic_classes": 4,
                 "eval_crop_pct": 0.875, "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
        "train": {"epochs": 1, "batch_size": 16, "output_dir": str(root / "run"), "device": "cpu", "vdl": False},
        "eval": {"batch_size": 16},
    })
    with kept_logger():
        Trainer(config).fit()
    run = root / "run"
    return {"root": root, "config": run / "config.yaml", "checkpoint": run / "checkpoints" / "last.pdckpt",
            "weights": run / "checkpoints" / "last.pdparams"}


@pytest.fixture(scope="module")
def classifier(trained):
    return load_classifier(str(trained["checkpoint"]))


@pytest.fixture(scope="module")
def exported(trained, classifier):
    """Exports of the trained model: "logits" (the default) and "softmax"."""
    with kept_logger():
        return {"logits": export_classifier(classifier, trained["root"] / "export"),
                "softmax": export_classifier(classifier, trained["root"] / "export_softmax", softmax=True)}


@pytest.fixture(scope="module")
def images(trained):
    """A folder with a PNG with alpha, a grayscale JPEG in a subfolder, a corrupt JPEG and a text file."""
    folder = trained["root"] / "images"
    (folder / "sub").mkdir(parents=True)
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (20, 30, 4), dtype=np.uint8), "RGBA").save(folder / "alpha.png")
    Image.fromarray(rng.integers(0, 256, (25, 17), dtype=np.uint8), "L").save(folder / "sub" / "gray.jpg")
    (folder / "corrupt.jpg").write_bytes(b"\xff\xd8\xff\xe0" + b"not a jpeg at all")
    (folder / "notes.txt").write_text("not an image")
    return folder


def random_batch(size, seed=0):
    return np.random.default_rng(seed).standard_normal((size, 3, 14, 14)).astype("float32")


def json_predictions(lines):
    return {os.path.basename(record["file"]): record["predictions"] for record in map(json.loads, lines)}


# ---- export ------------------------------------------------------------------------------------

def test_an_export_whose_description_is_of_another_model_is_one_error_not_wrong_names(exported, tmp_path):
    """A model file copied in from another export once gave its scores under this one's class
    names; preprocess.json's own two counts disagreeing once named them backwards."""
    import shutil
    from paddle_vit.errors import ConfigError
    folder = tmp_path / "export"
    shutil.copytree(os.path.dirname(exported["logits"]["metadata"]), folder)
    metadata = json.loads((folder / "preprocess.json").read_text())
    classes = metadata["num_classes"]
    (folder / "preprocess.json").write_text(json.dumps(dict(metadata, num_classes=classes + 3,
                                                            class_names=[f"c{i}" for i in range(classes + 3)])))
    with pytest.raises(ConfigError, match=f"computes {classes} class scores, but its preprocess.json says "
                                          f"num_classes {classes + 3}"):
        load_export(folder).outputs(random_batch(1))
    (folder / "preprocess.json").write_text(json.dumps(dict(metadata, num_classes=classes + 3)))
    with pytest.raises(ConfigError, match=f"names {classes} classes but its num_classes is {classes + 3}"):
        load_export(folder)


@pytest.mark.slow
@pytest.mark.parametrize("batch_size", [1, 3])
def test_paddle_inference_matches_the_dynamic_model(classifier, exported, batch_size):
    batch = random_batch(batch_size, seed=batch_size)
    logits_model = load_export(os.path.dirname(exported["logits"]["metadata"]))
    softmax_model = load_export(os.path.dirname(exported["softmax"]["metadata"]))
    assert logits_model.backend == "paddle"
    np.testing.assert_allclose(logits_model.outputs(batch), classifier.outputs(batch), atol=1e-5, rtol=0)
    np.testing.assert_allclose(softmax_model.outputs(batch), classifier(batch), atol=1e-5, rtol=0)
    np.testing.assert_allclose(logits_model(batch), classifier(batch), atol=1e-5, rtol=0)


def test_export_writes_pir_model_preprocessing_and_safetensors(trained, classifier, exported):
    folder = os.path.dirname(exported["logits"]["metadata"])
    # Paddle 3's jit.save writes the PIR program as .json (Paddle 2 wrote .pdmodel)
    assert sorted(os.listdir(folder)) == ["inference.json", "inference.pdiparams", "model.safetensors",
                                          "preprocess.json"]
    with open(exported["logits"]["metadata"]) as stream:
        metadata = json.load(stream)
    assert metadata["model_name"] == "vit_walkthrough" and metadata["class_names"] == ["0", "1", "2", "3"]
    with open(os.path.join(folder, "inference.json")) as stream:
        program = stream.read()
    # the CPU fast path's Linear computes addmm; a traced graph must carry Paddle's linear/matmul instead
    assert "addmm" not in program and ("matmul" in program or "linear" in program)
    # the traced CPU attention takes q, k, v from slices of the qkv weights (variants.TracedCpuAttention):
    # no unbind, which oneDNN has no bfloat16 kernel for and which cost bf16 10-20% (docs/benchmarks.md)
    assert '"1.unbind"' not in program and '"1.slice"' in program
    assert metadata["output"] == "logits" and metadata["input_shape"] == [-1, 3, 14, 14]
    preprocess = metadata["preprocess"]
    assert (preprocess["image_size"], preprocess["resize_size"], preprocess["center_crop"]) == (14, 16, 14)
    assert preprocess["resize"] == "shorter_side" and preprocess["interpolation"] == "bicubic"
    assert preprocess["mean"] == [0.485, 0.456, 0.406] and preprocess["std"] == [0.229, 0.224, 0.225]
    # the safetensors file alone rebuilds the model
    model = ViT(ViTConfig(**metadata["model_config"]))
    load_pretrained(model, exported["logits"]["weights"])
    model.eval()
    batch = random_batch(2)
    np.testing.assert_allclose(model(paddle.to_tensor(batch)).numpy(), classifier.outputs(batch), atol=1e-6)


@pytest.mark.slow  # four traces: 5-8 s
def test_a_trace_converts_each_function_once_and_gives_paddles_own_graph(tmp_path, monkeypatch):
    """Paddle 3.3 converts a method again for each layer and each trace (its cache is keyed by a
    bound method that dies with the call); save_traced keeps one conversion per function: a second
    model's trace converts nothing and computes that model, the graph is Paddle's own (but for the
    names that number the layers a process made before) and the parameters are byte for byte;
    Paddle's cache is its own again after."""
    import re
    from paddle.jit.dy2static.program_translator import FunctionCache
    from paddle_vit import create_model, paddle_versions
    from paddle_vit.deploy import tracing
    conversions, convert, own = [], FunctionCache._convert, FunctionCache.convert_with_cache
    monkeypatch.setattr(FunctionCache, "_convert", lambda cache, function: conversions.append(function)
                        or convert(cache, function))
    small = {key: value for key, value in SMALL_MODEL.items() if key != "name"}

    def trace(name, seed=0):  # how many functions the trace of a new model (weights from `seed`) converted
        paddle.seed(seed)
        del conversions[:]
        models[name] = create_model("vit_walkthrough", **small).eval()
        tracing.save_traced(models[name], str(tmp_path / name))
        return len(conversions)
    models = {}

    release = paddle_versions.running_release
    monkeypatch.setattr(paddle_versions, "running_release", lambda: "3.9")  # a release the entry is not for
    assert trace("paddles") > 0 and trace("paddles_again") > 0  # Paddle's own converts again
    monkeypatch.setattr(paddle_versions, "running_release", release)
    trace("kept")
    assert trace("kept_again", seed=1) == 0
    assert FunctionCache.convert_with_cache is own
    # the conversions kept serve the second model itself, not the first one's layers
    image = paddle.to_tensor(np.random.default_rng(0).standard_normal((2, 3, 14, 14)).astype(np.float32))
    np.testing.assert_allclose(paddle.jit.load(str(tmp_path / "kept_again"))(image).numpy(),
                               models["kept_again"](image).numpy(), rtol=1e-5, atol=1e-6)

    def graph(name):  # the program, unnumbered the names that count the layers a process made before
        with open(tmp_path / f"{name}.json") as stream:  # /TraceableViT_3/ -> /TraceableViT/, linear_8.b_0 -> linear.b
            text = re.sub(r"(/[A-Za-z]\w*?)_\d+(?=/)", r"\1", stream.read())
        return re.sub(r"\b([a-z][a-z0-9]*(?:_[a-z][a-z0-9]*)*)_\d+\.([a-z])_\d+\b", r"\1.\2", text)
    assert graph("kept") == graph("kept_again") == graph("paddles")
    with open(tmp_path / "kept.pdiparams", "rb") as ours, open(tmp_path / "paddles.pdiparams", "rb") as theirs:
        assert ours.read() == theirs.read()


@pytest.mark.slow  # six traces: 3-5 s
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_a_to_static_graph_converts_each_function_once_and_computes_its_own_model(monkeypatch, mode):
    """eval.engine=to_static, train.to_static and the benchmark's to_static run `to_static_graph`:
    a second model's first call (its trace) converts nothing where Paddle's own cache converts
    again, and each graph computes its own model as eagerly (in training, its own gradients too);
    Paddle's cache is its own again after each call."""
    from paddle.jit.dy2static.program_translator import FunctionCache
    from paddle_vit import create_model, paddle_versions
    from paddle_vit.deploy.tracing import to_static_graph
    from paddle_vit.variants import use_traceable_variants
    conversions, convert, own = [], FunctionCache._convert, FunctionCache.convert_with_cache
    monkeypatch.setattr(FunctionCache, "_convert", lambda cache, function: conversions.append(function)
                        or convert(cache, function))
    small = {key: value for key, value in SMALL_MODEL.items() if key != "name"}
    image = paddle.to_tensor(np.random.default_rng(0).standard_normal((2, 3, 14, 14)).astype(np.float32))

    def first_call(seed):  # (conversions of a new model's graph's first call, its output and a gradient, eager's)
        paddle.seed(seed)
        model = create_model("vit_walkthrough", **small)
        model.train() if mode == "train" else model.eval()
        use_traceable_variants(model)

        def run(network):
            logits = network(image)
            if mode == "train":
                (logits * logits).mean().backward()
                gradient = model.head.weight.grad.numpy().copy()
                model.clear_gradients()
                return logits.numpy(), gradient
            return logits.numpy(), None
        eager = run(model)
        graph = to_static_graph(model)
        del conversions[:]
        traced = run(graph)
        assert FunctionCache.convert_with_cache is own
        for ours, eagers in zip(traced, eager):
            if ours is not None:
                np.testing.assert_allclose(ours, eagers, rtol=1e-5, atol=1e-6)
        return len(conversions)

    release = paddle_versions.running_release
    monkeypatch.setattr(paddle_versions, "running_release", lambda: "3.9")  # a release the entry is not for
    assert first_call(0) > 0 and first_call(1) > 0  # Paddle's own converts again
    monkeypatch.setattr(paddle_versions, "running_release", release)
    first_call(2)
    assert first_call(3) == 0


@pytest.mark.slow
def test_export_tool_replaces_an_older_export_as_a_whole(trained, exported, capsys):
    out = trained["root"] / "export_tool"
    shutil.copytree(os.path.dirname(exported["logits"]["metadata"]), out)
    (out / "model.onnx").write_bytes(b"stale, from an older export with ONNX")
    code, lines, errors = run_tool(EXPORT, ["--weights", trained["checkpoint"], "--out", out, "--softmax"], capsys)
    assert code == 0, errors
    assert sorted(os.listdir(out)) == ["inference.json", "inference.pdiparams", "model.safetensors",
                                       "preprocess.json"]
    assert json.loads((out / "preprocess.json").read_text())["output"] == "probabilities"
    # no staging folder left, inside the export (where it is made) or beside it
    assert not [name for name in os.listdir(out) + os.listdir(out.parent) if ".export-" in name]
    assert any(line.startswith("predict with:") for line in lines)


def test_export_never_mixes_with_a_folder_that_is_not_an_export(trained, tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    code, lines, errors = run_tool(EXPORT, ["--weights", trained["checkpoint"], "--out", tmp_path / "notes"], capsys)
    assert code == 2 and "holds files that are not an export" in errors[0]
    assert os.listdir(tmp_path / "notes") == ["todo.txt"]
    (tmp_path / "a_file").write_text("x")
    code, lines, errors = run_tool(EXPORT, ["--weights", trained["checkpoint"], "--out", tmp_path / "a_file"], capsys)
    assert code == 2 and "is a file; expected a folder" in errors[0]


@pytest.fixture(scope="module")
def onnx_export(trained, classifier):
    """The trained model exported as ONNX alone, when the optional extra is installed."""
    pytest.importorskip("paddle2onnx", reason="ONNX export needs the optional extra: pip install -e '.[onnx]'")
    pytest.importorskip("onnxruntime", reason="running ONNX needs the optional extra: pip install -e '.[onnx]'")
    with kept_logger():
        return export_classifier(classifier, trained["root"] / "export_onnx", formats=("onnx",))


@pytest.mark.slow
def test_onnx_export_matches_the_dynamic_model(classifier, onnx_export):
    assert set(onnx_export) == {"onnx", "weights", "metadata"}
    model = load_export(os.path.dirname(onnx_export["onnx"]))
    assert model.backend == "onnxruntime"
    for size in (1, 3):
        batch = random_batch(size, seed=10 + size)
        np.testing.assert_allclose(model.outputs(batch), classifier.outputs(batch), atol=1e-4, rtol=0)
    import onnx
    properties = {entry.key: entry.value for entry in onnx.load(onnx_export["onnx"]).metadata_props}
    assert json.loads(properties["paddle_vit"])["class_names"] == ["0", "1", "2", "3"]


@pytest.mark.slow
def test_bf16_of_an_export_without_a_paddle_model_is_refused_not_run_in_fp32(onnx_export):
    from paddle_vit.errors import ExportError

    with pytest.raises(ExportError, match=r"holds no Paddle inference model .*precision bf16 runs it on oneDNN"):
        load_export(os.path.dirname(onnx_export["onnx"]), InferenceOptions(precision="bf16"))


@pytest.mark.slow
def test_exports_compute_with_the_models_epsilon_gelu_and_qk_scale(tmp_path, monkeypatch):
    """A model with the options other codes compute with (Hugging Face's epsilon, the JAX tanh
    GELU, PaddleClas's q.k scale): the Paddle inference model and the ONNX model give its
    logits, which differ from the same weights computed with the defaults."""
    from paddle_vit.config import DataConfig
    from paddle_vit.preprocess import Preprocess
    from paddle_vit.deploy.predict import Classifier

    options = dict(layer_norm_epsilon=1e-3, gelu="tanh", qk_scale=0.9, qkv_bias=False)
    paddle.seed(5)
    model = ViT(ViTConfig(image_size=14, patch_size=7, embed_dim=16, depth=2, num_heads=2, num_classes=3, **options))
    with paddle.no_grad():
        for parameter in model.parameters():
            parameter.set_value(parameter + paddle.randn(parameter.shape) * 0.5)
    model.eval()
    default = ViT(ViTConfig(**dict(vars(model.config), layer_norm_epsilon=1e-6, gelu="exact", qk_scale=None)))
    default.set_state_dict(model.state_dict())
    default.eval()
    batch = random_batch(2, seed=7)
    with paddle.no_grad():
        eager, with_defaults = model(paddle.to_tensor(batch)).numpy(), default(paddle.to_tensor(batch)).numpy()
    assert np.abs(eager - with_defaults).max() > 1e-3
    formats = ("paddle", "onnx") if importlib.util.find_spec("paddle2onnx") and importlib.util.find_spec(
        "onnxruntime") else ("paddle",)
    classifier = Classifier.for_model(model, Preprocess.from_config(DataConfig(), 14), None, "custom")
    with kept_logger():
        export_classifier(classifier, tmp_path / "export", formats=formats)
    for backend in ("paddle", "onnxruntime")[:len(formats)]:
        outputs = load_export(tmp_path / "export", backend=backend).outputs(batch)
        np.testing.assert_allclose(outputs, eager, atol=1e-4, rtol=0, err_msg=backend)
    if len(formats) == 2:  # auto: the export's model.onnx where onnxruntime is the fastest on this CPU
        from paddle_vit.deploy import inference
        for preferred, backend in (("onnxruntime", "onnxruntime"), ("predictor", "paddle")):
            monkeypatch.setattr(inference, "default_engine", lambda *args, _engine=preferred, **kwargs: (_engine, ""))
            assert load_export(tmp_path / "export").backend == backend
        assert load_export(tmp_path / "export", InferenceOptions(mkldnn=False)).backend == "paddle"
        onnx_file = tmp_path / "export" / "model.onnx"  # a damaged model.onnx auto took: the way out is named
        onnx_file.write_bytes(onnx_file.read_bytes()[:1000])
        monkeypatch.setattr(inference, "default_engine", lambda *args, **kwargs: ("onnxruntime", ""))
        from paddle_vit.errors import ExportError
        with pytest.raises(ExportError, match="cannot load .*; --backend paddle runs the export's Paddle model"):
            load_export(tmp_path / "export")


@pytest.mark.slow
def test_a_paddle2onnx_crash_is_one_error_not_an_abort(tmp_path):
    """paddle2onnx aborts the process (SIGABRT) on what it cannot convert; export runs it in a
    child process, so the caller gets an ExportError and lives on."""
    pytest.importorskip("paddle2onnx", reason="ONNX export needs the optional extra: pip install -e '.[onnx]'")
    from paddle_vit.deploy.onnx_export import convert_with_paddle2onnx
    from paddle_vit.errors import ExportError
    (tmp_path / "inference.json").write_text('{"base_code": {"magic": "pir"}, "program": {}}')
    (tmp_path / "inference.pdiparams").write_bytes(b"")
    with pytest.raises(ExportError, match="paddle2onnx .* could not convert the model"):
        convert_with_paddle2onnx(str(tmp_path / "inference.json"), str(tmp_path / "inference.pdiparams"),
                                 str(tmp_path / "model.onnx"), 13)
    assert not (tmp_path / "model.onnx").exists()


@pytest.mark.slow  # exports through paddle2onnx in a child process
@pytest.mark.parametrize("calibration", [None, 16])
def test_export_quantize_int8_writes_the_int8_model_and_its_accuracy_gate(trained, classifier, calibration, capsys):
    pytest.importorskip("paddle2onnx", reason="ONNX export needs the optional extra: pip install -e '.[onnx]'")
    pytest.importorskip("onnxruntime.quantization", reason="int8 needs the optional extra: pip install -e '.[onnx]'")
    from paddle_vit.deploy.quantize import recipe_images

    out = trained["root"] / f"int8_{calibration}"
    argv = ["--weights", trained["checkpoint"], "--out", out, "--quantize", "int8"]
    code, lines, _ = run_tool(EXPORT, argv + (["--calibration", calibration] if calibration else []), capsys)
    assert code == 0
    assert sorted(os.listdir(out)) == ["model.int8.onnx", "model.onnx", "model.safetensors", "preprocess.json"]
    int8 = json.loads((out / "preprocess.json").read_text())["int8"]
    assert int8["mode"] == ("static" if calibration else "dynamic") and int8["quantized_nodes"] > 0
    # the gate ran over the recipe's 8 val images; its fp32 top-1 is the dynamic model's
    batches, labels, _ = recipe_images(classifier.config.data, classifier.preprocess, 14, "val")
    top1 = float((np.concatenate([classifier.outputs(batch) for batch in batches]).argmax(1) == labels).mean())
    gate = int8["gate"]
    assert gate["images"] == len(labels) == 8 and gate["top1_fp32"] == pytest.approx(top1)
    assert 0 < gate["max_logit_difference"] < 0.5 and 0 <= gate["top1_agreement"] <= 1
    assert any(line.startswith(f"int8 ({int8['mode']}) vs fp32 on 8 images") for line in lines)


@pytest.mark.slow  # exports through paddle2onnx in a child process
def test_export_int8_gate_on_given_images_compares_without_labels(trained, images, capsys):
    pytest.importorskip("onnxruntime.quantization", reason="int8 needs the optional extra: pip install -e '.[onnx]'")
    out = trained["root"] / "int8_images"
    code, lines, _ = run_tool(EXPORT, ["--weights", trained["checkpoint"], "--out", out, "--quantize", "int8",
                                       "--calibration", "2", "--gate-images", images], capsys)
    assert code == 0
    gate = json.loads((out / "preprocess.json").read_text())["int8"]["gate"]
    assert gate["images"] == 2 and "top1_fp32" not in gate  # alpha.png and gray.jpg; the corrupt one skipped
    assert any(line.startswith("int8 (static) vs fp32 on 2 images") for line in lines)


def test_export_int8_options_without_quantize_or_a_calibration_below_one_are_refused(trained, capsys):
    for extra in (["--calibration", "8"], ["--quantize", "int8", "--calibration", "0"], ["--gate-images", "x"],
                  ["--opset", "13"]):
        code, _, errors = run_tool(EXPORT, ["--weights", trained["checkpoint"], "--out", trained["root"] / "no_int8",
                                            *extra], capsys)
        assert code == 2 and len(errors) == 1, errors
        assert errors[0].startswith((f"error: {extra[-2]} ", f"error: argument {extra[-2]}: ")), errors
    assert not (trained["root"] / "no_int8").exists()


def test_an_int8_gate_of_unreadable_images_is_refused_not_left_out(trained, tmp_path, capsys):
    """--gate-images asks for a gate: when none of its images can be read, the export stops in one
    line (it once wrote the int8 model with "no accuracy gate")."""
    pytest.importorskip("paddle2onnx", reason="the int8 export needs the optional extra: pip install -e '.[onnx]'")
    (tmp_path / "broken.png").write_text("not an image")
    out = trained["root"] / "int8_unreadable"
    code, _, errors = run_tool(EXPORT, ["--weights", trained["checkpoint"], "--out", out, "--quantize", "int8",
                                        "--gate-images", tmp_path / "broken.png"], capsys)
    assert code == 2 and len(errors) == 1 and errors[0].startswith("error: --gate-images: none of the images"), errors
    assert not out.exists()


def test_onnx_export_without_paddle2onnx_says_what_to_install(trained, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "paddle2onnx", None)  # import paddle2onnx raises ImportError
    code, lines, errors = run_tool(EXPORT, ["--weights", trained["checkpoint"], "--out", trained["root"] / "no_onnx",
                                            "--format", "onnx"], capsys)
    assert code == 2 and len(errors) == 1
    assert errors[0].startswith("error: ") and 'pip install -e ".[onnx]"' in errors[0]
    assert not (trained["root"] / "no_onnx").exists()


def test_legacy_pdmodel_export_is_found_and_run(trained, exported, tmp_path):
    """Paddle 2 (and Paddle 3 with FLAGS_enable_pir_api=0) saved the program as .pdmodel."""
    folder = tmp_path / "legacy"
    paddle.enable_static()
    try:
        with paddle.pir_utils.OldIrGuard():
            main, startup = paddle.static.Program(), paddle.static.Program()
            with paddle.static.program_guard(main, startup):
                image = paddle.static.data("image", [None, 3, 14, 14], "float32")
                logits = paddle.static.nn.fc(paddle.flatten(image, 1), 4)
            executor = paddle.static.Executor(paddle.CPUPlace())
            executor.run(startup)
            paddle.static.save_inference_model(str(folder / "inference"), [image], [logits], executor, program=main)
            batch = random_batch(3)
            expected = executor.run(main, feed={"image": batch}, fetch_list=[logits])[0]
    finally:
        paddle.disable_static()
    with open(exported["logits"]["metadata"]) as stream:
        metadata = json.load(stream)
    metadata["files"] = {}  # found by name
    (folder / "preprocess.json").write_text(json.dumps(metadata))
    assert find_paddle_model(str(folder))[0].endswith("inference.pdmodel")
    np.testing.assert_allclose(load_export(folder).outputs(batch), expected, atol=1e-5)


# ---- predict -----------------------------------------------------------------------------------

def test_predict_folder_skips_a_corrupt_file_with_one_warning(trained, images, capsys):
    code, lines, errors = run_tool(PREDICT, ["--weights", trained["checkpoint"], images, "--topk", 2], capsys)
    assert code == 0
    assert len(errors) == 1 and errors[0].startswith("warning: ") and "corrupt.jpg" in errors[0]
    expected_files = [str(images / "alpha.png")] * 2 + [str(images / "sub" / "gray.jpg")] * 2
    assert [line.split("  ")[0] for line in lines] == expected_files  # sorted, the text file ignored
    for first, second in (lines[0:2], lines[2:4]):
        (_, label_1, probability_1), (_, label_2, probability_2) = first.split("  "), second.split("  ")
        assert {label_1, label_2} <= {"0", "1", "2", "3"} and label_1 != label_2
        assert 1 >= float(probability_1) >= float(probability_2) >= 0


def test_predict_applies_the_configs_eval_transform(trained, classifier, images, capsys):
    code, lines, _ = run_tool(PREDICT, ["--weights", trained["weights"], "-c", trained["config"], "--json",
                                        "--topk", 4, "--batch-size", 1, images / "alpha.png", images / "sub"], capsys)
    assert code == 0
    predicted = json_predictions(lines)
    config = load_config(str(trained["config"]))
    transform = build_transforms(config.data, 14, train=False)  # shorter side 16, centre crop 14, ImageNet stats
    for name, path in (("alpha.png", images / "alpha.png"), ("gray.jpg", images / "sub" / "gray.jpg")):
        expected = softmax(classifier.outputs(transform(decode_image(str(path)), None)[None]))[0]
        got = {p["index"]: p["probability"] for p in predicted[name]}
        np.testing.assert_allclose([got[i] for i in range(4)], expected, atol=1e-6)


def test_predict_follows_exif_orientation(trained, classifier, tmp_path, capsys):
    pixels = np.random.default_rng(3).integers(0, 256, (18, 30, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "plain.jpg", quality=95)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown rotated 90 degrees clockwise
    Image.fromarray(pixels).save(tmp_path / "rotated.jpg", quality=95, exif=exif.tobytes())
    code, lines, _ = run_tool(PREDICT, ["--weights", trained["checkpoint"], "--json", "--topk", 4,
                                        tmp_path / "rotated.jpg"], capsys)
    assert code == 0
    upright = Image.open(tmp_path / "plain.jpg").convert("RGB").transpose(Image.Transpose.ROTATE_270)
    expected = classifier(classifier.preprocess.transform()(upright, None)[None])[0]
    got = {p["index"]: p["probability"] for p in json_predictions(lines)["rotated.jpg"]}
    np.testing.assert_allclose([got[i] for i in range(4)], expected, atol=1e-6)


def test_predict_with_model_name_uses_the_default_eval_transform(trained, exported, classifier, images, capsys):
    weights = exported["logits"]["weights"]
    code, lines, _ = run_tool(PREDICT, ["--weights", weights, *MODEL_FLAGS, "--json", "--topk", 4,
                                        images / "alpha.png"], capsys)
    assert code == 0
    transform = build_transforms(DataConfig(), 14, train=False)  # plain resize, mean = std = 0.5
    expected = softmax(classifier.outputs(transform(decode_image(str(images / "alpha.png")), None)[None]))[0]
    got = {p["index"]: p["probability"] for p in json_predictions(lines)["alpha.png"]}
    np.testing.assert_allclose([got[i] for i in range(4)], expected, atol=1e-6)
    assert {p["label"] for p in json_predictions(lines)["alpha.png"]} == {"0", "1", "2", "3"}  # no names: indices


@pytest.mark.parametrize("backend", ["paddle", pytest.param("onnxruntime", marks=pytest.mark.slow)])  # slow: paddle2onnx
def test_predict_inference_model_equals_predict_weights(trained, exported, images, capsys, backend, request):
    folder = os.path.dirname(exported["softmax"]["metadata"])  # softmax in the graph
    if backend == "onnxruntime":
        folder = os.path.dirname(request.getfixturevalue("onnx_export")["onnx"])  # logits, softmax by the predictor
    code, lines, errors = run_tool(PREDICT, ["--weights", trained["checkpoint"], images, "--json", "--topk", 3],
                                   capsys)
    code_exported, lines_exported, errors_exported = run_tool(
        PREDICT, ["--inference-model", folder, "--backend", backend, images, "--json", "--topk", 3], capsys)
    assert code == code_exported == 0 and len(errors) == len(errors_exported) == 1
    dynamic, deployed = json_predictions(lines), json_predictions(lines_exported)
    assert sorted(dynamic) == sorted(deployed) == ["alpha.png", "gray.jpg"]
    tolerance = 1e-5 if backend == "paddle" else 1e-4
    for name in dynamic:
        assert dynamic[name][0]["label"] == deployed[name][0]["label"]
        np.testing.assert_allclose([p["probability"] for p in deployed[name]],
                                   [p["probability"] for p in dynamic[name]], atol=tolerance)


def test_labels_file_names_the_classes(trained, exported, images, tmp_path, capsys):
    labels = tmp_path / "labels.txt"
    labels.write_text("cat\ndog\nbird\nfish\n")
    folder = os.path.dirname(exported["logits"]["metadata"])
    code, lines, _ = run_tool(PREDICT, ["--inference-model", folder, "--labels", labels, "--topk", 1,
                                        images / "alpha.png"], capsys)
    assert code == 0 and len(lines) == 1 and lines[0].split("  ")[1] in {"cat", "dog", "bird", "fish"}
    labels.write_text("cat\ndog\n")
    code, lines, errors = run_tool(PREDICT, ["--inference-model", folder, "--labels", labels, images], capsys)
    assert code == 2 and errors == [f"error: labels file {labels} names 2 classes but the model has 4 outputs"]


def test_bad_input_exits_2_with_one_error_line(trained, images, tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    cases = [
        (PREDICT, ["--weights", tmp_path / "missing.pdparams", "-c", trained["config"], images], "does not exist"),
        (PREDICT, ["--weights", trained["checkpoint"], tmp_path / "missing.jpg"], "missing.jpg does not exist"),
        (PREDICT, ["--weights", trained["checkpoint"], images / "corrupt.jpg"], "could be read"),
        (PREDICT, ["--inference-model", tmp_path, images], "no preprocess.json"),
        (EXPORT, ["--weights", trained["checkpoint"], "--out", blocker / "export"], "cannot write the export"),
    ]
    for tool, argv, message in cases:
        code, _, errors = run_tool(tool, argv, capsys)
        errors = [line for line in errors if not line.startswith("warning: ")]
        assert code == 2 and len(errors) == 1, (argv, errors)
        assert errors[0].startswith("error: ") and message in errors[0], (argv, errors)


@pytest.mark.slow
def test_command_line_error_has_no_traceback(images, tmp_path):
    result = subprocess.run([sys.executable, os.path.join(TOOLS, "predict.py"), "--weights",
                             str(tmp_path / "missing.pdparams"), "--model", "vit_walkthrough", str(images)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [f"error: weights file {tmp_path / 'missing.pdparams'} does not exist"]


@pytest.mark.slow
def test_the_deploy_package_never_imports_the_engines_trainer_or_evaluator():
    """The engine may use deploy (eval.py's predictor), never the reverse: no import circle."""
    script = ("import sys\n"
              "import paddle_vit.deploy.predict, paddle_vit.deploy.inference, paddle_vit.deploy.export\n"
              "print(sorted(name for name in sys.modules if name in ('paddle_vit.engine.trainer', "
              "'paddle_vit.engine.evaluator')))\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"
