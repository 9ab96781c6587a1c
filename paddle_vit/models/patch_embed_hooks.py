"""What the tools need from a patch embedding besides the walkthrough's steps, kept out of
`PatchEmbedding` so that it reads beside the walkthrough:

- `DynamicSize`: inputs of other sizes (timm's dynamic_img_size and dynamic_img_pad): the
  position embedding resampled to the input's grid in the forward pass, the zero padding, the
  checks; a traced graph's variant of it lives in paddle_vit/variants/graph.py;
- `FigureHooks`: what the figures read (paddle_vit/viz.py): the pixels a token covers and the
  first filters that see pixels.

Both are mixins of `PatchEmbedding` (and so of `HybridEmbedding`, which overrides the hooks
for its ResNet); they hold no parameters.
"""
import paddle
import paddle.nn.functional as F

from ..errors import ConfigError
from .resize import resize_grid_embedding, sincos_2d_grid


class DynamicSize:
    """`PatchEmbedding`'s steps for inputs of other sizes than the one it was built for."""

    def position_embedding_for(self, patches):
        """The position embedding of every token for the patch grid of `patches` [B, D, h, w]:
        the built one, or with `dynamic_size` the built one resampled to h x w (timm's
        `_pos_embed` with dynamic_img_size: the class token's row kept, the grid resampled).
        Eager code; a traced graph's variant (variants/graph.py) reads h, w when it runs."""
        if not self.dynamic_size or self.position_embedding_kind == "none":
            return self.full_position_embedding()
        rows, cols = patches.shape[2], patches.shape[3]
        if (rows, cols) == tuple(self.grid_size):  # the built grid: as built (timm too)
            return self.full_position_embedding()
        return self.position_embedding_at(rows, cols)

    def position_embedding_at(self, rows, cols):
        """[1, T + rows * cols, D]: the rows of the T embedded prefix tokens as built, the grid
        resampled to rows x cols (sincos_2d: computed there). rows, cols are ints, or scalar
        tensors in a traced graph."""
        prefix = self.num_embedded_prefix
        if self.position_embedding_kind == "sincos_2d":  # fixed: computed at the new grid
            table = sincos_2d_grid(rows, cols, self.embed_dim)
        else:
            table = resize_grid_embedding(self.position_embedding[:, prefix:], self.grid_size, (rows, cols),
                                          self.resize_method)  # [1, h * w, D]
        if prefix == 0:
            return table
        return paddle.concat([self.position_embedding[:, :prefix].astype(table.dtype), table], axis=1)

    def pad_to_patches(self, x):
        """[B, C, H, W] -> [B, C, H', W'], zeros on the right and bottom up to a multiple of the
        patch (timm's dynamic_img_pad); without `dynamic_pad` the input as it is."""
        if not self.dynamic_pad:
            return x
        patch, height, width = self.patch_size, x.shape[2], x.shape[3]
        pad_bottom, pad_right = (patch - height % patch) % patch, (patch - width % patch) % patch
        if pad_bottom == 0 and pad_right == 0:
            return x
        return F.pad(x, [0, pad_right, 0, pad_bottom], value=0.0, data_format="NCHW")  # [left, right, top, bottom]

    def check_patch_division(self, x):
        """With `dynamic_size` and no padding: the patch must divide what it cuts."""
        height, width = x.shape[2], x.shape[3]
        patch = self.patch_size
        if self.dynamic_pad or self.drop_remainder or (height % patch == 0 and width % patch == 0):
            return
        raise ConfigError(f"{self.cuts_what} is {height}x{width}, which patch_size {patch} does not divide: "
                          f"use a multiple of {patch}, or build the model with dynamic_img_pad=True to pad it")

    def token_grid_for(self, height, width):
        """(rows, cols) of the patch grid of an H x W input (padded up with `dynamic_pad`)."""
        if self.dynamic_pad:
            return -(-height // self.patch_size), -(-width // self.patch_size)
        return height // self.patch_size, width // self.patch_size

    def check_input_size(self, x):
        if self.dynamic_size:
            return
        height, width = x.shape[2], x.shape[3]
        if height > 0 and width > 0 and (height, width) != self.image_size:  # -1 while tracing to_static
            raise ConfigError(
                f"input is {height}x{width} but the model was built for {self.image_size[0]}x{self.image_size[1]}: "
                f"resize the images, or build the model with image_size={height} and load the weights "
                f"with paddle_vit.load_pretrained, which resamples the position embedding")

    cuts_what = "input"  # what the patches are cut from, for errors


class FigureHooks:
    """What the figures read from a patch embedding (a hybrid's overrides them for its ResNet)."""

    @property
    def token_pixels(self):
        """The side, in input pixels, of the square each token covers: P (a hybrid: S x P)."""
        return self.patch_size

    def pixel_filters(self):
        """The weights of the first layer that sees pixels, [O, C, k, k]: the patch projection
        (a hybrid: its ResNet's stem convolution, standardised)."""
        return self.patch_embedding.weight
