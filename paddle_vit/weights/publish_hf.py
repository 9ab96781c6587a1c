"""The transformers half of publishing (`publish.py`): a model as the folder of its transformers
class (ViTForImageClassification, Dinov2Model, Dinov2WithRegistersModel, CLIPVisionModel[With-
Projection], SiglipVisionModel, DeiTForImageClassificationWithTeacher, DINOv3ViTModel): config.json,
preprocessor_config.json of the class's image processor, the tensors in its names; what a class or
its processor cannot compute refused naming --to timm."""
import math

import numpy as np

from ..errors import WeightsError
from ..preprocess.huggingface import to_processor_config
from . import hf_clip, hf_deit, hf_dinov2, hf_dinov3, hf_siglip, huggingface
from .family import POSITION_EMBEDDING
from .hf_common import EMBEDDING_RULES, VIT_LAYER_RULES, tensors_by_rules
from .publish_timm import FolderExport, default_preprocess
from .reading import to_numpy


# ---- transformers (ViTForImageClassification) ---------------------------------------------------

HF_HIDDEN_ACTS = {"exact": "gelu", "tanh": "gelu_pytorch_tanh", "quick": "quick_gelu"}
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
    "norm": ("layernorm", "its norms are LayerNorms"),
    "final_norm": (True, "it normalises the tokens after the last layer"),
}
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


def hf_preprocessor(preprocess, config, processor_type=None):
    """(preprocessor_config.json, note, exact) of a `Preprocess` for transformers' PIL image
    processors (`paddle_vit.preprocess.huggingface.to_processor_config`; `processor_type` None:
    ViTImageProcessor, DeiTImageProcessor or BitImageProcessor by the resize), after checking it
    makes the model's size."""
    if preprocess.image_size != config.image_size:
        raise WeightsError(f"the preprocessing makes {preprocess.image_size} px images, the model takes "
                           f"{config.image_size}")
    return to_processor_config(preprocess, processor_type)


def hf_tensors(model):
    """{transformers name: numpy array in PyTorch's layout} of a plain ViT's state dict: the rules
    huggingface.py reads ViTForImageClassification with, read backwards (no ViTModel pooler)."""
    state = {name: to_numpy(value) for name, value in model.state_dict().items()}
    return tensors_by_rules(state, EMBEDDING_RULES + VIT_LAYER_RULES, "vit.", huggingface.TOP_RULES,
                            _unnamed("ViTForImageClassification"))


def _unnamed(architecture):
    """The error for a tensor of ours that transformers' `architecture` has no name for."""
    return lambda ours: WeightsError(f"{ours!r} has no name in transformers' {architecture}: publish with --to timm")


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
    return FolderExport(values, hf_tensors(model), "ViTForImageClassification", note, exact,
                      format="huggingface", processor=processor)


def _family_export(model, family, name, preprocess, class_names):
    config = model.config
    architecture = HF_CLASSES[family][0]
    refusals = family_refusals(model, family)
    if refusals:
        raise WeightsError(f"transformers' {architecture} cannot compute this model: {'; '.join(refusals)}; "
                           f"publish it with --to timm")
    preprocess = preprocess if preprocess is not None else default_preprocess(model, name)
    processor, note, exact = hf_preprocessor(preprocess, config, HF_CLASSES[family][2])
    class_names = class_names if class_names is not None else getattr(model, "class_names", None)
    if family != "deit":
        class_names = None  # an embedding (CLIP's projection) or features: no labels
    elif class_names and len(class_names) != config.num_classes:
        raise WeightsError(f"{len(class_names)} class names for a head of {config.num_classes} classes")
    values = family_config(model, family, class_names)
    return FolderExport(values, family_tensors(model, family), architecture, note, exact, format="huggingface",
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
    "dinov3_vit": ("DINOv3ViTModel", "dinov3_vit", "DINOv3ViTImageProcessor"),
}


def hf_family(config):
    """Which transformers class a `ViTConfig` goes out as (a key of HF_CLASSES): the distilled
    DeiT, SigLIP (no class token, the MAP head), CLIP (a LayerNorm before the layers), DINOv2
    (layer scale or the SwiGLU MLP; with registers its own class), DINOv3 (any RoPE: what DINOv3ViTModel
    cannot compute is then refused), else the plain ViT."""
    if config.rope_kind is not None:
        return "dinov3_vit"
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
    if config.norm != "layernorm":
        refusals.append(f"norm {config.norm!r} ({why}'s norms are LayerNorms)")
    if not config.final_norm:
        refusals.append(f"final_norm False ({why} normalises the tokens after the last layer)")
    if config.pool_include_prefix:
        refusals.append(f"pool_include_prefix True ({why} pools the patch tokens alone)")
    return refusals


def _expect(config, field, value, why, refusals):
    if getattr(config, field) != value:
        refusals.append(f"{field} {getattr(config, field)!r} ({why})")


def family_refusals(model, family):
    """What transformers' class of `family` cannot compute of `model` (phrases)."""
    config = model.config
    cls = HF_CLASSES[family][0]
    if family == "dinov3_vit":
        return dinov3_refusals(model)
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


# ViTConfig fields DINOv3ViTModel computes at one value only: (value, what it does)
DINOV3_FIXED = (
    ("rope_kind", "dinov3", "it computes DINOv3's RoPE (patch centres in [-1, 1]), not axial or mixed RoPE"),
    ("rope_rotate_half", True, "its RoPE pairs channel i with i + d/2"),
    ("rope_grid_indexing", "ij", "its RoPE coordinates are (row, column)"),
    ("rope_grid_offset", 0.0, "its RoPE coordinates are the patch centres"),
    ("rope_ref_grid", None, "its RoPE coordinates are not rescaled to a reference grid"),
    ("absolute_position_embedding", "none", "it adds no position embedding to the tokens"),
    ("class_token", True, "it has a class token"),
    ("distilled", False, "it has no distillation token"),
    ("pre_norm", False, "it has no LayerNorm before the layers"),
    ("final_norm", True, "it normalises every token after the last layer"),
    ("attention_norm", False, "its attention has no LayerNorm before the projection (EVA-02 CLIP's)"),
    ("mlp_norm", False, "its MLP has no LayerNorm inside (EVA-02's)"),
    ("pool", "cls", "its pooler_output is the class token"),
    ("representation_size", None, "it has no pre-logits layer"),
    ("backbone_layers", None, "it has no ResNet"),
    ("num_classes", 0, "it has no head: its output is the embedding"),
)


def dinov3_refusals(model):
    """What transformers' DINOv3ViTModel cannot compute of `model` (phrases)."""
    config = model.config
    refusals = [f"{field} {getattr(config, field)!r} ({why})" for field, value, why in DINOV3_FIXED
                if getattr(config, field) != value]
    if config.uses_fc_norm:
        refusals.append("a LayerNorm after pooling (fc_norm): DINOv3ViTModel normalises before reading the class "
                        "token")
    if config.mlp == "standard" and config.gelu != "exact":
        refusals.append(f"gelu {config.gelu!r} (the plain MLP is written with hidden_act 'gelu', the exact one)")
    elif config.mlp not in ("standard", "swiglu_split"):
        refusals.append(f"mlp {config.mlp!r} (DINOv3ViTModel's MLP is Linear, GELU, Linear or the gated "
                        f"gate_proj / up_proj / down_proj)")
    if config.qk_scale is not None and not math.isclose(config.qk_scale, (config.embed_dim // config.num_heads) ** -0.5,
                                                        rel_tol=1e-6):
        refusals.append(f"qk_scale {config.qk_scale!r} (DINOv3ViTModel scales q.k by head_dim^-0.5)")
    if config.qkv == "fused" and config.qkv_bias:
        bias = to_numpy(model.state_dict()["encoder.layers.0.attn.qkv.bias"])
        if any(np.any(to_numpy(model.state_dict()[f"encoder.layers.{index}.attn.qkv.bias"])[len(bias) // 3:
                                                                                             2 * len(bias) // 3])
               for index in range(config.depth)):
            refusals.append("a bias on k (the k third of qkv.bias is not zero; this project reads DINOv3 folders "
                            "without key_bias)")
    return refusals


def _dinov3_state(model):
    """Our state dict with q, k and v as three projections (`SeparateQKV`'s names), whatever the
    model's qkv layout, and layer scale ones where the model has none: what hf_dinov3.py reads."""
    config = model.config
    state = {name: to_numpy(value) for name, value in model.state_dict().items()}
    width = config.embed_dim
    for index in range(config.depth):
        at = f"encoder.layers.{index}.attn.qkv."
        if config.qkv in ("fused", "fused_qv_bias"):
            weight = state.pop(at.rstrip(".") + ".weight")  # [in, 3 out]
            bias = state.pop(at.rstrip(".") + ".bias", None)
            for part, column in zip("qkv", range(3)):
                state[f"{at}{part}_proj.weight"] = weight[:, column * width:(column + 1) * width]
            if config.qkv == "fused_qv_bias":
                state[f"{at}q_proj.bias"], state[f"{at}v_proj.bias"] = state.pop(at + "q_bias"), state.pop(at + "v_bias")
            elif bias is not None:  # the k third zero (dinov3_refusals)
                state[f"{at}q_proj.bias"], state[f"{at}v_proj.bias"] = bias[:width], bias[2 * width:]
        for branch in (1, 2):
            state.setdefault(f"encoder.layers.{index}.ls{branch}.gamma", np.ones(width, "float32"))
    return state


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


def _family_rules(family, config):
    """(rules, prefix, top rules) of `family`'s reader (hf_*.py), which its class's folder is
    written by, read backwards."""
    if family == "deit":
        return hf_deit.RULES, "deit.", hf_deit.TOP_RULES
    if family in ("dinov2", "dinov2_with_registers"):
        mlp_rules = hf_dinov2.SWIGLU_RULES if config.mlp == "swiglu" else hf_dinov2.MLP_RULES
        return hf_dinov2.BODY_RULES + mlp_rules, "", ()
    if family == "clip_projection":
        return hf_clip.RULES, "vision_model.", hf_clip.TOP_RULES
    if family == "clip":
        return hf_clip.RULES, "", ()
    return hf_siglip.RULES, "", ()


def family_tensors(model, family):
    """{transformers name: numpy array in PyTorch's layout} of `model` for `family`'s class."""
    config = model.config
    if family == "dinov3_vit":
        mlp = hf_dinov3.GATED_MLP_RULES if config.mlp == "swiglu_split" else hf_dinov3.MLP_RULES
        tensors = tensors_by_rules(_dinov3_state(model), hf_dinov3.BODY_RULES + mlp, "", (),
                                   _unnamed("DINOv3ViTModel"))
        if "embeddings.patch_embeddings.bias" not in tensors:
            raise WeightsError("no patch projection bias: transformers' DINOv3ViTModel has one; publish with --to timm")
        # masked image modelling's token: unused by the forward, zeros so nothing is missing
        tensors["embeddings.mask_token"] = np.zeros((1, 1, config.embed_dim), "float32")
        return tensors
    state = {name: to_numpy(value) for name, value in model.state_dict().items()}
    if family in ("clip", "clip_projection"):
        state.pop("patch_embed.patch_embedding.bias", None)  # zero (checked): CLIP's patch embedding has no bias
    rules, prefix, top_rules = _family_rules(family, config)
    tensors = tensors_by_rules(state, rules, prefix, top_rules, _unnamed(HF_CLASSES[family][0]))
    dtype = state[POSITION_EMBEDDING].dtype
    if family in ("clip", "clip_projection", "siglip"):
        if not config.qkv_bias:  # transformers' q, k and v always have a bias: zeros compute the same
            for index in range(config.depth):
                for part in "qkv":
                    tensors[f"{prefix}encoder.layers.{index}.self_attn.{part}_proj.bias"] = np.zeros(config.embed_dim,
                                                                                                       dtype)
        return tensors
    if family == "dinov2_with_registers":  # our class token holds its position row (no_embed_class): unfold
        positions = tensors["embeddings.position_embeddings"]
        tensors["embeddings.position_embeddings"] = np.ascontiguousarray(
            np.concatenate([np.zeros_like(positions[:, :1]), positions], axis=1))
    if family != "deit":  # masked image modelling's token: unused by the forward, zeros so nothing is missing
        tensors["embeddings.mask_token"] = np.zeros((1, config.embed_dim), dtype=dtype)
    if f"{prefix}embeddings.patch_embeddings.projection.bias" not in tensors:
        raise WeightsError(f"no patch projection bias: transformers' {HF_CLASSES[family][0]} has one; publish "
                           f"with --to timm")
    return tensors


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
    if family == "dinov3_vit":
        return dinov3_config(model)
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


def dinov3_config(model):
    """config.json of transformers' DINOv3ViTModel (the keys hf_dinov3_config.py reads back)."""
    config = model.config
    gated = config.mlp == "swiglu_split"
    hidden = to_numpy(model.state_dict()["encoder.layers.0.mlp." + ("fc1_g" if gated else "fc1") + ".weight"]).shape[1]
    has_bias = config.qkv in ("fused_qv_bias",) or config.qkv_bias
    return {"architectures": ["DINOv3ViTModel"], "model_type": "dinov3_vit", "hidden_size": config.embed_dim,
            "num_hidden_layers": config.depth, "num_attention_heads": config.num_heads, "intermediate_size": hidden,
            "hidden_act": "silu" if gated else "gelu", "use_gated_mlp": gated, "layer_norm_eps": config.layer_norm_epsilon,
            "rope_theta": float(config.rope_temperature if config.rope_temperature is not None else 100.0),
            "image_size": config.image_size, "patch_size": config.patch_size, "num_channels": config.in_channels,
            "num_register_tokens": config.register_tokens, "query_bias": has_bias, "key_bias": False,
            "value_bias": has_bias, "proj_bias": True, "mlp_bias": True,
            "layerscale_value": float(config.layer_scale if config.layer_scale is not None else 1.0),
            "attention_dropout": 0.0, "drop_path_rate": 0.0, "initializer_range": 0.02, "apply_layernorm": True,
            "dtype": "float32"}
