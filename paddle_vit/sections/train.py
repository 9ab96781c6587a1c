"""The train section of a recipe, and its nested DeiT distillation."""
import dataclasses
import os
from typing import Optional

from ..checks import FRACTION, PROBABILITY, SEED, above, at_least, check_settings, one_of, setting
from ..device import DEVICES
from ..errors import ConfigError, close_matches
from ..models import list_models

DISTILLATION_TYPES = ("hard", "soft", "none")
SHARDING_LEVELS = ("os", "os_g", "p_g_os")
AMP_DTYPES = ("none", "bf16", "fp16")
AMP_LEVELS = ("O1", "O2")
WEIGHTS_FORMATS = ("pdparams", "safetensors")


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
    type: str = setting("hard", one_of(DISTILLATION_TYPES))
    alpha: float = setting(0.5, PROBABILITY)
    tau: float = setting(1.0, above(0.0))

    def validate(self):
        """Values in range, and a teacher named when one is run. Whether a teacher path exists is
        checked when the run is built (engine/distillation.py), so that a run's stored recipe
        still loads once its teacher is gone; that the student has a distillation token is the
        model section's, checked by paddle_vit/config.py."""
        check_settings(self, "train.distillation")
        teacher = self.teacher
        if teacher is None or not teacher.strip():
            if self.type != "none":
                raise ConfigError(f"train.distillation.teacher must name the teacher for type {self.type}: a run's "
                                  f".pdckpt, a timm or Hugging Face folder, or a registered model name")
            return self
        if not looks_like_a_path(teacher) and teacher not in list_models():
            raise ConfigError(f"train.distillation.teacher {teacher!r} is neither a registered model name"
                              f"{close_matches(teacher, list_models())} nor a path (a run's .pdckpt, a timm or "
                              f"Hugging Face folder)")
        return self


def looks_like_a_path(teacher):
    """A teacher given as a file or folder rather than a registered name: it has a folder
    separator or an extension, or exists."""
    return os.sep in teacher or "/" in teacher or os.path.splitext(teacher)[1] != "" or os.path.exists(teacher)


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
    epochs: int = setting(10, at_least(1))
    batch_size: int = setting(64, at_least(1))
    accumulate_steps: int = setting(1, at_least(1))
    label_smoothing: float = setting(0.0, FRACTION)
    device: str = setting("auto", one_of(DEVICES))
    amp: str = setting("none", one_of(AMP_DTYPES))
    amp_level: str = setting("O1", one_of(AMP_LEVELS))
    ema: bool = False
    ema_decay: float = setting(0.9999, FRACTION)
    seed: int = setting(0, SEED)
    deterministic: bool = True
    output_dir: Optional[str] = None
    log_interval: int = setting(20, at_least(1))
    save_interval: int = setting(0, at_least(0))
    keep_last: int = setting(3, at_least(1))
    checkpoint_steps: int = setting(0, at_least(0))
    resume: Optional[str] = None
    resume_check: bool = True
    vdl: bool = True
    to_static: bool = False
    batch_threads: Optional[int] = setting(None, at_least(1))
    check_finite: bool = True
    max_bad_steps: int = setting(5, at_least(1))
    weights_format: str = setting("pdparams", one_of(WEIGHTS_FORMATS))
    sharding: Optional[str] = setting(None, one_of(SHARDING_LEVELS))
    distillation: Optional[DistillationConfig] = None

    def validate(self):
        """Raise ConfigError, one line naming the key, for a value out of its range (the
        distillation's included)."""
        check_settings(self, "train")
        if self.batch_threads is not None and self.batch_threads > self.batch_size:
            raise ConfigError(f"train.batch_threads is {self.batch_threads}, more than train.batch_size "
                              f"{self.batch_size}: each thread's slice needs an image (null: as many as pay)")
        if self.distillation is not None:
            self.distillation.validate()
        return self
