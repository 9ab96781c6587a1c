"""Hugging Face transformers DINOv2 with registers: ``Dinov2WithRegistersModel`` (model_type
``dinov2_with_registers``, e.g. ``facebook/dinov2-with-registers-base``), a ``save_pretrained``
folder or its weights file.

Names: those of ``Dinov2Model`` (hf_dinov2.py) and ``embeddings.register_tokens`` [1, R, D].
transformers adds the position embedding to [class token, patches], then inserts the registers
after the class token: the registers get no position embedding, the class token its row. That
is this ViT with ``register_tokens=R`` and ``no_embed_class=True`` (the position embedding covers
the patches only, timm's vit_*_reg4_dinov2), the class token's row folded into the class token
(``cls_token + position_embeddings[:, 0]``): the same sums, also at another input size, where
transformers resizes the patch grid alone.

Unlike Dinov2Model, its ``interpolate_pos_encoding`` resizes with ``antialias=True``: PyTorch's
antialiased bicubic (Keys a = -0.5, taps outside the grid dropped, rows normalised), which is not
plain bicubic even when upsampling, and is this project's ``bicubic_antialias`` (timm's method).
"""
import numpy as np

from .family import Implied
from .hf_common import DINOV3_MARK, REGISTERS_MARK, any_name
from .hf_dinov2 import Dinov2Family

CLASS_TOKEN, POSITIONS = "patch_embed.class_token", "patch_embed.position_embedding"


class Dinov2RegistersFamily(Dinov2Family):
    name = "huggingface-dinov2-registers"
    title = "Hugging Face transformers DINOv2 with registers (Dinov2WithRegistersModel)"
    example = "embeddings.register_tokens, encoder.layer.0.layer_scale1.lambda1"
    model_types = ("dinov2_with_registers",)
    resample = "bicubic_antialias"
    resample_source = "transformers' Dinov2WithRegistersEmbeddings.interpolate_pos_encoding"
    resample_detail = "bicubic, align_corners=False, antialias=True"
    prefixes = ("dinov2_with_registers.", "dinov2.")

    def detect(self, checkpoint):
        return any_name(checkpoint.arrays, REGISTERS_MARK) and not any_name(checkpoint.arrays, DINOV3_MARK)

    def convert(self, checkpoint):
        """Dinov2Model's conversion, then the class token's position row folded into the class
        token and the position embedding left with the patch rows."""
        converted = super().convert(checkpoint)
        tensors, origin = converted.tensors, converted.origin
        if CLASS_TOKEN in tensors and POSITIONS in tensors and tensors[POSITIONS].ndim == 3:
            positions = tensors[POSITIONS]
            tensors[CLASS_TOKEN] = np.ascontiguousarray(tensors[CLASS_TOKEN] + positions[:, :1])
            tensors[POSITIONS] = np.ascontiguousarray(positions[:, 1:])
            origin[CLASS_TOKEN] = (f"{origin[CLASS_TOKEN][0]} + {origin[POSITIONS][0]}[:, 0]", origin[CLASS_TOKEN][1])
            origin[POSITIONS] = (f"{origin[POSITIONS][0]}[:, 1:]", origin[POSITIONS][1])
        return converted

    def tensor_options(self, converted):
        options = super().tensor_options(converted)
        registers = converted.tensors.get("patch_embed.register_tokens")
        if registers is not None and registers.ndim == 3:
            where = converted.checkpoint_name("patch_embed.register_tokens")
            options["register_tokens"] = Implied(int(registers.shape[1]), f"{where}: register tokens")
            options["no_embed_class"] = Implied(True, "transformers adds the position embedding before inserting "
                                                      "the registers")
        return options


FAMILY = Dinov2RegistersFamily()
