"""Hugging Face transformers distilled DeiT: ``DeiTForImageClassificationWithTeacher`` (model_type
``deit``, e.g. ``facebook/deit-base-distilled-patch16-224``), a ``save_pretrained`` folder or
its weights file.

Names: ``deit.embeddings.{cls_token, distillation_token, position_embeddings (2 + N rows),
patch_embeddings.projection}``, ``deit.encoder.layer.N.*`` (ViT's layer names, huggingface.py),
``deit.layernorm``, ``cls_classifier`` (the class token's head) and ``distillation_classifier``
(the distillation token's): this ViT with ``distilled=True``, whose logits are the mean of the two
heads as transformers' are. A bare ``DeiTModel`` (no prefix) has a ``pooler`` (Linear + tanh on
the class token) that the distilled model does not compute: skipped, the model then returns its
features. ``DeiTForImageClassification`` (one ``classifier`` on the class token alone while the
distillation token is there) is not a model this ViT builds: its classifier is refused as unknown.

transformers' DeiTConfig: LayerNorm epsilon 1e-12, exact GELU; ``interpolate_pos_encoding``
keeps the two token rows and resizes the patch grid bicubic without antialias.
"""
from .family import Implied
from .hf_common import (DEIT_MARK, EMBEDDING_RULES, VIT_LAYER_RULES, Rule, TransformersFamily, any_name,
                        convert_by_rules, linear)

RULES = EMBEDDING_RULES + VIT_LAYER_RULES + [
    Rule(r"embeddings\.distillation_token", "patch_embed.distillation_token"),
]
TOP_RULES = [Rule(r"cls_classifier\.(?P<role>weight|bias)", r"head.\g<role>", linear),
             Rule(r"distillation_classifier\.(?P<role>weight|bias)", r"head_dist.\g<role>", linear)]
# masked image modelling's token; DeiTModel's pooler, which the distilled model does not compute
SKIP = [r"(deit\.)?embeddings\.mask_token", r"(deit\.)?pooler\.dense\.(weight|bias)"]


class DeiTFamily(TransformersFamily):
    name = "huggingface-deit"
    title = "Hugging Face transformers distilled DeiT (DeiTForImageClassificationWithTeacher)"
    example = "deit.embeddings.distillation_token, cls_classifier.weight, distillation_classifier.weight"
    model_types = ("deit",)
    resample_source = "transformers' DeiTEmbeddings.interpolate_pos_encoding"
    qk_scale_source = "transformers' DeiTSelfAttention scales q.k by head_dim^-0.5"

    def detect(self, checkpoint):
        return any_name(checkpoint.arrays, DEIT_MARK) or any(name.startswith("deit.") for name in checkpoint.arrays)

    def convert(self, checkpoint):
        prefix = "deit." if any(name.startswith("deit.") for name in checkpoint.arrays) else ""
        return convert_by_rules(checkpoint, self.name, RULES, prefix, TOP_RULES, SKIP)

    def tensor_options(self, converted):
        present = "patch_embed.distillation_token" in converted.tensors
        return {"distilled": Implied(present, "embeddings.distillation_token: DeiT's distillation token and its "
                                              "own classifier" if present else "no distillation token")}


FAMILY = DeiTFamily()
