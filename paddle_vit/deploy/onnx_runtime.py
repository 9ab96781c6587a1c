"""ONNX Runtime as an engine: one class runs every ONNX session of the project.

``OnnxSession(path, threads)`` runs an ONNX file (an export's ``model.onnx`` or
``model.int8.onnx``); ``session_for_model(model, precision)`` exports a built `ViT` to a
temporary folder first (`onnx_export.export_onnx`), quantizes it for ``int8``
(`quantize.quantize_onnx`, dynamic, weights per channel) and loads it, so that eval, predict
and the benchmark run the same graph a deployment runs, without an export step of their own.

A float32 file is loaded with each attention fused into ONNX Runtime's Attention kernel
(`onnx_fusion.fuse_attention`, in memory: the file itself stays standard ONNX); equal to the
unfused graph within 1e-6 and faster (docs/deployment.md). An int8 file is fused when quantized.

Threads follow the other engines: intra-op threads = the thread count asked for (default: the
cores this process may use), one inter-op thread and sequential execution (a ViT is a chain of
ops; parallel branches would only contend for the same cores).
"""
import os
import shutil
import tempfile

from ..errors import ConfigError, ExportError
from ..runtime import usable_cores
from .onnx_export import ONNX_INSTALL_HINT, export_onnx
from .onnx_fusion import fuse_attention
from .quantize import quantize_onnx

ONNX_PRECISIONS = ("fp32", "int8")
FP32_FILE = "model.onnx"
INT8_FILE = "model.int8.onnx"


def import_onnxruntime(what):
    """onnxruntime, or one ConfigError line saying that `what` needs the onnx extra."""
    try:
        import onnxruntime  # here: the onnx extra is optional
    except ImportError as error:
        raise ConfigError(f"{what} needs onnxruntime, which is not installed ({error}): "
                          f"{ONNX_INSTALL_HINT}") from None
    return onnxruntime


def check_onnx_precision(precision, where):
    if precision not in ONNX_PRECISIONS:
        raise ConfigError(f"{where}: onnxruntime runs {' or '.join(ONNX_PRECISIONS)}, not {precision!r}"
                          + (" (bf16 is the predictor's oneDNN path)" if precision == "bf16" else ""))


class OnnxSession:
    """An onnxruntime session over an ONNX file; call it with a float32 [B, 3, H, W] numpy batch
    for the graph's first output [B, K] (logits, or probabilities for an export with softmax),
    the call `EagerModel` and `PaddlePredictor` have too.

    threads: intra-op threads (None: the cores this process may use); device "gpu" puts the
    CUDA provider first (not measured here); fuse: load the graph with its attentions fused
    (`fused_attention` says how many were)."""
    backend = "onnxruntime"

    def __init__(self, onnx_file, threads=None, device="cpu", fuse=True):
        onnxruntime = import_onnxruntime(f"running {os.path.basename(onnx_file)}")
        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3  # errors only: not its notes on unused initialisers
        options.intra_op_num_threads = int(threads or usable_cores())
        options.inter_op_num_threads = 1
        options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        providers = ["CPUExecutionProvider"]
        if device == "gpu":
            providers.insert(0, "CUDAExecutionProvider")
        source, self.fused_attention = os.fspath(onnx_file), 0
        if fuse:
            source, self.fused_attention = _fused_graph(source)
        try:
            self.session = onnxruntime.InferenceSession(source, options, providers=providers)
        except Exception as error:  # onnxruntime raises its own error types for an unreadable file
            raise ExportError(f"onnxruntime cannot load {onnx_file} ({type(error).__name__}: "
                              f"{' '.join(str(error).split())[:300]})") from None
        self.threads = options.intra_op_num_threads
        self.input_name = self.session.get_inputs()[0].name
        self.report = {}  # what session_for_model's export and quantization reported

    def __call__(self, batch):
        return self.session.run(None, {self.input_name: batch})[0]


FUSE_SIZE_LIMIT = 1 << 30  # a larger file is loaded as it is (a ModelProto holds at most 2 GiB)


def _fused_graph(path):
    """(what to give InferenceSession, attentions fused): the serialized graph with its attentions
    fused, or `path` itself when there is nothing to fuse or onnx cannot read the file here."""
    try:
        import onnx  # here: the onnx extra is optional

        if not os.path.isfile(path) or os.path.getsize(path) > FUSE_SIZE_LIMIT:
            return path, 0  # not a regular file (onnxruntime says what it is), or too large to hold twice
        model = onnx.load(path)
    except Exception:  # onnx missing or the file unreadable: onnxruntime reports the latter itself
        return path, 0
    fused = fuse_attention(model)
    return (model.SerializeToString(), fused) if fused else (path, 0)


def export_model(model, folder, precision="fp32", calibration_batches=None):
    """Write `model` (a `ViT`) to `folder` as the deployment-grade ONNX graph (and, for int8, its
    quantized copy); returns (path to run, {"export": report, "quantize": report or None})."""
    was_training = model.training
    model.eval()
    try:
        fp32_path = os.path.join(folder, FP32_FILE)
        report = {"export": export_onnx(model, fp32_path), "quantize": None}
    finally:
        if was_training:
            model.train()
    if precision == "fp32":
        return fp32_path, report
    int8_path = os.path.join(folder, INT8_FILE)
    if calibration_batches is None:
        report["quantize"] = quantize_onnx(fp32_path, int8_path)
    else:
        report["quantize"] = quantize_onnx(fp32_path, int8_path, mode="static", calibration_batches=calibration_batches)
    return int8_path, report


def session_for_model(model, precision="fp32", threads=None, device="cpu"):
    """`model` exported on the fly (quantized for int8) and loaded into an `OnnxSession`; the
    temporary folder is removed once the session has read the file."""
    check_onnx_precision(precision, "precision")
    import_onnxruntime(f"precision {precision} through onnxruntime" if precision == "int8" else "onnxruntime")
    folder = tempfile.mkdtemp(prefix="paddle_vit_onnx_")
    try:
        path, report = export_model(model, folder, precision)
        session = OnnxSession(path, threads, device)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report["fused_attention"] = session.fused_attention or (report["quantize"] or {}).get("fused_attention", 0)
    session.report = report
    return session
