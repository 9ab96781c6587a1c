"""Resuming a run from its checkpoint: only the same run, continued exactly.

A checkpoint continues the run that wrote it when the data set, its classes, the global batch
(`BatchGeometry`) and the model are the same; anything else is refused in one line naming what
differs (`train.resume_check=false` resumes anyway). On another number of processes the global
batch is kept by setting `train.accumulate_steps` (`fit_batch_geometry`). Then the model,
optimizer, schedule, loss scaler and EMA are restored, and where the run stands: its
`TrainingPosition` (position.py), one checkpoint key per field.
"""
import dataclasses
import json
import logging
import os

import paddle

from .. import checkpoint as ckpt
from ..errors import ConfigError
from ..models import ViTConfig
from .distillation import identity_differences
from .position import TrainingPosition

logger = logging.getLogger("paddle_vit")


@dataclasses.dataclass(frozen=True)
class BatchGeometry:
    """How a run makes one optimizer step: batch_size images per process and micro-step, on
    `processes` processes, `accumulate_steps` micro-steps per update."""
    batch_size: int
    processes: int
    accumulate_steps: int

    @property
    def images_per_step(self):
        return self.batch_size * self.processes

    @property
    def global_batch(self):
        return self.batch_size * self.processes * self.accumulate_steps

    @classmethod
    def of_config(cls, config, processes):
        train = config.train
        return cls(train.batch_size, processes, train.accumulate_steps)

    @classmethod
    def recorded_in(cls, state):
        train = state["config"]["train"]
        return cls(train["batch_size"], state.get("world_size", 1), train.get("accumulate_steps", 1))

    def __str__(self):
        return f"{self.batch_size} per process x {self.processes} process{'es' if self.processes != 1 else ''} " \
               f"x {self.accumulate_steps} accumulated"


def open_checkpoint(path, config, processes):
    """Read the checkpoint at `path` to resume it on `processes` processes: (its state, the
    config to resume it with, how its global batch differs from the config's). One that lacks
    what a resume needs is refused here, before the run is built."""
    state = ckpt.load_checkpoint(path)
    ckpt.check_resumable(state, path)
    config, differences = fit_batch_geometry(config, state, path, processes)
    return state, config, differences


def fit_batch_geometry(config, state, path, processes):
    """(the config to resume `state` with, how its global batch differs from the config's). The
    run's global batch (batch_size x processes x accumulate_steps) is what its optimizer steps
    and schedule were made for; on another number of `processes` keep it by setting
    accumulate_steps when the config's own arithmetic does not (one line says so). Any other
    difference is listed for `check_same_run`, which refuses it."""
    was = BatchGeometry.recorded_in(state)
    now = BatchGeometry.of_config(config, processes)
    if now.global_batch == was.global_batch:
        if now != was:
            logger.info("resuming %s on %s: the global batch %d is kept (the checkpoint: %s)", path, now,
                        now.global_batch, was)
        return config, []
    per_update = now.batch_size * now.processes
    if now.processes != was.processes and was.global_batch % per_update == 0:
        kept = BatchGeometry(now.batch_size, now.processes, was.global_batch // per_update)
        logger.warning("resuming %s, written on %d process%s, on %d: train.accumulate_steps is set to %d to keep "
                       "its global batch of %d (%s)", path, was.processes, "es" if was.processes != 1 else "",
                       now.processes, kept.accumulate_steps, was.global_batch, kept)
        return dataclasses.replace(config, train=dataclasses.replace(
            config.train, accumulate_steps=kept.accumulate_steps)), []
    differences = []
    for key, old, new in (("train.batch_size", was.batch_size, now.batch_size),
                          ("train.accumulate_steps", was.accumulate_steps, now.accumulate_steps),
                          ("processes", was.processes, now.processes)):
        if old != new:
            differences.append(f"{key} {old!r} (the config: {new!r})")
    differences.append(
        f"a global batch of {was.global_batch} (the config: {now.global_batch}"
        + (f"; -o train.batch_size={was.global_batch // (now.processes * now.accumulate_steps)} keeps it"
           if was.global_batch % (now.processes * now.accumulate_steps) == 0 else "") + ")")
    return config, differences


def _few(names, limit=5):
    names = list(names)
    return "[" + ", ".join(map(str, names[:limit])) + (f", ... ({len(names)} in all)" if len(names) > limit else "") + "]"


def check_same_run(config, state, path, class_names, geometry_differences, teacher=None):
    """Refuse (one line naming what differs) a checkpoint of another data set, class list,
    global batch, optimizer, frozen part or distillation teacher (`teacher`: the run's
    `Distiller.identity`, None without distillation), unless train.resume_check is off; then
    the data position is carried over in images."""
    recorded = state["config"]
    was = {"data.dataset": recorded["data"]["dataset"], "data.root": recorded["data"].get("root"),
           "data.train_list": recorded["data"].get("train_list"),  # a file list: which images, in which order
           "data.train_fraction": recorded["data"].get("train_fraction", 1.0),
           # the epoch's order: another repetition reads other images at the same position
           "data.repeated_augmentation": recorded["data"].get("repeated_augmentation", 1),
           # what trains and how: another optimizer's state, or a frozen backbone's lack of it, does not continue
           "model.freeze": recorded["model"].get("freeze"),
           "optimizer.name": recorded["optimizer"].get("name", "adamw")}
    now = {"data.dataset": config.data.dataset, "data.root": config.data.root,
           "data.train_list": config.data.train_list, "data.train_fraction": config.data.train_fraction,
           "data.repeated_augmentation": config.data.repeated_augmentation,
           "model.freeze": config.model.freeze, "optimizer.name": config.optimizer.name}
    differences = [f"{key} {was[key]!r} (the config: {now[key]!r})" for key in was if was[key] != now[key]]
    differences += geometry_differences
    differences += identity_differences(state.get("distillation"), teacher)
    recorded_classes = state.get("class_names")
    if recorded_classes is not None and list(recorded_classes) != list(class_names):
        differences.append(f"the classes {_few(recorded_classes)} (the data: {_few(class_names)})")
    if differences and config.train.resume_check:
        raise ConfigError(f"checkpoint {path} was written with {'; '.join(differences)}: resuming would not "
                          f"continue that run; set them as the checkpoint has them, or -o train.resume_check=false "
                          f"to resume anyway")
    if differences:
        logger.warning("train.resume_check=false: resuming %s although it was written with %s", path,
                       "; ".join(differences))


def check_same_model(state, path, vit):
    """Refuse a checkpoint of another model than `vit` (fields that only change how it runs,
    such as recompute, may differ)."""
    # fields added since a checkpoint was written (e.g. gelu) had their defaults' values then
    recorded = {**dataclasses.asdict(ViTConfig()), **state["model_config"]}
    building = dataclasses.asdict(vit.config)
    for name in ViTConfig.RUN_ONLY_FIELDS:  # e.g. recompute switched on to resume with less memory
        recorded.pop(name), building.pop(name)
    if recorded != building:
        differing = [f"model.{name} {recorded.get(name)!r} (the config: {building.get(name)!r})"
                     for name in sorted(set(recorded) | set(building)) if recorded.get(name) != building.get(name)]
        raise ConfigError(f"checkpoint {path} was written for another model "
                          f"({recorded['embed_dim']}-wide, depth {recorded['depth']}, "
                          f"{recorded['num_classes']} classes) than the config builds: {'; '.join(differing[:4])}"
                          + (f"; and {len(differing) - 4} more" if len(differing) > 4 else ""))


def restore(state, path, parts):
    """Load `state` into the run's `parts` (model, optimizer, schedule, scaler, EMA); returns its
    TrainingPosition."""
    parts.vit.set_state_dict(state["model"])
    ckpt.restore_optimizer_state(parts.optimizer, parts.vit, state["optimizer"])
    parts.schedule.set_state_dict(state["scheduler"])
    if parts.scaler and state.get("scaler"):
        parts.scaler.load_state_dict(state["scaler"])
    if parts.ema and state.get("ema"):
        parts.ema.set_state_dict(state["ema"])
    position = TrainingPosition.from_checkpoint(state)
    if "history" not in state:  # written before checkpoints kept the epoch records
        position.history = history_from_metrics(path, position.epoch)
    return position


def carry_position_over(position, state, config, processes, batches_per_epoch):
    """The position and this epoch's sums over its steps counted in images: a step of the
    checkpoint's `images_per_step` is `scale` steps of this run's (resume_check off, or another
    split of the same global batch)."""
    now = BatchGeometry.of_config(config, processes)
    scale = BatchGeometry.recorded_in(state).images_per_step / now.images_per_step
    if scale != 1.0:
        position.batch_in_epoch = min(int(round(position.batch_in_epoch * scale, 6)), batches_per_epoch - 1)
        for name in position.summed_over_steps():  # e.g. the loss: each old step is `scale` new ones
            setattr(position, name, getattr(position, name) * scale)
    return position


def resume(config, state, path, parts, geometry_differences, processes):
    """Check that `state` (from `open_checkpoint`) continues this run, and restore it into
    `parts`; returns where the run stands. Called before a new run folder exists, so that a
    refused resume leaves nothing behind."""
    check_same_run(config, state, path, parts.class_names, geometry_differences,
                   parts.distiller.identity if parts.distiller else None)
    check_same_model(state, path, parts.vit)
    position = carry_position_over(restore(state, path, parts), state, config, processes, len(parts.train_loader))
    logger.info("resumed from %s: epoch %d, batch %d, step %d", path, position.epoch + 1, position.batch_in_epoch,
                position.global_step)
    return position


def history_from_metrics(path, epoch):
    """The epoch records of a checkpoint written before they were kept in it: metrics.jsonl's
    lines up to its `epoch`."""
    metrics = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(path))), "metrics.jsonl")
    records = []
    try:
        with open(metrics, encoding="utf-8") as stream:
            for line in stream:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a kill
                if isinstance(record, dict) and record.get("epoch", epoch + 1) <= epoch:
                    records.append(record)
    except OSError:
        pass
    return records


def check_ranks_agree(position, checkpoint):
    """Every process must start from the same point (every number of its position): a node that
    cannot see the run's checkpoints (no shared file system) would otherwise start fresh beside
    resumed ones."""
    numbers = position.numbers()
    gathered = []
    paddle.distributed.all_gather(gathered, paddle.to_tensor([float(value) for value in numbers.values()], "float64"))
    points = [tuple(float(value) for value in point.numpy()) for point in gathered]
    if len(set(points)) > 1:
        step = list(numbers).index("global_step")
        described = ", ".join(f"rank {r}: step {int(point[step])}" for r, point in enumerate(points))
        raise ConfigError(f"the processes of this run would start from different points ({described}; this rank "
                          f"resumes {checkpoint or 'nothing'}): every node must see the same run folder "
                          f"(train.output_dir on a shared file system) to resume")
