"""Multi-head self-attention (paper Eq. 2, Appendix A).

Two paths compute the same numbers:
- the walkthrough's explicit path: q @ k^T * scale (head_dim^-0.5 unless `qk_scale` says otherwise),
  softmax, @ v. Readable, and the only
  one that can hand back the attention weights;
- the fast path, used when ``fused=True`` (the registry's default) and no weights are asked for:
  Paddle's fused ``scaled_dot_product_attention`` (flash attention on GPU in fp16/bf16). On CPU
  Paddle has no fused attention kernel (the function falls back to transposing q, k and v one by
  one), so there the fast path lays the q/k/v projection out head-major with a single transpose
  and scales q (N x d) rather than the scores (N x N): 5-7% faster inference and training than
  the explicit path (docs/benchmarks.md). Asking for weights falls back to the explicit path,
  so visualisation works whichever path the model runs with.
  In eager training on CPU (no attention dropout) the fast path also keeps only q, k and v for
  the backward pass and computes the weights again there (`RecomputedAttention`), as PyTorch's
  fused CPU attention and flash attention do: the [B, H, N, N] weights of every layer are not
  held from the forward to the backward pass. ViT-Ti/16 training at batch 8: peak memory
  -44 MiB, about 5% slower (docs/benchmarks.md).
"""
import paddle
import paddle.nn as nn
import paddle.nn.functional as F
from paddle.autograd import PyLayer

from ..errors import ConfigError
from .linear import Linear, runs_on_cpu


class RecomputedAttention(PyLayer):
    """softmax(q k^T) v for q already scaled, [B, H, N, d] x 3 -> [B, H, N, d], keeping only q,
    k and v for the backward pass, which computes the weights P = softmax(q k^T) again:
        dv = P^T dout,  dP = dout v^T,  dS = P * (dP - rowsum(dP * P)),  dq = dS k,  dk = dS^T q
    """

    @staticmethod
    def weights(q, k):
        return F.softmax(paddle.matmul(q, k, transpose_y=True), axis=-1)  # [B, H, N, N]

    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        return paddle.matmul(RecomputedAttention.weights(q, k), v)  # [B, H, N, d]

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensor()
        weights = RecomputedAttention.weights(q, k)  # [B, H, N, N], again
        grad_v = paddle.matmul(weights, grad_out, transpose_x=True)  # [B, H, N, d]
        grad_weights = paddle.matmul(grad_out, v, transpose_y=True)  # [B, H, N, N]
        grad_scores = weights * (grad_weights - (grad_weights * weights).sum(axis=-1, keepdim=True))
        return paddle.matmul(grad_scores, k), paddle.matmul(grad_scores, q, transpose_x=True), grad_v


class Attention(nn.Layer):
    """Multi-head self-attention, [B, N, D] -> [B, N, D].

    Args:
        embed_dim: D, the token width.
        num_heads: H; each head works on D / H channels.
        qkv_bias: whether the fused q/k/v projection has a bias (True in ViT).
        dropout: dropout after the output projection.
        attention_dropout: dropout on the attention weights.
        fused: use Paddle's fused scaled_dot_product_attention when weights are not requested.
        qk_scale: the factor of q k^T; None is head_dim^-0.5 (paper Eq. 5). Every path uses it.
    """

    def __init__(self, embed_dim, num_heads, qkv_bias=True, dropout=0.0, attention_dropout=0.0, fused=False,
                 qk_scale=None):
        super().__init__()
        if embed_dim % num_heads != 0:
            raise ConfigError(f"embed_dim {embed_dim} is not divisible by num_heads {num_heads}: "
                              f"choose num_heads among the divisors of {embed_dim}")
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.all_head_dim = self.head_dim * num_heads
        self.scales = qk_scale if qk_scale is not None else self.head_dim ** -0.5
        self.fused = fused
        self.attention_dropout_rate = attention_dropout
        # walkthrough bug fixed: its `bias_attr=False if qkv_bias is True else None` dropped the bias when asked for
        self.qkv = Linear(embed_dim, self.all_head_dim * 3, bias_attr=None if qkv_bias else False)
        self.proj = Linear(self.all_head_dim, embed_dim)
        self.dropout = nn.Dropout(dropout)
        self.attention_dropout = nn.Dropout(attention_dropout)
        self.softmax = nn.Softmax(axis=-1)

    def transpose_multihead(self, x):
        # [B, N, H * d] -> [B, N, H, d] -> [B, H, N, d]
        x = x.reshape([0, 0, self.num_heads, self.head_dim])
        return x.transpose([0, 2, 1, 3])

    def forward(self, x, return_attention=False):
        """x: [B, N, D]. Returns out [B, N, D], and the weights [B, H, N, N] when asked."""
        if self.fused and not return_attention:
            return self._forward_fused(x)
        batch_size, num_tokens, _ = x.shape
        qkv = self.qkv(x).chunk(3, axis=-1)  # 3 x [B, N, H * d]
        q, k, v = map(self.transpose_multihead, qkv)  # 3 x [B, H, N, d]
        attention = paddle.matmul(q, k, transpose_y=True)  # [B, H, N, N]
        attention = attention * self.scales
        attention = self.softmax(attention)
        weights = attention
        attention = self.attention_dropout(attention)
        out = paddle.matmul(attention, v)  # [B, H, N, d]
        out = out.transpose([0, 2, 1, 3])  # [B, N, H, d]
        out = out.reshape([0, 0, self.all_head_dim])  # [B, N, H * d]
        out = self.proj(out)  # [B, N, D]
        out = self.dropout(out)
        return (out, weights) if return_attention else out

    def _forward_fused(self, x):
        cpu_float32 = x.dtype == paddle.float32 and runs_on_cpu()
        if cpu_float32 and not paddle.in_dynamic_mode():
            return self._forward_traced_cpu(x)
        # [B, N, 3 * H * d] -> [B, N, 3, H, d]: Paddle's fused kernel takes [B, N, H, d], so no transpose
        qkv = self.qkv(x).reshape([0, 0, 3, self.num_heads, self.head_dim])
        if cpu_float32:
            return self._forward_packed(qkv)
        q, k, v = qkv.unbind(axis=2)  # 3 x [B, N, H, d]
        if self.scales != self.head_dim ** -0.5:
            # the fused kernels scale by head_dim^-0.5 and not every backend takes another
            # factor (flash attention ignores `scale`): fold the rest into q
            q = q * (self.scales * self.head_dim ** 0.5)
        out = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.attention_dropout_rate if self.training else 0.0,
            training=self.training)  # [B, N, H, d]
        out = out.reshape([0, 0, self.all_head_dim])  # [B, N, H * d]
        out = self.proj(out)  # [B, N, D]
        return self.dropout(out)

    def _forward_packed(self, qkv):
        """The CPU fast path from the packed projection qkv [B, N, 3, H, d] (module docstring)."""
        q, k, v = qkv.transpose([2, 0, 3, 1, 4]).unbind(axis=0)  # one transpose, 3 x [B, H, N, d]
        q = q * self.scales
        if self._recompute_weights():
            out = RecomputedAttention.apply(q, k, v)  # [B, H, N, d]
        else:
            attention = paddle.matmul(q, k, transpose_y=True)  # [B, H, N, N]
            attention = self.softmax(attention)
            attention = self.attention_dropout(attention)
            out = paddle.matmul(attention, v)  # [B, H, N, d]
        out = out.transpose([0, 2, 1, 3]).reshape([0, 0, self.all_head_dim])  # [B, N, H * d]
        out = self.proj(out)  # [B, N, D]
        return self.dropout(out)

    def _forward_traced_cpu(self, x):
        """The graph traced for paddle.inference on a CPU (export, the predictor engine): q, k and
        v each from its own columns of the qkv weights, [B, N, D] -> [B, H, N, d] by a reshape
        and a transpose that oneDNN's passes fold into the matrix products. The packed path's
        transpose and split stay separate ops there, and its unbind has no bfloat16 kernel
        (docs/benchmarks.md: 1.03-1.11x in fp32 and 1.05-1.10x in bf16 over slicing the packed
        tensor, which was itself 1.10-1.22x over unbind in bf16). Same parameters, same numbers."""
        width = self.all_head_dim

        def heads(index):  # [B, N, D] -> [B, H, N, d]
            columns = slice(index * width, (index + 1) * width)
            bias = None if self.qkv.bias is None else self.qkv.bias[columns]
            projected = F.linear(x, self.qkv.weight[:, columns], bias)
            return projected.reshape([0, 0, self.num_heads, self.head_dim]).transpose([0, 2, 1, 3])

        q, k, v = heads(0), heads(1), heads(2)
        attention = F.softmax(paddle.matmul(q, k, transpose_y=True) * self.scales, axis=-1)  # [B, H, N, N]
        attention = self.attention_dropout(attention)
        out = paddle.matmul(attention, v).transpose([0, 2, 1, 3]).reshape([0, 0, width])  # [B, N, H * d]
        return self.dropout(self.proj(out))

    def _recompute_weights(self):
        """Eager training with no dropout on the weights (a recomputation would draw a new mask);
        traced graphs (to_static) keep the plain path."""
        return (self.training and self.attention_dropout_rate == 0.0 and paddle.in_dynamic_mode()
                and paddle.is_grad_enabled())
