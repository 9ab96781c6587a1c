"""`Preprocess`: one eval pipeline in plain values, precisely enough to reproduce the library that
made a checkpoint, and the checks of those values (each made once, when the value is built).

Its JSON form (`to_dict`, `from_dict`) is an export's ``preprocess.json``; the pipeline it
describes runs in `pipeline.py`.
"""
import dataclasses
import math
import os
from typing import List, Optional

from PIL import Image, ImageOps

from ..errors import ConfigError, check_choice
from .constants import CROP_PCT_RANGE, HALF, INTERPOLATIONS, MAX_IMAGE_SIDE, MAX_RESIZE_FACTOR, MAX_RESIZE_SIDE
from .pipeline import EvalTransform, TooLargeToResize, to_rgb

RESIZE_MODES = ("shorter_side", "both_sides", "longer_side", "none")
LONG_SIDE_RULES = ("round", "truncate", "scale_round", "timm_ratio")
CROP_OFFSETS = ("round", "floor")
CROP_FILLS = ("zero", "mean")
BACKENDS = ("pil", "cv2", "tf", "pil_float")
RESCALES = ("float32_divide", "float32_multiply", "float64_multiply")
RGB_CONVERSIONS = ("composite_white", "convert", "alpha_on_white", "convert_shift16", "convert_after_resize")


@dataclasses.dataclass
class Preprocess:
    """The eval preprocessing of a model, all a predictor needs besides the network.

    The defaults are this project's own recipes' (`from_config`): the shorter side resized to
    ``round`` of ``int(image_size / eval_crop_pct)`` (both sides to `image_size` when
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
        (tf.image.resize bilinear, half-pixel centres, no antialias, float32 result), "pil_float"
        (rescaled first, then PIL's filter on each channel as a float32 'F' image: transformers'
        DINOv3ViTImageProcessor, which rescales before torch's antialiased resize of floats).
    rescale, rescale_factor: how a pixel becomes a float before the mean and std (`RESCALES`).
    rgb: how `transform` turns an image of any mode into RGB: "composite_white" (this
        project's: transparency on white, 16-bit scaled), "convert" (PIL's
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
            usable = crop_pct_in_range(self.eval_crop_pct)  # else `_validate` refuses it
            self.resize_size = int(self.image_size / self.eval_crop_pct) if usable else self.image_size
        self.resize_size = int(self.resize_size)

    # ---- construction ------------------------------------------------------------------------

    @classmethod
    def from_config(cls, data_config, image_size, origin="recipe data config"):
        """The eval preprocessing of a recipe's data section (`DataConfig`: its mean, std,
        interpolation and eval_crop_pct) at the model's input size: what the validation split of
        a training run is fed through, and predict and export where the checkpoint says none."""
        return cls(int(image_size), float(data_config.eval_crop_pct), [float(v) for v in data_config.mean],
                   [float(v) for v in data_config.std], str(data_config.interpolation), origin=origin)

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
        """The eval transform `(pil_image, rng=None) -> float32 [3, S, S]` (`pipeline.EvalTransform`).

        The image may be in any PIL mode, as opened; it is converted to RGB as this pipeline's
        library does.
        """
        self._validate()
        return EvalTransform(self)

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
        check_crop_pct("data.eval_crop_pct", self.eval_crop_pct)
        if (len(self.mean) != 3 or len(self.std) != 3 or any(s <= 0 for s in self.std) or
                not all(math.isfinite(v) for v in list(self.mean) + list(self.std))):
            raise ConfigError(f"data.mean and data.std need 3 finite values each (std > 0), got {list(self.mean)}, "
                              f"{list(self.std)}")
        for key, value, choices in (("interpolation", self.interpolation, INTERPOLATIONS),
                                    ("resize", self.resize_mode, RESIZE_MODES),
                                    ("long_side", self.long_side, LONG_SIDE_RULES),
                                    ("crop_offset", self.crop_offset, CROP_OFFSETS),
                                    ("crop_fill", self.crop_fill, CROP_FILLS),
                                    ("backend", self.backend, BACKENDS),
                                    ("rescale", self.rescale, RESCALES),
                                    ("rgb_conversion", self.rgb, RGB_CONVERSIONS)):
            check_choice(f"preprocess.{key}", value, choices)
        if self.read_rgb is not None:
            check_choice("preprocess.read_rgb_conversion", self.read_rgb, RGB_CONVERSIONS)
        if self.backend in ("cv2", "tf") and self.interpolation != "bilinear":
            raise ConfigError(f"preprocess backend {self.backend!r} resizes bilinearly only, "
                              f"got interpolation {self.interpolation!r}")
        if not (math.isfinite(self.rescale_factor) and self.rescale_factor > 0):
            raise ConfigError(f"preprocess rescale_factor must be a number > 0, got {self.rescale_factor!r}")


# ---- the checks every source of values shares ----------------------------------------------------

def crop_pct_in_range(value):
    """Whether `value` is a crop fraction (eval_crop_pct, timm's crop_pct): a number in (0, 1]."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and 0 < value <= 1)


def check_crop_pct(key, value):
    """Refuse a crop fraction outside (0, 1], naming `key`."""
    if not crop_pct_in_range(value):
        raise ConfigError(f"{key} must be in {CROP_PCT_RANGE}, got {value!r}")


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


def channel_values(value, where, key):
    """Three floats from a library's mean or std entry (one number for all channels, or three;
    a std > 0), or a ConfigError naming `where` and `key`."""
    values = [value] * 3 if isinstance(value, (int, float)) and not isinstance(value, bool) else value
    if (not isinstance(values, (list, tuple)) or len(values) != 3 or
            not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)):
        raise ConfigError(f"{where}: {key} {value!r} must be a number or three numbers (R, G, B)")
    if key.endswith("std") and not all(v > 0 for v in values):
        raise ConfigError(f"{where}: {key} {value!r} must be > 0")
    return [float(v) for v in values]


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
