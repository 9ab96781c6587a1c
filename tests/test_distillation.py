"""DeiT's distillation (train.distillation, paddle_vit/engine/distillation.py): the losses against
numpy by hand, the student's heads, the teacher frozen, every bad input one line before a run
folder exists, and the digits recipe's two commands on a small scale, resumed."""
import os

import numpy as np
import paddle
import pytest

from paddle_vit import ViT, ViTConfig
from paddle_vit.checkpoint import load_checkpoint, save_checkpoint
from paddle_vit.config import DistillationConfig, load_config
from paddle_vit.engine.distillation import Distiller, distillation_loss
from paddle_vit.engine.step import autocast
from paddle_vit.engine.trainer import Trainer

from repo_paths import REPO
from test_failures import TRAIN, assert_one_line_error, assert_train_refuses, run_tool
from test_train import read_metrics

TEACHER_RECIPE = os.path.join(REPO, "configs", "resnet_digits_28.yaml")
STUDENT_RECIPE = os.path.join(REPO, "configs", "vit_walkthrough_digits_distill.yaml")
SMALL_RUN = ["data.train_fraction=0.25", "train.device=cpu", "train.vdl=false", "train.epochs=1",
             "train.log_interval=2", "train.batch_size=32", "eval.batch_size=360"]


# ---- the losses, by hand --------------------------------------------------------------------------

def log_softmax(x):
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def cross_entropy(logits, labels):
    return -log_softmax(logits)[np.arange(len(labels)), labels].mean()


def soft_cross_entropy(logits, targets):
    return -(targets * log_softmax(logits)).sum(axis=1).mean()


def logits_of(seed, shape=(4, 5), scale=2.0):
    return np.random.default_rng(seed).normal(scale=scale, size=shape)


def paddle_loss(kind, cls, dist, teacher, targets, alpha, tau):
    tensors = [paddle.to_tensor(x, dtype="float32") for x in (cls, dist, teacher)]
    targets = paddle.to_tensor(targets, dtype="int64" if targets.ndim == 1 else "float32")
    return float(distillation_loss(kind, *tensors, targets, alpha, tau))


@pytest.mark.parametrize("alpha", [0.5, 0.2, 1.0])
def test_hard_distillation_is_the_label_and_the_teachers_argmax_weighed_by_alpha(alpha):
    cls, dist, teacher = logits_of(0), logits_of(1), logits_of(2)
    labels = np.array([0, 3, 4, 1])
    expected = (1 - alpha) * cross_entropy(cls, labels) + alpha * cross_entropy(dist, teacher.argmax(axis=1))
    assert paddle_loss("hard", cls, dist, teacher, labels, alpha, 1.0) == pytest.approx(expected, rel=1e-5)


def test_hard_distillation_at_deits_alpha_is_the_mean_of_two_cross_entropies():
    # two classes, by hand: teacher prefers class 1 in row 0 and class 0 in row 1
    cls = np.array([[0.0, 0.0], [0.0, 0.0]])  # CE of each row: log 2
    dist = np.array([[0.0, np.log(3.0)], [0.0, 0.0]])  # softmax row 0: (1/4, 3/4); row 1: (1/2, 1/2)
    teacher = np.array([[-1.0, 2.0], [5.0, 1.0]])
    labels = np.array([1, 1])
    expected = 0.5 * np.log(2.0) + 0.5 * (-(np.log(0.75) + np.log(0.5)) / 2)
    assert paddle_loss("hard", cls, dist, teacher, labels, 0.5, 1.0) == pytest.approx(expected, rel=1e-6)


@pytest.mark.parametrize("alpha, tau", [(0.5, 1.0), (0.7, 3.0), (0.1, 0.5)])
def test_soft_distillation_is_tau_squared_kl_over_the_number_of_logits(alpha, tau):
    cls, dist, teacher = logits_of(3), logits_of(4), logits_of(5)
    targets = np.random.default_rng(6).dirichlet(np.ones(5), size=4)  # soft targets, as mixup makes them
    log_p_teacher, log_p_student = log_softmax(teacher / tau), log_softmax(dist / tau)
    kl = (np.exp(log_p_teacher) * (log_p_teacher - log_p_student)).sum() / dist.size  # sum / (B * K)
    expected = (1 - alpha) * soft_cross_entropy(cls, targets) + alpha * tau ** 2 * kl
    assert paddle_loss("soft", cls, dist, teacher, targets, alpha, tau) == pytest.approx(expected, rel=1e-5)


def test_soft_distillation_of_a_student_equal_to_its_teacher_is_the_base_loss_alone():
    cls, teacher = logits_of(7), logits_of(8)
    labels = np.array([1, 1, 2, 0])
    loss = paddle_loss("soft", cls, teacher, teacher, labels, 0.4, 2.0)
    assert loss == pytest.approx(0.6 * cross_entropy(cls, labels), rel=1e-5)


def test_type_none_trains_the_class_head_alone_on_the_labels():
    cls, dist = logits_of(9), logits_of(10)
    labels = np.array([4, 0, 2, 2])
    assert paddle_loss("none", cls, dist, dist, labels, 0.5, 1.0) == pytest.approx(cross_entropy(cls, labels),
                                                                                   rel=1e-5)


# ---- the config ----------------------------------------------------------------------------------

def test_one_nested_key_is_overridden_and_the_others_kept_and_the_section_round_trips(tmp_path):
    config = load_config(STUDENT_RECIPE, ["train.distillation.type=soft", "train.distillation.tau=2"])
    assert config.train.distillation == DistillationConfig(
        teacher="output/resnet_digits_28/latest/checkpoints/last.pdckpt", type="soft", alpha=0.5, tau=2.0)
    config.save(str(tmp_path / "config.yaml"))
    assert load_config(str(tmp_path / "config.yaml")).train.distillation == config.train.distillation
    assert load_config(STUDENT_RECIPE, ["train.distillation=null"]).train.distillation is None
    assert load_config().train.distillation is None  # off by default


# ---- the student's heads and the teacher's freezing ------------------------------------------------

def tiny_vit(distilled, seed, image_size=14, classes=3):
    paddle.seed(seed)
    return ViT(ViTConfig(image_size=image_size, patch_size=7, num_classes=classes, embed_dim=8, depth=1,
                         num_heads=2, distilled=distilled, dropout=0.5 if not distilled else 0.0))


def test_the_student_returns_both_heads_in_training_and_their_mean_in_evaluation():
    student = tiny_vit(True, 0)
    student.set_distilled_training(True)
    images = paddle.to_tensor(np.random.default_rng(0).normal(size=(2, 3, 14, 14)), dtype="float32")
    student.train()
    class_logits, distillation_logits = (x.numpy() for x in student(images))
    student.eval()
    np.testing.assert_allclose(student(images).numpy(), (class_logits + distillation_logits) / 2, atol=1e-6)
    assert not np.allclose(class_logits, distillation_logits)  # two heads, two answers


def test_a_step_leaves_the_teacher_untouched_and_without_gradients():
    student, teacher = tiny_vit(True, 0), tiny_vit(False, 1)  # the teacher has dropout: eval mode must hold
    student.set_distilled_training(True)
    student.train()
    for parameter in teacher.parameters():
        parameter.stop_gradient = True
    teacher.eval()
    before = {name: value.numpy().copy() for name, value in teacher.state_dict().items()}
    distiller = Distiller(DistillationConfig(teacher="t", type="hard"), teacher, {}, None, "cpu")
    optimizer = paddle.optimizer.AdamW(learning_rate=0.1, parameters=student.parameters())
    images = paddle.to_tensor(np.random.default_rng(1).normal(size=(4, 3, 14, 14)), dtype="float32")
    first = distiller.teacher_logits(images).numpy()
    loss = distiller.forward_loss(student, images, paddle.to_tensor([0, 1, 2, 0]), lambda: autocast(None), True)
    loss.backward()
    optimizer.step()
    assert all(parameter.grad is None for parameter in teacher.parameters())
    assert student.head_dist.weight.grad is not None and student.head.weight.grad is not None
    for name, value in teacher.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), before[name])
    np.testing.assert_array_equal(distiller.teacher_logits(images).numpy(), first)  # no dropout: eval mode
    assert distiller.share.teacher_seconds > 0


# ---- bad input: one line, exit code 2, no run folder ------------------------------------------------

@pytest.mark.parametrize("overrides, fragments", [
    (["train.distillation.teacher=vit_nope_patch16_224"], ["train.distillation.teacher 'vit_nope_patch16_224'",
                                                           "neither a registered model name"]),
    (["model.distilled=false", "model.pool=walkthrough"], ["model.distilled is false", "model.distilled: true"]),
    (["train.distillation.alpha=1.5"], ["train.distillation.alpha must be in [0, 1], got 1.5"]),
    (["train.distillation.alpha=-0.1"], ["train.distillation.alpha must be in [0, 1], got -0.1"]),
    (["train.distillation.tau=0"], ["train.distillation.tau must be > 0.0, got 0"]),
    (["train.distillation.tau=-1"], ["train.distillation.tau must be > 0.0"]),
    (["train.distillation.tau=.inf"], ["train.distillation.tau must be a finite number, got inf"]),
    (["train.distillation.tau=.nan"], ["train.distillation.tau must be a finite number, got nan"]),
    (["train.distillation.type=medium"], ["train.distillation.type must be one of hard, soft, none"]),
    (["train.distillation.tua=2"], ["unknown key train.distillation.tua", "tau"]),
    (["train.distillation.teacher=null"], ["train.distillation.teacher must name the teacher for type hard"]),
    (["train.distillation.teacher=nowhere/last.pdckpt"], ["train.distillation.teacher nowhere/last.pdckpt does "
                                                          "not exist", "train the teacher first"]),
    (["train.distillation.teacher=/dev/null"], ["train.distillation.teacher /dev/null is neither a regular file "
                                                 "nor a folder", "a run's training checkpoint (.pdckpt"]),
    (["train.distillation.teacher=" + REPO + "/configs"], ["configs is a folder without a model's config.json"]),
    # a registered teacher at its own size, 224, for a student of 28
    (["train.distillation.teacher=vit_walkthrough"], ["train.distillation.teacher vit_walkthrough takes 224 x 224",
                                                      "the student 28 x 28"]),
])
def test_bad_distillation_input_is_one_line_before_the_run_folder(tmp_path, capsys, overrides, fragments):
    assert_train_refuses(tmp_path, capsys, STUDENT_RECIPE, SMALL_RUN + overrides, *fragments)


# ---- the digits recipe's two commands, small -----------------------------------------------------

def train(recipe, output_dir, *overrides):
    config = load_config(recipe, SMALL_RUN + [f"train.output_dir={output_dir}", *overrides])
    trainer = Trainer(config)
    return trainer, trainer.fit()


@pytest.fixture(scope="module")
def teacher_checkpoint(tmp_path_factory):
    """The digits ResNet trained for one epoch on a quarter of the digits: the teacher."""
    folder = tmp_path_factory.mktemp("teacher")
    train(TEACHER_RECIPE, folder / "run")
    return str(folder / "run" / "checkpoints" / "last.pdckpt")


@pytest.mark.slow
def test_the_digits_recipe_distils_resumes_and_evaluates_the_mean_of_the_heads(tmp_path, capsys, teacher_checkpoint):
    run = tmp_path / "student"
    # mixup and cutmix (the teacher sees the mixed images), accumulation and EMA, as DeiT trains
    extra = [f"train.distillation.teacher={teacher_checkpoint}", "data.mixup_alpha=0.8", "data.cutmix_alpha=1.0",
             "train.accumulate_steps=2", "train.ema=true", "train.ema_decay=0.9"]
    trainer, summary = train(STUDENT_RECIPE, run, *extra)
    record = read_metrics(run)[-1]
    for key in ("train_loss", "val_top1", "val_loss", "val_ema_top1"):
        assert np.isfinite(record[key]), key
    assert 0 < record["teacher_forward_share"] < 1

    # the teacher: frozen, in eval mode, its weights those of its checkpoint; the EMA the student's alone
    teacher = trainer.parts.distiller.teacher
    assert not teacher.training and all(parameter.stop_gradient for parameter in teacher.parameters())
    recorded = load_checkpoint(teacher_checkpoint)["model"]
    for name, value in teacher.state_dict().items():
        np.testing.assert_array_equal(value.numpy(), recorded[name].numpy())
    assert set(trainer.parts.ema.state_dict()) == set(trainer.vit.state_dict())

    # evaluation reads the mean of the two heads: the pair in training mode (no dropout here), averaged by hand
    vit, correct = trainer.vit, 0
    vit.train()
    with paddle.no_grad():
        for images, labels in trainer.parts.val_loader:
            class_logits, distillation_logits = vit(images)
            mean = (class_logits.numpy() + distillation_logits.numpy()) / 2
            correct += int((mean.argmax(axis=1) == labels.numpy().reshape(-1)).sum())
    assert correct / len(trainer.val_set) == pytest.approx(record["val_top1"])

    # the checkpoint resumes with its teacher: a second epoch, finite
    _, resumed = train(STUDENT_RECIPE, run, *extra, "train.epochs=2", "train.resume=auto")
    records = read_metrics(run)
    assert [r["epoch"] for r in records] == [1, 2] and np.isfinite(records[-1]["val_top1"])

    # another teacher (other weights, another file) is refused, naming both; nothing in the run changes
    other = load_checkpoint(teacher_checkpoint)
    other["model"] = {name: value * 1.5 for name, value in other["model"].items()}
    other_path = str(tmp_path / "other_teacher.pdckpt")
    save_checkpoint(other, other_path)
    files = sorted(os.listdir(run / "checkpoints"))
    argv = ["-c", STUDENT_RECIPE, "-o", f"train.output_dir={run}", "-o", "train.resume=auto"]
    for override in SMALL_RUN + extra + ["train.epochs=3", f"train.distillation.teacher={other_path}"]:
        argv += ["-o", override]
    assert_one_line_error(*run_tool(TRAIN, argv, capsys), f"teacher {teacher_checkpoint}", f"teacher {other_path}",
                          "resume_check=false")
    assert sorted(os.listdir(run / "checkpoints")) == files and len(read_metrics(run)) == 2


@pytest.mark.slow
def test_a_teacher_of_other_classes_is_one_line_before_the_run_folder(tmp_path, capsys, teacher_checkpoint):
    output = tmp_path / "out"
    argv = ["-c", STUDENT_RECIPE, "-o", f"train.output_dir={output}"]
    for override in SMALL_RUN + [f"train.distillation.teacher={teacher_checkpoint}", "data.dataset=synthetic",
                                 "data.synthetic_classes=4", "data.synthetic_train_size=256",
                                 "data.synthetic_val_size=8"]:
        argv += ["-o", override]
    assert_one_line_error(*run_tool(TRAIN, argv, capsys), f"train.distillation.teacher {teacher_checkpoint} has 10 "
                          "classes and the data 4")
    assert not output.exists()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["soft", "none"])
def test_soft_and_none_train_and_none_leaves_the_distillation_head_as_it_started(tmp_path, teacher_checkpoint, kind):
    overrides = [f"train.output_dir={tmp_path / 'run'}", f"train.distillation.type={kind}",
                 "train.distillation.tau=2.0", f"train.distillation.teacher={teacher_checkpoint}"]
    config = load_config(STUDENT_RECIPE, SMALL_RUN + overrides)
    trainer = Trainer(config)
    head_before = trainer.vit.head_dist.weight.numpy().copy()
    trainer.fit()
    record = read_metrics(tmp_path / "run")[-1]
    assert np.isfinite(record["train_loss"]) and np.isfinite(record["val_top1"])
    if kind == "none":  # DeiT's none: the class head alone learns; no teacher is run
        assert trainer.parts.distiller.teacher is None and "teacher_forward_share" not in record
        np.testing.assert_array_equal(trainer.vit.head_dist.weight.numpy(), head_before)
    else:
        assert not np.array_equal(trainer.vit.head_dist.weight.numpy(), head_before)


@pytest.mark.slow
def test_a_bare_weights_file_as_teacher_is_one_line_saying_what_a_teacher_is(tmp_path, capsys, teacher_checkpoint):
    weights = os.path.join(os.path.dirname(teacher_checkpoint), "last.pdparams")  # no recipe, no config.json
    output = tmp_path / "out"
    argv = ["-c", STUDENT_RECIPE, "-o", f"train.output_dir={output}"]
    for override in SMALL_RUN + [f"train.distillation.teacher={weights}"]:
        argv += ["-o", override]
    assert_one_line_error(*run_tool(TRAIN, argv, capsys), f"train.distillation.teacher {weights} is a weights file",
                          ".pdckpt")
    assert not output.exists()


def test_a_model_name_as_teacher_is_built_untrained_and_says_so(caplog):
    from paddle_vit.engine.distillation import load_teacher

    with caplog.at_level("WARNING", logger="paddle_vit"):
        teacher, normalization = load_teacher("vit_walkthrough", 10)
    assert teacher.config.num_classes == 10 and normalization is None
    assert len(caplog.records) == 1 and "initial, untrained weights" in caplog.records[0].getMessage()
    assert "train.distillation.teacher vit_walkthrough" in caplog.records[0].getMessage()
