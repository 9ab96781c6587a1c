"""Building a run from its config: where it computes, its data, its model and what trains it.

`place_process` picks the device and joins the other processes of a multi-process run;
`build_run` makes the rest, in the order the run's random numbers depend on (the model's
initial weights are drawn from Paddle's generator right after it is seeded), and returns it as
one `RunParts`. Every check that can refuse the run cheaply (the class count, a batch larger
than the data, a split none of whose images decodes) comes before the model is built, and all
of them before a run folder exists.
"""
import dataclasses
import logging
import math
from typing import Any, List, Optional

import paddle

from ..data import MixupCutmix, build_dataloader, build_datasets
from ..deploy.tracing import to_static_graph
from ..device import init_distributed, is_main_process, select_device
from .. import runtime
from ..errors import ConfigError
from ..factory import build_model, input_size, pretrained_source
from ..variants import use_cpu_fast_paths, use_traceable_variants
from ..variants.batch_threads import BatchThreads, plan_batch_threads
from . import sharding
from .distillation import Distiller, build_distiller
from .ema import ModelEma
from .freeze import freeze_backbone
from .optim import build_optimizer, build_schedule

logger = logging.getLogger("paddle_vit")


@dataclasses.dataclass(frozen=True)
class Placement:
    """This process's device, and its place among the processes of the run."""
    place: str  # "cpu", "gpu:0", ...
    distributed: bool  # several processes (paddle.distributed.launch)
    main: bool  # rank 0: the one that logs and writes
    world_size: int
    rank: int


def place_process(device):
    """Select `device` (train.device) and start data parallelism when launched with several
    processes."""
    place = select_device(device)
    distributed = init_distributed()
    world_size = paddle.distributed.get_world_size() if distributed else 1
    rank = paddle.distributed.get_rank() if distributed else 0
    return Placement(place, distributed, is_main_process(), world_size, rank)


def amp_dtype_for(amp, place):
    """Paddle's dtype name for `amp` ("bf16"/"fp16"), or None for float32. Paddle's autocast
    only acts on GPU/XPU: elsewhere, or on a GPU without that dtype, train in float32 and say so."""
    dtype = {"bf16": "bfloat16", "fp16": "float16"}.get(amp)
    if dtype is None:
        return None
    supported = paddle.amp.is_bfloat16_supported() if amp == "bf16" else paddle.amp.is_float16_supported()
    if not place.startswith("gpu") or not supported:
        logger.warning("train.amp=%s has no effect on %s (Paddle's AMP needs a GPU with %s): training in float32",
                       amp, place, dtype)
        return None
    return dtype


@dataclasses.dataclass
class RunParts:
    """What a run trains with, kept whole as `Trainer.parts`. `vit` is the ViT itself (its
    weights, its state dict); `model` is what the loop calls: the ViT, or DataParallel / the
    sharding wrapper / a to_static graph around it."""
    train_set: Any  # AugmentedDataset
    val_set: Any
    class_names: List[str]
    train_loader: Any  # ResumableDataLoader, batches [B, 3, S, S] float32 and [B] int64
    val_loader: Any
    vit: Any
    model: Any
    optimizer: Any
    schedule: Any  # WarmupCosineSchedule, stepped once per update
    updates_per_epoch: int
    amp_dtype: Optional[str]  # "bfloat16", "float16" or None (float32)
    scaler: Any  # fp16's GradScaler, else None
    ema: Optional[ModelEma]
    sharded: bool
    mix: Optional[MixupCutmix]
    distiller: Optional[Distiller] = None  # train.distillation's teacher and losses
    batch_threads: Optional[BatchThreads] = None  # train.batch_threads: each step's batch in slices, in threads

    @property
    def num_classes(self):
        return len(self.class_names)


def build_data(config, pretrained=None):
    """(train set, val set, class names, train loader, val loader) of `config`, refused (one
    line) when they cannot make a run; `pretrained`: the `WeightsSource` of model.pretrained,
    whose folder may say the input size."""
    train, data = config.train, config.data
    image_size = input_size(config, pretrained)
    train_set, val_set, class_names = build_datasets(data, image_size, seed=train.seed)
    if config.model.num_classes is not None and config.model.num_classes != len(class_names):
        raise ConfigError(f"model.num_classes is {config.model.num_classes} but data set {data.dataset} "
                          f"has {len(class_names)} classes; set model.num_classes: null to follow the data")
    if data.repeated_augmentation > len(train_set):  # an epoch shows about N / n distinct images
        raise ConfigError(f"data.repeated_augmentation {data.repeated_augmentation} is more than the "
                          f"{len(train_set)} training images: an epoch would show less than one distinct image "
                          f"(DeiT: 3)")
    train_loader = build_dataloader(train_set, train.batch_size, shuffle=True, drop_last=True,
                                    num_workers=data.num_workers, seed=train.seed, by_step=True,
                                    repeats=data.repeated_augmentation)
    val_loader = build_dataloader(val_set, config.eval.batch_size, shuffle=False, drop_last=False,
                                  num_workers=data.num_workers, seed=train.seed)
    if len(train_loader) == 0:
        raise ConfigError(f"train.batch_size {train.batch_size} is larger than the training set "
                          f"({len(train_set)} images): lower it")
    for split in (train_set, val_set):  # images are decoded lazily: a split of garbage would fail mid-run
        split.check_readable()
    return train_set, val_set, class_names, train_loader, val_loader


def build_run(config, placement):
    """Every part of the run `config` describes, on `placement`; Paddle's generator must have
    been seeded (the model's initial weights come from it)."""
    train, data = config.train, config.data
    pretrained = pretrained_source(config)  # model.pretrained, read once for the input size and the weights
    train_set, val_set, class_names, train_loader, val_loader = build_data(config, pretrained)
    num_classes = len(class_names)

    vit = use_cpu_fast_paths(build_model(config, num_classes, pretrained=pretrained))
    if config.model.freeze == "backbone":  # before the optimizer: it gets the head's parameters alone
        freeze_backbone(vit)
    amp_dtype = amp_dtype_for(train.amp, placement.place)
    distiller = None
    if train.distillation is not None:  # after the student (its initial weights drawn as without a teacher), before
        # the optimizer (type none freezes the distillation head)
        distiller = build_distiller(train.distillation, vit, class_names, data, placement.place, amp_dtype)
    updates_per_epoch = math.ceil(len(train_loader) / train.accumulate_steps)
    schedule = build_schedule(config.optimizer, config.schedule, updates_per_epoch, train.epochs)
    optimizer = build_optimizer(vit, config.optimizer, schedule)
    if amp_dtype and train.amp_level == "O2":
        vit, optimizer = paddle.amp.decorate(models=vit, optimizers=optimizer, level="O2", dtype=amp_dtype,
                                             master_weight=True)
    scaler = paddle.amp.GradScaler(init_loss_scaling=2.0 ** 16) if amp_dtype == "float16" else None
    ema = ModelEma(vit, train.ema_decay) if train.ema else None
    sharded = sharding.check_supported(train.sharding, placement.place, placement.distributed)
    if sharded:  # instead of DataParallel: it reduces the gradients too
        model, optimizer, scaler = sharding.wrap(vit, optimizer, scaler, train.sharding)
    else:
        model = paddle.DataParallel(vit) if placement.distributed else vit
    if train.to_static:
        use_traceable_variants(vit)
        model = to_static_graph(model)
    batch_threads = build_batch_threads(train.batch_threads, vit, model, placement, train.batch_size, train.to_static)
    mix = None
    if data.mixup_alpha > 0 or data.cutmix_alpha > 0:
        mix = MixupCutmix(data.mixup_alpha, data.cutmix_alpha, data.mix_prob, data.switch_prob,
                          train.label_smoothing, num_classes)
    return RunParts(train_set=train_set, val_set=val_set, class_names=class_names, train_loader=train_loader,
                    val_loader=val_loader, vit=vit, model=model, optimizer=optimizer, schedule=schedule,
                    updates_per_epoch=updates_per_epoch, amp_dtype=amp_dtype, scaler=scaler, ema=ema,
                    sharded=sharded, mix=mix, distiller=distiller, batch_threads=batch_threads)


def build_batch_threads(requested, vit, model, placement, batch_size, traced=False):
    """The `BatchThreads` that step slices of each batch in threads (train.batch_threads), or None
    for one thread; a number the run cannot use is refused with the reason. `model` is what the
    loop calls (a wrapper of `vit` in several processes); `traced`: train.to_static, which turns
    the ViT's own forward into a graph (the same object)."""
    threads, reason = plan_batch_threads(requested, vit, placement.place, not placement.distributed,
                                         eager=model is vit and not traced, batch=batch_size)
    if threads > 1 and reason:
        raise ConfigError(f"train.batch_threads is {requested}, but this run's step cannot be split: {reason} "
                          f"(null: split where it can be, 1: off)")
    if threads == 1:
        if requested is None and reason and placement.place.startswith("cpu"):
            logger.info("each step computes its batch on one thread: %s", reason)
        return None
    logger.info("each step computes its batch in %d slices, one thread each (train.batch_threads)", threads)
    cores = runtime.usable_cores()
    if threads > cores:
        logger.warning("train.batch_threads is %d but this process may use %d cores: the threads take turns "
                       "(null: the math threads)", threads, cores)
    return BatchThreads(vit, threads)
