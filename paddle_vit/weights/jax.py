"""The original JAX/Flax checkpoints: google-research/vision_transformer ``.npz`` files (the
paper's released weights, in the numbering before and after flax Linen), and big_vision's.

Layout: the conv kernel is HWIO, Dense kernels [in, out], attention kernels split per head
(query/key/value [D, heads, head_dim], out [heads, head_dim, D]).

How `vit_jax` computes them, which is what a loaded file reproduces by default:
- ``MlpBlock`` calls flax's ``nn.gelu``, whose default is the tanh approximation
  (``approximate=True``): ``gelu="tanh"``. timm reads the same files with exact GELU, 2-4e-4
  away on the logits of the released models; ``gelu="exact"`` computes them as timm does.
- LayerNorm epsilon 1e-6 (flax's default), q.k scaled by head_dim^-0.5.
- Fine-tuning at another resolution: ``checkpoint.interpolate_posembed`` resizes the grid with
  ``scipy.ndimage.zoom(order=1)``, linear with the corners aligned (timm's npz loader uses
  bilinear without aligned corners instead; resample.py has both).
"""
import re

import numpy as np

from .family import POSITION_EMBEDDING, CheckpointFamily, ConvertedCheckpoint, Implied

PREFIXES = ("opt/target/", "params/img/", "params/", "")
BLOCK = re.compile(r"Transformer/encoderblock(?:_(\d+))?/(LayerNorm|MultiHeadDotProductAttention|MlpBlock)_(\d+)/"
                   r"(.+)")
TOP_LEVEL = {
    "embedding/bias": "patch_embed.patch_embedding.bias",
    "cls": "patch_embed.class_token",
    "Transformer/posembed_input/pos_embedding": POSITION_EMBEDDING,
    "pos_embedding": POSITION_EMBEDDING,  # big_vision
    "Transformer/encoder_norm/scale": "encoder.norm.weight",
    "Transformer/encoder_norm/bias": "encoder.norm.bias",
    "pre_logits/kernel": "pre_logits.fc.weight",
    "pre_logits/bias": "pre_logits.fc.bias",
    "head/kernel": "head.weight",
    "head/bias": "head.bias",
}


# a hybrid's ResNet-v2 (vit_jax/models_resnet.py): conv_root, gn_root, block{S}/unit{U}/{conv,gn}{1,2,3,_proj}
RESNET = re.compile(r"(conv_root|gn_root)/(kernel|scale|bias)|block(\d+)/unit(\d+)/(conv|gn)(1|2|3|_proj)/(kernel|scale|bias)")


def _resnet_name(match):
    """Our name of a ResNet parameter, or None when the role does not fit the layer."""
    if match.group(1):
        layer, role = ("stem.conv" if match.group(1) == "conv_root" else "stem.norm"), match.group(2)
    else:
        stage, unit, kind, number, role = match.group(3, 4, 5, 6, 7)
        part = {"conv": f"conv{number}", "gn": f"norm{number}"}[kind] if number != "_proj" else \
            {"conv": "downsample.conv", "gn": "downsample.norm"}[kind]
        layer = f"stages.{int(stage) - 1}.blocks.{int(unit) - 1}.{part}"
    if layer.split(".")[-1].startswith("conv") != (role == "kernel"):
        return None
    return f"patch_embed.backbone.{layer}.{'weight' if role in ('kernel', 'scale') else 'bias'}"


def convert_jax(state):
    """Original JAX/Flax ViT checkpoints (google-research/vision_transformer ``.npz``, and the
    big_vision variants timm also reads) -> ours.

    Key variants handled as timm's ``_load_weights`` does: a prefix ``opt/target/``, ``params/``
    or ``params/img/``; blocks numbered ``encoderblock_N`` or stacked along a leading axis in
    one ``encoderblock``; sublayers ``LayerNorm_0/MultiHeadDotProductAttention_1/LayerNorm_2/
    MlpBlock_3`` (the released files, numbered before flax Linen) or ``LayerNorm_0/
    MultiHeadDotProductAttention_0/LayerNorm_1/MlpBlock_0`` (Linen's per-type numbering, as
    `vit_jax` and big_vision save today).
    """
    prefix = next((p for p in PREFIXES if f"{p}embedding/kernel" in state), "")
    tensors, origin, unknown, skipped = {}, {}, [], []
    blocks = {}  # index -> {(kind, role): (array, checkpoint name)}

    def put(ours, array, name):
        tensors[ours] = np.ascontiguousarray(array)
        origin[ours] = (name, state[name].shape)

    for name, array in state.items():
        if not name.startswith(prefix):
            skipped.append(name)
            continue
        key = name[len(prefix):]
        if key == "embedding/kernel":
            if array.ndim != 4:
                unknown.append(name)
                continue
            put("patch_embed.patch_embedding.weight", array.transpose(3, 2, 0, 1), name)  # HWIO -> OIHW
        elif RESNET.fullmatch(key):
            ours = _resnet_name(RESNET.fullmatch(key))
            is_conv = ours is not None and ours.split(".")[-2].startswith("conv")
            if ours is None or (is_conv and array.ndim != 4):
                unknown.append(name)
            elif is_conv:
                put(ours, array.transpose(3, 2, 0, 1), name)  # HWIO -> OIHW
            else:  # GroupNorm scale / bias: [C], or [1, 1, 1, C] in files written before flax 0.3.6
                put(ours, array.reshape(-1), name)
        elif key in TOP_LEVEL:
            ours = TOP_LEVEL[key]
            if ours == "patch_embed.class_token":
                array = array.reshape(1, 1, -1)
            elif ours == POSITION_EMBEDDING and array.ndim == 2:
                array = array[None]
            put(ours, array, name)
        elif BLOCK.fullmatch(key):
            index, module, number, role = BLOCK.fullmatch(key).groups()
            if index is None:  # stacked layers: one array with a leading depth axis
                for layer, layer_array in enumerate(array):
                    _collect_block(blocks, layer, module, int(number), role, layer_array, name, unknown)
            else:
                _collect_block(blocks, int(index), module, int(number), role, array, name, unknown)
        else:
            unknown.append(name)

    for index, parts in sorted(blocks.items()):
        layer = f"encoder.layers.{index}."
        for (kind, role), (array, name) in parts.items():
            if kind in ("norm1", "norm2"):
                put(layer + f"{kind}.{'weight' if role == 'scale' else 'bias'}", array, name)
            elif kind in ("fc1", "fc2"):
                put(layer + f"mlp.{kind}.{'weight' if role == 'kernel' else 'bias'}", array, name)
            elif kind == "out":
                if role == "kernel":  # [heads, head_dim, D] -> [heads * head_dim, D]
                    put(layer + "attn.proj.weight", array.reshape(-1, array.shape[-1]), name)
                else:
                    put(layer + "attn.proj.bias", array, name)
        for role, ours in (("kernel", "attn.qkv.weight"), ("bias", "attn.qkv.bias")):
            found = [parts.get((part, role)) for part in ("query", "key", "value")]
            if all(found):
                if role == "kernel":  # 3 x [D, heads, head_dim] -> [D, 3 * heads * head_dim], (q|k|v) heads-major
                    fused = np.concatenate([array.reshape(array.shape[0], -1) for array, _ in found], axis=1)
                else:  # 3 x [heads, head_dim] -> [3 * heads * head_dim]
                    fused = np.concatenate([array.reshape(-1) for array, _ in found])
                tensors[layer + ours] = fused
                origin[layer + ours] = (found[0][1].replace("/query/", "/{query,key,value}/"), found[0][0].shape)
            else:
                unknown.extend(item[1] for item in found if item)
    return ConvertedCheckpoint("jax", tensors, origin, unknown, skipped)


def _collect_block(blocks, index, module, number, role, array, name, unknown):
    parts = blocks.setdefault(index, {})
    path = role.split("/")
    if module == "LayerNorm" and len(path) == 1 and path[0] in ("scale", "bias"):
        kind = "norm1" if number == 0 else "norm2"  # LayerNorm_2 (original) or LayerNorm_1 (big_vision)
    elif module == "MlpBlock" and len(path) == 2 and path[0] in ("Dense_0", "Dense_1"):
        kind = "fc1" if path[0] == "Dense_0" else "fc2"
        role = path[1]
    elif module == "MultiHeadDotProductAttention" and len(path) == 2 and path[0] in ("query", "key", "value", "out"):
        kind, role = path
    else:
        unknown.append(name)
        return
    if (kind, role) in parts or role not in ("scale", "bias", "kernel"):
        unknown.append(name)  # e.g. both LayerNorm_1 and LayerNorm_2 in one block
        return
    parts[(kind, role)] = (array, name)


class JaxFamily(CheckpointFamily):
    name = "jax"
    title = "original JAX .npz (vit_jax, big_vision)"
    example = "embedding/kernel, Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel"
    resample = "bilinear_align_corners"
    resample_source = "vit_jax's checkpoint.interpolate_posembed (scipy.ndimage.zoom, order=1)"

    def detect(self, checkpoint):
        return any(name.endswith("embedding/kernel") or name.startswith("Transformer/") or "/Transformer/" in name
                   for name in checkpoint.arrays)

    def convert(self, checkpoint):
        return convert_jax(checkpoint.arrays)

    def implied_options(self, checkpoint, converted):
        options = {} if "patch_embed.backbone.stem.conv.weight" not in converted.tensors else {
            "backbone_style": Implied("jax", "vit_jax's StdConv ((w - mean) / (std + 1e-5)) and flax's GroupNorm "
                                             "(eps 1e-6)")}
        return {**options, "gelu": Implied("tanh", "the JAX code's MlpBlock calls flax's nn.gelu, the tanh approximation"),
                "layer_norm_epsilon": Implied(1e-6, "flax's LayerNorm epsilon"),
                "qk_scale": Implied(None, "flax's attention scales q.k by head_dim^-0.5")}

    def preprocessing(self, checkpoint):
        """vit_jax's eval input pipeline: tf.image.resize to the model's size (bilinear, no
        antialias), then (x - 127.5) / 127.5."""
        return {"pipeline": "vit_jax"}


FAMILY = JaxFamily()
