"""The CPU's limits: the GFLOP/s of one large matrix product on each path (Paddle eager, the
predictor in fp32 and bf16, onnxruntime in fp32 and int8), the ceiling every model path's
FLOP/s is measured against."""
import os
import tempfile

import numpy as np
import paddle

from ..deploy.inference import InferenceOptions, PaddlePredictor, cpu_bf16_support
from .load import add_other_load, other_load, sample_cpu
from .settings import set_threads
from .timm_worker import time_iterations


class _MatrixProduct(paddle.nn.Layer):
    """x [M, K] -> x @ w [M, N]: the one op whose speed bounds a Transformer's."""

    def __init__(self, k, n):
        super().__init__()
        self.weight = self.create_parameter([k, n])

    def forward(self, x):
        return paddle.matmul(x, self.weight)


def _best_seconds(call, iterations):
    """The fastest of `iterations` timed calls: a limit is the best the machine gives, and on a
    shared machine only the best is steady from run to run (docs/benchmarks.md, "ONNX Runtime and int8")."""
    call()  # warm-up: oneDNN picks and caches its kernel on the first call
    return min(time_iterations(call, lambda: None, iterations))


def gemm_limits(size=2048, iterations=10, threads=None):
    """GFLOP/s of one [size, size] x [size, size] matrix product, the ceiling every path's model
    FLOP/s is measured against: Paddle eager fp32 (MKL), the predictor in fp32 (oneDNN) and, on a
    CPU with AVX512-BF16 or AMX, the predictor in bf16 (oneDNN). A JSON-ready dict."""
    threads = threads or os.cpu_count() or 1
    set_threads(threads)
    paddle.set_device("cpu")
    flops = 2.0 * size ** 3
    x = paddle.randn([size, size])
    layer = _MatrixProduct(size, size)
    results = {"size": size, "threads": threads, "iterations": iterations}
    before = sample_cpu()
    with paddle.no_grad():
        results["fp32_eager_gflops"] = flops / _best_seconds(lambda: float(layer(x)[0, 0]), iterations) / 1e9
    host = x.numpy()
    supported, what = cpu_bf16_support()
    with tempfile.TemporaryDirectory(prefix="paddle_vit_gemm_") as folder:
        prefix = os.path.join(folder, "gemm")
        spec = paddle.static.InputSpec([None, size], "float32", name="x")
        paddle.jit.save(paddle.jit.to_static(layer, input_spec=[spec], full_graph=True), prefix)
        model_file = prefix + (".json" if os.path.exists(prefix + ".json") else ".pdmodel")
        for precision in ("fp32", "bf16"):
            key = f"{precision}_predictor_gflops"
            if precision == "bf16" and not supported:
                results[key], results["bf16_missing"] = None, what
                continue
            runner = PaddlePredictor(model_file, prefix + ".pdiparams",
                                     InferenceOptions(precision=precision, cpu_threads=threads).validate())
            results[key] = flops / _best_seconds(lambda: runner(host), iterations) / 1e9
    results["bf16_cpu"] = what
    results.update(onnxruntime_gemm_limits(size, iterations, threads))
    return add_other_load(results, other_load(before, sample_cpu()))


def _matrix_product_graph(size, int8):
    """An ONNX graph of x [size, size] @ w [size, size] with w an initializer: float32 MatMul, or
    for int8 MatMulInteger of uint8 activations and int8 weights (int32 out), the kernel that
    onnxruntime's dynamically quantized MatMuls run."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    if int8:
        weight = numpy_helper.from_array(rng.integers(-64, 64, (size, size), dtype=np.int8), "w")
        node = helper.make_node("MatMulInteger", ["x", "w"], ["y"])
        kinds = (TensorProto.UINT8, TensorProto.INT32)
    else:
        weight = numpy_helper.from_array(rng.standard_normal((size, size), dtype=np.float32), "w")
        node = helper.make_node("MatMul", ["x", "w"], ["y"])
        kinds = (TensorProto.FLOAT, TensorProto.FLOAT)
    graph = helper.make_graph([node], "gemm", [helper.make_tensor_value_info("x", kinds[0], [size, size])],
                              [helper.make_tensor_value_info("y", kinds[1], [size, size])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def onnxruntime_gemm_limits(size, iterations, threads):
    """onnxruntime's fp32 GFLOP/s and int8 GOP/s (MatMulInteger, uint8 x int8) on one [size, size]
    square product with the weight an initializer, as a quantized model's products run; None
    (with the reason) where onnxruntime is not installed."""
    try:
        import onnxruntime
    except ImportError as error:
        return {"fp32_onnxruntime_gflops": None, "int8_onnxruntime_gops": None, "onnxruntime_missing": str(error)}
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    operations = 2.0 * size ** 3
    results = {}
    rng = np.random.default_rng(1)
    for int8, key in ((False, "fp32_onnxruntime_gflops"), (True, "int8_onnxruntime_gops")):
        session = onnxruntime.InferenceSession(_matrix_product_graph(size, int8), options,
                                               providers=["CPUExecutionProvider"])
        x = (rng.integers(0, 256, (size, size), dtype=np.uint8) if int8
             else rng.standard_normal((size, size), dtype=np.float32))
        results[key] = operations / _best_seconds(lambda: session.run(None, {"x": x}), iterations) / 1e9
    return results


LIMIT_KEYS = {"fp32": ("fp32_eager_gflops", "fp32_predictor_gflops", "fp32_onnxruntime_gflops"),
              "bf16": ("bf16_predictor_gflops",), "int8": ("int8_onnxruntime_gops",)}


def machine_limit(limits, dtype):
    """The machine's best measured GFLOP/s (GOP/s for int8) for `dtype` in `gemm_limits`' result."""
    values = [limits.get(key) for key in LIMIT_KEYS[dtype] if limits.get(key)]
    return max(values) if values else None
