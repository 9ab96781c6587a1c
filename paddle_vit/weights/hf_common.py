"""What the Hugging Face transformers families share (huggingface.py for ViT and ViTMAE,
hf_deit.py, hf_dinov2.py, hf_dinov2_registers.py, hf_dinov3.py, hf_clip.py, hf_siglip.py): renaming a state
dict by rules, fusing tensors transformers keeps apart (q, k and v; a SwiGLU's gate and value),
and reading the folder's config.json and preprocessor_config.json. The same rules read backwards
(`tensors_by_rules`) write the transformers folders publish_hf.py publishes.

transformers keeps each Linear's weight as PyTorch's [out, in]; Paddle's is [in, out]. q, k and v
are separate Linears (``query``/``key``/``value``, or ``q_proj``/``k_proj``/``v_proj``): stacked
along their outputs in that order they are timm's fused qkv, q | k | v, each heads-major.

What the config.json of a folder says (model_type, sizes, epsilon, GELU, the options of today's
ViTs) folders.py reads (`hf_options`): the same reading serves the folder's description (which
registered name, no name needed) and the options the weights are computed with. Weights without
a config.json are computed with transformers' defaults for the model type their tensors show.
"""
import dataclasses
import os
import re
from typing import Callable, Optional, Tuple

import numpy as np

from ..errors import WeightsError
from .family import CheckpointFamily, ConvertedCheckpoint, Implied
from .folders import HF_MODEL_TYPES, HFTower, hf_computation, hf_options, hf_tower
from .reading import read_json
from .renaming import group_alternatives, invert

PREPROCESSOR_CONFIG = "preprocessor_config.json"


def linear(array):
    """A PyTorch Linear weight [out, in] as Paddle's [in, out]; other arrays as they are."""
    return array.T if array.ndim == 2 else array


@dataclasses.dataclass(frozen=True)
class Fused:
    """Checkpoint tensors stacked into one of ours along the output axis, in `order`.

    A rule whose target is a Fused names the part by the regex group `part` (its text one of
    `order`, or a short form `aliases` maps to one); the parts of one target are collected, and
    stacked (then, for weights, transposed) once all are there: q | k | v into qkv, gate | value
    into a SwiGLU's fc1."""
    target: str
    order: Tuple[str, ...]
    aliases: tuple = ()

    def part(self, text):
        return dict(self.aliases).get(text, text)


QKV = Fused(r"encoder.layers.\g<layer>.attn.qkv.\g<role>", ("query", "key", "value"),
            aliases=(("q", "query"), ("k", "key"), ("v", "value")))


@dataclasses.dataclass(frozen=True)
class Rule:
    """A checkpoint name `pattern` (a full-match regex) -> our `target` (a template of its groups,
    a `Fused`, or a tuple of templates, one per transform of `how`), the array through `how`.

    `back` undoes `how` for publishing where `how` is not its own inverse (`linear` is): of a
    tuple target it takes our arrays in the target's order and returns the checkpoint's array,
    or None when the checkpoint has none (a bias it lacks)."""
    pattern: str
    target: object
    how: Optional[Callable] = None
    back: Optional[Callable] = None


def convert_by_rules(checkpoint, family, rules, prefix="", top_rules=(), skip=()):
    """The `ConvertedCheckpoint` of a `Checkpoint`'s arrays renamed by `rules` (after the model's
    `prefix`, e.g. "vit."), `top_rules` (whole names outside the prefix: a classifier, a
    projection) and `skip` (patterns of names that are not the model's parameters: a masking
    token, a text tower). Two names for one of our tensors, or parts of a fused tensor of
    different shapes, are a WeightsError naming them."""
    arrays = checkpoint.arrays
    tensors, origin, unknown, skipped, parts = {}, {}, [], [], {}

    def put(ours, array, name):
        if ours in tensors:
            raise WeightsError(f"{checkpoint.description} holds both {origin[ours][0]} and {name}, two names for "
                               f"the model's {ours}; keep one of them")
        tensors[ours] = np.ascontiguousarray(array)
        origin[ours] = (name, arrays[name].shape)

    def apply(rule_list, key, name):
        for rule in rule_list:
            match = re.fullmatch(rule.pattern, key)
            if not match:
                continue
            array = arrays[name]
            if isinstance(rule.target, Fused):
                part = rule.target.part(match.group("part"))
                start, end = match.span("part")
                shown = name[:len(name) - len(key) + start] + "{" + ",".join(rule.target.order) + "}" + \
                    name[len(name) - len(key) + end:]
                parts.setdefault(match.expand(rule.target.target), (rule, shown, {}))[2][part] = name
            elif isinstance(rule.target, tuple):
                for target, how in zip(rule.target, rule.how):
                    put(match.expand(target), how(array), name)
            else:
                put(match.expand(rule.target), rule.how(array) if rule.how else array, name)
            return True
        return False

    for name in arrays:
        key = name[len(prefix):] if name.startswith(prefix) else None
        if key is not None and apply(rules, key, name):
            continue
        if apply(top_rules, name, name):
            continue
        if any(re.fullmatch(pattern, name) for pattern in skip):
            skipped.append(name)
        else:
            unknown.append(name)

    for ours, (rule, shown, names_) in sorted(parts.items()):
        order = rule.target.order
        if set(names_) != set(order):  # a part missing: the others are of no use alone
            unknown.extend(names_.values())
            continue
        if len({arrays[names_[part]].shape[1:] for part in order}) != 1:
            shapes = ", ".join(f"{names_[part]} {list(arrays[names_[part]].shape)}" for part in order)
            raise WeightsError(f"{checkpoint.description}: {shapes} differ in shape beyond their outputs; they "
                               f"cannot be stacked into the model's {ours}")
        stacked = np.concatenate([arrays[names_[part]] for part in order], axis=0)  # along the outputs
        put(ours, rule.how(stacked) if rule.how else stacked, names_[order[0]])
        origin[ours] = (shown, arrays[names_[order[0]]].shape)
    return ConvertedCheckpoint(family, tensors, origin, unknown, skipped)


class _Writer:
    """One `Rule` read backwards: our names it writes, and the checkpoint's names and arrays."""

    def __init__(self, rule, prefix):
        self.rule = rule
        pattern = re.escape(prefix) + rule.pattern
        if isinstance(rule.target, Fused):  # one inverse a part, in the pattern's order
            parts = group_alternatives(rule.pattern, "part")
            self.inverses = [invert(pattern, rule.target.target, fixed={"part": part}) for part in parts]
            self.rows = [rule.target.order.index(rule.target.part(part)) for part in parts]
        elif isinstance(rule.target, tuple):  # one inverse a target, all writing the same name
            self.inverses = [invert(pattern, target) for target in rule.target]
        else:
            self.inverses = [invert(pattern, rule.target)]
        if rule.back is None and rule.how not in (None, linear):
            raise ValueError(f"the rule of {rule.pattern!r} needs a `back` to be read backwards")

    def matches(self, ours):
        return any(inverse.ours.fullmatch(ours) for inverse in self.inverses)

    def write(self, ours, array, tensors, gathered):
        """Put our `array` into `tensors` under the checkpoint's name(s); a tuple target's
        arrays wait in `gathered` until all of them are there."""
        rule = self.rule
        if isinstance(rule.target, Fused):
            stacked = linear(array)  # [parts x out, in] or [parts x out], the parts along the outputs
            size = len(stacked) // len(rule.target.order)
            for inverse, row in zip(self.inverses, self.rows):
                tensors[inverse.apply(ours)] = np.ascontiguousarray(stacked[row * size:(row + 1) * size])
        elif isinstance(rule.target, tuple):
            index = next(index for index, inverse in enumerate(self.inverses) if inverse.ours.fullmatch(ours))
            theirs = self.inverses[index].apply(ours)
            parts = gathered.setdefault(theirs, {})
            parts[index] = ours, array
            if len(parts) == len(rule.target):
                del gathered[theirs]
                value = rule.back(*(parts[index][1] for index in range(len(rule.target))))
                if value is not None:
                    tensors[theirs] = np.ascontiguousarray(value)
        else:
            back = rule.back or rule.how or (lambda same: same)
            tensors[self.inverses[0].apply(ours)] = np.ascontiguousarray(back(array))


def tensors_by_rules(state, rules, prefix="", top_rules=(), unnamed=None):
    """{checkpoint name: array in PyTorch's layout} of our `state` ({name: numpy array}) written
    by `rules` (under `prefix`) and `top_rules` read backwards: what `convert_by_rules` reads back
    as `state`. `unnamed(our name)` is the exception for a tensor no rule writes."""
    writers = [_Writer(rule, prefix) for rule in rules] + [_Writer(rule, "") for rule in top_rules]
    tensors, gathered = {}, {}
    for ours, array in state.items():
        writer = next((writer for writer in writers if writer.matches(ours)), None)
        if writer is None:
            raise unnamed(ours)
        writer.write(ours, array, tensors, gathered)
    for parts in gathered.values():  # a tuple target missing one of its tensors
        raise unnamed(next(iter(parts.values()))[0])
    return tensors


def any_name(arrays, pattern):
    """Whether any checkpoint name fully matches `pattern`."""
    compiled = re.compile(pattern)
    return any(compiled.fullmatch(name) for name in arrays)


class TransformersFamily(CheckpointFamily):
    """A family of transformers' image models. Subclasses set `model_types` (the config.json
    model_type values whose folders hold its tensors; the first is assumed for weights without
    a config.json) and write `detect`, `convert` and `tensor_options`."""
    model_types = ()
    resample = "bicubic"
    resample_source = "transformers' interpolate_pos_encoding"
    resample_detail = "bicubic, align_corners=False, no antialias"
    qk_scale_source = "transformers' attention scales q.k by head_dim^-0.5"

    def read_config(self, checkpoint):
        """The Hugging Face `FolderConfig` beside the weights, or None (none, or a timm one)."""
        return checkpoint.config_of_kind("huggingface")

    def tower(self, checkpoint):
        """The `HFTower` of config.json, checked to be of this family's model types; without a
        config.json, transformers' defaults for the first of them."""
        config = self.read_config(checkpoint)
        if config is None:
            return HFTower(self.model_types[0], {}, "", None), None
        tower = hf_tower(config)
        if tower.model_type not in self.model_types:
            stated = config.values.get("model_type")
            raise WeightsError(f"{config.path}: model_type {stated!r} contradicts the weights beside it, which hold "
                               f"transformers' {HF_MODEL_TYPES[self.model_types[0]]} tensors "
                               f"(model_type {' or '.join(map(repr, self.model_types))}), e.g. "
                               f"{sorted(checkpoint.arrays)[0]}")
        return tower, config

    def tensor_options(self, converted):
        """{option: Implied} the converted tensors show beyond `options_from_tensors` (register
        tokens, layer scale, ...), for weights without a config.json."""
        return {}

    def implied_options(self, checkpoint, converted):
        tower, config = self.tower(checkpoint)
        options = dict(self.tensor_options(converted))
        if config is None:
            options.update({field: Implied(implied.value, f"{implied.reason} (no config.json beside the weights)")
                            for field, implied in hf_computation(tower).items()})
        else:
            options.update(hf_options(config))
        options["qk_scale"] = Implied(None, self.qk_scale_source)
        # what dynamic_img_size computes at another input size, as interpolate_pos_encoding=True does
        options["pos_embed_resample"] = Implied(self.resample, f"{self.resample_source}: {self.resample_detail}")
        return options

    def preprocessing(self, checkpoint):
        """The image processor's ``preprocessor_config.json`` beside the weights, or None: as the
        folder's config.json was read with it, or, for weights without a config.json, read here."""
        config = self.read_config(checkpoint)
        if config is not None:
            path, values = config.processor_path, config.processor
        elif checkpoint.config is None and checkpoint.folder is not None:
            path = os.path.join(checkpoint.folder, PREPROCESSOR_CONFIG)
            values = read_json(path, "the Hugging Face image processor config") if os.path.isfile(path) else None
        else:
            values = None
        if values is None:
            return None
        return {"pipeline": "huggingface", "config": values, "source": path}

    def class_names(self, checkpoint, num_classes):
        """``id2label`` of config.json in class order, or None for none or transformers'
        placeholders (LABEL_0, LABEL_1, ...)."""
        config = self.read_config(checkpoint)
        labels = config.values.get("id2label") if config is not None else None
        if not isinstance(labels, dict) or len(labels) != num_classes:
            return None
        try:
            names = [str(labels[key]) for key in sorted(labels, key=int)]
        except (TypeError, ValueError):
            return None
        if names == [f"LABEL_{index}" for index in range(num_classes)]:
            return None
        return names


# ---- the names that tell transformers' layouts apart (each family claims its own only) ---------

LAYER = r"encoder\.layer\.(?P<layer>\d+)\."
DEIT_MARK = r"(deit\.)?embeddings\.distillation_token"
DINOV2_MARK = r"(dinov2\.|dinov2_with_registers\.)?encoder\.layer\.\d+\.(norm1|norm2|layer_scale1|layer_scale2|mlp)\..+"
REGISTERS_MARK = r"(dinov2\.|dinov2_with_registers\.)?embeddings\.register_tokens"
# DINOv3ViTModel: layers at the top level (no encoder.) with q/k/v/o projections
DINOV3_MARK = r"layer\.\d+\.(attention\.(q|k|v|o)_proj|layer_scale(1|2)\.lambda1|mlp\.(gate|up|down)_proj)\..+"
CLIP_MARK = r"(vision_model\.)?(embeddings\.class_embedding|pre_layrnorm\.(weight|bias))"
SIGLIP_MARK = (r"(vision_model\.)?(embeddings\.patch_embedding\.(weight|bias)|embeddings\.position_embedding\.weight|"
               r"encoder\.layers\.\d+\.(self_attn|layer_norm1|layer_norm2)\..+|head\.probe)")

# transformers' ViT layer (ViT, ViTMAE, DeiT): q, k, v fused; its other Linears and LayerNorms
VIT_LAYER_RULES = [
    Rule(LAYER + r"attention\.attention\.(?P<part>query|key|value)\.(?P<role>weight|bias)", QKV, linear),
    Rule(LAYER + r"layernorm_before\.(?P<role>weight|bias)", r"encoder.layers.\g<layer>.norm1.\g<role>"),
    Rule(LAYER + r"layernorm_after\.(?P<role>weight|bias)", r"encoder.layers.\g<layer>.norm2.\g<role>"),
    Rule(LAYER + r"attention\.output\.dense\.(?P<role>weight|bias)", r"encoder.layers.\g<layer>.attn.proj.\g<role>",
         linear),
    Rule(LAYER + r"intermediate\.dense\.(?P<role>weight|bias)", r"encoder.layers.\g<layer>.mlp.fc1.\g<role>", linear),
    Rule(LAYER + r"output\.dense\.(?P<role>weight|bias)", r"encoder.layers.\g<layer>.mlp.fc2.\g<role>", linear),
]
# the embeddings and the final LayerNorm of ViT, ViTMAE, DeiT and Dinov2
EMBEDDING_RULES = [
    Rule(r"embeddings\.cls_token", "patch_embed.class_token"),
    Rule(r"embeddings\.position_embeddings", "patch_embed.position_embedding"),
    Rule(r"embeddings\.patch_embeddings\.projection\.(?P<role>weight|bias)", r"patch_embed.patch_embedding.\g<role>"),
    Rule(r"layernorm\.(?P<role>weight|bias)", r"encoder.norm.\g<role>"),
]

# transformers' CLIP encoder layer (CLIP, SigLIP): q, k, v fused; its other Linears and LayerNorms
CLIP_LAYER = r"encoder\.layers\.(?P<layer>\d+)\."
CLIP_LAYER_RULES = [
    Rule(CLIP_LAYER + r"self_attn\.(?P<part>q|k|v)_proj\.(?P<role>weight|bias)", QKV, linear),
    Rule(CLIP_LAYER + r"layer_norm(?P<n>1|2)\.(?P<role>weight|bias)", r"encoder.layers.\g<layer>.norm\g<n>.\g<role>"),
    Rule(CLIP_LAYER + r"self_attn\.out_proj\.(?P<role>weight|bias)", r"encoder.layers.\g<layer>.attn.proj.\g<role>",
         linear),
    Rule(CLIP_LAYER + r"mlp\.(?P<fc>fc1|fc2)\.(?P<role>weight|bias)", r"encoder.layers.\g<layer>.mlp.\g<fc>.\g<role>",
         linear),
    Rule(r"embeddings\.position_embedding\.weight", "patch_embed.position_embedding", lambda table: table[None],
         lambda embedding: embedding[0]),
    Rule(r"post_layernorm\.(?P<role>weight|bias)", r"encoder.norm.\g<role>"),
]
# an image-text model's other tower and its scalars; position ids saved as a buffer by older versions
IMAGE_TEXT_SKIP = [r"text_model\..+", r"text_projection\.weight", r"logit_scale", r"logit_bias",
                   r"(vision_model\.)?embeddings\.position_ids"]
