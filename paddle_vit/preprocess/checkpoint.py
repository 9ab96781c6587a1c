"""Which `Preprocess` a model is fed with: the one its checkpoint's library computes, read from the
checkpoint family's hint (`preprocess_for_checkpoint`) at the model's size (`for_model`), with the
data keys a user chose over it, or the recipe's where the checkpoint implies none (`for_evaluation`).

A family's hint is a plain dict: ``{"pipeline": "timm", "config": pretrained_cfg}``,
``{"pipeline": "huggingface", "config": preprocessor_config}``, ``{"pipeline": "torchvision" |
"paddleclas" | "vit_jax"}``, ``{"pipeline": "paddleclas", "config": {"transform_ops": [...]}}``,
``{"pipeline": "openclip", "config": {...}}``; an optional ``"source"`` names the file the config
came from (used in `origin`).
"""
import dataclasses

from ..errors import ConfigError, check_choice
from . import huggingface, jax, openclip, paddleclas, timm, torchvision
from .spec import Preprocess

# pipeline -> the reader of its library's config: (config, image size or None, where) -> Preprocess
READERS = {"timm": timm.from_pretrained_cfg, "huggingface": huggingface.from_processor_config,
           "torchvision": torchvision.from_weights_transforms, "paddleclas": paddleclas.from_transform_ops,
           "vit_jax": jax.from_input_pipeline, "openclip": openclip.from_image_transform}
PIPELINES = tuple(READERS)
# the data keys of the eval transform a user may choose instead of the checkpoint's values
PREPROCESS_KEYS = ("interpolation", "mean", "std", "eval_crop_pct")


def eval_data_keys(data_config):
    """{key of `PREPROCESS_KEYS`: value} of a recipe's data section: what its eval transform reads."""
    return {key: list(value) if isinstance(value, (list, tuple)) else value
            for key, value in ((key, getattr(data_config, key)) for key in PREPROCESS_KEYS)}


def preprocess_for_checkpoint(hint, image_size, where=None):
    """The `Preprocess` a checkpoint family's `hint` implies, at the model's `image_size` (None:
    the size the library's config states), every value checked (a ConfigError naming it)."""
    if not isinstance(hint, dict) or "pipeline" not in hint:
        raise ConfigError(f"a preprocessing hint is a dict with a 'pipeline' key, got {hint!r}")
    pipeline = check_choice("preprocess.pipeline", hint["pipeline"], PIPELINES)
    where = where or hint.get("source") or f"the {pipeline} checkpoint"
    preprocess = READERS[pipeline](hint.get("config"), image_size, where)
    try:
        preprocess._validate()  # every value and the resize bound now, not per image
    except ConfigError as error:
        raise ConfigError(f"{where}: {error}") from None
    return preprocess


def for_model(hint, image_size):
    """The `Preprocess` the checkpoint's own pipeline (`hint`) computes for a model of
    `image_size`, or None for no hint. A pipeline made for another size than the model's is
    scaled to it (the crop the model's size, the resize in proportion), and says so in its origin.

    A value of the checkpoint's pipeline that cannot be used is a ConfigError naming its file
    and key: falling back to the recipe's preprocessing would feed the weights other inputs
    than their library does, and nobody reads a note in the load report."""
    if hint is None:
        return None
    try:
        return preprocess_for_checkpoint(hint, image_size)
    except ConfigError:
        own = preprocess_for_checkpoint(hint, None)  # a bad value raises here, naming it
        if own.image_size == image_size:
            raise
    scaled = dataclasses.replace(
        own, image_size=image_size, resize_size=max(1, round(own.resize_size * image_size / own.image_size)),
        origin=f"{own.origin}, scaled from {own.image_size} to the model's {image_size}")
    try:
        scaled._validate()
    except ConfigError as error:
        raise ConfigError(f"{own.origin}, scaled from {own.image_size} to the model's {image_size}: {error}") from None
    return scaled


def for_evaluation(own, data_config, image_size, chosen=None):
    """The `Preprocess` to feed a model of `image_size` with in evaluation, prediction and export.

    The checkpoint's own (`own`, `for_model`'s) when it has one, with each data key the user chose
    (`chosen`: {key of `PREPROCESS_KEYS`: where it was set, e.g. "-o data.interpolation"})
    replacing that value by `data_config`'s; its ``origin`` then names the checkpoint and each key
    the user chose. Else the recipe's eval transform (`data_config`), as for this project's own
    weights."""
    if own is None:
        return Preprocess.from_config(data_config, image_size, origin="the recipe's data config")
    chosen = {key: where for key, where in (chosen or {}).items() if key in PREPROCESS_KEYS}
    if not chosen:
        return own
    changes = {key: getattr(data_config, key) for key in chosen}
    changes = {key: [float(v) for v in value] if key in ("mean", "std") else value for key, value in changes.items()}
    if "eval_crop_pct" in changes:
        changes["eval_crop_pct"] = float(changes["eval_crop_pct"])
        changes["resize_size"] = int(image_size / changes["eval_crop_pct"])
    replaced = ", ".join(f"{key}={changes[key]!r} from {where} (the checkpoint's: {getattr(own, key)!r})"
                         for key, where in chosen.items())
    return dataclasses.replace(own, **changes, origin=f"{own.origin}; {replaced}")
