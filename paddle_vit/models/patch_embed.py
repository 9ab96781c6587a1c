"""Patch embedding: image -> sequence of patch tokens, class token, position embedding.

The walkthrough's `PatchEmbedding` (paper Section 3.1, Eq. 1): a Conv2D whose stride equals its
kernel cuts the image into non-overlapping P x P patches and projects each to D numbers, which is
the same as flattening every patch and applying one shared Linear. A learnable class token is
prepended and a learnable position embedding added. The paper's ViTs (ViT-B/16, ...) and the
walkthrough's own model are built with this class.

The ViTs that came after the paper add options (other prefix tokens, other position embeddings,
any input size, a ResNet before the patches): a model whose config asks for one is built with
token_embed.py's `TokenEmbedding`, the same steps with those options as parts of their own.

Position embedding kinds (paper Appendix D.4, Table 8), `TokenEmbedding`'s but for the first:
- ``learned``: one learnable vector per token, class token included (the paper's default, 1-D).
- ``learned_2d``: a learnable row embedding and column embedding of D/2 each, concatenated per
  patch; the class token gets a learnable vector of its own.
- ``sincos_2d``: fixed 2-D sine-cosine embedding (not learned); zeros for the class token.
- ``none``: no position information at all.
"""
import numpy as np
import paddle
import paddle.nn as nn

from ..errors import ConfigError

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


class PatchEmbedding(nn.Layer):
    """The walkthrough's: [B, C, H, W] image -> [B, 1 + N, D] tokens, the class token first,
    N = (H/P) * (W/P).

    Args:
        image_size: the input's side; the position embedding has a row for each of its patches.
        patch_size: P, the side of a square patch (kernel and stride of the Conv2D).
        in_channels: C of the input image.
        embed_dim: D, the width of every token.
        dropout: dropout applied after the position embedding is added.
    """

    def __init__(self, image_size=224, patch_size=16, in_channels=3, embed_dim=768, dropout=0.0):
        super().__init__()
        self.embed_dim = embed_dim
        n_patches = (image_size // patch_size) * (image_size // patch_size)
        self.patch_embedding = nn.Conv2D(in_channels=in_channels,
                                         out_channels=embed_dim,
                                         kernel_size=patch_size,
                                         stride=patch_size)
        self.dropout = nn.Dropout(dropout)
        self.class_token = self.create_parameter(shape=[1, 1, embed_dim],
                                                 default_initializer=nn.initializer.Constant(0.0))
        self.position_embedding = self.create_parameter(shape=[1, n_patches + 1, embed_dim],
                                                        default_initializer=nn.initializer.TruncatedNormal(std=0.02))
        # what the figures, the loader and forward_intermediates read
        self.patch_size = patch_size
        self.image_size = (image_size, image_size)
        self.grid_size = (image_size // patch_size, image_size // patch_size)
        self.num_patches = n_patches

    def forward(self, x):
        class_token = self.class_token.expand([x.shape[0], 1, self.embed_dim])  # [B, 1, D]
        # [B, C, H, W] -> [B, D, H/P, W/P]: the stride=kernel Conv2D cuts and projects the patches
        x = self.patch_embedding(x)
        x = x.flatten(2)  # [B, D, N]
        x = x.transpose([0, 2, 1])  # [B, N, D]
        # the class token in the activations' dtype, so that float16 and bfloat16 concatenate
        x = paddle.concat([class_token.astype(x.dtype), x], axis=1)  # [B, 1 + N, D]
        x = x + self.position_embedding.astype(x.dtype)  # [B, 1 + N, D]
        # the walkthrough builds self.dropout but never calls it; the paper applies it here
        x = self.dropout(x)
        return x

    # ---- what the tools read besides the forward pass (viz.py, features.py, the loader) ----------
    position_embedding_kind = "learned"
    num_prefix_tokens = 1  # tokens before the patches: the class token
    num_embedded_prefix = 1  # of them, those with a row of the position embedding

    def full_position_embedding(self):
        """The position embedding of every token, [1, 1 + N, D]."""
        return self.position_embedding

    def token_grid_for(self, height, width):
        """(rows, cols) of the patch grid of an H x W input."""
        return height // self.patch_size, width // self.patch_size

    @property
    def token_pixels(self):
        """The side, in input pixels, of the square each token covers: P."""
        return self.patch_size

    def pixel_filters(self):
        """The weights of the first layer that sees pixels, [D, C, P, P]: the patch projection."""
        return self.patch_embedding.weight
