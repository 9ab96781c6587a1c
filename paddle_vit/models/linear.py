"""`Linear`: Paddle's nn.Linear with the bias added inside the matrix product on CPU; `runs_on_cpu`."""
import paddle
import paddle.nn as nn


def runs_on_cpu():
    """True when Paddle computes on the CPU (its current device; also while tracing a graph).

    Read from the device, not from a tensor's `place`, which graphs being traced do not have."""
    return paddle.get_device() == "cpu"


class Linear(nn.Linear):
    """y = x @ weight + bias, [..., in] -> [..., out]; the same parameters (`weight` [in, out],
    `bias` [out]) and state-dict keys as `paddle.nn.Linear`, which it is.

    Why: on CPU, Paddle's dynamic-mode `linear` runs the GEMM and then adds the bias in a
    second, single-threaded broadcast pass over the whole output, which costs a third of the GEMM
    for ViT's MLP. `paddle.addmm(bias, x, weight)` gives the bias to the GEMM as its C operand
    (beta = 1), so it costs nothing extra (docs/benchmarks.md). Everywhere else the stock
    `linear` is kept: on GPU (autocast lists `linear`/`matmul`, not `addmm`), for dtypes other
    than float32, and in static graphs (`to_static`, `paddle.jit.save`), whose passes fuse
    matmul + add themselves (Paddle Inference's oneDNN `fc`) and whose exports must stay
    convertible (paddle2onnx has no `addmm`).
    """

    def forward(self, x):
        if self.bias is None or not paddle.in_dynamic_mode() or x.dtype != paddle.float32 or not runs_on_cpu():
            return super().forward(x)
        if x.ndim == 2:
            return paddle.addmm(self.bias, x, self.weight)
        rows = x.reshape([-1, x.shape[-1]])  # [..., in] -> [M, in]
        out = paddle.addmm(self.bias, rows, self.weight)  # [M, out] = bias + rows @ weight, one GEMM
        return out.reshape([*x.shape[:-1], self.weight.shape[1]])  # [..., out]
