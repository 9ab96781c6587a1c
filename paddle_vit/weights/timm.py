"""timm `VisionTransformer` state dicts (.safetensors, .pth, .bin), the hub files most people have.

Names: ``cls_token``, ``pos_embed``, ``patch_embed.proj``, ``blocks.N.{norm1,attn.qkv,attn.proj,
norm2,mlp.fc1,mlp.fc2}``, ``norm`` (or ``fc_norm`` for average pooling), ``head``; today's ViTs add
``reg_token``, ``dist_token`` and ``head_dist``, ``blocks.N.ls1.gamma`` (layer scale), ``norm_pre``
(CLIP), ``attn_pool.*`` (SigLIP's MAP head), ``patch_embed.norm`` (AIMv2), ``blocks.N.attn.norm``
and ``blocks.N.mlp.norm`` (BEiT-3). Linear weights
are PyTorch's [out, in]; PaddleClas and PLSC use the same names in Paddle's [in, out] layout
(paddleclas.py), so the layout is decided once per checkpoint by `linear_layout`.

timm computes them with exact GELU, LayerNorm epsilon 1e-6 and q.k scaled by head_dim^-0.5
(the defaults), and resamples a position embedding in ``checkpoint_filter_fn`` with
``resample_abs_pos_embed``: bicubic with antialias.
"""
import re

import numpy as np

from ..errors import WeightsError
from .family import POSITION_EMBEDDING, CheckpointFamily, ConvertedCheckpoint, Implied
from .folders import describe_config, get_registered_config, timm_class_names

_BACKBONE = r"stem\.(?:conv|norm)|stages\.\d+\.blocks\.\d+\.(?:downsample\.conv|downsample\.norm|conv[123]|norm[123])"
# timm's ResNet-D of its vit_*_resnet26d / resnet50d hybrids (models/resnet_d.py): our names are
# timm's, the BatchNorm running statistics too (buffers); num_batches_tracked is not read (`convert`)
_RESNET_D = r"conv1\.[0136]|conv1\.4|bn1|layer\d+\.\d+\.(?:conv[123]|bn[123]|downsample\.[12])"
RESNET_D_BACKBONE = (rf"patch_embed\.backbone\.({_RESNET_D})\.(weight|bias|running_mean|running_var)",
                     r"patch_embed.backbone.\1.\2")
# a hybrid's ResNet-v2: our names are timm's, but for the tiny hybrid's stem-only backbone
STEM_ONLY_BACKBONE = (r"patch_embed\.backbone\.(conv|norm)\.(weight|bias)", r"patch_embed.backbone.stem.\1.\2")
# timm < 0.9 kept the in21k representation layer; timm 1.0 has none to publish to
OLD_PRE_LOGITS = (r"pre_logits\.fc\.(weight|bias)", r"pre_logits.fc.\1")
# timm's names -> ours; read backwards (renaming.py) by publish_timm.py
RENAMES = [
    (r"cls_token", "patch_embed.class_token"),
    STEM_ONLY_BACKBONE,
    (rf"patch_embed\.backbone\.({_BACKBONE})\.(weight|bias)", r"patch_embed.backbone.\1.\2"),
    RESNET_D_BACKBONE,
    (r"pos_embed", POSITION_EMBEDDING),
    (r"patch_embed\.proj\.(weight|bias)", r"patch_embed.patch_embedding.\1"),
    (r"blocks\.(\d+)\.(norm1|norm2|attn\.qkv|attn\.proj|mlp\.fc1|mlp\.fc2)\.(weight|bias)", r"encoder.layers.\1.\2.\3"),
    (r"norm\.(weight|bias)", r"encoder.norm.\1"),
    # today's ViTs (DeiT III, distilled DeiT, DINOv2, CLIP, SigLIP): the options' own tensors
    (r"reg_token", "patch_embed.register_tokens"),
    (r"dist_token", "patch_embed.distillation_token"),
    (r"blocks\.(\d+)\.(ls1|ls2)\.gamma", r"encoder.layers.\1.\2.gamma"),
    (r"norm_pre\.(weight|bias)", r"encoder.norm_pre.\1"),
    (r"attn_pool\.(latent|(?:q|kv|proj|norm|mlp\.fc1|mlp\.fc2)\.(?:weight|bias))", r"attn_pool.\1"),
    (r"head_dist\.(weight|bias)", r"head_dist.\1"),
    (r"fc_norm\.(weight|bias)", r"fc_norm.\1"),
    OLD_PRE_LOGITS,
    (r"head\.(weight|bias)", r"head.\1"),
    # AIMv2: the norm of the patch tokens (timm's PatchEmbed with a norm_layer); BEiT-3's norms inside
    # the attention and the MLP are the Eva rules' attn.norm and mlp.norm below
    (r"patch_embed\.norm\.(weight|bias)", r"patch_embed.patch_norm.\1"),
    # the RoPE generation (timm's Eva class): q/v-only biases, three projections, a norm before the
    # output projection, layer scale as gamma_1/gamma_2, the split SwiGLU, mixed RoPE's frequencies
    (r"blocks\.(\d+)\.attn\.(q_bias|v_bias)", r"encoder.layers.\1.attn.qkv.\2"),
    (r"blocks\.(\d+)\.attn\.(q_proj|k_proj|v_proj)\.(weight|bias)", r"encoder.layers.\1.attn.qkv.\2.\3"),
    (r"blocks\.(\d+)\.attn\.norm\.(weight|bias)", r"encoder.layers.\1.attn.proj.norm.\2"),
    (r"blocks\.(\d+)\.gamma_(1|2)", r"encoder.layers.\1.ls\2.gamma"),
    (r"blocks\.(\d+)\.mlp\.(fc1_g|fc1_x|norm)\.(weight|bias)", r"encoder.layers.\1.mlp.\2.\3"),
    (r"rope\.freqs", "rope.frequencies"),
]


def has_timm_names(arrays):
    return any(name in ("cls_token", "pos_embed") or name.startswith(("blocks.", "patch_embed.proj."))
               for name in arrays) and not has_meta_dinov3_names(arrays)


# Meta's DINOv3 code shares timm's cls_token / blocks.N / patch_embed.proj names, with its own
# register tokens, RoPE buffer and masked k bias, and no position embedding: dinov3.py reads those
META_DINOV3_MARKS = ("storage_tokens", "rope_embed.periods")


def has_meta_dinov3_names(arrays):
    return "pos_embed" not in arrays and any(name in META_DINOV3_MARKS or name.endswith(".attn.qkv.bias_mask")
                                             for name in arrays)


# the Linear weights whose two sides always differ in a ViT, and which side is the token width D
# in PyTorch's [out, in] layout: qkv is [3 D, D], fc1 [hidden, D], fc2 [D, hidden]
_EVIDENCE = re.compile(r"blocks\.\d+\.(attn\.qkv|mlp\.fc1|mlp\.fc2)\.weight")


def linear_layout(arrays, description):
    """"torch" ([out, in], timm) or "paddle" ([in, out], PaddleClas/PLSC): the layout of every
    Linear weight of a checkpoint with timm's names, read off the token width D (the patch
    projection's output channels) against the q/k/v and MLP weights, whose two sides differ.
    Square matrices (attn.proj, a pre-logits layer) then follow the checkpoint's decision: a
    per-tensor "transpose where the shape does not fit" would load them wrong without a word."""
    width = None
    if "patch_embed.proj.weight" in arrays and arrays["patch_embed.proj.weight"].ndim == 4:
        width = arrays["patch_embed.proj.weight"].shape[0]
    elif "cls_token" in arrays:
        width = arrays["cls_token"].shape[-1]
    votes = {}
    for name, array in arrays.items():
        match = _EVIDENCE.fullmatch(name)
        if width is None or not match or array.ndim != 2 or array.shape[0] == array.shape[1]:
            continue
        torch_width_axis = 0 if match.group(1) == "mlp.fc2" else 1  # where D is in [out, in]
        if array.shape[torch_width_axis] == width and array.shape[1 - torch_width_axis] != width:
            votes.setdefault("torch", []).append(name)
        elif array.shape[1 - torch_width_axis] == width and array.shape[torch_width_axis] != width:
            votes.setdefault("paddle", []).append(name)
    if len(votes) == 2:
        raise WeightsError(f"{description} mixes Linear layouts: {votes['torch'][0]} is PyTorch's [out, in], "
                           f"{votes['paddle'][0]} Paddle's [in, out]; it was saved half converted")
    return next(iter(votes), None)


def rename(arrays, extra_renames=(), transpose=False, family="timm", rules=None, description="the checkpoint",
           two_names_hint=""):
    """Apply `rules` (default: `extra_renames` then timm's `RENAMES`); transpose every 2-D Linear
    weight when asked. Two checkpoint names that map to one of ours are an error, never a silent
    choice (`two_names_hint` says where such pairs come from)."""
    tensors, origin, unknown = {}, {}, []
    rules = list(extra_renames) + RENAMES if rules is None else list(rules)
    for name, array in arrays.items():
        for pattern, replacement in rules:
            if re.fullmatch(pattern, name):
                ours = re.sub(pattern, replacement, name)
                break
        else:
            unknown.append(name)
            continue
        if ours in tensors:
            raise WeightsError(f"{description} holds both {origin[ours][0]} and {name}, two names for one "
                               f"tensor{two_names_hint}; keep one of them")
        # every 2-D weight of a ViT is a Linear's (torchvision's in_proj_weight has no dot)
        if transpose and name.endswith("weight") and array.ndim == 2:
            array = array.T
        tensors[ours] = np.ascontiguousarray(array)
        origin[ours] = (name, arrays[name].shape)
    return ConvertedCheckpoint(family, tensors, origin, unknown)


class TimmFamily(CheckpointFamily):
    name = "timm"
    title = "timm VisionTransformer"
    example = "cls_token, pos_embed, blocks.0.attn.qkv.weight [3D, D]"
    resample = "bicubic_antialias"
    resample_source = "timm's checkpoint_filter_fn (resample_abs_pos_embed)"

    def detect(self, checkpoint):
        arrays = checkpoint.arrays
        return has_timm_names(arrays) and linear_layout(arrays, checkpoint.description) in ("torch", None)

    def convert(self, checkpoint):
        """timm names -> ours; Linear weights transposed, the patch-embedding conv kept OIHW. A
        ResNet-D's BatchNorm counters (``num_batches_tracked``) are not read: eval mode computes
        with the running statistics, which the counter does not change."""
        counters = [name for name in checkpoint.arrays if name.endswith(".num_batches_tracked")]
        converted = rename({name: array for name, array in checkpoint.arrays.items() if name not in counters},
                           transpose=True)
        converted.skipped.extend(counters)
        return converted

    def implied_options(self, checkpoint, converted):
        options = {"qk_scale": Implied(None, "timm scales q.k by head_dim^-0.5")}
        config = self.hub_config(checkpoint)
        architecture = get_registered_config(config)
        if architecture is not None:  # a Hub folder of a registered name: what timm's entrypoint computes with
            name = config.values["architecture"]
            options["layer_norm_epsilon"] = Implied(architecture.layer_norm_epsilon,
                                                    f"timm's {name} LayerNorm epsilon")
            options["gelu"] = Implied(architecture.gelu, f"timm's {name} activation")
        elif "encoder.norm_pre.weight" in converted.tensors:  # a CLIP tower: its GELU only its name can say
            options["layer_norm_epsilon"] = Implied(1e-5, "timm's CLIP towers (norm_pre) use LayerNorm epsilon 1e-5")
        elif "patch_embed.patch_norm.weight" in converted.tensors:
            options["layer_norm_epsilon"] = Implied(1e-5, "timm's AIMv2 (a norm on the patch tokens) uses epsilon 1e-5")
        elif {"encoder.layers.0.mlp.norm.weight", "encoder.layers.0.mlp.fc1.weight"} <= set(converted.tensors):
            options["layer_norm_epsilon"] = Implied(1e-5, "timm's BEiT-3 (a LayerNorm inside the GELU MLP) uses "
                                                          "epsilon 1e-5")
        else:
            options["layer_norm_epsilon"] = Implied(1e-6, "timm's ViT LayerNorm epsilon")
            options["gelu"] = Implied("exact", "timm's ViT uses nn.GELU (erf)")
        if "patch_embed.backbone.stem.conv.weight" in converted.tensors:  # a ResNet-D has no standardisation
            options["backbone_style"] = Implied("timm", "timm's StdConv2dSame (eps 1e-8 in the square root) and "
                                                        "GroupNorm (eps 1e-5)")
        if config is not None:  # a timm Hub folder: its architecture, model_args and global_pool
            options.update(describe_config(config).options)
        return options

    def hub_config(self, checkpoint):
        """The `FolderConfig` of a timm Hub folder's config.json beside the weights, or None."""
        return checkpoint.config_of_kind("timm")

    def preprocessing(self, checkpoint):
        """timm's ``pretrained_cfg`` from the Hub folder's config.json (input_size,
        interpolation, crop_pct, crop_mode, mean, std), or None for weights without one."""
        config = self.hub_config(checkpoint)
        if config is None or not isinstance(config.values.get("pretrained_cfg"), dict):
            return None
        return {"pipeline": "timm", "config": dict(config.values["pretrained_cfg"]), "source": config.path}

    def class_names(self, checkpoint, num_classes):
        """``label_names`` of a timm Hub folder's config.json, else what the checkpoint records."""
        config = self.hub_config(checkpoint)
        names_ = timm_class_names(config, num_classes) if config is not None else None
        return names_ or super().class_names(checkpoint, num_classes)


FAMILY = TimmFamily()
