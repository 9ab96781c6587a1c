"""Eval preprocessing: from an image file to the float32 [3, S, S] input of a model.

A checkpoint carries its preprocessing as much as its weights: the same weights fed another
resize, crop or mean give other probabilities. `Preprocess` describes one eval pipeline in
plain values, precisely enough to reproduce the library that made the checkpoint:

    file --decode (EXIF or not)--> PIL image in any mode --to RGB--> resize --> centre crop
         --> float32 [3, S, S] = (pixel * rescale - mean) / std

`preprocess_for_checkpoint(hint, image_size)` turns a family's hint (``{"pipeline": "timm",
"config": pretrained_cfg}``, ...) into the `Preprocess` that library's own code computes:

| pipeline    | library function reproduced                                  |
|-------------|--------------------------------------------------------------|
| timm        | `resolve_data_config` + `create_transform(is_training=False)`|
| huggingface | the image processor with its PIL backend (ViT, DeiT, Bit, CLIP, Siglip)|
| torchvision | `ViT_B_16_Weights.IMAGENET1K_V1.transforms()`                |
| paddleclas  | PaddleClas's eval ops (cv2 decode, ResizeImage, CropImage): its ViT configs' or a config's list |
| vit_jax     | `input_pipeline.py`: `tf.image.resize` + (x - 127.5) / 127.5  |
| openclip    | `open_clip.image_transform(is_train=False)`: timm's arithmetic, RGB after the resize |

The arithmetic that matters and differs between them (see docs/pretrained.md):
- the longer side after a shorter-side resize: torchvision truncates ``int(s * long / short)``,
  PaddleClas rounds ``round(long * (s / short))``, this project's own recipes round
  ``round(s * long / short)``;
- the crop offset: torchvision/timm ``int(round((h - c) / 2))`` (round half to even) after
  zero-padding an image smaller than the crop; PaddleClas and transformers ``(h - c) // 2``;
- the resize kernel: PIL (antialiased), OpenCV's INTER_LINEAR (fixed point, no antialias) or
  TensorFlow's bilinear (half-pixel centres, float, no antialias);
- the rescale: ``x / 255`` in float32 (torch), ``float64(x) * factor`` then float32
  (transformers), ``float32(x) * float32(1 / 255)`` (PaddleClas);
- the RGB conversion: ``Image.convert("RGB")`` drops alpha and clips 16-bit images (timm,
  torchvision, transformers' `load_image`); OpenCV's and TensorFlow's decoders drop alpha and
  shift 16-bit images right by 8; transformers' processor and this project composite on white.

This module needs only numpy and PIL: predict, export and the inference runtime all use it.
"""
import dataclasses
import math
import os
from typing import List, Optional

import numpy as np
from PIL import Image, ImageOps

from ..errors import ConfigError, DataError, check_choice
from .config import INTERPOLATIONS, DataConfig
from .imagefolder import to_rgb as composite_on_white
from .resize_kernels import cv2_resize_linear, tf_resize_bilinear
from .transforms import PIL_FILTERS, build_transforms

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HALF = (0.5, 0.5, 0.5)

RESIZE_MODES = ("shorter_side", "both_sides", "longer_side", "none")
LONG_SIDE_RULES = ("round", "truncate", "scale_round", "timm_ratio")
CROP_OFFSETS = ("round", "floor")
CROP_FILLS = ("zero", "mean")
BACKENDS = ("pil", "cv2", "tf")
RESCALES = ("float32_divide", "float32_multiply", "float64_multiply")
RGB_CONVERSIONS = ("composite_white", "convert", "alpha_on_white", "convert_shift16", "convert_after_resize")
PIPELINES = ("timm", "huggingface", "torchvision", "paddleclas", "vit_jax", "openclip")

# Every resize is bounded before it allocates (docs/pretrained.md, "What a folder's values must be"):
# - MAX_IMAGE_SIDE: the largest model input accepted; the registered models take at most 896
#   (and 224 - 518 mostly), so 4096 is more than four times beyond any of them;
# - MAX_RESIZE_FACTOR: the resize aims at most 4 x the crop (a crop_pct of at least 0.25); timm's
#   registered cfgs use 0.875 - 1.0, transformers' processors 1.0 - 1.15 (DeiT's 256 for 224);
# - MAX_RESIZE_SIDE: and at most 8192 pixels whatever the crop;
# - MAX_RESIZED_PIXELS: per image, the resized image has at most 2^26 pixels (201 MB as RGB
#   bytes): a 1 x 60000 panorama resized shorter side to 256 would be 256 x 15 million.
MAX_IMAGE_SIDE = 4096
MAX_RESIZE_FACTOR = 4
MAX_RESIZE_SIDE = 8192
MAX_RESIZED_PIXELS = 2 ** 26


@dataclasses.dataclass
class Preprocess:
    """The eval preprocessing of a model, all a predictor needs besides the network.

    The defaults are this project's own eval transform (`build_transforms(train=False)`): the
    shorter side resized to ``int(image_size / eval_crop_pct)`` (both sides to `image_size` when
    `eval_crop_pct` is 1), centre crop, pixel / 255, (x - mean) / std, transparency on white,
    EXIF orientation applied. The other fields say how a library differs:

    resize_mode: "shorter_side" (keep the ratio), "both_sides" (squash to resize_size x
        resize_size), "longer_side" (keep the ratio, the longer side to resize_size: timm's
        "border"), "none"; None = derived from eval_crop_pct as this project's recipes do.
    resize_size: the side length the resize aims at; None = ``int(image_size / eval_crop_pct)``.
    long_side: how the other side of a ratio-keeping resize is computed (`LONG_SIDE_RULES`).
    crop_offset: "round" (torchvision's centre crop, zero padding first when the image is
        smaller than the crop) or "floor" ((h - c) // 2, as PaddleClas and transformers).
    crop_fill: what pads an image smaller than the crop: "zero", or "mean" (timm's border mode:
        round(255 * mean) per channel).
    backend: the resize kernel: "pil", "cv2" (OpenCV INTER_LINEAR, uint8, fixed point), "tf"
        (tf.image.resize bilinear, half-pixel centres, no antialias, float32 result).
    rescale, rescale_factor: how a pixel becomes a float before the mean and std (`RESCALES`).
    rgb: how `transform` turns an image of any mode into RGB: "composite_white" (this
        project's `to_rgb`: transparency on white, 16-bit scaled), "convert" (PIL's
        ``convert("RGB")``: alpha dropped), "alpha_on_white" (transformers' `convert_to_rgb`:
        transparency on white, everything else ``convert("RGB")``), "convert_shift16" (as
        OpenCV's IMREAD_COLOR and TensorFlow's decode_image(channels=3) give it: alpha dropped,
        16-bit shifted right by 8 where ``convert`` clips at 255), "convert_after_resize"
        (OpenCLIP's eval transform: the image resized in its own mode, PIL resampling RGBA with
        premultiplied alpha, then ``convert("RGB")``; the PIL backend only).
    read_rgb: a conversion `read` applies before `transform`, as the library's own file loader
        does (transformers' `load_image`: ``convert("RGB")``); None: none.
    exif_transpose: whether `read` turns the image upright by its EXIF orientation.
    origin: where the values come from, for reports and logs.
    """
    image_size: int
    eval_crop_pct: float = 1.0
    mean: List[float] = dataclasses.field(default_factory=lambda: list(HALF))
    std: List[float] = dataclasses.field(default_factory=lambda: list(HALF))
    interpolation: str = "bicubic"
    resize_mode: Optional[str] = None
    resize_size: Optional[int] = None
    long_side: str = "round"
    crop_offset: str = "round"
    crop_fill: str = "zero"
    backend: str = "pil"
    rescale: str = "float32_divide"
    rescale_factor: float = 1.0 / 255.0
    rgb: str = "composite_white"
    read_rgb: Optional[str] = None
    exif_transpose: bool = True
    origin: str = ""

    def __post_init__(self):
        self.image_size = int(self.image_size)
        if self.resize_mode is None:  # this project's recipes: the mode follows eval_crop_pct
            self.resize_mode = "both_sides" if self.eval_crop_pct == 1.0 else "shorter_side"
        if self.resize_size is None:
            crop_pct = self.eval_crop_pct
            usable = isinstance(crop_pct, (int, float)) and 0 < crop_pct < 1  # else `_validate` refuses it
            self.resize_size = int(self.image_size / crop_pct) if usable else self.image_size
        self.resize_size = int(self.resize_size)

    # ---- construction ------------------------------------------------------------------------

    @classmethod
    def from_config(cls, data_config, image_size, origin="recipe data config"):
        """The eval preprocessing of a `DataConfig` at the model's input size."""
        return cls(int(image_size), float(data_config.eval_crop_pct), [float(v) for v in data_config.mean],
                   [float(v) for v in data_config.std], str(data_config.interpolation), origin=origin)

    @property
    def is_recipe_default(self):
        """True when this is exactly what `build_transforms(train=False)` computes."""
        legacy = Preprocess(self.image_size, self.eval_crop_pct, self.mean, self.std, self.interpolation)
        return all(getattr(self, f.name) == getattr(legacy, f.name)
                   for f in dataclasses.fields(self) if f.name != "origin")

    def to_dict(self):
        """The JSON form, with the steps spelled out for readers in other languages."""
        scale = {"float32_divide": f"float32(pixel) / {1 / self.rescale_factor:g}",
                 "float32_multiply": f"float32(pixel) * float32({self.rescale_factor!r})",
                 "float64_multiply": f"float32(float64(pixel) * {self.rescale_factor!r})"}[self.rescale]
        return {
            "image_size": self.image_size,
            "eval_crop_pct": self.eval_crop_pct,
            "resize": self.resize_mode,
            "resize_size": self.resize_size,
            "long_side": self.long_side,
            "center_crop": self.image_size,
            "crop_offset": self.crop_offset,
            "crop_fill": self.crop_fill,
            "interpolation": self.interpolation,
            "backend": self.backend,
            "channel_order": "RGB",
            "rgb_conversion": self.rgb,
            "read_rgb_conversion": self.read_rgb,
            "exif_transpose": self.exif_transpose,
            "scale": scale,
            "rescale": self.rescale,
            "rescale_factor": self.rescale_factor,
            "mean": list(self.mean),
            "std": list(self.std),
            "layout": "NCHW",
            "dtype": "float32",
            "origin": self.origin,
        }

    @classmethod
    def from_dict(cls, values, where="preprocess"):
        """Rebuild from `to_dict()`'s output; a missing or wrong entry is a ConfigError naming it.

        A preprocess.json written before the library-specific fields existed holds only the
        recipe's values (its "resize" and "resize_size" were derived from eval_crop_pct), and
        loads to the same transform as it did.
        """
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: the preprocessing entry must be a JSON object, got {type(values).__name__}")
        entry = _Entry(values, where)
        preprocess = cls(entry.integer("image_size"), entry.number("eval_crop_pct", 1.0),
                         entry.numbers("mean"), entry.numbers("std"),
                         entry.text("interpolation", "bicubic"),
                         resize_mode=entry.text("resize", None), resize_size=entry.integer("resize_size", None),
                         long_side=entry.text("long_side", "round"),
                         crop_offset=entry.text("crop_offset", "round"),
                         crop_fill=entry.text("crop_fill", "zero"),
                         backend=entry.text("backend", "pil"),
                         rescale=entry.text("rescale", "float32_divide"),
                         rescale_factor=entry.number("rescale_factor", 1.0 / 255.0),
                         rgb=entry.text("rgb_conversion", "composite_white"),
                         read_rgb=entry.text("read_rgb_conversion", None),
                         exif_transpose=entry.flag("exif_transpose", True),
                         origin=str(values.get("origin", "")))
        try:
            preprocess.transform()  # validates every value
        except ConfigError as error:
            raise ConfigError(f"{where}: {error}") from None
        return preprocess

    # ---- use ---------------------------------------------------------------------------------

    def transform(self):
        """The eval transform `(pil_image, rng=None) -> float32 [3, S, S]`.

        The image may be in any PIL mode, as opened; it is converted to RGB as this pipeline's
        library does. For this project's own recipes it is the object training builds for
        validation, after the RGB conversion.
        """
        self._validate()
        if self.is_recipe_default:
            data_config = DataConfig(mean=list(self.mean), std=list(self.std), interpolation=self.interpolation,
                                     eval_crop_pct=self.eval_crop_pct)
            return _RecipeTransform(build_transforms(data_config, self.image_size, train=False), self)
        return _LibraryTransform(self)

    def read(self, path):
        """The float32 [3, S, S] input of the image file at `path`: decoded, turned upright when
        this pipeline's library does, converted to RGB, resized, cropped and normalised."""
        with Image.open(os.fspath(path)) as image:
            image.load()  # decode now: a truncated file fails here, not later in a transform
            if self.exif_transpose:
                image = ImageOps.exif_transpose(image)
            else:
                image = image.copy()
        if self.read_rgb is not None:
            image = to_rgb(image, self.read_rgb)
        try:
            return self.transform()(image)
        except TooLargeToResize as error:
            raise TooLargeToResize(f"{os.fspath(path)}: {error}") from None

    def _validate(self):
        if self.image_size < 1 or self.resize_size < 1:
            raise ConfigError(f"preprocess sizes must be >= 1, got image_size {self.image_size}, "
                              f"resize_size {self.resize_size}")
        if self.image_size > MAX_IMAGE_SIDE:
            raise ConfigError(f"preprocess image_size {self.image_size} is larger than any model takes "
                              f"(at most {MAX_IMAGE_SIDE})")
        check_resize_bound(self.resize_size, self.image_size, "preprocess", "resize_size")
        if not 0 < self.eval_crop_pct <= 1:
            raise ConfigError(f"data.eval_crop_pct must be in (0, 1], got {self.eval_crop_pct}")
        if (len(self.mean) != 3 or len(self.std) != 3 or any(s <= 0 for s in self.std) or
                not all(math.isfinite(v) for v in list(self.mean) + list(self.std))):
            raise ConfigError(f"data.mean and data.std need 3 finite values each (std > 0), got {list(self.mean)}, "
                              f"{list(self.std)}")
        check_choice("preprocess.interpolation", self.interpolation, INTERPOLATIONS)
        check_choice("preprocess.resize", self.resize_mode, RESIZE_MODES)
        check_choice("preprocess.long_side", self.long_side, LONG_SIDE_RULES)
        check_choice("preprocess.crop_offset", self.crop_offset, CROP_OFFSETS)
        check_choice("preprocess.crop_fill", self.crop_fill, CROP_FILLS)
        check_choice("preprocess.backend", self.backend, BACKENDS)
        check_choice("preprocess.rescale", self.rescale, RESCALES)
        check_choice("preprocess.rgb_conversion", self.rgb, RGB_CONVERSIONS)
        if self.read_rgb is not None:
            check_choice("preprocess.read_rgb_conversion", self.read_rgb, RGB_CONVERSIONS)
        if self.backend != "pil" and self.interpolation != "bilinear":
            raise ConfigError(f"preprocess backend {self.backend!r} resizes bilinearly only, "
                              f"got interpolation {self.interpolation!r}")
        if not (math.isfinite(self.rescale_factor) and self.rescale_factor > 0):
            raise ConfigError(f"preprocess rescale_factor must be a number > 0, got {self.rescale_factor!r}")


def resize_limit(image_size):
    """The largest resize side accepted for a model input of `image_size` (see MAX_RESIZE_FACTOR)."""
    return min(MAX_RESIZE_FACTOR * int(image_size), MAX_RESIZE_SIDE)


def check_resize_bound(resize_size, image_size, where, key):
    """Refuse, in one line naming `where` and `key`, a resize no model could need: beyond
    `resize_limit` of the crop. Checked when the preprocessing is built, before any image."""
    if resize_size > resize_limit(image_size):
        raise ConfigError(f"{where}: {key} makes a resize to {resize_size} pixels for a {image_size} x "
                          f"{image_size} input; at most {MAX_RESIZE_FACTOR} x the input (a crop of at least "
                          f"1/{MAX_RESIZE_FACTOR} of the resized image) and {MAX_RESIZE_SIDE} pixels are accepted")


class TooLargeToResize(DataError):
    """An image whose resized size would exceed MAX_RESIZED_PIXELS: refused before the resize."""


def check_resized_pixels(width, height, new_width, new_height):
    """Refuse an image whose resized size would exceed MAX_RESIZED_PIXELS, before the resize
    allocates it (a DataError: that image is skipped, the others are read)."""
    if new_width * new_height > MAX_RESIZED_PIXELS:
        raise TooLargeToResize(f"a {width} x {height} image would be resized to {new_width} x {new_height} "
                        f"({new_width * new_height} pixels, more than the {MAX_RESIZED_PIXELS} accepted); "
                        f"crop it to the part to classify")


class _Entry:
    """The values of a preprocess.json entry, each read with its type checked: a wrong one is a
    ConfigError naming the file and the key. A missing key takes `default` (none: required)."""
    _REQUIRED = object()

    def __init__(self, values, where):
        self.values, self.where = values, where

    def _get(self, key, default, accepted, wanted):
        if key not in self.values or (self.values[key] is None and default is None):
            if default is self._REQUIRED:
                raise ConfigError(f"{self.where}: the preprocessing entry has no {key}")
            return default
        value = self.values[key]
        if isinstance(value, bool) and bool not in accepted or not isinstance(value, accepted):
            raise ConfigError(f"{self.where}: {key} must be {wanted}, got {value!r}")
        return value

    def integer(self, key, default=_REQUIRED):
        return self._get(key, default, (int,), "an integer")

    def number(self, key, default=_REQUIRED):
        value = self._get(key, default, (int, float), "a number")
        if value is not None and not math.isfinite(value):
            raise ConfigError(f"{self.where}: {key} must be a finite number, got {value!r}")
        return None if value is None else float(value)

    def text(self, key, default=_REQUIRED):
        return self._get(key, default, (str,), "a string")

    def flag(self, key, default=_REQUIRED):
        return self._get(key, default, (bool,), "true or false")

    def numbers(self, key):
        value = self._get(key, self._REQUIRED, (list, tuple), "three numbers")
        if len(value) != 3 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                      for v in value):
            raise ConfigError(f"{self.where}: {key} must be three finite numbers, got {value!r}")
        return [float(v) for v in value]


# ---- the steps ---------------------------------------------------------------------------------

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


def normalize(pixels, preprocess):
    """float32 [3, H, W] of (pixel * rescale - mean) / std from [H, W, 3] `pixels` (uint8 or float)."""
    pixels = np.asarray(pixels)
    if preprocess.rescale == "float64_multiply":  # transformers' rescale(): float64 product, cast
        scaled = (pixels.astype(np.float64) * preprocess.rescale_factor).astype(np.float32)
    elif preprocess.rescale == "float32_multiply":
        scaled = pixels.astype(np.float32) * np.float32(preprocess.rescale_factor)
    else:  # torch's x.float().div(255): one correctly rounded float32 division
        scaled = pixels.astype(np.float32) / np.float32(1.0 / preprocess.rescale_factor)
    mean = np.asarray(preprocess.mean, dtype=np.float32)
    std = np.asarray(preprocess.std, dtype=np.float32)
    return np.ascontiguousarray(((scaled - mean) / std).transpose(2, 0, 1), dtype=np.float32)  # [3, H, W]


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


class _LibraryTransform:
    """A library's eval pipeline as `Preprocess` describes it."""

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
        return f"LibraryTransform({self.preprocess.origin or self.preprocess.to_dict()})"


class _RecipeTransform:
    """This project's own eval transform, after converting any PIL mode to RGB on white."""

    def __init__(self, transform, preprocess):
        self.transform = transform
        self.preprocess = preprocess

    def __call__(self, image, rng=None):
        check_resized_pixels(image.width, image.height, *resized_size(image.width, image.height, self.preprocess))
        return self.transform(composite_on_white(image), rng)

    def __repr__(self):
        return repr(self.transform)


# ---- what a checkpoint implies -----------------------------------------------------------------

# timm's resolve_data_config (timm/data/config.py) reads each of these as
# ``pretrained_cfg.get(key, None)`` and takes the default when that is false (None, 0, "", []);
# input_size only when it is None. A folder's false value is that default, said in a warning.
TIMM_DEFAULTS = {"input_size": (3, 224, 224), "interpolation": "bicubic", "crop_pct": 0.875, "crop_mode": "center",
                 "mean": IMAGENET_MEAN, "std": IMAGENET_STD}
TIMM_CROP_MODES = ("center", "squash", "border")
# interpolations timm names (str_to_interp_mode) that this project does not compute
TIMM_OTHER_INTERPOLATIONS = ("box", "hamming", "lanczos", "random")


def timm_fallbacks(config):
    """[(key, stated value, timm's default)] for the keys of a pretrained_cfg that timm's
    `resolve_data_config` replaces by its default: stated, but false (input_size: None)."""
    fallbacks = []
    for key, default in TIMM_DEFAULTS.items():
        if key in config and (config[key] is None if key == "input_size" else not config[key]):
            fallbacks.append((key, config[key], default))
    return fallbacks


def _timm_value(config, key):
    value = config.get(key)
    return TIMM_DEFAULTS[key] if (value is None if key == "input_size" else not value) else value


def _timm_input_size(value, where):
    """The square side of a pretrained_cfg input_size [C, H, W]."""
    if (not isinstance(value, (list, tuple)) or len(value) != 3 or
            not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise ConfigError(f"{where}: pretrained_cfg.input_size must be [channels, height, width] (positive "
                          f"integers), got {value!r}")
    if value[1] != value[2]:
        raise ConfigError(f"{where}: pretrained_cfg.input_size {list(value)} is not square; this project's models "
                          f"take square images")
    if value[1] > MAX_IMAGE_SIDE:
        raise ConfigError(f"{where}: pretrained_cfg.input_size {list(value)} is larger than any model takes (a side "
                          f"of at most {MAX_IMAGE_SIDE})")
    return value[1]


def _timm_crop_pct(value, where):
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not 0 < value <= 1):
        raise ConfigError(f"{where}: pretrained_cfg.crop_pct must be a number in (0, 1], got {value!r}")
    return float(value)


def _timm_interpolation(value, where):
    if value in INTERPOLATIONS:
        return value
    if value in TIMM_OTHER_INTERPOLATIONS:
        raise ConfigError(f"{where}: pretrained_cfg.interpolation {value!r} is timm's, but this project resizes "
                          f"with {', '.join(INTERPOLATIONS)} only")
    return check_choice(f"{where}: pretrained_cfg.interpolation", value, INTERPOLATIONS)


def _timm_statistics(value, where, key):
    """Three finite floats of a pretrained_cfg mean or std (std > 0)."""
    if (not isinstance(value, (list, tuple)) or len(value) != 3 or
            not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
            or (key == "std" and not all(v > 0 for v in value))):
        wanted = "three numbers > 0 (R, G, B)" if key == "std" else "three numbers (R, G, B)"
        raise ConfigError(f"{where}: pretrained_cfg.{key} must be {wanted}, got {value!r}")
    return [float(v) for v in value]


def _timm(config, image_size, where):
    """timm's `resolve_data_config(pretrained_cfg=...)` + `transforms_imagenet_eval`; each value
    checked, a false one replaced by timm's default as `resolve_data_config` does."""
    config = dict(config or {})
    if isinstance(config.get("pretrained_cfg"), dict):  # a whole Hub config.json was given
        config = config["pretrained_cfg"]
    input_size = _timm_value(config, "input_size")
    height = _timm_input_size(input_size, where)
    crop_pct = _timm_crop_pct(_timm_value(config, "crop_pct"), where)
    crop_mode = _timm_value(config, "crop_mode")
    check_choice(f"{where}: pretrained_cfg.crop_mode", crop_mode, TIMM_CROP_MODES)
    interpolation = _timm_interpolation(_timm_value(config, "interpolation"), where)
    mean = _timm_statistics(_timm_value(config, "mean"), where, "mean")
    std = _timm_statistics(_timm_value(config, "std"), where, "std")
    check_resize_bound(math.floor(height / crop_pct), height, where, f"pretrained_cfg.crop_pct {crop_pct!r}")
    if image_size is not None and int(image_size) != height:
        height = int(image_size)  # the model can only take its own size; the crop follows it
        where += f" (input_size {input_size[-1]} replaced by the model's {height})"
    scale_size = math.floor(height / crop_pct)
    check_resize_bound(scale_size, height, where, f"pretrained_cfg.crop_pct {crop_pct!r}")
    common = dict(mean=mean, std=std, interpolation=interpolation,
                  resize_size=scale_size, crop_offset="round", rescale="float32_divide",
                  rgb="convert", exif_transpose=False, origin=f"timm pretrained_cfg of {where}")
    if crop_mode == "squash":  # Resize((s, s)) then CenterCrop
        return Preprocess(height, crop_pct, resize_mode="both_sides", **common)
    if crop_mode == "border":  # ResizeKeepRatio(longest=1) then CenterCropOrPad(fill=mean)
        return Preprocess(height, crop_pct, resize_mode="longer_side", crop_fill="mean", **common)
    return Preprocess(height, crop_pct, resize_mode="shorter_side", long_side="truncate", **common)


_HF_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
_HF_SQUARE_224 = {"height": 224, "width": 224}
# transformers' image processors (PIL backend): what each class assumes for a key its
# preprocessor_config.json leaves out (a file written by save_pretrained states them all)
HF_PROCESSORS = {
    "ViTImageProcessor": dict(size=_HF_SQUARE_224, resample=2, image_mean=HALF, image_std=HALF),
    "DeiTImageProcessor": dict(size={"height": 256, "width": 256}, resample=3, do_center_crop=True,
                               crop_size=_HF_SQUARE_224, image_mean=HALF, image_std=HALF),
    "BitImageProcessor": dict(size={"shortest_edge": 224}, resample=3, do_center_crop=True, crop_size=_HF_SQUARE_224,
                              image_mean=OPENAI_MEAN, image_std=OPENAI_STD, do_convert_rgb=True,
                              default_to_square=False),
    "CLIPImageProcessor": dict(size={"shortest_edge": 224}, resample=3, do_center_crop=True, crop_size=_HF_SQUARE_224,
                               image_mean=OPENAI_MEAN, image_std=OPENAI_STD, do_convert_rgb=True,
                               default_to_square=False),
    "SiglipImageProcessor": dict(size=_HF_SQUARE_224, resample=3, image_mean=HALF, image_std=HALF,
                                 do_convert_rgb=True, default_to_square=False),
}
# default_to_square: whether a size given as one number n is n x n (else the shortest edge n)
_HF_COMMON = dict(do_resize=True, size=_HF_SQUARE_224, resample=2, do_center_crop=False, crop_size=_HF_SQUARE_224,
                  do_rescale=True, rescale_factor=1 / 255, do_normalize=True, image_mean=HALF, image_std=HALF,
                  do_convert_rgb=False, default_to_square=True)


def _size_of(value, where, key, default_to_square=True):
    """(height, width) or ("shortest_edge", n) of a preprocessor_config size entry (one number
    n: n x n, or the shortest edge n for a processor that does not default to square)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return ("square", int(value)) if default_to_square else ("shortest_edge", int(value))
    if isinstance(value, dict):
        sides = [value.get(side) for side in ("height", "width", "shortest_edge")]
        if not all(side is None or (isinstance(side, int) and not isinstance(side, bool) and side > 0)
                   for side in sides):
            raise ConfigError(f"{where}: {key} {value!r} must hold positive integers")
        if "height" in value and "width" in value:
            return ("square", int(value["height"])) if value["height"] == value["width"] else \
                ("rect", (int(value["height"]), int(value["width"])))
        if "shortest_edge" in value and "longest_edge" not in value:
            return ("shortest_edge", int(value["shortest_edge"]))
    raise ConfigError(f"{where}: {key} {value!r} is not one this project reads "
                      f"({{'height': H, 'width': W}} or {{'shortest_edge': N}})")


def _hf_processor_defaults(config, where):
    """The defaults of the image processor class a preprocessor_config.json names
    (image_processor_type, or feature_extractor_type in older files); ViTImageProcessor's for
    a file that names none."""
    key = "image_processor_type" if "image_processor_type" in config else "feature_extractor_type"
    kind = config.get(key, "ViTImageProcessor")
    name = kind.replace("FeatureExtractor", "ImageProcessor") if isinstance(kind, str) else kind
    for suffix in ("Fast", "Pil"):
        if isinstance(name, str) and name.endswith(suffix):
            name = name[:-len(suffix)]
    if name not in HF_PROCESSORS:
        raise ConfigError(f"{where}: {key} {kind!r} is not an image processor this project reproduces; it reads "
                          f"{', '.join(HF_PROCESSORS)}")
    return dict(_HF_COMMON, **HF_PROCESSORS[name])


def _hf_statistics(value, where, key):
    """Three floats from an image_mean / image_std entry (one number for all channels, or three)."""
    values = [value] * 3 if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    if (not isinstance(values, (list, tuple)) or len(values) != 3 or
            not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)):
        raise ConfigError(f"{where}: {key} {value!r} must be a number or three numbers (R, G, B)")
    if key.endswith("std") and not all(v > 0 for v in values):
        raise ConfigError(f"{where}: {key} {value!r} must be > 0")
    return [float(v) for v in values]


def _huggingface(config, image_size, where):
    """transformers' image processor (PIL backend): convert, resize, centre crop, rescale, normalise,
    each key as the file says or as its class assumes (`HF_PROCESSORS`)."""
    config = dict(config or {})
    settings = _hf_processor_defaults(config, where)
    settings.update({key: value for key, value in config.items() if key in settings and key != "default_to_square"})
    for key in ("do_resize", "do_center_crop", "do_rescale", "do_normalize", "do_convert_rgb"):
        if settings[key] is None:  # transformers: unset
            settings[key] = False
        if not isinstance(settings[key], bool):
            raise ConfigError(f"{where}: {key} must be true or false, got {settings[key]!r}")
    resample = settings["resample"]
    if resample not in _HF_RESAMPLE or isinstance(resample, bool):
        raise ConfigError(f"{where}: resample {resample!r} is not one of {sorted(_HF_RESAMPLE)} "
                          f"(nearest, bilinear, bicubic)")
    resize_mode, resize_size = "none", None
    if settings["do_resize"]:
        kind, value = _size_of(settings["size"], where, "size", settings["default_to_square"])
        if kind == "rect":
            raise ConfigError(f"{where}: size {settings['size']} is not square; this project's models take "
                              f"square images")
        resize_mode, resize_size = ("both_sides", value) if kind == "square" else ("shorter_side", value)
    crop = None
    do_crop = settings["do_center_crop"]
    if do_crop:
        kind, crop = _size_of(settings["crop_size"], where, "crop_size")
        if kind != "square":
            raise ConfigError(f"{where}: crop_size {settings['crop_size']} must be square")
    final = crop if do_crop else resize_size
    if final is None:
        final = int(image_size)
    if final > MAX_IMAGE_SIDE:
        raise ConfigError(f"{where}: {'crop_size' if do_crop else 'size'} makes {final} x {final} inputs, larger "
                          f"than any model takes (at most {MAX_IMAGE_SIDE})")
    if resize_size is not None:
        check_resize_bound(resize_size, final, where, f"size {settings['size']!r}")
    if image_size is not None and int(image_size) != final:
        raise ConfigError(f"{where}: the processor makes {final} x {final} inputs but the model takes "
                          f"{image_size} x {image_size}")
    if settings["do_normalize"]:
        mean = _hf_statistics(settings["image_mean"], where, "image_mean")
        std = _hf_statistics(settings["image_std"], where, "image_std")
    else:
        mean, std = [0.0] * 3, [1.0] * 3
    factor = settings["rescale_factor"]
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not (math.isfinite(factor) and factor > 0):
        raise ConfigError(f"{where}: rescale_factor {factor!r} must be a number > 0")
    return Preprocess(int(final), mean=mean, std=std,
                      interpolation=_HF_RESAMPLE[resample], resize_mode=resize_mode,
                      resize_size=resize_size if resize_size is not None else int(final),
                      long_side="truncate", crop_offset="floor", crop_fill="zero",
                      rescale="float64_multiply",
                      rescale_factor=float(factor) if settings["do_rescale"] else 1.0,
                      rgb="alpha_on_white" if settings["do_convert_rgb"] else "convert", read_rgb="convert",
                      exif_transpose=True, origin=f"Hugging Face image processor of {where}")


def _torchvision(image_size, where):
    """`ImageClassification(crop_size=224)`: PIL bilinear shorter side 256, crop 224, ImageNet stats."""
    crop = int(image_size) if image_size is not None else 224
    resize = 256 if crop == 224 else int(crop * 256 / 224)  # other sizes: the same 0.875 ratio
    return Preprocess(crop, crop / resize, list(IMAGENET_MEAN), list(IMAGENET_STD), "bilinear",
                      resize_mode="shorter_side", resize_size=resize, long_side="truncate",
                      crop_offset="round", rescale="float32_divide", rgb="convert", exif_transpose=False,
                      origin=f"torchvision IMAGENET1K_V1 transforms() ({where})")


def _paddleclas(config, image_size, where):
    """PaddleClas's eval ops: with no config its ViT configs' (cv2 decode,
    ResizeImage(resize_short=256), CropImage(224), NormalizeImage(scale=1/255, mean = std = 0.5),
    ToCHWImage), scaled to `image_size`; else the ``transform_ops`` list of the config, as a
    PaddleClas YAML writes it (`_paddleclas_ops`)."""
    if config:
        return _paddleclas_ops(config, image_size, where)
    crop = int(image_size) if image_size is not None else 224
    resize = 256 if crop == 224 else int(crop * 256 / 224)
    return Preprocess(crop, crop / resize, list(HALF), list(HALF), "bilinear", resize_mode="shorter_side",
                      resize_size=resize, long_side="scale_round", crop_offset="floor", backend="cv2",
                      rescale="float32_multiply", rescale_factor=1.0 / 255.0, rgb="convert_shift16",
                      exif_transpose=True, origin=f"PaddleClas ViT eval transform ({where})")


_PADDLECLAS_OPS = ("DecodeImage", "ResizeImage", "CropImage", "NormalizeImage", "ToCHWImage")


def _paddleclas_number(value, where, key):
    """A NormalizeImage scale as PaddleClas's YAML gives it: a number or "a/b" (it `eval`s strings)."""
    if isinstance(value, str):
        parts = value.split("/")
        try:
            numbers = [float(part) for part in parts]
        except ValueError:
            numbers = []
        if len(numbers) in (1, 2):
            return numbers[0] / numbers[1] if len(numbers) == 2 else numbers[0]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise ConfigError(f"{where}: {key} {value!r} is not a number or 'a/b'")


def _paddleclas_side(value, where, key):
    """A positive integer side of a ResizeImage or CropImage (N, or a square [N, N])."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: {key} must be a positive integer (or a square [N, N]; the models take square "
                          f"images), got {value!r}")
    return value


def _paddleclas_ops(config, image_size, where):
    """A PaddleClas eval ``transform_ops`` list (paddleclas/deploy/python/preprocess.py, the
    arithmetic of ppcls/data/preprocess/ops/operators.py): DecodeImage(to_rgb=True) (cv2.imdecode:
    alpha dropped, EXIF applied), ResizeImage(resize_short=N | size=N, interpolation, backend cv2 |
    pil: each side ``round(side * N / short)``), CropImage(size) (offset (h - c) // 2),
    NormalizeImage(scale, mean, std, order '') (float32 ``x * scale``), ToCHWImage."""
    ops = config.get("transform_ops") if isinstance(config, dict) else None
    if not isinstance(ops, list) or not all(isinstance(op, dict) and len(op) == 1 for op in ops):
        raise ConfigError(f"{where}: a PaddleClas preprocessing config holds transform_ops, a list of one-key "
                          f"dicts such as {{'ResizeImage': {{'resize_short': 256}}}}, got {config!r}")
    steps = {}
    for op in ops:
        (name, arguments), = op.items()
        check_choice("preprocess.transform_ops", name, _PADDLECLAS_OPS)
        if arguments is not None and not isinstance(arguments, dict):
            raise ConfigError(f"{where}: transform_ops {name} must hold its arguments as a mapping, got {arguments!r}")
        steps[name] = dict(arguments or {})
    if not steps.get("DecodeImage", {}).get("to_rgb", True):
        raise ConfigError(f"{where}: DecodeImage to_rgb false keeps OpenCV's BGR order; the models take RGB")
    resize = steps.get("ResizeImage")
    if resize is None:
        raise ConfigError(f"{where}: transform_ops without ResizeImage: an input of any size is not fed to a model")
    backend = str(resize.get("backend", "cv2")).lower()
    interpolation = str(resize.get("interpolation") or "bilinear").lower()  # either backend's default
    if resize.get("resize_short"):
        resize_mode, resize_size = "shorter_side", _paddleclas_side(resize["resize_short"], where,
                                                                     "ResizeImage resize_short")
    else:
        resize_mode, resize_size = "both_sides", _paddleclas_side(resize.get("size"), where, "ResizeImage size")
    crop = steps.get("CropImage", {}).get("size", resize_size) if "CropImage" in steps else resize_size
    crop = _paddleclas_side(crop, where, "CropImage size")
    if crop > MAX_IMAGE_SIDE:
        raise ConfigError(f"{where}: CropImage size {crop} is larger than any model takes (at most {MAX_IMAGE_SIDE})")
    check_resize_bound(resize_size, crop, where, f"ResizeImage {resize_size}")
    if image_size is not None and int(image_size) != crop:
        raise ConfigError(f"{where}: the transform makes {crop} x {crop} inputs but the model takes "
                          f"{image_size} x {image_size}")
    normalize = steps.get("NormalizeImage", {})
    if str(normalize.get("order", "chw")).lower() not in ("", "hwc"):
        raise ConfigError(f"{where}: NormalizeImage order {normalize.get('order')!r} normalises an HWC image by "
                          f"channel-first statistics; PaddleClas's eval configs give order ''")
    scale = _paddleclas_number(normalize.get("scale", "1.0/255.0"), where, "NormalizeImage scale")
    mean = _hf_statistics(normalize.get("mean", IMAGENET_MEAN), where, "NormalizeImage mean")
    std = _hf_statistics(normalize.get("std", IMAGENET_STD), where, "NormalizeImage std")
    preprocess = Preprocess(crop, crop / resize_size, mean, std, interpolation, resize_mode=resize_mode,
                            resize_size=resize_size, long_side="scale_round", crop_offset="floor", backend=backend,
                            rescale="float32_multiply", rescale_factor=scale, rgb="convert_shift16",
                            exif_transpose=True, origin=f"PaddleClas eval transform_ops of {where}")
    preprocess._validate()  # e.g. OpenCV's bicubic (PP-ShiTuV2's squash), which is not reproduced
    return preprocess


def _vit_jax(image_size, where):
    """vit_jax's input_pipeline: tf.image.resize to S x S (bilinear, half-pixel, no antialias),
    then (x - 127.5) / 127.5 in float32."""
    size = int(image_size) if image_size is not None else 224
    return Preprocess(size, 1.0, [127.5] * 3, [127.5] * 3, "bilinear", resize_mode="both_sides",
                      resize_size=size, backend="tf", rescale="float32_multiply", rescale_factor=1.0,
                      rgb="convert_shift16", exif_transpose=False,
                      origin=f"vit_jax input_pipeline ({where})")


def preprocess_for_checkpoint(hint, image_size, where=None):
    """The `Preprocess` a checkpoint family's `hint` implies, at the model's `image_size`.

    hint: ``{"pipeline": "timm", "config": pretrained_cfg}``, ``{"pipeline": "huggingface",
    "config": preprocessor_config}``, ``{"pipeline": "torchvision" | "paddleclas" | "vit_jax"}``,
    ``{"pipeline": "paddleclas", "config": {"transform_ops": [...]}}`` (a PaddleClas YAML's eval list);
    an optional ``"source"`` names the file the config came from (used in `origin`).
    """
    if not isinstance(hint, dict) or "pipeline" not in hint:
        raise ConfigError(f"a preprocessing hint is a dict with a 'pipeline' key, got {hint!r}")
    pipeline = check_choice("preprocess.pipeline", hint["pipeline"], PIPELINES)
    where = where or hint.get("source") or f"the {pipeline} checkpoint"
    preprocess = _build(pipeline, hint.get("config"), image_size, where)
    try:
        preprocess._validate()  # every value and the resize bound now, not per image
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None
    return preprocess


def _build(pipeline, config, image_size, where):
    if pipeline == "timm":
        return _timm(config, image_size, where)
    if pipeline == "huggingface":
        return _huggingface(config, image_size, where)
    if pipeline == "torchvision":
        return _torchvision(image_size, where)
    if pipeline == "openclip":  # timm's pretrained_cfg arithmetic, the RGB conversion after the resize
        preprocess = _timm(config, image_size, where)
        return dataclasses.replace(preprocess, rgb="convert_after_resize",
                                   origin=f"OpenCLIP's image_transform ({where})")
    if pipeline == "paddleclas":
        return _paddleclas(config, image_size, where)
    return _vit_jax(image_size, where)
