"""PaddleClas and PLSC ``.pdparams``: the ViT files Paddle users have on disk.

Both write timm's names (``cls_token``, ``blocks.N.attn.qkv``, ...) in Paddle's [in, out] Linear
layout, so nothing is transposed; PLSC's 224 models add a pre-logits layer ``head0`` (Linear +
tanh, ``representation_size``). What the files do not say, their model definitions do
(ppcls/arch/backbone/model_zoo/vision_transformer.py, plsc/models/vision_transformer.py):

- LayerNorm epsilon: both ``VisionTransformer`` classes default to 1e-5 and every published model
  with a q/k/v bias passes 1e-6; the two without one, PaddleClas's ``ViT_small_patch16_224`` and
  PLSC's ``ViT_huge_patch14_*``, keep 1e-5. A file without a q/k/v bias implies 1e-5.
- q.k scale: ``ViT_small_patch16_224`` passes ``qk_scale=768**-0.5`` (embed_dim, not head_dim);
  the others head_dim^-0.5. Its shape (D 768, depth 8, MLP 2304, no q/k/v bias) identifies it.
- GELU: exact (``nn.GELU()``).

Resampling: PaddleClas has none; PLSC's ``load_pretrained(finetune=True)`` interpolates bicubic
without antialias (Paddle's ``F.interpolate``, align_corners=False), the default for both.
"""
from .family import CheckpointFamily, Implied
from .timm import has_timm_names, linear_layout, rename

# (embed_dim, depth, MLP width, q/k/v bias) of PaddleClas's non-standard small model
PADDLECLAS_SMALL = (768, 8, 2304, False)


def _shape_of(converted):
    tensors = converted.tensors
    depth = len({name.split(".")[2] for name in tensors if name.startswith("encoder.layers.")})
    fc1 = tensors.get("encoder.layers.0.mlp.fc1.weight")
    width = tensors["patch_embed.class_token"].shape[-1] if "patch_embed.class_token" in tensors else None
    return width, depth, (fc1.shape[1] if fc1 is not None else None), "encoder.layers.0.attn.qkv.bias" in tensors


class PaddleClasFamily(CheckpointFamily):
    name = "paddleclas"
    title = "PaddleClas / PLSC VisionTransformer .pdparams"
    example = "cls_token, blocks.0.attn.qkv.weight [D, 3D], head0.weight (PLSC)"
    resample = "bicubic"
    resample_source = "PLSC's VisionTransformer.load_pretrained(finetune=True)"

    def detect(self, checkpoint):
        arrays = checkpoint.arrays
        return has_timm_names(arrays) and linear_layout(arrays, checkpoint.description) == "paddle"

    def convert(self, checkpoint):
        """Renamed only: the Linear weights are already [in, out]; PLSC's head0 -> pre_logits.fc."""
        return rename(checkpoint.arrays, extra_renames=[(r"head0\.(weight|bias)", r"pre_logits.fc.\1")],
                      family=self.name)

    def implied_options(self, checkpoint, converted):
        width, depth, mlp_width, qkv_bias = _shape_of(converted)
        options = {}
        if "encoder.layers.0.attn.qkv.weight" in converted.tensors:
            options["layer_norm_epsilon"] = Implied(
                1e-6 if qkv_bias else 1e-5,
                "PaddleClas/PLSC models with a q/k/v bias pass epsilon=1e-6" if qkv_bias else
                "PaddleClas/PLSC models without a q/k/v bias keep VisionTransformer's epsilon=1e-5")
        if (width, depth, mlp_width, qkv_bias) == PADDLECLAS_SMALL:
            options["qk_scale"] = Implied(768 ** -0.5, "PaddleClas's ViT_small_patch16_224 (D 768, depth 8, MLP 2304, "
                                                       "no q/k/v bias) scales q.k by 768^-0.5")
        else:
            options["qk_scale"] = Implied(None, "PaddleClas and PLSC models other than ViT_small_patch16_224 scale "
                                                "q.k by head_dim^-0.5")
        options["gelu"] = Implied("exact", "PaddleClas and PLSC use nn.GELU()")
        return options

    def preprocessing(self, checkpoint):
        """PaddleClas's ViT eval transform: the short side resized to 256, a 224 centre crop,
        mean = std = 0.5 (ResizeImage, CropImage, NormalizeImage of its ViT configs)."""
        return {"pipeline": "paddleclas"}


FAMILY = PaddleClasFamily()
