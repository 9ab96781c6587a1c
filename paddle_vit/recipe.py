"""Which recipe goes with a set of weights: the one place every command that takes ``--weights``
decides it, so that eval, predict, export and visualize read a checkpoint alike.

In order: the YAML recipe given (``-c``), the registered name given (``--model``), the recipe a
training checkpoint (.pdckpt) stores, the model a timm Hub or Hugging Face folder's config.json
names, the `ViTConfig` a .safetensors written by `paddle_vit.weights.save_weights` records. A
name that contradicts such a folder is an error naming both; weights that say nothing about
their model, given without either option, are an error saying which option to add.
"""
import json
import os

from .config import load_config
from .errors import ConfigError, WeightsError
from .factory import check_model_name, model_keys_for_recorded, name_for_folder
from .preprocess.checkpoint import PREPROCESS_KEYS
from .weights.source import resolve_weights


def config_for_weights(weights, config_path=None, model_name=None, overrides=()):
    """The `Config` to build and feed the model of `weights` with (`overrides`: ``-o`` strings).

    weights: a `paddle_vit.weights.source.WeightsSource`, as the command resolved it, or a path
    or dict it is resolved from here. A .pdckpt's recipe and a .safetensors file's recorded
    config are read through it, so that the model is later built from the same reading."""
    source = resolve_weights(weights)
    if source.path is not None and not os.path.exists(source.path):
        raise WeightsError(f"weights file {source.path} does not exist")
    if config_path and model_name:
        raise ConfigError("name the model with a recipe (-c CONFIG) or a registered name (--model NAME), not both")
    if config_path:
        config = load_config(config_path, overrides)
        check_model_name(config.model.name, config, source, f"{config_path}: model.name")
        return config
    if model_name:
        config = load_config(data={"model": {"name": model_name}}, overrides=overrides)
        check_model_name(model_name, config, source, "--model")
        return config
    if source.is_training_checkpoint:  # a training checkpoint stores its recipe
        recipe = source.training_state().get("config")
        if isinstance(recipe, dict):
            return load_config(data=recipe, overrides=overrides)
    if source.model is not None:
        return load_config(data={"model": {"name": name_for_folder(source)}}, overrides=overrides)
    recorded = recorded_recipe(source)
    if recorded is not None:
        try:
            return load_config(data=recorded, overrides=overrides)
        except ConfigError as error:  # a value of the file's, unless an override is to blame
            if overrides:
                raise
            raise WeightsError(f"{source.description}: its recorded recipe: {error}") from None
    raise ConfigError(f"name the model with a recipe (-c CONFIG) or a registered name (--model NAME): "
                      f"{source.description} is neither a training checkpoint (.pdckpt) that stores its recipe, "
                      f"nor a folder whose config.json says what model it is (timm Hub, Hugging Face), nor a "
                      f".safetensors file whose metadata records its model (paddle_vit.weights.save_weights)")


def recorded_recipe(source):
    """The recipe a .safetensors file's metadata records (`save_weights`), or None when it records
    no model (or is another file): the model section ({"name": ..., field: value}) that builds its
    `ViTConfig`, and the data keys of the eval transform it was validated with (a run's weights)."""
    if source.path is None or not source.path.lower().endswith(".safetensors"):
        return None
    checkpoint = source.checkpoint()  # the tensors are read now, once: the model is built from this reading
    if not checkpoint.model_config:
        return None
    model = model_keys_for_recorded(checkpoint.model_config, checkpoint.file_metadata.get("model_name"),
                                    f"{source.description}: its model_config metadata")
    eval_data = checkpoint.file_metadata.get("eval_data")
    if eval_data is None:
        return {"model": model}
    try:
        eval_data = json.loads(eval_data)
    except ValueError:
        raise WeightsError(f"{source.description}: its eval_data metadata is not JSON") from None
    if not isinstance(eval_data, dict) or not set(eval_data) <= set(PREPROCESS_KEYS):
        raise WeightsError(f"{source.description}: its eval_data metadata must map data keys of the eval transform "
                           f"({', '.join(PREPROCESS_KEYS)}) to values, got {eval_data!r}")
    return {"model": model, "data": eval_data}
