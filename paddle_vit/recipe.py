"""Which recipe goes with a set of weights: the one place every command that takes ``--weights``
decides it, so that eval, predict, export and visualize read a checkpoint alike.

In order: the YAML recipe given (``-c``), the registered name given (``--model``), the recipe a
training checkpoint (.pdckpt) stores, the model a timm Hub or Hugging Face folder's config.json
names. A name that contradicts such a folder is an error naming both; weights that say nothing
about their model, given without either option, are an error saying which option to add.
"""
import os

from .checkpoint import load_checkpoint
from .config import load_config
from .errors import ConfigError, WeightsError
from .factory import check_model_name, name_for_folder
from .weights.folders import describe_folder


def config_for_weights(weights, config_path=None, model_name=None, overrides=(), stored=None):
    """The `Config` to build and feed the model of `weights` with (`overrides`: ``-o`` strings).

    stored: the checkpoint dict when the caller has already read the .pdckpt (it is read here
    otherwise)."""
    weights = os.fspath(weights) if not isinstance(weights, dict) else weights
    if isinstance(weights, str) and not os.path.exists(weights):
        raise WeightsError(f"weights file {weights} does not exist")
    if config_path and model_name:
        raise ConfigError("name the model with a recipe (-c CONFIG) or a registered name (--model NAME), not both")
    if config_path:
        config = load_config(config_path, overrides)
        check_model_name(config.model.name, config, weights, f"{config_path}: model.name")
        return config
    if model_name:
        config = load_config(data={"model": {"name": model_name}}, overrides=overrides)
        check_model_name(model_name, config, weights, "--model")
        return config
    if isinstance(weights, str) and weights.endswith(".pdckpt"):  # a training checkpoint stores its recipe
        recipe = (stored if stored is not None else load_checkpoint(weights)).get("config")
        if isinstance(recipe, dict):
            return load_config(data=recipe, overrides=overrides)
    if isinstance(weights, str) and describe_folder(weights) is not None:
        return load_config(data={"model": {"name": name_for_folder(weights)}}, overrides=overrides)
    raise ConfigError(f"name the model with a recipe (-c CONFIG) or a registered name (--model NAME): {weights} is "
                      f"neither a training checkpoint (.pdckpt) that stores its recipe nor a folder whose config.json "
                      f"says what model it is (timm Hub, Hugging Face)")
