"""Publishing a model for the PyTorch world: a timm Hub folder (as timm 1.0's ``save_for_hf``
writes one) or a transformers ``ViTForImageClassification`` folder.

``save_pretrained(model, directory, format="timm")`` writes

- ``config.json``: ``architecture`` (timm's registered name the model is built on), ``num_classes``,
  ``num_features``, ``global_pool``, ``model_args`` (every `ViTConfig` field that differs from the
  architecture's, as timm's argument), ``label_names`` (``model.class_names``) and
  ``pretrained_cfg`` (the model's eval preprocessing as timm's keys: input_size, interpolation,
  crop_pct, crop_mode, mean, std; only keys timm's ``PretrainedCfg`` knows);
- ``model.safetensors``: timm's names (the inverse of timm.py's `RENAMES`) in PyTorch's layout
  (Linear weights [out, in]);
- ``README.md``: a model card (the model, where it comes from, how to load it).

``timm.create_model("local-dir:DIR", pretrained=True)`` loads it strictly and computes this
project's logits, and so does transformers' ``AutoModelForImageClassification`` (its timm
wrapper). ``format="huggingface"`` writes config.json, preprocessor_config.json and
model.safetensors (q, k, v apart; the readers' names, hf_*.py, inverted) for the model's
transformers class (`hf_family`): ``ViTForImageClassification`` (model_type ``vit``, ViT's, DeiT's
or Bit's image processor) for the plain ViT reading the class token; ``Dinov2Model`` /
``Dinov2WithRegistersModel`` (layer scale, SwiGLU as ``use_swiglu_ffn``, no head; the registers'
class token written back unfolded: its position row zero, the class token ours, which holds the
row) with BitImageProcessor; ``CLIPVisionModel`` (no head) or ``CLIPVisionModelWithProjection``
(a head without bias: the visual projection) with CLIPImageProcessor; ``SiglipVisionModel`` (the
MAP head, no class token) with SiglipImageProcessor (a square resize, no crop);
``DeiTForImageClassificationWithTeacher`` (the distilled DeiT) with DeiTImageProcessor.
tests/test_publish.py checks both against the libraries' own reading, recorded in
tests/fixtures/publish_reference.*. What the target cannot express (timm: a 2-D position
embedding, a q.k scale other than head_dim^-0.5, a LayerNorm epsilon or ResNet its architecture
does not have, ...; transformers: any pooling but the class token's, today's tokens and options)
is refused in one WeightsError before anything is written. The folder is written into a
temporary folder beside the target and moved into place at the end: a failure leaves nothing.
"""
import dataclasses
import json
import logging
import math
import os
import re
import shutil
import tempfile

import numpy as np

from ..errors import WeightsError
from .family import POSITION_EMBEDDING
from .reading import to_numpy

logger = logging.getLogger("paddle_vit")
FORMATS = ("timm", "huggingface")
WEIGHTS_FILE = "model.safetensors"
PROCESSOR_FILE = "preprocessor_config.json"
CONFIG_FILE = "config.json"
CARD_FILE = "README.md"
# registered names that are not timm's (timm has no such architecture)
NOT_TIMM = ("vit_walkthrough",)
# ViTConfig fields -> timm VisionTransformer arguments, one to one
TIMM_ARGS = {"image_size": "img_size", "patch_size": "patch_size", "in_channels": "in_chans",
             "embed_dim": "embed_dim", "depth": "depth", "num_heads": "num_heads", "mlp_ratio": "mlp_ratio",
             "qkv_bias": "qkv_bias", "class_token": "class_token", "register_tokens": "reg_tokens",
             "no_embed_class": "no_embed_class", "pre_norm": "pre_norm", "layer_scale": "init_values",
             "dynamic_img_size": "dynamic_img_size", "dynamic_img_pad": "dynamic_img_pad"}
# the class count is config.json's num_classes and pretrained_cfg's (which timm builds the head
# with), not a model_args entry: transformers' TimmWrapper passes num_classes itself and fails on a
# second one
TIMM_ACT_LAYERS = {"exact": "gelu", "tanh": "gelu_tanh", "quick": "quick_gelu"}
TIMM_GLOBAL_POOLS = {"cls": "token", "mean": "avg", "map": "map", "walkthrough": "avg"}
# fields timm's architecture fixes (its entrypoint builds them; no JSON argument changes them)
FIXED_FIELDS = ("backbone_layers", "backbone_width", "mlp", "distilled", "layer_norm_epsilon")
# our names -> timm's (the inverse of timm.py's RENAMES); the stem-only hybrid's is decided per model
INVERSE_RENAMES = [
    (r"patch_embed\.class_token", "cls_token"),
    (re.escape(POSITION_EMBEDDING), "pos_embed"),
    (r"patch_embed\.register_tokens", "reg_token"),
    (r"patch_embed\.distillation_token", "dist_token"),
    (r"patch_embed\.patch_embedding\.(weight|bias)", r"patch_embed.proj.\1"),
    (r"patch_embed\.backbone\.(.+)", r"patch_embed.backbone.\1"),
    (r"encoder\.layers\.(\d+)\.(.+)", r"blocks.\1.\2"),
    (r"encoder\.norm_pre\.(weight|bias)", r"norm_pre.\1"),
    (r"encoder\.norm\.(weight|bias)", r"norm.\1"),
    (r"(attn_pool\..+|fc_norm\.(?:weight|bias)|head_dist\.(?:weight|bias)|head\.(?:weight|bias))", r"\1"),
]


@dataclasses.dataclass
class TimmExport:
    """What goes into a timm Hub folder: config.json's values and the tensors in timm's names
    (or, `format` "huggingface", a transformers folder: `processor` is preprocessor_config.json)."""
    config: dict
    tensors: dict
    architecture: str
    preprocess_note: str
    preprocess_exact: bool
    format: str = "timm"
    processor: dict = None


def save_pretrained(model, directory, format="timm", overwrite=False, *, name=None, preprocess=None,
                    class_names=None, source=None, run=None):
    """Write `model` (a `ViT`) as a `format` folder into `directory`; returns the directory.

    format: "timm" (a timm Hub folder) or "huggingface" (a folder for the model's transformers
        class: config.json, preprocessor_config.json, model.safetensors; ViTForImageClassification,
        Dinov2Model, Dinov2WithRegistersModel, CLIPVisionModel[WithProjection], SiglipVisionModel,
        DeiTForImageClassificationWithTeacher; what the class or its image processor cannot
        compute refused naming --to timm).
    name: the registered name the model was built as (else the registered timm name whose
        architecture it has); preprocess: the eval `Preprocess` to publish (default
        ``model.preprocess``, else timm's default for the name, else this project's recipe
        defaults); class_names: default ``model.class_names``; source, run: for the model card
        (the weights it was read from; a training run's {"folder", "data", "epochs",
        "best_top1"}).
    An existing non-empty `directory` is refused unless `overwrite`; nothing is left half
    written when anything fails."""
    if format not in FORMATS:
        raise WeightsError(f"cannot publish as {format!r}: the formats are {', '.join(FORMATS)}")
    directory = os.path.abspath(os.path.expanduser(os.fspath(directory)))
    check_target(directory, overwrite)
    if format == "huggingface":
        export = hf_export(model, name=name, preprocess=preprocess, class_names=class_names)
    else:
        export = timm_export(model, name=name, preprocess=preprocess, class_names=class_names)
    card = model_card(export, model, source, run)
    _write_folder(directory, export, card)
    if not export.preprocess_exact:
        logger.warning("preprocessing: %s", export.preprocess_note)
    return directory


def check_target(directory, overwrite):
    if os.path.lexists(directory) and not os.path.isdir(directory):
        raise WeightsError(f"--out {directory} exists and is not a folder")
    if os.path.isdir(directory) and os.listdir(directory) and not overwrite:
        raise WeightsError(f"--out {directory} exists and is not empty: choose a new folder, or --overwrite to "
                           f"replace what it holds")


# ---- config.json ------------------------------------------------------------------------------

def _registered():
    from ..models import get_model_config, list_models
    return {name: get_model_config(name) for name in list_models() if name not in NOT_TIMM}


def _differences(config, registered):
    """{timm argument: value} of `config` against the architecture `registered`, and the list of
    what timm cannot express."""
    args, refusals = {}, []
    for field in FIXED_FIELDS:
        ours, theirs = getattr(config, field), getattr(registered, field)
        if ours != theirs and not (isinstance(ours, float) and math.isclose(ours, theirs, rel_tol=1e-9)):
            refusals.append(f"{field} {ours!r} (the architecture has {theirs!r}; timm has no argument for it)")
    for field, argument in TIMM_ARGS.items():
        ours, theirs = getattr(config, field), getattr(registered, field)
        if ours != theirs:
            if field == "image_size":
                ours = [ours, ours]
            elif field == "register_tokens":
                ours = int(ours)
            args[argument] = ours
    if config.gelu != registered.gelu:
        args["act_layer"] = TIMM_ACT_LAYERS[config.gelu]
    if config.position_embedding != registered.position_embedding:
        if config.position_embedding in ("learned", "none"):
            args["pos_embed"] = "learn" if config.position_embedding == "learned" else "none"
        else:
            refusals.append(f"position_embedding {config.position_embedding!r} (timm's VisionTransformer learns a "
                            f"1-D one, or none)")
    pool = TIMM_GLOBAL_POOLS.get(config.pool)
    if pool is None:
        refusals.append(f"pool {config.pool!r} (timm pools by token, avg or map)")
    else:
        theirs_pool = TIMM_GLOBAL_POOLS.get(registered.pool)
        if pool != theirs_pool or config.pool != registered.pool:
            args["global_pool"] = pool
        if config.pool == "walkthrough":
            args["pool_include_prefix"] = True  # every token: timm's avg pools the patch tokens only
        timm_fc_norm = (pool == "avg") if registered.fc_norm is None else registered.fc_norm
        if config.uses_fc_norm != timm_fc_norm or "global_pool" in args and config.fc_norm is not None:
            args["fc_norm"] = config.uses_fc_norm
    if config.qk_scale is not None and not math.isclose(config.qk_scale, (config.embed_dim // config.num_heads) ** -0.5,
                                                        rel_tol=1e-6):
        refusals.append(f"qk_scale {config.qk_scale!r} (timm scales q.k by head_dim^-0.5)")
    if config.representation_size:
        refusals.append(f"representation_size {config.representation_size} (timm 1.0's VisionTransformer has no "
                        f"pre-logits layer)")
    if config.is_hybrid and config.backbone_style != "timm":
        refusals.append(f"backbone_style {config.backbone_style!r} (timm's ResNet-v2 standardises its weights "
                        f"as backbone_style 'timm')")
    if config.dynamic_img_size and config.pos_embed_resample not in (None, "bicubic_antialias"):
        refusals.append(f"pos_embed_resample {config.pos_embed_resample!r} (timm resamples bicubic with antialias)")
    return args, refusals


def timm_architecture(config, name=None):
    """(timm's architecture name, model_args) for a `ViTConfig`: `name` when it is a registered
    timm name whose fixed parts (ResNet, MLP, distillation, epsilon) the model has, else the
    registered timm name that needs the fewest model_args. A WeightsError says in one line what
    timm cannot express."""
    registered = _registered()
    if name in registered:
        args, refusals = _differences(config, registered[name])
        if not refusals:
            return name, args
    best = None
    for candidate, architecture in registered.items():
        args, refusals = _differences(config, architecture)
        if not refusals and (best is None or len(args) < len(best[1])):
            best = (candidate, args)
    if best is not None:
        return best
    base = registered.get(name) or registered[_closest(config, registered)]
    _, refusals = _differences(config, base)
    raise WeightsError(f"timm cannot express this model: {'; '.join(refusals)}; publish a model timm builds "
                       f"(paddle_vit.list_models() names timm's architectures)")


def _closest(config, registered):
    """The registered name with the fewest refusals, for the error message."""
    return min(registered, key=lambda candidate: len(_differences(config, registered[candidate])[1]))


def timm_pretrained_cfg(preprocess, config, num_classes):
    """(timm's pretrained_cfg, a note on how exact it is, whether it is exact) of a `Preprocess`."""
    if preprocess.image_size != config.image_size:
        raise WeightsError(f"the preprocessing makes {preprocess.image_size} px images, the model takes "
                           f"{config.image_size}")
    crop_pct = float(preprocess.eval_crop_pct)
    mode = {"shorter_side": "center", "both_sides": "squash", "longer_side": "border"}.get(preprocess.resize_mode)
    if mode is None:
        raise WeightsError(f"the preprocessing resizes {preprocess.resize_mode!r}, which timm's eval transform does "
                           f"not (center, squash or border crop)")
    size, resize = preprocess.image_size, preprocess.resize_size
    if resize != math.floor(size / crop_pct):  # a crop_pct whose timm scale_size = floor(S / crop_pct) is `resize`
        crop_pct = size / resize if math.floor(size / (size / resize)) == resize else size / (resize + 0.5)
    differences = [] if preprocess.origin.startswith("timm pretrained_cfg") else _timm_differences(preprocess, mode)
    exact = not differences
    note = ("timm's eval transform computes exactly this model's preprocessing" if exact else
            f"timm's eval transform is the nearest to this model's preprocessing ({preprocess.origin or 'its own'}), "
            f"not the same: {'; '.join(differences)}")
    cfg = {
        "custom_load": False,
        "input_size": [config.in_channels, config.image_size, config.image_size],
        "fixed_input_size": not config.dynamic_img_size,
        "interpolation": preprocess.interpolation,
        "crop_pct": crop_pct,
        "crop_mode": mode,
        "mean": [float(v) for v in preprocess.mean],
        "std": [float(v) for v in preprocess.std],
        "num_classes": num_classes,
        "pool_size": None,
        "first_conv": _first_conv(config),
        "classifier": ["head", "head_dist"] if config.distilled else "head",
    }
    return cfg, note, exact


def _timm_differences(preprocess, mode):
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


def _first_conv(config):
    if not config.is_hybrid:
        return "patch_embed.proj"
    return "patch_embed.backbone.conv" if not config.backbone_layers else "patch_embed.backbone.stem.conv"


def default_preprocess(model, name):
    """``model.preprocess``, else timm's default pretrained_cfg of `name`, else the recipe defaults."""
    from ..config import DataConfig
    from ..data.preprocessing import Preprocess, preprocess_for_checkpoint
    from ..models import timm_eval_config

    own = getattr(model, "preprocess", None)
    if own is not None:
        return own
    timm_config = timm_eval_config(name) if name else None
    if timm_config is not None:
        return preprocess_for_checkpoint({"pipeline": "timm", "config": timm_config}, model.config.image_size,
                                         f"timm's default pretrained_cfg of {name}")
    return Preprocess.from_config(DataConfig(), model.config.image_size, origin="this project's recipe defaults")


def timm_tensors(model_or_state, config):
    """{timm name: numpy array in PyTorch's layout} of a model's state dict."""
    state = model_or_state.state_dict() if hasattr(model_or_state, "state_dict") else model_or_state
    stem_only = config.is_hybrid and not config.backbone_layers
    tensors = {}
    for ours, value in state.items():
        for pattern, replacement in INVERSE_RENAMES:
            if re.fullmatch(pattern, ours):
                theirs = re.sub(pattern, replacement, ours)
                break
        else:
            raise WeightsError(f"{ours!r} has no name in timm's VisionTransformer; timm cannot express this model")
        if stem_only:
            theirs = re.sub(r"^patch_embed\.backbone\.stem\.", "patch_embed.backbone.", theirs)
        array = to_numpy(value)
        if array is None:
            raise WeightsError(f"cannot publish {ours!r}: a {type(value).__name__} is not an array")
        if theirs.endswith("weight") and array.ndim == 2:  # a Linear: Paddle's [in, out] -> PyTorch's [out, in]
            array = array.T
        if theirs in tensors:
            raise WeightsError(f"two tensors of the model map to timm's {theirs}")
        tensors[theirs] = np.ascontiguousarray(array, dtype=array.dtype)
    return tensors


def timm_export(model, name=None, preprocess=None, class_names=None):
    """The `TimmExport` of a `ViT` (a WeightsError naming what timm cannot express)."""
    config = model.config
    architecture, model_args = timm_architecture(config, name)
    preprocess = preprocess if preprocess is not None else default_preprocess(model, name or architecture)
    pretrained_cfg, note, exact = timm_pretrained_cfg(preprocess, config, config.num_classes)
    class_names = class_names if class_names is not None else getattr(model, "class_names", None)
    values = {"architecture": architecture, "num_classes": config.num_classes,
              "num_features": config.representation_size or config.embed_dim,
              "global_pool": TIMM_GLOBAL_POOLS[config.pool]}
    if class_names:
        if len(class_names) != config.num_classes:
            raise WeightsError(f"{len(class_names)} class names for a head of {config.num_classes} classes")
        values["label_names"] = [str(label) for label in class_names]
    if model_args:
        values["model_args"] = model_args
    values["pretrained_cfg"] = pretrained_cfg
    return TimmExport(values, timm_tensors(model, config), architecture, note, exact)


# ---- transformers (ViTForImageClassification) ---------------------------------------------------

HF_HIDDEN_ACTS = {"exact": "gelu", "tanh": "gelu_pytorch_tanh", "quick": "quick_gelu"}
HF_RESAMPLE = {"nearest": 0, "bilinear": 2, "bicubic": 3}
# ViTConfig fields ViTForImageClassification computes at one value only: (value, what it does instead)
HF_FIXED = {
    "pool": ("cls", "it reads the class token (no mean, all-token average or attention pooling)"),
    "class_token": (True, "it has a class token"),
    "register_tokens": (0, "it has no register tokens"),
    "distilled": (False, "it has no distillation token (DeiT's own class does)"),
    "no_embed_class": (False, "its position embedding covers the class token"),
    "pre_norm": (False, "it has no LayerNorm before the layers"),
    "layer_scale": (None, "it has no layer scale"),
    "mlp": ("standard", "its MLP is Linear, GELU, Linear"),
    "position_embedding": ("learned", "it learns a 1-D position embedding"),
    "representation_size": (None, "ViTForImageClassification has no pre-logits layer"),
    "backbone_layers": (None, "it has no ResNet"),
    "dynamic_img_size": (False, "it takes other sizes only with interpolate_pos_encoding=True"),
}
# our names -> transformers' (q, k and v are split from qkv apart)
HF_RENAMES = [
    (r"patch_embed\.class_token", "vit.embeddings.cls_token"),
    (re.escape(POSITION_EMBEDDING), "vit.embeddings.position_embeddings"),
    (r"patch_embed\.patch_embedding\.(weight|bias)", r"vit.embeddings.patch_embeddings.projection.\1"),
    (r"encoder\.layers\.(\d+)\.norm1\.(weight|bias)", r"vit.encoder.layer.\1.layernorm_before.\2"),
    (r"encoder\.layers\.(\d+)\.norm2\.(weight|bias)", r"vit.encoder.layer.\1.layernorm_after.\2"),
    (r"encoder\.layers\.(\d+)\.attn\.proj\.(weight|bias)", r"vit.encoder.layer.\1.attention.output.dense.\2"),
    (r"encoder\.layers\.(\d+)\.mlp\.fc1\.(weight|bias)", r"vit.encoder.layer.\1.intermediate.dense.\2"),
    (r"encoder\.layers\.(\d+)\.mlp\.fc2\.(weight|bias)", r"vit.encoder.layer.\1.output.dense.\2"),
    (r"encoder\.norm\.(weight|bias)", r"vit.layernorm.\1"),
    (r"head\.(weight|bias)", r"classifier.\1"),
]


def hf_refusals(config):
    """What transformers' ViTForImageClassification cannot compute of a `ViTConfig` (phrases)."""
    refusals = []
    for field, (value, why) in HF_FIXED.items():
        if getattr(config, field) != value:
            refusals.append(f"{field} {getattr(config, field)!r} ({why})")
    if config.uses_fc_norm:
        refusals.append("a LayerNorm after pooling (fc_norm): it normalises before reading the class token")
    if config.qk_scale is not None and not math.isclose(config.qk_scale, (config.embed_dim // config.num_heads) ** -0.5,
                                                        rel_tol=1e-6):
        refusals.append(f"qk_scale {config.qk_scale!r} (it scales q.k by head_dim^-0.5)")
    if config.num_classes == 0:
        refusals.append("no head (num_classes 0): ViTForImageClassification classifies")
    return refusals


def hf_preprocessor(preprocess, config):
    """(preprocessor_config.json, note, exact) of a `Preprocess` for transformers' PIL image processors:
    ViTImageProcessor (a plain resize), DeiTImageProcessor (a square resize then a centre crop),
    BitImageProcessor (the shorter side, then a centre crop)."""
    size, resize = preprocess.image_size, preprocess.resize_size
    if size != config.image_size:
        raise WeightsError(f"the preprocessing makes {size} px images, the model takes {config.image_size}")
    if preprocess.interpolation not in HF_RESAMPLE:
        raise WeightsError(f"interpolation {preprocess.interpolation!r} has no transformers resample")
    common = {"do_resize": True, "resample": HF_RESAMPLE[preprocess.interpolation], "do_rescale": True,
              "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [float(v) for v in preprocess.mean],
              "image_std": [float(v) for v in preprocess.std]}
    if preprocess.resize_mode == "both_sides" and resize == size:
        values = dict(image_processor_type="ViTImageProcessor", size={"height": size, "width": size}, **common)
    elif preprocess.resize_mode == "both_sides":
        values = dict(image_processor_type="DeiTImageProcessor", size={"height": resize, "width": resize},
                      do_center_crop=True, crop_size={"height": size, "width": size}, **common)
    else:
        values = dict(image_processor_type="BitImageProcessor", size={"shortest_edge": resize}, do_center_crop=True,
                      crop_size={"height": size, "width": size}, do_convert_rgb=True, **common)
    exact = preprocess.origin.startswith("Hugging Face image processor")
    note = (f"transformers' {values['image_processor_type']} computes exactly this model's preprocessing" if exact
            else f"transformers' {values['image_processor_type']} (PIL backend) is the nearest to this model's "
                 f"preprocessing ({preprocess.origin or 'its own'}): the same sizes, interpolation, mean and std; it "
                 f"rescales in float64 and crops at (h - c) // 2")
    return values, note, exact


def hf_tensors(model, config):
    """{transformers name: numpy array in PyTorch's layout} of a plain ViT's state dict."""
    tensors = {}
    width = config.embed_dim
    for ours, value in model.state_dict().items():
        array = to_numpy(value)
        qkv = re.fullmatch(r"encoder\.layers\.(\d+)\.attn\.qkv\.(weight|bias)", ours)
        if qkv:
            layer, role = qkv.groups()
            parts = array.T if role == "weight" else array  # [3 D, D] (q | k | v) or [3 D]
            for index, part in enumerate(("query", "key", "value")):
                tensors[f"vit.encoder.layer.{layer}.attention.attention.{part}.{role}"] = np.ascontiguousarray(
                    parts[index * width:(index + 1) * width])
            continue
        for pattern, replacement in HF_RENAMES:
            if re.fullmatch(pattern, ours):
                theirs = re.sub(pattern, replacement, ours)
                break
        else:
            raise WeightsError(f"{ours!r} has no name in transformers' ViTForImageClassification: publish with "
                               f"--to timm")
        if theirs.endswith("weight") and array.ndim == 2:
            array = array.T
        tensors[theirs] = np.ascontiguousarray(array)
    return tensors


def hf_export(model, name=None, preprocess=None, class_names=None):
    """The export of a `ViT` as its transformers class (`hf_family`: ViTForImageClassification, or
    DINOv2's, CLIP's, SigLIP's, the distilled DeiT's); a WeightsError naming what the class cannot
    compute, and --to timm."""
    config = model.config
    family = hf_family(config)
    if family == "clip" and config.num_classes:
        family = "clip_projection"
    if family != "vit":
        return _family_export(model, family, name, preprocess, class_names)
    refusals = hf_refusals(config)
    if refusals:
        raise WeightsError(f"transformers' ViTForImageClassification cannot compute this model: "
                           f"{'; '.join(refusals)}; publish it with --to timm")
    preprocess = preprocess if preprocess is not None else default_preprocess(model, name)
    processor, note, exact = hf_preprocessor(preprocess, config)
    class_names = class_names if class_names is not None else getattr(model, "class_names", None)
    if class_names and len(class_names) != config.num_classes:
        raise WeightsError(f"{len(class_names)} class names for a head of {config.num_classes} classes")
    labels = [str(label) for label in class_names] if class_names else [f"LABEL_{i}" for i in range(config.num_classes)]
    values = {
        "architectures": ["ViTForImageClassification"], "model_type": "vit",
        "hidden_size": config.embed_dim, "num_hidden_layers": config.depth,
        "num_attention_heads": config.num_heads, "intermediate_size": int(config.embed_dim * config.mlp_ratio),
        "hidden_act": HF_HIDDEN_ACTS[config.gelu], "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
        "initializer_range": 0.02, "layer_norm_eps": config.layer_norm_epsilon, "image_size": config.image_size,
        "patch_size": config.patch_size, "num_channels": config.in_channels, "qkv_bias": config.qkv_bias,
        "encoder_stride": config.patch_size,
        "id2label": {str(index): label for index, label in enumerate(labels)},
        "label2id": {label: index for index, label in enumerate(labels)},
        "dtype": "float32",
    }
    return TimmExport(values, hf_tensors(model, config), "ViTForImageClassification", note, exact,
                      format="huggingface", processor=processor)


def _family_export(model, family, name, preprocess, class_names):
    config = model.config
    architecture = HF_CLASSES[family][0]
    refusals = family_refusals(model, family)
    if refusals:
        raise WeightsError(f"transformers' {architecture} cannot compute this model: {'; '.join(refusals)}; "
                           f"publish it with --to timm")
    preprocess = preprocess if preprocess is not None else default_preprocess(model, name)
    processor, note, exact = family_processor(preprocess, config, family)
    class_names = class_names if class_names is not None else getattr(model, "class_names", None)
    if family != "deit":
        class_names = None  # an embedding (CLIP's projection) or features: no labels
    elif class_names and len(class_names) != config.num_classes:
        raise WeightsError(f"{len(class_names)} class names for a head of {config.num_classes} classes")
    values = family_config(model, family, class_names)
    return TimmExport(values, family_tensors(model, family), architecture, note, exact, format="huggingface",
                      processor=processor)


# ---- transformers: today's families (DINOv2, CLIP, SigLIP, distilled DeiT) -----------------------

# the transformers class each family goes out as, its model_type and image processor
HF_CLASSES = {
    "vit": ("ViTForImageClassification", "vit", None),
    "deit": ("DeiTForImageClassificationWithTeacher", "deit", "DeiTImageProcessor"),
    "dinov2": ("Dinov2Model", "dinov2", "BitImageProcessor"),
    "dinov2_with_registers": ("Dinov2WithRegistersModel", "dinov2_with_registers", "BitImageProcessor"),
    "clip": ("CLIPVisionModel", "clip_vision_model", "CLIPImageProcessor"),
    "clip_projection": ("CLIPVisionModelWithProjection", "clip_vision_model", "CLIPImageProcessor"),
    "siglip": ("SiglipVisionModel", "siglip_vision_model", "SiglipImageProcessor"),
}


def hf_family(config):
    """Which transformers class a `ViTConfig` goes out as (a key of HF_CLASSES): the distilled
    DeiT, SigLIP (no class token, the MAP head), CLIP (a LayerNorm before the layers), DINOv2
    (layer scale or the SwiGLU MLP; with registers its own class), else the plain ViT."""
    if config.distilled:
        return "deit"
    if not config.class_token and config.pool == "map":
        return "siglip"
    if config.pre_norm:
        return "clip"
    if config.layer_scale is not None or config.mlp == "swiglu" or config.register_tokens:
        return "dinov2_with_registers" if config.register_tokens else "dinov2"
    return "vit"


def _common_refusals(config, why):
    refusals = []
    if config.position_embedding != "learned":
        refusals.append(f"position_embedding {config.position_embedding!r} ({why} learns a 1-D position embedding)")
    if config.representation_size:
        refusals.append(f"representation_size {config.representation_size} ({why} has no pre-logits layer)")
    if config.backbone_layers is not None or config.is_hybrid:
        refusals.append(f"a ResNet backbone ({why} has none)")
    if config.dynamic_img_size:
        refusals.append(f"dynamic_img_size True ({why} takes other sizes only with interpolate_pos_encoding)")
    if config.qk_scale is not None and not math.isclose(config.qk_scale, (config.embed_dim // config.num_heads) ** -0.5,
                                                        rel_tol=1e-6):
        refusals.append(f"qk_scale {config.qk_scale!r} ({why} scales q.k by head_dim^-0.5)")
    if config.uses_fc_norm:
        refusals.append(f"a LayerNorm after pooling (fc_norm): {why} normalises before pooling")
    return refusals


def _expect(config, field, value, why, refusals):
    if getattr(config, field) != value:
        refusals.append(f"{field} {getattr(config, field)!r} ({why})")


def family_refusals(model, family):
    """What transformers' class of `family` cannot compute of `model` (phrases)."""
    config = model.config
    cls = HF_CLASSES[family][0]
    refusals = _common_refusals(config, cls)
    if family == "deit":
        for field, value, why in (("class_token", True, "it has a class token"),
                                  ("register_tokens", 0, "it has no register tokens"),
                                  ("no_embed_class", False, "its position embedding covers both tokens"),
                                  ("pre_norm", False, "it has no LayerNorm before the layers"),
                                  ("layer_scale", None, "it has no layer scale"),
                                  ("mlp", "standard", "its MLP is Linear, GELU, Linear"),
                                  ("pool", "cls", "its heads read the class and distillation tokens")):
            _expect(config, field, value, why, refusals)
        if config.num_classes == 0:
            refusals.append("no head (num_classes 0): DeiTForImageClassificationWithTeacher classifies")
    elif family in ("dinov2", "dinov2_with_registers"):
        for field, value, why in (("class_token", True, "it has a class token"),
                                  ("pre_norm", False, "it has no LayerNorm before the layers"),
                                  ("pool", "cls", "its pooler_output is the class token")):
            _expect(config, field, value, why, refusals)
        if config.layer_scale is None:
            refusals.append("no layer scale (Dinov2Model scales both branches of every layer)")
        if config.register_tokens and not config.no_embed_class:
            refusals.append("register tokens with position embedding rows (Dinov2WithRegistersModel inserts the "
                            "registers after adding the position embedding: no_embed_class)")
        if not config.register_tokens and config.no_embed_class:
            refusals.append("no_embed_class True without registers (Dinov2Model's position embedding covers the "
                            "class token)")
        if config.mlp not in ("standard", "swiglu"):
            refusals.append(f"mlp {config.mlp!r} (Dinov2Model has Linear, GELU, Linear or SwiGLU)")
        elif _dinov2_ratio_refusal(model):
            refusals.append(_dinov2_ratio_refusal(model))
        if config.num_classes:
            refusals.append(f"a head of {config.num_classes} classes (Dinov2Model has none; "
                            f"Dinov2ForImageClassification reads the class token and the patch mean side by side)")
    elif family in ("clip", "clip_projection"):
        for field, value, why in (("class_token", True, "it has a class embedding"),
                                  ("register_tokens", 0, "it has no register tokens"),
                                  ("no_embed_class", False, "its position embedding covers the class token"),
                                  ("layer_scale", None, "it has no layer scale"),
                                  ("mlp", "standard", "its MLP is Linear, GELU, Linear"),
                                  ("pool", "cls", "its pooler_output is the class token")):
            _expect(config, field, value, why, refusals)
        state = model.state_dict()
        bias = state.get("patch_embed.patch_embedding.bias")
        if bias is not None and np.any(to_numpy(bias)):
            refusals.append("a patch projection bias (CLIP's patch embedding has none)")
        if config.num_classes and not _head_is_projection(model):
            refusals.append(f"a classifier head of {config.num_classes} classes with a bias (CLIPVisionModelWith"
                            f"Projection's visual_projection has no bias; CLIPForImageClassification pools the "
                            f"patch tokens)")
    elif family == "siglip":
        for field, value, why in (("register_tokens", 0, "it has no register tokens"),
                                  ("pre_norm", False, "it has no LayerNorm before the layers"),
                                  ("layer_scale", None, "it has no layer scale"),
                                  ("mlp", "standard", "its MLP is Linear, GELU, Linear")):
            _expect(config, field, value, why, refusals)
        if config.num_classes:
            refusals.append(f"a head of {config.num_classes} classes (SiglipVisionModel has none; "
                            f"SiglipForImageClassification averages the tokens)")
    return refusals


def _head_is_projection(model):
    """Whether the head is a projection without bias (CLIP's visual_projection): a zero bias."""
    bias = model.state_dict().get("head.bias")
    return bias is not None and not np.any(to_numpy(bias))


def _dinov2_mlp_ratio(model):
    """transformers' Dinov2Config mlp_ratio whose SwiGLU has this model's width, or None."""
    config = model.config
    width = config.embed_dim
    hidden = to_numpy(model.state_dict()["encoder.layers.0.mlp.fc1.weight"]).shape[1] // 2  # Paddle [in, out]

    def swiglu(ratio):
        return (int(int(width * ratio) * 2 / 3) + 7) // 8 * 8

    for ratio in range(1, 2 * hidden // max(width, 1) + 3):  # Dinov2Config's mlp_ratio is an integer
        if swiglu(ratio) == hidden:
            return ratio
    return None


def _dinov2_ratio_refusal(model):
    """Why Dinov2Config's integer mlp_ratio cannot make this model's MLP width, or None."""
    config = model.config
    if config.mlp == "swiglu":
        if _dinov2_mlp_ratio(model) is None:
            return ("a SwiGLU width transformers' Dinov2SwiGLUFFN cannot make ((int(2 / 3 x D x mlp_ratio) + 7) // 8 "
                    "x 8, mlp_ratio an integer)")
        return None
    hidden = int(config.embed_dim * config.mlp_ratio)
    if hidden % config.embed_dim:
        return f"an MLP width {hidden} that is not a multiple of the width {config.embed_dim} (Dinov2Config's " \
               f"mlp_ratio is an integer)"
    return None


def _linear(array):
    return np.ascontiguousarray(array.T if array.ndim == 2 else array)


def _split_qkv(array, role, width):
    parts = array.T if role == "weight" else array
    return [np.ascontiguousarray(parts[index * width:(index + 1) * width]) for index in range(3)]


def family_tensors(model, family):
    """{transformers name: numpy array in PyTorch's layout} of `model` for `family`'s class."""
    config = model.config
    width = config.embed_dim
    state = {name: to_numpy(value) for name, value in model.state_dict().items()}
    tensors = {}
    if family in ("deit", "dinov2", "dinov2_with_registers"):
        root = "deit." if family == "deit" else ""
        for ours, array in state.items():
            layer = re.fullmatch(r"encoder\.layers\.(\d+)\.(.+)", ours)
            if layer:
                index, rest = layer.groups()
                block = f"{root}encoder.layer.{index}."
                qkv = re.fullmatch(r"attn\.qkv\.(weight|bias)", rest)
                if qkv:
                    for part, value in zip(("query", "key", "value"), _split_qkv(array, qkv.group(1), width)):
                        tensors[f"{block}attention.attention.{part}.{qkv.group(1)}"] = value
                    continue
                names = {"norm1": "norm1" if family != "deit" else "layernorm_before",
                         "norm2": "norm2" if family != "deit" else "layernorm_after",
                         "attn.proj": "attention.output.dense", "ls1.gamma": "layer_scale1.lambda1",
                         "ls2.gamma": "layer_scale2.lambda1"}
                if family == "deit":
                    names.update({"mlp.fc1": "intermediate.dense", "mlp.fc2": "output.dense"})
                elif config.mlp == "swiglu":
                    names.update({"mlp.fc1": "mlp.weights_in", "mlp.fc2": "mlp.weights_out"})
                else:
                    names.update({"mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"})
                match = re.fullmatch(r"(.+?)(?:\.(weight|bias))?", rest)
                stem, role = match.groups()
                if stem not in names:
                    raise WeightsError(f"{ours!r} has no name in transformers' {HF_CLASSES[family][0]}: publish "
                                       f"with --to timm")
                theirs = block + names[stem] + (f".{role}" if role else "")
                tensors[theirs] = _linear(array) if role == "weight" else np.ascontiguousarray(array)
                continue
            names = {"patch_embed.class_token": "embeddings.cls_token",
                     "patch_embed.distillation_token": "embeddings.distillation_token",
                     "patch_embed.register_tokens": "embeddings.register_tokens",
                     POSITION_EMBEDDING: "embeddings.position_embeddings",
                     "patch_embed.patch_embedding.weight": "embeddings.patch_embeddings.projection.weight",
                     "patch_embed.patch_embedding.bias": "embeddings.patch_embeddings.projection.bias",
                     "encoder.norm.weight": "layernorm.weight", "encoder.norm.bias": "layernorm.bias"}
            if ours in names:
                tensors[root + names[ours]] = np.ascontiguousarray(array)
            elif family == "deit" and ours in ("head.weight", "head.bias", "head_dist.weight", "head_dist.bias"):
                head, role = ours.split(".")
                tensors[f"{'cls' if head == 'head' else 'distillation'}_classifier.{role}"] = _linear(array)
            else:
                raise WeightsError(f"{ours!r} has no name in transformers' {HF_CLASSES[family][0]}: publish with "
                                   f"--to timm")
        if family == "dinov2_with_registers":  # our class token holds its position row (no_embed_class): unfold
            positions = tensors["embeddings.position_embeddings"]
            tensors["embeddings.position_embeddings"] = np.ascontiguousarray(
                np.concatenate([np.zeros_like(positions[:, :1]), positions], axis=1))
        if family != "deit":  # masked image modelling's token: unused by the forward, zeros so nothing is missing
            tensors["embeddings.mask_token"] = np.zeros((1, width), dtype=state[POSITION_EMBEDDING].dtype)
        if "embeddings.patch_embeddings.projection.bias" not in tensors and family != "deit" or \
                family == "deit" and "deit.embeddings.patch_embeddings.projection.bias" not in tensors:
            raise WeightsError(f"no patch projection bias: transformers' {HF_CLASSES[family][0]} has one; publish "
                               f"with --to timm")
        return tensors
    # CLIP and SigLIP: transformers' CLIP encoder layer names
    root = "vision_model." if family == "clip_projection" else ""
    for ours, array in state.items():
        layer = re.fullmatch(r"encoder\.layers\.(\d+)\.(.+)", ours)
        if layer:
            index, rest = layer.groups()
            block = f"{root}encoder.layers.{index}."
            qkv = re.fullmatch(r"attn\.qkv\.(weight|bias)", rest)
            if qkv:
                for part, value in zip("qkv", _split_qkv(array, qkv.group(1), width)):
                    tensors[f"{block}self_attn.{part}_proj.{qkv.group(1)}"] = value
                continue
            names = {"norm1": "layer_norm1", "norm2": "layer_norm2", "attn.proj": "self_attn.out_proj",
                     "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2"}
            stem, role = rest.rsplit(".", 1)
            if stem not in names:
                raise WeightsError(f"{ours!r} has no name in transformers' {HF_CLASSES[family][0]}: publish with "
                                   f"--to timm")
            tensors[block + names[stem] + "." + role] = _linear(array) if role == "weight" else np.ascontiguousarray(
                array)
            continue
        embeddings = {POSITION_EMBEDDING: ("embeddings.position_embedding.weight", lambda a: a[0]),
                      "patch_embed.patch_embedding.weight": ("embeddings.patch_embedding.weight", None),
                      "patch_embed.patch_embedding.bias": ("embeddings.patch_embedding.bias", None),
                      "patch_embed.class_token": ("embeddings.class_embedding", lambda a: a.reshape(-1)),
                      "encoder.norm_pre.weight": ("pre_layrnorm.weight", None),
                      "encoder.norm_pre.bias": ("pre_layrnorm.bias", None),
                      "encoder.norm.weight": ("post_layernorm.weight", None),
                      "encoder.norm.bias": ("post_layernorm.bias", None),
                      "attn_pool.latent": ("head.probe", None),
                      "attn_pool.proj.weight": ("head.attention.out_proj.weight", _linear),
                      "attn_pool.proj.bias": ("head.attention.out_proj.bias", None),
                      "attn_pool.norm.weight": ("head.layernorm.weight", None),
                      "attn_pool.norm.bias": ("head.layernorm.bias", None),
                      "attn_pool.mlp.fc1.weight": ("head.mlp.fc1.weight", _linear),
                      "attn_pool.mlp.fc1.bias": ("head.mlp.fc1.bias", None),
                      "attn_pool.mlp.fc2.weight": ("head.mlp.fc2.weight", _linear),
                      "attn_pool.mlp.fc2.bias": ("head.mlp.fc2.bias", None)}
        if ours in embeddings:
            theirs, how = embeddings[ours]
            if family == "clip" and ours == "patch_embed.patch_embedding.bias":
                continue  # zero (checked): CLIP's patch embedding has no bias
            tensors[root + theirs] = np.ascontiguousarray(how(array) if how else array)
        elif ours in ("attn_pool.q.weight", "attn_pool.q.bias", "attn_pool.kv.weight", "attn_pool.kv.bias"):
            continue  # stacked below into nn.MultiheadAttention's in_proj
        elif family == "clip_projection" and ours == "head.weight":
            tensors["visual_projection.weight"] = _linear(array)
        elif family == "clip_projection" and ours == "head.bias":
            continue  # zero (checked): the projection has no bias
        else:
            raise WeightsError(f"{ours!r} has no name in transformers' {HF_CLASSES[family][0]}: publish with --to timm")
    if family == "siglip":
        for role in ("weight", "bias"):
            q, kv = state[f"attn_pool.q.{role}"], state[f"attn_pool.kv.{role}"]
            stacked = np.concatenate([q.T, kv.T], axis=0) if role == "weight" else np.concatenate([q, kv])
            tensors[f"head.attention.in_proj_{role}"] = np.ascontiguousarray(stacked)
    if not config.qkv_bias:  # transformers' q, k and v always have a bias: zeros compute the same
        dtype = state[POSITION_EMBEDDING].dtype
        for index in range(config.depth):
            for part in "qkv":
                tensors[f"{root}encoder.layers.{index}.self_attn.{part}_proj.bias"] = np.zeros(width, dtype)
    return tensors


def family_processor(preprocess, config, family):
    """(preprocessor_config.json, note, exact) of the family's image processor (PIL backend), or
    a WeightsError naming what it cannot express."""
    processor_type = HF_CLASSES[family][2]
    size, resize = preprocess.image_size, preprocess.resize_size
    if size != config.image_size:
        raise WeightsError(f"the preprocessing makes {size} px images, the model takes {config.image_size}")
    if preprocess.interpolation not in HF_RESAMPLE:
        raise WeightsError(f"interpolation {preprocess.interpolation!r} has no transformers resample")
    common = {"do_resize": True, "resample": HF_RESAMPLE[preprocess.interpolation], "do_rescale": True,
              "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [float(v) for v in preprocess.mean],
              "image_std": [float(v) for v in preprocess.std]}
    mode = preprocess.resize_mode
    if processor_type in ("BitImageProcessor", "CLIPImageProcessor"):
        if mode != "shorter_side":
            raise WeightsError(f"transformers' {processor_type} resizes the shorter side then crops the centre; this "
                               f"model's preprocessing resizes {mode!r}: publish with --to timm, or give a "
                               f"shorter-side preprocessing")
        values = dict(image_processor_type=processor_type, size={"shortest_edge": resize}, do_center_crop=True,
                      crop_size={"height": size, "width": size}, do_convert_rgb=True, **common)
    elif processor_type == "DeiTImageProcessor":
        if mode != "both_sides":
            raise WeightsError(f"transformers' DeiTImageProcessor resizes both sides to a square then crops the "
                               f"centre; this model's preprocessing resizes {mode!r}: publish with --to timm, or give "
                               f"a square-resize preprocessing")
        values = dict(image_processor_type=processor_type, size={"height": resize, "width": resize},
                      do_center_crop=True, crop_size={"height": size, "width": size}, **common)
    else:  # SiglipImageProcessor: a square resize, no crop
        if mode != "both_sides" or resize != size:
            raise WeightsError(f"transformers' SiglipImageProcessor resizes both sides to the model's size without "
                               f"a crop; this model's preprocessing resizes {mode!r} to {resize} px and crops {size}: "
                               f"publish with --to timm, or give a square resize at crop_pct 1")
        values = dict(image_processor_type=processor_type, size={"height": size, "width": size}, do_convert_rgb=True,
                      **common)
    exact = preprocess.origin.startswith("Hugging Face image processor")
    note = (f"transformers' {processor_type} computes exactly this model's preprocessing" if exact
            else f"transformers' {processor_type} (PIL backend) is the nearest to this model's preprocessing "
                 f"({preprocess.origin or 'its own'}): the same sizes, interpolation, mean and std; it rescales in "
                 f"float64 and crops at (h - c) // 2")
    return values, note, exact


def family_config(model, family, class_names):
    """config.json of `family`'s transformers class."""
    config = model.config
    architecture, model_type, _ = HF_CLASSES[family]
    values = {"architectures": [architecture], "model_type": model_type, "hidden_size": config.embed_dim,
              "num_hidden_layers": config.depth, "num_attention_heads": config.num_heads,
              "hidden_act": HF_HIDDEN_ACTS[config.gelu], "layer_norm_eps": config.layer_norm_epsilon,
              "image_size": config.image_size, "patch_size": config.patch_size, "num_channels": config.in_channels,
              "initializer_range": 0.02}
    hidden = int(config.embed_dim * config.mlp_ratio)
    if family == "deit":
        values.update(intermediate_size=hidden, qkv_bias=config.qkv_bias, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0, encoder_stride=config.patch_size)
        labels = ([str(label) for label in class_names] if class_names else
                  [f"LABEL_{i}" for i in range(config.num_classes)])
        values["id2label"] = {str(index): label for index, label in enumerate(labels)}
        values["label2id"] = {label: index for index, label in enumerate(labels)}
    elif family in ("dinov2", "dinov2_with_registers"):
        ratio = (_dinov2_mlp_ratio(model) if config.mlp == "swiglu" else
                 int(config.embed_dim * config.mlp_ratio) // config.embed_dim)
        values.update(mlp_ratio=ratio, use_swiglu_ffn=config.mlp == "swiglu", qkv_bias=config.qkv_bias,
                      layerscale_value=float(config.layer_scale if config.layer_scale is not None else 1.0),
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, drop_path_rate=0.0,
                      apply_layernorm=True)
        if family == "dinov2_with_registers":
            values["num_register_tokens"] = config.register_tokens
    elif family in ("clip", "clip_projection"):
        values.update(intermediate_size=hidden, attention_dropout=0.0, initializer_factor=1.0,
                      projection_dim=config.num_classes or config.embed_dim)
    else:  # siglip
        values.update(intermediate_size=hidden, attention_dropout=0.0, vision_use_head=True)
    values["dtype"] = "float32"
    return values


# ---- README.md --------------------------------------------------------------------------------

def model_card(export, model, source=None, run=None):
    """The README.md of a published folder: the model, its source or training run, how to load it."""
    values, config = export.config, model.config
    timm = export.format == "timm"
    lines = ["---", f"library_name: {'timm' if timm else 'transformers'}", "tags:", "- image-classification",
             f"- {'timm' if timm else values.get('model_type', 'vit')}", "- paddle-vit", "---", ""]
    if timm:
        args = values.get("model_args", {})
        arguments = ", ".join(f"{key}={value!r}" for key, value in args.items()) or "none (the architecture's own)"
        cfg = values["pretrained_cfg"]
        lines += [f"# {export.architecture} (published by paddle-vit)", "",
                  f"A Vision Transformer in timm's `{export.architecture}` architecture, with "
                  f"{config.depth} layers of width {config.embed_dim}, {config.num_heads} heads, "
                  f"{config.patch_size} px "
                  f"patches at {config.image_size} px, pooling `{values['global_pool']}`"
                  f"{' over every token, the class token included' if config.pool == 'walkthrough' else ''} and "
                  f"{config.num_classes} classes.", "",
                  f"- timm arguments beyond the architecture's (`model_args`): {arguments}",
                  f"- eval preprocessing (`pretrained_cfg`): {cfg['crop_mode']} crop, crop_pct {cfg['crop_pct']:g}, "
                  f"{cfg['interpolation']}, mean {cfg['mean']}, std {cfg['std']}; {export.preprocess_note}"]
        labels = values.get("label_names")
    else:
        cls = export.architecture
        if "id2label" in values:
            outputs = f"{config.num_classes} classes"
        elif config.num_classes:
            outputs = f"a {config.num_classes}-wide projection (image_embeds)"
        else:
            outputs = "no head (pooler_output: the pooled features)"
        lines += [f"# {cls} (published by paddle-vit)", "",
                  f"A Vision Transformer for transformers' `{cls}`, with {config.depth} layers "
                  f"of width {config.embed_dim}, {config.num_heads} heads, {config.patch_size} px patches at "
                  f"{config.image_size} px, hidden_act `{values['hidden_act']}`, layer_norm_eps "
                  f"{values['layer_norm_eps']:g} and {outputs}.", "",
                  f"- eval preprocessing (`preprocessor_config.json`): {export.preprocess_note}"]
        names = list(values.get("id2label", {}).values())
        labels = None if names[:1] in ([], ["LABEL_0"]) else names
    if labels:
        shown = ", ".join(labels[:10]) + (", ..." if len(labels) > 10 else "")
        lines.append(f"- classes (`{'label_names' if timm else 'id2label'}`): {shown}")
    lines += ["", "## Where it comes from", ""]
    if run:
        lines.append(f"Trained with paddle-vit: run `{run.get('folder')}`, data `{run.get('data')}`, "
                     f"{run.get('epochs')} epochs; best validation top-1 {_percent(run.get('best_top1'))} "
                     f"(metrics.jsonl).")
    if source:
        lines.append(f"Converted by paddle-vit from `{source}`.")
    if not run and not source:
        lines.append("Written by paddle-vit from a model in memory.")
    lines += ["", "## Load it", ""]
    if timm:
        lines += ["timm (PyTorch):", "", "```python", "import timm",
                  "from timm.data import resolve_data_config, create_transform",
                  'model = timm.create_model("local-dir:THIS_FOLDER", pretrained=True).eval()',
                  "transform = create_transform(**resolve_data_config({}, model=model))", "```", "",
                  "transformers (its timm wrapper; timm installed):", "", "```python",
                  "from transformers import AutoModelForImageClassification",
                  'model = AutoModelForImageClassification.from_pretrained("THIS_FOLDER").eval()  '
                  '# TimmWrapperForImageClassification', "```", ""]
    else:
        lines += ["transformers (PyTorch):", "", "```python",
                  f"from transformers import AutoImageProcessor, {export.architecture}",
                  f'model = {export.architecture}.from_pretrained("THIS_FOLDER").eval()',
                  'processor = AutoImageProcessor.from_pretrained("THIS_FOLDER", backend="pil")', "```", ""]
    lines += ["paddle-vit (PaddlePaddle):", "", "```python", "import paddle_vit",
              'model = paddle_vit.create_model(pretrained="THIS_FOLDER").eval()  # model.preprocess: the same eval '
              'transform', "```", "",
              "or `tools/predict.py --weights THIS_FOLDER IMAGE`.", ""]
    return "\n".join(lines)


def _percent(value):
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{100 * value:.2f}%" if value <= 1 else f"{value:.2f}%"
    return "unknown"


def run_summary(checkpoint_path):
    """{"folder", "data", "epochs", "best_top1"} of the training run a .pdckpt belongs to, or None."""
    from ..engine.runs import _run_folder_of_checkpoint
    import yaml

    folder = _run_folder_of_checkpoint(checkpoint_path)
    if folder is None:
        return None
    summary = {"folder": folder, "data": None, "epochs": None, "best_top1": None}
    try:
        with open(os.path.join(folder, "config.yaml"), encoding="utf-8") as stream:
            recipe = yaml.safe_load(stream) or {}
        data = recipe.get("data") or {}
        summary["data"] = data.get("dataset") and (data["dataset"] + (f" ({data['root']})" if data.get("root") else ""))
        summary["epochs"] = (recipe.get("train") or {}).get("epochs")
    except (OSError, yaml.YAMLError, AttributeError):
        pass
    try:
        with open(os.path.join(folder, "metrics.jsonl"), encoding="utf-8") as stream:
            records = [json.loads(line) for line in stream if line.strip()]
        tops = [record["val_top1"] for record in records if isinstance(record.get("val_top1"), (int, float))]
        summary["best_top1"] = max(tops) if tops else None
        if records and summary["epochs"] and len(records) != summary["epochs"]:
            summary["epochs"] = f"{len(records)} of {summary['epochs']}"
    except (OSError, ValueError):
        pass
    return summary


# ---- writing ----------------------------------------------------------------------------------

def _write_folder(directory, export, card):
    """Write the folder into a temporary folder beside `directory`, then move it into place."""
    from safetensors.numpy import save_file

    parent = os.path.dirname(directory)
    try:
        os.makedirs(parent, exist_ok=True)
        temporary = tempfile.mkdtemp(prefix=f".{os.path.basename(directory)}.partial-", dir=parent)
    except OSError as error:
        raise WeightsError(f"cannot write {directory}: {error.strerror or error}") from error
    old = None
    try:
        save_file(export.tensors, os.path.join(temporary, WEIGHTS_FILE), metadata={"format": "pt"})
        with open(os.path.join(temporary, CONFIG_FILE), "w", encoding="utf-8") as stream:
            json.dump(export.config, stream, indent=2)
            stream.write("\n")
        if export.processor is not None:
            with open(os.path.join(temporary, PROCESSOR_FILE), "w", encoding="utf-8") as stream:
                json.dump(export.processor, stream, indent=2)
                stream.write("\n")
        _write_card(os.path.join(temporary, CARD_FILE), card)
        umask = _umask()
        for name in os.listdir(temporary):  # safetensors writes 0600; the folder's files as any file's
            os.chmod(os.path.join(temporary, name), 0o666 & ~umask)
        os.chmod(temporary, 0o777 & ~umask)
        if os.path.isdir(directory):
            if os.listdir(directory):
                old = tempfile.mkdtemp(prefix=f".{os.path.basename(directory)}.old-", dir=parent)
                os.rmdir(old)
                os.rename(directory, old)
            else:
                os.rmdir(directory)
        os.rename(temporary, directory)
    except BaseException as error:
        shutil.rmtree(temporary, ignore_errors=True)
        if old is not None and not os.path.exists(directory):
            os.rename(old, directory)
        if isinstance(error, OSError):
            raise WeightsError(f"cannot write {directory}: {error.strerror or error}") from error
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _write_card(path, card):
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(card)


def _umask():
    umask = os.umask(0)
    os.umask(umask)
    return umask
