"""Hugging Face transformers ViT: a ``save_pretrained`` folder (``config.json`` +
``model.safetensors``, or shards, or ``pytorch_model.bin``), or its weights file alone.

Names: ``ViTForImageClassification`` prefixes the body with ``vit.`` and adds ``classifier``;
a bare ``ViTModel`` (e.g. ``google/vit-base-patch16-224-in21k``) has no prefix and a ``pooler``
(Linear + tanh on the class token), which is the paper's pre-logits layer. Each layer keeps q,
k and v apart (``attention.attention.{query,key,value}``, PyTorch's [out, in]); they are fused
into our qkv in timm's order (q | k | v, each heads-major).

How transformers computes them, read from ``config.json`` beside the weights (its defaults when
there is none): LayerNorm epsilon ``layer_norm_eps`` (1e-12 in every Google ViT config, not
ViT's 1e-6: 2-3e-4 on the logits), the activation ``hidden_act`` ("gelu" exact; "gelu_new",
"gelu_pytorch_tanh" and "gelu_fast" the tanh approximation), ``qkv_bias``, and ``id2label``
as class names. At another resolution, ``interpolate_pos_encoding`` resizes the grid bicubic,
align_corners=False, without antialias: at load time (another image_size) and, for a model built
with ``dynamic_img_size``, in the forward pass (the implied ``pos_embed_resample``).
"""
import re

import numpy as np

from ..errors import WeightsError
from .family import POSITION_EMBEDDING, CheckpointFamily, ConvertedCheckpoint, Implied
from .folders import folder_config, hf_options
from .reading import read_json

PREPROCESSOR_CONFIG = "preprocessor_config.json"

# what transformers' ViTConfig assumes when config.json says nothing
HF_DEFAULTS = {"layer_norm_eps": 1e-12, "hidden_act": "gelu", "qkv_bias": True, "pooler_act": "tanh"}
HIDDEN_ACTS = {"gelu": "exact", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu_fast": "tanh"}

_LAYER = {
    "layernorm_before": "norm1",
    "layernorm_after": "norm2",
    "attention.output.dense": "attn.proj",
    "intermediate.dense": "mlp.fc1",
    "output.dense": "mlp.fc2",
}
_TOP_LEVEL = {
    "embeddings.cls_token": "patch_embed.class_token",
    "embeddings.position_embeddings": POSITION_EMBEDDING,
    "embeddings.patch_embeddings.projection.weight": "patch_embed.patch_embedding.weight",
    "embeddings.patch_embeddings.projection.bias": "patch_embed.patch_embedding.bias",
    "layernorm.weight": "encoder.norm.weight",
    "layernorm.bias": "encoder.norm.bias",
    "pooler.dense.weight": "pre_logits.fc.weight",
    "pooler.dense.bias": "pre_logits.fc.bias",
}
_LAYER_NAME = re.compile(r"encoder\.layer\.(\d+)\.(.+)\.(weight|bias)")
_ANY_LAYER = re.compile(r"(vit\.)?encoder\.layer\.\d+\.")  # not our encoder.layers.N
_QKV = re.compile(r"attention\.attention\.(query|key|value)")


def _prefix(arrays):
    return "vit." if any(name.startswith("vit.embeddings.") for name in arrays) else ""


class HuggingFaceFamily(CheckpointFamily):
    name = "huggingface"
    title = "Hugging Face transformers ViT (a save_pretrained folder or its model.safetensors)"
    example = "vit.embeddings.cls_token, vit.encoder.layer.0.attention.attention.query.weight"
    resample = "bicubic"
    resample_source = "transformers' ViTEmbeddings.interpolate_pos_encoding"

    def detect(self, checkpoint):
        return any(name.startswith(("vit.embeddings.", "embeddings.patch_embeddings.")) or _ANY_LAYER.match(name)
                   for name in checkpoint.arrays)

    def convert(self, checkpoint):
        arrays = checkpoint.arrays
        prefix = _prefix(arrays)
        tensors, origin, unknown, skipped = {}, {}, [], []
        qkv_parts = {}  # (layer, kind) -> {"query": (array, name), ...}

        def put(ours, array, name, transpose=False):
            tensors[ours] = np.ascontiguousarray(array.T if transpose else array)
            origin[ours] = (name, arrays[name].shape)

        for name, array in arrays.items():
            key = name[len(prefix):] if name.startswith(prefix) else None
            if prefix and name in ("classifier.weight", "classifier.bias"):
                put("head." + name.split(".")[1], array, name, transpose=array.ndim == 2)
            elif key in ("embeddings.mask_token",):
                skipped.append(name)  # masked image modelling's token; never used to classify
            elif key in _TOP_LEVEL:
                ours = _TOP_LEVEL[key]
                put(ours, array, name, transpose=ours.endswith(".fc.weight"))
            elif key is not None and _LAYER_NAME.fullmatch(key):
                index, module, role = _LAYER_NAME.fullmatch(key).groups()
                layer = f"encoder.layers.{index}."
                if _QKV.fullmatch(module):
                    qkv_parts.setdefault((index, role), {})[_QKV.fullmatch(module).group(1)] = (array, name)
                elif module in _LAYER:
                    put(layer + f"{_LAYER[module]}.{role}", array, name, transpose=role == "weight" and array.ndim == 2)
                else:
                    unknown.append(name)
            else:
                unknown.append(name)

        for (index, role), parts in sorted(qkv_parts.items()):
            if set(parts) != {"query", "key", "value"}:
                unknown.extend(name for _, name in parts.values())
                continue
            ordered = [parts[part] for part in ("query", "key", "value")]
            if role == "weight":  # 3 x [out D, in D] -> [in D, 3 D], columns q | k | v
                fused = np.concatenate([array.T for array, _ in ordered], axis=1)
            else:  # 3 x [D] -> [3 D]
                fused = np.concatenate([array for array, _ in ordered])
            ours = f"encoder.layers.{index}.attn.qkv.{role}"
            tensors[ours] = np.ascontiguousarray(fused)
            origin[ours] = (ordered[0][1].replace(".query.", ".{query,key,value}."), ordered[0][0].shape)
        return ConvertedCheckpoint(self.name, tensors, origin, unknown, skipped)

    def read_config(self, checkpoint):
        """(config.json as a dict, its path) beside the weights, or ({}, None) when there is
        none or it is not a Hugging Face one (a timm Hub folder's)."""
        config = folder_config(checkpoint)
        if config is None or config.kind != "huggingface":
            return {}, None
        return config.values, config.path

    def preprocessing(self, checkpoint):
        """The image processor's ``preprocessor_config.json`` beside the weights, or None."""
        path = checkpoint.sidecar(PREPROCESSOR_CONFIG)
        if path is None:
            return None
        return {"pipeline": "huggingface", "config": read_json(path, "the Hugging Face image processor config"),
                "source": path}

    def implied_options(self, checkpoint, converted):
        config, path = self.read_config(checkpoint)
        where = f"{path}" if path else "transformers' ViTConfig default (no config.json beside the weights)"

        def setting(key):
            return (config[key], f"{where}: {key}") if key in config else (HF_DEFAULTS[key], f"{where} for {key}")

        epsilon, epsilon_reason = setting("layer_norm_eps")
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not 0 < epsilon <= 1e-3:
            raise WeightsError(f"{checkpoint.description}: layer_norm_eps {epsilon!r} ({epsilon_reason}) is not a "
                               f"LayerNorm epsilon this ViT computes: a number > 0 and <= 1e-3 (Paddle's limit)")
        activation, activation_reason = setting("hidden_act")
        if activation not in HIDDEN_ACTS:
            raise WeightsError(f"{checkpoint.description}: hidden_act {activation!r} ({activation_reason}) is not "
                               f"a GELU this ViT computes; supported: {', '.join(HIDDEN_ACTS)}")
        options = {"layer_norm_epsilon": Implied(float(epsilon), f"{epsilon_reason} = {epsilon!r}"),
                   "gelu": Implied(HIDDEN_ACTS[activation], f"{activation_reason} = {activation!r}"),
                   "qk_scale": Implied(None, "transformers' ViTSelfAttention scales q.k by head_dim^-0.5"),
                   # what dynamic_img_size computes at another input size, as interpolate_pos_encoding=True does
                   "pos_embed_resample": Implied(self.resample, f"{self.resample_source}: bicubic, no antialias")}
        if path:  # the architecture it states: hidden_size, num_hidden_layers, ...
            options.update({field: implied for field, implied in hf_options(folder_config(checkpoint)).items()})
        if "qkv_bias" in config:
            options["qkv_bias"] = Implied(bool(config["qkv_bias"]), f"{where}: qkv_bias = {config['qkv_bias']!r}")
        pooler_act, pooler_reason = setting("pooler_act")
        if "pre_logits.fc.weight" in converted.tensors and pooler_act != "tanh":
            raise WeightsError(f"{checkpoint.description}: the pooler's activation is {pooler_act!r} "
                               f"({pooler_reason}); the pre-logits layer this ViT computes is Linear + tanh")
        return options

    def class_names(self, checkpoint, num_classes):
        """``id2label`` of config.json in class order, or None for none or transformers'
        placeholders (LABEL_0, LABEL_1, ...)."""
        config, _ = self.read_config(checkpoint)
        labels = config.get("id2label")
        if not isinstance(labels, dict) or len(labels) != num_classes:
            return None
        try:
            names = [str(labels[key]) for key in sorted(labels, key=int)]
        except (TypeError, ValueError):
            return None
        if names == [f"LABEL_{index}" for index in range(num_classes)]:
            return None
        return names


FAMILY = HuggingFaceFamily()
