"""transformers' eval preprocessing: a ``preprocessor_config.json`` read into a `Preprocess` as its
image processor computes it with the PIL backend (`from_processor_config`: ViT, DeiT, Bit, CLIP,
Siglip), and a `Preprocess` written as the preprocessor_config.json of the image processor nearest
to it (`to_processor_config`, for a published transformers folder).

DINOv3ViTImageProcessor exists with torchvision only, and orders its steps its own way: rescale
first (uint8 x rescale_factor in float32), then torch's antialiased resize of the floats (a
squash to size, no rounding back to uint8), then normalise. That is backend "pil_float" here:
PIL's filter on each float32 channel, which is torch's antialiased bilinear within ~2e-6 (the
uint8 resize of the other processors would be 1e-2 off; tests/fixtures/hf_dinov3_reference.json)."""
import math

from ..errors import ConfigError, WeightsError
from .constants import (HALF, HF_RESAMPLE, HF_RESAMPLE_NAMES, IMAGENET_MEAN, IMAGENET_STD, MAX_IMAGE_SIDE, OPENAI_MEAN,
                        OPENAI_STD)
from .spec import Preprocess, channel_values, check_resize_bound

_SQUARE_224 = {"height": 224, "width": 224}
# transformers' image processors (PIL backend): what each class assumes for a key its
# preprocessor_config.json leaves out (a file written by save_pretrained states them all)
HF_PROCESSORS = {
    "ViTImageProcessor": dict(size=_SQUARE_224, resample=2, image_mean=HALF, image_std=HALF),
    "DeiTImageProcessor": dict(size={"height": 256, "width": 256}, resample=3, do_center_crop=True,
                               crop_size=_SQUARE_224, image_mean=HALF, image_std=HALF),
    "BitImageProcessor": dict(size={"shortest_edge": 224}, resample=3, do_center_crop=True, crop_size=_SQUARE_224,
                              image_mean=OPENAI_MEAN, image_std=OPENAI_STD, do_convert_rgb=True,
                              default_to_square=False),
    "CLIPImageProcessor": dict(size={"shortest_edge": 224}, resample=3, do_center_crop=True, crop_size=_SQUARE_224,
                               image_mean=OPENAI_MEAN, image_std=OPENAI_STD, do_convert_rgb=True,
                               default_to_square=False),
    "SiglipImageProcessor": dict(size=_SQUARE_224, resample=3, image_mean=HALF, image_std=HALF,
                                 do_convert_rgb=True, default_to_square=False),
    "DINOv3ViTImageProcessor": dict(size=_SQUARE_224, resample=2, image_mean=IMAGENET_MEAN, image_std=IMAGENET_STD),
}
# the processors that rescale before resizing the floats (torchvision only): backend "pil_float"
RESCALE_FIRST = ("DINOv3ViTImageProcessor",)
# default_to_square: whether a size given as one number n is n x n (else the shortest edge n)
_COMMON = dict(do_resize=True, size=_SQUARE_224, resample=2, do_center_crop=False, crop_size=_SQUARE_224,
               do_rescale=True, rescale_factor=1 / 255, do_normalize=True, image_mean=HALF, image_std=HALF,
               do_convert_rgb=False, default_to_square=True)


# ---- reading: preprocessor_config.json -> Preprocess ------------------------------------------

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


def _processor_class(config, where):
    """The image processor class a preprocessor_config.json names (image_processor_type, or
    feature_extractor_type in older files, without a Fast or Pil suffix); ViTImageProcessor for a
    file that names none."""
    key = "image_processor_type" if "image_processor_type" in config else "feature_extractor_type"
    kind = config.get(key, "ViTImageProcessor")
    name = kind.replace("FeatureExtractor", "ImageProcessor") if isinstance(kind, str) else kind
    for suffix in ("Fast", "Pil"):
        if isinstance(name, str) and name.endswith(suffix):
            name = name[:-len(suffix)]
    if name not in HF_PROCESSORS:
        raise ConfigError(f"{where}: {key} {kind!r} is not an image processor this project reproduces; it reads "
                          f"{', '.join(HF_PROCESSORS)}")
    return name


def _processor_defaults(config, where):
    """The defaults of the image processor class a preprocessor_config.json names."""
    return dict(_COMMON, **HF_PROCESSORS[_processor_class(config, where)])


def from_processor_config(config, image_size, where):
    """transformers' image processor (PIL backend): convert, resize, centre crop, rescale, normalise,
    each key as the file says or as its class assumes (`HF_PROCESSORS`)."""
    config = dict(config or {})
    settings = _processor_defaults(config, where)
    settings.update({key: value for key, value in config.items() if key in settings and key != "default_to_square"})
    for key in ("do_resize", "do_center_crop", "do_rescale", "do_normalize", "do_convert_rgb"):
        if settings[key] is None:  # transformers: unset
            settings[key] = False
        if not isinstance(settings[key], bool):
            raise ConfigError(f"{where}: {key} must be true or false, got {settings[key]!r}")
    resample = settings["resample"]
    if resample not in HF_RESAMPLE_NAMES or isinstance(resample, bool):
        raise ConfigError(f"{where}: resample {resample!r} is not one of {sorted(HF_RESAMPLE_NAMES)} "
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
        mean = channel_values(settings["image_mean"], where, "image_mean")
        std = channel_values(settings["image_std"], where, "image_std")
    else:
        mean, std = [0.0] * 3, [1.0] * 3
    factor = settings["rescale_factor"]
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not (math.isfinite(factor) and factor > 0):
        raise ConfigError(f"{where}: rescale_factor {factor!r} must be a number > 0")
    # DINOv3's: torch's uint8 tensor x python float, a float32 product, before the resize of the floats
    rescale_first = _processor_class(config, where) in RESCALE_FIRST
    return Preprocess(int(final), mean=mean, std=std,
                      interpolation=HF_RESAMPLE_NAMES[resample], resize_mode=resize_mode,
                      resize_size=resize_size if resize_size is not None else int(final),
                      long_side="truncate", crop_offset="floor", crop_fill="zero",
                      backend="pil_float" if rescale_first else "pil",
                      rescale="float32_multiply" if rescale_first else "float64_multiply",
                      rescale_factor=float(factor) if settings["do_rescale"] else 1.0,
                      rgb="alpha_on_white" if settings["do_convert_rgb"] else "convert", read_rgb="convert",
                      exif_transpose=True, origin=f"Hugging Face image processor of {where}")


# ---- publishing: Preprocess -> preprocessor_config.json ---------------------------------------

def to_processor_config(preprocess, processor_type=None):
    """(preprocessor_config.json, note, exact) of a `Preprocess` for transformers' PIL image
    processors. `processor_type` None: by the resize, ViTImageProcessor (a plain resize),
    DeiTImageProcessor (a square resize then a centre crop) or BitImageProcessor (the shorter
    side, then a centre crop); else that class's (a model family's own), or a WeightsError
    naming what it cannot express."""
    size, resize, mode = preprocess.image_size, preprocess.resize_size, preprocess.resize_mode
    common = _processor_common(preprocess)
    if processor_type is None:
        processor_type = ("ViTImageProcessor" if mode == "both_sides" and resize == size else
                          "DeiTImageProcessor" if mode == "both_sides" else "BitImageProcessor")
    else:
        _check_resize(processor_type, preprocess)
    square = {"height": size, "width": size}
    if processor_type == "ViTImageProcessor":
        values = dict(image_processor_type=processor_type, size=square, **common)
    elif processor_type in ("BitImageProcessor", "CLIPImageProcessor"):
        values = dict(image_processor_type=processor_type, size={"shortest_edge": resize}, do_center_crop=True,
                      crop_size=square, do_convert_rgb=True, **common)
    elif processor_type == "DeiTImageProcessor":
        values = dict(image_processor_type=processor_type, size={"height": resize, "width": resize},
                      do_center_crop=True, crop_size=square, **common)
    elif processor_type == "DINOv3ViTImageProcessor":  # a square resize of the rescaled floats, no crop
        values = dict(image_processor_type=processor_type, size=square, **common)
    else:  # SiglipImageProcessor: a square resize, no crop
        values = dict(image_processor_type=processor_type, size=square, do_convert_rgb=True, **common)
    return (values, *_processor_note(processor_type, preprocess))


def _check_resize(processor_type, preprocess):
    """Refuse a `Preprocess` whose resize the model family's own `processor_type` does not make."""
    size, resize, mode = preprocess.image_size, preprocess.resize_size, preprocess.resize_mode
    if processor_type in ("BitImageProcessor", "CLIPImageProcessor") and mode != "shorter_side":
        raise WeightsError(f"transformers' {processor_type} resizes the shorter side then crops the centre; this "
                           f"model's preprocessing resizes {mode!r}: publish with --to timm, or give a "
                           f"shorter-side preprocessing")
    if processor_type == "DeiTImageProcessor" and mode != "both_sides":
        raise WeightsError(f"transformers' DeiTImageProcessor resizes both sides to a square then crops the "
                           f"centre; this model's preprocessing resizes {mode!r}: publish with --to timm, or give "
                           f"a square-resize preprocessing")
    if processor_type in ("SiglipImageProcessor", "DINOv3ViTImageProcessor") and (mode != "both_sides" or
                                                                               resize != size):
        raise WeightsError(f"transformers' {processor_type} resizes both sides to the model's size without "
                           f"a crop; this model's preprocessing resizes {mode!r} to {resize} px and crops {size}: "
                           f"publish with --to timm, or give a square resize at crop_pct 1")


def _processor_common(preprocess):
    """The keys every transformers image processor written here shares (resample, rescale, mean,
    std), after checking the interpolation is a resample transformers has."""
    if preprocess.interpolation not in HF_RESAMPLE:
        raise WeightsError(f"interpolation {preprocess.interpolation!r} has no transformers resample")
    return {"do_resize": True, "resample": HF_RESAMPLE[preprocess.interpolation], "do_rescale": True,
            "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [float(v) for v in preprocess.mean],
            "image_std": [float(v) for v in preprocess.std]}


def _processor_note(processor_type, preprocess):
    """(note, exact): how near transformers' `processor_type` comes to the model's preprocessing."""
    exact = (preprocess.origin.startswith("Hugging Face image processor")
             and (preprocess.backend == "pil_float") == (processor_type in RESCALE_FIRST))
    if not exact and processor_type in RESCALE_FIRST:
        return (f"transformers' {processor_type} (torchvision) is the nearest to this model's preprocessing "
                f"({preprocess.origin or 'its own'}): the same size, interpolation, mean and std; it rescales first "
                f"and resizes the floats with antialias"), exact
    note = (f"transformers' {processor_type} computes exactly this model's preprocessing" if exact
            else f"transformers' {processor_type} (PIL backend) is the nearest to this model's preprocessing "
                 f"({preprocess.origin or 'its own'}): the same sizes, interpolation, mean and std; it rescales in "
                 f"float64 and crops at (h - c) // 2")
    return note, exact
