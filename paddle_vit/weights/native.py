"""This project's own files: ``.pdparams`` (``paddle.save(model.state_dict())``), training
checkpoints (``.pdckpt``) and ``.safetensors`` written by `save_weights`, in our names.

A ``.pdckpt`` and our ``.safetensors`` record the model's `ViTConfig`; the options it was built
with (epsilon, GELU, q.k scale, pooling, position embedding) are implied from there. A bare
``.pdparams`` records none: the options then come from the caller, or from the recipe's
``model.pretrained`` (factory.py).
"""
import re

from .family import POSITION_EMBEDDING, CheckpointFamily, ConvertedCheckpoint, Implied

# our layer names; CLIP's and SigLIP's in transformers are encoder.layers.N.{layer_norm1,self_attn,mlp}
_LAYER = re.compile(r"encoder\.layers\.\d+\.(norm1|norm2|attn|ls1|ls2)\.")
# the options a recorded model_config implies, and the value a checkpoint written before the
# option existed was computed with
RECORDED_OPTIONS = {"layer_norm_epsilon": 1e-6, "gelu": "exact", "qk_scale": None, "pool": None,
                    "position_embedding": None}


class NativeFamily(CheckpointFamily):
    name = "paddle-vit"
    title = "paddle-vit (.pdparams, .pdckpt, .safetensors)"
    example = "encoder.layers.0.attn.qkv.weight, patch_embed.position_embedding"
    resample = "bicubic_antialias"
    resample_source = "paddle-vit's default (timm's method)"

    def detect(self, checkpoint):
        # encoder.layers.N., not encoder.layers. alone: torchvision's are encoder.layers.encoder_layer_N.
        return any(_LAYER.match(name) or name.startswith("patch_embed.patch_embedding.") or name == POSITION_EMBEDDING
                   for name in checkpoint.arrays)

    def convert(self, checkpoint):
        """Our names already: nothing to convert."""
        arrays = checkpoint.arrays
        return ConvertedCheckpoint(self.name, dict(arrays), {name: (name, array.shape) for name, array in arrays.items()},
                                   [])

    def implied_options(self, checkpoint, converted):
        recorded = checkpoint.model_config
        if not recorded:
            return {}
        options = {}
        for option, before in RECORDED_OPTIONS.items():
            if option in recorded:
                options[option] = Implied(recorded[option], "recorded in the checkpoint's model_config")
            elif before is not None:
                options[option] = Implied(before, "the checkpoint predates the option; it had this value")
        return options


FAMILY = NativeFamily()
