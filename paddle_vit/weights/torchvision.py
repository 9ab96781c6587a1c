"""torchvision's own ViT (``torchvision.models.vit_b_16`` ... ``vit_h_14``): the state dict of its
``VisionTransformer``, as ``torch.save(vit_b_16(weights=...).state_dict(), PATH)`` writes it
(``.pth``), or saved as ``.safetensors``.

Names: ``conv_proj`` (the patch projection), ``class_token``, ``encoder.pos_embedding``,
``encoder.layers.encoder_layer_N.{ln_1, self_attention.in_proj_weight/in_proj_bias,
self_attention.out_proj, ln_2, mlp.0, mlp.3}``, ``encoder.ln``, and ``heads.head`` behind
``heads.pre_logits`` (Linear + tanh) where the model has a ``representation_size``. Files saved
before torchvision 0.14 name the MLP ``mlp.linear_1``/``mlp.linear_2``; torchvision's
``MLPBlock._load_from_state_dict`` renames them, and so are they read here. Linear weights are
PyTorch's [out, in]; ``in_proj_weight`` is ``nn.MultiheadAttention``'s [3 D, D], rows q | k | v
each heads-major: timm's qkv order, so it is transposed and nothing else.

How torchvision computes them: LayerNorm epsilon 1e-6 (``partial(nn.LayerNorm, eps=1e-6)``),
``nn.GELU()`` (exact), q.k scaled by head_dim^-0.5 (``nn.MultiheadAttention``), the class
token's output read by the head. At another resolution, ``interpolate_embeddings`` resizes the
grid bicubic with ``align_corners=True``, without antialias: the default for these files.
The published weights carry no class names (they are in the weights enum's ``meta``, not the
state dict). The ``conv_stem_configs`` variant (a convolution stem instead of the patch
projection) has no published weights and is not this ViT: it is refused by name.
"""
from ..errors import WeightsError
from .family import POSITION_EMBEDDING, CheckpointFamily, Implied
from .timm import rename

_LAYER = r"encoder\.layers\.encoder_layer_(\d+)\."
RENAMES = [
    (r"class_token", "patch_embed.class_token"),
    (r"conv_proj\.(weight|bias)", r"patch_embed.patch_embedding.\1"),
    (r"encoder\.pos_embedding", POSITION_EMBEDDING),
    (_LAYER + r"ln_1\.(weight|bias)", r"encoder.layers.\1.norm1.\2"),
    (_LAYER + r"self_attention\.in_proj_(weight|bias)", r"encoder.layers.\1.attn.qkv.\2"),
    (_LAYER + r"self_attention\.out_proj\.(weight|bias)", r"encoder.layers.\1.attn.proj.\2"),
    (_LAYER + r"ln_2\.(weight|bias)", r"encoder.layers.\1.norm2.\2"),
    (_LAYER + r"mlp\.(?:0|linear_1)\.(weight|bias)", r"encoder.layers.\1.mlp.fc1.\2"),  # linear_1: < 0.14
    (_LAYER + r"mlp\.(?:3|linear_2)\.(weight|bias)", r"encoder.layers.\1.mlp.fc2.\2"),
    (r"encoder\.ln\.(weight|bias)", r"encoder.norm.\1"),
    (r"heads\.pre_logits\.(weight|bias)", r"pre_logits.fc.\1"),
    (r"heads\.head\.(weight|bias)", r"head.\1"),
]
# names no other family writes: ours are encoder.layers.N, timm's cls_token / pos_embed
_OWN_NAMES = ("class_token", "encoder.pos_embedding")
_OWN_PREFIXES = ("conv_proj.", "encoder.layers.encoder_layer_", "heads.head.", "heads.pre_logits.")


def convert_torchvision(arrays, description):
    """torchvision names -> ours: Linear weights transposed to Paddle's [in, out], the patch
    projection kept OIHW. Two names for one tensor (``mlp.0`` beside ``mlp.linear_1``) are an
    error, not a silent choice."""
    if any(name.startswith("conv_proj.conv_") for name in arrays):
        raise WeightsError(f"{description}: its conv_proj is a convolution stem (torchvision's conv_stem_configs, "
                           f"{next(n for n in arrays if n.startswith('conv_proj.conv_'))}); the paddle-vit ViT "
                           f"embeds patches with one convolution (conv_proj.weight)")
    _check_layout(arrays, description)
    # every 2-D weight of this ViT is a Linear's [out, in]
    return rename(arrays, transpose=True, family="torchvision", rules=RENAMES, description=description,
                  two_names_hint=" (torchvision's MLP names before and after 0.14)")


def _check_layout(arrays, description):
    """torchvision writes PyTorch's [out, in] only; a file whose q/k/v projection is [D, 3 D]
    was converted to Paddle's layout by someone, and its square matrices (out_proj) cannot say
    which way they went: refused for the whole checkpoint, never guessed per tensor."""
    projection = arrays.get("conv_proj.weight")
    if projection is None or projection.ndim != 4:
        return
    width = projection.shape[0]
    for name, array in arrays.items():
        if name.endswith("self_attention.in_proj_weight") and array.shape != (3 * width, width):
            raise WeightsError(f"{description}: {name} has shape {list(array.shape)}; torchvision's "
                               f"nn.MultiheadAttention stores it as [3 D, D] = [{3 * width}, {width}] (D from "
                               f"conv_proj.weight); a transposed file cannot be read without guessing")


class TorchvisionFamily(CheckpointFamily):
    name = "torchvision"
    title = "torchvision VisionTransformer (vit_b_16 ... vit_h_14 state dicts)"
    example = "class_token, conv_proj.weight, encoder.layers.encoder_layer_0.self_attention.in_proj_weight"
    resample = "bicubic_align_corners"
    resample_source = "torchvision's interpolate_embeddings"

    def detect(self, checkpoint):
        return any(name in _OWN_NAMES or name.startswith(_OWN_PREFIXES) for name in checkpoint.arrays)

    def convert(self, checkpoint):
        return convert_torchvision(checkpoint.arrays, checkpoint.description)

    def implied_options(self, checkpoint, converted):
        return {"layer_norm_epsilon": Implied(1e-6, "torchvision's ViT builds its LayerNorms with eps=1e-6"),
                "gelu": Implied("exact", "torchvision's MLPBlock uses nn.GELU() (erf)"),
                "qk_scale": Implied(None, "torchvision's nn.MultiheadAttention scales q.k by head_dim^-0.5"),
                "pool": Implied("cls", "torchvision's VisionTransformer classifies the class token's output"),
                "pos_embed_resample": Implied(self.resample, f"{self.resample_source}: bicubic, align_corners=True")}

    def preprocessing(self, checkpoint):
        """torchvision's ViT weights are evaluated with their IMAGENET1K_V1 ``transforms()``:
        the short side resized to 256 (bilinear, antialias), a 224 center crop, ImageNet's mean
        and std."""
        return {"pipeline": "torchvision"}


FAMILY = TorchvisionFamily()
