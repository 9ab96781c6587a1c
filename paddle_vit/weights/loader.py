"""Loading a checkpoint into a `ViT`, and building the model a checkpoint implies.

``load_pretrained(model, source)`` reads a checkpoint, finds its family (family.py), converts it
to this project's names and layouts, and fits it to the model:

- the options the checkpoint's own code computes it with (Hugging Face's LayerNorm epsilon, the
  JAX tanh GELU, PaddleClas's q.k scale, ...) must be the model's: a model that contradicts one
  is an error under strict=True naming the option to set, unless the caller chose that value on
  purpose (`explicit`);
- the position embedding is resampled when the checkpoint's patch grid differs from the
  model's (paper Section 3.2), as the checkpoint's own code does unless `resample` says otherwise;
- the head is re-initialised to zeros when the class count differs (paper Section 3.2: "a
  zero-initialized D x K feedforward layer"), and a pre-logits layer the model lacks is then
  dropped, as fine-tuning does (paper Appendix B.1.1). With the class count unchanged, a model
  without the checkpoint's pre-logits layer cannot compute its logits: an error under strict;
- anything else that does not fit (a shape of another architecture, a missing or unexpected
  tensor in strict mode) raises `WeightsError` naming the tensor and both shapes. Paddle's
  ``set_state_dict`` only warns on a shape mismatch and leaves the tensor random; here nothing
  is skipped silently, and the values are read back after setting them.

``build_pretrained(name, source, overrides)`` (what ``create_model(name, pretrained=...)`` calls)
first builds the registered model with the options the checkpoint implies, the caller's
overrides winning, then loads it.
"""
import dataclasses
import logging
import math

import numpy as np
import paddle

from ..errors import ConfigError, WeightsError
from ..models import ViT, ViTConfig, get_model_config, list_models
from ..models.rope import DEFAULT_TEMPERATURE
from .family import HEAD, POSITION_EMBEDDING, PRE_LOGITS, Implied
from .folders import model_image_size, resolve_name
from .reading import names
from .resample import RESAMPLE_METHODS, check_method, checkpoint_grid, resample_position_embedding
from .source import resolve_weights

logger = logging.getLogger(__name__)

# options the checkpoint implies that a model contradicting them computes differently
COMPUTED_OPTIONS = ("layer_norm_epsilon", "gelu", "qk_scale", "qkv_bias", "pool", "position_embedding",
                    "backbone_style", "backbone_layers", "backbone", "backbone_width", "rope", "rope_temperature",
                    "rope_rotate_half")
# of those, the architecture a model name fixes: checked, never taken from the checkpoint
ARCHITECTURE_OPTIONS = ("backbone_layers", "backbone", "backbone_width")


@dataclasses.dataclass
class LoadReport:
    """What `load_pretrained` did. Every model tensor is in exactly one of `loaded`,
    `resampled`, `reinitialized` or `missing`.

    Attributes:
        source: the file or folder, or "<dict>".
        format: the family detected: "paddle-vit", "timm", "jax", "huggingface", "paddleclas" or
            "torchvision".
        loaded: model tensors set from the checkpoint (after layout conversion).
        resampled: (model tensor, old grid, new grid) for position embeddings interpolated to
            the model's patch grid, with `resample_method` (and why it was that one).
        reinitialized: model tensors set to zeros instead (the head, see `notes`).
        ignored: checkpoint tensors not used (checkpoint names).
        missing: model tensors the checkpoint lacks, left at their initial values (strict=False).
        options: {option: (value, reason)}: what the checkpoint implies (class count, pre-logits
            layer, epsilon, GELU, ...); with `create_model(name, pretrained=...)`, the options
            the model was built with from the checkpoint.
        overridden: {option: (the model's value, the checkpoint's value, reason)} for options
            chosen on purpose against what the checkpoint implies.
        class_names: the class names the checkpoint records (Hugging Face id2label, timm's
            label_names, a .pdckpt), or None.
        preprocessing: the preprocessing the checkpoint's own code feeds it with, as its family
            states it (``{"pipeline": "timm", "config": pretrained_cfg, "source": path}``,
            ``{"pipeline": "paddleclas"}``, ...), or None when it implies none.
        notes: why tensors were re-initialised or ignored, one sentence each.
    """
    source: str
    format: str
    loaded: list = dataclasses.field(default_factory=list)
    resampled: list = dataclasses.field(default_factory=list)
    resample_method: str = None
    resample_reason: str = None
    reinitialized: list = dataclasses.field(default_factory=list)
    ignored: list = dataclasses.field(default_factory=list)
    missing: list = dataclasses.field(default_factory=list)
    options: dict = dataclasses.field(default_factory=dict)
    overridden: dict = dataclasses.field(default_factory=dict)
    class_names: list = None
    preprocessing: dict = None
    head_is_projection: bool = False
    notes: list = dataclasses.field(default_factory=list)

    def __str__(self):

        lines = [f"loaded {len(self.loaded)} tensors from {self.source} ({self.format} naming)"]
        defaults = {field.name: field.default for field in dataclasses.fields(ViTConfig)}
        notable = {option: value for option, (value, _) in self.options.items()
                   if option == "num_classes" or value != defaults.get(option)}
        if notable:
            lines.append("options from the checkpoint: " + ", ".join(f"{option}={value!r}"
                                                                     for option, value in notable.items()))
        for option, (chosen, implied, _) in self.overridden.items():
            lines.append(f"chosen instead of the checkpoint's: {option}={chosen!r} (it implies {implied!r})")
        for name, old_grid, new_grid in self.resampled:
            lines.append(f"resampled {name}: grid {old_grid[0]}x{old_grid[1]} -> {new_grid[0]}x{new_grid[1]} "
                         f"({self.resample_method}, {self.resample_reason})")
        if self.reinitialized:
            lines.append(f"re-initialised to zeros: {names(self.reinitialized)}")
        if self.ignored:
            lines.append(f"ignored from the checkpoint: {names(self.ignored)}")
        if self.missing:
            lines.append(f"missing, left at their initial values: {names(self.missing)}")
        if self.preprocessing:
            where = self.preprocessing.get("source")
            lines.append(f"preprocessing the checkpoint implies: {self.preprocessing['pipeline']}"
                         + (f" ({where})" if where else ""))
        lines.extend(f"note: {note}" for note in self.notes)
        return "\n".join(lines)


def _shape(shape):
    return "[" + ", ".join(str(size) for size in shape) + "]"


def implied_options(source):
    """{option: Implied} the checkpoint `source` (a path, a dict or a `WeightsSource`) implies
    (factory.py reads a recipe's model.pretrained this way)."""
    return resolve_weights(source).reading().implied


def _computed_value(config, option):
    """The value of `option` the model computes with: its RoPE kind (position_embedding "rope_axial"
    implies one) and that kind's default temperature where the config leaves them None."""
    if option == "rope":
        return config.rope_kind
    if option == "rope_temperature" and config.rope_temperature is None and config.rope_kind is not None:
        return DEFAULT_TEMPERATURE[config.rope_kind]
    return getattr(config, option)


def _same(a, b):
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return list(a) == list(b)
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6)
    return a == b


def _how_to_fix(option, value):
    if option in ARCHITECTURE_OPTIONS:
        hybrids = [name for name in list_models() if get_model_config(name).is_hybrid]
        kind = (f"a hybrid ResNet + ViT checkpoint: build it with a hybrid name ({', '.join(hybrids[:4])}, ...)"
                if value is not None else "a plain ViT checkpoint: build it with a plain ViT name")
        return f"{kind} or {option}={value!r}"
    return f"build the model with {option}={value!r} (paddle_vit.create_model(name, pretrained=...) does)"


def _check_options(model, reading, explicit, strict, report):
    """Compare what the checkpoint implies with the model; raise (strict) or note each
    contradiction, except for options in `explicit`, which are recorded as overridden."""
    config = model.config
    for option in COMPUTED_OPTIONS:
        implied = reading.implied.get(option)
        if implied is None or _same(_computed_value(config, option), implied.value):
            if implied is not None:
                report.options[option] = (implied.value, implied.reason)
            continue
        chosen = _computed_value(config, option)
        if option in explicit:
            report.overridden[option] = (chosen, implied.value, implied.reason)
            continue
        message = (f"{reading.checkpoint.description} implies {option}={implied.value!r} ({implied.reason}) but the "
                   f"model has {option}={chosen!r}: {_how_to_fix(option, implied.value)}, or choose "
                   f"{option}={chosen!r} on purpose: create_model(name, pretrained=..., {option}={chosen!r})")
        if strict:
            raise WeightsError(message)
        report.notes.append(message)
    for option in ("num_classes", "representation_size"):
        if option in reading.implied:
            report.options[option] = (reading.implied[option].value, reading.implied[option].reason)


def _choose_resample(reading, resample):
    if resample is not None:
        return check_method(resample), "chosen explicitly"
    family = reading.family
    return family.resample, f"as {family.resample_source}"


def _fit(model, reading, strict, resample, report):
    """Decide, for every model tensor, where its value comes from; raise on what does not fit.
    Returns {model name: array}."""
    shapes = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    pre_logits = _PreLogits.of(shapes, reading.converted.tensors)
    values = _fit_body(model, reading, shapes, resample, report)
    if "head.weight" in shapes:
        values.update(_fit_head(reading, shapes, pre_logits, strict, report))
    unexpected = _unused(reading.converted, shapes, pre_logits, report)
    if strict and (report.missing or unexpected):
        problems = []
        if report.missing:
            problems.append(f"missing {names(report.missing)}")
        if unexpected:
            problems.append(f"unexpected {names(unexpected)}")
        raise WeightsError(f"{reading.checkpoint.description} does not fit the model: {'; '.join(problems)}"
                           f"{_layout_hint(report.missing, unexpected)} (strict=False loads what fits)")
    report.ignored.extend(unexpected)
    return values


@dataclasses.dataclass(frozen=True)
class _PreLogits:
    """Whether fitting drops the checkpoint's pre-logits layer (the model has none) or the model
    has one the checkpoint lacks."""
    drops: bool
    adds: bool

    @classmethod
    def of(cls, shapes, tensors):
        in_model = any(name.startswith("pre_logits.") for name in shapes)
        in_checkpoint = any(name.startswith("pre_logits.") for name in tensors)
        return cls(drops=in_checkpoint and not in_model, adds=in_model and not in_checkpoint)


def _mismatch(reading, name, expected):
    """The WeightsError of checkpoint tensor `name` (our name) whose shape is not the model's `expected`."""
    tensors = reading.converted.tensors
    checkpoint_name, file_shape = reading.converted.origin.get(name, (name, tensors[name].shape))
    layout = "" if tuple(file_shape) == tensors[name].shape else f" ({_shape(file_shape)} in the file)"
    return WeightsError(
        f"{reading.checkpoint.description}: {checkpoint_name} has shape {_shape(tensors[name].shape)}{layout} but "
        f"the model's {name} is {_shape(expected)}; the checkpoint ({reading.family.title}) is of another "
        f"architecture or size")


def _fit_body(model, reading, shapes, resample, report):
    """{model name: array} of every tensor but the head: taken as it is, the position embedding
    resampled to the model's grid; missing ones reported; any other shape an error."""
    tensors, values = reading.converted.tensors, {}
    for name, shape in shapes.items():
        if name in HEAD:
            continue
        if name not in tensors:
            report.missing.append(name)
        elif tensors[name].shape == shape:
            values[name] = tensors[name]
            report.loaded.append(name)
        elif name == POSITION_EMBEDDING and tensors[name].ndim == 3 and tensors[name].shape[2] == shape[2]:
            values[name] = _resampled_position_embedding(model, reading, resample, report)
        else:
            raise _mismatch(reading, name, shape)
    return values


def _resampled_position_embedding(model, reading, resample, report):
    """The checkpoint's position embedding [1, prefix + N, D] resized to the model's patch grid."""
    table = reading.converted.tensors[POSITION_EMBEDDING]
    prefix = model.patch_embed.num_embedded_prefix  # rows kept as they are (class token, ...)
    old_grid = checkpoint_grid(table.shape[1], reading.checkpoint.description,
                               reading.converted.checkpoint_name(POSITION_EMBEDDING), prefix)
    new_grid = tuple(model.patch_embed.grid_size)
    report.resample_method, report.resample_reason = _choose_resample(reading, resample)
    resampled = resample_position_embedding(table, new_grid, old_grid, num_prefix_tokens=prefix,
                                            method=report.resample_method)
    report.resampled.append((POSITION_EMBEDDING, old_grid, new_grid))
    return resampled


def _fit_head(reading, shapes, pre_logits, strict, report):
    """{head name: array}: the checkpoint's head when it computes the model's classes, else zeros
    (paper Section 3.2) with the reason noted."""
    tensors = reading.converted.tensors
    reason = _head_reinit_reason(reading, shapes, pre_logits, strict)
    if reason is None:
        report.loaded.extend(HEAD)
        return {name: tensors[name] for name in HEAD}
    report.reinitialized.extend(HEAD)
    report.notes.append(f"head re-initialised to zeros (paper Section 3.2): {reason}")
    return {name: np.zeros(shapes[name], "float32") for name in HEAD}


def _head_reinit_reason(reading, shapes, pre_logits, strict):
    """Why the model's head cannot take the checkpoint's (a phrase), or None when it can; a
    WeightsError when it neither fits nor is a head of another class count."""
    tensors, description = reading.converted.tensors, reading.checkpoint.description
    weight, bias = tensors.get("head.weight"), tensors.get("head.bias")
    model_features, model_classes = shapes["head.weight"]
    if weight is None or bias is None:
        return "the checkpoint has no classification head"
    if pre_logits.drops and bias.shape == (model_classes,):
        width = tensors["pre_logits.fc.bias"].shape[0]
        if strict:
            raise WeightsError(
                f"{description} has a pre-logits layer ({reading.converted.checkpoint_name('pre_logits.fc.weight')}, "
                f"{tensors['pre_logits.fc.weight'].shape[0]} -> {width}) that the model lacks, and its "
                f"{model_classes}-class head reads that layer's features: {_how_to_fix('representation_size', width)}, "
                f"or fine-tune with a new zero head by giving another num_classes")
        return "the checkpoint's head reads the pre-logits features the model does not have"
    if pre_logits.drops:
        return f"fine-tuning: the checkpoint has {bias.shape[0]} classes, the model {model_classes}"
    if pre_logits.adds:
        return "the model's head reads the features of a pre_logits layer the checkpoint does not have"
    if weight.shape == shapes["head.weight"] and bias.shape == shapes["head.bias"]:
        return None
    if weight.ndim == 2 and weight.shape[0] == model_features and weight.shape[1] != model_classes:
        return f"the checkpoint has {weight.shape[1]} classes, the model {model_classes}"
    name = "head.weight" if weight.shape != shapes["head.weight"] else "head.bias"
    raise _mismatch(reading, name, shapes[name])


def _unused(converted, shapes, pre_logits, report):
    """The checkpoint names the model has no place for (unexpected in strict mode); what is left
    out on purpose (a dropped pre-logits layer, the head of a model without one, entries outside
    the parameters) goes to `report.ignored` with a note."""
    unexpected = []
    model_has_head = "head.weight" in shapes
    for name in converted.tensors:
        if name in shapes:
            continue
        if name in PRE_LOGITS and pre_logits.drops or name in HEAD and not model_has_head:
            report.ignored.append(converted.checkpoint_name(name))
        else:
            unexpected.append(converted.checkpoint_name(name))
    unexpected.extend(converted.unknown)
    if pre_logits.drops:
        report.notes.append("pre_logits (the pre-training head's hidden layer) dropped, as in fine-tuning")
    if any(name in HEAD for name in converted.tensors) and not model_has_head:
        report.notes.append("the checkpoint's head is ignored: the model has num_classes=0")
    if converted.skipped:
        report.ignored.extend(converted.skipped)
        report.notes.append(f"{len(converted.skipped)} entries outside the parameters ignored")
    return unexpected


def _layout_hint(missing, unexpected):
    if "fc_norm.weight" in unexpected and "encoder.norm.weight" in missing:
        return "; the checkpoint pools by mean with fc_norm: build the model with pool='mean'"
    if "encoder.norm.weight" in unexpected and "fc_norm.weight" in missing:
        return "; the checkpoint pools with the class token: build the model with pool='cls'"
    if any(name.startswith("pre_logits.") for name in missing):
        return "; the checkpoint has no pre_logits layer: build the model with representation_size=None"
    return ""


def _check_values(reading, report):
    """Every checkpoint tensor the model takes must hold finite floating-point numbers. Integer
    arrays (a file that stored its float tensors as integers) would be cast to float silently and
    compute nonsense, and NaN or Inf would spread through every logit; each is refused, naming
    the first such tensor as the file calls it, and how many others there are."""
    tensors, converted = reading.converted.tensors, reading.converted
    taken = report.loaded + [name for name, _, _ in report.resampled]  # re-initialised ones excluded
    not_float = [name for name in taken if tensors[name].dtype.kind != "f"]
    if not_float:
        name = not_float[0]
        raise WeightsError(f"{reading.checkpoint.description}: {_named(converted, name)} is {tensors[name].dtype}"
                           f"{_and_more(not_float)}; expected floating-point weights (float32, float16 or "
                           f"bfloat16): integers would load as rounded weights and compute nonsense; save the "
                           f"float tensors")
    not_finite = {name: _not_finite_counts(tensors[name]) for name in taken}
    not_finite = {name: counts for name, counts in not_finite.items() if counts}
    if not_finite:
        name, counts = next(iter(not_finite.items()))
        raise WeightsError(f"{reading.checkpoint.description}: {_named(converted, name)} holds {counts} of its "
                           f"{tensors[name].size} values{_and_more(not_finite)}; expected finite weights (a run "
                           f"that diverged, or a damaged file): use an earlier checkpoint")


def _named(converted, name):
    """The tensor as the file names it, and as the model does when that differs."""
    in_file = converted.checkpoint_name(name)
    return f"tensor {in_file}" if in_file == name else f"tensor {in_file} (the model's {name})"


def _and_more(names_):
    others = len(names_) - 1
    return f" (and {others} more tensor{'s' if others > 1 else ''} like it)" if others else ""


def _not_finite_counts(array):
    """'3 NaN and 1 Inf' (and values a float32 cannot hold) of a float array, or ''."""
    counts = [(int(np.isnan(array).sum()), "NaN"), (int(np.isinf(array).sum()), "Inf")]
    limit = np.finfo(np.float32).max
    if np.finfo(array.dtype).max > limit:  # float64: finite here, Inf in the float32 model
        with np.errstate(invalid="ignore"):
            counts.append((int((np.abs(array[np.isfinite(array)]) > limit).sum()), "beyond float32's range"))
    return " and ".join(f"{count} {what}" for count, what in counts if count)


def _set_weights(model, values, report, description):
    model_state = model.state_dict()
    for name in report.missing:  # set too, so that set_state_dict has nothing to warn about
        values[name] = model_state[name]
    tensors = {}
    for name, value in values.items():
        target = model_state[name]
        tensor = value if isinstance(value, paddle.Tensor) else paddle.to_tensor(np.ascontiguousarray(value))
        tensors[name] = tensor.astype(target.dtype)
    missing_keys, unexpected_keys = model.set_state_dict(tensors)
    if missing_keys or unexpected_keys:
        raise WeightsError(f"{description}: Paddle did not set {names(list(missing_keys) + list(unexpected_keys))}")
    model_state = model.state_dict()
    for name, tensor in tensors.items():  # set_state_dict skips mismatches with a warning: check
        if not np.array_equal(model_state[name].astype("float32").numpy(), tensor.astype("float32").numpy()):
            raise WeightsError(f"{description}: {name} was not set by set_state_dict")


def _load(model, reading, strict, resample, explicit):
    report = LoadReport(source=reading.checkpoint.description, format=reading.converted.format)
    _check_options(model, reading, set(explicit), strict, report)
    values = _fit(model, reading, strict, resample, report)
    _check_values(reading, report)
    _set_weights(model, values, report, reading.checkpoint.description)
    report.class_names = reading.family.class_names(reading.checkpoint, model.config.num_classes)
    report.preprocessing = reading.family.preprocessing(reading.checkpoint)
    report.head_is_projection = ("head.weight" in report.loaded
                                 and reading.family.head_is_projection(reading.checkpoint, reading.converted))
    logger.debug("%s", report)
    return report


def load_pretrained(model, source, *, strict=True, resample=None, explicit=()):
    """Load a checkpoint into `model` (a `paddle_vit.ViT`) and return a `LoadReport`.

    Args:
        model: the model to fill in place.
        source: a `WeightsSource` (source.py), or a path (this project's ``.pdparams``/``.pdckpt``/``.safetensors``; timm
            ``.safetensors``/``.pth``/``.bin``; PaddleClas or PLSC ``.pdparams``; JAX ``.npz``;
            torchvision's ViT state dicts (``.pth``, ``.safetensors``); Meta's DINOv3 ``.pth`` state dicts;
            a Hugging Face save_pretrained folder or its ``model.safetensors``) or a dict of
            arrays in any of those namings; the family is detected once for the checkpoint.
        strict: raise on checkpoint tensors the model lacks, model tensors the checkpoint
            lacks, an option the checkpoint implies that the model contradicts, and a pre-logits
            layer the model lacks while the class count matches; with False they are ignored /
            left at their initial values / dropped and reported.
        resample: the position-embedding resampling (resample.py's `RESAMPLE_METHODS`); None:
            as the checkpoint's own code does.
        explicit: options of the model chosen on purpose (e.g. ``{"gelu"}`` to compute a JAX
            file with exact GELU, as timm does); contradicting the checkpoint is then no error.

    A shape that does not fit is always an error, except the position embedding (resampled to
    the model's grid) and the head's class count (re-initialised to zeros).
    """
    return _load(model, resolve_weights(source).reading(), strict, resample, explicit)


def _from_checkpoint(error, chosen, overrides):
    """A model option the checkpoint gave that cannot be built (a damaged config.json's value):
    the error names where the value came from (the file and its key), not only the ViTConfig field."""
    for option, implied in chosen.items():
        if option not in overrides and f"model.{option} " in str(error):
            return WeightsError(f"{implied.reason}: {error}")
    return error


def choose_options(implied, overrides, defaults=None):
    """The options to build a model with from a checkpoint's `implied` ones: each, unless the
    caller's `overrides` set it; `defaults` ({option: Implied}) for what the checkpoint does not
    imply. Fine-tuning to another class count drops a pre-logits layer (paper Appendix B.1.1,
    vit_jax's load_pretrained) unless representation_size is given."""
    chosen = {option: value for option, value in (defaults or {}).items() if option not in overrides}
    chosen.update({option: value for option, value in implied.items()
                   if option not in overrides and option not in ARCHITECTURE_OPTIONS})
    classes = implied.get("num_classes")
    if ("num_classes" in overrides and classes is not None and overrides["num_classes"] != classes.value
            and "representation_size" in chosen and chosen["representation_size"].value is not None):
        chosen["representation_size"] = Implied(None, f"fine-tuning to {overrides['num_classes']} classes replaces "
                                                      f"the whole pre-training head (paper Appendix B.1.1)")
    return chosen


def build_pretrained(name, source, overrides, *, resample=None, strict=True, defaults=None,
                     name_given_as="the model name"):
    """The registered model `name` built with the options the checkpoint `source` (a
    `WeightsSource`, or a path or dict it is resolved from) implies
    (`overrides`, ViTConfig fields, win; `defaults`, {option: Implied}, fill in what the
    checkpoint does not imply), with the checkpoint loaded. The model carries the `LoadReport`
    as ``load_report`` and the checkpoint's class names as ``class_names``.

    `name` may be None for a folder whose config.json says what model it is (timm's
    ``architecture``, Hugging Face's sizes); a name that contradicts it is a WeightsError
    naming both (`name_given_as` says where the name came from, for that message)."""

    if resample is not None:
        check_method(resample)
    if name is not None:
        get_model_config(name, **overrides)  # an unknown name or option first, before reading a file
    source = resolve_weights(source)
    given, folder = name, source.model
    name = resolve_name(name, overrides, folder, name_given_as, source.description)
    if folder is not None and "image_size" in folder.options:  # a name of another resolution decides its size
        size = model_image_size(given, overrides, folder)
        if size != folder.options["image_size"].value:
            overrides = {**overrides, "image_size": size}
    reading = source.reading()
    chosen = choose_options(reading.implied, overrides, defaults)
    config = get_model_config(name, **{option: value.value for option, value in chosen.items()}).replace(**overrides)
    try:
        model = ViT(config)
    except ConfigError as error:
        raise _from_checkpoint(error, chosen, overrides) from None
    report = _load(model, reading, strict, resample, explicit=set(overrides))
    report.options = {option: (value.value, value.reason) for option, value in chosen.items()}
    model.load_report = report
    model.class_names = report.class_names
    model.head_is_projection = report.head_is_projection
    return model


__all__ = ["LoadReport", "load_pretrained", "build_pretrained", "implied_options", "RESAMPLE_METHODS"]
