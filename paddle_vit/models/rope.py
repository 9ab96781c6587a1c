"""Rotary position embedding (RoPE) for the ViTs of 2023-2025: the position enters attention by
rotating q and k, not by adding a vector to the tokens.

Each pair of a head's channels is a point in a plane, turned by an angle that grows with the
token's position: q . k then depends on where the two tokens are relative to each other. In two
dimensions a quarter of the pairs turn with the row, a quarter with the column (axial), or every
pair with a learned mix of both (mixed). v is never rotated, nor are the prefix tokens (class,
registers): they have no place in the grid.

One class per kind the checkpoints need; each builds, for a grid of rows x cols patches, a
`RotaryTable` that the encoder hands to every layer's `Attention` (``q, k = rotate_qk(q, k, rope)``):
- `AxialRope`: EVA-02, the Perception Encoder, RoPE-ViT ``rope`` and timm's rope GAP models
  (timm's RotaryEmbeddingCat): integer patch coordinates (+ an offset), frequencies
  temperature^(-i / n), optionally rescaled to a reference grid (EVA-02's ``ref_feat_shape``);
- `MixedRope`: RoPE-ViT ``rope_mixed`` (Heo et al., ECCV 2024): learned frequencies per layer and
  head that mix the two axes (timm's RotaryEmbeddingMixed);
- `DinoV3Rope`: DINOv3 (Meta, 2025): patch centres normalised to [-1, 1] per axis, periods
  base^(2 i / (d / 2)) (base 100), angles 2 pi x / period (timm's RotaryEmbeddingDinoV3).

The layout of a head's d channels into pairs is the checkpoint's: interleaved (2i, 2i+1), or
"rotate half" (i, i + d / 2; DINOv3). The same weights give other numbers in the other layout.
"""
import math

import numpy as np
import paddle
import paddle.nn as nn

from ..errors import ConfigError

ROPE_KINDS = ("axial", "mixed", "dinov3")
GRID_INDEXINGS = ("ij", "xy")
# each kind's default frequency base (timm's rope_temperature): RoPE-ViT's mixed frequencies
# start from 10, DINOv3's periods from 100
DEFAULT_TEMPERATURE = {"axial": 10000.0, "mixed": 10.0, "dinov3": 100.0}


def rotate_pairs(x, rotate_half):
    """The quarter-turn of each channel pair of `x` [B, ., ., d]: (a, b) -> (-b, a).
    Interleaved pairs (2i, 2i+1): [x0, x1, x2, x3] -> [-x1, x0, -x3, x2];
    rotate-half pairs (i, i + d/2): [x0, x1, x2, x3] -> [-x2, -x3, x0, x1]."""
    if rotate_half:
        first, second = x.chunk(2, axis=-1)  # 2 x [B, ., ., d / 2]
        return paddle.concat([-second, first], axis=-1)
    # as a product with a fixed d x d matrix: splitting the pairs along the last axis (unbind of
    # [..., d/2, 2]) is several times slower on a CPU than the whole attention
    return paddle.matmul(x, paddle.to_tensor(pair_rotation(x.shape[-1]), dtype=x.dtype))  # [B, ., ., d]


@paddle.jit.not_to_static  # a numpy constant, not graph code
def pair_rotation(width):
    """[d, d]: x @ R turns each interleaved pair (x_2i, x_2i+1) into (-x_2i+1, x_2i)."""
    if width not in _PAIR_ROTATIONS:
        rotation = np.zeros((width, width), np.float32)
        rotation[1::2, 0::2] = -np.eye(width // 2, dtype=np.float32)  # out_2i = -x_2i+1
        rotation[0::2, 1::2] = np.eye(width // 2, dtype=np.float32)  # out_2i+1 = x_2i
        _PAIR_ROTATIONS[width] = rotation
    return _PAIR_ROTATIONS[width]


_PAIR_ROTATIONS = {}


def pair_layout(angles, rotate_half):
    """Per-pair values [..., d / 2] -> per-channel [..., d] in the pairs' layout (numpy or Paddle)."""
    if isinstance(angles, np.ndarray):
        return np.concatenate([angles, angles], -1) if rotate_half else np.repeat(angles, 2, axis=-1)
    if rotate_half:
        return paddle.concat([angles, angles], axis=-1)  # [f0, f1, .., f0, f1, ..]
    return paddle.stack([angles, angles], axis=-1).reshape(angles.shape[:-1] + [2 * angles.shape[-1]])  # [f0, f0, ..]


class RotaryTable:
    """The sines and cosines of one input's grid, and the rotation of q and k by them.

    sin, cos: [N, d] (one table for every layer and head), or [L, H, N, d] (mixed RoPE: per
    layer and head); the first `num_prefix_tokens` tokens are left as they are."""

    def __init__(self, sin, cos, num_prefix_tokens, rotate_half, per_layer=False):
        self.sin, self.cos = sin, cos
        self.num_prefix_tokens = num_prefix_tokens
        self.rotate_half = rotate_half
        self.per_layer = per_layer

    def layer(self, index):
        """The table of encoder layer `index` ([H, N, d] for mixed RoPE, else the same table)."""
        if not self.per_layer:
            return self
        return RotaryTable(self.sin[index], self.cos[index], self.num_prefix_tokens, self.rotate_half)

    def rotate(self, q, k, heads_first=True):
        """q, k: [B, H, N, d] (heads_first) or [B, N, H, d] -> the same, the patch tokens rotated."""
        return self.rotate_one(q, heads_first), self.rotate_one(k, heads_first)

    def rotate_one(self, x, heads_first):
        sin, cos = self.sin, self.cos  # [N, d] or [H, N, d]
        if sin.dtype != x.dtype:  # bfloat16 / float16 activations: the table in their dtype
            sin, cos = sin.astype(x.dtype), cos.astype(x.dtype)
        if not heads_first:  # [B, N, H, d]: the table's heads (if any) after its tokens
            sin, cos = (sin.transpose([1, 0, 2]), cos.transpose([1, 0, 2])) if sin.ndim == 3 else (
                sin.unsqueeze(1), cos.unsqueeze(1))  # [N, H or 1, d]
        token_axis = 2 if heads_first else 1
        prefix = self.num_prefix_tokens
        patches = x[:, :, prefix:] if heads_first else x[:, prefix:]  # the tokens with a place in the grid
        patches = patches * cos + rotate_pairs(patches, self.rotate_half) * sin
        if prefix == 0:
            return patches
        return paddle.concat([x[:, :, :prefix] if heads_first else x[:, :prefix], patches], axis=token_axis)


def rotate_qk(q, k, rope, heads_first=True):
    """q and k turned by `rope`, a `RotaryTable`; as they are for None (the paper's ViT)."""
    return (q, k) if rope is None else rope.rotate(q, k, heads_first)


def rope_of_layer(rope, index):
    """Encoder layer `index`'s table of `rope` (mixed RoPE: its own frequencies); None for None."""
    return None if rope is None else rope.layer(index)


def grid_coordinates(rows, cols, indexing="ij", centred=False, offset=0.0, ref_grid=None):
    """[rows * cols, 2] float32 coordinates (numpy) of the patch grid, row-major, the channels
    (row, col) for 'ij' and (col, row) for 'xy' (timm's grid_indexing).

    centred: (index + 0.5 + offset) / size mapped to [-1, 1] (DINOv3); else index + offset,
    rescaled to `ref_grid` (rows, cols) when given (EVA-02's ref_feat_shape: a 16 x 16-trained
    model at 32 x 32 sees coordinates 0, 0.5, 1, ...). In float32, in timm's order of operations.
    A fixed function of the grid: computed in numpy, a constant of any traced graph."""
    axes = []
    for axis, size in enumerate((rows, cols)):
        if centred:
            values = (np.arange(0.5, size, dtype=np.float32) + np.float32(offset)) / np.float32(size)
        else:
            values = np.arange(size, dtype=np.float32) + np.float32(offset)
            if ref_grid is not None:
                values = values / np.float32(size) * np.float32(ref_grid[axis])
        axes.append(values)
    row_coords, col_coords = np.meshgrid(axes[0], axes[1], indexing="ij")  # 2 x [rows, cols]
    channels = [row_coords, col_coords] if indexing == "ij" else [col_coords, row_coords]
    grid = np.stack(channels, axis=-1).reshape(rows * cols, 2)  # [N, 2]
    return (np.float32(2.0) * grid - np.float32(1.0)) if centred else grid


def operand(array, grid):
    """`array` (numpy) where `grid` is numpy, else as a tensor: the tables' arithmetic reads the
    same for both (a traced graph computes them from tensors, variants/graph.py)."""
    return array if isinstance(grid, np.ndarray) else paddle.to_tensor(array)


class FixedRope(nn.Layer):
    """A rotary embedding with no parameter: its table a fixed function of the grid, computed
    once per grid in numpy, in float32 and timm's order of operations (so a traced graph holds
    it as a constant). A kind gives `angles` of the grid's coordinates; `grid_options` are how
    `grid_coordinates` lays the grid out for it."""

    def __init__(self, num_prefix_tokens, rotate_half, grid_options):
        super().__init__()
        self.num_prefix_tokens, self.rotate_half, self.grid_options = num_prefix_tokens, rotate_half, grid_options
        self.cached = {}

    def forward(self, rows, cols):
        """The table of a rows x cols grid."""
        if (rows, cols) not in self.cached:
            angles = self.angles(grid_coordinates(rows, cols, **self.grid_options))  # [N, d]
            self.cached[(rows, cols)] = (np.sin(angles), np.cos(angles))
        sin, cos = self.cached[(rows, cols)]
        return RotaryTable(paddle.to_tensor(sin), paddle.to_tensor(cos), self.num_prefix_tokens, self.rotate_half)

    def table_of(self, angles):
        """The table of `angles` [N, d] given as a tensor."""
        return RotaryTable(paddle.sin(angles), paddle.cos(angles), self.num_prefix_tokens, self.rotate_half)


class AxialRope(FixedRope):
    """Axial RoPE: the first half of the pairs turn with the grid's first coordinate channel,
    the second half with the other, at frequencies temperature^(-i / n), i < n = d / 4
    (timm's RotaryEmbeddingCat with in_pixels=False)."""

    def __init__(self, head_dim, num_prefix_tokens, temperature=10000.0, grid_offset=0.0, grid_indexing="ij",
                 rotate_half=False, ref_grid=None):
        super().__init__(num_prefix_tokens, rotate_half, dict(
            indexing=grid_indexing, offset=grid_offset, ref_grid=tuple(ref_grid) if ref_grid is not None else None))
        bands = head_dim // 4
        self.frequencies = (1.0 / np.float32(temperature) ** (np.arange(bands, dtype=np.float32) / bands)).astype(
            np.float32)  # [d / 4]

    def angles(self, grid):
        """[N, 2] coordinates -> [N, d] angles: coordinate x frequency, the two channels' side by side."""
        angles = (grid[:, :, None] * operand(self.frequencies, grid)).reshape([-1, 2 * len(self.frequencies)])
        return pair_layout(angles, self.rotate_half)  # [N, 2, d / 4] -> [N, d / 2] -> [N, d]


class MixedRope(nn.Layer):
    """RoPE-Mixed: per layer and head, d / 2 learned 2-D frequency vectors (f_x, f_y); pair i
    turns by x f_x,i + y f_y,i. Initialised as RoPE-ViT: magnitudes temperature^(-4 i / d) at a
    random angle per layer and head, and the same magnitudes a quarter-turn on (timm's
    init_random_2d_freqs). `frequencies`: [2, L, H, d / 2], a parameter."""

    def __init__(self, head_dim, depth, num_heads, num_prefix_tokens, temperature=10.0, grid_indexing="xy"):
        super().__init__()
        self.num_prefix_tokens = num_prefix_tokens
        self.grid_options = dict(indexing=grid_indexing)
        magnitudes = 1.0 / (temperature ** (paddle.arange(0, head_dim, 4, dtype="float32") / head_dim))  # [d / 4]
        angles = paddle.rand([depth, num_heads, 1]) * 2 * math.pi  # [L, H, 1]
        f_x = paddle.concat([magnitudes * paddle.cos(angles), magnitudes * paddle.cos(angles + math.pi / 2)], -1)
        f_y = paddle.concat([magnitudes * paddle.sin(angles), magnitudes * paddle.sin(angles + math.pi / 2)], -1)
        self.frequencies = self.create_parameter(
            [2, depth, num_heads, head_dim // 2],
            default_initializer=nn.initializer.Assign(paddle.stack([f_x, f_y])))  # [2, L, H, d / 2]

    def forward(self, rows, cols):
        grid = paddle.to_tensor(grid_coordinates(rows, cols, **self.grid_options))  # [N, 2]
        return self.table_of(self.angles(grid))

    def angles(self, grid):
        """[N, 2] coordinates (a tensor) -> [L, H, N, d] angles, from the learned frequencies."""
        t_x, t_y = grid[:, 0], grid[:, 1]  # [N] each
        angles = (t_x.unsqueeze(-1) * self.frequencies[0].unsqueeze(-2)
                  + t_y.unsqueeze(-1) * self.frequencies[1].unsqueeze(-2))  # [L, H, N, d / 2]
        return pair_layout(angles, rotate_half=False)  # [L, H, N, d]

    def table_of(self, angles):
        return RotaryTable(paddle.sin(angles), paddle.cos(angles), self.num_prefix_tokens, rotate_half=False,
                           per_layer=True)


class DinoV3Rope(FixedRope):
    """DINOv3's RoPE: patch centres normalised to [-1, 1] per axis, periods base^(2 i / (d / 2)),
    i < d / 4, angles 2 pi x / period; its rescale and jitter of the coordinates are training
    augmentation of DINOv3's own pre-training, not part of the model."""

    def __init__(self, head_dim, num_prefix_tokens, temperature=100.0, grid_offset=0.0, grid_indexing="ij",
                 rotate_half=True):
        super().__init__(num_prefix_tokens, rotate_half, dict(indexing=grid_indexing, centred=True,
                                                              offset=grid_offset))
        bands = head_dim // 4
        self.periods = (np.float32(temperature) ** (np.float32(2.0) * np.arange(bands, dtype=np.float32)
                                                   / np.float32(head_dim // 2))).astype(np.float32)  # [d / 4]

    def angles(self, grid):
        """[N, 2] coordinates -> [N, d] angles 2 pi x / period, the two channels' side by side."""
        two_pi = operand(np.array([2 * math.pi], np.float32), grid)
        angles = (two_pi * grid[:, :, None] / operand(self.periods, grid)).reshape([-1, 2 * len(self.periods)])
        return pair_layout(angles, self.rotate_half)  # [N, d]


def build_rope(config):
    """The RoPE module `config` asks for (config.rope_kind), or None."""
    kind = config.rope_kind
    if kind is None:
        return None
    head_dim = config.embed_dim // config.num_heads
    temperature = config.rope_temperature if config.rope_temperature is not None else DEFAULT_TEMPERATURE[kind]
    prefix = config.num_prefix_tokens
    if kind == "mixed":
        return MixedRope(head_dim, config.depth, config.num_heads, prefix, temperature, config.rope_grid_indexing)
    if kind == "dinov3":
        return DinoV3Rope(head_dim, prefix, temperature, config.rope_grid_offset, config.rope_grid_indexing,
                          config.rope_rotate_half)
    return AxialRope(head_dim, prefix, temperature, config.rope_grid_offset, config.rope_grid_indexing,
                     config.rope_rotate_half, config.rope_ref_grid)


def check_rope_head_dim(kind, embed_dim, num_heads, rotate_half):
    """RoPE turns pairs of a head's channels, a quarter of them per axis: d must be a multiple of 4."""
    head_dim = embed_dim // num_heads
    if head_dim % 4:
        raise ConfigError(f"model.rope {kind!r} turns pairs of channels, a quarter of a head's per grid axis: "
                          f"model.num_heads {num_heads} with model.embed_dim {embed_dim} makes heads {head_dim} wide, "
                          f"which must be a multiple of 4")
    if kind == "mixed" and rotate_half:
        raise ConfigError("model.rope 'mixed' pairs neighbouring channels (RoPE-ViT, timm): "
                          "model.rope_rotate_half must be false")
