"""Two resize kernels other libraries use, written in numpy so no OpenCV or TensorFlow is needed.

- `cv2_resize_linear`: OpenCV's ``cv2.resize(uint8, (w, h), interpolation=INTER_LINEAR)``, which
  PaddleClas's eval transform uses: source coordinate (d + 0.5) * in / out - 0.5 clamped to the
  image, weights rounded to 11-bit fixed point, a horizontal pass into integers, a vertical pass
  rounded back to uint8. No antialiasing: a large downscale skips pixels (PIL would average them).
- `tf_resize_bilinear`: ``tf.image.resize(x, (h, w), "bilinear", antialias=False)`` (vit_jax's
  input pipeline): half-pixel centres, float32 arithmetic, float32 result (not rounded).
"""
import numpy as np

COEF_BITS = 11  # OpenCV's INTER_RESIZE_COEF_BITS
COEF_SCALE = 1 << COEF_BITS


def _cv2_axis(in_size, out_size, clamp_weights):
    """(first source index, second source index, their fixed-point weights) per output.

    OpenCV computes the source coordinate in float32 from a double scale and floors it. Along
    x an output left of the first pixel centre (or right of the last) takes that pixel alone
    (weight 1, 0); along y the weights are kept and the two row indices clipped into the image,
    so both rows are the same edge row - which matters for the vertical pass's rounding.
    """
    scale = in_size / out_size  # double, as OpenCV's scale_x = 1 / inv_scale_x
    coordinate = ((np.arange(out_size, dtype=np.float64) + 0.5) * scale - 0.5).astype(np.float32)
    index = np.floor(coordinate).astype(np.int64)
    fraction = (coordinate - index.astype(np.float32)).astype(np.float32)
    if clamp_weights:
        before = index < 0
        index[before], fraction[before] = 0, 0.0
        after = index >= in_size - 1
        index[after], fraction[after] = in_size - 1, 0.0
    # saturate_cast<short>(w * 2048) rounds to nearest (ties to even, as cvRound)
    weight_1 = np.rint(fraction.astype(np.float32) * np.float32(COEF_SCALE)).astype(np.int64)
    weight_0 = np.rint((np.float32(1.0) - fraction) * np.float32(COEF_SCALE)).astype(np.int64)
    return np.clip(index, 0, in_size - 1), np.clip(index + 1, 0, in_size - 1), weight_0, weight_1


def cv2_resize_linear(pixels, width, height):
    """uint8 [height, width, C] from uint8 [H, W, C] `pixels`, as OpenCV's INTER_LINEAR."""
    pixels = np.asarray(pixels)
    if pixels.dtype != np.uint8:
        raise ValueError(f"cv2_resize_linear takes uint8 pixels, got {pixels.dtype}")
    in_height, in_width = pixels.shape[:2]
    if (in_height, in_width) == (height, width):
        return pixels.copy()
    x0, x1, ax0, ax1 = _cv2_axis(in_width, width, clamp_weights=True)
    y0, y1, by0, by1 = _cv2_axis(in_height, height, clamp_weights=False)
    source = pixels.astype(np.int64)
    rows = source[:, x0] * ax0[None, :, None] + source[:, x1] * ax1[None, :, None]  # [H, w, C], scale 2^11
    # vertical pass: both weights again 2^11, so the sum is at 2^22; OpenCV's vector code
    # shifts each row right by 4 and keeps the high 16 bits of the product, then rounds by 2 bits
    top, bottom = rows[y0] >> 4, rows[y1] >> 4
    mixed = ((by0[:, None, None] * top) >> 16) + ((by1[:, None, None] * bottom) >> 16)
    return np.clip((mixed + 2) >> 2, 0, 255).astype(np.uint8)


def _tf_axis(in_size, out_size):
    """(lower index, upper index, float32 lerp) per output: TensorFlow's half-pixel scaler."""
    scale = np.float32(in_size) / np.float32(out_size)
    coordinate = (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
    floor = np.floor(coordinate)
    lower = np.maximum(floor.astype(np.int64), 0)
    upper = np.minimum(np.ceil(coordinate).astype(np.int64), in_size - 1)
    return lower, upper, (coordinate - floor).astype(np.float32)


def tf_resize_bilinear(pixels, width, height):
    """float32 [height, width, C] from [H, W, C] `pixels`, as tf.image.resize bilinear without
    antialias: top = tl + (tr - tl) * dx, bottom likewise, value = top + (bottom - top) * dy."""
    image = np.asarray(pixels).astype(np.float32)
    in_height, in_width = image.shape[:2]
    x_low, x_high, x_lerp = _tf_axis(in_width, width)
    y_low, y_high, y_lerp = _tf_axis(in_height, height)
    x_lerp, y_lerp = x_lerp[None, :, None], y_lerp[:, None, None]
    top_left, top_right = image[y_low][:, x_low], image[y_low][:, x_high]
    bottom_left, bottom_right = image[y_high][:, x_low], image[y_high][:, x_high]
    top = top_left + (top_right - top_left) * x_lerp
    bottom = bottom_left + (bottom_right - bottom_left) * x_lerp
    return (top + (bottom - top) * y_lerp).astype(np.float32)
