"""Hugging Face transformers DINOv2: ``Dinov2Model`` (model_type ``dinov2``, e.g.
``facebook/dinov2-base``), a ``save_pretrained`` folder or its weights file. DINOv2 with
registers is hf_dinov2_registers.py.

Names: ``embeddings.{cls_token, mask_token, position_embeddings (with the class token's row),
patch_embeddings.projection}``, ``encoder.layer.N.{norm1, attention.attention.{query,key,value},
attention.output.dense, layer_scale1.lambda1, norm2, mlp.fc1, mlp.fc2, layer_scale2.lambda1}``,
``layernorm`` (under ``dinov2.`` in ``Dinov2ForImageClassification``, whose classifier reads the
class token and the patch tokens' mean side by side: not a head this ViT computes, refused as
unknown). With ``use_swiglu_ffn`` (the giant model) the MLP is ``mlp.weights_in`` (2 h rows: the
gate's h, then the value's) and ``mlp.weights_out``, h = (int(D * mlp_ratio * 2 / 3) + 7) // 8 * 8:
this ViT's SwiGLU MLP (fc1 D -> 2 h, SiLU(gate) * value, fc2 h -> D) as it is; a state dict of
transformers 5's modules (``gate_proj``, ``up_proj``, ``down_proj``) is stacked the same way.
The ``mask_token`` (masked image modelling) is skipped.

How transformers computes it: layer scale on both branches, LayerNorm epsilon 1e-6, exact GELU,
the class token's output after the final LayerNorm as ``pooler_output`` (this ViT with
num_classes 0, pool "cls"). At another input size the patch grid of the position embedding is
resized whenever it differs (no flag), bicubic, align_corners=False, without antialias, the
class token's row kept.
"""
from .family import Implied
from .hf_common import (DINOV2_MARK, EMBEDDING_RULES, LAYER, QKV, REGISTERS_MARK, Fused, Rule, TransformersFamily,
                        any_name, convert_by_rules, linear)

_BLOCK = r"encoder.layers.\g<layer>."
# all but the MLP; publish_hf.py writes these and the MLP's rules of the model's kind
BODY_RULES = EMBEDDING_RULES + [
    Rule(r"embeddings\.register_tokens", "patch_embed.register_tokens"),
    Rule(LAYER + r"attention\.attention\.(?P<part>query|key|value)\.(?P<role>weight|bias)", QKV, linear),
    Rule(LAYER + r"(?P<norm>norm1|norm2)\.(?P<role>weight|bias)", _BLOCK + r"\g<norm>.\g<role>"),
    Rule(LAYER + r"attention\.output\.dense\.(?P<role>weight|bias)", _BLOCK + r"attn.proj.\g<role>", linear),
    Rule(LAYER + r"layer_scale(?P<branch>1|2)\.lambda1", _BLOCK + r"ls\g<branch>.gamma"),
]
MLP_RULES = [
    Rule(LAYER + r"mlp\.(?P<fc>fc1|fc2)\.(?P<role>weight|bias)", _BLOCK + r"mlp.\g<fc>.\g<role>", linear),
]
SWIGLU_RULES = [
    Rule(LAYER + r"mlp\.weights_in\.(?P<role>weight|bias)", _BLOCK + r"mlp.fc1.\g<role>", linear),
    Rule(LAYER + r"mlp\.weights_out\.(?P<role>weight|bias)", _BLOCK + r"mlp.fc2.\g<role>", linear),
]
# transformers 5's modules of the SwiGLU MLP: read, never written
SPLIT_SWIGLU_RULES = [
    Rule(LAYER + r"mlp\.(?P<part>gate_proj|up_proj)\.(?P<role>weight|bias)",
         Fused(_BLOCK + r"mlp.fc1.\g<role>", ("gate_proj", "up_proj")), linear),
    Rule(LAYER + r"mlp\.down_proj\.(?P<role>weight|bias)", _BLOCK + r"mlp.fc2.\g<role>", linear),
]
RULES = BODY_RULES + MLP_RULES + SWIGLU_RULES + SPLIT_SWIGLU_RULES
SKIP = [r"(dinov2\.|dinov2_with_registers\.)?embeddings\.mask_token"]


class Dinov2Family(TransformersFamily):
    name = "huggingface-dinov2"
    title = "Hugging Face transformers DINOv2 (Dinov2Model)"
    example = "embeddings.mask_token, encoder.layer.0.layer_scale1.lambda1, encoder.layer.0.norm1.weight"
    model_types = ("dinov2",)
    resample_source = "transformers' Dinov2Embeddings.interpolate_pos_encoding"
    qk_scale_source = "transformers' Dinov2SelfAttention scales q.k by head_dim^-0.5"
    prefixes = ("dinov2.",)

    def detect(self, checkpoint):
        arrays = checkpoint.arrays
        return any_name(arrays, DINOV2_MARK) and not any_name(arrays, REGISTERS_MARK)

    def convert(self, checkpoint):
        arrays = checkpoint.arrays
        prefix = next((prefix for prefix in self.prefixes if any(name.startswith(prefix) for name in arrays)), "")
        return convert_by_rules(checkpoint, self.name, RULES, prefix, skip=SKIP)

    def tensor_options(self, converted):
        tensors = converted.tensors
        options = {"class_token": Implied(True, "embeddings.cls_token"),
                   "register_tokens": Implied(0, "no embeddings.register_tokens"),
                   "no_embed_class": Implied(False, "the position embedding has the class token's row"),
                   "pool": Implied("cls", "Dinov2Model's pooler_output is the class token after the final LayerNorm")}
        if "encoder.layers.0.ls1.gamma" in tensors:
            options["layer_scale"] = Implied(1.0, "encoder.layer.N.layer_scale1/2.lambda1: layer scale")
        fc1 = converted.checkpoint_name("encoder.layers.0.mlp.fc1.weight")
        if "encoder.layers.0.mlp.fc1.weight" in tensors:
            swiglu = "weights_in" in fc1 or "gate_proj" in fc1
            options["mlp"] = Implied("swiglu" if swiglu else "standard", f"{fc1}: " + (
                "the SwiGLU MLP (gate and value stacked)" if swiglu else "a Linear, GELU, Linear MLP"))
        return options


FAMILY = Dinov2Family()
