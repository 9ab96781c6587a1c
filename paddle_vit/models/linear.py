"""`Linear`: Paddle's nn.Linear with the bias added inside the matrix product on CPU; `runs_on_cpu`."""
import paddle
import paddle.nn as nn
from paddle.autograd import PyLayer


def runs_on_cpu():
    """True when Paddle computes on the CPU (its current device; also while tracing a graph).

    Read from the device, not from a tensor's `place`, which graphs being traced do not have."""
    return paddle.get_device() == "cpu"


class _AddmmFunction(PyLayer):
    """out = bias + rows @ weight, [M, in] -> [M, out], whose backward sums the bias gradient as
    a matrix-vector product, ones[1, M] @ grad, instead of Paddle's column reduction (15-40x
    slower at ViT's sizes): training steps 4-7% faster (docs/benchmarks.md)."""

    @staticmethod
    def forward(ctx, rows, weight, bias):
        ctx.save_for_backward(rows, weight)
        ctx.wanted = (not rows.stop_gradient, not weight.stop_gradient, not bias.stop_gradient)
        return paddle.addmm(bias, rows, weight)  # [M, out]

    @staticmethod
    def backward(ctx, grad):  # grad: [M, out]
        rows, weight = ctx.saved_tensor()
        want_rows, want_weight, want_bias = ctx.wanted
        grad_rows = paddle.matmul(grad, weight, transpose_y=True) if want_rows else None  # [M, in]
        grad_weight = paddle.matmul(rows, grad, transpose_x=True) if want_weight else None  # [in, out]
        grad_bias = None
        if want_bias:
            ones = paddle.ones([1, grad.shape[0]], dtype=grad.dtype)  # [1, M]
            grad_bias = paddle.matmul(ones, grad).reshape([grad.shape[1]])  # [out]
        return grad_rows, grad_weight, grad_bias


class Linear(nn.Linear):
    """y = x @ weight + bias, [..., in] -> [..., out]; the same parameters (`weight` [in, out],
    `bias` [out]) and state-dict keys as `paddle.nn.Linear`, which it is.

    Why: on CPU, Paddle's dynamic-mode `linear` runs the GEMM and then adds the bias in a
    second, single-threaded broadcast pass over the whole output, which costs a third of the GEMM
    for ViT's MLP. `paddle.addmm(bias, x, weight)` gives the bias to the GEMM as its C operand
    (beta = 1), so it costs nothing extra; when gradients are recorded, `_AddmmFunction` also
    sums the bias gradient with a GEMV (docs/benchmarks.md). Everywhere else the stock
    `linear` is kept: on GPU (autocast lists `linear`/`matmul`, not `addmm`), for dtypes other
    than float32, and in static graphs (`to_static`, `paddle.jit.save`), whose passes fuse
    matmul + add themselves (Paddle Inference's oneDNN `fc`) and whose exports must stay
    convertible (paddle2onnx has no `addmm`).
    """

    def forward(self, x):
        if self.bias is None or not paddle.in_dynamic_mode() or x.dtype != paddle.float32 or not runs_on_cpu():
            return super().forward(x)
        rows = x if x.ndim == 2 else x.reshape([-1, x.shape[-1]])  # [..., in] -> [M, in]
        if paddle.is_grad_enabled() and not (rows.stop_gradient and self.weight.stop_gradient
                                             and self.bias.stop_gradient):
            out = _AddmmFunction.apply(rows, self.weight, self.bias)  # [M, out], GEMV bias gradient
        else:
            out = paddle.addmm(self.bias, rows, self.weight)  # [M, out] = bias + rows @ weight, one GEMM
        return out if x.ndim == 2 else out.reshape([*x.shape[:-1], self.weight.shape[1]])  # [..., out]
