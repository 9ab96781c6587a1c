"""Meta's own DINOv3 state dicts (facebookresearch/dinov3, its `DinoVisionTransformer`): the
``.pth`` files its hub code downloads (``dinov3_vits16_pretrain_lvd1689m-08c60483.pth``,
``dinov3_vitsplus...``, ``vitb16``, ``vitl16``, ``vith16plus``, ``vit7b16``), or their tensors
saved as ``.safetensors``.

Names: ``cls_token``, ``storage_tokens`` (4 registers), ``mask_token`` (masked pre-training only:
skipped), ``patch_embed.proj``, ``rope_embed.periods`` (a buffer: checked, not loaded),
``blocks.N.{norm1, attn.qkv.weight, attn.qkv.bias, attn.qkv.bias_mask, attn.proj, ls1.gamma, norm2,
mlp.fc1/fc2 (ViT-S/B/L) or mlp.w1/w2/w3 (the SwiGLU of S+/H+/7B), ls2.gamma}``, ``norm``.
Linear weights are PyTorch's [out, in], transposed; the q/k/v rows are (3, heads, head_dim),
timm's order.

How Meta's code computes them (dinov3/models/vision_transformer.py, dinov3/layers/):
- the q/k/v bias is a ``LinearKMaskedBias``: ``bias * bias_mask``, the mask zero on the k third.
  So is it read: q and v thirds (times their mask) into this ViT's q_bias / v_bias, the k third
  dropped once it is zero after masking; a k bias that would be added is refused. The 7B has no
  q/k/v bias at all;
- ``w1`` is SwiGLU's gate, ``w2`` its value, ``w3`` the way back: silu(w1 x) * w2 x;
- RoPE: patch centres in [-1, 1] per axis, periods base ** (2 i / (d / 2)) (base 100 in every
  release), rotate-half pairs; the file's periods give the base and must be of that form;
- LayerNorm epsilon 1e-5 (``norm_layer="layernormbf16"`` in every released backbone), exact GELU,
  q.k scaled by head_dim ** -0.5, no position embedding added, layer scale on both branches;
- ``forward(x)`` is ``x_norm_clstoken``, the class token after the final norm (``head`` is
  ``nn.Identity``): this ViT with pool "cls", no fc_norm, num_classes 0, whose ``forward_features``
  are the normed tokens [class, storage, patches].

``local_cls_norm`` (ViT-7B and the satellite ViT-L: ``untie_global_and_local_cls_norm``) is applied
only in training, to local crops: skipped. ``cls_norm`` (``untie_cls_and_patch_norms``: the class and
storage tokens normed apart from the patches) is a computation this ViT does not build: refused.
"""
import math

import numpy as np

from ..errors import WeightsError
from .family import CheckpointFamily, Implied
from .timm import has_meta_dinov3_names, rename

_BLOCK = r"blocks\.(\d+)\."
RENAMES = [
    (r"cls_token", "patch_embed.class_token"),
    (r"storage_tokens", "patch_embed.register_tokens"),
    (r"patch_embed\.proj\.(weight|bias)", r"patch_embed.patch_embedding.\1"),
    (_BLOCK + r"(norm1|norm2|attn\.qkv|attn\.proj|mlp\.fc1|mlp\.fc2)\.(weight|bias)", r"encoder.layers.\1.\2.\3"),
    (_BLOCK + r"(ls1|ls2)\.gamma", r"encoder.layers.\1.\2.gamma"),
    (_BLOCK + r"mlp\.w1\.(weight|bias)", r"encoder.layers.\1.mlp.fc1_g.\2"),
    (_BLOCK + r"mlp\.w2\.(weight|bias)", r"encoder.layers.\1.mlp.fc1_x.\2"),
    (_BLOCK + r"mlp\.w3\.(weight|bias)", r"encoder.layers.\1.mlp.fc2.\2"),
    (r"norm\.(weight|bias)", r"encoder.norm.\1"),
]
PERIODS = "rope_embed.periods"
SKIPPED = ("mask_token",)
SKIPPED_PREFIXES = ("local_cls_norm.",)
REFUSED = {"cls_norm.": "a norm of its own for the class and storage tokens (untie_cls_and_patch_norms)"}
EPSILON = 1e-5  # norm_layer "layernormbf16", dinov3/hub/backbones.py


def _qkv_biases(arrays, description):
    """{our name: (array, origin)} of the q and v biases of every block, from ``attn.qkv.bias``
    times its ``bias_mask`` (Meta's LinearKMaskedBias); the k third must come out zero."""
    biases = {}
    for name in sorted(arrays):
        if not name.endswith(".attn.qkv.bias"):
            continue
        layer = name.split(".")[1]
        bias = np.asarray(arrays[name], "float32")
        mask_name = name + "_mask"
        if bias.ndim != 1 or bias.shape[0] % 3:
            raise WeightsError(f"{description}: {name} has shape {list(bias.shape)}; expected [3 D]")
        masked = bias * np.asarray(arrays[mask_name], "float32") if mask_name in arrays else bias
        width = bias.shape[0] // 3
        k_part = masked[width: 2 * width]
        if np.any(k_part != 0):
            why = f"its {mask_name} does not mask it" if mask_name in arrays else f"and there is no {mask_name}"
            raise WeightsError(f"{description}: {name} has a non-zero k part (max |k bias| "
                               f"{float(np.nanmax(np.abs(k_part))):.3g}) and {why}; DINOv3's code never adds a k "
                               f"bias (LinearKMaskedBias), nor does this ViT")
        where = f"{name} * {mask_name}" if mask_name in arrays else name
        biases[f"encoder.layers.{layer}.attn.qkv.q_bias"] = (masked[:width], (f"{where} [q third]", bias.shape))
        biases[f"encoder.layers.{layer}.attn.qkv.v_bias"] = (masked[2 * width:], (f"{where} [v third]", bias.shape))
    return biases


def rope_base(periods, description):
    """The base of DINOv3's RoPE periods base ** (2 i / (d / 2)) = base ** (i / n), i < n = d / 4;
    a WeightsError naming the tensor when `periods` are not of that form (Meta's min_period /
    max_period option, or a damaged file). One period says nothing of the base: 100, the releases'."""
    periods = np.asarray(periods, "float64")
    count = periods.shape[0] if periods.ndim == 1 else 0
    if count == 0 or not np.all(np.isfinite(periods)) or np.any(periods <= 0):
        raise WeightsError(f"{description}: {PERIODS} is not a vector of positive periods (shape "
                           f"{list(periods.shape)})")
    base = 100.0 if count == 1 else periods[-1] ** (count / (count - 1))
    if abs(base - round(base)) < 1e-4 * base:
        base = float(round(base))
    ours = np.float32(base) ** (2.0 * np.arange(count, dtype="float32") / (2 * count))  # as rope.DinoV3Rope
    if not np.allclose(periods, ours, rtol=1e-5, atol=0):
        raise WeightsError(f"{description}: {PERIODS} = {np.round(periods, 4).tolist()} are not DINOv3's "
                           f"base ** (4 i / head_dim) (closest: base {base:.6g}, {np.round(ours, 4).tolist()}), "
                           f"the only periods this ViT computes")
    return base


def convert_dinov3(arrays, description):
    """Meta's names -> ours; see the module docstring for what is skipped, checked and refused."""
    for name in sorted(arrays):
        for prefix, what in REFUSED.items():
            if name.startswith(prefix):
                raise WeightsError(f"{description}: {name} is {what}, which this ViT does not build")
    skipped = [name for name in arrays if name in SKIPPED or name.startswith(SKIPPED_PREFIXES)
               or name == PERIODS or name.endswith((".attn.qkv.bias", ".attn.qkv.bias_mask"))]
    if PERIODS in arrays:
        rope_base(arrays[PERIODS], description)
    biases = _qkv_biases(arrays, description)
    converted = rename({name: array for name, array in arrays.items() if name not in skipped}, transpose=True,
                       family=FAMILY_NAME, rules=RENAMES, description=description)
    for ours, (array, origin) in biases.items():
        converted.tensors[ours] = np.ascontiguousarray(array)
        converted.origin[ours] = origin
    # the biases are read into q_bias / v_bias above; the rest is outside the model
    converted.skipped = [name for name in skipped if not name.endswith(".attn.qkv.bias")]
    return converted


FAMILY_NAME = "dinov3"


class Dinov3Family(CheckpointFamily):
    name = FAMILY_NAME
    title = "Meta's DINOv3 DinoVisionTransformer (.pth state dicts of facebookresearch/dinov3)"
    example = "storage_tokens, rope_embed.periods, blocks.0.attn.qkv.bias_mask, blocks.0.ls1.gamma"
    resample = "bicubic_antialias"  # no position embedding to resample: RoPE is computed per input
    resample_source = "none: DINOv3 adds no position embedding"

    def detect(self, checkpoint):
        return has_meta_dinov3_names(checkpoint.arrays)

    def convert(self, checkpoint):
        return convert_dinov3(checkpoint.arrays, checkpoint.description)

    def implied_options(self, checkpoint, converted):
        arrays, tensors = checkpoint.arrays, converted.tensors
        code = "DINOv3's DinoVisionTransformer"
        options = {
            "position_embedding": Implied("none", f"{code} adds no position embedding"),
            "rope": Implied("dinov3", f"{code}'s RopePositionEmbedding: patch centres in [-1, 1]"),
            "rope_rotate_half": Implied(True, f"{code}'s rope_rotate_half pairs channel i with i + d/2"),
            "rope_grid_indexing": Implied("ij", f"{code}'s coordinates are (row, column)"),
            "rope_grid_offset": Implied(0.0, f"{code}'s coordinates are the patch centres"),
            "dynamic_img_size": Implied(True, f"{code} computes its RoPE for any input's patch grid"),
            "layer_norm_epsilon": Implied(EPSILON, "DINOv3's released backbones use norm_layer 'layernormbf16' "
                                                   "(LayerNorm eps 1e-5)"),
            "gelu": Implied("exact", f"{code}'s Mlp uses nn.GELU (erf)"),
            "qk_scale": Implied(None, f"{code} scales q.k by head_dim^-0.5"),
            "pool": Implied("cls", f"{code}'s forward returns x_norm_clstoken, the class token after the final norm"),
            "fc_norm": Implied(False, f"{code} has no norm after pooling"),
            "num_classes": Implied(0, f"{code}'s head is nn.Identity"),
        }
        if PERIODS in arrays:
            periods = np.asarray(arrays[PERIODS])
            base = rope_base(periods, checkpoint.description)
            options["rope_temperature"] = Implied(base, f"{PERIODS}: periods {base:g} ** (4 i / head_dim)")
            width = tensors.get("patch_embed.class_token")
            if width is not None and width.shape[-1] % (4 * periods.shape[0]) == 0:
                heads = width.shape[-1] // (4 * periods.shape[0])
                options["num_heads"] = Implied(heads, f"{PERIODS}: {periods.shape[0]} periods, heads of "
                                                      f"{4 * periods.shape[0]} channels")
        registers = tensors.get("patch_embed.register_tokens")
        options["register_tokens"] = Implied(int(registers.shape[1]) if registers is not None else 0,
                                             "storage_tokens: register tokens" if registers is not None
                                             else "no storage_tokens")
        layer_scale = "encoder.layers.0.ls1.gamma" in tensors
        options["layer_scale"] = Implied(1e-5 if layer_scale else None, "blocks.N.ls1/ls2.gamma: layer scale"
                                         if layer_scale else "no blocks.N.ls1.gamma: no layer scale")
        swiglu = "encoder.layers.0.mlp.fc1_g.weight" in tensors
        options["mlp"] = Implied("swiglu_split" if swiglu else "standard", "blocks.N.mlp.w1/w2/w3: SwiGLU (silu(w1 x) "
                                 "* w2 x, then w3)" if swiglu else "blocks.N.mlp.fc1/fc2: a Linear, GELU, Linear MLP")
        if swiglu:
            options["mlp_norm"] = Implied(False, "DINOv3's SwiGLUFFN has no norm inside")
        return options


FAMILY = Dinov3Family()
