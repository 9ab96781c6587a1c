"""Hugging Face transformers SigLIP image towers: ``SiglipVisionModel`` (model_type
``siglip_vision_model``) and the image tower of a whole ``SiglipModel`` (model_type ``siglip``,
its sizes under ``vision_config``; the text tower is skipped), a ``save_pretrained`` folder or its
weights file.

Names (under ``vision_model.`` where a file has it): ``embeddings.patch_embedding.{weight,bias}``,
``embeddings.position_embedding.weight`` [N, D] (no class token), the layers as CLIP's
(hf_common.py), ``post_layernorm``, and the MAP head: ``head.probe`` [1, 1, D] (the latent query),
``head.attention.in_proj_{weight,bias}`` [3 D, D] (nn.MultiheadAttention: rows q | k | v; q is
this ViT's ``attn_pool.q``, k | v its ``attn_pool.kv``), ``head.attention.out_proj``,
``head.layernorm`` and ``head.mlp.fc1/fc2``: timm's AttentionPoolLatent, this ViT's pool "map".

How transformers computes it: LayerNorm epsilon 1e-6, the tanh GELU (``gelu_pytorch_tanh``),
``last_hidden_state`` = post_layernorm(tokens) (this ViT's ``forward_features``),
``pooler_output`` = the MAP head on it (the model's output with num_classes 0). Without the head
(``vision_use_head`` false) transformers pools nothing; this ViT then averages the tokens (pool
"mean", no fc_norm: timm's siglip_gap). With ``interpolate_pos_encoding=True`` the whole grid is
resized bicubic, align_corners=False, without antialias.
"""
import numpy as np

from .family import Implied
from .hf_common import (CLIP_LAYER_RULES, CLIP_MARK, IMAGE_TEXT_SKIP, SIGLIP_MARK, Rule, TransformersFamily, any_name,
                        convert_by_rules, linear)


def _rows(first, last):
    """The rows [first/3, last/3) of a [3 D, ...] array, transposed when 2-D (a Linear's weight)."""
    return lambda array: linear(array[len(array) * first // 3:len(array) * last // 3])


RULES = CLIP_LAYER_RULES + [
    Rule(r"embeddings\.patch_embedding\.(?P<role>weight|bias)", r"patch_embed.patch_embedding.\g<role>"),
    Rule(r"head\.probe", "attn_pool.latent"),
    Rule(r"head\.attention\.in_proj_(?P<role>weight|bias)", (r"attn_pool.q.\g<role>", r"attn_pool.kv.\g<role>"),
         (_rows(0, 1), _rows(1, 3)), lambda q, kv: np.concatenate([linear(q), linear(kv)])),
    Rule(r"head\.attention\.out_proj\.(?P<role>weight|bias)", r"attn_pool.proj.\g<role>", linear),
    Rule(r"head\.layernorm\.(?P<role>weight|bias)", r"attn_pool.norm.\g<role>"),
    Rule(r"head\.mlp\.(?P<fc>fc1|fc2)\.(?P<role>weight|bias)", r"attn_pool.mlp.\g<fc>.\g<role>", linear),
]


class SiglipFamily(TransformersFamily):
    name = "huggingface-siglip"
    title = "Hugging Face transformers SigLIP image tower (SiglipVisionModel, SiglipModel)"
    example = "embeddings.patch_embedding.weight, encoder.layers.0.self_attn.q_proj.weight, head.probe"
    model_types = ("siglip_vision_model",)
    resample_source = "transformers' SiglipVisionEmbeddings.interpolate_pos_encoding"
    qk_scale_source = "transformers' SiglipAttention scales q.k by head_dim^-0.5"

    def detect(self, checkpoint):
        return any_name(checkpoint.arrays, SIGLIP_MARK) and not any_name(checkpoint.arrays, CLIP_MARK)

    def convert(self, checkpoint):
        prefix = "vision_model." if any(name.startswith("vision_model.") for name in checkpoint.arrays) else ""
        return convert_by_rules(checkpoint, self.name, RULES, prefix, skip=IMAGE_TEXT_SKIP)

    def tensor_options(self, converted):
        head = "attn_pool.latent" in converted.tensors
        return {"class_token": Implied(False, "SigLIP has no class token"),
                "pool": Implied("map" if head else "mean", "head.probe: the MAP head" if head else
                                "no MAP head: the tokens' mean (timm's siglip_gap)"),
                "fc_norm": Implied(None if head else False, "SigLIP normalises before pooling (post_layernorm)")}


FAMILY = SiglipFamily()
