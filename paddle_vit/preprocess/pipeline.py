"""The one pixel pipeline: a `Preprocess` run on an image.

    PIL image in any mode --to RGB--> resize --> centre crop (padded where the image is smaller)
        --> float32 [3, S, S] = (pixel * rescale - mean) / std

Every eval input of the package goes through `EvalTransform`: the validation split of a training
run (the recipe's data keys as a `Preprocess`), evaluation, prediction, export and the inference
runtime (a checkpoint's own pipeline or the recipe's). Each step follows the `Preprocess` field
that says how a library computes it; the steps themselves are written once, here.
"""
import numpy as np
from PIL import Image

from ..errors import DataError
from .constants import INTERPOLATIONS, MAX_RESIZED_PIXELS
from .resize_kernels import cv2_resize_linear, tf_resize_bilinear

PIL_FILTERS = {name: Image.Resampling[name.upper()] for name in INTERPOLATIONS}  # "bicubic" -> BICUBIC


class TooLargeToResize(DataError):
    """An image whose resized size would exceed MAX_RESIZED_PIXELS: refused before the resize."""


def check_resized_pixels(width, height, new_width, new_height):
    """Refuse an image whose resized size would exceed MAX_RESIZED_PIXELS, before the resize
    allocates it (a DataError: that image is skipped, the others are read)."""
    if new_width * new_height > MAX_RESIZED_PIXELS:
        raise TooLargeToResize(f"a {width} x {height} image would be resized to {new_width} x {new_height} "
                               f"({new_width * new_height} pixels, more than the {MAX_RESIZED_PIXELS} accepted); "
                               f"crop it to the part to classify")


# ---- RGB ---------------------------------------------------------------------------------------

def _sixteen_bit_to_8bit(image):
    """'I;16*' / 'I' (16-bit range) and 'F' images -> 'L', scaled to 0..255."""
    pixels = np.asarray(image, dtype=np.float64)
    if image.mode == "F" and pixels.size and pixels.max() <= 1.0:
        pixels = pixels * 255.0  # a float image in [0, 1]
    elif image.mode != "F":
        pixels = pixels / 257.0  # 65535 -> 255
    return Image.fromarray(np.clip(np.round(pixels), 0, 255).astype(np.uint8), mode="L")


def composite_on_white(image):
    """Any PIL mode -> RGB: transparency composited on white, 16-bit scaled, CMYK converted.

    Training and this project's own checkpoints keep this rule: the colour under a transparent
    pixel is arbitrary (often black), and a model trained here is evaluated the same way. A
    checkpoint from another library is read with that library's rule instead (`to_rgb`: PIL's
    convert("RGB") drops alpha).
    """
    if image.mode in ("I", "F") or image.mode.startswith("I;16"):
        image = _sixteen_bit_to_8bit(image)
    if image.mode == "RGB":
        return image
    if image.mode in ("RGBA", "RGBa", "LA", "La", "PA") or "transparency" in image.info:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def to_rgb(image, conversion):
    """An RGB PIL image from `image` in any mode, as the named conversion does it.

    "convert" is PIL's ``convert("RGB")``: alpha dropped (the colour under a transparent pixel
    shows), palette and grayscale expanded, CMYK by PIL's formula, 16-bit clipped at 255.
    "convert_shift16" is what OpenCV's IMREAD_COLOR and TensorFlow's decode_image(channels=3)
    give for the same file: alpha dropped too, but a 16-bit image scaled (>> 8), not clipped.
    """
    if conversion == "composite_white":
        return composite_on_white(image)
    if conversion == "alpha_on_white" and ("A" in image.getbands() or image.info.get("transparency") is not None):
        background = Image.new("RGBA", image.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, image.convert("RGBA")).convert("RGB")
    if conversion == "convert_shift16" and image.mode in ("I", "I;16", "I;16B", "I;16L"):
        pixels = np.clip(np.asarray(image), 0, 65535).astype(np.uint32) >> 8  # the decoders' 16 -> 8 bits
        return Image.fromarray(pixels.astype(np.uint8), mode="L").convert("RGB")
    if image.mode == "RGB":
        return image
    return image.convert("RGB")


# ---- resize, crop, normalise -------------------------------------------------------------------

def resized_size(width, height, preprocess):
    """(new_width, new_height) of the resize step for an image of `width` x `height`."""
    size, mode, rule = preprocess.resize_size, preprocess.resize_mode, preprocess.long_side
    if mode == "none":
        return width, height
    if mode == "both_sides":
        return size, size
    if mode == "longer_side":  # timm's ResizeKeepRatio(longest=1): one ratio, both sides rounded
        ratio = max(height / size, width / size)
        return round(width / ratio), round(height / ratio)
    short, long = (width, height) if width <= height else (height, width)
    if rule == "truncate":  # torchvision: int(requested * long / short)
        new_short, new_long = size, int(size * long / short)
    elif rule == "scale_round":  # PaddleClas: percent = size / short, each side round(side * percent)
        percent = float(size) / short
        new_short, new_long = int(round(short * percent)), int(round(long * percent))
    elif rule == "timm_ratio":  # timm's ResizeKeepRatio(longest=0): ratio = short / size
        ratio = short / size
        new_short, new_long = round(short / ratio), round(long / ratio)
    else:  # this project's recipes
        new_short, new_long = size, max(1, int(round(size * long / short)))
    return (new_short, new_long) if width <= height else (new_long, new_short)


def crop_box(width, height, crop, offset):
    """(left, top) of a `crop` x `crop` window in an image of `width` x `height`, where a
    negative value means the image is padded on that side by minus that amount.

    "round": torchvision's centre crop: an image smaller than the crop is first padded,
    (c - w) // 2 on the left (and top), the rest on the right (and bottom); then the offset is
    int(round((w - c) / 2)), Python's round (half to even). "floor": (w - c) // 2.
    """
    def one_axis(length):
        if offset == "floor":
            return (length - crop) // 2
        if crop > length:
            return -((crop - length) // 2)
        return int(round((length - crop) / 2.0))
    return one_axis(width), one_axis(height)


def rescale(pixels, preprocess):
    """float32 [H, W, C] of pixel * rescale_factor, computed as the `preprocess.rescale` rule says."""
    pixels = np.asarray(pixels)
    if preprocess.rescale == "float64_multiply":  # transformers' rescale(): float64 product, cast
        return (pixels.astype(np.float64) * preprocess.rescale_factor).astype(np.float32)
    if preprocess.rescale == "float32_multiply":
        return pixels.astype(np.float32) * np.float32(preprocess.rescale_factor)
    # torch's x.float().div(255): one correctly rounded float32 division
    return pixels.astype(np.float32) / np.float32(1.0 / preprocess.rescale_factor)


def standardize(scaled, preprocess):
    """float32 [3, H, W] of (scaled - mean) / std from rescaled [H, W, 3] float32 pixels."""
    mean = np.asarray(preprocess.mean, dtype=np.float32)
    std = np.asarray(preprocess.std, dtype=np.float32)
    return np.ascontiguousarray(((scaled - mean) / std).transpose(2, 0, 1), dtype=np.float32)  # [3, H, W]


def normalize(pixels, preprocess):
    """float32 [3, H, W] of (pixel * rescale - mean) / std from [H, W, 3] `pixels` (uint8 or float)."""
    return standardize(rescale(pixels, preprocess), preprocess)


def resize_float(scaled, width, height, interpolation):
    """float32 [height, width, C] of float32 [H, W, C]: PIL's filter on each channel as an 'F'
    image. PIL's bilinear and bicubic widen the filter by the downscale factor, as torch's
    interpolate(antialias=True) does: transformers' DINOv3 processor within ~2e-6."""
    channels = [np.asarray(Image.fromarray(np.ascontiguousarray(scaled[..., channel]), mode="F")
                           .resize((width, height), PIL_FILTERS[interpolation]))
                for channel in range(scaled.shape[2])]
    return np.stack(channels, axis=-1)  # [height, width, C]


def _crop_array(pixels, preprocess):
    """The centre crop of an [H, W, C] array, padded with the crop fill where it is outside."""
    height, width = pixels.shape[:2]
    crop = preprocess.image_size
    left, top = crop_box(width, height, crop, preprocess.crop_offset)
    if preprocess.crop_fill == "mean":
        fill = np.asarray([round(255 * v) for v in preprocess.mean], dtype=pixels.dtype)
    else:
        fill = np.zeros(pixels.shape[2], dtype=pixels.dtype)
    out = np.empty((crop, crop, pixels.shape[2]), dtype=pixels.dtype)
    out[...] = fill
    src_y0, src_x0 = max(top, 0), max(left, 0)
    src_y1, src_x1 = min(top + crop, height), min(left + crop, width)
    if src_y1 > src_y0 and src_x1 > src_x0:
        out[src_y0 - top:src_y1 - top, src_x0 - left:src_x1 - left] = pixels[src_y0:src_y1, src_x0:src_x1]
    return out


class EvalTransform:
    """`(pil_image, rng=None) -> float32 [3, S, S]`: the pipeline a `Preprocess` describes (the rng,
    which training's transforms take, draws nothing)."""

    def __init__(self, preprocess):
        self.preprocess = preprocess

    def __call__(self, image, rng=None):
        p = self.preprocess
        if p.rgb == "convert_after_resize":  # OpenCLIP: Resize and CenterCrop, then convert
            new_width, new_height = resized_size(image.width, image.height, p)
            check_resized_pixels(image.width, image.height, new_width, new_height)
            if (new_width, new_height) != image.size:
                image = image.resize((new_width, new_height), PIL_FILTERS[p.interpolation])
            pixels = np.asarray(to_rgb(image, "convert"))  # [H, W, 3] uint8
            return normalize(_crop_array(pixels, p), p)
        rgb = to_rgb(image, p.rgb)
        new_width, new_height = resized_size(rgb.width, rgb.height, p)
        check_resized_pixels(rgb.width, rgb.height, new_width, new_height)
        if p.backend == "pil_float":  # rescale first, resize the floats (transformers' DINOv3 processor)
            scaled = rescale(np.asarray(rgb), p)  # [H, W, 3] float32
            if (new_width, new_height) != rgb.size:
                scaled = resize_float(scaled, new_width, new_height, p.interpolation)
            if p.resize_mode != "none" or scaled.shape[:2] != (p.image_size, p.image_size):
                scaled = _crop_array(scaled, p)
            return standardize(scaled, p)
        if p.backend == "pil":
            if (new_width, new_height) != rgb.size:
                rgb = rgb.resize((new_width, new_height), PIL_FILTERS[p.interpolation])
            pixels = np.asarray(rgb)  # [H, W, 3] uint8
        elif p.backend == "cv2":
            pixels = cv2_resize_linear(np.asarray(rgb), new_width, new_height)
        else:
            pixels = tf_resize_bilinear(np.asarray(rgb), new_width, new_height)  # float32
        if p.resize_mode != "none" or pixels.shape[:2] != (p.image_size, p.image_size):
            pixels = _crop_array(pixels, p)
        return normalize(pixels, p)

    def __repr__(self):
        return f"EvalTransform({self.preprocess.origin or self.preprocess.to_dict()})"
