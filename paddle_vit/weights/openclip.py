"""OpenAI CLIP and OpenCLIP image towers: the ``visual.*`` tensors of a CLIP state dict (OpenAI's
released files as `open_clip` reads them, OpenCLIP's ``open_clip_pytorch_model.bin`` /
``.safetensors``), or a tower saved alone (the same names without ``visual.``).

Names: ``conv1`` (the patch projection, no bias), ``class_embedding`` [D], ``positional_embedding``
[1 + N, D], ``ln_pre``, ``transformer.resblocks.N.{ln_1, attn.in_proj_weight/in_proj_bias,
attn.out_proj, ln_2, mlp.c_fc, mlp.c_proj}`` (and ``ls_1``/``ls_2`` where a model has layer
scale), ``ln_post`` and ``proj`` [D, E], the projection into the joint image-text space. The
text tower's tensors beside them (``transformer.*`` at the top level, ``token_embedding``,
``text_projection``, ``logit_scale``, ...) are skipped. ``in_proj_weight`` is [3 D, D], rows q |
k | v, timm's order.

How `open_clip` computes the tower: LayerNorm epsilon 1e-5, ``ln_pre`` before the blocks, the
class token's output through ``ln_post`` and then ``@ proj``: the embedding, which is this
ViT's head (weight ``proj``, bias zero; num_classes = E), as timm converts these files. OpenAI's
weights use QuickGELU and OpenCLIP's mostly exact GELU: the file does not say which, nor its head
count (OpenAI's: width / 64), so the model name does (``vit_base_patch16_clip_quickgelu_224`` or
``vit_base_patch16_clip_224``). Its eval transform is open_clip's ``image_transform``: the
shorter side resized to the image size (bicubic), a centre crop, then RGB (an RGBA image is
resized with its alpha, as PIL does, before the alpha is dropped), OpenAI's mean and std.
"""
import numpy as np

from ..preprocess import openclip as openclip_preprocess
from .family import POSITION_EMBEDDING, CheckpointFamily, ConvertedCheckpoint, Implied
from .timm import rename

_BLOCK = r"transformer\.resblocks\.(\d+)\."
RENAMES = [
    (r"conv1\.weight", "patch_embed.patch_embedding.weight"),
    (r"positional_embedding", POSITION_EMBEDDING),
    (r"ln_pre\.(weight|bias)", r"encoder.norm_pre.\1"),
    (_BLOCK + r"ln_1\.(weight|bias)", r"encoder.layers.\1.norm1.\2"),
    (_BLOCK + r"attn\.in_proj_(weight|bias)", r"encoder.layers.\1.attn.qkv.\2"),
    (_BLOCK + r"attn\.out_proj\.(weight|bias)", r"encoder.layers.\1.attn.proj.\2"),
    (_BLOCK + r"ln_2\.(weight|bias)", r"encoder.layers.\1.norm2.\2"),
    (_BLOCK + r"mlp\.c_fc\.(weight|bias)", r"encoder.layers.\1.mlp.fc1.\2"),
    (_BLOCK + r"mlp\.c_proj\.(weight|bias)", r"encoder.layers.\1.mlp.fc2.\2"),
    (_BLOCK + r"ls_(1|2)\.gamma", r"encoder.layers.\1.ls\2.gamma"),
    (r"ln_post\.(weight|bias)", r"encoder.norm.\1"),
]


def tower_prefix(arrays):
    """"visual." for a whole CLIP state dict, "" for an image tower saved alone, None for neither."""
    if "visual.class_embedding" in arrays and "visual.conv1.weight" in arrays:
        return "visual."
    if "class_embedding" in arrays and "conv1.weight" in arrays:
        return ""
    return None


class OpenClipFamily(CheckpointFamily):
    name = "openclip"
    title = "OpenAI CLIP / OpenCLIP image tower (a CLIP state dict's visual.*)"
    example = "visual.class_embedding, visual.conv1.weight, visual.transformer.resblocks.0.attn.in_proj_weight"
    resample = "bicubic"
    resample_source = "open_clip's resize_pos_embed (bicubic, align_corners=False)"

    def detect(self, checkpoint):
        return tower_prefix(checkpoint.arrays) is not None

    def convert(self, checkpoint):
        """The tower's tensors in our names: Linear weights transposed, the class embedding and
        position embedding given their batch axis, ``proj`` the head (already [in, out])."""
        arrays, prefix = checkpoint.arrays, tower_prefix(checkpoint.arrays)
        tower = {name[len(prefix):]: array for name, array in arrays.items() if name.startswith(prefix)}
        class_embedding, projection = tower.pop("class_embedding"), tower.pop("proj", None)
        if "positional_embedding" in tower:
            tower["positional_embedding"] = tower["positional_embedding"].reshape(1, -1, class_embedding.shape[-1])
        converted = rename(tower, transpose=True, family=self.name, rules=RENAMES, description=checkpoint.description)
        tensors = converted.tensors
        origin = {ours: (prefix + name, shape) for ours, (name, shape) in converted.origin.items()}
        tensors["patch_embed.class_token"] = np.asarray(class_embedding).reshape(1, 1, -1)
        origin["patch_embed.class_token"] = (prefix + "class_embedding", class_embedding.shape)
        if projection is not None:
            tensors["head.weight"] = np.ascontiguousarray(projection)  # x @ proj: Paddle's [in, out] as it is
            tensors["head.bias"] = np.zeros(projection.shape[1], projection.dtype)  # the projection has none
            origin["head.weight"] = origin["head.bias"] = (prefix + "proj", projection.shape)
        unknown = [prefix + name for name in converted.unknown]
        skipped = [name for name in arrays if not name.startswith(prefix)]  # the text tower
        return ConvertedCheckpoint(self.name, tensors, origin, unknown, skipped)

    def head_is_projection(self, checkpoint, converted):
        return "head.weight" in converted.tensors  # proj: the image embedding

    def implied_options(self, checkpoint, converted):
        return {"layer_norm_epsilon": Implied(1e-5, "open_clip's LayerNorm epsilon (PyTorch's default)"),
                "pre_norm": Implied(True, "ln_pre: a LayerNorm before the blocks"),
                "qk_scale": Implied(None, "nn.MultiheadAttention scales q.k by head_dim^-0.5"),
                "pool": Implied("cls", "open_clip's tower embeds the class token's output"),
                "pos_embed_resample": Implied(self.resample, self.resample_source)}

    def preprocessing(self, checkpoint):
        return openclip_preprocess.hint()


FAMILY = OpenClipFamily()
