"""The CPU fast paths: eager float32 on a CPU, where Paddle has no fused attention kernel and adds a
Linear's bias in a second pass. Same parameters, same numbers (tests/test_variants.py)."""
import contextlib

import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.autograd import PyLayer

from ..models.attention import Attention
from ..models.patch_embed import PatchEmbedding
from ..models.rope import rotate_qk
from ..models.token_embed import AddPatchPositionEmbedding, AddPositionEmbedding
from ..models.vit import ViT
from .compiled import kernel_library, kernel_threads
from ..paddle_versions import COMPILED_KERNELS, LEGACY_LAYER_NORM, WORKAROUND_FROZEN_LAYER_NORM_WEIGHT, applies

KERNEL_MIN_WIDTH = 128  # the compiled kernels for ViT-Ti's 192 and wider, not the walkthrough's 64
GELU_KERNEL_MIN_WIDTH = 4 * KERNEL_MIN_WIDTH  # GELU sees the MLP's hidden width: mlp_ratio 4 of a model 128 wide


def runs_on_cpu():
    """True when Paddle computes on the CPU (its current device; also while tracing a graph).
    Read from the device, not from a tensor's `place`, which graphs being traced do not have."""
    return paddle.get_device() == "cpu"


def eager_cpu_float32(x):
    return x.dtype == paddle.float32 and runs_on_cpu() and paddle.in_dynamic_mode()


def records_gradient(*tensors):
    """Whether Paddle records a backward pass through an op on `tensors`: gradients are enabled
    and one of them wants one."""
    return paddle.is_grad_enabled() and not all(tensor.stop_gradient for tensor in tensors)


def plain_layer(layer):
    """Whether `layer` is called for its computation alone: no forward hook (a kernel called in
    its place would skip the hook, e.g. one that records the attention weights)."""
    return not (layer._forward_pre_hooks or layer._forward_post_hooks)


class RecomputedAttention(PyLayer):
    """softmax(q k^T) v for q already scaled, [B, H, N, d] x 3 -> [B, H, N, d], keeping only q,
    k and v for the backward pass, which computes the weights P = softmax(q k^T) again:
        dv = P^T dout,  dP = dout v^T,  dS = P * (dP - rowsum(dP * P)),  dq = dS k,  dk = dS^T q
    as PyTorch's fused CPU attention and flash attention do: the [B, H, N, N] weights of every
    layer are not held from the forward to the backward pass, a lower peak memory for a little
    time (docs/benchmarks.md, "What made the difference"). With the compiled kernels (`library`,
    compiled.py, kernels/attention_softmax.cc) the softmax and dS are each one pass over the rows
    on the kernel threads instead of Paddle's one-thread softmax and four elementwise passes."""

    @staticmethod
    def weights(q, k, library=None):
        scores = paddle.matmul(q, k, transpose_y=True)  # [B, H, N, N]
        if library is None:
            return F.softmax(scores, axis=-1)
        return library.paddle_vit_softmax(scores, kernel_threads())

    @staticmethod
    def forward(ctx, q, k, v, library=None):
        ctx.save_for_backward(q, k, v)
        ctx.library = library
        return paddle.matmul(RecomputedAttention.weights(q, k, library), v)  # [B, H, N, d]

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensor()
        weights = RecomputedAttention.weights(q, k, ctx.library)  # [B, H, N, N], again
        grad_v = paddle.matmul(weights, grad_out, transpose_x=True)  # [B, H, N, d]
        grad_weights = paddle.matmul(grad_out, v, transpose_y=True)  # [B, H, N, N]
        if ctx.library is None:
            grad_scores = weights * (grad_weights - (grad_weights * weights).sum(axis=-1, keepdim=True))
        else:
            grad_scores = ctx.library.paddle_vit_softmax_backward(weights, grad_weights, kernel_threads())
        return paddle.matmul(grad_scores, k), paddle.matmul(grad_scores, q, transpose_x=True), grad_v


class FastCpuAttention(Attention):
    """`Attention`'s fused path in eager float32 on a CPU. Paddle has no fused attention kernel
    there (scaled_dot_product_attention transposes q, k and v one by one), so the packed
    projection [B, N, 3, H, d] is laid out head-major with a single transpose, q (N x d) is scaled
    rather than the scores (N x N), and in training without attention dropout the weights are
    recomputed in the backward pass (`RecomputedAttention`): faster than the explicit path
    (docs/benchmarks.md, "What made the difference"). Asking for the weights still takes the
    explicit path."""

    variant_of = Attention

    def fused_attention(self, x, rope=None):
        if not eager_cpu_float32(x):
            return super().fused_attention(x, rope)
        qkv = self.qkv(x).reshape([0, 0, 3, self.num_heads, self.head_dim])  # [B, N, 3, H, d]
        q, k, v = qkv.transpose([2, 0, 3, 1, 4]).unbind(axis=0)  # one transpose, 3 x [B, H, N, d]
        q, k = rotate_qk(q, k, rope)
        q = q * self.scales
        if self.training and self.attention_dropout_rate == 0.0 and paddle.is_grad_enabled():
            # the compiled softmax for layers as wide as the LayerNorm kernel's (narrower: no build)
            library = kernel_library() if self.all_head_dim >= KERNEL_MIN_WIDTH else None
            out = RecomputedAttention.apply(q, k, v, library)  # [B, H, N, d]
        else:  # a recomputation would draw a new dropout mask
            attention = self._softmax_over_keys(paddle.matmul(q, k, transpose_y=True))  # [B, H, N, N]
            attention = self.attention_dropout(attention)
            out = paddle.matmul(attention, v)  # [B, H, N, d]
        out = out.transpose([0, 2, 1, 3]).reshape([0, 0, self.all_head_dim])  # [B, N, H * d]
        out = self.proj(out)  # [B, N, D]
        return self.dropout(out)

    def _softmax_over_keys(self, scores):
        """`self.softmax(scores)`; where no gradient is recorded (evaluation) and the layer is as
        wide as the kernels', the compiled softmax (its exp vectorised, the rows on the kernel
        threads; Paddle's runs on one thread): within 2e-7 of Paddle's. A softmax replaced or
        hooked is called as it is."""
        if (self.all_head_dim >= KERNEL_MIN_WIDTH and not records_gradient(scores) and type(self.softmax) is nn.Softmax
                and applies(COMPILED_KERNELS) and self.softmax._axis == -1 and self.softmax._dtype is None
                and plain_layer(self.softmax)):
            library = kernel_library()
            if library is not None:
                return library.paddle_vit_softmax(scores, kernel_threads())
        return self.softmax(scores)


class _AddmmFunction(PyLayer):
    """out = bias + rows @ weight, [M, in] -> [M, out], whose backward sums the bias gradient as
    a matrix-vector product, ones[1, M] @ grad, instead of Paddle's column reduction, which is
    much slower at ViT's sizes (docs/benchmarks.md, "What made the difference")."""

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


class AddmmLinear(nn.Linear):
    """`nn.Linear` with the bias added inside the matrix product in eager float32 on a CPU.

    Why: there Paddle's `linear` runs the GEMM and then adds the bias in a second, single-threaded
    broadcast pass over the whole output, a sizeable part of the GEMM's own time for ViT's MLP
    (docs/benchmarks.md, "What made the difference").
    `paddle.addmm(bias, x, weight)` gives the bias to the GEMM as its C operand (beta = 1); when
    gradients are recorded, `_AddmmFunction` also sums the bias gradient with a GEMV. Elsewhere
    the stock `linear` is kept: on GPU (autocast lists `linear`/`matmul`, not `addmm`), for other
    dtypes, and in traced graphs, whose passes fuse matmul + add themselves (oneDNN's `fc`) and
    whose exports must stay convertible (paddle2onnx has no `addmm`)."""

    variant_of = nn.Linear

    def forward(self, x):
        if self.bias is None or not eager_cpu_float32(x):
            return super().forward(x)
        rows = x if x.ndim == 2 else x.reshape([-1, x.shape[-1]])  # [..., in] -> [M, in]
        if records_gradient(rows, self.weight, self.bias):
            out = _AddmmFunction.apply(rows, self.weight, self.bias)  # [M, out], GEMV bias gradient
        else:
            out = paddle.addmm(self.bias, rows, self.weight)  # [M, out] = bias + rows @ weight, one GEMM
        return out if x.ndim == 2 else out.reshape([*x.shape[:-1], self.weight.shape[1]])  # [..., out]


class _KernelLayerNorm(PyLayer):
    """LayerNorm over the last axis whose backward pass is the compiled kernel
    (compiled.py, kernels/layer_norm_backward.cc); the forward pass is Paddle's own, which also
    gives the rows' mean and variance that the backward reads."""

    @staticmethod
    def forward(ctx, x, weight, bias, epsilon, library):
        out, mean, variance = paddle._legacy_C_ops.layer_norm(x, weight, bias, "epsilon", epsilon,
                                                              "begin_norm_axis", x.ndim - 1)  # [..., D], [M], [M]
        ctx.save_for_backward(x, weight, mean, variance)
        ctx.epsilon, ctx.library = epsilon, library
        ctx.wanted = (not x.stop_gradient, not weight.stop_gradient, not bias.stop_gradient)
        return out

    @staticmethod
    def backward(ctx, grad):  # grad: [..., D]
        x, weight, mean, variance = ctx.saved_tensor()
        gradients = ctx.library.paddle_vit_layer_norm_backward(x, weight, mean, variance, grad, ctx.epsilon,
                                                               kernel_threads())  # dx, dw [D], db [D]
        # a frozen input or frozen weights get None: PyLayer refuses a gradient for them
        return tuple(gradient if wanted else None for gradient, wanted in zip(gradients, ctx.wanted))


class FastCpuLayerNorm(nn.LayerNorm):
    """`nn.LayerNorm` whose backward pass, in eager float32 training on a CPU, is a compiled
    kernel that shares the rows out over Paddle's math threads (Paddle's own runs on one:
    docs/benchmarks.md, "The training step against timm"). Where the kernel is not built (no
    compiler, PADDLE_VIT_COMPILED_KERNELS=0), in evaluation, for narrow layers (below
    KERNEL_MIN_WIDTH, where the build would cost more than it saves) and elsewhere it is the
    stock LayerNorm.

    On a CPU it also corrects Paddle 3.3's input gradient where the weight is frozen: Paddle's
    CPU kernel then computes dx as if the weight were all ones (30-50% off for trained weights,
    against the formula in tests/test_variants.py), so the weight is handed to it as a tensor that
    wants a gradient (that gradient is thrown away; the weight stays frozen). The kernel path and
    that correction are each used only with the Paddle releases they were written for
    (paddle_versions.py)."""

    variant_of = nn.LayerNorm

    def forward(self, x):
        library = kernel_library() if self._uses_kernel(x) else None
        if library is not None:
            return _KernelLayerNorm.apply(x, self.weight, self.bias, self._epsilon, library)
        if self._scale_gradient_needed(x):
            return F.layer_norm(x, self._normalized_shape, self._scale_wanting_gradient(), self.bias, self._epsilon)
        return super().forward(x)

    def _scale_gradient_needed(self, x):
        """Paddle's CPU kernel would compute x's gradient without the frozen weight: wrongly."""
        return (self.weight is not None and self.weight.stop_gradient and not x.stop_gradient
                and paddle.is_grad_enabled() and runs_on_cpu() and paddle.in_dynamic_mode()
                and applies(WORKAROUND_FROZEN_LAYER_NORM_WEIGHT))

    def _scale_wanting_gradient(self):
        scale = self.weight.detach()
        scale.stop_gradient = False  # a leaf of its own: its gradient is computed and dropped
        return scale

    def _uses_kernel(self, x):
        return (x.ndim > 0 and x.shape[-1] >= KERNEL_MIN_WIDTH and self.weight is not None and self.bias is not None
                and eager_cpu_float32(x) and records_gradient(x, self.weight, self.bias) and applies(LEGACY_LAYER_NORM)
                and applies(COMPILED_KERNELS)  # before the private attributes are read
                and len(self._normalized_shape) == 1 and self._normalized_shape[0] >= KERNEL_MIN_WIDTH)


class _KernelGELU(PyLayer):
    """The exact GELU whose forward and backward passes are the compiled kernels (compiled.py,
    kernels/gelu.cc): erf and exp vectorised, the elements on the kernel threads."""

    @staticmethod
    def forward(ctx, x, library):
        ctx.save_for_backward(x)
        ctx.library = library
        return library.paddle_vit_gelu(x, kernel_threads())

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensor()
        return ctx.library.paddle_vit_gelu_backward(x, grad, kernel_threads())


class FastCpuGELU(nn.GELU):
    """`nn.GELU` (exact) whose forward and backward passes, in eager float32 on a CPU, are
    compiled kernels (Paddle's run on one thread and are about half PyTorch's speed per thread:
    docs/benchmarks.md, "The training step against timm"): in training and in evaluation alike,
    where no gradient is recorded without the autograd wrapper. Its erf is within 1.5e-7 of the
    true value (the outputs within 2e-7 of Paddle's). The tanh form, the MLPs of narrow models
    (hidden width below GELU_KERNEL_MIN_WIDTH: the walkthrough's 64-wide models never build the
    kernels) and the rest are Paddle's GELU."""

    variant_of = nn.GELU

    def forward(self, x):
        library = kernel_library() if self._uses_kernel(x) else None
        if library is None:
            return super().forward(x)
        if not records_gradient(x):
            return library.paddle_vit_gelu(x, kernel_threads())
        return _KernelGELU.apply(x, library)

    def _uses_kernel(self, x):
        return (x.ndim > 0 and x.shape[-1] >= GELU_KERNEL_MIN_WIDTH and eager_cpu_float32(x)
                and applies(COMPILED_KERNELS) and not self._approximate)


# ---- the embedding's adds: a table added to every sample of the batch ----------------------------
# Paddle 3.3's eager CPU add of a tensor broadcast over other axes than the last runs a generic
# indexing path: ViT-S/16 at batch 8, the Conv2D's bias ([B, 384, 14, 14] + [1, 384, 1, 1]) 5.7 ms
# and the position embedding ([B, 197, 384] + [1, 197, 384]) 3.4 ms, where the table expanded to
# the batch's shape first (a copy) and added elementwise takes 0.6 and 0.4 ms, 1.5 and 1.6 ms with
# the backward pass against 13.2 and 11.8 (docs/benchmarks.md, "The embedding's adds"). The same
# numbers: each output element is the same one sum.


def expanded_to(table, shape, dtype):
    """`table` [1, ...] in `dtype`, expanded to `shape` (materialised: `expand` copies)."""
    return table.astype(dtype).expand(shape)


def over_the_batch(table, x):
    """A position embedding [1, T, D] expanded to the batch of x [B, ., D]: [B, T, D] in x's dtype."""
    return expanded_to(table, [x.shape[0], *table.shape[1:]], x.dtype)


class ExpandedBiasConv2D(nn.Conv2D):
    """`nn.Conv2D` whose bias, in eager float32 on a CPU, is added after the convolution, expanded to
    its output's shape: the patch embedding's [B, D, H/P, W/P] + [1, D, 1, 1]. Steps aside (the
    stock layer) for no bias, another padding mode than zeros, channels last, a distributed
    tensor, and anything not eager float32 on a CPU."""

    variant_of = nn.Conv2D

    def forward(self, x):
        if not self._expands_bias(x):
            return super().forward(x)
        out = F.conv2d(x, self.weight, None, self._stride, self._padding, self._dilation, self._groups,
                       self._data_format)  # [B, C_out, H', W']
        return out + expanded_to(self.bias.reshape([1, -1, 1, 1]), out.shape, out.dtype)

    def _expands_bias(self, x):
        return (self.bias is not None and self._padding_mode == "zeros" and self._data_format == "NCHW"
                and not x.is_dist() and eager_cpu_float32(x))


class ExpandedAddPatchEmbedding(PatchEmbedding):
    """The walkthrough's `PatchEmbedding` whose position embedding, in eager float32 on a CPU, is
    expanded to the batch before the add; otherwise the module's own forward."""

    variant_of = PatchEmbedding

    def forward(self, x):
        if not eager_cpu_float32(x):
            return super().forward(x)
        # the module's steps (models/patch_embed.py), the last add with the table expanded
        class_token = self.class_token.expand([x.shape[0], 1, self.embed_dim])  # [B, 1, D]
        x = self.patch_embedding(x).flatten(2).transpose([0, 2, 1])  # [B, N, D]
        x = paddle.concat([class_token.astype(x.dtype), x], axis=1)  # [B, 1 + N, D]
        x = x + over_the_batch(self.position_embedding, x)  # [B, 1 + N, D]
        return self.dropout(x)


class ExpandedAddPositionEmbedding(AddPositionEmbedding):
    """`AddPositionEmbedding` with the table expanded to the batch first in eager float32 on a CPU."""

    variant_of = AddPositionEmbedding

    def forward(self, x, position_embedding):
        if eager_cpu_float32(x):
            position_embedding = over_the_batch(position_embedding, x)  # the module's add, now elementwise
        return super().forward(x, position_embedding)


class ExpandedAddPatchPositionEmbedding(AddPatchPositionEmbedding):
    """`AddPatchPositionEmbedding` (no_embed_class) with the table expanded to the batch first in
    eager float32 on a CPU."""

    variant_of = AddPatchPositionEmbedding

    def forward(self, x, position_embedding):
        if eager_cpu_float32(x):
            position_embedding = over_the_batch(position_embedding, x)  # the module's add, now elementwise
        return super().forward(x, position_embedding)


@contextlib.contextmanager
def dense_transposes():
    """Paddle's stride kernels off while the body runs, as they were afterwards: with them on, each
    transpose is a view that the next kernel copies with a slow generic strided copy
    (docs/benchmarks.md, "Process settings"); off, a view of a tensor does not share its memory,
    which only our own forward pass sees here."""
    stride_kernels = paddle.get_flags(["FLAGS_use_stride_kernel"])["FLAGS_use_stride_kernel"]
    if not stride_kernels:
        yield
        return
    paddle.set_flags({"FLAGS_use_stride_kernel": False})
    try:
        yield
    finally:
        paddle.set_flags({"FLAGS_use_stride_kernel": True})


class DenseTransposeViT(ViT):
    """`ViT` whose forward pass in eager mode on a CPU runs with dense transposes (`dense_transposes`),
    so a model is as fast in a script that left the stride kernels on as under `runtime.configure()`."""

    variant_of = ViT

    def forward(self, x):
        if not (runs_on_cpu() and paddle.in_dynamic_mode()):
            return super().forward(x)
        with dense_transposes():
            return super().forward(x)

