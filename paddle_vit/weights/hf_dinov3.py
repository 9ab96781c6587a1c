"""Hugging Face transformers DINOv3: ``DINOv3ViTModel`` (model_type ``dinov3_vit``, e.g.
``facebook/dinov3-vits16-pretrain-lvd1689m``), a ``save_pretrained`` folder or its weights file.

Names (as ``save_pretrained`` writes them): ``embeddings.{cls_token, register_tokens,
mask_token, patch_embeddings}`` (the patch Conv2D itself, no ``projection``),
``layer.N.{norm1, attention.{q_proj, k_proj, v_proj, o_proj}, layer_scale1.lambda1, norm2, mlp.*,
layer_scale2.lambda1}``, ``norm``. q, k and v stay three Linears here too (`SeparateQKV`, k without
bias); ``o_proj`` is the attention's ``proj``, ``layer_scaleK.lambda1`` our ``lsK.gamma``. The
plain MLP is ``mlp.{up_proj, down_proj}`` (our ``fc1``, ``fc2``); the gated one (``use_gated_mlp``:
ViT-S+, H+, 7B) ``mlp.{gate_proj, up_proj, down_proj}``, our split SwiGLU's ``fc1_g``, ``fc1_x``,
``fc2`` (SiLU(gate) * up, then down). The ``mask_token`` (masked image modelling) is skipped.

How transformers computes it is hf_dinov3_config.py's (config.json's keys, or DINOv3ViTConfig's
defaults for weights without one, the tensors then saying the registers, the biases and the MLP).
"""
from ..errors import WeightsError
from .family import Implied, options_from_tensors
from .folders import hf_options
from .hf_common import DINOV3_MARK, Rule, TransformersFamily, any_name, convert_by_rules, linear
from .hf_dinov3_config import dinov3_options

LAYER = r"layer\.(?P<layer>\d+)\."
_BLOCK = r"encoder.layers.\g<layer>."
# all but the MLP; publish_hf.py writes these and the MLP's rules of the model's kind
BODY_RULES = [
    Rule(r"embeddings\.cls_token", "patch_embed.class_token"),
    Rule(r"embeddings\.register_tokens", "patch_embed.register_tokens"),
    Rule(r"embeddings\.patch_embeddings\.(?P<role>weight|bias)", r"patch_embed.patch_embedding.\g<role>"),
    Rule(LAYER + r"(?P<norm>norm1|norm2)\.(?P<role>weight|bias)", _BLOCK + r"\g<norm>.\g<role>"),
    Rule(LAYER + r"attention\.(?P<part>q|k|v)_proj\.(?P<role>weight|bias)",
         _BLOCK + r"attn.qkv.\g<part>_proj.\g<role>", linear),
    Rule(LAYER + r"attention\.o_proj\.(?P<role>weight|bias)", _BLOCK + r"attn.proj.\g<role>", linear),
    Rule(LAYER + r"layer_scale(?P<branch>1|2)\.lambda1", _BLOCK + r"ls\g<branch>.gamma"),
    Rule(r"norm\.(?P<role>weight|bias)", r"encoder.norm.\g<role>"),
]
MLP_RULES = [
    Rule(LAYER + r"mlp\.up_proj\.(?P<role>weight|bias)", _BLOCK + r"mlp.fc1.\g<role>", linear),
    Rule(LAYER + r"mlp\.down_proj\.(?P<role>weight|bias)", _BLOCK + r"mlp.fc2.\g<role>", linear),
]
GATED_MLP_RULES = [
    Rule(LAYER + r"mlp\.gate_proj\.(?P<role>weight|bias)", _BLOCK + r"mlp.fc1_g.\g<role>", linear),
    Rule(LAYER + r"mlp\.up_proj\.(?P<role>weight|bias)", _BLOCK + r"mlp.fc1_x.\g<role>", linear),
    Rule(LAYER + r"mlp\.down_proj\.(?P<role>weight|bias)", _BLOCK + r"mlp.fc2.\g<role>", linear),
]
SKIP = [r"embeddings\.mask_token"]
GATED = r"layer\.\d+\.mlp\.gate_proj\..+"


class Dinov3Family(TransformersFamily):
    name = "huggingface-dinov3"
    title = "Hugging Face transformers DINOv3 (DINOv3ViTModel)"
    example = "embeddings.register_tokens, layer.0.attention.q_proj.weight, layer.0.layer_scale1.lambda1"
    model_types = ("dinov3_vit",)
    resample_source = "DINOv3ViTModel has no position embedding"
    qk_scale_source = "transformers' DINOv3ViTAttention scales q.k by head_dim^-0.5"

    def detect(self, checkpoint):
        return any_name(checkpoint.arrays, DINOV3_MARK)

    def convert(self, checkpoint):
        mlp = GATED_MLP_RULES if any_name(checkpoint.arrays, GATED) else MLP_RULES
        return convert_by_rules(checkpoint, self.name, BODY_RULES + mlp, skip=SKIP)

    def tensor_options(self, converted):
        """What the tensors say beside config.json's keys: registers, the gated MLP and its width
        (for weights without a config.json; with one, config.json says the same or the loader
        names the tensor that differs)."""
        tensors, options = converted.tensors, {}
        registers = tensors.get("patch_embed.register_tokens")
        where = converted.checkpoint_name("patch_embed.register_tokens")
        options["register_tokens"] = Implied(int(registers.shape[1]) if registers is not None else 0,
                                             f"{where}: register tokens" if registers is not None else
                                             "no embeddings.register_tokens")
        gate = tensors.get("encoder.layers.0.mlp.fc1_g.weight")
        up = gate if gate is not None else tensors.get("encoder.layers.0.mlp.fc1.weight")
        if up is not None:
            width, hidden = up.shape  # Paddle's [in, out]
            name = converted.checkpoint_name("encoder.layers.0.mlp." + ("fc1_g" if gate is not None else "fc1")
                                             + ".weight")
            options["mlp"] = Implied("swiglu_split" if gate is not None else "standard",
                                     f"{name}: " + ("the gated MLP (gate_proj, up_proj, down_proj)"
                                                    if gate is not None else "a Linear, GELU, Linear MLP"))
            options["mlp_ratio"] = Implied(hidden / width, f"{name}: {hidden} wide")
        return options

    def implied_options(self, checkpoint, converted):
        tower, config = self.tower(checkpoint)
        if config is not None:
            options = hf_options(config)
            self.check_config_against_tensors(tower, options, converted)
        else:
            note = " (no config.json beside the weights)"
            options = {field: Implied(implied.value, implied.reason + note)
                       for field, implied in dinov3_options(tower).items()}
            options.update(options_from_tensors(converted))
            options.update(self.tensor_options(converted))
            options["num_classes"] = Implied(0, "DINOv3ViTModel has no head: its output is the embedding")
        options["qk_scale"] = Implied(None, self.qk_scale_source)
        return options

    @staticmethod
    def check_config_against_tensors(tower, options, converted):
        """The patch size and register count config.json states, against the tensors: a
        contradiction named by the file and its key (the RoPE grid is cut by the patch size, the
        registers are left out of it)."""
        conv = converted.tensors.get("patch_embed.patch_embedding.weight")
        stated = options.get("patch_size")
        if conv is not None and stated is not None and tuple(conv.shape[2:]) != (stated.value, stated.value):
            raise WeightsError(f"{tower.where('patch_size')} {stated.value} contradicts the weights: "
                               f"{converted.checkpoint_name('patch_embed.patch_embedding.weight')} cuts "
                               f"{conv.shape[2]} x {conv.shape[3]} patches")
        registers = converted.tensors.get("patch_embed.register_tokens")
        count = int(registers.shape[1]) if registers is not None and registers.ndim == 3 else 0
        if options["register_tokens"].value != count:
            raise WeightsError(f"{tower.where('num_register_tokens')} {options['register_tokens'].value} contradicts "
                               f"the weights, which hold {count} register tokens (embeddings.register_tokens)")


FAMILY = Dinov3Family()
