"""Hugging Face transformers CLIP image towers: ``CLIPVisionModel`` and
``CLIPVisionModelWithProjection`` (model_type ``clip_vision_model``), and the image tower of a
whole ``CLIPModel`` (model_type ``clip``, its sizes under ``vision_config``; the text tower is
skipped), a ``save_pretrained`` folder or its weights file.

Names (under ``vision_model.``, which transformers 5 leaves out of a CLIPVisionModel's file):
``embeddings.class_embedding`` [D], ``embeddings.patch_embedding.weight`` (no bias),
``embeddings.position_embedding.weight`` [1 + N, D] (an nn.Embedding), ``pre_layrnorm`` (sic),
``encoder.layers.N.{layer_norm1, self_attn.{q,k,v}_proj, self_attn.out_proj, layer_norm2,
mlp.fc1, mlp.fc2}``, ``post_layernorm``; and, beside them, ``visual_projection.weight`` [E, D]
without bias: this ViT's head (bias zero, num_classes = E), as timm converts these files.

How transformers computes it: ``pre_layrnorm`` before the layers (``pre_norm``: the patch
projection then has no bias), LayerNorm epsilon 1e-5, QuickGELU (``hidden_act`` "quick_gelu";
"gelu" exact), ``pooler_output`` = post_layernorm(class token) = this ViT's pooled features
(``forward_head(x, pre_logits=True)``, or the model's output with num_classes 0), and
``image_embeds`` = the projection of it = this ViT's head output. (Its ``last_hidden_state`` is
not post-layernormed: the last layer's tokens, ``forward_intermediates(x, norm=False)``.) With
``interpolate_pos_encoding=True`` the patch grid is resized bicubic, align_corners=False, without
antialias, the class token's row kept.
"""
import numpy as np

from .family import Implied
from .hf_common import (CLIP_LAYER_RULES, CLIP_MARK, IMAGE_TEXT_SKIP, Rule, TransformersFamily, any_name,
                        convert_by_rules, linear)

RULES = CLIP_LAYER_RULES + [
    Rule(r"embeddings\.class_embedding", "patch_embed.class_token", lambda token: token.reshape(1, 1, -1),
         lambda token: token.reshape(-1)),
    Rule(r"embeddings\.patch_embedding\.weight", "patch_embed.patch_embedding.weight"),
    Rule(r"pre_layrnorm\.(?P<role>weight|bias)", r"encoder.norm_pre.\g<role>"),
]
TOP_RULES = [Rule(r"visual_projection\.weight", ("head.weight", "head.bias"),
                  (linear, lambda weight: np.zeros(weight.shape[0], weight.dtype)),  # the projection has no bias
                  lambda weight, bias: linear(weight))]


class ClipFamily(TransformersFamily):
    name = "huggingface-clip"
    title = "Hugging Face transformers CLIP image tower (CLIPVisionModel[WithProjection], CLIPModel)"
    example = "vision_model.embeddings.class_embedding, vision_model.pre_layrnorm.weight, visual_projection.weight"
    model_types = ("clip_vision_model",)
    resample_source = "transformers' CLIPVisionEmbeddings.interpolate_pos_encoding"
    qk_scale_source = "transformers' CLIPAttention scales q by head_dim^-0.5"

    def detect(self, checkpoint):
        return any_name(checkpoint.arrays, CLIP_MARK)

    def convert(self, checkpoint):
        prefix = "vision_model." if any(name.startswith("vision_model.") for name in checkpoint.arrays) else ""
        return convert_by_rules(checkpoint, self.name, RULES, prefix, TOP_RULES, IMAGE_TEXT_SKIP)

    def head_is_projection(self, checkpoint, converted):
        return "head.weight" in converted.tensors  # visual_projection: image_embeds

    def tensor_options(self, converted):
        return {"class_token": Implied(True, "embeddings.class_embedding"),
                "pre_norm": Implied(True, "pre_layrnorm: a LayerNorm before the layers, no patch bias"),
                "pool": Implied("cls", "CLIP's pooler_output is the class token after post_layernorm")}


FAMILY = ClipFamily()
