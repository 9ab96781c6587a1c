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

Resampling: PaddleClas's ViT has none; PLSC's ``load_pretrained(finetune=True)`` interpolates
bicubic without antialias (Paddle's ``F.interpolate``, align_corners=False), the default for both,
and so does foundation_vit's ``resize_pos_embed`` in its forward pass.

PaddleClas's foundation ViTs (ppcls/arch/backbone/model_zoo/foundation_vit.py, paddleclas 2.6.0)
------------------------------------------------------------------------------------------------
One ``VisionTransformer(model_name, ...)`` class; the name picks options from per-family lists
(``_CLIP_diff``, ``_MAE_diff``, ...). Their files carry ``proj`` [D, output_dim] (created for every
model, used only with ``return_embed=True``), ``head.fc_head`` for a classifier and ``ln_pre`` for
CLIP, and no patch-embedding bias (``conv_bias=False``). What the code computes:

- every model: LayerNorm epsilon 1e-5 (``CLIP_*`` pass it; ``MAE_*``, ``MOCOV3_*``, ``EVA_*`` keep the
  class's default; ``ln_pre`` is ``nn.LayerNorm(D)``), exact GELU (``nn.GELU``: the ``QuickGELU`` the
  file defines is used only for names in ``replace_mlp_GELU``, empty for every family, so CLIP is
  computed with exact GELU although OpenAI's weights were trained with QuickGELU), q/k/v bias, the
  class token, ``pos_embed`` resized in the forward pass to other input sizes (bicubic);
- ``CLIP_*``: ``ln_pre`` after the position embedding (our ``pre_norm``: the patch conv without bias
  as in ours). ``MAE_*``, ``MOCOV3_*``, ``EVA_*``: no pre-norm, and a patch conv without bias, which
  is ours with a zero bias;
- a classifier (``return_embed=False``, the fine-tuning configs; the file has ``head.fc_head``):
  ``head.fc_head(norm(x)[:, 0])``, the class token (``proj`` unused: ignored). Except
  ``CLIP_vit_base_patch16_224`` (``remove_cls_token_in_forward``): it drops the class token after
  the blocks and classifies ``x[:, 0]``, the first *patch* token (``pool="first_patch"``). ``MAE_vit_huge_patch14``'s classifier (``head.fc_norm``) normalises ``x[:, 1:].mean(1)``
  of the pooled [B, D] features, a [B] vector, and fails in PaddleClas itself: refused;
- an embedding model (``return_embed=True, return_mean_embed=True``, as PP-ShiTuV2's recognition
  configs build CLIP; the file has no ``head.*``): ``mean_tokens(norm(x) @ proj)`` = the mean of the
  normed tokens through ``proj`` (our head, bias zero): every token (``pool="walkthrough"``), or the
  patch tokens only for ``CLIP_vit_base_patch16_224`` (``pool="mean"``, ``fc_norm=False``). Without
  ``proj`` in the file PaddleClas would project with its random initial one; the model is then
  built without a head (num_classes 0: the mean itself). With ``class_num=0`` and no
  ``return_embed``, PaddleClas returns a [B] vector (a slice of the features), not reproduced;
- the CLIP variant is told by the tensors: ``ln_pre`` and 16x16 patches is ``CLIP_vit_base_patch16_224``
  (``CLIP_vit_base_patch32_224``: 32, ``CLIP_vit_large_patch14_*``: 14). The defined-but-unexported
  ``React_*`` / ``LaCLIP_*`` (``hugging_face_framework``: always ``x[:, 0]``) write the same tensors
  as CLIP's and are read as CLIP's;
- refused, one error naming the tensor: ``BEiTv2_*`` and ``CAE_*`` (``relative_position_bias_table``
  in every block, with ``gamma_1``/``gamma_2``; BEiTv2 also no ``pos_embed``), ``Unicom_*``
  (``feature.*``: all patch tokens flattened through Linear + BatchNorm1D, no class token).

No file names its model; PaddleClas's names correspond to these registered ones (sizes as built):
``CLIP_vit_base_patch16_224`` / ``_patch32_224`` -> ``vit_base_patch16_clip_224`` /
``vit_base_patch32_clip_224``, ``CLIP_vit_large_patch14_224`` / ``_336`` ->
``vit_large_patch14_clip_224`` / ``_336``, ``MAE_vit_base_patch16`` / ``MAE_vit_large_patch16`` /
``MAE_vit_huge_patch14`` -> ``vit_base_patch16_224`` / ``vit_large_patch16_224`` /
``vit_huge_patch14_224``, ``MOCOV3_vit_base`` -> ``vit_base_patch16_224``, ``MOCOV3_vit_small`` ->
``vit_small_patch16_224`` with ``num_heads=12``, ``EVA_vit_giant_patch14`` -> ``vit_giant_patch14_clip_224``
(PaddleClas's ``mlp_ratio=4.3637`` gives its MLP 6144 too). The options above come from the file.

Eval transform (`FOUNDATION_EVAL_OPS`): PaddleX's CLIP_vit_base_patch16_224.yaml and PaddleClas's
CLIP_vit_large_patch14_224_finetune.yaml: ResizeImage(resize_short=224, bicubic, PIL),
CropImage(224), NormalizeImage(1/255, ImageNet mean/std). (PaddleClas's older
CLIP_vit_base_patch16_224_finetune.yaml says resize_short 256 with OpenCV, OpenAI's mean/std; the
recognition configs a 224 x 224 OpenCV bicubic squash; no config exists for MAE/MOCOV3/EVA.)
"""
import copy
import re

import numpy as np

from ..errors import WeightsError
from ..preprocess.paddleclas import FOUNDATION_EVAL_OPS
from .family import CheckpointFamily, ConvertedCheckpoint, Implied
from .timm import has_timm_names, linear_layout, rename

# (embed_dim, depth, MLP width, q/k/v bias) of PaddleClas's non-standard small model
PADDLECLAS_SMALL = (768, 8, 2304, False)

_FOUNDATION_MARKS = ("proj", "ln_pre.weight", "head.fc_head.weight", "head.fc_norm.weight", "feature.0.weight")
_RELATIVE_POSITION = re.compile(r"(blocks\.\d+\.attn|rel_pos_bias)\.relative_position_bias_table")
FOUNDATION_RENAMES = [
    (r"ln_pre\.(weight|bias)", r"encoder.norm_pre.\1"),
    (r"head\.fc_head\.(weight|bias)", r"head.\1"),
]


def is_foundation(arrays):
    """Whether a PaddleClas-layout file was written by foundation_vit.py's VisionTransformer."""
    return any(name in arrays for name in _FOUNDATION_MARKS)


def _is_clip_base_patch16(arrays):
    """``ln_pre`` and 16x16 patches: PaddleClas's CLIP_vit_base_patch16_224 (its other CLIP models
    cut 32x32 or 14x14 patches), the one name in ``remove_cls_token_in_forward``."""
    weight = arrays.get("patch_embed.proj.weight")
    return "ln_pre.weight" in arrays and weight is not None and tuple(weight.shape[-2:]) == (16, 16)


def _refuse_what_is_not_built(checkpoint):
    """One WeightsError naming the tensor of the first foundation_vit model paddle-vit does not
    build (the module docstring)."""
    arrays, where = checkpoint.arrays, checkpoint.description
    table = next((name for name in arrays if _RELATIVE_POSITION.fullmatch(name)), None)
    if table is not None:
        raise WeightsError(f"{where}: {table} is a relative position bias (PaddleClas foundation_vit's BEiTv2_* / "
                           f"CAE_*: a learned table added to the attention logits), which paddle-vit does not build")
    if "feature.0.weight" in arrays:
        raise WeightsError(f"{where}: feature.0.weight is the feature head of PaddleClas foundation_vit's Unicom_* "
                           f"(no class token; every patch token flattened through Linear + BatchNorm1D), which "
                           f"paddle-vit does not build")
    if "head.fc_norm.weight" in arrays:
        raise WeightsError(f"{where}: head.fc_norm.weight is the classifier head of PaddleClas foundation_vit's "
                           f"MAE_vit_huge_patch14, which normalises x[:, 1:].mean(1) of the pooled [B, D] features "
                           f"and fails in PaddleClas itself; its embedding model (return_embed=True: no head.*) loads")


def _convert_foundation(checkpoint):
    """foundation_vit names -> ours: ``ln_pre`` the pre-norm, ``head.fc_head`` the head; ``proj``
    the head (bias zero) of an embedding model and ignored beside a classifier; a zero patch bias
    where the model has no pre-norm (its conv has none, ours then has one)."""
    _refuse_what_is_not_built(checkpoint)
    arrays = dict(checkpoint.arrays)
    projection = arrays.pop("proj", None)
    skipped = [name for name in ("image_projection",) if arrays.pop(name, None) is not None]  # LaCLIP's, unused
    converted = rename(arrays, extra_renames=FOUNDATION_RENAMES, family="paddleclas",
                       description=checkpoint.description)
    tensors, origin = converted.tensors, converted.origin
    if projection is not None and "head.weight" in tensors:
        skipped.append("proj")  # a classifier: PaddleClas multiplies by proj only with return_embed
    elif projection is not None:
        tensors["head.weight"] = np.ascontiguousarray(projection)  # x @ proj: [in, out] as it is
        tensors["head.bias"] = np.zeros(projection.shape[1], projection.dtype)
        origin["head.weight"] = origin["head.bias"] = ("proj", projection.shape)
    weight = tensors.get("patch_embed.patch_embedding.weight")
    pre_norm = "encoder.norm_pre.weight" in tensors
    if weight is not None and "patch_embed.patch_embedding.bias" not in tensors and not pre_norm:
        tensors["patch_embed.patch_embedding.bias"] = np.zeros(weight.shape[0], weight.dtype)
        origin["patch_embed.patch_embedding.bias"] = ("patch_embed.proj (no bias: zeros)", (weight.shape[0],))
    return ConvertedCheckpoint(converted.format, tensors, origin, converted.unknown, converted.skipped + skipped)


def _foundation_options(checkpoint, converted):
    arrays, tensors = checkpoint.arrays, converted.tensors
    classifier = "head.fc_head.weight" in arrays
    options = {
        "layer_norm_epsilon": Implied(1e-5, "PaddleClas foundation_vit: CLIP_* pass epsilon=1e-5, MAE_*/MOCOV3_*/EVA_* "
                                            "keep the class's 1e-5, ln_pre is nn.LayerNorm(D)"),
        "gelu": Implied("exact", "PaddleClas foundation_vit's Mlp uses nn.GELU() (its QuickGELU is used for no model)"),
        "qk_scale": Implied(None, "PaddleClas foundation_vit scales q.k by head_dim^-0.5"),
        "pre_norm": Implied("encoder.norm_pre.weight" in tensors,
                            "ln_pre: a LayerNorm before the blocks (CLIP_*)" if "encoder.norm_pre.weight" in tensors
                            else "no ln_pre (MAE_*, MOCOV3_*, EVA_*)"),
        "class_token": Implied(True, "PaddleClas foundation_vit's cls_token"),
        "fc_norm": Implied(False, "PaddleClas foundation_vit normalises with norm before pooling"),
        "pos_embed_resample": Implied("bicubic", "foundation_vit's resize_pos_embed (bicubic, align_corners=False)"),
    }
    if classifier and _is_clip_base_patch16(arrays):
        options["pool"] = Implied("first_patch", "PaddleClas's CLIP_vit_base_patch16_224 classifier "
                                                 "(remove_cls_token_in_forward): the class token dropped after the "
                                                 "blocks, then token 0, the first patch token")
    elif classifier:
        options["pool"] = Implied("cls", "PaddleClas foundation_vit's classifier (head.fc_head) reads the class token")
    elif _is_clip_base_patch16(arrays):
        options["pool"] = Implied("mean", "PaddleClas's CLIP_vit_base_patch16_224 with return_embed, "
                                          "return_mean_embed: the class token dropped, the mean of the normed "
                                          "patch tokens")
    else:
        options["pool"] = Implied("walkthrough", "PaddleClas foundation_vit with return_embed, return_mean_embed: the "
                                                 "mean of every normed token, the class token's too")
    if not classifier and "proj" in arrays:
        options["num_classes"] = Implied(int(arrays["proj"].shape[1]),
                                         "proj: PaddleClas's return_embed output x @ proj, the head (bias zero)")
    return options


def _shape_of(converted):
    tensors = converted.tensors
    depth = len({name.split(".")[2] for name in tensors if name.startswith("encoder.layers.")})
    fc1 = tensors.get("encoder.layers.0.mlp.fc1.weight")
    width = tensors["patch_embed.class_token"].shape[-1] if "patch_embed.class_token" in tensors else None
    return width, depth, (fc1.shape[1] if fc1 is not None else None), "encoder.layers.0.attn.qkv.bias" in tensors


class PaddleClasFamily(CheckpointFamily):
    name = "paddleclas"
    title = "PaddleClas / PLSC VisionTransformer .pdparams"
    example = "cls_token, blocks.0.attn.qkv.weight [D, 3D], head0.weight (PLSC), ln_pre.weight, proj (foundation_vit)"
    resample = "bicubic"
    resample_source = ("PLSC's VisionTransformer.load_pretrained(finetune=True) and PaddleClas foundation_vit's "
                       "resize_pos_embed")

    def detect(self, checkpoint):
        arrays = checkpoint.arrays
        return has_timm_names(arrays) and linear_layout(arrays, checkpoint.description) == "paddle"

    def convert(self, checkpoint):
        """Renamed only: the Linear weights are already [in, out]; PLSC's head0 -> pre_logits.fc;
        foundation_vit's files as `_convert_foundation` says."""
        if is_foundation(checkpoint.arrays):
            return _convert_foundation(checkpoint)
        return rename(checkpoint.arrays, extra_renames=[(r"head0\.(weight|bias)", r"pre_logits.fc.\1")],
                      family=self.name)

    def implied_options(self, checkpoint, converted):
        if is_foundation(checkpoint.arrays):
            return _foundation_options(checkpoint, converted)
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

    def head_is_projection(self, checkpoint, converted):
        """A foundation_vit embedding model's head is its ``proj`` (return_embed)."""
        return converted.checkpoint_name("head.weight") == "proj"

    def preprocessing(self, checkpoint):
        """PaddleClas's ViT eval transform: the short side resized to 256, a 224 centre crop,
        mean = std = 0.5 (ResizeImage, CropImage, NormalizeImage of its ViT configs); for the
        foundation ViTs, PaddleX's CLIP config's (`FOUNDATION_EVAL_OPS`)."""
        if is_foundation(checkpoint.arrays):
            return {"pipeline": "paddleclas", "config": {"transform_ops": copy.deepcopy(FOUNDATION_EVAL_OPS)},
                    "source": "PaddleX's CLIP_vit_base_patch16_224.yaml eval transform"}
        return {"pipeline": "paddleclas"}


FAMILY = PaddleClasFamily()
