"""What a traced graph computes with (`paddle.jit.to_static`, `paddle.jit.save` for export and the
paddle.inference predictor). Each variant computes as its module in eager mode; in a traced graph
it writes the module out in plain ops where the fused one converts or runs badly:

- on a CPU, attention's q, k and v each from its own columns of the qkv weights, so oneDNN's
  passes fold the head reshape/transpose into the matrix products, faster in fp32 and bf16 than
  slicing the packed projection (docs/benchmarks.md, "What made the difference");
- GELU's tanh approximation written out: paddle2onnx converts every gelu to the exact erf form
  (2.4e-4 off on the logits of a small model), so exports of the JAX checkpoints would not
  compute what the eager model does;
- GroupNorm written out: paddle2onnx 2.x exports it as InstanceNormalization with an epsilon read
  from uninitialised memory (seen: 0, 5e-20, 1e-38; logits off by up to 7 between two exports);
- dynamic_img_pad's zero padding written out as concatenated zeros: paddle2onnx 2.x exports the
  pad op with a pad value read from uninitialised memory (seen: 7e19, 5e-27), so padded exports
  gave other logits on every conversion;
- means as a sum times 1/count (token pooling, weight standardisation): a traced `mean` makes
  Paddle Inference's oneDNN pass print "ReduceMeanCheckIfOneDNNSupport" on stdout once per op,
  into the output of eval and predict; and the walkthrough's AdaptiveAvgPool1D, whose 3-D pool
  oneDNN's bf16 passes cannot place ("should be 4-D").
"""
import math

import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from ..models.attention import Attention
from ..models.resnet import StdConv2D
from ..models.rope import AxialRope, DinoV3Rope, MixedRope
from ..models.token_embed import DynamicSize
from ..models.vit import ViT
from .cpu import runs_on_cpu


def mean_over(x, axes):
    """The mean over `axes` (kept), as a sum times 1/count: `mean`'s numbers without its op."""
    count = 1
    for axis in axes:
        count *= x.shape[axis]
    return x.sum(axis=axes, keepdim=True) * (1.0 / count)


def plain(attention, rope):
    """Whether `attention` is the paper's: the walkthrough's one q/k/v Linear, no RoPE. The traced
    variants compute that one; a later ViT's parts (block_parts.py, rope.py) take the module's path."""
    return rope is None and isinstance(attention.qkv, nn.Linear)


class TracedCpuAttention(Attention):
    """`Attention`'s fused path in a graph traced on a CPU in float32: q, k and v each from its own
    columns of the qkv weights, [B, N, D] -> [B, H, N, d] by a reshape and a transpose that
    oneDNN folds into the products (the packed path's transpose and split stay separate ops in a
    graph, and its unbind has no bfloat16 kernel). Same parameters, same numbers."""

    variant_of = Attention

    def fused_attention(self, x, rope=None):
        if not (x.dtype == paddle.float32 and runs_on_cpu() and not paddle.in_dynamic_mode()) or not plain(self, rope):
            return super().fused_attention(x, rope)
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


class OnnxAttention(Attention):
    """`Attention`'s fused path in a graph traced for ONNX: the packed projection `x @ W_qkv + b`
    once, then the activations reshaped and split into q, k and v ([B, N, 3 D] -> 3 x [B, H, N, d]).
    The weights then reach their MatMul as they are stored (an initializer of the ONNX file), which
    is what ONNX Runtime's quantizer needs to quantize it; slicing the weights at run time, as
    `TracedCpuAttention` does for oneDNN, hides them from it. Same parameters, same numbers."""

    variant_of = Attention

    def fused_attention(self, x, rope=None):
        if paddle.in_dynamic_mode() or not plain(self, rope):
            return super().fused_attention(x, rope)
        width = self.all_head_dim
        qkv = self.qkv(x).reshape([0, 0, 3, self.num_heads, self.head_dim])  # [B, N, 3, H, d]
        qkv = qkv.transpose([2, 0, 3, 1, 4])  # [3, B, H, N, d]
        q, k, v = qkv.unbind(axis=0)  # 3 x [B, H, N, d]
        attention = F.softmax(paddle.matmul(q, k, transpose_y=True) * self.scales, axis=-1)  # [B, H, N, N]
        attention = self.attention_dropout(attention)
        out = paddle.matmul(attention, v).transpose([0, 2, 1, 3]).reshape([0, 0, width])  # [B, N, H * d]
        return self.dropout(self.proj(out))


class WrittenOutTanhGELU(nn.GELU):
    """GELU's tanh approximation, 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), as flax's
    nn.gelu computes it, written out in a traced graph (eagerly: Paddle's gelu(approximate=True))."""

    variant_of = nn.GELU

    def forward(self, x):
        if paddle.in_dynamic_mode() or not self._approximate:
            return super().forward(x)
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + paddle.tanh(inner))


class WrittenOutGroupNorm(nn.GroupNorm):
    """GroupNorm, [B, C, H, W] -> [B, C, H, W], written out in a traced graph: the mean and
    variance of each group of C/G channels."""

    variant_of = nn.GroupNorm

    def forward(self, x):
        if paddle.in_dynamic_mode():
            return super().forward(x)
        batch, channels, rows, cols = x.shape
        groups = x.reshape([0, self._num_groups, channels // self._num_groups * rows * cols])  # [B, G, C/G * H * W]
        centred = groups - mean_over(groups, [2])  # [B, G, C/G * H * W] - [B, G, 1]
        variance = mean_over(centred * centred, [2])  # [B, G, 1]
        normalised = (centred / paddle.sqrt(variance + self._epsilon)).reshape([0, channels, rows, cols])
        return normalised * self.weight.reshape([1, -1, 1, 1]) + self.bias.reshape([1, -1, 1, 1])


class TraceableStdConv2D(StdConv2D):
    """`StdConv2D` whose weight standardisation, in a traced graph, takes its means as sums."""

    variant_of = StdConv2D

    def standardized_weight(self):
        if paddle.in_dynamic_mode():
            return super().standardized_weight()
        weight = self.weight  # [O, I, kh, kw]
        centred = weight - mean_over(weight, [1, 2, 3])  # [O, I, kh, kw] - [O, 1, 1, 1]
        variance = mean_over(centred * centred, [1, 2, 3])  # [O, 1, 1, 1], biased, as both codes
        return self.standardize(centred, variance)


class TraceableDynamicSize(DynamicSize):
    """`DynamicSize` (a patch embedding's dynamic_img_size steps) in a traced graph, where H and W
    are known only when the graph runs: the grid read with `paddle.shape`, the divisibility check
    left to the run, and dynamic_img_pad's padding written out as concatenated zero columns and
    rows (paddle2onnx exports Paddle's pad op with an uninitialised pad value)."""

    variant_of = DynamicSize

    def forward(self, x):
        if paddle.in_dynamic_mode():
            return super().forward(x)
        if not self.pad:
            return x
        patch = self.patch_size
        shape = paddle.shape(x)  # [4], int64: known when the graph runs
        pad_bottom, pad_right = (patch - shape[2] % patch) % patch, (patch - shape[3] % patch) % patch
        zero_column = paddle.zeros_like(x[:, :, :, :1])  # [B, C, H, 1]
        x = paddle.concat([x, paddle.tile(zero_column, [1, 1, 1, pad_right])], axis=3)  # [B, C, H, W']
        zero_row = paddle.zeros_like(x[:, :, :1, :])  # [B, C, 1, W']
        return paddle.concat([x, paddle.tile(zero_row, [1, 1, pad_bottom, 1])], axis=2)  # [B, C, H', W']

    def position_embedding(self, table, patches):
        if paddle.in_dynamic_mode() or table is None:
            return super().position_embedding(table, patches)
        grid = paddle.shape(patches)  # [4], int64: known when the graph runs
        return self.position_embedding_at(table, grid[2], grid[3])


class TraceableViT(ViT):
    """`ViT` whose token pooling, in a traced graph, takes its means as sums (the walkthrough's
    AdaptiveAvgPool1D included)."""

    variant_of = ViT

    def average_tokens(self, x):
        if paddle.in_dynamic_mode():
            return super().average_tokens(x)
        return mean_over(x, [1]).squeeze(1)  # [B, N, D] -> [B, D]

    def rope_for(self, x):
        """A dynamic_img_size model's rotary table in a traced graph: the grid read with
        `paddle.shape` when the graph runs (the built grid otherwise, as in eager code)."""
        if paddle.in_dynamic_mode() or self.rope is None or not self.config.dynamic_img_size:
            return super().rope_for(x)
        shape, patch = paddle.shape(x), self.config.patch_size  # [4], int64
        if self.config.dynamic_img_pad:
            return self.rope((shape[2] + patch - 1) // patch, (shape[3] + patch - 1) // patch)
        return self.rope(shape[2] // patch, shape[3] // patch)

    def pool_tokens(self, x):
        if paddle.in_dynamic_mode() or self.config.pool != "walkthrough":
            return super().pool_tokens(x)
        return self.fc_norm(mean_over(x.transpose([0, 2, 1]), [2]).flatten(1))  # [B, 1 + N, D] -> [B, D, 1] -> [B, D]


def traced_grid(rows, cols, indexing="ij", centred=False, offset=0.0, ref_grid=None):
    """`models.rope.grid_coordinates` with the grid's sides known only when the graph runs (int64
    scalar tensors): [rows * cols, 2] float32, in the same order of operations."""
    axes = []
    for axis, size in enumerate((rows, cols)):
        values = paddle.arange(size).astype("float32")
        if centred:
            values = (values + 0.5 + offset) / size.astype("float32")
        else:
            values = values + offset
            if ref_grid is not None:
                values = values / size.astype("float32") * float(ref_grid[axis])
        axes.append(values)
    row_coords = paddle.tile(axes[0].unsqueeze(1), [1, cols])  # [rows, cols]
    col_coords = paddle.tile(axes[1].unsqueeze(0), [rows, 1])  # [rows, cols]
    channels = [row_coords, col_coords] if indexing == "ij" else [col_coords, row_coords]
    grid = paddle.stack(channels, axis=-1).reshape([-1, 2])  # [N, 2]
    return 2.0 * grid - 1.0 if centred else grid


class TracedGridTable:
    """A rotary embedding in a traced graph whose input size is read when it runs
    (dynamic_img_size): the grid laid out in the graph from its sides, then the kind's own angles
    and table; the same numbers. At a size known while tracing, the module's table as it is."""

    def forward(self, rows, cols):
        if isinstance(rows, int):
            return self.variant_of.forward(self, rows, cols)  # (a traced method has no super())
        return self.table_of(self.angles(traced_grid(rows, cols, **self.grid_options)))


class TraceableAxialRope(TracedGridTable, AxialRope):
    variant_of = AxialRope


class TraceableDinoV3Rope(TracedGridTable, DinoV3Rope):
    variant_of = DinoV3Rope


class TraceableMixedRope(TracedGridTable, MixedRope):
    variant_of = MixedRope


TRACEABLE = (TracedCpuAttention, WrittenOutTanhGELU, WrittenOutGroupNorm, TraceableStdConv2D, TraceableViT,
             TraceableDynamicSize, TraceableAxialRope, TraceableDinoV3Rope, TraceableMixedRope)

# the graph an ONNX export traces: the same, with the attention's weights left whole
ONNX_GRAPH = tuple(OnnxAttention if variant is TracedCpuAttention else variant for variant in TRACEABLE)
