"""Run an exported model (`paddle_vit.deploy.export`) without the model's Python code.

``load_export(directory)`` reads ``preprocess.json`` and the network it names into a
`paddle_vit.deploy.predict.Classifier`, which maps a float32 [B, 3, S, S] batch, preprocessed by
its ``preprocess``, to [B, K] class probabilities, exactly as the dynamic model does.

Backends:
- "paddle": `PaddlePredictor`, ``paddle.inference`` (Config, create_predictor) on the Paddle
  inference model. Reads Paddle 3's PIR program (``inference.json``) and the older
  ``inference.pdmodel``. On CPU oneDNN (MKLDNN) is on unless ``mkldnn=False``; ``cpu_threads``
  sets the math library's threads. ``device="gpu"`` and ``tensorrt=True`` switch on the GPU and
  the TensorRT engine; both need a CUDA build of Paddle (and TensorRT) and have not been measured
  or tested here.
- "onnxruntime": the ``model.onnx`` of an export with ``--format onnx`` (needs onnxruntime), or
  with precision int8 its ``model.int8.onnx`` (``--quantize int8``), run by `OnnxSession`.
``backend="auto"`` takes the export's ``model.onnx`` where ONNX Runtime is the engine measured
fastest on this kind of CPU (`engine_choice.default_engine`: AVX2 CPUs, onnxruntime installed,
oneDNN and TensorRT options left as they are), else the Paddle model when the export has one,
else the ONNX one; precision int8 on CPU is onnxruntime's.

`engine_for_model` runs a built model on an engine without an export step (traced, or exported
to ONNX, into a temporary folder), and `EngineModel` calls such an engine with Paddle tensors,
for code written for the model (the evaluator).
"""
import dataclasses
import json
import os
import shutil
import tempfile
from typing import Optional

import numpy as np
import paddle
from paddle import inference
from paddle.base import core

from .. import runtime
from ..preprocess import Preprocess
from ..device import GPU_INSTALL
from ..errors import ConfigError, ExportError, check_choice
from ..runtime import check_thread_count, usable_cores
from .engine_choice import default_engine
from .export import EXPORT_FORMAT, METADATA_FILE, MODEL_PREFIX
from .onnx_runtime import FP32_FILE, INT8_FILE, OnnxSession, session_for_model
from .predict import Classifier, check_class_names
from .tracing import save_traced

BACKENDS = ("auto", "paddle", "onnxruntime")
ENGINES = ("predictor", "onnxruntime")  # what `engine_for_model` runs a built model on
DEVICES = ("cpu", "gpu")
PRECISIONS = ("fp32", "bf16", "fp16", "int8")
CPU_PRECISIONS = ("fp32", "bf16", "int8")  # bf16: oneDNN's (paddle); int8: onnxruntime's; fp16: TensorRT's


def cpu_bf16_support():
    """(True, what the CPU has) when oneDNN can run bfloat16 here (AVX512-BF16 or AMX), else
    (False, what is missing); read from Paddle's own check and /proc/cpuinfo's flags."""
    _, flags = runtime.cpu_vendor_and_flags()
    named = [name for flag, name in (("avx512_bf16", "AVX512-BF16"), ("amx_bf16", "AMX-BF16")) if flag in flags]
    if core.supports_bfloat16() and (named or not flags):
        return True, " and ".join(named) or "bfloat16 support (Paddle's check)"
    return False, "this CPU has neither AVX512-BF16 nor AMX (bfloat16 would be emulated, slower than fp32)"


@dataclasses.dataclass
class InferenceOptions:
    """How to run the network.

    device: "cpu" or "gpu" (gpu_id, gpu_memory_mb: the initial memory pool).
    mkldnn: oneDNN kernels on CPU (Paddle's fast CPU path; on by default).
    cpu_threads: threads of the CPU math library (None: the cores this process may use, as
        the dynamic model does; paddle.inference's own default is 1).
    precision: on CPU fp32, or bf16: oneDNN's bfloat16 kernels (matrix products, convolution,
        softmax, GELU; LayerNorm statistics stay float32) on a CPU with AVX512-BF16 or AMX. On GPU
        the TensorRT precision (fp32, fp16, int8; int8 needs calibration, which this project does
        not provide; not measured here).
    tensorrt: run supported subgraphs with TensorRT on GPU, in `precision`.
    ir_optim: Paddle's graph optimisation passes (fusions).
    """
    device: str = "cpu"
    gpu_id: int = 0
    gpu_memory_mb: int = 500
    mkldnn: bool = True
    cpu_threads: Optional[int] = None
    tensorrt: bool = False
    precision: str = "fp32"
    ir_optim: bool = True

    def validate(self):
        check_choice("device", self.device, DEVICES)
        check_choice("precision", self.precision, PRECISIONS)
        if self.tensorrt and self.device != "gpu":
            raise ConfigError("TensorRT runs on a GPU: use --device gpu with --tensorrt")
        if self.device == "cpu" and self.precision not in CPU_PRECISIONS:
            raise ConfigError(f"precision {self.precision} is TensorRT's, on a GPU (--device gpu --tensorrt); "
                              f"on CPU use fp32, bf16 (paddle.inference) or int8 (onnxruntime)")
        if self.device == "gpu" and self.precision == "bf16":
            raise ConfigError("precision bf16 is the CPU's oneDNN path; on a GPU use fp16 with --tensorrt")
        if self.precision == "bf16" and not self.mkldnn:
            raise ConfigError("precision bf16 runs on oneDNN: leave oneDNN (MKLDNN) on")
        check_thread_count(self.cpu_threads, "cpu_threads (--cpu-threads)")
        return self


def read_metadata(directory):
    """The ``preprocess.json`` of an exported model folder, checked."""
    directory = os.fspath(directory)
    if not os.path.isdir(directory):
        raise ExportError(f"exported model folder {directory} does not exist"
                          + (" (it is a file; --weights takes weights files)" if os.path.isfile(directory) else ""))
    path = os.path.join(directory, METADATA_FILE)
    if not os.path.isfile(path):
        raise ExportError(f"{directory} is not an exported model: it has no {METADATA_FILE} "
                          f"(write one with tools/export.py)")
    try:
        with open(path, encoding="utf-8") as stream:
            metadata = json.load(stream)
    except (OSError, ValueError) as error:
        raise ExportError(f"{path} cannot be read as JSON ({type(error).__name__}: {error})") from None
    if not isinstance(metadata, dict) or metadata.get("format") != EXPORT_FORMAT:
        raise ExportError(f"{path} is not paddle-vit export metadata (expected format {EXPORT_FORMAT!r})")
    return metadata


def find_paddle_model(directory, files=None):
    """(model file, params file) of the Paddle inference model in `directory`: the files named
    in the metadata, else ``inference.json`` (Paddle 3, PIR) or ``inference.pdmodel`` (older),
    with ``inference.pdiparams``. None when there is none."""
    files = files or {}
    candidates = []
    if files.get("paddle_model"):
        candidates.append((files["paddle_model"], files.get("paddle_params", f"{MODEL_PREFIX}.pdiparams")))
    candidates += [(f"{MODEL_PREFIX}.json", f"{MODEL_PREFIX}.pdiparams"),
                   (f"{MODEL_PREFIX}.pdmodel", f"{MODEL_PREFIX}.pdiparams")]
    for model_name, params_name in candidates:
        model_file, params_file = os.path.join(directory, model_name), os.path.join(directory, params_name)
        if os.path.isfile(model_file):
            if not os.path.isfile(params_file):
                raise ExportError(f"{model_file} has no parameters file {params_file} next to it")
            return model_file, params_file
    return None


class PaddlePredictor:
    """The engine that runs a paddle.inference predictor over an exported program, configured by
    `InferenceOptions`: float32 [B, 3, S, S] (numpy) -> [B, K] (numpy), the call `EagerModel` and
    `OnnxSession` have too."""
    backend = "paddle"

    def __init__(self, model_file, params_file, options):
        config = inference.Config(model_file, params_file)
        if options.device == "gpu":
            if not paddle.device.is_compiled_with_cuda():
                raise ConfigError(f"--device gpu needs a CUDA build of Paddle; this one is CPU-only: {GPU_INSTALL}")
            config.enable_use_gpu(int(options.gpu_memory_mb), int(options.gpu_id))
            if options.tensorrt:  # not measured on this project's machines
                precision = {"fp32": inference.PrecisionType.Float32, "fp16": inference.PrecisionType.Half,
                             "int8": inference.PrecisionType.Int8}[options.precision]
                config.enable_tensorrt_engine(workspace_size=1 << 30, max_batch_size=64, min_subgraph_size=3,
                                              precision_mode=precision, use_static=False, use_calib_mode=False)
        else:
            config.disable_gpu()
            if options.mkldnn:
                config.enable_mkldnn()
            else:
                config.disable_mkldnn()
            if options.precision == "bf16":
                supported, what = cpu_bf16_support()
                if not supported:
                    raise ConfigError(f"precision bf16 needs a CPU with AVX512-BF16 or AMX: {what}; use fp32")
                config.enable_mkldnn_bfloat16()  # every op oneDNN has a bfloat16 kernel for
            config.set_cpu_math_library_num_threads(int(options.cpu_threads or usable_cores()))
        config.switch_ir_optim(bool(options.ir_optim))
        config.disable_glog_info()  # the optimisation passes log a screenful per model
        try:
            self.predictor = inference.create_predictor(config)
        except Exception as error:  # Paddle raises its own error types for an unreadable program
            raise ExportError(f"paddle.inference cannot load {model_file} ({type(error).__name__}: "
                              f"{' '.join(str(error).split())[:300]})") from None
        self.input = self.predictor.get_input_handle(self.predictor.get_input_names()[0])
        self.output_name = self.predictor.get_output_names()[0]

    def __call__(self, batch):
        self.input.reshape(list(batch.shape))
        self.input.copy_from_cpu(batch)
        self.predictor.run()
        return self.predictor.get_output_handle(self.output_name).copy_to_cpu()


def _process_options(precision):
    """`InferenceOptions` for this process's device, "cpu" or "gpu:<id>" (each rank its own GPU)."""
    device = paddle.get_device()
    if device.startswith("gpu"):
        return InferenceOptions(device="gpu", gpu_id=int(device.partition(":")[2] or 0), precision=precision)
    return InferenceOptions(device="cpu", precision=precision)


def engine_for_model(model, engine, precision="fp32", *, options=None, threads=None, dtype="float32"):
    """`model` (a `paddle_vit.ViT`) on `engine`, with the call of `paddle_vit.deploy.predict.EagerModel`:

    - "predictor": traced for any batch size (input `dtype`), saved to a temporary folder (removed
      once loaded) and run by a `PaddlePredictor` with `options` (default: this process's device,
      with the cores it may use, in `precision`: fp32, or bf16 on a CPU that has it);
    - "onnxruntime": exported to ONNX on the fly (quantized for int8) and run by an `OnnxSession`
      on the CPU with `threads` (`paddle_vit.deploy.onnx_runtime.session_for_model`).
    """
    check_choice("engine", engine, ENGINES)
    if engine == "onnxruntime":
        return session_for_model(model, precision, threads)
    options = (options or _process_options(precision)).validate()
    folder = tempfile.mkdtemp(prefix="paddle_vit_predictor_")
    try:
        return PaddlePredictor(*save_traced(model, os.path.join(folder, MODEL_PREFIX), dtype=dtype), options)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class EngineModel:
    """An engine of `engine_for_model` called like the Paddle model in eval mode, for code written
    for the model: images [B, 3, S, S] (a Paddle tensor) -> logits [B, K] (a Paddle tensor)."""

    def __init__(self, engine):
        self.engine = engine

    def eval(self):
        return self

    def __call__(self, images):
        return paddle.to_tensor(self.engine(np.ascontiguousarray(images.numpy(), dtype=np.float32)))


def load_export(directory, options=None, backend="auto"):
    """The exported model folder `directory` as a `Classifier` (its ``metadata``: the folder's
    ``preprocess.json``), run by the engine `backend` names ("auto": see the module's doc)."""
    check_choice("backend", backend, BACKENDS)
    directory = os.fspath(directory)
    options = (options or InferenceOptions()).validate()
    metadata = read_metadata(directory)
    where = os.path.join(directory, METADATA_FILE)
    preprocess = Preprocess.from_dict(metadata.get("preprocess") or {}, where)
    num_classes = int(metadata.get("num_classes") or 0)
    class_names = check_class_names(metadata.get("class_names"), num_classes, where,
                                    counted_by=f"its num_classes is {num_classes}")
    engine = _export_engine(directory, metadata.get("files") or {}, options, backend)
    return Classifier(engine, preprocess, class_names, metadata.get("model_name", "?"), num_classes,
                      outputs_embedding=bool(metadata.get("outputs_embedding", num_classes == 0)),
                      outputs_probabilities=metadata.get("output") == "probabilities", metadata=metadata)


def _export_engine(directory, files, options, backend):
    """The `PaddlePredictor` or `OnnxSession` that runs the export in `directory` (its metadata
    names its `files`) with `options`, on `backend`."""
    int8 = options.device == "cpu" and options.precision == "int8"
    if int8 and backend == "paddle":
        raise ConfigError("precision int8 on CPU runs the export's model.int8.onnx through onnxruntime: "
                          "use --backend onnxruntime (or auto)")
    if backend == "onnxruntime" and options.precision == "bf16":
        raise ConfigError("precision bf16 is paddle.inference's oneDNN path: use --backend paddle (or auto)")
    onnx_file = os.path.join(directory, files.get("onnx_int8", INT8_FILE) if int8 else files.get("onnx", FP32_FILE))
    fallback = None  # the Paddle model, when auto took model.onnx over it
    if backend == "auto" and os.path.isfile(onnx_file) and options.mkldnn and not options.tensorrt:
        preferred, _ = default_engine(options.device, options.precision, needs_export=False)
        if preferred == "onnxruntime":  # the fastest on this CPU
            backend = "onnxruntime"
            fallback = find_paddle_model(directory, files)  # named if model.onnx will not load
    paddle_model = find_paddle_model(directory, files) if backend in ("auto", "paddle") and not int8 else None
    if paddle_model is None and options.precision == "bf16":
        raise ExportError(f"{directory} holds no Paddle inference model ({MODEL_PREFIX}.json or .pdmodel + "
                          f".pdiparams): precision bf16 runs it on oneDNN (export with --format paddle)")
    if paddle_model is not None:
        return PaddlePredictor(*paddle_model, options)
    if backend in ("auto", "onnxruntime") and os.path.isfile(onnx_file):
        try:
            return OnnxSession(onnx_file, options.cpu_threads, options.device)
        except ExportError as error:
            if fallback is None:
                raise
            raise ExportError(f"{error}; --backend paddle runs the export's Paddle model instead") from None
    if int8:
        raise ExportError(f"{directory} holds no {os.path.basename(onnx_file)}: precision int8 runs the "
                          f"quantized ONNX model that tools/export.py --format onnx --quantize int8 writes")
    wanted = {"paddle": f"Paddle inference model ({MODEL_PREFIX}.json or .pdmodel + .pdiparams)",
              "onnxruntime": f"ONNX model ({os.path.basename(onnx_file)})"}.get(
        backend, f"Paddle inference model or {os.path.basename(onnx_file)}")
    raise ExportError(f"{directory} holds no {wanted}")
