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
wrapper). ``format="huggingface"`` writes config.json (model_type ``vit``),
preprocessor_config.json (ViT's, DeiT's or Bit's image processor) and model.safetensors (q, k, v
apart) for ``ViTForImageClassification.from_pretrained``: the plain ViT reading the class token.
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

    format: "timm" (a timm Hub folder) or "huggingface" (a transformers ViTForImageClassification
        folder: config.json, preprocessor_config.json, model.safetensors; the plain ViT with
        class-token pooling only, anything else refused naming --to timm).
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
    """The export of a `ViT` as transformers' ViTForImageClassification (a WeightsError naming what
    it cannot compute, and --to timm)."""
    config = model.config
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


# ---- README.md --------------------------------------------------------------------------------

def model_card(export, model, source=None, run=None):
    """The README.md of a published folder: the model, its source or training run, how to load it."""
    values, config = export.config, model.config
    timm = export.format == "timm"
    lines = ["---", f"library_name: {'timm' if timm else 'transformers'}", "tags:", "- image-classification",
             f"- {'timm' if timm else 'vit'}", "- paddle-vit", "---", ""]
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
        lines += ["# ViTForImageClassification (published by paddle-vit)", "",
                  f"A Vision Transformer for transformers' `ViTForImageClassification`, with {config.depth} layers "
                  f"of width {config.embed_dim}, {config.num_heads} heads, {config.patch_size} px patches at "
                  f"{config.image_size} px, hidden_act `{values['hidden_act']}`, layer_norm_eps "
                  f"{values['layer_norm_eps']:g} and {config.num_classes} classes.", "",
                  f"- eval preprocessing (`preprocessor_config.json`): {export.preprocess_note}"]
        labels = None if list(values["id2label"].values())[:1] == ["LABEL_0"] else list(values["id2label"].values())
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
                  "from transformers import AutoImageProcessor, ViTForImageClassification",
                  'model = ViTForImageClassification.from_pretrained("THIS_FOLDER").eval()',
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
