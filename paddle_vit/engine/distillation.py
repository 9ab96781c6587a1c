"""DeiT's distillation through a token (Touvron et al. 2021, "Training data-efficient image
transformers & distillation through attention", Section 5): a frozen teacher classifies the same
(mixed) images as the student, and the student's distillation head learns from its logits.

- `distillation_loss`: DeiT's losses, from the class head's logits, the distillation head's and
  the teacher's (the formulas in each function's docstring);
- `build_distiller`: the teacher of ``train.distillation``, built, checked against the data and
  the student, frozen, in eval mode, with its identity (for resume) and the normalisation it
  expects;
- `Distiller.forward_loss`: one step's forward pass and loss, the teacher run under no_grad;
- `TeacherShare`: the teacher's share of the step, timed on a few steps only.
"""
import hashlib
import logging
import os
import time

import numpy as np
import paddle
import paddle.nn.functional as F

from ..errors import ConfigError, WeightsError
from ..factory import describe_class_difference, model_for_evaluation
from ..models import ViT, get_model_config
from ..recipe import config_for_weights, recorded_recipe
from ..sections.train import looks_like_a_path
from ..variants import use_cpu_fast_paths
from ..weights.source import resolve_weights
from .step import autocast, classification_loss

logger = logging.getLogger("paddle_vit")


# ---- the losses -------------------------------------------------------------------------------

def hard_distillation_term(distillation_logits, teacher_logits):
    """DeiT's hard distillation: the cross-entropy of the distillation head against the
    teacher's decision, mean_b -log softmax(dist)[b, argmax_k teacher[b, k]]; logits [B, K]."""
    teacher_labels = paddle.argmax(teacher_logits, axis=-1)  # [B]
    return F.cross_entropy(distillation_logits.astype("float32"), teacher_labels)


def soft_distillation_term(distillation_logits, teacher_logits, tau):
    """DeiT's soft distillation: tau^2 * KL(p_t || p_s) summed over the classes and the batch
    and divided by the number of logits B * K (DeiT's reduction, not the batch mean), with
    p_t = softmax(teacher / tau), p_s = softmax(dist / tau):
    tau^2 / (B K) * sum_{b,k} p_t[b,k] (log p_t[b,k] - log p_s[b,k]); logits [B, K]."""
    log_student = F.log_softmax(distillation_logits.astype("float32") / tau, axis=-1)  # [B, K]
    log_teacher = F.log_softmax(teacher_logits.astype("float32") / tau, axis=-1)  # [B, K]
    kl = (paddle.exp(log_teacher) * (log_teacher - log_student)).sum()
    return kl * (tau * tau) / distillation_logits.numel().astype("float32")


def distillation_loss(kind, class_logits, distillation_logits, teacher_logits, targets, alpha=0.5, tau=1.0):
    """DeiT's loss of a distilled student, in float32:
    base = classification_loss(class_logits, targets) (hard labels [B] or soft targets [B, K]:
    mixup, cutmix, label smoothing);
    "hard": (1 - alpha) * base + alpha * CE(dist, argmax teacher) (DeiT: alpha 0.5);
    "soft": (1 - alpha) * base + alpha * tau^2 * KL(softmax(teacher/tau) || softmax(dist/tau)) / (B K);
    "none": base alone (DeiT's: the distillation head gets no loss; no teacher is needed)."""
    base = classification_loss(class_logits, targets)
    if kind == "none":
        return base
    if kind == "hard":
        term = hard_distillation_term(distillation_logits, teacher_logits)
    elif kind == "soft":
        term = soft_distillation_term(distillation_logits, teacher_logits, tau)
    else:
        raise ConfigError(f"train.distillation.type must be one of hard, soft, none, got {kind!r}")
    return (1.0 - alpha) * base + alpha * term


# ---- the teacher's cost -----------------------------------------------------------------------

class TeacherShare:
    """The teacher's forward pass as a share of the training step (forward, backward, update),
    timed on the steps the trainer samples (one per log interval): the device is synchronised
    around those only, so the other steps run as without distillation."""

    def __init__(self, place):
        self.synchronize = not place.startswith("cpu")  # a CPU computes eagerly: nothing to wait for
        self.reset()

    def reset(self):
        self.teacher_seconds, self.step_seconds, self.steps = 0.0, 0.0, 0

    def now(self):
        if self.synchronize:
            paddle.device.synchronize()
        return time.perf_counter()

    def end_step(self, started):
        self.step_seconds += self.now() - started
        self.steps += 1

    def share(self):
        """teacher seconds / step seconds over the timed steps, or None when none was timed."""
        return self.teacher_seconds / self.step_seconds if self.steps and self.step_seconds > 0 else None


# ---- the teacher --------------------------------------------------------------------------------

class Distiller:
    """The teacher and how the student learns from it (`settings`: train.distillation).

    teacher: the frozen model (None for type none); identity: what a checkpoint records of it;
    renormalize: (scale, shift) [1, 3, 1, 1] turning the student's normalised images into the
    teacher's, or None when both normalise alike; share: `TeacherShare`."""

    def __init__(self, settings, teacher, identity, renormalize, place, amp_dtype=None):
        self.settings = settings
        self.teacher = teacher
        self.identity = identity
        self.renormalize = renormalize
        self.amp_dtype = amp_dtype
        self.share = TeacherShare(place)

    def forward_loss(self, model, images, targets, amp_context, timed=False):
        """The loss of the student `model` (in training mode with set_distilled_training: it
        returns (class logits, distillation logits), each [B, K]) on images [B, 3, S, S]."""
        with amp_context():
            class_logits, distillation_logits = model(images)
        teacher_logits = None
        if self.teacher is not None:
            started = self.share.now() if timed else None
            teacher_logits = self.teacher_logits(images)
            if timed:
                self.share.teacher_seconds += self.share.now() - started
        settings = self.settings
        return distillation_loss(settings.type, class_logits, distillation_logits, teacher_logits, targets,
                                 settings.alpha, settings.tau)

    @paddle.no_grad()
    def teacher_logits(self, images):
        """The teacher's logits [B, K] float32 on the student's images [B, 3, S, S], under O1
        autocast when the run uses AMP (the teacher's weights stay float32 whatever the level)."""
        if self.renormalize is not None:
            scale, shift = self.renormalize
            images = images * scale + shift
        with autocast(self.amp_dtype, "O1"):
            logits = self.teacher(images)
        return logits.astype("float32").detach()


def prepare_student(student, kind):
    """Make the distilled `student` return (class logits, distillation logits) in training; for
    type none freeze its distillation head, which DeiT's loss leaves without a gradient (so that
    no optimizer decays it and data parallelism has no parameter without a gradient to wait for)."""
    student.set_distilled_training(True)
    if kind == "none":
        for parameter in student.head_dist.parameters():
            parameter.stop_gradient = True


def build_distiller(settings, student, class_names, data_config, place, amp_dtype=None):
    """The `Distiller` of `settings` (train.distillation) for `student` (the ViT, distilled, made
    ready by `prepare_student`) on data of `class_names` normalised by `data_config`'s mean and
    std. A teacher that cannot be built, or whose classes or input size are not the data's and
    the student's, is a ConfigError naming train.distillation.teacher."""
    prepare_student(student, settings.type)
    if settings.type == "none" or not settings.teacher:
        if settings.teacher:
            logger.info("train.distillation.type none: the teacher %s is not run", settings.teacher)
        return Distiller(settings, None, {"type": settings.type, "teacher": None, "fingerprint": None}, None, place,
                         amp_dtype)
    teacher, normalization = load_teacher(settings.teacher, len(class_names))
    check_teacher(settings.teacher, teacher, class_names, student.config.image_size)
    for parameter in teacher.parameters():
        parameter.stop_gradient = True
    teacher.eval()
    teacher = use_cpu_fast_paths(teacher)
    identity = {"type": settings.type, "teacher": settings.teacher, "fingerprint": weights_fingerprint(teacher)}
    renormalize = renormalization(data_config.mean, data_config.std, *(normalization or (data_config.mean,
                                                                                         data_config.std)))
    if renormalize is not None:
        logger.info("the teacher normalises its input with mean %s, std %s: the student's images are "
                    "renormalised for it", *normalization)
    logger.info("teacher %s: %s distillation, alpha %s%s, %d parameters (sha256 %s)", settings.teacher,
                settings.type, settings.alpha, f", tau {settings.tau}" if settings.type == "soft" else "",
                sum(int(np.prod(p.shape)) for p in teacher.parameters()), identity["fingerprint"][:12])
    return Distiller(settings, teacher, identity, renormalize, place, amp_dtype)


def load_teacher(source, num_classes):
    """(the teacher model, (mean, std) its own preprocessing normalises with, or None for the
    student's): a path by the rule every --weights command follows (`paddle_vit.recipe`: a
    .pdckpt's stored recipe, a folder's config.json); a registered name built with its initial
    weights and the data's class count."""
    key = f"train.distillation.teacher {source}"
    if not looks_like_a_path(source):
        logger.warning("%s is a model name: the teacher has its initial, untrained weights and teaches nothing "
                       "useful; name a trained run's checkpoint (.pdckpt) or a timm or Hugging Face folder", key)
        return ViT(get_model_config(source, num_classes=num_classes).validate()), None
    if not os.path.exists(source):
        raise ConfigError(f"{key} does not exist: train the teacher first (its run's checkpoints/last.pdckpt), or "
                          f"name another")
    what_a_teacher_is = ("a teacher is a run's training checkpoint (.pdckpt, which stores its recipe), a timm or "
                         "Hugging Face folder (its config.json names the model) or a .safetensors file written by "
                         "paddle-vit (its metadata records the model)")
    try:
        weights = resolve_weights(source)  # read once: the recipe, then the teacher, from it
        says_its_model = source.endswith(".pdckpt") or recorded_recipe(weights) is not None
    except WeightsError as error:
        raise ConfigError(f"{key} cannot be built as a teacher: {error}") from None
    if os.path.isfile(source) and not says_its_model:
        raise ConfigError(f"{key} is a weights file that does not say which model it is: {what_a_teacher_is}")
    if os.path.isdir(source) and weights.model is None:
        raise ConfigError(f"{key} is a folder without a model's config.json: {what_a_teacher_is}")
    if not (os.path.isfile(source) or os.path.isdir(source)):
        raise ConfigError(f"{key} is neither a regular file nor a folder: {what_a_teacher_is}")
    try:
        config = config_for_weights(weights)
        teacher = model_for_evaluation(config, weights)
    except (ConfigError, WeightsError) as error:
        raise ConfigError(f"{key} cannot be built as a teacher: {error}") from None
    preprocess = getattr(teacher, "preprocess", None)
    if preprocess is not None:  # a timm or Hugging Face folder's own pipeline
        return teacher, (list(preprocess.mean), list(preprocess.std))
    return teacher, (list(config.data.mean), list(config.data.std))  # a run's recipe


def check_teacher(source, teacher, class_names, image_size):
    """The teacher must classify the data's classes (in the same order, where its checkpoint
    records them) at the student's input size."""
    key = f"train.distillation.teacher {source}"
    classes = teacher.config.num_classes
    if classes != len(class_names):
        raise ConfigError(f"{key} has {classes} classes and the data {len(class_names)}: a teacher must classify "
                          f"the data's classes")
    recorded = getattr(teacher, "class_names", None)
    if recorded is not None and teacher.load_report.format == "paddle-vit" and list(recorded) != list(class_names):
        raise ConfigError(f"{key} was trained on other classes than the data's: "
                          f"{describe_class_difference(recorded, class_names)}")
    if teacher.config.image_size != image_size:
        raise ConfigError(f"{key} takes {teacher.config.image_size} x {teacher.config.image_size} images and the "
                          f"student {image_size} x {image_size}: a teacher sees the student's images, so both must "
                          f"take the same size (set model.image_size, or distil from a teacher of that size)")


def renormalization(mean, std, teacher_mean, teacher_std):
    """(scale, shift) [1, 3, 1, 1] with x_teacher = x * scale + shift for images normalised by
    (mean, std) that the teacher expects normalised by (teacher_mean, teacher_std):
    scale = std / teacher_std, shift = (mean - teacher_mean) / teacher_std; None when equal."""
    mean, std = np.asarray(mean, "float64"), np.asarray(std, "float64")
    teacher_mean, teacher_std = np.asarray(teacher_mean, "float64"), np.asarray(teacher_std, "float64")
    if np.allclose(mean, teacher_mean) and np.allclose(std, teacher_std):
        return None
    scale = paddle.to_tensor((std / teacher_std).reshape([1, 3, 1, 1]), dtype="float32")
    shift = paddle.to_tensor(((mean - teacher_mean) / teacher_std).reshape([1, 3, 1, 1]), dtype="float32")
    return scale, shift


def weights_fingerprint(model):
    """The sha256 of `model`'s state dict (every name, dtype, shape and value, in name order):
    what identifies a teacher wherever its file has moved."""
    digest = hashlib.sha256()
    for name, value in sorted(model.state_dict().items()):
        array = np.ascontiguousarray(value.numpy())
        digest.update(f"{name}:{array.dtype}:{array.shape};".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def identity_differences(recorded, current):
    """How the teacher a checkpoint was trained with (`recorded`, a `Distiller.identity` or None
    for no distillation) differs from the run's (`current`): [] or one phrase for
    `resume.check_same_run`. The weights' fingerprint decides, not the path they were read from."""
    def key(identity):
        return None if identity is None else (identity.get("type"), identity.get("fingerprint"))

    def described(identity):
        if identity is None:
            return "no distillation"
        if identity.get("teacher") is None:
            return f"distillation type {identity.get('type')} without a teacher"
        return (f"teacher {identity['teacher']} (weights sha256 {identity['fingerprint'][:12]}), distillation type "
                f"{identity['type']}")

    if key(recorded) == key(current):
        return []
    return [f"{described(recorded)} (the config: {described(current)})"]
