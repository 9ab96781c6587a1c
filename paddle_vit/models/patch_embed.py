"""Patch embedding: image -> sequence of patch tokens, class token, position embedding.

The walkthrough's `PatchEmbedding` (paper Section 3.1, Eq. 1): a Conv2D whose stride equals its
kernel cuts the image into non-overlapping P x P patches and projects each to D numbers, which is
the same as flattening every patch and applying one shared Linear. A learnable class token is
prepended and a position embedding added.

Today's ViTs prepend other tokens too (`prepend_prefix_tokens`, all off by default): DeiT's distillation
token after the class token, DINOv2's register tokens after those, or no class token at all
(SigLIP). With ``no_embed_class`` (DeiT III, DINOv2 with registers) the position embedding covers
the patches only and is added before the prefix is prepended, as timm does; otherwise it covers
the prefix tokens too.

Position embedding kinds (paper Appendix D.4, Table 8):
- ``learned``: one learnable vector per token, class token included (the paper's default, 1-D).
- ``learned_2d``: a learnable row embedding and column embedding of D/2 each, concatenated per
  patch; the class token gets a learnable vector of its own.
- ``sincos_2d``: fixed 2-D sine-cosine embedding (not learned); zeros for the class token.
- ``none``: no position information at all.

`HybridEmbedding` (paper Section 3.1, "Hybrid Architecture") is the same module whose Conv2D reads
the feature map of a ResNet (resnet.py) instead of the image: "the patch embedding projection E
is applied to patches extracted from a CNN feature map", 1x1 patches in the paper's hybrids.
"""
import numpy as np
import paddle
import paddle.nn as nn

from ..errors import ConfigError, check_choice
from .patch_embed_hooks import DynamicSize, FigureHooks
from .resize import DEFAULT_RESIZE

POSITION_EMBEDDINGS = ("learned", "learned_2d", "sincos_2d", "none")


def grid_size(image_size, patch_size, drop_remainder=False):
    """(rows, cols) of the patch grid; an image size the patch does not divide is an error, unless
    `drop_remainder` (the Conv2D then leaves the last image_size % patch_size pixels out)."""
    sizes = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
    for size in sizes:
        if size % patch_size != 0 and not drop_remainder:
            raise ConfigError(
                f"image_size {size} is not divisible by patch_size {patch_size}: "
                f"use a multiple of {patch_size} such as {max(patch_size, size // patch_size * patch_size)}")
    return sizes[0] // patch_size, sizes[1] // patch_size


def sincos_2d_embedding(grid_rows, grid_cols, embed_dim, temperature=10000.0):
    """Fixed 2-D sine-cosine position embedding, [rows * cols, D] float32 numpy.

    A quarter of the channels each for sin(row), cos(row), sin(col), cos(col), at geometrically
    spaced frequencies (as in "Attention Is All You Need", applied per axis).
    """
    if embed_dim % 4 != 0:
        raise ConfigError(f"position_embedding 'sincos_2d' needs embed_dim divisible by 4, got {embed_dim}")
    quarter = embed_dim // 4
    omega = 1.0 / temperature ** (np.arange(quarter, dtype=np.float64) / quarter)  # [D/4]
    rows, cols = np.meshgrid(np.arange(grid_rows), np.arange(grid_cols), indexing="ij")
    row_angles = rows.reshape(-1, 1) * omega  # [N, D/4]
    col_angles = cols.reshape(-1, 1) * omega  # [N, D/4]
    table = np.concatenate([np.sin(row_angles), np.cos(row_angles),
                            np.sin(col_angles), np.cos(col_angles)], axis=1)  # [N, D]
    return table.astype("float32")


class PatchEmbedding(DynamicSize, FigureHooks, nn.Layer):
    """[B, C, H, W] image -> [B, 1 + N, D] tokens (class token first), N = (H/P) * (W/P).

    Args:
        image_size: input side (int) or (H, W); the only size accepted unless `dynamic_size`.
        patch_size: P, the side of a square patch (kernel and stride of the Conv2D).
        in_channels: C of the input image.
        embed_dim: D, the width of every token.
        dropout: dropout applied after the position embedding is added.
        position_embedding: one of ``POSITION_EMBEDDINGS``.
        dynamic_size: accept any H x W the patch divides, the position embedding resampled to
            the input's grid in the forward pass (`resize.py`) by `resize_method`
            (None: timm's bicubic with antialias); False: only `image_size`.
        dynamic_pad: with `dynamic_size`, pad the right and bottom with zeros to a multiple of
            the patch (timm's dynamic_img_pad) instead of refusing such a size.
        class_token, distillation_token, register_tokens: the prefix tokens, in timm's order: the
            class token (the paper's), DeiT's distillation token, DINOv2's register tokens; each
            is built only when asked for.
        no_embed_class: the position embedding covers the patches only (timm's no_embed_class).
        patch_bias: whether the Conv2D has a bias (CLIP's has none).
        drop_remainder: take an image_size the patch does not divide, the Conv2D leaving its last
            image_size % patch_size rows and columns out, as timm's does (SigLIP so400m/14 at 384).
    """

    def __init__(self, image_size=224, patch_size=16, in_channels=3, embed_dim=768, dropout=0.0,
                 position_embedding="learned", dynamic_size=False, dynamic_pad=False, resize_method=None,
                 class_token=True, distillation_token=False, register_tokens=0, no_embed_class=False,
                 patch_bias=True, drop_remainder=False):
        super().__init__()
        check_choice("position_embedding", position_embedding, POSITION_EMBEDDINGS)
        self.embed_dim = embed_dim
        self.patch_size = patch_size
        self.grid_size = grid_size(image_size, patch_size, drop_remainder)
        self.drop_remainder = drop_remainder
        sizes = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        self.image_size = sizes if drop_remainder else (self.grid_size[0] * patch_size, self.grid_size[1] * patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.position_embedding_kind = position_embedding
        self.dynamic_size = dynamic_size
        self.dynamic_pad = dynamic_pad
        self.resize_method = resize_method or DEFAULT_RESIZE
        self.patch_embedding = nn.Conv2D(in_channels=in_channels,
                                         out_channels=embed_dim,
                                         kernel_size=patch_size,
                                         stride=patch_size,
                                         bias_attr=None if patch_bias else False)
        self.dropout = nn.Dropout(dropout)
        zeros = nn.initializer.Constant(0.0)
        self.class_token = (self.create_parameter(shape=[1, 1, embed_dim], default_initializer=zeros)
                            if class_token else None)
        self.distillation_token = (self.create_parameter(shape=[1, 1, embed_dim], default_initializer=zeros)
                                   if distillation_token else None)
        self.register_tokens = (self.create_parameter(shape=[1, register_tokens, embed_dim], default_initializer=zeros)
                                if register_tokens else None)
        self.num_prefix_tokens = int(class_token) + int(distillation_token) + register_tokens
        self.no_embed_class = no_embed_class
        # how many prefix tokens have a position embedding row: all of them, or none (no_embed_class)
        self.num_embedded_prefix = 0 if no_embed_class else self.num_prefix_tokens
        self._create_position_embedding(position_embedding)

    def prepend_prefix_tokens(self, x):
        """[B, N, D] -> [B, T + N, D]: the class token (and those of the options) before the patches."""
        tokens = [token for token in (self.class_token, self.distillation_token, self.register_tokens)
                  if token is not None]
        batch, width = x.shape[0], x.shape[2]
        tokens = [token.astype(x.dtype).expand([batch, token.shape[1], width]) for token in tokens]  # [B, t, D]
        return paddle.concat(tokens + [x], axis=1) if tokens else x  # [B, T + N, D]

    def _create_position_embedding(self, kind):
        rows, cols = self.grid_size
        trunc_normal = nn.initializer.TruncatedNormal(std=0.02)
        if kind == "learned":
            self.position_embedding = self.create_parameter(
                shape=[1, self.num_embedded_prefix + self.num_patches, self.embed_dim],
                default_initializer=trunc_normal)
        elif kind == "learned_2d":
            if self.embed_dim % 2 != 0:
                raise ConfigError(f"position_embedding 'learned_2d' needs an even embed_dim, got {self.embed_dim}")
            half = self.embed_dim // 2
            self.row_embedding = self.create_parameter(shape=[1, rows, half], default_initializer=trunc_normal)
            self.column_embedding = self.create_parameter(shape=[1, cols, half], default_initializer=trunc_normal)
            self.class_position_embedding = self.create_parameter(
                shape=[1, 1, self.embed_dim], default_initializer=trunc_normal)
        elif kind == "sincos_2d":
            table = np.concatenate([np.zeros([1, self.embed_dim], "float32"),
                                    sincos_2d_embedding(rows, cols, self.embed_dim)])  # [1 + N, D]
            self.register_buffer("position_embedding", paddle.to_tensor(table[None]), persistable=False)

    def full_position_embedding(self):
        """The position embedding of every token, [1, 1 + N, D], or None for kind ``none``."""
        kind = self.position_embedding_kind
        if kind in ("learned", "sincos_2d"):
            return self.position_embedding
        if kind == "learned_2d":
            rows, cols = self.grid_size
            half = self.embed_dim // 2
            row_part = self.row_embedding.unsqueeze(2).expand([1, rows, cols, half])  # [1, R, C, D/2]
            col_part = self.column_embedding.unsqueeze(1).expand([1, rows, cols, half])  # [1, R, C, D/2]
            grid = paddle.concat([row_part, col_part], axis=-1).reshape([1, rows * cols, self.embed_dim])
            return paddle.concat([self.class_position_embedding, grid], axis=1)  # [1, 1 + N, D]
        return None

    def feature_map(self, x):
        """What the patches are cut from: the image itself (a hybrid: its ResNet's feature map)."""
        return x

    def forward(self, x):
        self.check_input_size(x)  # the size built for (a model built with dynamic_size: any)
        x = self.feature_map(x)  # [B, C, H, W], as it is
        if self.dynamic_size:
            x = self.pad_to_patches(x)  # dynamic_pad: up to a multiple of P
            self.check_patch_division(x)
        # [B, C, H, W] -> [B, D, H/P, W/P]: the stride=kernel Conv2D cuts and projects the patches
        x = self.patch_embedding(x)
        position_embedding = self.position_embedding_for(x)  # [1, 1 + N, D] for this grid
        x = x.flatten(2)  # [B, D, N]
        x = x.transpose([0, 2, 1])  # [B, N, D]
        if self.no_embed_class and position_embedding is not None:  # timm's no_embed_class: patches only
            x = x + position_embedding.astype(x.dtype)  # [B, N, D]
        x = self.prepend_prefix_tokens(x)  # [B, 1 + N, D]: the class token first
        if not self.no_embed_class and position_embedding is not None:
            x = x + position_embedding.astype(x.dtype)  # [B, 1 + N, D]
        # the walkthrough builds self.dropout but never calls it; the paper applies it here
        x = self.dropout(x)
        return x


class HybridEmbedding(PatchEmbedding):
    """[B, C, H, W] image -> ResNet feature map [B, F, H/S, W/S] -> [B, 1 + N, D] tokens,
    N = (H/S/P) * (W/S/P): the backbone runs first, then exactly PatchEmbedding's steps, its
    Conv2D cutting P x P patches of the feature map (1 x 1 in the paper's hybrids).

    Args:
        backbone: the `ResNetV2` (its `out_channels` F and `stride` S; "SAME" padding, so a
            side of n pixels gives ceil(n / S) features).
        feature_size: (rows, cols) of its feature map for `image_size`.
        Other arguments as in `PatchEmbedding`.
    """

    cuts_what = "the ResNet's feature map of the input"

    def __init__(self, backbone, feature_size, image_size=224, patch_size=1, embed_dim=768, dropout=0.0,
                 position_embedding="learned", dynamic_size=False, dynamic_pad=False, resize_method=None, **prefix):
        super().__init__(feature_size, patch_size, backbone.out_channels, embed_dim, dropout, position_embedding,
                         dynamic_size, dynamic_pad, resize_method, **prefix)
        self.backbone = backbone
        self.image_size = (image_size, image_size) if isinstance(image_size, int) else tuple(image_size)
        self.feature_size = tuple(feature_size)

    def feature_map(self, x):
        return self.backbone(x)  # [B, C, H, W] -> [B, F, H/S, W/S]

    def token_grid_for(self, height, width):
        stride = self.backbone.stride  # "SAME": ceil(side / S) features
        return super().token_grid_for(-(-height // stride), -(-width // stride))

    @property
    def token_pixels(self):
        return self.backbone.stride * self.patch_size

    def pixel_filters(self):
        return self.backbone.stem.conv.standardized_weight()  # [64 w, C, 7, 7]
