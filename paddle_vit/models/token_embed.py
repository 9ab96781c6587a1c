"""The patch embedding of the ViTs that came after the paper: `PatchEmbedding`'s steps
(patch_embed.py, the walkthrough's) with their options, each chosen once, when the embedding is
built from the `ViTConfig`, as a part that does nothing when the option is off:

- what the patches are cut from: the image, or a ResNet's feature map (`HybridEmbedding`, the
  paper's hybrids, Section 3.1);
- the input sizes taken (`input_size`): the built one (`FixedSize`), or any (`DynamicSize`:
  timm's dynamic_img_size and dynamic_img_pad, the position embedding resampled to the input's
  grid in the forward pass; a traced graph's variant of it is in paddle_vit/variants/graph.py);
- the patch Conv2D without a bias (CLIP), and an image size the patch does not divide
  (drop_remainder: SigLIP so400m/14 at 384);
- a norm on the patch tokens straight after the Conv2D (`patch_norm`: AIMv2, timm's PatchEmbed
  with a norm_layer), an Identity otherwise;
- the prefix tokens before the patches, in timm's order: the class token (the paper's; SigLIP and
  timm's `*_gap_*` models have none), DeiT's distillation token, DINOv2's register tokens;
- the position embedding, of a kind of the paper's Appendix D.4 (patch_embed.py), and the part
  that adds it (`add_position_embedding`): to every token, to the patches alone (timm's
  no_embed_class: DeiT III, DINOv2 with registers), or not at all (kind ``none``).

The parameters keep the names every checkpoint converter writes (``class_token``,
``position_embedding``, ``register_tokens``, ``backbone.*``, ...): they are the embedding's own,
and its parts hold none. vit.py builds `PatchEmbedding` for a config that asks for none of these
options (`WALKTHROUGH_EMBEDDING`) and this class for one that asks for any.
"""
import numpy as np
import paddle
import paddle.nn as nn
import paddle.nn.functional as F

from ..errors import ConfigError
from .norms import norm_layer
from .patch_embed import sincos_2d_embedding
from .resize import DEFAULT_RESIZE, resize_grid_embedding, sincos_2d_grid

# The ViTConfig fields the embedding reads besides the walkthrough's five (image_size, patch_size,
# in_channels, embed_dim, dropout), at the values with which it computes what the walkthrough's
# PatchEmbedding computes. dynamic_img_pad and pos_embed_resample act only with dynamic_img_size,
# backbone, backbone_width and backbone_style only with backbone_layers.
WALKTHROUGH_EMBEDDING = dict(position_embedding="learned", class_token=True, distilled=False, register_tokens=0,
                             no_embed_class=False, pre_norm=False, drop_remainder=False, dynamic_img_size=False,
                             backbone_layers=None, patch_norm=False)


def is_walkthrough_embedding(config):
    """Whether `config` asks for the walkthrough's PatchEmbedding and no option of later ViTs."""
    return all(getattr(config, name) == value for name, value in WALKTHROUGH_EMBEDDING.items())


class FixedSize(nn.Layer):
    """Inputs of the size the model was built for, as the paper's and the walkthrough's (the ViT
    refuses any other before its embedding sees it): nothing to fit, the position embedding as built."""

    def __init__(self, config):
        super().__init__()
        self.patch_size = config.patch_size

    def forward(self, x):
        return x  # [B, C, H, W] as it is

    def position_embedding(self, table, patches):
        """The built position embedding `table` [1, T' + N, D] (None: kind 'none') for the patch
        grid of `patches` [B, D, h, w], the built grid."""
        return table

    def grid_for(self, height, width):
        """(rows, cols) of the patch grid cut from an H x W input."""
        return height // self.patch_size, width // self.patch_size


class DynamicSize(nn.Layer):
    """Inputs of any size (timm's dynamic_img_size): one the patch does not divide padded with
    zeros on the right and bottom (dynamic_img_pad) or refused (unless drop_remainder), and the
    position embedding resampled to the input's patch grid in the forward pass, as timm's
    `_pos_embed` does: the prefix tokens' rows kept, the grid's resampled (resize.py; sincos_2d:
    computed at the new grid). Eager code; `TraceableDynamicSize` (variants/graph.py) reads the grid
    when a traced graph runs."""

    def __init__(self, config):
        super().__init__()
        self.patch_size = config.patch_size
        self.grid_size = config.token_grid()  # the grid the position embedding was built for
        self.embed_dim = config.embed_dim
        self.num_embedded_prefix = 0 if config.no_embed_class else config.num_prefix_tokens
        self.resize_method = config.pos_embed_resample or DEFAULT_RESIZE
        self.computed = config.position_embedding == "sincos_2d"  # a fixed function of the grid
        self.pad = config.dynamic_img_pad
        self.drop_remainder = config.drop_remainder
        self.cuts_what = "the ResNet's feature map of the input" if config.is_hybrid else "input"  # for errors

    def forward(self, x):
        """[B, C, H, W] -> [B, C, H', W']: padded up to a multiple of P (dynamic_img_pad), else as it is."""
        return self.pad_to_patches(x) if self.pad else self.refuse_remainder(x)

    def pad_to_patches(self, x):
        """[B, C, H, W] -> [B, C, H', W'], zeros on the right and bottom up to a multiple of P."""
        patch, height, width = self.patch_size, x.shape[2], x.shape[3]
        pad_bottom, pad_right = (patch - height % patch) % patch, (patch - width % patch) % patch
        if pad_bottom == 0 and pad_right == 0:
            return x
        return F.pad(x, [0, pad_right, 0, pad_bottom], value=0.0, data_format="NCHW")  # [left, right, top, bottom]

    def refuse_remainder(self, x):
        """`x` when the patch divides it (or the Conv2D may leave the rest out: drop_remainder)."""
        height, width = x.shape[2], x.shape[3]
        patch = self.patch_size
        if self.drop_remainder or (height % patch == 0 and width % patch == 0):
            return x
        raise ConfigError(f"{self.cuts_what} is {height}x{width}, which patch_size {patch} does not divide: "
                          f"use a multiple of {patch}, or build the model with dynamic_img_pad=True to pad it")

    def position_embedding(self, table, patches):
        """The built position embedding `table` [1, T' + R * C, D] (None: kind 'none') for the
        patch grid of `patches` [B, D, h, w]: as built at the built grid (timm too), else
        `position_embedding_at` h x w."""
        rows, cols = patches.shape[2], patches.shape[3]
        if table is None or (rows, cols) == tuple(self.grid_size):
            return table
        return self.position_embedding_at(table, rows, cols)

    def position_embedding_at(self, table, rows, cols):
        """[1, T' + rows * cols, D]: the T' embedded prefix tokens' rows of `table` as built, the
        grid resampled to rows x cols (sincos_2d: computed there). rows, cols are ints, or scalar
        tensors in a traced graph."""
        prefix = self.num_embedded_prefix
        if self.computed:
            grid = sincos_2d_grid(rows, cols, self.embed_dim)
        else:
            grid = resize_grid_embedding(table[:, prefix:], self.grid_size, (rows, cols), self.resize_method)
        if prefix == 0:
            return grid  # [1, h * w, D]
        return paddle.concat([table[:, :prefix].astype(grid.dtype), grid], axis=1)  # [1, T' + h * w, D]

    def grid_for(self, height, width):
        """(rows, cols) of the patch grid cut from an H x W input (padded up with dynamic_img_pad)."""
        if self.pad:
            return -(-height // self.patch_size), -(-width // self.patch_size)
        return height // self.patch_size, width // self.patch_size


class AddPositionEmbedding(nn.Layer):
    """The walkthrough's add: tokens [B, T + N, D] + position embedding [1, T + N, D], a row for
    every token, the prefix tokens' first."""

    def forward(self, x, position_embedding):
        return x + position_embedding.astype(x.dtype)  # [B, T + N, D]


class AddPatchPositionEmbedding(nn.Layer):
    """timm's no_embed_class (DeiT III, DINOv2 with registers): tokens [B, T + N, D] + a position
    embedding [1, N, D] of the patches alone; the T prefix tokens get none."""

    def __init__(self, num_prefix_tokens):
        super().__init__()
        self.num_prefix_tokens = num_prefix_tokens

    def forward(self, x, position_embedding):
        prefix, patches = x[:, :self.num_prefix_tokens], x[:, self.num_prefix_tokens:]  # [B, T, D], [B, N, D]
        return paddle.concat([prefix, patches + position_embedding.astype(x.dtype)], axis=1)  # [B, T + N, D]


class NoPositionEmbedding(nn.Layer):
    """Position embedding ``none`` (paper Appendix D.4): the tokens as they are."""

    def forward(self, x, position_embedding):
        return x


class TokenEmbedding(nn.Layer):
    """[B, C, H, W] image -> [B, T + N, D] tokens, the T prefix tokens first: `PatchEmbedding`'s
    steps with the options of later ViTs, read from `config` (a `ViTConfig`): position_embedding,
    class_token, distilled, register_tokens, no_embed_class, pre_norm (no patch bias), patch_norm,
    drop_remainder, dynamic_img_size, dynamic_img_pad, pos_embed_resample.

    Attributes besides the parameters: grid_size (rows, cols at image_size), num_patches,
    num_prefix_tokens (T), num_embedded_prefix (those of them with a row of the position
    embedding: T, or 0 with no_embed_class), position_embedding_kind.
    """

    def __init__(self, config):
        super().__init__()
        self.embed_dim = config.embed_dim
        self.patch_size = config.patch_size
        self.image_size = (config.image_size, config.image_size)
        self.grid_size = config.token_grid()  # drop_remainder: the rows and columns the Conv2D covers
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.patch_embedding = nn.Conv2D(in_channels=config.patch_channels,
                                         out_channels=config.embed_dim,
                                         kernel_size=config.patch_size,
                                         stride=config.patch_size,
                                         bias_attr=False if config.pre_norm else None)  # CLIP's, normed next: none
        self.patch_norm = (norm_layer(config.norm, config.embed_dim, config.layer_norm_epsilon) if config.patch_norm
                           else nn.Identity())
        self.dropout = nn.Dropout(config.dropout)
        self.class_token = self._prefix_parameter(1) if config.class_token else None
        self.distillation_token = self._prefix_parameter(1) if config.distilled else None
        self.register_tokens = self._prefix_parameter(config.register_tokens) if config.register_tokens else None
        self.num_prefix_tokens = config.num_prefix_tokens
        self.num_embedded_prefix = 0 if config.no_embed_class else self.num_prefix_tokens
        self.position_embedding_kind = config.absolute_position_embedding  # RoPE's kinds add none
        self._create_position_embedding(self.position_embedding_kind)
        self.input_size = DynamicSize(config) if config.dynamic_img_size else FixedSize(config)
        if self.position_embedding_kind == "none":
            self.add_position_embedding = NoPositionEmbedding()
        elif self.num_embedded_prefix < self.num_prefix_tokens:
            self.add_position_embedding = AddPatchPositionEmbedding(self.num_prefix_tokens)
        else:
            self.add_position_embedding = AddPositionEmbedding()

    def forward(self, x):
        x = self.feature_map(x)  # [B, C, H, W]: the image itself (a hybrid: its ResNet's feature map)
        x = self.input_size(x)  # dynamic_img_pad: zeros up to a multiple of P; else as it is
        # [B, C, H, W] -> [B, D, h, w]: the stride=kernel Conv2D cuts and projects the patches
        x = self.patch_embedding(x)
        # [1, T' + h * w, D]: the position embedding at this grid (dynamic_img_size: resampled to it)
        position_embedding = self.input_size.position_embedding(self.full_position_embedding(), x)
        x = x.flatten(2)  # [B, D, N]
        x = x.transpose([0, 2, 1])  # [B, N, D]
        x = self.patch_norm(x)  # AIMv2: each patch token normed; else as it is
        x = self.prepend_prefix_tokens(x)  # [B, T + N, D]: the class token first
        x = self.add_position_embedding(x, position_embedding)  # [B, T + N, D]
        # the walkthrough builds self.dropout but never calls it; the paper applies it here
        x = self.dropout(x)
        return x

    def feature_map(self, x):
        """What the patches are cut from: the image itself (a hybrid: its ResNet's feature map)."""
        return x

    def prepend_prefix_tokens(self, x):
        """[B, N, D] -> [B, T + N, D]: the prefix tokens, in the activations' dtype (float16,
        bfloat16), before the patches; with none, x as it is."""
        tokens = [token for token in (self.class_token, self.distillation_token, self.register_tokens)
                  if token is not None]
        batch, width = x.shape[0], x.shape[2]
        tokens = [token.astype(x.dtype).expand([batch, token.shape[1], width]) for token in tokens]  # [B, t, D]
        return paddle.concat(tokens + [x], axis=1) if tokens else x  # [B, T + N, D]

    def _prefix_parameter(self, count):
        return self.create_parameter(shape=[1, count, self.embed_dim], default_initializer=nn.initializer.Constant(0.0))

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

    # ---- what the tools read besides the forward pass (viz.py, features.py, the loader) ----------
    def full_position_embedding(self):
        """The position embedding at the built grid, [1, T' + N, D], or None for kind ``none``."""
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

    def token_grid_for(self, height, width):
        """(rows, cols) of the patch grid of an H x W input (padded up with dynamic_img_pad)."""
        return self.input_size.grid_for(height, width)

    @property
    def token_pixels(self):
        """The side, in input pixels, of the square each token covers: P (a hybrid: S x P)."""
        return self.patch_size

    def pixel_filters(self):
        """The weights of the first layer that sees pixels, [O, C, k, k]: the patch projection
        (a hybrid: its ResNet's stem convolution, standardised)."""
        return self.patch_embedding.weight


class HybridEmbedding(TokenEmbedding):
    """[B, C, H, W] image -> ResNet feature map [B, F, H/S, W/S] -> [B, T + N, D] tokens,
    N = (H/S/P) * (W/S/P): the backbone runs first, then exactly TokenEmbedding's steps, its
    Conv2D cutting P x P patches of the feature map (1 x 1 in the paper's hybrids: "the patch
    embedding projection E is applied to patches extracted from a CNN feature map").

    Args:
        config: the `ViTConfig` (its grid and the Conv2D's input channels are the feature map's).
        backbone: the `ResNetV2` or timm's `ResNetD` (resnet_d.py), with its `out_channels` F
            and `stride` S (either pads so that a side of n pixels gives ceil(n / S) features).
    """

    def __init__(self, config, backbone):
        super().__init__(config)
        self.backbone = backbone

    def feature_map(self, x):
        return self.backbone(x)  # [B, C, H, W] -> [B, F, H/S, W/S]

    def token_grid_for(self, height, width):
        stride = self.backbone.stride  # "SAME": ceil(side / S) features
        return super().token_grid_for(-(-height // stride), -(-width // stride))

    @property
    def token_pixels(self):
        return self.backbone.stride * self.patch_size

    def pixel_filters(self):
        return self.backbone.first_conv_weight()  # ResNet-v2: [64 w, C, 7, 7] standardised; ResNet-D: [32, C, 3, 3]
