"""Models built by name, by recipe, or for a weights file, with the options a checkpoint implies:
where the model registry meets the checkpoint loaders.

`models/` knows the architectures and `weights/` the checkpoint families (it builds on
`models/`); this module joins both to the registry and the recipes:

- `create_model(name, pretrained=None, **overrides)`, the public entry point;
- `build_model` (training): ``model.pretrained`` is the checkpoint; the data set decides the
  class count (fine-tuning re-initialises the head when it differs);
- `build_model_for_weights` / `model_for_evaluation` (evaluation, prediction, export, figures):
  the weights to evaluate are the checkpoint, their head decides the class count; what they do
  not record themselves (a bare ``.pdparams`` records no epsilon or GELU) comes from the
  recipe's ``model.pretrained``, the checkpoint the run was fine-tuned from.

Two ways, one rule: a checkpoint decides the options it implies (class count, pre-logits layer,
epsilon, GELU, ...), and the model keys a recipe sets win.
"""
import dataclasses
import logging

from . import runtime
from .errors import ConfigError, WeightsError
from .models import ViT, ViTConfig, get_model_config, list_models, search_order, search_tier
from .preprocess.checkpoint import for_evaluation, for_model
from .preprocess.timm import name_hint
from .variants import runs_on_cpu, use_cpu_fast_paths
from .weights import Implied, build_pretrained, implied_options
from .weights.folders import model_image_size, resolve_name
from .weights.source import resolve_weights

logger = logging.getLogger("paddle_vit")

# the options that change what a checkpoint computes and that a fine-tuned run inherits from the
# checkpoint it started from
INHERITED_OPTIONS = ("layer_norm_epsilon", "gelu", "qk_scale")


def create_model(name=None, pretrained=None, *, resample=None, strict=True, **overrides):
    """Build the registered model `name`; `overrides` are `ViTConfig` fields (``num_classes``,
    ``image_size``, ``pool``, ``drop_path``, ``layer_norm_epsilon``, ``gelu``, ``qk_scale``, ...).

    With `pretrained` (a weights file, a Hugging Face save_pretrained folder, a timm Hub folder,
    a dict of arrays, or the `paddle_vit.weights.WeightsSource` resolved from one), the model is
    built with the options the checkpoint implies (its class count, a pre-logits layer, a
    folder's config.json, the JAX code's tanh GELU, ...), `overrides` winning, and loaded with
    `paddle_vit.load_pretrained` (`resample` and `strict` as there).
    ``model.load_report`` then says what was loaded and which options came from the checkpoint;
    ``model.class_names`` holds the class names it records, or None.

    `name` may be left out (None) when `pretrained` is a folder whose config.json says what it
    is: a timm Hub folder's ``architecture`` and ``model_args``, a Hugging Face folder's sizes.
    A name that contradicts the folder is a WeightsError naming both.

    On a CPU the model computes with the CPU fast paths (`paddle_vit.variants`: the same numbers,
    the same parameters and names) and the first model makes the process settings that change no
    result (`runtime.configure_for_models`), as the commands do;
    `paddle_vit.variants.use_walkthrough_modules(model)` gives every layer the walkthrough's module
    back.
    """
    if pretrained is None:
        if name is None:
            raise ConfigError("create_model needs a model name (paddle_vit.list_models()), or pretrained= a folder "
                              "whose config.json says what model it is")
        return fast_on_cpu(ViT(get_model_config(name, **overrides)))
    model = build_pretrained(name, resolve_weights(pretrained), overrides, resample=resample, strict=strict,
                             name_given_as="create_model's name")
    return fast_on_cpu(with_checkpoint_preprocess(with_name_preprocessing(model, name)))


def fast_on_cpu(model):
    """`model` with the CPU fast paths and the process settings that change no result, when Paddle
    computes on the CPU; as it is elsewhere."""
    if runs_on_cpu():
        runtime.configure_for_models()
        use_cpu_fast_paths(model)
    return model


def with_name_preprocessing(model, name):
    """A checkpoint that says no preprocessing of its own (a bare timm or OpenCLIP file) loaded
    under a name of today's ViTs is evaluated as timm evaluates that name: its default
    pretrained_cfg (`paddle_vit.preprocess.timm.timm_eval_config`)."""
    if model.load_report.preprocessing is None:
        model.load_report.preprocessing = name_hint(name)
    return model


# ---- the preprocessing a checkpoint implies ----------------------------------------------------

def with_checkpoint_preprocess(model):
    """`model` (built by `build_pretrained`) with ``model.preprocess``: the `Preprocess` its
    checkpoint's own pipeline computes at the model's image size (timm's pretrained_cfg, a
    Hugging Face preprocessor_config.json, PaddleClas's, vit_jax's), or None when the checkpoint
    implies none (`paddle_vit.preprocess.checkpoint.for_model`). A model that takes any input size
    (dynamic_img_size: DINOv3, timm's folders that say so) is fed at the size its pipeline states, as
    timm's resolve_data_config feeds it (a DINOv3 folder's 256 px whatever img_size it was built at)."""
    hint = model.load_report.preprocessing
    says_size = hint is not None and "input_size" in (hint.get("config") or {})  # a folder's own pipeline
    size = None if model.config.dynamic_img_size and says_size else model.config.image_size
    model.preprocess = for_model(hint, size)
    return model


def eval_preprocess(model, data_config, chosen=None):
    """The `Preprocess` to feed `model` with in evaluation, prediction and export: the checkpoint's
    own with the data keys the user `chosen`, else the recipe's
    (`paddle_vit.preprocess.checkpoint.for_evaluation`)."""
    return for_evaluation(getattr(model, "preprocess", None), data_config, model.config.image_size, chosen)


def check_model_name(name, config, source, given_as):
    """Raise a WeightsError naming both when the model `name` (with the model keys of `config`)
    contradicts what the folder of `source` (a `WeightsSource`) says it is (timm Hub, Hugging Face
    config.json); `given_as` says where the name came from ("--model", "model.name of X")."""
    resolve_name(name, config.model.vit_overrides(), source.model, given_as, source.description)


def name_for_folder(source):
    """The registered model name the folder of `source` (a `WeightsSource`) says it is (its
    config.json): timm's ``architecture``, or the registered ViT with a Hugging Face config's
    sizes (one of the same patch and image size when none has them: the folder's sizes are then
    set on it)."""
    return resolve_name(None, {}, source.model, "", source.description)


def model_keys_for_recorded(recorded, name=None, where="the recorded model_config"):
    """The model section ({"name": NAME, field: value, ...}) that builds the `ViTConfig` fields
    `recorded` (what `save_weights` writes into a .safetensors file's metadata): `name` when it is
    registered, else the registered model that differs from them in the fewest fields; the
    fields where they differ are set as model keys."""
    fields = {field.name for field in dataclasses.fields(ViTConfig)}
    unknown = sorted(set(recorded) - fields)
    if unknown:
        raise WeightsError(f"{where} holds keys that are not ViTConfig fields ({', '.join(unknown)}): it was written "
                           f"by another version of paddle-vit; name the model with --model NAME")

    def differences(candidate):
        config = dataclasses.asdict(get_model_config(candidate))
        return {field: value for field, value in recorded.items() if value != config[field]}

    candidates = [name] if name in list_models() else search_order()
    # an exact match first; else the nearest of the first tier (search_order), then of the rest
    best = min(candidates, key=lambda candidate: (len(differences(candidate)) > 0, search_tier(candidate),
                                                  len(differences(candidate))))
    return {"name": best, **differences(best)}


def model_overrides(config, num_classes=None):
    """The ViTConfig fields `config.model` sets; `num_classes` fills in a `model.num_classes: null`."""
    overrides = config.model.vit_overrides()
    if config.model.num_classes is None and num_classes is not None:
        overrides["num_classes"] = num_classes
    return overrides


def resolve_model_config(config, num_classes=None):
    """The `ViTConfig` the model section describes, before any checkpoint is read."""
    return get_model_config(config.model.name, **model_overrides(config, num_classes)).validate()


def pretrained_source(config):
    """The `WeightsSource` of the recipe's ``model.pretrained`` (the checkpoint a run starts or was
    fine-tuned from), or None: resolved once by the command, then handed to `input_size` and
    `build_model`."""
    return resolve_weights(config.model.pretrained) if config.model.pretrained else None


def input_size(config, pretrained=None):
    """The image size the model of `config` takes: ``model.image_size`` when the recipe sets it,
    else, for the folder's own model, the one its config.json states (`pretrained`, the
    `WeightsSource` of ``model.pretrained``: a timm Hub folder's model_args.img_size, a Hugging
    Face config's image_size; `paddle_vit.weights.folders.model_image_size`), else the
    registered one."""
    if pretrained is not None and pretrained.model is not None:
        return int(model_image_size(config.model.name, config.model.vit_overrides(), pretrained.model))
    return resolve_model_config(config, num_classes=2).image_size


def build_model(config, num_classes=None, load_weights=True, pretrained=None):
    """Create the ViT of `config.model`; when `model.pretrained` names weights (`pretrained`: their
    `WeightsSource`, resolved here when not given), build it with the options they imply and load
    them (resampling the position embedding and re-initialising the head as needed)."""
    overrides = model_overrides(config, num_classes)
    if load_weights and config.model.pretrained:
        model = build_pretrained(config.model.name, pretrained or pretrained_source(config), overrides,
                                 resample=config.model.pretrained_resample, name_given_as="model.name")
        logger.info("loaded %s:\n%s", config.model.pretrained, model.load_report)
        return model
    return ViT(get_model_config(config.model.name, **overrides).validate())


def inherited_options(config, source):
    """{option: Implied} of `INHERITED_OPTIONS` that the recipe's ``model.pretrained`` implies
    (none when it is unset or names the weights `source` itself)."""
    pretrained = config.model.pretrained
    if not pretrained or source.path == pretrained:
        return {}
    try:
        implied = implied_options(pretrained)
    except WeightsError as error:
        raise WeightsError(f"model.pretrained, the checkpoint these weights were fine-tuned from, decides how they "
                           f"compute (epsilon, GELU, q.k scale) but cannot be read: {error}; set those model keys "
                           f"or model.pretrained=null") from None
    return {option: Implied(value.value, f"from model.pretrained {pretrained}: {value.reason}")
            for option, value in implied.items() if option in INHERITED_OPTIONS}


def build_model_for_weights(config, weights):
    """The model of `config.model` built for, and loaded with, `weights` (a `WeightsSource`, or a
    path or mapping it is resolved from) as evaluation uses it: strict, the class count from the
    weights unless the config sets it, the head never re-initialised."""
    source = resolve_weights(weights)
    where = source.path if source.path is not None else "the weights"
    model = build_pretrained(config.model.name, source, config.model.vit_overrides(),
                             defaults=inherited_options(config, source), resample=config.model.pretrained_resample,
                             name_given_as="model.name")
    with_checkpoint_preprocess(with_name_preprocessing(model, config.model.name))
    report = model.load_report
    if report.reinitialized:
        raise WeightsError(f"{where} does not fit the model for evaluation: {', '.join(report.reinitialized)} "
                           f"had to be re-initialised ({report.notes[0] if report.notes else 'another class count'}); "
                           f"evaluate with the config it was trained with")
    return model


def model_for_evaluation(config, weights, use_ema=False, num_classes=None, class_names=None):
    """The model `config` describes, built for and loaded with `weights` (a `WeightsSource`, or
    a path or mapping it is resolved from; see `build_model_for_weights`), with `use_ema` the EMA
    weights of a .pdckpt, in eval mode; `num_classes`, the data set's class count, must be the
    head's, and `class_names`, the data set's classes, must be those a paddle-vit checkpoint
    records (a .pdckpt, or .safetensors weights of a run), in the same order."""
    source = resolve_weights(weights)
    model = build_model_for_weights(config, source.ema() if use_ema else source)
    check_fits_data(model, source.description, num_classes, class_names)
    model.eval()
    return model


def check_fits_data(model, path, num_classes=None, class_names=None):
    """Raise a WeightsError when the model loaded from `path` cannot be evaluated on data of
    `num_classes` classes named `class_names` (see `model_for_evaluation`)."""
    if num_classes is not None and model.config.num_classes != num_classes:
        raise WeightsError(f"{path} does not fit the model for evaluation: its head has {model.config.num_classes} "
                           f"classes, the validation data {num_classes}; evaluate with the config it was trained with")
    recorded = model.class_names if model.load_report.format == "paddle-vit" else None
    if class_names is not None and recorded is not None and list(recorded) != list(class_names):
        raise WeightsError(f"{path} was trained on other classes than the validation data has: "
                           f"{describe_class_difference(recorded, class_names)}; evaluate on data with the "
                           f"class folders it was trained on")


def describe_class_difference(recorded, found, limit=5):
    """What differs between the class lists `recorded` (a checkpoint's) and `found` (the data's),
    in a few words: the names only one side has, or else the first position where the order differs."""
    def few(items):
        items = list(items)
        return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")
    only_recorded = [name for name in recorded if name not in set(found)]
    only_found = [name for name in found if name not in set(recorded)]
    parts = []
    if only_recorded:
        parts.append(f"the checkpoint's {few(only_recorded)} not in the data")
    if only_found:
        parts.append(f"the data's {few(only_found)} not in the checkpoint")
    if not parts:
        index = next(i for i, (a, b) in enumerate(zip(recorded, found)) if a != b)
        parts.append(f"the same names in another order (class {index} is {recorded[index]} in the checkpoint, "
                     f"{found[index]} in the data)")
    return "; ".join(parts)
