"""PaddleClas's eval preprocessing (and PLSC's, and PaddleX's for the foundation ViTs): its ViT
configs' eval ops, or a config's ``transform_ops`` list, read into a `Preprocess`
(`from_transform_ops`)."""
from ..errors import ConfigError, check_choice
from .constants import HALF, IMAGENET_MEAN, IMAGENET_STD, MAX_IMAGE_SIDE
from .spec import Preprocess, channel_values, check_resize_bound

OPS = ("DecodeImage", "ResizeImage", "CropImage", "NormalizeImage", "ToCHWImage")
FOUNDATION_EVAL_OPS = [  # the eval transform_ops of PaddleX's CLIP_vit_base_patch16_224.yaml
    {"DecodeImage": {"to_rgb": True, "channel_first": False}},
    {"ResizeImage": {"resize_short": 224, "interpolation": "bicubic", "backend": "pil"}},
    {"CropImage": {"size": 224}},
    {"NormalizeImage": {"scale": "1.0/255.0", "mean": list(IMAGENET_MEAN), "std": list(IMAGENET_STD), "order": ""}},
    {"ToCHWImage": None},
]


def from_transform_ops(config, image_size, where):
    """PaddleClas's eval ops: with no config its ViT configs' (cv2 decode,
    ResizeImage(resize_short=256), CropImage(224), NormalizeImage(scale=1/255, mean = std = 0.5),
    ToCHWImage), scaled to `image_size`; else the ``transform_ops`` list of the config, as a
    PaddleClas YAML writes it (`_from_ops`)."""
    if config:
        return _from_ops(config, image_size, where)
    crop = int(image_size) if image_size is not None else 224
    resize = 256 if crop == 224 else int(crop * 256 / 224)
    return Preprocess(crop, crop / resize, list(HALF), list(HALF), "bilinear", resize_mode="shorter_side",
                      resize_size=resize, long_side="scale_round", crop_offset="floor", backend="cv2",
                      rescale="float32_multiply", rescale_factor=1.0 / 255.0, rgb="convert_shift16",
                      exif_transpose=True, origin=f"PaddleClas ViT eval transform ({where})")


def _number(value, where, key):
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


def _side(value, where, key):
    """A positive integer side of a ResizeImage or CropImage (N, or a square [N, N])."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and value[0] == value[1]:
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}: {key} must be a positive integer (or a square [N, N]; the models take square "
                          f"images), got {value!r}")
    return value


def _from_ops(config, image_size, where):
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
        check_choice("preprocess.transform_ops", name, OPS)
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
        resize_mode, resize_size = "shorter_side", _side(resize["resize_short"], where, "ResizeImage resize_short")
    else:
        resize_mode, resize_size = "both_sides", _side(resize.get("size"), where, "ResizeImage size")
    crop = steps.get("CropImage", {}).get("size", resize_size) if "CropImage" in steps else resize_size
    crop = _side(crop, where, "CropImage size")
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
    scale = _number(normalize.get("scale", "1.0/255.0"), where, "NormalizeImage scale")
    mean = channel_values(normalize.get("mean", IMAGENET_MEAN), where, "NormalizeImage mean")
    std = channel_values(normalize.get("std", IMAGENET_STD), where, "NormalizeImage std")
    preprocess = Preprocess(crop, crop / resize_size, mean, std, interpolation, resize_mode=resize_mode,
                            resize_size=resize_size, long_side="scale_round", crop_offset="floor", backend=backend,
                            rescale="float32_multiply", rescale_factor=scale, rgb="convert_shift16",
                            exif_transpose=True, origin=f"PaddleClas eval transform_ops of {where}")
    preprocess._validate()  # e.g. OpenCV's bicubic (PP-ShiTuV2's squash), which is not reproduced
    return preprocess
