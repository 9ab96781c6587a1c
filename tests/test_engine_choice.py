"""The engine eval and predict take when none is named (paddle_vit/deploy/engine_choice.py): the
fastest measured on this kind of CPU (ONNX Runtime on AVX2 CPUs, the predictor elsewhere), a
precision's own engine, the predictor where the onnx extra is missing; eval says what it took."""
import json
import os

import pytest

from paddle_vit.deploy import engine_choice
from paddle_vit.deploy.engine_choice import cpu_kind, default_engine

AVX2 = {"fpu", "sse2", "avx", "avx2", "fma"}
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512_vnni"}


def test_the_cpu_kind_comes_from_its_flags():
    assert cpu_kind(AVX512) == "avx512"
    assert cpu_kind(AVX2) == "avx2"
    assert cpu_kind({"sse2", "avx"}) == "other"


@pytest.mark.parametrize("device, precision, flags, engine", [
    ("cpu", "fp32", AVX2, "onnxruntime"),       # measured fastest there
    ("cpu", "fp32", AVX512, "predictor"),       # measured ahead of onnxruntime there (2026-12-03)
    ("cpu", "fp32", {"sse2"}, "predictor"),
    ("cpu", "bf16", AVX2, "predictor"),         # oneDNN's bf16
    ("cpu", "int8", AVX512, "onnxruntime"),     # onnxruntime's int8
    ("gpu", "fp32", AVX2, "predictor"),
])
def test_the_default_engine_is_the_fastest_measured_for_the_device_cpu_and_precision(
        monkeypatch, device, precision, flags, engine):
    monkeypatch.setattr(engine_choice, "installed", lambda *modules: True)
    chosen, why = default_engine(device, precision, flags=flags)
    assert chosen == engine and why


def test_without_the_onnx_extra_the_predictor_runs_and_says_what_to_install(monkeypatch):
    seen = []
    monkeypatch.setattr(engine_choice, "installed", lambda *modules: seen.append(modules) or False)
    chosen, why = default_engine("cpu", "fp32", flags=AVX2)
    assert chosen == "predictor" and 'pip install -e ".[onnx]"' in why
    assert "paddle2onnx" in seen[0]  # eval exports on the fly
    default_engine("cpu", "fp32", needs_export=False, flags=AVX2)
    assert "paddle2onnx" not in seen[1]  # an export's model.onnx only needs onnxruntime


def test_eval_auto_reports_the_engine_it_took(monkeypatch, tmp_path, capsys):
    """`eval.engine: auto` (the default) runs the chosen engine and names it and why."""
    from paddle_vit.config import load_config
    from paddle_vit.engine import evaluator
    from paddle_vit.factory import build_model
    from paddle_vit.weights import save_weights
    from repo_paths import REPO, load_tool

    recipe, weights = os.path.join(REPO, "configs", "vit_walkthrough_digits_28.yaml"), str(tmp_path / "w.pdparams")
    save_weights(build_model(load_config(recipe), num_classes=10), weights)
    monkeypatch.setattr(evaluator, "default_engine", lambda device, precision: ("dynamic", "a stand-in reason"))
    assert load_tool("eval").main(["-c", recipe, "--weights", weights]) == 0
    out = capsys.readouterr().out
    assert "precision: fp32 (eval.engine=auto: dynamic, a stand-in reason)" in out
    assert json.loads(out.strip().splitlines()[-1])["engine"] == "dynamic"
