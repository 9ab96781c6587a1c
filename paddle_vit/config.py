"""Typed configuration: YAML file + ``-o section.key=value`` overrides, validated once at load.

A config has the sections model, data, optimizer, schedule, train and eval, one dataclass each.
The data section, `DataConfig`, and the values its keys take are paddle_vit/data/config.py's.
Every key has a default; a YAML file names only what differs. Values given with ``-o`` are
parsed as YAML scalars (``-o train.epochs=3``, ``-o data.mean=[0.5,0.5,0.5]``), never ``eval``-ed.
"""
import dataclasses
import math
import os
import re
import typing
from typing import List, Optional

import yaml

from . import fileio
from .data.config import DataConfig
from .device import DEVICES
from .errors import ConfigError, check_choice, close_matches
from .models import ViTConfig, get_model_config, list_models  # the registry is the authority on architectures
from .weights import RESAMPLE_METHODS


class _ModelSection:
    """Which ViT to build: a registered `name`, with any `ViTConfig` field overridden here
    (None keeps the registered value; `num_classes: null` takes the data set's class count).
    Its fields after the first four are `ViTConfig`'s, derived from it, so the two never drift.

    pretrained: weights to start from: any file `load_pretrained` reads, or a Hugging Face
        save_pretrained folder. The model is built with the options the checkpoint implies (a
        pre-logits layer, Hugging Face's config.json, the JAX code's tanh GELU, ...); keys set
        here win, and the data set decides the class count. The position embedding is resampled
        and the head re-initialised as needed (fine-tuning).
    pretrained_resample: how that position embedding is resampled to another grid
        (bicubic_antialias, bicubic, bilinear, bilinear_align_corners, bicubic_align_corners);
        null: as the checkpoint's own code does (docs/pretrained.md).
    recompute: activation recompute in training: true (every encoder layer), k (every k-th) or
        false/0; the same numbers with less memory and more time (docs/scaling.md).
    freeze: null trains every parameter; "backbone" trains the classifier head alone (a linear
        probe of the frozen representation, the paper's Section 4.1): everything before the
        head, the pre-logits layer and the pooling norm included, keeps its weights, runs in
        eval mode (no dropout, no drop-path) and has no gradients and no optimizer state; the
        head starts from zero (paper Section 3.2).
    Every other key: the `ViTConfig` field of that name (paddle_vit/models/vit.py says what each is).
    """

    def vit_overrides(self):
        """The ViTConfig fields this section sets, as keyword arguments."""
        return {name: value for name, value in dataclasses.asdict(self).items()
                if name not in OWN_MODEL_KEYS and value is not None}


OWN_MODEL_KEYS = ("name", "pretrained", "pretrained_resample", "freeze")  # not ViTConfig fields
FREEZE_CHOICES = ("backbone",)


def _model_section_fields():
    """(name, type, field) of the model section: its own four keys, then every `ViTConfig`
    field as optional (None: the registered value)."""
    fields = [("name", str, dataclasses.field(default="vit_walkthrough")),
              ("pretrained", Optional[str], dataclasses.field(default=None)),
              ("pretrained_resample", Optional[str], dataclasses.field(default=None)),
              ("freeze", Optional[str], dataclasses.field(default=None))]
    for field in dataclasses.fields(ViTConfig):
        metadata = {"true_is": 1} if field.name == "recompute" else {}  # recompute: true = every layer
        fields.append((field.name, Optional[field.type], dataclasses.field(default=None, metadata=metadata)))
    return fields


ModelConfig = dataclasses.make_dataclass("ModelConfig", _model_section_fields(), bases=(_ModelSection,),
                                         namespace={"__doc__": _ModelSection.__doc__})
ModelConfig.__module__ = __name__


@dataclasses.dataclass
class OptimizerConfig:
    """The optimizer: AdamW (the ViT/DeiT pre-training recipe) or SGD with momentum (the paper's
    fine-tuning recipe, Appendix B.1.1).

    name: "adamw" or "sgd" (momentum SGD, computed as PyTorch's torch.optim.SGD and optax.sgd:
        velocity = momentum * velocity + gradient, weights -= lr * velocity).
    lr: the peak learning rate, reached after warm-up.
    weight_decay: never applied to biases, norms, class token or position embeddings; AdamW's is
        decoupled, SGD's is L2 added to the gradient (as torch.optim.SGD's weight_decay); 0 is off.
    beta1, beta2, epsilon: AdamW's.
    momentum: SGD's momentum (paper: 0.9); nesterov: SGD with Nesterov momentum
        (the step is lr * (gradient + momentum * velocity)).
    clip_grad_norm: clip the global gradient norm to this (paper: 1.0); 0 switches it off.
    head_lr_scale: multiplies the learning rate of the head (e.g. 10 when fine-tuning).
    layer_decay: layer-wise learning-rate decay (BEiT, MAE, timm's param_groups_layer_decay):
        the patch embedding (a hybrid's ResNet included), class token and position embedding
        are layer 0, encoder block i is layer i + 1, the head (with fc_norm and a pre-logits
        layer) layer depth + 1, the encoder's final norm the last block's layer (as timm groups
        it), and each parameter's learning rate is multiplied by
        layer_decay ** (depth + 1 - layer); null (or 1.0) is off.
    """
    name: str = "adamw"
    lr: float = 1e-3
    weight_decay: float = 0.05
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    clip_grad_norm: float = 1.0
    head_lr_scale: float = 1.0
    momentum: float = 0.9
    nesterov: bool = False
    layer_decay: Optional[float] = None


@dataclasses.dataclass
class ScheduleConfig:
    """Learning-rate schedule, updated every optimizer step.

    name: "cosine" (linear warm-up, then cosine decay to min_lr) or "constant" (warm-up, then lr).
    warmup_epochs: length of the linear warm-up from warmup_start_lr (may be fractional).
    """
    name: str = "cosine"
    warmup_epochs: float = 0.0
    warmup_start_lr: float = 1e-6
    min_lr: float = 1e-6


@dataclasses.dataclass
class DistillationConfig:
    """DeiT's distillation (Touvron et al. 2021): the student's distillation token learns from a
    frozen teacher's logits on the same (mixed) images. The student must have
    `model.distilled: true`; evaluation reads the mean of its two heads.

    teacher: a run's training checkpoint (.pdckpt: its stored recipe builds the model), a folder
        whose config.json names its model (timm Hub, Hugging Face), or a registered model name
        (`paddle_vit.list_models()`, built with its initial weights: for tests). Its class count
        must be the data's and its input size the student's. May be null only with type none.
    type: "hard" (the distillation head learns the teacher's argmax), "soft" (the teacher's
        softened distribution, KL at temperature tau) or "none" (DeiT's: the class head alone
        learns the labels; no teacher is run).
    alpha: the distillation term's weight: loss = (1 - alpha) * base + alpha * distillation
        (DeiT: 0.5); in [0, 1].
    tau: the soft distillation's temperature (> 0, finite; DeiT: 1.0).
    """
    teacher: Optional[str] = None
    type: str = "hard"
    alpha: float = 0.5
    tau: float = 1.0


DISTILLATION_TYPES = ("hard", "soft", "none")


@dataclasses.dataclass
class TrainConfig:
    """How to run training.

    device: "auto" (GPU when Paddle has CUDA and one is visible, else CPU), "gpu" or "cpu".
    batch_size: images per step per device; accumulate_steps: steps per optimizer update.
    label_smoothing: of the cross-entropy targets (DeiT: 0.1).
    amp: "none", "bf16" or "fp16"; amp_level "O1" (autocast) or "O2" (fp16/bf16 weights).
    ema: keep an exponential moving average of the weights with ema_decay.
    deterministic: seed every step so a stopped and resumed run equals an unbroken one.
    output_dir: the run folder (checkpoints, train.log, metrics.jsonl, vdl/); one that holds a run
        already is refused unless resumed. null: a new output/<config name>/run-NNN for every run,
        with output/<config name>/latest pointing at the newest.
    log_interval: steps between log lines; save_interval: epochs between kept checkpoints
        (0: only last and best); keep_last: how many of those to keep.
    checkpoint_steps: also write last.pdckpt every this many optimizer updates within an epoch
        (0: at the end of each epoch only). What a killed run resumes from: in a multi-process
        run a signal writes no checkpoint, so this bounds the work a dead rank costs.
    resume: null, "auto" (the newest valid checkpoint of the run: train.output_dir's, else the run
        output/<config name>/latest points at) or a checkpoint path (inside a run folder: that run
        goes on there; elsewhere: a new run starts from it).
    resume_check: refuse to resume a checkpoint written with another data set, class list or
        global batch (batch_size x processes x accumulate_steps; on another number of processes
        accumulate_steps is set to keep it); false resumes anyway (the data position is carried
        over in images).
    sharding: null (every rank keeps the whole optimizer state) or "os" / "os_g" (ZeRO 1 / 2:
        the optimizer state, and the gradients, split over the ranks) through Paddle's
        group_sharded_parallel; GPU/XPU multi-process runs only (Paddle 3.3 has no CPU path).
        Checkpoints are gathered into the usual single-file format. "p_g_os" (ZeRO 3) is refused
        for now: its sharded parameters are not yet gathered into that format.
    vdl: write VisualDL scalars to <output_dir>/vdl.
    to_static: train a paddle.jit.to_static graph.
    batch_threads: on a CPU, share each step's forward and backward passes over this many
        threads, a slice of the batch each (paddle_vit/variants/batch_threads.py: Paddle runs its
        elementwise kernels on one core, the threads keep every core busy; the same gradients up
        to float rounding; dropout and drop path draw from a seed stream per slice). null: the
        math threads where the step can be split and pays (one process, eager, no BatchNorm in
        training, slices of 100,000 activation elements or more), else 1; 1: off. A number above
        1 where the step cannot be split is refused, with the reason.
    check_finite: read the loss every step and skip the update when it is NaN or Inf (one
        scalar read per step; false reads it only at log intervals and stops there instead).
    max_bad_steps: stop after this many non-finite steps in a row.
    weights_format: "pdparams" or "safetensors" for the weight files best/last (+ _ema).
    distillation: null (off) or DeiT's distillation from a teacher, a mapping of
        `DistillationConfig`'s keys ({teacher, type, alpha, tau}); one key is set with
        ``-o train.distillation.type=soft``.
    """
    epochs: int = 10
    batch_size: int = 64
    accumulate_steps: int = 1
    label_smoothing: float = 0.0
    device: str = "auto"
    amp: str = "none"
    amp_level: str = "O1"
    ema: bool = False
    ema_decay: float = 0.9999
    seed: int = 0
    deterministic: bool = True
    output_dir: Optional[str] = None
    log_interval: int = 20
    save_interval: int = 0
    keep_last: int = 3
    checkpoint_steps: int = 0
    resume: Optional[str] = None
    resume_check: bool = True
    vdl: bool = True
    to_static: bool = False
    batch_threads: Optional[int] = None
    check_finite: bool = True
    max_bad_steps: int = 5
    weights_format: str = "pdparams"
    sharding: Optional[str] = None
    distillation: Optional[DistillationConfig] = None


SHARDING_LEVELS = ("os", "os_g", "p_g_os")
OPTIMIZERS = ("adamw", "sgd")
SCHEDULES = ("cosine", "constant")
AMP_DTYPES = ("none", "bf16", "fp16")
AMP_LEVELS = ("O1", "O2")
WEIGHTS_FORMATS = ("pdparams", "safetensors")
EVAL_ENGINES = ("auto", "predictor", "dynamic", "to_static", "onnxruntime")
EVAL_PRECISIONS = ("fp32", "bf16", "int8")


@dataclasses.dataclass
class EvalConfig:
    """Evaluation: batch_size per device; every `interval` epochs during training;
    confusion_matrix: also write confusion_matrix_<weights>.png (tools/eval.py), in the run folder
    the weights belong to (else train.output_dir's recipe folder);
    attention_map_interval: every this many epochs, log the attention rollout of the first
    validation image to VisualDL's image tab (0: never);
    engine: how tools/eval.py runs the model: ``auto`` (the engine measured fastest on this
    device and kind of CPU, paddle_vit/deploy/engine_choice.py: onnxruntime on AVX2 CPUs when
    the onnx extra is installed, else the predictor; eval says which it took), ``predictor``
    (the model traced once and run by paddle.inference, with oneDNN on CPU), ``dynamic``
    (eager, as during training), ``to_static`` (a paddle.jit.to_static graph) or ``onnxruntime``
    (the model exported to ONNX on the fly and run by ONNX Runtime with its fused attention;
    needs the onnx extra). The evaluation during training always runs the training model eagerly;
    precision: ``fp32``, ``bf16`` (the predictor's oneDNN bfloat16 kernels, on a CPU with
    AVX512-BF16 or AMX: about 2x faster, top-1 within a fraction of a point, docs/benchmarks.md)
    or ``int8`` (engine onnxruntime: the export quantized dynamically, int8 weights per channel,
    on any x86-64 CPU; docs/deployment.md);
    fewshot_interval: every this many epochs (and after the last), the few-shot linear accuracy of the frozen
    representation (the paper's second metric, paddle_vit/fewshot.py): the training split
    (without augmentation) is the pool, the validation split the test; logged as
    ``fewshot/<k>shot`` (the mean over the seeds) to VisualDL and ``fewshot_<k>shot`` in
    metrics.jsonl (0: never); fewshot_shots: the shots per class; fewshot_l2_reg: the ridge
    penalty (big_vision's 1024); fewshot_seeds: how many draws (seeds 0 .. n-1). tools/eval.py
    --protocol fewshot takes the last three as its defaults."""
    batch_size: int = 128
    interval: int = 1
    confusion_matrix: bool = False
    attention_map_interval: int = 0
    engine: str = "auto"
    precision: str = "fp32"
    fewshot_interval: int = 0
    fewshot_shots: List[int] = dataclasses.field(default_factory=lambda: [1, 5, 10, 25])
    fewshot_l2_reg: float = 1024.0
    fewshot_seeds: int = 3


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
    if data is None:
        return {}
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


def _at_least(key, value, low, exclusive=False):
    if value < low or (exclusive and value == low):
        raise ConfigError(f"{key} must be {'>' if exclusive else '>='} {low}, got {value!r}")


def _fraction(key, value, closed=False):
    if not (0.0 <= value <= 1.0 if closed else 0.0 <= value < 1.0):
        raise ConfigError(f"{key} must be in [0, 1{']' if closed else ')'}, got {value!r}")


def _seed(key, value):
    if not 0 <= value < 2 ** 32:  # numpy's and Paddle's seeds, and the data's keyed generators
        raise ConfigError(f"{key} must be in [0, 2**32 - 1], got {value!r}")


def validate(config):
    """Check value ranges and that the model can be built; raise ConfigError naming the key."""
    vit = _validate_model(config.model)
    config.data.validate()
    _validate_optimizer(config.optimizer)
    _validate_schedule(config.schedule)
    _validate_train(config.train)
    _validate_distillation(config.train.distillation, vit)
    _validate_eval(config.eval, vit)
    return config


def _validate_model(model):
    """The model section; returns the `ViTConfig` it builds (the class count a stand-in when the
    data decides it)."""
    try:
        vit = get_model_config(model.name, **model.vit_overrides()).replace(
            num_classes=model.num_classes if model.num_classes is not None else 10).validate()
    except ConfigError as error:
        message = str(error)
        raise ConfigError(message if message.startswith("model") else f"model: {message}") from None
    if model.pretrained_resample is not None:
        check_choice("model.pretrained_resample", model.pretrained_resample, tuple(RESAMPLE_METHODS))
    if model.freeze is not None:
        check_choice("model.freeze", model.freeze, FREEZE_CHOICES)
        if vit.num_classes == 0:
            raise ConfigError("model.freeze: backbone trains the classifier head alone, and model.num_classes is 0 "
                              "(no head): set model.num_classes: null to follow the data")
    if vit.in_channels != 3:
        raise ConfigError(f"model.in_channels is {vit.in_channels} but every data set here gives RGB images (grey, "
                          f"RGBA and CMYK ones are converted): set model.in_channels: 3")
    return vit


def _validate_optimizer(optimizer):
    check_choice("optimizer.name", optimizer.name, OPTIMIZERS)
    _at_least("optimizer.lr", optimizer.lr, 0.0, exclusive=True)
    _at_least("optimizer.weight_decay", optimizer.weight_decay, 0.0)
    _fraction("optimizer.beta1", optimizer.beta1)
    _fraction("optimizer.beta2", optimizer.beta2)
    _at_least("optimizer.epsilon", optimizer.epsilon, 0.0, exclusive=True)
    _at_least("optimizer.clip_grad_norm", optimizer.clip_grad_norm, 0.0)
    _at_least("optimizer.head_lr_scale", optimizer.head_lr_scale, 0.0, exclusive=True)
    _fraction("optimizer.momentum", optimizer.momentum)
    if optimizer.nesterov and (optimizer.name != "sgd" or optimizer.momentum == 0):
        raise ConfigError(f"optimizer.nesterov is SGD's Nesterov momentum: it needs optimizer.name: sgd and "
                          f"optimizer.momentum > 0 (got name {optimizer.name!r}, momentum {optimizer.momentum!r})")
    if optimizer.layer_decay is not None and not 0.0 < optimizer.layer_decay <= 1.0:
        raise ConfigError(f"optimizer.layer_decay must be in (0, 1] (e.g. 0.75), or null for none, "
                          f"got {optimizer.layer_decay!r}")


def _validate_schedule(schedule):
    check_choice("schedule.name", schedule.name, SCHEDULES)
    _at_least("schedule.warmup_epochs", schedule.warmup_epochs, 0.0)
    _at_least("schedule.warmup_start_lr", schedule.warmup_start_lr, 0.0)
    _at_least("schedule.min_lr", schedule.min_lr, 0.0)


def _validate_train(train):
    _at_least("train.epochs", train.epochs, 1)
    _seed("train.seed", train.seed)
    _at_least("train.batch_size", train.batch_size, 1)
    _at_least("train.accumulate_steps", train.accumulate_steps, 1)
    _fraction("train.label_smoothing", train.label_smoothing)
    check_choice("train.device", train.device, DEVICES)
    check_choice("train.amp", train.amp, AMP_DTYPES)
    check_choice("train.amp_level", train.amp_level, AMP_LEVELS)
    _fraction("train.ema_decay", train.ema_decay)
    _at_least("train.log_interval", train.log_interval, 1)
    _at_least("train.save_interval", train.save_interval, 0)
    _at_least("train.keep_last", train.keep_last, 1)
    _at_least("train.checkpoint_steps", train.checkpoint_steps, 0)
    _at_least("train.max_bad_steps", train.max_bad_steps, 1)
    if train.batch_threads is not None:
        _at_least("train.batch_threads", train.batch_threads, 1)
        if train.batch_threads > train.batch_size:
            raise ConfigError(f"train.batch_threads is {train.batch_threads}, more than train.batch_size "
                              f"{train.batch_size}: each thread's slice needs an image (null: as many as pay)")
    check_choice("train.weights_format", train.weights_format, WEIGHTS_FORMATS)
    if train.sharding is not None:
        check_choice("train.sharding", train.sharding, SHARDING_LEVELS)


def _validate_distillation(distillation, vit):
    """train.distillation, against the student the model section builds: values in range, a
    distilled student, a teacher named when one is run. Whether a teacher path exists is checked
    when the run is built (engine/distillation.py), so that a run's stored recipe still loads
    once its teacher is gone."""
    if distillation is None:
        return
    check_choice("train.distillation.type", distillation.type, DISTILLATION_TYPES)
    _fraction("train.distillation.alpha", distillation.alpha, closed=True)
    _at_least("train.distillation.tau", distillation.tau, 0.0, exclusive=True)
    if not vit.distilled:
        raise ConfigError("train.distillation trains the student's distillation token, and model.distilled is false: "
                          "set model.distilled: true (with model.pool: cls), or train.distillation: null")
    teacher = distillation.teacher
    if teacher is None or not teacher.strip():
        if distillation.type != "none":
            raise ConfigError(f"train.distillation.teacher must name the teacher for type {distillation.type}: a run's "
                              f".pdckpt, a timm or Hugging Face folder, or a registered model name")
        return
    if not looks_like_a_path(teacher) and teacher not in list_models():
        raise ConfigError(f"train.distillation.teacher {teacher!r} is neither a registered model name"
                          f"{close_matches(teacher, list_models())} nor a path (a run's .pdckpt, a timm or Hugging "
                          f"Face folder)")


def looks_like_a_path(teacher):
    """A teacher given as a file or folder rather than a registered name: it has a folder
    separator or an extension, or exists."""
    return os.sep in teacher or "/" in teacher or os.path.splitext(teacher)[1] != "" or os.path.exists(teacher)


def _validate_eval(evaluation, vit):
    """The eval section, against the `ViTConfig` the model section builds."""
    _at_least("eval.batch_size", evaluation.batch_size, 1)
    _at_least("eval.interval", evaluation.interval, 1)
    _at_least("eval.attention_map_interval", evaluation.attention_map_interval, 0)
    _at_least("eval.fewshot_interval", evaluation.fewshot_interval, 0)
    shots = evaluation.fewshot_shots
    if not shots or min(shots) < 1 or len(set(shots)) != len(shots):
        raise ConfigError(f"eval.fewshot_shots must be a non-empty list of different positive integers, got {shots!r}")
    _at_least("eval.fewshot_l2_reg", evaluation.fewshot_l2_reg, 0.0)
    _at_least("eval.fewshot_seeds", evaluation.fewshot_seeds, 1)
    if evaluation.attention_map_interval and vit.depth == 0:
        raise ConfigError("eval.attention_map_interval draws the attention of the encoder layers, and model.depth is 0 "
                          "(no Transformer): set eval.attention_map_interval=0")
    check_choice("eval.engine", evaluation.engine, EVAL_ENGINES)
    check_choice("eval.precision", evaluation.precision, EVAL_PRECISIONS)
