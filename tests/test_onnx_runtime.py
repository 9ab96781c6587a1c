"""ONNX Runtime as an engine: eval (eval.engine onnxruntime, eval.precision int8), predict
(--backend onnxruntime and --precision int8 for --weights runs), the benchmark (--engine
onnxruntime --dtype int8, the int8 GEMM limit, the side-by-side table) and their one-line
refusals. A tiny model with random weights: each engine is checked against another one computing
the same function, never against a speed."""
import json
import os
import sys

import numpy as np
import paddle
import pytest

pytest.importorskip("onnxruntime", reason="the onnxruntime engine needs the optional extra: pip install -e '.[onnx]'")
pytest.importorskip("paddle2onnx", reason="the on-the-fly export needs the optional extra: pip install -e '.[onnx]'")

from paddle_vit import ViT  # noqa: E402
from paddle_vit import bench  # noqa: E402
from paddle_vit.bench import limits as bench_limits  # noqa: E402
from paddle_vit.deploy.inference import EngineModel, engine_for_model  # noqa: E402

from repo_paths import load_tool  # noqa: E402
from test_deploy import kept_logger, run_tool  # noqa: E402

EVAL, PREDICT, BENCHMARK, EXPORT = (load_tool(name) for name in ("eval", "predict", "benchmark", "export"))
TINY = {"image_size": 16, "patch_size": 4, "embed_dim": 32, "depth": 2, "num_heads": 2, "num_classes": 4}
MODEL_FLAGS = ["--model", "vit_tiny_patch16_224"] + [arg for key, value in TINY.items()
                                                     for arg in ("-o", f"model.{key}={value}")]
DATA_FLAGS = ["-o", "data.dataset=synthetic", "-o", "data.synthetic_val_size=24", "-o", "data.synthetic_classes=4",
              "-o", "eval.batch_size=8", "-o", "train.device=cpu"]


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """Random weights of the tiny model (with non-trivial biases and norms), saved as .pdparams."""
    paddle.seed(3)
    model = ViT(**TINY)
    for parameter in model.parameters():  # biases and LayerNorm weights away from 0 and 1
        parameter.set_value(paddle.randn(parameter.shape) * 0.3)
    path = tmp_path_factory.mktemp("onnx_runtime") / "tiny.pdparams"
    paddle.save(model.state_dict(), str(path))
    return {"path": path, "model": model}


_EVALUATED = {}  # each onnxruntime evaluation exports the model: the same one is run once per session


def evaluate(capsys, weights, *overrides):
    if overrides not in _EVALUATED:
        code, lines, errors = run_tool(EVAL, ["--weights", weights["path"], *MODEL_FLAGS, *DATA_FLAGS, *overrides],
                                       capsys)
        assert code == 0, errors
        _EVALUATED[overrides] = json.loads(lines[-1])
    return _EVALUATED[overrides]


@pytest.mark.slow  # exports through paddle2onnx in a child process
def test_eval_with_onnxruntime_gives_the_predictors_top1_and_loss(capsys, weights):
    predictor = evaluate(capsys, weights, "-o", "eval.engine=predictor")
    onnx = evaluate(capsys, weights, "-o", "eval.engine=onnxruntime")
    assert onnx["num_samples"] == predictor["num_samples"] == 24
    assert onnx["top1"] == predictor["top1"] and onnx["top5"] == predictor["top5"]
    assert onnx["loss"] == pytest.approx(predictor["loss"], rel=1e-5)
    assert onnx["precision"] == "fp32"


@pytest.mark.slow  # exports through paddle2onnx in a child process
def test_eval_int8_runs_through_onnxruntime_and_stays_close(capsys, weights):
    fp32 = evaluate(capsys, weights, "-o", "eval.engine=onnxruntime")
    int8 = evaluate(capsys, weights, "-o", "eval.engine=onnxruntime", "-o", "eval.precision=int8")
    assert int8["precision"] == "int8" and int8["num_samples"] == 24
    assert abs(int8["top1"] - fp32["top1"]) <= 2 / 24  # two images of 24 may flip on a random model
    assert int8["loss"] == pytest.approx(fp32["loss"], rel=0.05)
    assert int8["loss"] != fp32["loss"]  # it did run quantized


@pytest.mark.slow  # exports through paddle2onnx in a child process (quantize_onnx itself: test_onnx_export)
def test_int8_session_quantizes_the_encoders_products_and_keeps_the_logits_close(weights):
    images = paddle.to_tensor(np.random.default_rng(0).standard_normal((6, 3, 16, 16)).astype("float32"))
    weights["model"].eval()
    with paddle.no_grad():
        eager = weights["model"](images).numpy()
    int8 = EngineModel(engine_for_model(weights["model"], "onnxruntime", "int8"))  # fp32: the eval and predict tests
    quantized = int8(images).numpy()
    assert np.abs(quantized - eager).max() < 0.1 * np.abs(eager).max()
    report = int8.engine.report["quantize"]
    assert report["mode"] == "dynamic" and len(report["quantized"]) >= 4 * TINY["depth"]  # qkv, proj, fc1, fc2
    assert weights["model"].training is False  # the export left the model as it was


def predictions(capsys, weights, images, *options):
    code, lines, errors = run_tool(PREDICT, ["--weights", weights["path"], *MODEL_FLAGS, "--json", "--topk", "4",
                                             *options, images], capsys)
    assert code == 0, errors
    return {os.path.basename(record["file"]): {p["index"]: p["probability"] for p in record["predictions"]}
            for record in map(json.loads, lines)}


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    from PIL import Image
    folder = tmp_path_factory.mktemp("onnx_images")
    rng = np.random.default_rng(1)
    for index in range(3):
        Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(folder / f"image{index}.png")
    return folder


@pytest.mark.slow  # exports through paddle2onnx in a child process
def test_predict_weights_with_onnxruntime_equals_the_paddle_model(capsys, weights, images):
    eager = predictions(capsys, weights, images)
    onnx = predictions(capsys, weights, images, "--backend", "onnxruntime")
    assert eager.keys() == onnx.keys() and len(eager) == 3
    for name in eager:
        assert eager[name].keys() == onnx[name].keys()
        for index, probability in eager[name].items():
            assert onnx[name][index] == pytest.approx(probability, abs=1e-5)
    int8 = predictions(capsys, weights, images, "--precision", "int8")  # int8 is onnxruntime's
    for name in eager:
        for index, probability in eager[name].items():
            assert int8[name][index] == pytest.approx(probability, abs=0.05)


@pytest.mark.slow  # exports through paddle2onnx in a child process
def test_predict_int8_of_an_export_runs_its_int8_file_as_weights_quantized_on_the_fly(capsys, weights, images,
                                                                                     tmp_path):
    out = tmp_path / "export"
    code, _, errors = run_tool(EXPORT, ["--weights", weights["path"], *MODEL_FLAGS, "--out", out, "--quantize", "int8",
                                        "--gate-images", images], capsys)
    assert code == 0, errors
    code, lines, errors = run_tool(PREDICT, ["--inference-model", out, "--json", "--topk", "4", "--precision", "int8",
                                             images], capsys)
    assert code == 0, errors
    exported = {os.path.basename(record["file"]): {p["index"]: p["probability"] for p in record["predictions"]}
                for record in map(json.loads, lines)}
    on_the_fly = predictions(capsys, weights, images, "--precision", "int8")  # the same graph, quantized the same way
    assert exported.keys() == on_the_fly.keys()
    for name in exported:
        for index, probability in on_the_fly[name].items():
            assert exported[name][index] == pytest.approx(probability, abs=1e-6)
    (out / "model.int8.onnx").unlink()
    code, _, errors = run_tool(PREDICT, ["--inference-model", out, "--precision", "int8", images], capsys)
    assert code == 2 and len(errors) == 1
    assert errors[0].startswith(f"error: {out} holds no model.int8.onnx: precision int8 runs the quantized ONNX model")


@pytest.mark.slow  # exports through paddle2onnx in a child process
def test_benchmark_onnxruntime_int8_runs_and_reports_the_quantized_graph(capsys):
    capsys.readouterr()
    with kept_logger():
        assert BENCHMARK.main(["vit_tiny_patch16_224", *[arg for key, value in TINY.items()
                                                         for arg in ("-o", f"model.{key}={value}")],
                               "--engine", "onnxruntime", "--dtype", "int8", "--batch-size", "2", "--warmup", "1",
                               "--iters", "1", "--rounds", "2", "--threads", "1", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["engine"] == "onnxruntime" and result["dtype"] == "int8" and result["threads"] == 1
    assert result["paddle"]["images_per_sec"]["median"] > 0 and result["paddle"]["iterations"] == 2
    assert result["onnx"]["opset"] == 17 and result["onnx"]["quantize"]["quantized"] >= 8
    assert result["flops_per_image"] == 2 * ViT(**TINY).config.count_macs()
    assert "int8 (dynamic): " in bench.format_report(result)


def test_the_int8_gemm_graph_computes_the_integer_product_and_the_limits_are_measured():
    import onnxruntime
    session = onnxruntime.InferenceSession(bench_limits._matrix_product_graph(64, int8=True),
                                           providers=["CPUExecutionProvider"])
    x = np.random.default_rng(2).integers(0, 256, (64, 64), dtype=np.uint8)
    weight = np.random.default_rng(0).integers(-64, 64, (64, 64), dtype=np.int8)  # as the graph draws it
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x.astype(np.int32) @ weight.astype(np.int32))
    limits = bench.onnxruntime_gemm_limits(128, 2, 1)
    assert limits["fp32_onnxruntime_gflops"] > 0 and limits["int8_onnxruntime_gops"] > 0
    assert bench.machine_limit({"fp32_eager_gflops": 3.0, "fp32_predictor_gflops": 5.0,
                                "int8_onnxruntime_gops": 9.0}, "fp32") == 5.0
    assert bench.machine_limit({"bf16_predictor_gflops": None}, "bf16") is None


@pytest.mark.parametrize("tool, argv, message", [
    (EVAL, ["-o", "eval.engine=predictor", "-o", "eval.precision=int8"],
     "error: eval.precision=int8 runs on onnxruntime (eval.engine=onnxruntime), not eval.engine=predictor"),
    (EVAL, ["-o", "eval.engine=onnxruntime", "-o", "eval.precision=bf16"],
     "error: eval.precision=bf16 runs on the predictor (eval.engine=predictor), not eval.engine=onnxruntime"),
    (PREDICT, ["--backend", "onnxruntime", "--precision", "bf16"],
     "error: --precision bf16 is paddle.inference's oneDNN path; with --backend onnxruntime use fp32 or int8"),
    (BENCHMARK, ["--engine", "predictor", "--dtype", "int8"],
     "error: --dtype int8 runs on onnxruntime (--engine onnxruntime"),
    (BENCHMARK, ["--engine", "onnxruntime", "--mode", "train"],
     "error: --engine onnxruntime runs inference only, not mode 'train'"),
    (BENCHMARK, ["--side-by-side"], "error: --side-by-side compares every inference path with timm"),
])
def test_a_wrong_engine_or_precision_is_one_error_line(capsys, weights, images, tool, argv, message):
    if tool is EVAL:
        argv = ["--weights", weights["path"], *MODEL_FLAGS, *DATA_FLAGS, *argv]
    elif tool is PREDICT:
        argv = ["--weights", weights["path"], *MODEL_FLAGS, *argv, images]
    else:
        argv = ["vit_tiny_patch16_224", "-o", "model.depth=1", *argv]
    code, lines, errors = run_tool(tool, argv, capsys)
    assert code == 2 and len(errors) == 1 and errors[0].startswith(message), errors


@pytest.mark.parametrize("tool, argv", [
    (EVAL, ["-o", "eval.engine=onnxruntime"]),
    (PREDICT, ["--precision", "int8"]),
    (BENCHMARK, ["--engine", "onnxruntime", "--dtype", "int8"]),
])
def test_onnxruntime_missing_is_one_line_naming_the_extra(capsys, monkeypatch, weights, images, tool, argv):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import onnxruntime raises ImportError
    if tool is EVAL:
        argv = ["--weights", weights["path"], *MODEL_FLAGS, *DATA_FLAGS, *argv]
    elif tool is PREDICT:
        argv = ["--weights", weights["path"], *MODEL_FLAGS, *argv, images]
    else:
        argv = ["vit_tiny_patch16_224", "-o", "model.depth=1", "--batch-size", "1", *argv]
    code, lines, errors = run_tool(tool, argv, capsys)
    assert code == 2 and len(errors) == 1, errors
    assert errors[0].startswith("error: ") and "needs onnxruntime" in errors[0] and '".[onnx]"' in errors[0]


@pytest.mark.skipif(not os.environ.get("PADDLE_VIT_TORCH_PYTHON"),
                    reason="set PADDLE_VIT_TORCH_PYTHON to a Python with torch and timm")
def test_side_by_side_times_every_cpu_path_against_timm_fp32():
    settings = bench.BenchmarkSettings(model="vit_tiny_patch16_224", batch_size=2, warmup=1, iters=1, rounds=2,
                                       threads=1, model_overrides=dict(TINY))
    limits = {"size": 8, "fp32_eager_gflops": 1.0, "int8_onnxruntime_gops": 2.0}  # given: no GEMM timing here
    with kept_logger():
        result = bench.run_side_by_side(settings, os.environ["PADDLE_VIT_TORCH_PYTHON"], limits=limits)
    names = [path["name"] for path in result["paths"]]
    assert names[:4] == ["timm fp32", "timm int8", "paddle eager fp32", "predictor fp32"]
    assert names[-2:] == ["onnxruntime fp32", "onnxruntime int8"]
    first = result["paths"][0]
    assert first["vs_timm_fp32"] == 1.0 and first["limit_gflops"] == 1.0
    assert result["paths"][1]["vs_timm_int8"] == 1.0  # each row also against the int8 a PyTorch user has
    int8 = result["paths"][-1]
    assert int8["limit_gflops"] == 2.0 and int8["fraction_of_limit"] == pytest.approx(int8["gflops"] / 2.0)
    assert all(path["iterations"] == 2 and path["images_per_sec"]["median"] > 0 for path in result["paths"])
    engine = result["paths"][1]["quantized_engine"]  # the fastest of PyTorch's engines, named in the table
    assert f"timm int8: PyTorch's quantized engine {engine}," in bench.format_side_by_side(result)


def test_paddle2onnx_child_starts_without_the_allocator_a_tools_relaunch_preloaded(monkeypatch, tmp_path):
    """Under the tcmalloc a tool's relaunch preloads, paddle2onnx's child hung on a lock (the
    benchmark's on-the-fly export never returned); the user's own LD_PRELOAD is passed on."""
    from paddle_vit.deploy import onnx_export
    from paddle_vit.errors import ExportError

    seen = []

    def fake_run(command, **options):
        seen.append(options["env"])
        return type("Result", (), {"returncode": 1, "stdout": "", "stderr": "stopped here"})()

    monkeypatch.setattr(onnx_export.subprocess, "run", fake_run)
    for preload, relaunched in (("libtcmalloc_minimal.so.4", True), ("libmine.so", False)):
        monkeypatch.setenv("LD_PRELOAD", preload)
        if relaunched:
            monkeypatch.setenv("PADDLE_VIT_PRELOADED", preload)
        else:
            monkeypatch.delenv("PADDLE_VIT_PRELOADED", raising=False)
        with pytest.raises(ExportError, match="stopped here"):
            onnx_export.convert_with_paddle2onnx("m.json", "m.pdiparams", str(tmp_path / "m.onnx"), 17)
    assert "LD_PRELOAD" not in seen[0] and seen[1]["LD_PRELOAD"] == "libmine.so"
