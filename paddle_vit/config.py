"""Typed configuration: YAML file + ``-o section.key=value`` overrides, validated once at load.

A config has the sections model, data, optimizer, schedule, train and eval, one dataclass each
whose keys carry their checks and whose `validate()` checks the section on its own:
paddle_vit/sections/ holds five, paddle_vit/data/config.py the data's. This module is the loader:
it reads the YAML, applies the overrides, checks each value's type, expands "~" in paths, calls
each section's `validate()` once, and then checks the few rules that read two sections.
Every key has a default; a YAML file names only what differs. Values given with ``-o`` are
parsed as YAML scalars (``-o train.epochs=3``, ``-o data.mean=[0.5,0.5,0.5]``), never ``eval``-ed.
"""
import dataclasses
import math
import os
import re
import typing
from typing import List

import yaml

from . import fileio
from .data.config import DataConfig
from .errors import ConfigError, close_matches
from .sections.evaluation import EvalConfig
from .sections.model import ModelConfig
from .sections.optimizer import OptimizerConfig, ScheduleConfig
from .sections.train import DistillationConfig, TrainConfig

__all__ = ["Config", "DataConfig", "DistillationConfig", "EvalConfig", "ModelConfig", "OptimizerConfig",
           "ScheduleConfig", "TrainConfig", "keys_set", "load_config", "recipe_path", "validate"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
# configs/ as an installed package holds it (setup.py maps it to paddle_vit/configs), then as a checkout does
RECIPE_FOLDERS = (os.path.join(_PACKAGE, "configs"), os.path.join(os.path.dirname(_PACKAGE), "configs"))


SECTIONS = {
    "model": ModelConfig,
    "data": DataConfig,
    "optimizer": OptimizerConfig,
    "schedule": ScheduleConfig,
    "train": TrainConfig,
    "eval": EvalConfig,
}


@dataclasses.dataclass
class Config:
    """The whole recipe: one object passed down to the data, the model and the engine."""
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    optimizer: OptimizerConfig = dataclasses.field(default_factory=OptimizerConfig)
    schedule: ScheduleConfig = dataclasses.field(default_factory=ScheduleConfig)
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    name: str = "default"

    def to_dict(self):
        return {section: dataclasses.asdict(getattr(self, section)) for section in SECTIONS}

    @property
    def output_dir(self):
        return self.train.output_dir or os.path.join("output", self.name)

    def save(self, path):
        """Write the resolved config as YAML (atomically)."""

        def write(temporary):
            with open(temporary, "w", encoding="utf-8") as stream:
                stream.write(f"# resolved config of {self.name}: every key, defaults included\n")
                yaml.safe_dump(self.to_dict(), stream, sort_keys=False)
        fileio.atomic_write(path, write)


# ---- loading, overriding, checking ------------------------------------------------------------

def load_config(path=None, overrides=(), data=None):
    """Build a `Config` from a YAML file (or a dict `data`) and `-o section.key=value` strings.

    Raises ConfigError naming the file, key or value and what was expected.
    """
    name = "default"
    if path is not None:
        name = os.path.splitext(os.path.basename(path))[0]
        data = _read_yaml(path)
    data = dict(data or {})
    where = path or "config"
    for override in overrides:
        section, key, value = _parse_override(override)
        data.setdefault(section, {})
        if not isinstance(data[section], dict):
            raise ConfigError(f"{where}: section {section!r} must be a mapping of keys to values")
        if "." in key:  # section.key.subkey: one key of a nested mapping (train.distillation.type)
            key, subkey = key.split(".", 1)
            nested = data[section].get(key)
            if nested is not None and not isinstance(nested, dict):
                raise ConfigError(f"{where}: {section}.{key} is {nested!r}, not a mapping: -o {section}.{key}.{subkey} "
                                  f"cannot set a key in it")
            data[section] = dict(data[section], **{key: dict(nested or {}, **{subkey: value})})  # the file's left whole
            continue
        data[section][key] = value
    config = Config(name=name)
    for section_name, values in data.items():
        if section_name not in SECTIONS:
            raise ConfigError(f"{where}: unknown section {section_name!r}{close_matches(section_name, SECTIONS)}; "
                              f"sections are {', '.join(SECTIONS)}")
        if values is None:
            continue
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: section {section_name!r} must be a mapping of keys to values, "
                              f"got {type(values).__name__}")
        section = getattr(config, section_name)
        fields = {field.name: field for field in dataclasses.fields(section)}
        for key, value in values.items():
            if key not in fields:
                raise ConfigError(f"{where}: unknown key {section_name}.{key}"
                                  f"{close_matches(key, fields)}")
            if isinstance(value, bool) and "true_is" in fields[key].metadata:  # recompute: true = every layer
                value = fields[key].metadata["true_is"] if value else 0
            setattr(section, key, _check_type(f"{section_name}.{key}", value, fields[key].type))
    _expand_user_paths(config)
    validate(config)
    return config


# the keys that name files or folders; "~" in them is the home folder, as a shell would read it
PATH_KEYS = (("model", "pretrained"), ("data", "root"), ("data", "train_list"), ("data", "val_list"),
             ("data", "class_names"), ("train", "output_dir"), ("train", "resume"))


def recipe_path(name):
    """The path of the recipe configs/<name>.yaml that ships with the package: in an installed
    package (a wheel, `pip install .`) it is paddle_vit/configs/, in a checkout configs/ beside
    paddle_vit/. So a notebook or script finds it wherever it runs. Raises ConfigError naming
    the recipes there are."""
    for folder in RECIPE_FOLDERS:
        path = os.path.join(folder, f"{name}.yaml")
        if os.path.isfile(path):
            return path
    shipped = sorted({os.path.splitext(entry)[0] for folder in RECIPE_FOLDERS if os.path.isdir(folder)
                      for entry in os.listdir(folder) if entry.endswith(".yaml")})
    raise ConfigError(f"no recipe {name!r} ships with paddle_vit{close_matches(name, shipped)}; "
                      f"recipes are {', '.join(shipped) or 'none (configs/ is missing)'}")


def _expand_user_paths(config):
    for section, key in PATH_KEYS:
        value = getattr(getattr(config, section), key)
        if isinstance(value, str) and value.startswith("~"):
            setattr(getattr(config, section), key, os.path.expanduser(value))
    distillation = config.train.distillation
    if distillation is not None and isinstance(distillation.teacher, str) and distillation.teacher.startswith("~"):
        distillation.teacher = os.path.expanduser(distillation.teacher)


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is an error, not the last value."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                raise ConfigError(f"key {key!r} appears twice in one section (lines {seen[key] + 1} and "
                                  f"{key_node.start_mark.line + 1}); YAML would silently keep the last")
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def keys_set(section, path=None, overrides=()):
    """{key: where it was set} for the keys of `section` that the YAML file `path` or the ``-o``
    `overrides` set explicitly (an override last, as load_config applies them): what a user
    chose, as opposed to the defaults filled in."""
    chosen = {}
    if path is not None:
        values = (_read_yaml(path) or {}).get(section)
        if isinstance(values, dict):
            chosen.update({key: f"{path}: {section}.{key}" for key in values})
    for override in overrides:
        override_section, key, _ = _parse_override(override)
        if override_section == section:
            chosen[key] = f"-o {section}.{key}"
    return chosen


def _read_yaml(path):
    if not os.path.isfile(path):
        raise ConfigError(f"config file {path} does not exist" if not os.path.exists(path)
                          else f"config file {path} is not a regular file")
    try:
        with open(path, encoding="utf-8") as stream:
            data = yaml.load(stream, Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except ConfigError as error:
        raise ConfigError(f"config file {path}: {error}") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        position = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(f"config file {path} is not valid YAML{position}: {problem}") from error
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"config file {path} cannot be read: {error}") from error
    if data is None:  # an empty file (or only comments) is a mistake, not the default recipe
        raise ConfigError(f"config file {path} is empty; expected a recipe: a mapping of sections (configs/ has some)")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections, got {type(data).__name__}")
    return data


def _parse_override(override):
    """'section.key=value' -> (section, key, value parsed as a YAML scalar)."""
    if "=" not in override:
        raise ConfigError(f"override {override!r} has no '=': write -o section.key=value, e.g. -o train.epochs=5")
    dotted, text = override.split("=", 1)
    parts = dotted.strip().split(".")
    if len(parts) not in (2, 3) or not all(parts):
        raise ConfigError(f"override {override!r} must name section.key (e.g. optimizer.lr=0.001), or "
                          f"section.key.subkey for a nested key (e.g. train.distillation.type=soft)")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as error:
        raise ConfigError(f"override {override!r}: the value is not a valid YAML scalar") from error
    return parts[0], ".".join(parts[1:]), value


def _type_name(annotation):
    origin = typing.get_origin(annotation)
    if origin is typing.Union:
        inner = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return f"{_type_name(inner[0])} or null"
    if origin in (list, List):
        return f"a list of {_type_name(typing.get_args(annotation)[0])}"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(annotation,
                                                                                              str(annotation))


_YAML11_EXPONENT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _check_type(key, value, annotation):
    """Return `value` converted to `annotation` where that loses nothing, else raise ConfigError."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union:
        if value is None:
            return None
        inner = [arg for arg in typing.get_args(annotation) if arg is not type(None)][0]
        if dataclasses.is_dataclass(inner):  # a nested mapping names its own bad key
            return _nested_section(key, value, inner)
        try:
            return _check_type(key, value, inner)
        except ConfigError as error:
            if "finite" in str(error):  # the right type, not a usable value
                raise
            raise ConfigError(f"{key} must be {_type_name(annotation)}, got {value!r}") from None
    if dataclasses.is_dataclass(annotation):
        return _nested_section(key, value, annotation)
    if origin in (list, List):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key} must be {_type_name(annotation)}, got {value!r}")
        item_type = typing.get_args(annotation)[0]
        return [_check_type(key, item, item_type) for item in value]
    if annotation is bool:
        if isinstance(value, bool):
            return value
    elif annotation is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif annotation is float:
        if isinstance(value, str) and _YAML11_EXPONENT.fullmatch(value.strip()):
            value = float(value)  # PyYAML reads 1e-4 (no dot) as a string; it is a number
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise ConfigError(f"{key} must be a finite number, got {value!r}")
            return float(value)
    elif annotation is str:
        if isinstance(value, str):
            return value
    raise ConfigError(f"{key} must be {_type_name(annotation)}, got {value!r}")


def _nested_section(key, value, cls):
    """A mapping given for the nested dataclass `cls` (e.g. train.distillation), each key checked."""
    if isinstance(value, cls):
        value = dataclasses.asdict(value)
    if not isinstance(value, dict):
        raise ConfigError(f"{key} must be null or a mapping of {', '.join(f.name for f in dataclasses.fields(cls))}, "
                          f"got {value!r}")
    fields = {field.name: field for field in dataclasses.fields(cls)}
    checked = {}
    for name, item in value.items():
        if name not in fields:
            raise ConfigError(f"unknown key {key}.{name}{close_matches(name, fields)}; its keys are "
                              f"{', '.join(fields)}")
        checked[name] = _check_type(f"{key}.{name}", item, fields[name].type)
    return cls(**checked)


def validate(config):
    """Check every section on its own, then the rules that read two sections; raise ConfigError
    naming the key."""
    for section in SECTIONS:
        getattr(config, section).validate()
    _check_across_sections(config, config.model.vit_config())
    return config


def _check_across_sections(config, vit):
    """The rules that weigh a key of one section against another section, which neither
    section's `validate()` sees: the model's input channels against the data (every data set
    here gives RGB), the distillation and the attention maps against the model the model section
    builds (`vit`, its ViTConfig)."""
    if vit.in_channels != 3:
        raise ConfigError(f"model.in_channels is {vit.in_channels} but every data set here gives RGB images (grey, "
                          f"RGBA and CMYK ones are converted): set model.in_channels: 3")
    if config.train.distillation is not None and not vit.distilled:
        raise ConfigError("train.distillation trains the student's distillation token, and model.distilled is false: "
                          "set model.distilled: true (with model.pool: cls), or train.distillation: null")
    if config.eval.attention_map_interval and vit.depth == 0:
        raise ConfigError("eval.attention_map_interval draws the attention of the encoder layers, and model.depth is 0 "
                          "(no Transformer): set eval.attention_map_interval=0")
