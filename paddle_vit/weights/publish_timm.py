"""The timm half of publishing (`publish.py`): a model as a timm Hub folder's config.json
(architecture, model_args, global_pool, pretrained_cfg) and tensors in timm's names and PyTorch's
layout, as timm 1.0's ``save_for_hf`` writes them; what timm cannot express refused."""
import dataclasses
import math

import numpy as np

from ..data.config import DataConfig
from ..errors import WeightsError
from ..models import get_model_config, search_order, search_tier
from ..models.registry_rope import ROPE_NAMES
from ..preprocess import Preprocess, preprocess_for_checkpoint
from ..preprocess.timm import name_hint, to_pretrained_cfg
from .reading import to_numpy
from .renaming import invert_all, rename_back
from .timm import OLD_PRE_LOGITS, RENAMES, STEM_ONLY_BACKBONE


# registered names that are not timm's (timm has no such architecture)
NOT_TIMM = ("vit_walkthrough",)
# ViTConfig fields -> timm VisionTransformer arguments, one to one
TIMM_ARGS = {"image_size": "img_size", "patch_size": "patch_size", "in_channels": "in_chans",
             "embed_dim": "embed_dim", "depth": "depth", "num_heads": "num_heads", "mlp_ratio": "mlp_ratio",
             "qkv_bias": "qkv_bias", "class_token": "class_token", "register_tokens": "reg_tokens",
             "no_embed_class": "no_embed_class", "pre_norm": "pre_norm", "layer_scale": "init_values",
             "dynamic_img_size": "dynamic_img_size", "dynamic_img_pad": "dynamic_img_pad", "norm": "norm_layer",
             "final_norm": "final_norm", "pool_include_prefix": "pool_include_prefix",
             "attention_norm": "scale_attn_norm", "mlp_norm": "scale_mlp_norm"}
# the class count is config.json's num_classes and pretrained_cfg's (which timm builds the head
# with), not a model_args entry: transformers' TimmWrapper passes num_classes itself and fails on a
# second one
TIMM_ACT_LAYERS = {"exact": "gelu", "tanh": "gelu_tanh", "quick": "quick_gelu"}
TIMM_GLOBAL_POOLS = {"cls": "token", "mean": "avg", "map": "map", "walkthrough": "avg"}
# fields timm's architecture fixes (its entrypoint builds them; no JSON argument changes them here)
FIXED_FIELDS = ("backbone_layers", "backbone", "backbone_width", "mlp", "distilled", "layer_norm_epsilon", "rope",
                "rope_temperature", "rope_grid_offset", "rope_grid_indexing", "rope_rotate_half", "rope_ref_grid",
                "qkv", "mlp_align_to", "attn_pool_heads", "attn_pool_mlp_ratio",
                "proj_bias", "mlp_bias", "patch_norm")
# timm's Eva (the RoPE generation) names some of the same arguments otherwise
EVA_ARGS = {"reg_tokens": "num_reg_tokens", "pre_norm": "use_pre_transformer_norm", "fc_norm": "use_fc_norm",
            "final_norm": "use_post_transformer_norm", "scale_attn_norm": "scale_attn_inner",
            "scale_mlp_norm": "scale_mlp"}
# our names -> timm's: timm.py's RENAMES read backwards, the stem-only hybrid's ResNet only for it
INVERSE_RENAMES = invert_all(rename for rename in RENAMES if rename not in (STEM_ONLY_BACKBONE, OLD_PRE_LOGITS))
# timm's Eva writes layer scale as gamma_1 / gamma_2, where VisionTransformer writes ls1.gamma
EVA_INVERSE_RENAMES = invert_all(rename for rename in RENAMES if rename not in (STEM_ONLY_BACKBONE, OLD_PRE_LOGITS)
                                 and "ls1|ls2" not in rename[0])
STEM_ONLY_INVERSE_RENAMES = invert_all(rename for rename in RENAMES if rename != OLD_PRE_LOGITS)


@dataclasses.dataclass
class FolderExport:
    """What goes into a timm Hub folder: config.json's values and the tensors in timm's names
    (or, `format` "huggingface", a transformers folder: `processor` is preprocessor_config.json)."""
    config: dict
    tensors: dict
    architecture: str
    preprocess_note: str
    preprocess_exact: bool
    format: str = "timm"
    processor: dict = None


# ---- config.json ------------------------------------------------------------------------------

def _registered():
    return {name: get_model_config(name) for name in search_order() if name not in NOT_TIMM}


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
    if config.absolute_position_embedding != registered.absolute_position_embedding:
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
        if config.pool == "walkthrough" and not registered.pool_include_prefix:
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
    if config.is_hybrid and config.backbone == "resnet_v2" and config.backbone_style != "timm":
        refusals.append(f"backbone_style {config.backbone_style!r} (timm's ResNet-v2 standardises its weights "
                        f"as backbone_style 'timm')")
    if config.dynamic_img_size and config.pos_embed_resample not in (None, "bicubic_antialias"):
        refusals.append(f"pos_embed_resample {config.pos_embed_resample!r} (timm resamples bicubic with antialias)")
    return args, refusals


def _eva_args(args):
    """VisionTransformer's argument names -> Eva's, for an architecture of the RoPE generation."""
    renamed = {EVA_ARGS.get(key, key): value for key, value in args.items()}
    if "pos_embed" in renamed:
        renamed["use_abs_pos_emb"] = renamed.pop("pos_embed") == "learn"
    return renamed


def timm_architecture(config, name=None):
    """(timm's architecture name, model_args) for a `ViTConfig`: `name` when it is a registered
    timm name whose fixed parts (ResNet, MLP, distillation, epsilon) the model has, else the
    registered timm name that needs the fewest model_args. A WeightsError says in one line what
    timm cannot express."""
    registered = _registered()
    if name in registered:
        args, refusals = _differences(config, registered[name])
        if not refusals:
            return name, _eva_args(args) if name in ROPE_NAMES else args
    best = None  # the fewest model_args; a name of search_order's second tier only when it needs none
    for candidate, architecture in registered.items():
        args, refusals = _differences(config, architecture)
        rank = (len(args) > 0, search_tier(candidate), len(args))
        if not refusals and (best is None or rank < best[2]):
            best = (candidate, args, rank)
    if best is not None:
        return best[0], _eva_args(best[1]) if best[0] in ROPE_NAMES else best[1]
    base = registered.get(name) or registered[_closest(config, registered)]
    _, refusals = _differences(config, base)
    raise WeightsError(f"timm cannot express this model: {'; '.join(refusals)}; publish a model timm builds "
                       f"(paddle_vit.list_models() names timm's architectures)")


def _closest(config, registered):
    """The registered name with the fewest refusals, for the error message."""
    return min(registered, key=lambda candidate: len(_differences(config, registered[candidate])[1]))


def timm_pretrained_cfg(preprocess, config, num_classes):
    """(timm's pretrained_cfg, a note on how exact it is, whether it is exact) of a `Preprocess`:
    its eval keys as `paddle_vit.preprocess.timm.to_pretrained_cfg` writes them, the model's
    beside them."""
    if preprocess.image_size != config.image_size and not config.dynamic_img_size:
        raise WeightsError(f"the preprocessing makes {preprocess.image_size} px images, the model takes "
                           f"{config.image_size}")
    eval_keys, note, exact = to_pretrained_cfg(preprocess)
    size = preprocess.image_size  # a model of any input size is fed at its pipeline's (timm's DINOv3: 256)
    cfg = {
        "custom_load": False,
        "input_size": [config.in_channels, size, size],
        "fixed_input_size": not config.dynamic_img_size,
        **eval_keys,  # interpolation, crop_pct, crop_mode, mean, std
        "num_classes": num_classes,
        "pool_size": None,
        "first_conv": _first_conv(config),
        "classifier": ["head", "head_dist"] if config.distilled else "head",
    }
    return cfg, note, exact


def _first_conv(config):
    if not config.is_hybrid:
        return "patch_embed.proj"
    if config.backbone == "resnet_d":
        return "patch_embed.backbone.conv1.0"
    return "patch_embed.backbone.conv" if not config.backbone_layers else "patch_embed.backbone.stem.conv"


def default_preprocess(model, name):
    """``model.preprocess``, else timm's default pretrained_cfg of `name`, else the recipe defaults."""
    own = getattr(model, "preprocess", None)
    if own is not None:
        return own
    hint = name_hint(name) if name else None
    if hint is not None:
        return preprocess_for_checkpoint(hint, model.config.image_size)
    return Preprocess.from_config(DataConfig(), model.config.image_size, origin="this project's recipe defaults")


def timm_tensors(model_or_state, config, architecture=None):
    """{timm name: numpy array in PyTorch's layout} of a model's state dict (in timm's Eva names
    for an `architecture` of the RoPE generation)."""
    state = model_or_state.state_dict() if hasattr(model_or_state, "state_dict") else model_or_state
    stem_only = config.is_hybrid and not config.backbone_layers
    inverses = (STEM_ONLY_INVERSE_RENAMES if stem_only else EVA_INVERSE_RENAMES if architecture in ROPE_NAMES
                else INVERSE_RENAMES)
    tensors = {}
    for ours, value in state.items():
        theirs = rename_back(ours, inverses)
        if theirs is None:
            raise WeightsError(f"{ours!r} has no name in timm's VisionTransformer; timm cannot express this model")
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
    """The `FolderExport` of a `ViT` (a WeightsError naming what timm cannot express)."""
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
    return FolderExport(values, timm_tensors(model, config, architecture), architecture, note, exact)
