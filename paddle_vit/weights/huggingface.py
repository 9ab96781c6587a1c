"""Hugging Face transformers ViT and ViTMAE: a ``save_pretrained`` folder (``config.json`` +
``model.safetensors``, or shards, or ``pytorch_model.bin``), or its weights file alone.

Names: ``ViTForImageClassification`` prefixes the body with ``vit.`` and adds ``classifier``;
a bare ``ViTModel`` (e.g. ``google/vit-base-patch16-224-in21k``) has no prefix and a ``pooler``
(Linear + tanh on the class token), which is the paper's pre-logits layer. Each layer keeps q,
k and v apart (``attention.attention.{query,key,value}``, PyTorch's [out, in]); they are fused
into our qkv in timm's order (q | k | v, each heads-major; hf_common.py).

``ViTMAEModel`` (model_type ``vit_mae``) stores the same names (its ``ViTMAEForPreTraining``
under ``vit.``, beside a ``decoder.*`` that reconstructs masked patches, skipped). Its forward
pass shuffles and drops patches by random noise (``mask_ratio``); this ViT computes the encoder
on every patch in order, which is ViTMAEModel's output at mask_ratio 0 with the noise
``arange(N)`` (the rows of any other noise are a permutation of it; the class token's the same).

How transformers computes them, read from ``config.json`` beside the weights (its defaults when
there is none; folders.py): LayerNorm epsilon ``layer_norm_eps`` (1e-12 in every Google ViT
config, not ViT's 1e-6: 2-3e-4 on the logits), the activation ``hidden_act`` ("gelu" exact;
"gelu_new", "gelu_pytorch_tanh" and "gelu_fast" the tanh approximation, "quick_gelu"
QuickGELU), ``qkv_bias``, and ``id2label`` as class names. At another resolution,
``interpolate_pos_encoding`` resizes the grid bicubic, align_corners=False, without antialias:
at load time (another image_size) and, for a model built with ``dynamic_img_size``, in the
forward pass (the implied ``pos_embed_resample``).
"""
from ..errors import WeightsError
from .hf_common import (DEIT_MARK, DINOV2_MARK, DINOV3_MARK, EMBEDDING_RULES, VIT_LAYER_RULES, Rule, TransformersFamily, any_name,
                        convert_by_rules, linear)

_MARK = r"vit\.embeddings\..+|(vit\.)?(embeddings\.patch_embeddings\.|encoder\.layer\.\d+\.).+"
RULES = EMBEDDING_RULES + VIT_LAYER_RULES + [
    Rule(r"pooler\.dense\.(?P<role>weight|bias)", r"pre_logits.fc.\g<role>", linear),
]
TOP_RULES = [Rule(r"classifier\.(?P<role>weight|bias)", r"head.\g<role>", linear)]
# masked image modelling's token (never used to classify); ViTMAEForPreTraining's decoder
SKIP = [r"(vit\.)?embeddings\.mask_token", r"decoder\..+"]


class HuggingFaceFamily(TransformersFamily):
    name = "huggingface"
    title = "Hugging Face transformers ViT / ViTMAE (a save_pretrained folder or its model.safetensors)"
    example = "vit.embeddings.cls_token, vit.encoder.layer.0.attention.attention.query.weight"
    model_types = ("vit", "vit_mae")
    resample_source = "transformers' ViTEmbeddings.interpolate_pos_encoding"
    qk_scale_source = "transformers' ViTSelfAttention scales q.k by head_dim^-0.5"

    def detect(self, checkpoint):
        arrays = checkpoint.arrays
        return (any_name(arrays, _MARK) and not any_name(arrays, DEIT_MARK) and not any_name(arrays, DINOV2_MARK)
                and not any_name(arrays, DINOV3_MARK))

    def convert(self, checkpoint):
        prefix = "vit." if any(name.startswith("vit.embeddings.") for name in checkpoint.arrays) else ""
        return convert_by_rules(checkpoint, self.name, RULES, prefix, TOP_RULES, SKIP)

    def implied_options(self, checkpoint, converted):
        options = super().implied_options(checkpoint, converted)
        tower, config = self.tower(checkpoint)
        if "pre_logits.fc.weight" in converted.tensors:  # ViTModel's pooler: this ViT's pre-logits layer
            activation = tower.values.get("pooler_act", "tanh")
            if activation != "tanh":
                where = tower.where("pooler_act") if config is not None else checkpoint.description
                raise WeightsError(f"{where}: the pooler's activation is {activation!r}; the pre-logits layer "
                                   f"this ViT computes is Linear + tanh")
        return options


FAMILY = HuggingFaceFamily()
