"""What a checkpoint family is, and finding the one a checkpoint belongs to.

A family is one code base's way of storing a ViT (timm, the original JAX code, Hugging Face
transformers, PaddleClas/PLSC, torchvision, Meta's DINOv3 code, this project). Each lives in one module of this package that
defines ``FAMILY``, an instance of a `CheckpointFamily` subclass with:

- ``detect(checkpoint)``: whether the whole checkpoint is of this family (one decision per
  checkpoint, never per tensor; docs/design.md's traps);
- ``convert(checkpoint)``: its tensors in this project's names and layouts;
- ``implied_options(checkpoint, converted)``: the `ViTConfig` options its own code computes
  it with (Hugging Face's LayerNorm epsilon, the JAX tanh GELU, ...);
- ``resample``: the position-embedding resampling its own code uses (resample.py);
- ``preprocessing(checkpoint)``: the eval preprocessing its own pipeline applies to an image
  (a hint `paddle_vit.preprocess.preprocess_for_checkpoint` turns into a `Preprocess`).

Adding a family means adding one module: `families()` imports every module of the package and
collects their ``FAMILY``.
"""
import dataclasses
import importlib
import pkgutil
import re
from typing import Any

from ..errors import WeightsError
from .reading import names

POSITION_EMBEDDING = "patch_embed.position_embedding"
HEAD = ("head.weight", "head.bias")
PRE_LOGITS = ("pre_logits.fc.weight", "pre_logits.fc.bias")


@dataclasses.dataclass
class ConvertedCheckpoint:
    """A checkpoint in this project's names and layouts.

    tensors: {our name: array}; origin: {our name: (checkpoint name, checkpoint shape)};
    unknown: checkpoint names no rule maps (unexpected in strict mode);
    skipped: checkpoint names outside the parameters (e.g. optimizer state), always ignored.
    """
    format: str
    tensors: dict
    origin: dict
    unknown: list
    skipped: list = dataclasses.field(default_factory=list)

    def checkpoint_name(self, name):
        return self.origin.get(name, (name,))[0]


@dataclasses.dataclass(frozen=True)
class Implied:
    """An option a checkpoint implies: its value and why (for the report and errors)."""
    value: Any
    reason: str


class CheckpointFamily:
    """Base class of the families; see the module docstring. Attributes:

    name: the report's `format` ("timm", "jax", ...); title: who writes such files;
    example: a few of its tensor names, for the error that lists every format;
    resample: the default method of resample.py; resample_source: the code it reproduces.
    """
    name = ""
    title = ""
    example = ""
    resample = "bicubic_antialias"
    resample_source = ""

    def detect(self, checkpoint):
        raise NotImplementedError

    def convert(self, checkpoint):
        raise NotImplementedError

    def implied_options(self, checkpoint, converted):
        """{option: Implied} beyond what the tensors show (see `options_from_tensors`)."""
        return {}

    def preprocessing(self, checkpoint):
        """The preprocessing the checkpoint's own code feeds it with, as a plain dict
        (``{"pipeline": "timm", "config": {...}}``, ``{"pipeline": "paddleclas"}``, ...), or None
        when it implies none (this project's files record theirs in a recipe or an export)."""
        return None

    def head_is_projection(self, checkpoint, converted):
        """Whether the checkpoint's head projects into an embedding space (CLIP's ``proj``: its
        output is an embedding, not class scores). Classifiers: False."""
        return False

    def class_names(self, checkpoint, num_classes):
        """The class names the checkpoint records for its `num_classes` classes, or None."""
        names_ = checkpoint.class_names
        return list(names_) if names_ and len(names_) == num_classes else None


_FAMILIES = []
_BLOCK = re.compile(r"patch_embed\.backbone\.stages\.(\d+)\.blocks\.(\d+)\.")
_RESNET_D_BLOCK = re.compile(r"patch_embed\.backbone\.layer(\d+)\.(\d+)\.")
RESNET_D_STEM = "patch_embed.backbone.conv1.0.weight"  # timm's ResNet-D: the deep stem's first conv


def _units_per_stage(tensors, pattern):
    blocks = {}
    for name in tensors:
        match = pattern.match(name)
        if match:
            blocks.setdefault(int(match.group(1)), set()).add(int(match.group(2)))
    return [len(blocks[stage]) for stage in sorted(blocks)]


def families():
    """Every family, found by importing the modules of this package, sorted by name."""
    if not _FAMILIES:
        package = importlib.import_module(__package__)
        for module_info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{__package__}.{module_info.name}")
            family = getattr(module, "FAMILY", None)
            if isinstance(family, CheckpointFamily):
                _FAMILIES.append(family)
        _FAMILIES.sort(key=lambda family: family.name)
    return list(_FAMILIES)


def detect_family(checkpoint):
    """The one family `checkpoint` belongs to; a WeightsError naming every format when none
    (or, which would be a bug of the rules, more than one) claims it."""
    claimed = [family for family in families() if family.detect(checkpoint)]
    if len(claimed) == 1:
        return claimed[0]
    if claimed:
        raise WeightsError(f"{checkpoint.description}: the layouts of {' and '.join(f.name for f in claimed)} "
                           f"all claim this checkpoint; please report it")
    formats = "; ".join(f"{family.title} ({family.example})" for family in families())
    raise WeightsError(f"{checkpoint.description}: cannot tell the naming scheme from names such as "
                       f"{names(sorted(checkpoint.arrays), 3)}; the formats read are: {formats}")


def options_from_tensors(converted):
    """{option: Implied} that any converted checkpoint shows by its tensors alone: the class
    count (head), a pre-logits layer, the q/k/v bias, and mean pooling with fc_norm."""
    tensors, options = converted.tensors, {}
    if "head.bias" in tensors:
        options["num_classes"] = Implied(int(tensors["head.bias"].shape[0]),
                                         f"{converted.checkpoint_name('head.bias')} has that many classes")
    elif "encoder.norm.weight" in tensors or "fc_norm.weight" in tensors:
        options["num_classes"] = Implied(0, "the checkpoint has no classification head")
    if "pre_logits.fc.bias" in tensors:
        options["representation_size"] = Implied(
            int(tensors["pre_logits.fc.bias"].shape[0]),
            f"{converted.checkpoint_name('pre_logits.fc.bias')}: a pre-logits layer (Linear + tanh)")
    elif "encoder.layers.0.attn.qkv.weight" in tensors or "encoder.layers.0.attn.qkv.q_proj.weight" in tensors:
        options["representation_size"] = Implied(None, "the checkpoint has no pre-logits layer")
    if "encoder.layers.0.attn.qkv.q_bias" in tensors:  # timm's Eva: biases for q and v only
        options["qkv_bias"] = Implied(True, "the q/k/v projection has biases for q and v")
        options["qkv"] = Implied("fused_qv_bias", "the q/k/v projection has biases for q and v only (q_bias, v_bias)")
    elif "encoder.layers.0.attn.qkv.q_proj.weight" in tensors:  # timm's Eva: three projections
        has_bias = "encoder.layers.0.attn.qkv.q_proj.bias" in tensors
        options["qkv_bias"] = Implied(has_bias, "the q and v projections " + ("have" if has_bias else "have no")
                                      + " bias")
        options["qkv"] = Implied("separate", "q, k and v are projected apart (q_proj, k_proj, v_proj)")
    elif "encoder.layers.0.attn.qkv.weight" in tensors:
        has_bias = "encoder.layers.0.attn.qkv.bias" in tensors
        options["qkv_bias"] = Implied(has_bias, "the q/k/v projection " + ("has" if has_bias else "has no") + " bias")
        options["qkv"] = Implied("fused", "q, k and v come from one projection" + (" with a bias" if has_bias else ""))
    if "patch_embed.backbone.stem.conv.weight" in tensors:
        layers = _units_per_stage(tensors, _BLOCK)
        where = converted.checkpoint_name("patch_embed.backbone.stem.conv.weight")
        options["backbone_layers"] = Implied(layers, f"{where}: a hybrid's ResNet with these units per stage")
        options["backbone"] = Implied("resnet_v2", f"{where}: the paper's ResNet-v2 (a 7x7 stem, GroupNorm)")
        options["backbone_width"] = Implied(int(tensors["patch_embed.backbone.stem.conv.weight"].shape[0]) // 64,
                                            f"{where}: the ResNet's stem width / 64")
    elif RESNET_D_STEM in tensors:
        where = converted.checkpoint_name(RESNET_D_STEM)
        options["backbone_layers"] = Implied(_units_per_stage(tensors, _RESNET_D_BLOCK),
                                             f"{where}: a hybrid's ResNet with these units per stage")
        options["backbone"] = Implied("resnet_d", f"{where}: timm's ResNet-D (a deep 3x3 stem, BatchNorm)")
    elif "patch_embed.patch_embedding.weight" in tensors:
        options["backbone_layers"] = Implied(None, "a plain ViT: the patches are cut from the image, no ResNet")
    if "fc_norm.weight" in tensors and "encoder.norm.weight" not in tensors:
        options["pool"] = Implied("mean", f"{converted.checkpoint_name('fc_norm.weight')}: mean pooling, "
                                          f"normalised after pooling (timm's global_pool='avg')")
    return options
