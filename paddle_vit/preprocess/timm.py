"""timm's eval preprocessing: a ``pretrained_cfg`` read into a `Preprocess` (`from_pretrained_cfg`,
what `resolve_data_config` + `create_transform(is_training=False)` compute), a `Preprocess`
written back as one (`to_pretrained_cfg`, for a published timm Hub folder), and the default
pretrained_cfg timm gives each of today's ViT names (`timm_eval_config`)."""
import math

from ..errors import ConfigError, WeightsError, check_choice
from .constants import (CROP_PCT_RANGE, HALF, IMAGENET_MEAN, IMAGENET_STD, INTERPOLATIONS, MAX_IMAGE_SIDE,
                        OPENAI_MEAN, OPENAI_STD)
from .spec import Preprocess, check_resize_bound, crop_pct_in_range

# timm's resolve_data_config (timm/data/config.py) reads each of these as
# ``pretrained_cfg.get(key, None)`` and takes the default when that is false (None, 0, "", []);
# input_size only when it is None. A folder's false value is that default, said in a warning.
TIMM_DEFAULTS = {"input_size": (3, 224, 224), "interpolation": "bicubic", "crop_pct": 0.875, "crop_mode": "center",
                 "mean": IMAGENET_MEAN, "std": IMAGENET_STD}
TIMM_CROP_MODES = ("center", "squash", "border")
# interpolations timm names (str_to_interp_mode) that this project does not compute
TIMM_OTHER_INTERPOLATIONS = ("box", "hamming", "lanczos", "random")
# a Preprocess's resize_mode -> the crop_mode of timm's eval transform that resizes so
CROP_MODE_OF_RESIZE = {"shorter_side": "center", "both_sides": "squash", "longer_side": "border"}


# ---- reading: pretrained_cfg -> Preprocess ----------------------------------------------------

def timm_fallbacks(config):
    """[(key, stated value, timm's default)] for the keys of a pretrained_cfg that timm's
    `resolve_data_config` replaces by its default: stated, but false (input_size: None)."""
    fallbacks = []
    for key, default in TIMM_DEFAULTS.items():
        if key in config and (config[key] is None if key == "input_size" else not config[key]):
            fallbacks.append((key, config[key], default))
    return fallbacks


def _value(config, key):
    value = config.get(key)
    return TIMM_DEFAULTS[key] if (value is None if key == "input_size" else not value) else value


def _input_size(value, where):
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


def _crop_pct(value, where):
    if not crop_pct_in_range(value):
        raise ConfigError(f"{where}: pretrained_cfg.crop_pct must be a number in {CROP_PCT_RANGE}, got {value!r}")
    return float(value)


def _interpolation(value, where):
    if value in INTERPOLATIONS:
        return value
    if value in TIMM_OTHER_INTERPOLATIONS:
        raise ConfigError(f"{where}: pretrained_cfg.interpolation {value!r} is timm's, but this project resizes "
                          f"with {', '.join(INTERPOLATIONS)} only")
    return check_choice(f"{where}: pretrained_cfg.interpolation", value, INTERPOLATIONS)


def _statistics(value, where, key):
    """Three finite floats of a pretrained_cfg mean or std (std > 0)."""
    if (not isinstance(value, (list, tuple)) or len(value) != 3 or
            not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
            or (key == "std" and not all(v > 0 for v in value))):
        wanted = "three numbers > 0 (R, G, B)" if key == "std" else "three numbers (R, G, B)"
        raise ConfigError(f"{where}: pretrained_cfg.{key} must be {wanted}, got {value!r}")
    return [float(v) for v in value]


def from_pretrained_cfg(config, image_size, where):
    """timm's `resolve_data_config(pretrained_cfg=...)` + `transforms_imagenet_eval`; each value
    checked, a false one replaced by timm's default as `resolve_data_config` does."""
    config = dict(config or {})
    if isinstance(config.get("pretrained_cfg"), dict):  # a whole Hub config.json was given
        config = config["pretrained_cfg"]
    input_size = _value(config, "input_size")
    height = _input_size(input_size, where)
    crop_pct = _crop_pct(_value(config, "crop_pct"), where)
    crop_mode = _value(config, "crop_mode")
    check_choice(f"{where}: pretrained_cfg.crop_mode", crop_mode, TIMM_CROP_MODES)
    interpolation = _interpolation(_value(config, "interpolation"), where)
    mean = _statistics(_value(config, "mean"), where, "mean")
    std = _statistics(_value(config, "std"), where, "std")
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


# ---- publishing: Preprocess -> pretrained_cfg -------------------------------------------------

def to_pretrained_cfg(preprocess):
    """(the eval keys of timm's pretrained_cfg: interpolation, crop_pct, crop_mode, mean and std;
    a note on how exact they are; whether they are exact) of a `Preprocess`, or a WeightsError
    for a resize timm's eval transform does not make."""
    crop_pct = float(preprocess.eval_crop_pct)
    mode = CROP_MODE_OF_RESIZE.get(preprocess.resize_mode)
    if mode is None:
        raise WeightsError(f"the preprocessing resizes {preprocess.resize_mode!r}, which timm's eval transform does "
                           f"not (center, squash or border crop)")
    size, resize = preprocess.image_size, preprocess.resize_size
    if resize != math.floor(size / crop_pct):  # a crop_pct whose timm scale_size = floor(S / crop_pct) is `resize`
        crop_pct = size / resize if math.floor(size / (size / resize)) == resize else size / (resize + 0.5)
    differences = [] if preprocess.origin.startswith("timm pretrained_cfg") else _differences(preprocess, mode)
    exact = not differences
    note = ("timm's eval transform computes exactly this model's preprocessing" if exact else
            f"timm's eval transform is the nearest to this model's preprocessing ({preprocess.origin or 'its own'}), "
            f"not the same: {'; '.join(differences)}")
    values = {"interpolation": preprocess.interpolation, "crop_pct": crop_pct, "crop_mode": mode,
              "mean": [float(v) for v in preprocess.mean], "std": [float(v) for v in preprocess.std]}
    return values, note, exact


def _differences(preprocess, mode):
    """How timm's eval transform of `mode` differs from `preprocess` (a list of phrases, [] when it
    computes the same)."""
    differences = []
    if mode == "center" and preprocess.long_side != "truncate":
        differences.append(f"the longer side after the resize is truncated by timm, {preprocess.long_side} here "
                           f"(a pixel at most)")
    if preprocess.crop_offset != "round":
        differences.append(f"the crop offset is rounded by timm, {preprocess.crop_offset} here")
    if mode == "border" and preprocess.crop_fill != "mean":
        differences.append("timm pads a small image with the mean, with zeros here")
    if preprocess.backend != "pil":
        differences.append(f"timm resizes with PIL, {preprocess.backend} here")
    if preprocess.rescale != "float32_divide":
        differences.append(f"timm rescales float32(pixel) / 255, {preprocess.rescale} here")
    if preprocess.rgb != "convert" or preprocess.read_rgb not in (None, "convert"):
        differences.append(f"timm converts images to RGB with PIL's convert('RGB') (transparency dropped), "
                           f"{preprocess.rgb} here")
    if preprocess.exif_transpose:
        differences.append("timm does not turn images upright by their EXIF orientation, this model does")
    return differences


# ---- timm's default pretrained_cfg of today's ViT names -----------------------------------------
# Each registered name's default ``pretrained_cfg`` in timm 1.0.31: (crop_pct, mean and std by family,
# crop_mode[, interpolation: bicubic unless said]). A checkpoint that carries no pipeline of its own (a bare timm or OpenCLIP file
# loaded under one of these names) is evaluated with it; a timm Hub folder's config.json and a
# Hugging Face preprocessor_config.json say their own. tests/test_modern_vits.py holds the table
# to timm's record.

MEANS_STDS = {
    "imagenet": (IMAGENET_MEAN, IMAGENET_STD),
    "openai": (OPENAI_MEAN, OPENAI_STD),  # CLIP's
    "half": (HALF, HALF),  # SigLIP's, timm's own gap ViTs'
    "unit": ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0)),  # pixels in [0, 1] as they are: MIIL's ImageNet-21K-P, TIPSv2
}
TIMM_EVAL = {
    "deit3_base_patch16_224": (0.9, "imagenet", "center"),
    "deit3_base_patch16_384": (1.0, "imagenet", "center"),
    "deit3_huge_patch14_224": (0.9, "imagenet", "center"),
    "deit3_large_patch16_224": (0.9, "imagenet", "center"),
    "deit3_large_patch16_384": (1.0, "imagenet", "center"),
    "deit3_medium_patch16_224": (0.9, "imagenet", "center"),
    "deit3_small_patch16_224": (0.9, "imagenet", "center"),
    "deit3_small_patch16_384": (1.0, "imagenet", "center"),
    "deit_base_distilled_patch16_224": (0.9, "imagenet", "center"),
    "deit_base_distilled_patch16_384": (1.0, "imagenet", "center"),
    "deit_small_distilled_patch16_224": (0.9, "imagenet", "center"),
    "deit_tiny_distilled_patch16_224": (0.9, "imagenet", "center"),
    "vit_base_patch14_dinov2": (1.0, "imagenet", "center"),
    "vit_base_patch14_reg4_dinov2": (1.0, "imagenet", "center"),
    "vit_base_patch16_clip_224": (0.95, "openai", "center"),
    "vit_base_patch16_clip_384": (1.0, "openai", "squash"),
    "vit_base_patch16_clip_quickgelu_224": (1.0, "openai", "center"),
    "vit_base_patch16_gap_224": (0.9, "half", "center"),
    "vit_base_patch16_plus_clip_240": (1.0, "openai", "center"),
    "vit_base_patch16_reg4_gap_256": (0.9, "half", "center"),
    "vit_base_patch16_siglip_224": (0.9, "half", "center"),
    "vit_base_patch16_siglip_256": (0.9, "half", "center"),
    "vit_base_patch16_siglip_384": (0.9, "half", "center"),
    "vit_base_patch16_siglip_512": (0.9, "half", "center"),
    "vit_base_patch16_siglip_gap_224": (0.9, "half", "center"),
    "vit_base_patch16_siglip_gap_256": (0.9, "half", "center"),
    "vit_base_patch16_siglip_gap_384": (0.9, "half", "center"),
    "vit_base_patch16_siglip_gap_512": (0.9, "half", "center"),
    "vit_base_patch32_clip_224": (0.9, "openai", "center"),
    "vit_base_patch32_clip_256": (1.0, "openai", "center"),
    "vit_base_patch32_clip_384": (1.0, "openai", "center"),
    "vit_base_patch32_clip_448": (1.0, "openai", "center"),
    "vit_base_patch32_clip_quickgelu_224": (0.9, "openai", "center"),
    "vit_base_patch32_siglip_256": (0.9, "half", "center"),
    "vit_base_patch32_siglip_gap_256": (0.9, "half", "center"),
    "vit_betwixt_patch16_gap_256": (0.95, "half", "center"),
    "vit_betwixt_patch16_reg1_gap_256": (0.95, "half", "center"),
    "vit_betwixt_patch16_reg4_gap_256": (0.95, "half", "center"),
    "vit_betwixt_patch16_reg4_gap_384": (1.0, "half", "center"),
    "vit_betwixt_patch32_clip_224": (0.9, "openai", "center"),
    "vit_giant_patch14_clip_224": (1.0, "openai", "center"),
    "vit_giant_patch14_dinov2": (1.0, "imagenet", "center"),
    "vit_giant_patch14_reg4_dinov2": (1.0, "imagenet", "center"),
    "vit_giant_patch16_gap_224": (0.9, "imagenet", "center"),
    "vit_giantopt_patch16_siglip_256": (0.9, "half", "center"),
    "vit_giantopt_patch16_siglip_384": (0.9, "half", "center"),
    "vit_giantopt_patch16_siglip_gap_256": (0.9, "half", "center"),
    "vit_giantopt_patch16_siglip_gap_384": (0.9, "half", "center"),
    "vit_gigantic_patch14_clip_224": (1.0, "openai", "center"),
    "vit_gigantic_patch14_clip_378": (1.0, "openai", "squash"),
    "vit_gigantic_patch14_clip_quickgelu_224": (1.0, "openai", "center"),
    "vit_huge_patch14_clip_224": (1.0, "openai", "center"),
    "vit_huge_patch14_clip_336": (1.0, "openai", "squash"),
    "vit_huge_patch14_clip_378": (1.0, "openai", "center"),
    "vit_huge_patch14_clip_quickgelu_224": (1.0, "openai", "center"),
    "vit_huge_patch14_clip_quickgelu_378": (1.0, "openai", "center"),
    "vit_huge_patch14_gap_224": (0.9, "imagenet", "center"),
    "vit_huge_patch16_gap_448": (1.0, "imagenet", "center"),
    "vit_large_patch14_clip_224": (1.0, "half", "center"),
    "vit_large_patch14_clip_336": (1.0, "half", "squash"),
    "vit_large_patch14_clip_quickgelu_224": (1.0, "openai", "center"),
    "vit_large_patch14_clip_quickgelu_336": (1.0, "openai", "center"),
    "vit_large_patch14_dinov2": (1.0, "imagenet", "center"),
    "vit_large_patch14_reg4_dinov2": (1.0, "imagenet", "center"),
    "vit_large_patch16_siglip_256": (0.9, "half", "center"),
    "vit_large_patch16_siglip_384": (0.9, "half", "center"),
    "vit_large_patch16_siglip_512": (0.9, "half", "center"),
    "vit_large_patch16_siglip_gap_256": (0.9, "half", "center"),
    "vit_large_patch16_siglip_gap_384": (0.9, "half", "center"),
    "vit_large_patch16_siglip_gap_512": (0.9, "half", "center"),
    "vit_little_patch16_reg1_gap_256": (0.95, "half", "center"),
    "vit_little_patch16_reg4_gap_256": (0.95, "half", "center"),
    "vit_medium_patch16_clip_224": (0.9, "openai", "center"),
    "vit_medium_patch16_gap_240": (0.95, "half", "center"),
    "vit_medium_patch16_gap_256": (0.95, "half", "center"),
    "vit_medium_patch16_gap_384": (0.95, "half", "squash"),
    "vit_medium_patch16_reg1_gap_256": (0.95, "half", "center"),
    "vit_medium_patch16_reg4_gap_256": (0.95, "half", "center"),
    "vit_medium_patch32_clip_224": (0.9, "openai", "center"),
    "vit_mediumd_patch16_reg4_gap_256": (0.95, "half", "center"),
    "vit_mediumd_patch16_reg4_gap_384": (1.0, "half", "center"),
    "vit_small_patch14_dinov2": (1.0, "imagenet", "center"),
    "vit_small_patch14_reg4_dinov2": (1.0, "imagenet", "center"),
    "vit_so150m2_patch16_reg1_gap_256": (1.0, "half", "center"),
    "vit_so150m2_patch16_reg1_gap_384": (1.0, "half", "center"),
    "vit_so150m2_patch16_reg1_gap_448": (1.0, "half", "squash"),
    "vit_so150m_patch16_reg4_gap_256": (0.95, "half", "center"),
    "vit_so150m_patch16_reg4_gap_384": (1.0, "half", "center"),
    "vit_so400m_patch14_siglip_224": (0.9, "half", "center"),
    "vit_so400m_patch14_siglip_378": (0.9, "half", "center"),
    "vit_so400m_patch14_siglip_384": (0.9, "half", "center"),
    "vit_so400m_patch14_siglip_gap_224": (0.9, "half", "center"),
    "vit_so400m_patch14_siglip_gap_378": (0.9, "half", "center"),
    "vit_so400m_patch14_siglip_gap_384": (1.0, "half", "center"),
    "vit_so400m_patch14_siglip_gap_448": (1.0, "half", "center"),
    "vit_so400m_patch14_siglip_gap_896": (1.0, "half", "center"),
    "vit_so400m_patch16_siglip_256": (0.9, "half", "center"),
    "vit_so400m_patch16_siglip_384": (0.9, "half", "center"),
    "vit_so400m_patch16_siglip_512": (0.9, "half", "center"),
    "vit_so400m_patch16_siglip_gap_256": (0.9, "half", "center"),
    "vit_so400m_patch16_siglip_gap_384": (0.9, "half", "center"),
    "vit_so400m_patch16_siglip_gap_512": (0.9, "half", "center"),
    "vit_wee_patch16_reg1_gap_256": (0.95, "half", "center"),
    "vit_xsmall_patch16_clip_224": (0.9, "openai", "center"),
    # the rest of timm's plain-ViT names (tests/test_timm_names.py holds them to timm's record)
    "deit_base_patch16_224": (0.9, "imagenet", "center"),
    "deit_base_patch16_384": (1.0, "imagenet", "center"),
    "deit_small_patch16_224": (0.9, "imagenet", "center"),
    "deit_tiny_patch16_224": (0.9, "imagenet", "center"),
    "eva_large_patch14_196": (1.0, "openai", "center"),
    "eva_large_patch14_336": (1.0, "openai", "squash"),
    "flexivit_base": (0.95, "half", "center"),
    "flexivit_large": (0.95, "half", "center"),
    "flexivit_small": (0.95, "half", "center"),
    "test_vit": (0.95, "half", "center"),
    "test_vit2": (0.95, "half", "center"),
    "test_vit3": (0.95, "half", "center"),
    "test_vit4": (0.95, "half", "center"),
    "vit_base_patch14_reg1_tipsv2": (1.0, "unit", "center"),
    "vit_base_patch16_224_miil": (0.875, "unit", "center", "bilinear"),
    "vit_base_patch16_plus_240": (0.95, "half", "center"),
    "vit_base_patch32_plus_256": (0.95, "half", "center"),
    "vit_base_patch8_224": (0.9, "half", "center"),
    "vit_base_r26_s32_224": (0.9, "half", "center"),
    **{name: (0.9, "imagenet", "center") for name in ("vit_small_resnet26d_224", "vit_small_resnet50d_s16_224",
                                                       "vit_base_resnet26d_224", "vit_base_resnet50d_224")},
    "vit_giant_patch14_224": (0.9, "half", "center"),
    "vit_giant_patch14_reg1_tipsv2": (1.0, "unit", "center"),
    "vit_gigantic_patch14_224": (0.9, "half", "center"),
    "vit_intern300m_patch14_448": (1.0, "imagenet", "center"),
    "vit_large_patch14_224": (0.9, "half", "center"),
    "vit_large_patch14_reg1_tipsv2": (1.0, "unit", "center"),
    "vit_small_patch16_36x1_224": (0.9, "half", "center"),
    "vit_small_patch8_224": (0.9, "imagenet", "center"),
    "vit_so150m_patch16_reg4_map_256": (0.9, "half", "center"),
    "vit_so400m_patch14_reg1_tipsv2": (1.0, "unit", "center"),
    # AIMv2, BEiT-3, C-RADIO
    **{f"aimv2_{size}_patch14_{resolution}": (1.0, "openai", "center") for size in ("large", "huge", "1b", "3b")
       for resolution in (224, 336, 448)},
    **{name: (1.0, "imagenet", "center") for name in ("beit3_base_patch16_224", "beit3_large_patch16_224",
                                                       "beit3_giant_patch14_224", "beit3_giant_patch14_336")},
    **{f"vit_{size}_patch16_radio_{version}": (1.0, "openai", "center") for size, version in (
        ("base", "v3"), ("large", "v3"), ("huge", "v3"), ("giant", "v3"), ("so400m", "v4"), ("huge", "v4"))},
}
# the RoPE generation (timm's Eva class): the same, an interpolation after the three where it is not
# bicubic (lingbot's bilinear squash)
TIMM_EVAL_ROPE = {
    "eva02_base_patch14_224": (0.9, "openai", "center"),
    "eva02_base_patch14_448": (1.0, "openai", "squash"),
    "eva02_base_patch16_clip_224": (0.9, "openai", "center"),
    "eva02_large_patch14_224": (0.9, "openai", "center"),
    "eva02_large_patch14_448": (1.0, "openai", "squash"),
    "eva02_large_patch14_clip_224": (0.9, "openai", "center"),
    "eva02_large_patch14_clip_336": (1.0, "openai", "center"),
    "eva02_small_patch14_224": (0.9, "openai", "center"),
    "eva02_small_patch14_336": (1.0, "openai", "center"),
    "eva02_tiny_patch14_224": (0.9, "openai", "center"),
    "eva02_tiny_patch14_336": (1.0, "openai", "center"),
    "eva_giant_patch14_224": (0.9, "openai", "center"),
    "eva_giant_patch14_336": (1.0, "openai", "squash"),
    "eva_giant_patch14_560": (1.0, "imagenet", "squash"),
    "eva_giant_patch14_clip_224": (0.9, "openai", "center"),
    "vit_7b_patch16_dinov3": (1.0, "imagenet", "center"),
    "vit_base_patch16_dinov3": (1.0, "imagenet", "center"),
    "vit_base_patch16_dinov3_qkvb": (1.0, "imagenet", "center"),
    "vit_base_patch16_lingbot": (1.0, "imagenet", "squash", "bilinear"),
    "vit_base_patch16_rope_224": (0.9, "imagenet", "center"),
    "vit_base_patch16_rope_ape_224": (0.9, "imagenet", "center"),
    "vit_base_patch16_rope_mixed_224": (0.9, "imagenet", "center"),
    "vit_base_patch16_rope_mixed_ape_224": (0.9, "imagenet", "center"),
    "vit_base_patch16_rope_reg1_gap_256": (0.95, "half", "center"),
    "vit_betwixt_patch16_rope_reg4_gap_256": (0.95, "openai", "center"),
    "vit_giant_patch16_lingbot": (1.0, "imagenet", "squash", "bilinear"),
    "vit_huge_plus_patch16_dinov3": (1.0, "imagenet", "center"),
    "vit_huge_plus_patch16_dinov3_qkvb": (1.0, "imagenet", "center"),
    "vit_large_patch16_dinov3": (1.0, "imagenet", "center"),
    "vit_large_patch16_dinov3_qkvb": (1.0, "imagenet", "center"),
    "vit_large_patch16_lingbot": (1.0, "imagenet", "squash", "bilinear"),
    "vit_large_patch16_rope_224": (0.9, "imagenet", "center"),
    "vit_large_patch16_rope_ape_224": (0.9, "imagenet", "center"),
    "vit_large_patch16_rope_mixed_224": (0.9, "imagenet", "center"),
    "vit_large_patch16_rope_mixed_ape_224": (0.9, "imagenet", "center"),
    "vit_medium_patch16_rope_reg1_gap_256": (0.95, "half", "center"),
    "vit_mediumd_patch16_rope_reg1_gap_256": (0.95, "half", "center"),
    "vit_pe_core_base_patch16_224": (1.0, "half", "center"),
    "vit_pe_core_gigantic_patch14_448": (1.0, "half", "center"),
    "vit_pe_core_large_patch14_336": (1.0, "half", "center"),
    "vit_pe_core_small_patch16_384": (1.0, "half", "center"),
    "vit_pe_core_tiny_patch16_384": (1.0, "half", "center"),
    "vit_pe_lang_gigantic_patch14_448": (1.0, "half", "center"),
    "vit_pe_lang_large_patch14_448": (1.0, "half", "center"),
    "vit_pe_spatial_base_patch16_512": (1.0, "half", "center"),
    "vit_pe_spatial_gigantic_patch14_448": (1.0, "half", "center"),
    "vit_pe_spatial_large_patch14_448": (1.0, "half", "center"),
    "vit_pe_spatial_small_patch16_512": (1.0, "half", "center"),
    "vit_pe_spatial_tiny_patch16_512": (1.0, "half", "center"),
    "vit_small_patch16_dinov3": (1.0, "imagenet", "center"),
    "vit_small_patch16_dinov3_qkvb": (1.0, "imagenet", "center"),
    "vit_small_patch16_lingbot": (1.0, "imagenet", "squash", "bilinear"),
    "vit_small_patch16_rope_224": (0.9, "imagenet", "center"),
    "vit_small_patch16_rope_ape_224": (0.9, "imagenet", "center"),
    "vit_small_patch16_rope_mixed_224": (0.9, "imagenet", "center"),
    "vit_small_patch16_rope_mixed_ape_224": (0.9, "imagenet", "center"),
    "vit_small_plus_patch16_dinov3": (1.0, "imagenet", "center"),
    "vit_small_plus_patch16_dinov3_qkvb": (1.0, "imagenet", "center"),
    "vit_tiny_patch16_dinov3_qkvb": (1.0, "imagenet", "center"),
}


def timm_eval_config(name):
    """timm's default pretrained_cfg values of the eval transform of `name`, or None for names
    without one here (the paper's ViTs: their recipes and checkpoints say theirs)."""
    values = TIMM_EVAL.get(name) or TIMM_EVAL_ROPE.get(name)
    if values is None:
        return None
    crop_pct, means, crop_mode, interpolation = (values + ("bicubic",))[:4]
    mean, std = MEANS_STDS[means]
    return {"interpolation": interpolation, "crop_pct": crop_pct, "crop_mode": crop_mode, "mean": list(mean),
            "std": list(std)}


def name_hint(name):
    """The preprocessing hint (see `checkpoint.preprocess_for_checkpoint`) of timm's default
    pretrained_cfg of the model `name`, or None for a name timm gives none here."""
    config = timm_eval_config(name) if name is not None else None
    if config is None:
        return None
    return {"pipeline": "timm", "config": config, "source": f"timm's default pretrained_cfg of {name}"}
