"""Run an exported model (`paddle_vit.deploy.export`) without the model's Python code.

``InferenceModel(directory)`` reads ``preprocess.json`` and the network it names, and maps a
float32 [B, 3, S, S] batch, preprocessed by ``model.transform``, to [B, K] class
probabilities, exactly as the dynamic model does (`paddle_vit.deploy.predict.Classifier`).

Backends:
- "paddle": ``paddle.inference`` (Config, create_predictor) on the Paddle inference model.
  Reads Paddle 3's PIR program (``inference.json``) and the older ``inference.pdmodel``. On
  CPU oneDNN (MKLDNN) is on unless ``mkldnn=False``; ``cpu_threads`` sets the math library's
  threads. ``device="gpu"`` and ``tensorrt=True`` switch on the GPU and the TensorRT engine;
  both need a CUDA build of Paddle (and TensorRT) and have not been measured or tested here.
- "onnxruntime": the ``model.onnx`` of an export with ``--format onnx`` (needs onnxruntime), or
  with precision int8 its ``model.int8.onnx`` (``--quantize int8``), run by `OnnxSession`.
``backend="auto"`` takes the export's ``model.onnx`` where ONNX Runtime is the engine measured
fastest on this kind of CPU (`engine_choice.default_engine`: AVX2 CPUs, onnxruntime installed,
oneDNN and TensorRT options left as they are), else the Paddle model when the export has one,
else the ONNX one; precision int8 on CPU is onnxruntime's.
"""
import dataclasses
import json
import os
import shutil
import tempfile
from typing import Optional

import numpy as np

from ..device import GPU_INSTALL
from ..errors import ConfigError, ExportError
from ..runtime import check_thread_count, cpu_vendor_and_flags
from .engine_choice import default_engine
from .export import EXPORT_FORMAT, METADATA_FILE, MODEL_PREFIX, save_traced
from .onnx_runtime import FP32_FILE, INT8_FILE, OnnxSession, session_for_model, usable_cores
from .predict import Preprocess, check_class_names, softmax

BACKENDS = ("auto", "paddle", "onnxruntime")
DEVICES = ("cpu", "gpu")
PRECISIONS = ("fp32", "bf16", "fp16", "int8")
CPU_PRECISIONS = ("fp32", "bf16", "int8")  # bf16: oneDNN's (paddle); int8: onnxruntime's; fp16: TensorRT's


def cpu_bf16_support():
    """(True, what the CPU has) when oneDNN can run bfloat16 here (AVX512-BF16 or AMX), else
    (False, what is missing); read from Paddle's own check and /proc/cpuinfo's flags."""
    from paddle.base import core


    _, flags = cpu_vendor_and_flags()
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
        if self.device not in DEVICES:
            raise ConfigError(f"device must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.precision not in PRECISIONS:
            raise ConfigError(f"precision must be one of {', '.join(PRECISIONS)}, got {self.precision!r}")
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


class PaddleRunner:
    """A paddle.inference predictor for an exported program, configured by `InferenceOptions`;
    call it with a float32 [B, 3, S, S] batch (numpy) for the [B, K] output."""

    def __init__(self, model_file, params_file, options):
        import paddle
        from paddle import inference

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


def predictor_for_model(model, options=None, dtype="float32"):
    """Trace `model` (a `paddle_vit.ViT`) for any batch size, save it to a temporary folder and
    load it into a `PaddleRunner` (the folder is removed once loaded). `options` defaults to
    this process's device with the cores it may use."""
    import paddle

    if options is None:  # this process's device: "cpu" or "gpu:<id>" (each rank its own GPU)
        device = paddle.get_device()
        options = (InferenceOptions(device="gpu", gpu_id=int(device.partition(":")[2] or 0))
                   if device.startswith("gpu") else InferenceOptions(device="cpu"))
    folder = tempfile.mkdtemp(prefix="paddle_vit_predictor_")
    try:
        return PaddleRunner(*save_traced(model, os.path.join(folder, MODEL_PREFIX), dtype=dtype), options)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class PredictorModel:
    """A `PaddleRunner` (or an `OnnxSession`) with the calling convention of a model in eval mode:
    images [B, 3, S, S] (a Paddle tensor) -> logits [B, K] (a Paddle tensor), for code written for
    the model."""

    def __init__(self, runner, config=None):
        self.runner = runner
        self.config = config  # the ViTConfig of the traced model, as the model has it

    def eval(self):
        return self

    def __call__(self, images):
        import paddle
        logits = self.runner(np.ascontiguousarray(images.numpy(), dtype=np.float32))
        return paddle.to_tensor(logits)


def predictor_model(model, precision="fp32"):
    """`model` traced and run by paddle.inference on this process's device in `precision`
    (fp32, or bf16 on a CPU that has it), called like the model."""
    import paddle

    options = None
    if precision != "fp32":
        options = InferenceOptions(device="gpu" if paddle.get_device().startswith("gpu") else "cpu",
                                   precision=precision).validate()
    return PredictorModel(predictor_for_model(model, options), getattr(model, "config", None))


def onnx_runtime_model(model, precision="fp32", threads=None):
    """`model` exported to ONNX on the fly (quantized for int8) and run by onnxruntime on the CPU,
    called like the model."""
    return PredictorModel(session_for_model(model, precision, threads), getattr(model, "config", None))


class InferenceModel:
    """An exported model folder, ready to predict.

    Attributes: metadata (``preprocess.json``), preprocess (`Preprocess`), transform (the eval
    transform), class_names (None when the export has none), model_name, backend.
    """

    def __init__(self, directory, options=None, backend="auto"):
        if backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
        self.directory = os.fspath(directory)
        self.options = (options or InferenceOptions()).validate()
        self.metadata = read_metadata(self.directory)
        where = os.path.join(self.directory, METADATA_FILE)
        self.preprocess = Preprocess.from_dict(self.metadata.get("preprocess") or {}, where)
        self.transform = self.preprocess.transform()
        self.num_classes = int(self.metadata.get("num_classes") or 0)
        self.class_names = check_class_names(self.metadata.get("class_names"), self.num_classes, where)
        self.model_name = self.metadata.get("model_name", "?")
        self.outputs_probabilities = self.metadata.get("output") == "probabilities"
        self.outputs_embedding = bool(self.metadata.get("outputs_embedding", self.num_classes == 0))
        files = self.metadata.get("files") or {}

        int8 = self.options.device == "cpu" and self.options.precision == "int8"
        if int8 and backend == "paddle":
            raise ConfigError("precision int8 on CPU runs the export's model.int8.onnx through onnxruntime: "
                              "use --backend onnxruntime (or auto)")
        if backend == "onnxruntime" and self.options.precision == "bf16":
            raise ConfigError("precision bf16 is paddle.inference's oneDNN path: use --backend paddle (or auto)")
        onnx_file = os.path.join(self.directory, files.get("onnx_int8", INT8_FILE) if int8
                                 else files.get("onnx", FP32_FILE))
        fallback = None  # the Paddle model, when auto took model.onnx over it
        if backend == "auto" and os.path.isfile(onnx_file) and self.options.mkldnn and not self.options.tensorrt:
            preferred, _ = default_engine(self.options.device, self.options.precision, needs_export=False)
            if preferred == "onnxruntime":  # the fastest on this CPU
                backend = "onnxruntime"
                fallback = find_paddle_model(self.directory, files)  # named if model.onnx will not load
        paddle_model = (find_paddle_model(self.directory, files)
                        if backend in ("auto", "paddle") and not int8 else None)
        if paddle_model is None and self.options.precision == "bf16":
            raise ExportError(f"{self.directory} holds no Paddle inference model ({MODEL_PREFIX}.json or .pdmodel + "
                              f".pdiparams): precision bf16 runs it on oneDNN (export with --format paddle)")
        if paddle_model is not None:
            self.backend = "paddle"
            self._run = PaddleRunner(*paddle_model, self.options)
        elif backend in ("auto", "onnxruntime") and os.path.isfile(onnx_file):
            self.backend = "onnxruntime"
            try:
                self._run = OnnxSession(onnx_file, self.options.cpu_threads, self.options.device)
            except ExportError as error:
                if fallback is None:
                    raise
                raise ExportError(f"{error}; --backend paddle runs the export's Paddle model instead") from None
        elif int8:
            raise ExportError(f"{self.directory} holds no {os.path.basename(onnx_file)}: precision int8 runs the "
                              f"quantized ONNX model that tools/export.py --format onnx --quantize int8 writes")
        else:
            wanted = {"paddle": f"Paddle inference model ({MODEL_PREFIX}.json or .pdmodel + .pdiparams)",
                      "onnxruntime": f"ONNX model ({os.path.basename(onnx_file)})"}.get(
                backend, f"Paddle inference model or {os.path.basename(onnx_file)}")
            raise ExportError(f"{self.directory} holds no {wanted}")

    def outputs(self, batch):
        """The network's raw output for a float32 [B, 3, S, S] batch (logits or probabilities,
        as ``metadata["output"]`` says)."""
        batch = np.ascontiguousarray(batch, dtype=np.float32)
        return np.asarray(self._run(batch), dtype=np.float32)

    def __call__(self, batch):
        """float32 [B, K] class probabilities."""
        outputs = self.outputs(batch)
        return outputs if self.outputs_probabilities else softmax(outputs)
