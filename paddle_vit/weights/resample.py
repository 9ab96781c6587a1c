"""Resampling a position embedding to another patch grid (paper Section 3.2: "we perform 2D
interpolation of the pre-trained position embeddings, according to their location in the
original image").

Each code does it its own way, and at 224 -> 384 the ways differ by 5e-3 to 2e-2 on the logits,
so a checkpoint is resampled as its own code does unless asked otherwise:

| method | what | whose |
|---|---|---|
| ``bicubic_antialias`` | bicubic, align_corners=False, antialias (Keys a = -0.5, as PIL) | timm's ``checkpoint_filter_fn`` |
| ``bicubic`` | bicubic, align_corners=False, no antialias (a = -0.75) | Hugging Face ``interpolate_pos_encoding``, PLSC |
| ``bilinear`` | bilinear, align_corners=False, no antialias | timm's JAX ``.npz`` loader |
| ``bilinear_align_corners`` | linear with the corners aligned | ``scipy.ndimage.zoom(order=1)`` in ``vit_jax`` |
| ``bicubic_align_corners`` | bicubic, align_corners=True, no antialias (a = -0.75) | torchvision's ``interpolate_embeddings`` |

Antialias matters even when upsampling: its bicubic filter has another coefficient, ~0.1-0.3 of
the values' scale apart. On downsampling it also widens the filter to the output's pixel
footprint (a low-pass). Paddle's kernels reproduce PyTorch's to ~1e-6; ``zoom(order=1)`` samples
input coordinate ``i * (old - 1) / (new - 1)`` for output ``i``, which is bilinear with
align_corners=True; torchvision samples the same coordinates with the bicubic kernel, so its
corner rows are the old corners exactly. Paddle's bicubic takes only float32, so the arithmetic is float32.
"""
import math

import numpy as np
import paddle
import paddle.nn.functional as F

from ..errors import WeightsError, check_choice

RESAMPLE_METHODS = {
    "bicubic_antialias": dict(mode="bicubic", align_corners=False, antialias=True),
    "bicubic": dict(mode="bicubic", align_corners=False, antialias=False),
    "bilinear": dict(mode="bilinear", align_corners=False, antialias=False),
    "bilinear_align_corners": dict(mode="bilinear", align_corners=True, antialias=False),
    "bicubic_align_corners": dict(mode="bicubic", align_corners=True, antialias=False),
}


def check_method(method, where="resample"):
    """`method` when it is one of `RESAMPLE_METHODS`, else a WeightsError naming them."""
    return check_choice(where, method, RESAMPLE_METHODS, error=WeightsError)


def resample_position_embedding(position_embedding, new_grid, old_grid=None, num_prefix_tokens=1,
                                method="bicubic_antialias", antialias=None):
    """Interpolate a [1, prefix + rows * cols, D] position embedding to another patch grid.

    The class-token row is kept as is; the grid rows are reshaped to [D, rows, cols] and resized
    by `method` (the module docstring's table). `old_grid` defaults to a square grid.
    `antialias=False` with the default method is the plain bicubic (``method="bicubic"``).
    """
    if antialias is not None and method == "bicubic_antialias" and not antialias:
        method = "bicubic"
    settings = RESAMPLE_METHODS[check_method(method)]
    position_embedding = np.asarray(position_embedding)
    tokens, width = position_embedding.shape[-2:]
    if old_grid is None:
        side = math.isqrt(tokens - num_prefix_tokens)
        old_grid = (side, side)
    old_grid, new_grid = tuple(old_grid), tuple(new_grid)
    if old_grid[0] * old_grid[1] + num_prefix_tokens != tokens:
        raise WeightsError(f"a position embedding of {tokens} tokens is not {num_prefix_tokens} class token(s) "
                           f"+ a {old_grid[0]}x{old_grid[1]} grid")
    table = position_embedding.reshape(tokens, width)
    prefix, grid = table[:num_prefix_tokens], table[num_prefix_tokens:]
    grid = grid.reshape(1, old_grid[0], old_grid[1], width).transpose(0, 3, 1, 2)  # [1, D, rows, cols]
    with paddle.no_grad():
        resized = F.interpolate(paddle.to_tensor(grid.astype("float32")), size=list(new_grid),
                                **settings)  # [1, D, new rows, new cols]
    resized = resized.numpy().transpose(0, 2, 3, 1).reshape(-1, width)  # [new rows * new cols, D]
    table = np.concatenate([prefix.astype("float32"), resized])  # [prefix + N', D]
    return table[None].astype(position_embedding.dtype)


def checkpoint_grid(tokens, description, name, num_prefix_tokens=1):
    """The square grid of a checkpoint position embedding of `tokens` rows, `num_prefix_tokens` of
    them for the class token (and the model's other embedded prefix tokens; 0 with no_embed_class)."""
    side = math.isqrt(max(tokens - num_prefix_tokens, 0))
    if side * side == tokens - num_prefix_tokens:
        return side, side
    if num_prefix_tokens == 1 and math.isqrt(tokens) ** 2 == tokens:
        raise WeightsError(f"{description}: {name} has {tokens} rows, a square grid without a class-token row "
                           f"(a no_embed_class / big_vision layout), while the model gives its class token a "
                           f"position: build it with no_embed_class=True")
    raise WeightsError(f"{description}: {name} has {tokens} rows, which is not {num_prefix_tokens} prefix token(s) "
                       f"+ a square grid")
