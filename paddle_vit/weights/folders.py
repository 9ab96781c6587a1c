"""What a checkpoint folder says the model is: timm Hub folders and Hugging Face folders.

Both publish the weights beside a ``config.json``, and the two are told apart by it:

- timm (``save_for_hf`` / ``push_to_hf_hub``): ``architecture`` (timm's model name),
  ``num_classes``, ``num_features``, ``global_pool``, ``pretrained_cfg`` (the preprocessing and
  more), ``model_args`` (the arguments the model was built with beyond the architecture's, e.g.
  ``img_size``, ``depth``) and maybe ``label_names``; an older timm wrote the pretrained_cfg
  keys at the top level, with ``architecture`` among them;
- Hugging Face transformers (``save_pretrained``): ``model_type`` and ``architectures`` (class
  names), ``hidden_size``, ``num_hidden_layers``, ... (an image-text model's under
  ``vision_config``); each model type read (`HF_MODEL_TYPES`: ViT, ViTMAE, DeiT, DINOv2 with and
  without registers, DINOv3, CLIP's and SigLIP's image towers) fixes the options of today's ViTs its
  transformers class computes with (tokens, layer scale, MLP, pooling, epsilon, GELU).

`describe_config` turns either into the `ViTConfig` fields it fixes and the registered name
they are (None when no registered model has them), so that `create_model(name=None,
pretrained=FOLDER)` and the tools' ``--weights FOLDER`` without ``--model`` can build the
model, and `check_model_name` refuses a name that contradicts the folder. What a folder asks
for that this ViT does not compute (q/k normalisation, patch dropout, ...) is
refused in one line naming the key.

Nothing here opens a file: the folder's files are read once, by `source.resolve_weights`, into
a `FolderConfig` that everything below takes.
"""
import dataclasses
from typing import Optional

from ..errors import WeightsError
from ..models import ViTConfig, get_model_config, list_models, search_order
from ..models.registry import NOT_BUILT
from .eva_args import EVA_KEYS, eva_options
from .family import Implied
from .hf_dinov3_config import DINOV3_DEFAULTS, dinov3_options

# timm names of the same network under another name (DeiT's non-distilled models are timm's
# VisionTransformer with ViT's sizes; only the training recipe differs)
TIMM_ALIASES = {f"deit_{size}_patch16_{resolution}": f"vit_{size}_patch16_{resolution}"
                for size in ("tiny", "small", "base") for resolution in (224, 384)}
# timm's VisionTransformer arguments that map onto a ViTConfig field one to one
TIMM_ARGUMENTS = {"img_size": "image_size", "patch_size": "patch_size", "in_chans": "in_channels",
                  "embed_dim": "embed_dim", "depth": "depth",
                  "num_heads": "num_heads", "mlp_ratio": "mlp_ratio", "qkv_bias": "qkv_bias",
                  "drop_rate": "dropout", "attn_drop_rate": "attention_dropout", "drop_path_rate": "drop_path",
                  "class_token": "class_token", "no_embed_class": "no_embed_class", "pre_norm": "pre_norm",
                  "init_values": "layer_scale"}
# timm arguments this ViT computes only at one value: {argument: (accepted values, what it would need)}
TIMM_FIXED = {
    "qk_norm": ((False,), "q/k normalisation"),
    "pos_drop_rate": ((0, 0.0), "a separate position-embedding dropout"),
    "patch_drop_rate": ((0, 0.0), "patch dropout"),
    "proj_drop_rate": ((0, 0.0), "a separate projection dropout"),
}
# arguments that only change how timm initialises or places the model: the weights replace them
TIMM_IGNORED = ("weight_init", "fix_init", "device", "dtype", "pretrained_strict")
TIMM_POOLS = {"token": "cls", "avg": "mean", "map": "map"}
# timm's norm_layer / embed_norm_layer names of the norms this ViT builds (models/norms.py)
TIMM_NORMS = {"layernorm": "layernorm", "rmsnorm": "rmsnorm"}
# timm flags that are ViTConfig fields of the same meaning, true or false: {argument: field}
TIMM_FLAGS = {"final_norm": "final_norm", "scale_attn_norm": "attention_norm", "scale_mlp_norm": "mlp_norm"}
TIMM_ACTIVATIONS = {"gelu": "exact", "gelu_tanh": "tanh", "quick_gelu": "quick"}
# what a folder fixes about the architecture; the fields a contradiction is looked for in
ARCHITECTURE_FIELDS = ("patch_size", "embed_dim", "depth", "num_heads", "mlp_ratio", "in_channels",
                       "backbone_layers", "backbone", "image_size")


@dataclasses.dataclass
class FolderConfig:
    """A config.json beside weights, read and checked once: its `kind` ("timm" or
    "huggingface"), path and values; for a Hugging Face folder, the values of the
    preprocessor_config.json beside it (`processor`, at `processor_path`), or None."""
    kind: str
    path: str
    values: dict
    processor: Optional[dict] = None
    processor_path: Optional[str] = None


@dataclasses.dataclass
class FolderModel:
    """What a folder says the model is.

    name: the registered model it is, or None when no registered model has its sizes;
    base: the registered name to build on (`name`, or one of the same patch size);
    options: {ViTConfig field: Implied} the folder fixes (the architecture, the pooling, ...);
    says: how messages name it ("vit_small_patch16_224", "hidden_size=32, ...").
    """
    name: Optional[str]
    base: str
    options: dict
    says: str
    config: FolderConfig


# ---- timm --------------------------------------------------------------------------------------

def _square(value, key, path):
    if isinstance(value, (list, tuple)):
        if len(value) != 2 or value[0] != value[1]:
            raise WeightsError(f"{path}: {key} {list(value)} is not square; this ViT takes square images and patches")
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int):
        raise WeightsError(f"{path}: {key} must be an integer, got {value!r}")
    return value


def timm_architecture(config):
    """(our registered name or None, timm's architecture name) of a timm config.json."""
    architecture = config.values.get("architecture")
    if not isinstance(architecture, str):
        raise WeightsError(f"{config.path}: architecture must be a timm model name, got {architecture!r}")
    ours = TIMM_ALIASES.get(architecture, architecture)
    return (ours if ours in list_models() else None), architecture


def get_registered_config(config):
    """The registered `ViTConfig` of a timm config.json's architecture, or None (no folder, not registered)."""
    if config is None or config.kind != "timm":
        return None
    name, _ = timm_architecture(config)
    return get_model_config(name) if name is not None else None


def timm_options(config):
    """{ViTConfig field: Implied} a timm config.json fixes: its ``model_args`` (refusing what
    this ViT does not compute) and ``global_pool``. The class count is the head's."""
    path, values = config.path, config.values
    model_args = values.get("model_args") or {}
    if not isinstance(model_args, dict):
        raise WeightsError(f"{path}: model_args must be a JSON object, got {type(model_args).__name__}")
    options = {}
    for key, value in model_args.items():
        where = f"{path}: model_args.{key} = {value!r}"
        if key in TIMM_ARGUMENTS:
            if key in ("img_size", "patch_size"):
                value = _square(value, f"model_args.{key}", path)
            options[TIMM_ARGUMENTS[key]] = Implied(value, where)
        elif key in TIMM_FIXED:
            accepted, needs = TIMM_FIXED[key]
            if value not in accepted:
                raise WeightsError(f"{where} asks for {needs}, which this ViT does not build")
        elif key == "pool_include_prefix":
            if value not in (True, False):
                raise WeightsError(f"{where}: pool_include_prefix must be true or false")
            continue  # read below with global_pool
        elif key in TIMM_FLAGS:
            if not isinstance(value, bool):
                raise WeightsError(f"{where}: {key} must be true or false")
            options[TIMM_FLAGS[key]] = Implied(value, where)
        elif key == "proj_bias":  # timm's Block gives the MLP the bias the attention's projection has
            if not isinstance(value, bool):
                raise WeightsError(f"{where}: proj_bias must be true or false")
            options["proj_bias"] = Implied(value, where)
            options["mlp_bias"] = Implied(value, where + " (timm's Block: the MLP's biases too)")
        elif key in ("norm_layer", "embed_norm_layer"):
            if value is not None and value not in TIMM_NORMS:
                raise WeightsError(f"{where}: this ViT builds the norms {', '.join(TIMM_NORMS)}")
            if key == "norm_layer" and value is not None:
                options["norm"] = Implied(TIMM_NORMS[value], where)
            elif key == "embed_norm_layer":  # its kind must be the blocks' (models/norms.py): checked below
                options["patch_norm"] = Implied(value is not None, where)
        elif key in ("global_pool", "num_classes"):
            continue  # the pool is read below with the top-level global_pool; the head says the classes
        elif key == "fc_norm":
            if value is not None and not isinstance(value, bool):
                raise WeightsError(f"{where}: fc_norm must be null, true or false")
            options["fc_norm"] = Implied(value, where)
        elif key == "reg_tokens":
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise WeightsError(f"{where}: reg_tokens must be a count >= 0")
            options["register_tokens"] = Implied(value or 0, where)
        elif key == "pos_embed":
            if value not in ("learn", "none"):
                raise WeightsError(f"{where}: this ViT builds 'learn' or 'none' position embeddings")
            options["position_embedding"] = Implied("learned" if value == "learn" else "none", where)
        elif key == "act_layer":
            if value is not None and value not in TIMM_ACTIVATIONS:
                raise WeightsError(f"{where}: this ViT computes GELU, exact, tanh or quick "
                                   f"({', '.join(TIMM_ACTIVATIONS)})")
            if value is not None:
                options["gelu"] = Implied(TIMM_ACTIVATIONS[value], where)
        elif key in ("dynamic_img_size", "dynamic_img_pad"):
            if key in {field.name for field in dataclasses.fields(ViTConfig)}:
                options[key] = Implied(bool(value), where)
            elif value:
                raise WeightsError(f"{where}: this ViT takes only the input size it was built for")
        elif key in TIMM_IGNORED or key in EVA_KEYS:
            continue  # Eva's (the RoPE generation's): read below
        else:
            raise WeightsError(f"{path}: model_args.{key} is a timm argument this ViT does not build "
                               f"(it reads {', '.join(sorted(TIMM_ARGUMENTS))} and the defaults of the others)")
    if EVA_KEYS & set(model_args):
        options.update(eva_options(model_args, get_registered_config(config) or ViTConfig(), path))
    embed_norm = model_args.get("embed_norm_layer")
    if embed_norm is not None:
        norm = options["norm"].value if "norm" in options else (get_registered_config(config) or ViTConfig()).norm
        if TIMM_NORMS[embed_norm] != norm:
            raise WeightsError(f"{path}: model_args.embed_norm_layer = {embed_norm!r} beside blocks normed by "
                               f"{norm!r}: this ViT norms the patch tokens with the blocks' norm")
    pool = _timm_pool(values, path)
    if model_args.get("pool_include_prefix") is True:
        if pool not in ("mean", "map"):
            raise WeightsError(f"{path}: model_args.pool_include_prefix with global_pool "
                               f"{values.get('global_pool', model_args.get('global_pool'))!r}: this ViT pools every "
                               f"token with 'avg' or 'map' only")
        if pool == "mean" and model_args.get("fc_norm") is False:
            pool = "walkthrough"  # the mean of every token after the final norm: the walkthrough's AdaptiveAvgPool1D
        else:
            options["pool_include_prefix"] = Implied(True, f"{path}: model_args.pool_include_prefix = True")
    if pool is not None:
        options["pool"] = Implied(pool, f"{path}: global_pool = {values.get('global_pool', model_args.get('global_pool'))!r}")
    return options


def _timm_pool(values, path):
    model_args = values.get("model_args") or {}
    global_pool = values.get("global_pool", model_args.get("global_pool"))
    if global_pool is None:
        return None
    if global_pool not in TIMM_POOLS:
        raise WeightsError(f"{path}: global_pool {global_pool!r} is not a pooling this ViT computes; it reads "
                           f"'token' (the class token), 'avg' (the mean of the patch tokens) and 'map' (attention "
                           f"pooling)")
    return TIMM_POOLS[global_pool]


def timm_class_names(config, num_classes):
    """``label_names`` of a timm config.json in class order (a list, or {index: name}), or None."""
    labels = config.values.get("label_names") or config.values.get("pretrained_cfg", {}).get("label_names")
    if isinstance(labels, dict):
        try:
            labels = [labels[key] for key in sorted(labels, key=int)]
        except (TypeError, ValueError):
            return None
    if not isinstance(labels, (list, tuple)) or len(labels) != num_classes:
        return None
    return [str(label) for label in labels]


# ---- Hugging Face ------------------------------------------------------------------------------

# the config.json model_type values read, and the transformers classes whose folders they are
HF_MODEL_TYPES = {
    "vit": "ViTModel, ViTForImageClassification",
    "vit_mae": "ViTMAEModel, ViTMAEForPreTraining (the encoder, no masking)",
    "deit": "DeiTForImageClassificationWithTeacher",
    "dinov2": "Dinov2Model",
    "dinov2_with_registers": "Dinov2WithRegistersModel",
    "clip_vision_model": "CLIPVisionModel, CLIPVisionModelWithProjection",
    "clip": "CLIPModel's image tower",
    "siglip_vision_model": "SiglipVisionModel",
    "siglip": "SiglipModel's image tower",
    "dinov3_vit": "DINOv3ViTModel",
}
# an image-text model's config.json describes its image tower under vision_config
HF_VISION_CONFIG = {"clip": "clip_vision_model", "siglip": "siglip_vision_model"}
_VIT_DEFAULTS = {"layer_norm_eps": 1e-12, "hidden_act": "gelu", "qkv_bias": True}
_DINOV2_DEFAULTS = {"layer_norm_eps": 1e-6, "hidden_act": "gelu", "qkv_bias": True, "mlp_ratio": 4,
                    "use_swiglu_ffn": False, "layerscale_value": 1.0}
# what transformers' config class of each model type assumes for a key config.json leaves out
HF_CONFIG_DEFAULTS = {
    "vit": ("ViTConfig", _VIT_DEFAULTS),
    "vit_mae": ("ViTMAEConfig", _VIT_DEFAULTS),
    "deit": ("DeiTConfig", _VIT_DEFAULTS),
    "dinov2": ("Dinov2Config", _DINOV2_DEFAULTS),
    "dinov2_with_registers": ("Dinov2WithRegistersConfig", dict(_DINOV2_DEFAULTS, num_register_tokens=4)),
    "clip_vision_model": ("CLIPVisionConfig", {"layer_norm_eps": 1e-5, "hidden_act": "quick_gelu"}),
    "siglip_vision_model": ("SiglipVisionConfig", {"layer_norm_eps": 1e-6, "hidden_act": "gelu_pytorch_tanh",
                                                   "vision_use_head": True}),
    "dinov3_vit": ("DINOv3ViTConfig", DINOV3_DEFAULTS),
}
# transformers' hidden_act names of the GELUs this ViT computes
HF_HIDDEN_ACTS = {"gelu": "exact", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu_fast": "tanh",
                  "quick_gelu": "quick"}
# the ViTConfig fields beside the sizes that say which of today's ViTs a model is
TOKEN_FIELDS = ("class_token", "register_tokens", "no_embed_class", "pre_norm", "mlp", "pool", "fc_norm",
                "distilled", "position_embedding", "gelu")


@dataclasses.dataclass
class HFTower:
    """The image tower a Hugging Face config.json describes: its model type (an image-text model's
    is its vision_config's), the values describing it, how messages name a key of it, the file."""
    model_type: str
    values: dict
    prefix: str
    path: str

    def where(self, key):
        return f"{self.path}: {self.prefix}{key}"

    def setting(self, key):
        """(value, reason): config.json's, else transformers' default for the model type."""
        if key in self.values:
            return self.values[key], f"{self.where(key)} = {self.values[key]!r}"
        class_name, defaults = HF_CONFIG_DEFAULTS[self.model_type]
        return defaults[key], f"transformers' {class_name} default for {self.prefix}{key} = {defaults[key]!r}"


def hf_tower(config):
    """The `HFTower` of a Hugging Face `FolderConfig`; a model_type this project does not read is a
    WeightsError naming the file and the key. No model_type (an old file) reads as ViT's."""
    values, path = config.values, config.path
    model_type = values.get("model_type", "vit")
    if not isinstance(model_type, str) or model_type not in HF_MODEL_TYPES:
        readable = "; ".join(f"{kind} ({classes})" for kind, classes in HF_MODEL_TYPES.items())
        raise WeightsError(f"{path}: model_type {model_type!r} is not one this project reads; it reads {readable}")
    if model_type in HF_VISION_CONFIG:
        vision = values.get("vision_config")
        if not isinstance(vision, dict):
            raise WeightsError(f"{path}: vision_config must be a JSON object describing the image tower of "
                               f"model_type {model_type!r}, got {vision!r}")
        return HFTower(HF_VISION_CONFIG[model_type], vision, "vision_config.", path)
    return HFTower(model_type, values, "", path)


def _count(tower, key, minimum=1):
    value, reason = tower.setting(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise WeightsError(f"{tower.where(key)} must be an integer >= {minimum}, got {value!r}")
    return value, reason


def _flag(tower, key):
    value, reason = tower.setting(key)
    if not isinstance(value, bool):
        raise WeightsError(f"{tower.where(key)} must be true or false, got {value!r}")
    return value, reason


def _mlp_ratio(hidden, width):
    """The mlp_ratio whose int(width * ratio) is `hidden` (the MLP's width, as models/encoder.py counts it)."""
    ratio = hidden / width
    return ratio if int(width * ratio) == hidden else (hidden + 0.5) / width


def hf_computation(tower):
    """{ViTConfig field: Implied}: the LayerNorm epsilon and the GELU of a Hugging Face tower
    (config.json's, or transformers' defaults for its model type), each refused in one line when
    this ViT cannot compute it."""
    epsilon, epsilon_reason = tower.setting("layer_norm_eps")
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 < epsilon <= 1e-3:
        raise WeightsError(f"{tower.where('layer_norm_eps')} {epsilon!r} is not a LayerNorm epsilon this ViT "
                           f"computes: a number > 0 and <= 1e-3 (Paddle's limit)")
    activation, activation_reason = tower.setting("hidden_act")
    if not isinstance(activation, str) or activation not in HF_HIDDEN_ACTS:
        raise WeightsError(f"{tower.where('hidden_act')} {activation!r} is not a GELU this ViT computes; "
                           f"supported: {', '.join(HF_HIDDEN_ACTS)}")
    return {"layer_norm_epsilon": Implied(float(epsilon), epsilon_reason),
            "gelu": Implied(HF_HIDDEN_ACTS[activation], activation_reason)}


def hf_options(config):
    """{ViTConfig field: Implied} of the model a Hugging Face config.json states: the sizes, and
    for its model type the tokens, layer scale, MLP, pooling, epsilon and GELU that transformers'
    class computes with (its config class's defaults where config.json says nothing)."""
    tower = hf_tower(config)
    values, kind = tower.values, tower.model_type
    keys = {"hidden_size": "embed_dim", "num_hidden_layers": "depth", "num_attention_heads": "num_heads",
            "patch_size": "patch_size", "image_size": "image_size", "num_channels": "in_channels"}
    options = {}
    for key, field in keys.items():
        if key in values:
            if key in ("patch_size", "image_size"):
                value = _square(values[key], tower.prefix + key, tower.path)
                if value < 1:
                    raise WeightsError(f"{tower.where(key)} must be a positive integer, got {values[key]!r}")
            else:
                value, _ = _count(tower, key)
            options[field] = Implied(value, f"{tower.where(key)} = {values[key]!r}")
    width = options["embed_dim"].value if "embed_dim" in options else None
    if "intermediate_size" in values and width:
        hidden, _ = _count(tower, "intermediate_size")
        options["mlp_ratio"] = Implied(_mlp_ratio(hidden, width),
                                       f"{tower.where('intermediate_size')} {hidden} / hidden_size")
    if kind == "dinov3_vit":  # SiLU in its gated MLP, RoPE, biases by key: hf_dinov3_config.py
        options.update(dinov3_options(tower))
    else:
        options.update(hf_computation(tower))
    because = f"{tower.path}: model_type {kind!r} ({HF_MODEL_TYPES[kind].split(',')[0]})"
    token_options = dict(class_token=True, register_tokens=0, no_embed_class=False, pre_norm=False, layer_scale=None,
                         mlp="standard", pool="cls", fc_norm=None, distilled=False, position_embedding="learned")
    if kind in ("vit", "vit_mae", "deit"):
        qkv_bias, reason = _flag(tower, "qkv_bias")
        options["qkv_bias"] = Implied(qkv_bias, reason)
        token_options["distilled"] = kind == "deit"  # DeiT: the distillation token and its classifier
    elif kind in ("dinov2", "dinov2_with_registers"):
        qkv_bias, reason = _flag(tower, "qkv_bias")
        options["qkv_bias"] = Implied(qkv_bias, reason)
        scale, scale_reason = tower.setting("layerscale_value")
        if isinstance(scale, bool) or not isinstance(scale, (int, float)):
            raise WeightsError(f"{tower.where('layerscale_value')} must be a number, got {scale!r}")
        options["layer_scale"] = Implied(float(scale), f"{scale_reason}: layer_scale1/2.lambda1 in every layer")
        swiglu, swiglu_reason = _flag(tower, "use_swiglu_ffn")
        ratio, ratio_reason = tower.setting("mlp_ratio")
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not ratio > 0:
            raise WeightsError(f"{tower.where('mlp_ratio')} must be a number > 0, got {ratio!r}")
        if width:
            hidden = int(width * ratio)
            if swiglu:  # transformers' Dinov2SwiGLUFFN: two thirds of the width, rounded up to 8; gate and value
                hidden = 2 * ((int(hidden * 2 / 3) + 7) // 8 * 8)
            options["mlp_ratio"] = Implied(_mlp_ratio(hidden, width), ratio_reason + (
                f"; SwiGLU ({tower.prefix}use_swiglu_ffn): 2 x (int(2 / 3 x {int(width * ratio)}) + 7) // 8 x 8 = "
                f"{hidden}" if swiglu else ""))
        options["mlp"] = Implied("swiglu" if swiglu else "standard", swiglu_reason)
        if kind == "dinov2_with_registers":  # registers after the class token, without position embedding
            registers, registers_reason = _count(tower, "num_register_tokens", minimum=0)
            options["register_tokens"] = Implied(registers, registers_reason)
            options["no_embed_class"] = Implied(True, f"{because}: the position embedding is added before the "
                                                      f"registers are inserted (the class token's row is folded "
                                                      f"into the class token)")
    elif kind == "clip_vision_model":
        options["pre_norm"] = Implied(True, f"{because}: pre_layrnorm before the layers, a patch projection "
                                            f"without bias")
    elif kind == "siglip_vision_model":  # no class token; the MAP head, or no pooling of its own
        head, head_reason = _flag(tower, "vision_use_head")
        options["class_token"] = Implied(False, f"{because}: no class token")
        options["pool"] = Implied("map" if head else "mean", head_reason)
        options["fc_norm"] = Implied(None if head else False, head_reason)
    for field, value in token_options.items():
        options.setdefault(field, Implied(value, because))
    return options


# ---- the folder as a whole ---------------------------------------------------------------------

def _matching_name(options):
    """The registered plain ViT with exactly these architecture values (and, where the options
    state them, the same tokens, pooling, MLP and whether it has layer scale), or None; of
    several, one with the same GELU (timm registers OpenAI's CLIP with QuickGELU apart, and its
    SigLIP with exact GELU where transformers' computes the tanh one)."""
    wanted = {field: implied.value for field, implied in options.items()
              if field in ARCHITECTURE_FIELDS + TOKEN_FIELDS}
    matches = []
    for name in search_order():
        config = get_model_config(name)
        same = all(_same_field(config, field, value) for field, value in wanted.items() if field != "gelu")
        if (config.backbone_layers is None and same and ("layer_scale" not in options or
                                                         (config.layer_scale is None) ==
                                                         (options["layer_scale"].value is None))):
            matches.append((name, config))
    same_gelu = [name for name, config in matches if "gelu" not in wanted or config.gelu == wanted["gelu"]]
    return (same_gelu or [name for name, _ in matches] or [None])[0]


def _same_field(config, field, value):
    """Whether `config` has `value` for `field`; an MLP ratio is the same when it gives the same
    hidden width (timm's 5.33334 and transformers' 8192 / 1536 both give 8192 at width 1536)."""
    if field == "mlp_ratio":
        return int(config.embed_dim * config.mlp_ratio) == int(config.embed_dim * value)
    return _same(getattr(config, field), value)


def _base_name(options):
    """A registered plain ViT of the same patch size and image size to build on (every value
    the folder states is then set on it), else vit_base_patch16_224."""
    for name in search_order():
        config = get_model_config(name)
        if (config.backbone_layers is None and name.startswith("vit_") and
                all(_same(getattr(config, field), options[field].value)
                    for field in ("patch_size", "image_size") if field in options)):
            return name
    return "vit_base_patch16_224"


def _same(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return abs(float(a) - float(b)) <= 1e-9 * max(1.0, abs(float(a)))
    return a == b


def describe_config(config):
    """The `FolderModel` of a `FolderConfig`."""
    if config.kind == "timm":
        name, architecture = timm_architecture(config)
        options = timm_options(config)
        if name is not None:
            registered = get_model_config(name)
            fixed = {field: Implied(getattr(registered, field), f"{config.path}: architecture {architecture!r}")
                     for field in ARCHITECTURE_FIELDS}
            options = {**fixed, **options}
            changed = [field for field in ARCHITECTURE_FIELDS if not _same(options[field].value,
                                                                           getattr(registered, field))]
            says = name + (f" (model_args: {', '.join(f'{field} {options[field].value}' for field in changed)})"
                           if changed else "")
            return FolderModel(name, name, options, says, config)
        return FolderModel(None, _base_name(options), options, f"timm's {architecture}", config)
    options = hf_options(config)
    name = _matching_name(options)
    stated = ", ".join(f"{field} {implied.value}" for field, implied in options.items()
                       if field in ARCHITECTURE_FIELDS)
    kind = config.values.get("model_type", "vit")
    stated = stated if kind == "vit" else f"model_type {kind!r} with {stated}"
    return FolderModel(name, name or _base_name(options), options, name or stated, config)


def check_model_name(name, overrides, folder, given_as):
    """Raise a WeightsError naming both when the model `name` (with the ViTConfig `overrides`
    the caller chose) contradicts what `folder` (a `FolderModel`) says. The image size is a
    choice, not a contradiction (`model_image_size`: the position embedding is resampled)."""
    if folder.config.kind == "timm" and (folder.name is None or name == folder.name):
        return  # its own architecture (model_args then apply), or one we do not register: the tensors decide
    if folder.name is None and name == folder.base:
        return  # the name a folder of unregistered sizes is built on (`resolve_name`): its sizes are set on it
    config = get_model_config(name, **overrides)
    differences = [f"{field} {getattr(config, field)!r}, not {folder.options[field].value!r}"
                   for field in ARCHITECTURE_FIELDS
                   if field != "image_size" and field in folder.options and field not in overrides
                   and not _same_field(config, field, folder.options[field].value)]
    if differences:
        raise WeightsError(f"{given_as} {name} but {folder.config.path} says {folder.says}: {differences[0]}; "
                           f"leave the name out to build what the folder says")


def resolve_name(name, overrides, folder, given_as, description):
    """The model name to build for the weights `description` names, whose folder says `folder`
    (a `FolderModel`, or None): `name` when given (checked against the folder), else what the
    folder says; a WeightsError when neither names a model."""
    if name is not None:
        if folder is not None:
            check_model_name(name, overrides, folder, given_as)
        return name
    if folder is None:
        raise WeightsError(f"{description} does not say what model it is (no timm or Hugging Face config.json "
                           f"beside it): name the model")
    if folder.name is None and folder.config.kind == "timm":
        architecture = str(folder.config.values.get("architecture"))
        if architecture in NOT_BUILT:
            raise WeightsError(f"{folder.config.path}: architecture {architecture} is timm's, but this project does "
                               f"not build it: {NOT_BUILT[architecture]}")
        if architecture.startswith("naflexvit"):
            raise WeightsError(f"{folder.config.path}: architecture {architecture} is timm's NaFlex ViT (sequences of "
                               f"patches of variable aspect ratio), which this project does not build")
        raise WeightsError(f"{folder.config.path} names {folder.says}, which is not a registered model "
                           f"(paddle_vit.list_models()); name the model of the same shape")
    return folder.base


def model_image_size(name, overrides, folder):
    """The image size of the model built as `name` (None: what the folder says) for `folder`
    (a `FolderModel` or None): the `overrides`' when they set one; the folder's (timm's
    model_args.img_size, a Hugging Face config's image_size) when the name is left out or is the
    folder's own (`FolderModel.name`, or the `base` it is built on) or the folder names a timm
    architecture that is not registered (its model_args then describe the weights); else the registered name's: ``vit_base_patch16_384`` for a 224 folder is
    fine-tuning at 384, the position embedding resampled."""
    if "image_size" in overrides:
        return overrides["image_size"]
    own = folder is not None and (name in (None, folder.name, folder.base) or
                                  (folder.config.kind == "timm" and folder.name is None))  # model_args: the truth
    if own and "image_size" in folder.options:
        return hf_processor_size(folder.config) or folder.options["image_size"].value
    return get_model_config(name or folder.base).image_size


def hf_processor_size(config):
    """The side of the images a Hugging Face folder's preprocessor_config.json makes (its centre
    crop, or a square resize), or None (no such file, another kind of folder, a size it leaves to
    the image). transformers feeds the model what its processor makes: facebook/dinov2-*'s
    config.json says 518 and its processor crops 224, the position embedding interpolated."""
    values = config.processor
    if config.kind != "huggingface" or values is None:
        return None
    size = values.get("crop_size") if values.get("do_center_crop") else (
        values.get("size") if values.get("do_resize", True) else None)
    if isinstance(size, dict) and "height" in size and size.get("height") == size.get("width"):
        size = size["height"]
    return size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else None


