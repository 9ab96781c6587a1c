"""Config loading: YAML + overrides, type and range checks, saving the resolved config."""
import dataclasses
import glob
import os
import re
from typing import Optional

import pytest
import yaml

from paddle_vit import ConfigError, ViTConfig
from paddle_vit.config import (DataConfig, DistillationConfig, EvalConfig, ModelConfig, OptimizerConfig, ScheduleConfig,
                               TrainConfig, load_config)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write(tmp_path, text, name="recipe.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_defaults_then_file_then_overrides(tmp_path):
    path = write(tmp_path, "train:\n  epochs: 7\n  batch_size: 16\noptimizer:\n  lr: 0.002\n")
    config = load_config(path, ["train.epochs=3", "data.mean=[0.1, 0.2, 0.3]", "model.pretrained=w.npz"])
    assert config.train.epochs == 3  # the override wins over the file
    assert config.train.batch_size == 16 and config.optimizer.lr == 0.002  # the file wins over defaults
    assert config.data.mean == [0.1, 0.2, 0.3] and config.model.pretrained == "w.npz"
    assert config.optimizer.weight_decay == 0.05  # default
    assert config.name == "recipe" and config.output_dir == os.path.join("output", "recipe")


def test_override_values_are_yaml_scalars_not_code(tmp_path):
    config = load_config(overrides=["model.representation_size=null", "train.ema=true", "optimizer.lr=1e-4"])
    assert config.model.representation_size is None and config.train.ema is True and config.optimizer.lr == 1e-4
    with pytest.raises(ConfigError, match="train.output_dir must be a string or null"):
        load_config(overrides=["train.output_dir=[__import__('os')]"])


def test_a_key_given_twice_is_an_error_naming_both_lines(tmp_path):
    path = write(tmp_path, "train:\n  epochs: 2\n  batch_size: 4\n  epochs: 3\n")
    with pytest.raises(ConfigError, match=r"key 'epochs' appears twice in one section \(lines 2 and 4\)"):
        load_config(path)
    path = write(tmp_path, "train: {epochs: 2}\nmodel: {depth: 2}\ntrain: {epochs: 3}\n", name="sections.yaml")
    with pytest.raises(ConfigError, match="key 'train' appears twice"):
        load_config(path)


def test_home_folder_in_paths_is_expanded():
    config = load_config(overrides=["train.output_dir=~/runs/x", "model.pretrained=~/w.npz"])
    assert config.train.output_dir == os.path.expanduser("~/runs/x")
    assert config.model.pretrained == os.path.expanduser("~/w.npz")


def test_attention_maps_of_a_model_without_attention_are_refused():
    with pytest.raises(ConfigError, match="eval.attention_map_interval draws the attention.*model.depth is 0"):
        load_config(overrides=["model.depth=0", "eval.attention_map_interval=1"])


def test_the_options_of_other_codes_are_model_keys():
    config = load_config(overrides=["model.layer_norm_epsilon=1e-12", "model.gelu=tanh", "model.qk_scale=0.036"])
    assert config.model.vit_overrides() == {"layer_norm_epsilon": 1e-12, "gelu": "tanh", "qk_scale": 0.036}


def test_integer_given_for_float_is_accepted_but_not_the_reverse():
    assert load_config(overrides=["optimizer.lr=1"]).optimizer.lr == 1.0
    with pytest.raises(ConfigError, match="train.epochs must be an integer, got 2.5"):
        load_config(overrides=["train.epochs=2.5"])


@pytest.mark.parametrize("override, message", [
    ("train.epoch=3", "unknown key train.epoch (did you mean: epochs?)"),
    ("trian.epochs=3", "unknown section 'trian' (did you mean: train?)"),
    ("train.epochs=abc", "train.epochs must be an integer, got 'abc'"),
    ("train.ema=maybe", "train.ema must be true or false"),
    ("optimizer.lr=0", "optimizer.lr must be > 0.0"),
    ("optimizer.lr=-1e-3", "optimizer.lr must be > 0.0"),
    ("train.batch_size=0", "train.batch_size must be >= 1"),
    ("train.epochs=-2", "train.epochs must be >= 1"),
    ("model.dropout=1.0", "model.dropout must be in [0, 1)"),
    ("model.drop_path=-0.1", "model.drop_path must be in [0, 1)"),
    ("model.attention_dropout=1.5", "model.attention_dropout must be in [0, 1)"),
    ("data.hflip=2", "data.hflip must be in [0, 1]"),
    ("train.device=tpu", "train.device must be one of auto, gpu, cpu"),
    ("model.pool=max", "model.pool must be one of cls, mean, walkthrough"),
    ("model.name=vit_tiny_patch16_244", "unknown model 'vit_tiny_patch16_244' (did you mean: vit_tiny_patch16_224"),
    ("model.image_size=100", "image_size 100 is not divisible by patch_size 7"),
    ("model.num_heads=5", "model.embed_dim 16 is not divisible by model.num_heads 5"),
    ("data.dataset=mnist", "data.dataset must be one of digits, imagefolder"),
    ("data.mean=[0.5, 0.5]", "data.mean must be a list of 3 numbers"),
    ("model.gelu=erf", "model.gelu must be one of exact, tanh"),
    ("model.layer_norm_epsilon=.inf", "model.layer_norm_epsilon must be a finite number"),
    ("model.qk_scale=0", "model.qk_scale must be a finite number > 0"),
    ("model.pretrained_resample=nearest", "model.pretrained_resample must be one of bicubic_antialias"),
    ("model.depth=-1", "model.depth must be an integer >= 0"),
    ("data.train_fraction=1.5", "data.train_fraction must be in (0, 1]"),
    ("model.backbone_layers=[0]", "model.backbone_layers must be null (no ResNet) or a list of at most 4"),
    ("model.backbone_style=torch", "model.backbone_style must be one of timm, jax"),
    ("schedule.warmup_epochs=.inf", "schedule.warmup_epochs must be a finite number, got inf"),
    ("data.std=[0.5, .nan, 0.5]", "data.std must be a finite number, got nan"),
    ("data.mixup_alpha=.inf", "data.mixup_alpha must be a finite number"),
    ("model.layer_norm_epsilon=.nan", "model.layer_norm_epsilon must be a finite number"),
    ("model.in_channels=1", "model.in_channels is 1 but every data set here gives RGB images"),
    ("train.epochs", "has no '='"),
    ("epochs=3", "must name section.key"),
])
def test_bad_values_are_rejected_naming_the_key(override, message):
    with pytest.raises(ConfigError) as error:
        load_config(overrides=[override])
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="config file .*nowhere.yaml does not exist"):
        load_config(str(tmp_path / "nowhere.yaml"))


def test_invalid_yaml_names_file_and_line(tmp_path):
    path = write(tmp_path, "train:\n  epochs: 3\n  batch_size: [1, 2\n")
    with pytest.raises(ConfigError, match=r"recipe.yaml is not valid YAML at line \d+"):
        load_config(path)


def test_top_level_must_be_a_mapping(tmp_path):
    with pytest.raises(ConfigError, match="must hold a mapping of sections"):
        load_config(write(tmp_path, "- 1\n- 2\n"))


@pytest.mark.parametrize("text", ["", "\n", "# only a comment\n"])
def test_an_empty_recipe_is_refused_not_taken_for_the_defaults(tmp_path, text):
    """An empty -c file trained the default recipe (a slow run, not the one meant), and eval and
    export then failed on a shape that did not fit the weights."""
    with pytest.raises(ConfigError, match="recipe.yaml is empty; expected a recipe"):
        load_config(write(tmp_path, text))


def test_imagefolder_needs_a_root():
    with pytest.raises(ConfigError, match="data.root must name the ImageFolder root"):
        load_config(overrides=["data.dataset=imagefolder"])


def test_resolved_config_round_trips(tmp_path):
    config = load_config(overrides=["train.epochs=4", "model.embed_dim=32"])
    path = tmp_path / "resolved.yaml"
    config.save(str(path))
    saved = yaml.safe_load(path.read_text())
    assert saved["train"]["epochs"] == 4 and saved["optimizer"]["weight_decay"] == 0.05
    assert load_config(data=saved).to_dict() == config.to_dict()


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(REPO, "configs", "*.yaml"))))
def test_every_shipped_config_loads(path):
    load_config(path)


# ---- each section checks itself; the loader checks what reads two sections ---------------------

def test_the_model_section_lists_every_vit_config_field_as_an_override():
    """A field added to ViTConfig must be written into ModelConfig too, as Optional with None
    (the registered value), in ViTConfig's order: the resolved YAML lists them in that order."""
    own = ["name", "pretrained", "pretrained_resample", "freeze"]
    assert [field.name for field in dataclasses.fields(ModelConfig)] == own + ViTConfig.field_names()
    overrides = {field.name: field for field in dataclasses.fields(ModelConfig)}
    for field in dataclasses.fields(ViTConfig):
        assert overrides[field.name].type == Optional[field.type], field.name
        assert overrides[field.name].default is None, field.name


def test_every_vit_config_field_set_in_a_recipe_reaches_the_model():
    recipe = {"model": {"name": "vit_tiny_patch16_224", "drop_path": 0.1, "dynamic_img_size": True,
                        "recompute": True, "backbone_layers": None}}
    config = load_config(data=recipe)
    assert config.model.vit_overrides() == {"drop_path": 0.1, "dynamic_img_size": True, "recompute": 1}
    built = config.model.vit_config()
    assert built.drop_path == 0.1 and built.dynamic_img_size and built.recompute == 1 and built.embed_dim == 192


SECTION_CLASSES = {"model": ModelConfig, "data": DataConfig, "optimizer": OptimizerConfig, "schedule": ScheduleConfig,
                   "train": TrainConfig, "eval": EvalConfig}


def section_alone(section, values):
    """The section's dataclass made of `values` as a recipe gives them (a mapping for the nested
    train.distillation), without the loader."""
    if "distillation" in values:
        values = dict(values, distillation=DistillationConfig(**values["distillation"]))
    return SECTION_CLASSES[section](**values)


@pytest.mark.parametrize("section, values, message", [
    ("data", {"hflip": 2.0}, "data.hflip must be in [0, 1], got 2.0"),
    ("data", {"random_erasing": -0.5}, "data.random_erasing must be in [0, 1], got -0.5"),
    ("data", {"eval_crop_pct": 1.5}, "data.eval_crop_pct must be in (0, 1], got 1.5"),
    ("data", {"eval_crop_pct": 0.0}, "data.eval_crop_pct must be in (0, 1], got 0.0"),
    ("data", {"split_seed": -1}, "data.split_seed must be in [0, 2**32 - 1], got -1"),
    ("data", {"std": [0.5, 0.0, 0.5]}, "data.std must be > 0 for every channel"),
    ("data", {"auto_augment": "four_augment"}, "data.auto_augment must be one of none, three_augment"),
    ("data", {"color_jitter": -0.1}, "data.color_jitter must be a finite number >= 0"),
    ("data", {"repeated_augmentation": 0}, "data.repeated_augmentation must be an integer >= 1"),
    ("data", {"auto_augment": "three_augment", "randaugment_num_ops": 2}, "two augmentation policies"),
    ("data", {"dataset": "imagefolder"}, "data.root must name the ImageFolder root"),
    ("data", {"dataset": "filelist", "root": "images", "train_list": "train.txt", "val_list": "val.txt",
              "list_separator": ""}, "data.list_separator must be null (any spaces or tabs)"),
    ("data", {"val_fraction": 0.0}, "data.val_fraction must be > 0.0, got 0.0"),
    ("optimizer", {"lr": 0.0}, "optimizer.lr must be > 0.0, got 0.0"),
    ("optimizer", {"layer_decay": 1.5}, "optimizer.layer_decay must be in (0, 1] (e.g. 0.75), or null for none, "
                                        "got 1.5"),
    ("optimizer", {"nesterov": True}, "optimizer.nesterov is SGD's Nesterov momentum"),
    ("schedule", {"name": "step"}, "schedule.name must be one of cosine, constant"),
    ("train", {"ema_decay": 1.0}, "train.ema_decay must be in [0, 1), got 1.0"),
    ("train", {"sharding": "p_g"}, "train.sharding must be one of os, os_g, p_g_os"),
    ("train", {"batch_size": 2, "batch_threads": 4}, "train.batch_threads is 4, more than train.batch_size 2"),
    ("train", {"distillation": {"type": "none", "alpha": 2.0}}, "train.distillation.alpha must be in [0, 1], got 2.0"),
    ("train", {"distillation": {"type": "soft"}}, "train.distillation.teacher must name the teacher for type soft"),
    ("eval", {"fewshot_shots": [5, 5]}, "eval.fewshot_shots must be a non-empty list of different"),
    ("model", {"freeze": "head"}, "model.freeze must be one of backbone"),
    ("model", {"drop_path": 1.0}, "model.drop_path must be in [0, 1), got 1.0"),
    ("model", {"freeze": "backbone", "num_classes": 0}, "model.freeze: backbone trains the classifier head alone"),
])
def test_a_section_refuses_a_bad_value_itself_as_loading_a_recipe_does(tmp_path, section, values, message):
    with pytest.raises(ConfigError) as loaded:
        load_config(write(tmp_path, yaml.safe_dump({section: values})))
    with pytest.raises(ConfigError) as alone:
        section_alone(section, values).validate()
    assert message in str(alone.value)
    assert str(alone.value) == str(loaded.value)


@pytest.mark.parametrize("recipe, message", [
    ({"model": {"in_channels": 1}}, "model.in_channels is 1 but every data set here gives RGB images"),
    ({"model": {"depth": 0}, "eval": {"attention_map_interval": 1}},
     "eval.attention_map_interval draws the attention of the encoder layers, and model.depth is 0"),
    ({"train": {"distillation": {"teacher": "vit_walkthrough"}}},
     "train.distillation trains the student's distillation token, and model.distilled is false"),
])
def test_a_rule_across_two_sections_is_the_loaders(recipe, message):
    for section, values in recipe.items():
        section_alone(section, values).validate()  # each section alone accepts its keys
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(data=recipe)


def test_a_list_default_is_a_new_list_for_every_section():
    first, second = DataConfig(), DataConfig()
    first.mean[0] = 0.0
    assert second.mean == [0.5, 0.5, 0.5] and DataConfig().mean == [0.5, 0.5, 0.5]
    assert EvalConfig().fewshot_shots is not EvalConfig().fewshot_shots


def test_recipe_path_finds_a_shipped_recipe_and_names_the_recipes_on_a_typo():
    from paddle_vit.config import recipe_path
    assert load_config(recipe_path("vit_walkthrough_digits_28")).model.embed_dim == 64
    with pytest.raises(ConfigError, match=r"no recipe 'vit_walkthrough_digits28' .*did you mean: vit_walkthrough_digits_28"):
        recipe_path("vit_walkthrough_digits28")
