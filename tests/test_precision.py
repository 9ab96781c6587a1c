"""bf16 inference on CPU: oneDNN's bfloat16 kernels through paddle.inference, reached from
tools/eval.py (eval.precision), tools/predict.py (--precision) and tools/benchmark.py (--dtype)."""
import json
import os

import numpy as np
import paddle
import pytest

from paddle_vit import ViT, ViTConfig
from paddle_vit.cli import run
from paddle_vit.deploy import inference
from paddle_vit.deploy.inference import EngineModel, InferenceOptions, cpu_bf16_support, engine_for_model

from repo_paths import REPO, load_tool

BF16, WHAT = cpu_bf16_support()
needs_bf16 = pytest.mark.skipif(not BF16, reason=f"no bfloat16 on this CPU: {WHAT}")
TRAIN, EVAL, PREDICT, BENCHMARK = (load_tool(name) for name in ("train", "eval", "predict", "benchmark"))


def small_model():
    paddle.seed(0)
    model = ViT(ViTConfig(image_size=28, patch_size=7, embed_dim=64, depth=2, num_heads=4, num_classes=10))
    model.eval()
    return model


@pytest.mark.slow  # two predictor exports: 2-4 s
@needs_bf16
def test_the_bf16_predictor_really_computes_in_bf16_and_stays_close_to_fp32():
    model = small_model()
    images = paddle.to_tensor(np.random.default_rng(0).standard_normal((8, 3, 28, 28)).astype("float32"))
    with paddle.no_grad():
        eager = model(images).numpy()
    fp32, bf16 = (EngineModel(engine_for_model(model, "predictor", precision))(images).numpy()
                  for precision in ("fp32", "bf16"))
    np.testing.assert_allclose(fp32, eager, atol=1e-5, rtol=0)
    relative = np.abs(bf16 - fp32).max() / np.abs(fp32).max()
    # bfloat16 keeps 8 significant bits: identical outputs would mean the bf16 kernels never ran
    assert 1e-4 < relative < 5e-2, relative


def test_bf16_without_the_cpu_for_it_is_one_clear_error(monkeypatch):
    from paddle_vit import ConfigError

    monkeypatch.setattr(inference, "cpu_bf16_support", lambda: (False, "this CPU has neither AVX512-BF16 nor AMX"))
    with pytest.raises(ConfigError, match="precision bf16 needs a CPU with AVX512-BF16 or AMX: this CPU has neither"):
        engine_for_model(small_model(), "predictor", "bf16")
    with pytest.raises(ConfigError, match="precision fp16 is TensorRT's"):
        InferenceOptions(precision="fp16").validate()


@pytest.fixture(scope="module")
def digits_run(tmp_path_factory):
    """The quick-start recipe trained for 6 epochs: (recipe, best weights)."""
    folder = tmp_path_factory.mktemp("digits")
    recipe = os.path.join(REPO, "configs", "vit_walkthrough_digits_28.yaml")
    assert run(TRAIN.main, ["-c", recipe, "-o", "train.epochs=6", "-o", f"train.output_dir={folder / 'run'}",
                            "-o", "train.vdl=false"]) == 0
    return recipe, str(folder / "run" / "checkpoints" / "best.pdparams")


def evaluate(capsys, recipe, weights, *overrides):
    capsys.readouterr()
    argv = ["-c", recipe, "--weights", weights] + [part for value in overrides for part in ("-o", value)]
    assert run(EVAL.main, argv) == 0
    out = capsys.readouterr().out
    return json.loads(out.strip().splitlines()[-1]), out


@needs_bf16
@pytest.mark.slow  # trains the quick start for 6 epochs first
def test_eval_in_bf16_keeps_the_accuracy_and_says_its_precision(digits_run, capsys):
    recipe, weights = digits_run
    fp32, _ = evaluate(capsys, recipe, weights)
    bf16, out = evaluate(capsys, recipe, weights, "eval.precision=bf16")
    assert fp32["precision"] == "fp32" and bf16["precision"] == "bf16" and "precision: bf16" in out
    assert fp32["top1"] > 0.5  # a model that learnt something: the comparison means something
    # within a point (3 of the 359 val digits): the 6-epoch model is unsure of many digits (44 with
    # fp32's top two logits closer than twice bf16's largest logit error, 0.019); on an AMX Xeon 3
    # predictions changed, top1 0.5487 -> 0.5432, the same top1 as on an AVX512-BF16 EPYC
    assert abs(bf16["top1"] - fp32["top1"]) <= 3 / 359 + 1e-9
    assert bf16["loss"] == pytest.approx(fp32["loss"], rel=2e-2) and bf16["loss"] != fp32["loss"]


def test_eval_in_bf16_on_the_eager_engine_is_refused(tmp_path, capsys):
    """Refused whatever the weights: an untrained model of the recipe's architecture will do."""
    from paddle_vit.config import load_config
    from paddle_vit.factory import build_model
    from paddle_vit.weights import save_weights

    recipe, weights = os.path.join(REPO, "configs", "vit_walkthrough_digits_28.yaml"), str(tmp_path / "w.pdparams")
    save_weights(build_model(load_config(recipe), num_classes=10), weights)
    code = run(EVAL.main, ["-c", recipe, "--weights", weights, "-o", "eval.precision=bf16",
                           "-o", "eval.engine=dynamic"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "eval.precision=bf16 runs on the predictor" in lines[0], lines


@needs_bf16
@pytest.mark.slow  # trains the quick start for 6 epochs first
def test_predict_in_bf16_from_weights_gives_the_fp32_classes(digits_run, tmp_path, capsys):
    from PIL import Image
    from sklearn.datasets import load_digits

    recipe, weights = digits_run
    digits = load_digits()
    for index in range(6):
        Image.fromarray((digits.images[index] * 255 / 16).astype(np.uint8)).save(tmp_path / f"{index}.png")

    def top_classes(*extra):
        capsys.readouterr()
        assert run(PREDICT.main, ["--weights", weights, "-c", recipe, "--json", "--topk", "1", str(tmp_path),
                                  *extra]) == 0
        records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        return {os.path.basename(r["file"]): (r["predictions"][0]["index"], r["predictions"][0]["probability"])
                for r in records}
    fp32, bf16 = top_classes(), top_classes("--precision", "bf16")
    assert fp32.keys() == bf16.keys() and len(fp32) == 6
    for name in fp32:
        assert bf16[name][0] == fp32[name][0] and bf16[name][1] == pytest.approx(fp32[name][1], abs=3e-2)


def test_benchmark_bf16_on_cpu_needs_the_predictor(capsys):
    code = run(BENCHMARK.main, ["vit_walkthrough", "--dtype", "bf16", "--engine", "dynamic"])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and "--dtype bf16 on CPU runs on the predictor" in lines[-1], lines


@pytest.mark.slow  # the benchmark's timed products: 2-4 s
def test_gemm_mode_measures_the_fp32_and_bf16_limits(capsys):
    from paddle_vit.bench.limits import gemm_limits

    result = gemm_limits(size=256, iterations=2, threads=1)
    assert result["fp32_eager_gflops"] > 1 and result["fp32_predictor_gflops"] > 1
    assert (result["bf16_predictor_gflops"] > 1) if BF16 else result["bf16_predictor_gflops"] is None
    assert run(BENCHMARK.main, ["--mode", "gemm", "--iters", "1", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["size"] == 2048 and printed["fp32_eager_gflops"] > 1


def test_benchmark_profile_says_where_a_step_goes(capsys):
    code = run(BENCHMARK.main, ["vit_walkthrough", "-o", "model.image_size=28", "-o", "model.patch_size=7",
                                "--batch-size", "4", "--warmup", "1", "--iters", "2", "--rounds", "1",
                                "--profile", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    names = [row["name"] for row in result["operators"]]
    assert any(name.startswith("addmm") for name in names) and any(name.startswith("softmax") for name in names)
    assert all(row["ms_per_step"] >= 0 and row["calls"] >= 1 for row in result["operators"])
    assert run(BENCHMARK.main, ["vit_walkthrough", "--engine", "predictor", "--profile"]) == 2
    assert "--profile times the model's ops" in capsys.readouterr().err
