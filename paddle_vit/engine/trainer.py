"""The training loop: data, model, AdamW, schedule, AMP, EMA, checkpoints, logs, resume."""
import contextlib
import dataclasses
import json
import logging
import math
import os
import signal
import sys
import time

import numpy as np
import paddle

from ..data import MixupCutmix, batch_rng, build_dataloader, build_datasets, one_hot_smoothed
from ..errors import ConfigError, TrainingError, WeightsError
from ..models import ViTConfig
from ..variants import use_cpu_fast_paths, use_traceable_variants
from ..viz import attention_overlay_image
from ..weights import save_weights
from .. import checkpoint as ckpt
from ..hub import build_model, resolve_model_config
from ..device import init_distributed, is_main_process, select_device
from .ema import ModelEma
from .evaluator import evaluate
from . import runs, sharding, step, stopping
from .logging_utils import Progress, ScalarWriter, check_log_files, format_duration, write_metrics
from .optim import build_optimizer, build_schedule

logger = logging.getLogger("paddle_vit")


def step_seed(seed, epoch, batch, rank=0):
    """A seed for one training step, the same however the run was interrupted and resumed. Each
    rank gets its own (rank 0's is a single process's): the ranks' dropout and drop-path masks
    must be independent draws, not one mask repeated on every rank's share of the step."""
    words = [seed, epoch, batch] + ([rank] if rank else [])
    return int(np.random.SeedSequence(words).generate_state(1)[0] % (2 ** 31))


@contextlib.contextmanager
def _reported_write_errors(path, what="checkpoint"):
    """A full disk or an unwritable folder while saving becomes one clear error; the atomic
    write has left the previous file at `path` untouched."""
    try:
        yield
    except (OSError, WeightsError) as error:
        kept = "the previous one is kept" if os.path.exists(path) else "no earlier one exists"
        if isinstance(error, WeightsError):  # save_weights names the file itself
            raise TrainingError(f"{error} ({what}); {kept}") from error
        raise TrainingError(f"cannot write {what} {path}: {error.strerror or error}; {kept}") from error


def _few(names, limit=5):
    names = list(names)
    return "[" + ", ".join(map(str, names[:limit])) + (f", ... ({len(names)} in all)" if len(names) > limit else "") + "]"


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
    def recorded_in(cls, state):
        train = state["config"]["train"]
        return cls(train["batch_size"], state.get("world_size", 1), train["accumulate_steps"])

    def __str__(self):
        return f"{self.batch_size} per process x {self.processes} process{'es' if self.processes != 1 else ''} " \
               f"x {self.accumulate_steps} accumulated"


class Trainer:
    """Everything a run needs, built from one `Config`.

    `fit()` trains from where the run stands (a fresh start, or the checkpoint named by
    `train.resume`), evaluates every `eval.interval` epochs, writes checkpoints, VisualDL
    scalars and metrics.jsonl (rank 0 only), and returns a summary dict.
    """

    def __init__(self, config, progress_bar=False):
        self.config = config
        self.progress_bar = progress_bar
        train = config.train
        self.place = select_device(train.device)
        self.distributed = init_distributed()
        self.main = is_main_process()
        if train.deterministic and self.place.startswith("gpu"):
            paddle.set_flags({"FLAGS_cudnn_deterministic": True})
        paddle.seed(train.seed)
        np.random.seed(train.seed)
        self.world_size = paddle.distributed.get_world_size() if self.distributed else 1
        self.rank = paddle.distributed.get_rank() if self.distributed else 0
        self.geometry_differences = []  # how a resumed checkpoint's global batch differs, if it does
        folder, checkpoint = runs.plan_run(config, self.main)
        resume_state = ckpt.load_checkpoint(checkpoint) if checkpoint is not None else None
        if resume_state is not None:  # may set accumulate_steps to keep the run's global batch
            config = self.config = self._fit_batch_geometry(resume_state, checkpoint)
            train = config.train

        image_size = resolve_model_config(config, num_classes=2).image_size
        self.train_set, self.val_set, self.class_names = build_datasets(config.data, image_size, seed=train.seed)
        self.num_classes = len(self.class_names)
        if config.model.num_classes is not None and config.model.num_classes != self.num_classes:
            raise ConfigError(f"model.num_classes is {config.model.num_classes} but data set {config.data.dataset} "
                              f"has {self.num_classes} classes; set model.num_classes: null to follow the data")
        self.train_loader = build_dataloader(self.train_set, train.batch_size, shuffle=True, drop_last=True,
                                             num_workers=config.data.num_workers, seed=train.seed, by_step=True)
        self.val_loader = build_dataloader(self.val_set, config.eval.batch_size, shuffle=False, drop_last=False,
                                           num_workers=config.data.num_workers, seed=train.seed)
        if len(self.train_loader) == 0:
            raise ConfigError(f"train.batch_size {train.batch_size} is larger than the training set "
                              f"({len(self.train_set)} images): lower it")

        self.vit = use_cpu_fast_paths(build_model(config, self.num_classes))
        self.updates_per_epoch = math.ceil(len(self.train_loader) / train.accumulate_steps)
        self.schedule = build_schedule(config.optimizer, config.schedule, self.updates_per_epoch, train.epochs)
        self.optimizer = build_optimizer(self.vit, config.optimizer, self.schedule)
        self.amp_dtype = amp_dtype_for(train.amp, self.place)
        if self.amp_dtype and train.amp_level == "O2":
            self.vit, self.optimizer = paddle.amp.decorate(models=self.vit, optimizers=self.optimizer, level="O2",
                                                           dtype=self.amp_dtype, master_weight=True)
        self.scaler = paddle.amp.GradScaler(init_loss_scaling=2.0 ** 16) if self.amp_dtype == "float16" else None
        self.ema = ModelEma(self.vit, train.ema_decay) if train.ema else None
        self.sharded = sharding.check_supported(train.sharding, self.place, self.distributed)
        if self.sharded:  # instead of DataParallel: it reduces the gradients too
            self.model, self.optimizer, self.scaler = sharding.wrap(self.vit, self.optimizer, self.scaler,
                                                                    train.sharding)
        else:
            self.model = paddle.DataParallel(self.vit) if self.distributed else self.vit
        if train.to_static:
            use_traceable_variants(self.vit)
            self.model = paddle.jit.to_static(self.model, full_graph=True)
        data = config.data
        self.mix = None
        if data.mixup_alpha > 0 or data.cutmix_alpha > 0:
            self.mix = MixupCutmix(data.mixup_alpha, data.cutmix_alpha, data.mix_prob, data.switch_prob,
                                   train.label_smoothing, self.num_classes)

        self.epoch, self.batch_in_epoch, self.global_step, self.best_top1 = 0, 0, 0, -1.0
        self.epoch_loss_sum, self.epoch_loss_count = 0.0, 0  # this epoch's so far, kept across a resume
        self.bad_steps, self.window_not_finite = 0, False  # non-finite losses in a row; in this update
        self.history = []  # every finished epoch's metrics record: metrics.jsonl is written from it
        self.stop_requested = False
        self.lock = None
        if resume_state is not None:
            self._resume(resume_state, checkpoint)  # before a new folder exists: a refused resume leaves nothing
        elif train.resume:
            logger.info("train.resume=%s: no checkpoint to resume yet, starting fresh", train.resume)
        if self.distributed:  # before rank 0 writes anything into the run folder
            self._check_ranks_agree(checkpoint)
        if self.main:
            try:
                self.output_dir = folder or runs.new_run_folder(config.output_dir)
                os.makedirs(self.output_dir, exist_ok=True)
                self.lock = runs.RunLock(self.output_dir).acquire()
                self.checkpoint_dir = os.path.join(self.output_dir, "checkpoints")
                os.makedirs(self.checkpoint_dir, exist_ok=True)
                ckpt.remove_unfinished_writes(self.checkpoint_dir)
                run_config = dataclasses.replace(config, train=dataclasses.replace(train, output_dir=self.output_dir))
                run_config.save(os.path.join(self.output_dir, "config.yaml"))
                write_metrics(os.path.join(self.output_dir, "metrics.jsonl"), self.history)
            except OSError as error:
                self.close()
                raise ConfigError(f"train.output_dir {folder or config.output_dir} is not writable: "
                                  f"{error.strerror or error}") from error
            logger.info("run folder: %s", self.output_dir)
        else:
            self.output_dir = folder
            self.checkpoint_dir = os.path.join(folder, "checkpoints")

    def close(self):
        """Release the run folder (the lock); fit() does it when it ends."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    # ---- state ----------------------------------------------------------------------------
    def state(self):
        return {
            "model": self.vit.state_dict(),
            "optimizer": (sharding.gathered_optimizer_state(self.optimizer, self.vit) if self.sharded
                          else ckpt.portable_optimizer_state(self.optimizer, self.vit)),
            "scheduler": self.schedule.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "ema": self.ema.state_dict() if self.ema else None,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "global_step": self.global_step,
            "best_top1": self.best_top1,
            "epoch_loss_sum": self.epoch_loss_sum,
            "epoch_loss_count": self.epoch_loss_count,
            "bad_steps": self.bad_steps,
            "config": self.config.to_dict(),
            "model_config": dataclasses.asdict(self.vit.config),
            "class_names": self.class_names,
            "history": list(self.history),
            "world_size": self.world_size,
        }

    def _resume(self, state, path):
        missing = [key for key in ("model", "optimizer", "scheduler", "epoch", "global_step", "model_config", "config")
                   if key not in state]
        if missing:
            raise WeightsError(f"checkpoint {path} was written by an older paddle-vit and lacks {', '.join(missing)}: "
                               f"it cannot be resumed; start a new run from its weights with -o model.pretrained={path}")
        self._check_same_run(state, path)
        # fields added since a checkpoint was written (e.g. gelu) had their defaults' values then
        recorded = {**dataclasses.asdict(ViTConfig()), **state["model_config"]}
        building = dataclasses.asdict(self.vit.config)
        for name in ViTConfig.RUN_ONLY_FIELDS:  # e.g. recompute switched on to resume with less memory
            recorded.pop(name), building.pop(name)
        if recorded != building:
            raise ConfigError(f"checkpoint {path} was written for another model "
                              f"({state['model_config']['embed_dim']}-wide, depth {state['model_config']['depth']}, "
                              f"{state['model_config']['num_classes']} classes) than the config builds")
        self.vit.set_state_dict(state["model"])
        ckpt.restore_optimizer_state(self.optimizer, self.vit, state["optimizer"])
        self.schedule.set_state_dict(state["scheduler"])
        if self.scaler and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        if self.ema and state.get("ema"):
            self.ema.set_state_dict(state["ema"])
        self.epoch, self.batch_in_epoch = state["epoch"], state.get("batch_in_epoch", 0)
        self.global_step, self.best_top1 = state["global_step"], state.get("best_top1", -1.0)
        self.epoch_loss_sum, self.epoch_loss_count = state.get("epoch_loss_sum", 0.0), state.get("epoch_loss_count", 0)
        self.bad_steps = state.get("bad_steps", 0)
        self.history = list(state["history"]) if "history" in state else self._history_from_metrics(path, state["epoch"])
        # the position and this epoch's loss so far, in images: a step of `was` images is `scale` steps now
        scale = BatchGeometry.recorded_in(state).images_per_step / self.geometry.images_per_step
        if scale != 1.0:
            self.batch_in_epoch = min(int(round(self.batch_in_epoch * scale, 6)), len(self.train_loader) - 1)
            self.epoch_loss_sum *= scale  # a sum of per-step mean losses: each old step is `scale` new ones
            self.epoch_loss_count *= scale
        logger.info("resumed from %s: epoch %d, batch %d, step %d", path, self.epoch + 1, self.batch_in_epoch,
                    self.global_step)

    @property
    def geometry(self):
        """This run's BatchGeometry, as its config and process count make it."""
        train = self.config.train
        return BatchGeometry(train.batch_size, self.world_size, train.accumulate_steps)

    def _fit_batch_geometry(self, state, path):
        """The config to resume `state` with. The run's global batch (batch_size x processes x
        accumulate_steps) is what its optimizer steps and schedule were made for; on another number
        of processes keep it by setting accumulate_steps when the config's own arithmetic does not
        (one line says so). Anything else that changes it is refused in `_check_same_run`."""
        if "config" not in state:
            return self.config  # an older checkpoint: _resume says what it lacks
        was = BatchGeometry.recorded_in(state)
        train = self.config.train
        now = self.geometry
        if now.global_batch == was.global_batch:
            if now != was:
                logger.info("resuming %s on %s: the global batch %d is kept (the checkpoint: %s)", path, now,
                            now.global_batch, was)
            return self.config
        per_update = now.batch_size * now.processes
        if now.processes != was.processes and was.global_batch % per_update == 0:
            kept = BatchGeometry(now.batch_size, now.processes, was.global_batch // per_update)
            logger.warning("resuming %s, written on %d process%s, on %d: train.accumulate_steps is set to %d to keep "
                           "its global batch of %d (%s)", path, was.processes, "es" if was.processes != 1 else "",
                           now.processes, kept.accumulate_steps, was.global_batch, kept)
            return dataclasses.replace(self.config, train=dataclasses.replace(train, accumulate_steps=kept.accumulate_steps))
        for key, old, new in (("train.batch_size", was.batch_size, now.batch_size),
                              ("train.accumulate_steps", was.accumulate_steps, now.accumulate_steps),
                              ("processes", was.processes, now.processes)):
            if old != new:
                self.geometry_differences.append(f"{key} {old!r} (the config: {new!r})")
        self.geometry_differences.append(
            f"a global batch of {was.global_batch} (the config: {now.global_batch}"
            + (f"; -o train.batch_size={was.global_batch // (now.processes * now.accumulate_steps)} keeps it"
               if was.global_batch % (now.processes * now.accumulate_steps) == 0 else "") + ")")
        return self.config

    def _check_same_run(self, state, path):
        """Refuse (one line naming what differs) a checkpoint of another data set, class list or
        global batch, unless train.resume_check is off; then the data position is carried over in
        images."""
        recorded = state["config"]
        was = {"data.dataset": recorded["data"]["dataset"], "data.root": recorded["data"].get("root"),
               "data.train_fraction": recorded["data"].get("train_fraction", 1.0)}
        config = self.config
        now = {"data.dataset": config.data.dataset, "data.root": config.data.root,
               "data.train_fraction": config.data.train_fraction}
        differences = [f"{key} {was[key]!r} (the config: {now[key]!r})" for key in was if was[key] != now[key]]
        differences += self.geometry_differences
        recorded_classes = state.get("class_names")
        if recorded_classes is not None and list(recorded_classes) != list(self.class_names):
            differences.append(f"the classes {_few(recorded_classes)} (the data: {_few(self.class_names)})")
        if differences and self.config.train.resume_check:
            raise ConfigError(f"checkpoint {path} was written with {'; '.join(differences)}: resuming would not "
                              f"continue that run; set them as the checkpoint has them, or -o train.resume_check=false "
                              f"to resume anyway")
        if differences:
            logger.warning("train.resume_check=false: resuming %s although it was written with %s", path,
                           "; ".join(differences))

    def _check_ranks_agree(self, checkpoint):
        """Every process must start from the same point: a node that cannot see the run's
        checkpoints (no shared file system) would otherwise start fresh beside resumed ones."""
        steps = []
        paddle.distributed.all_gather(steps, paddle.to_tensor([self.global_step, self.batch_in_epoch], "int64"))
        steps = [tuple(int(v) for v in step.numpy()) for step in steps]
        if len(set(steps)) > 1:
            described = ", ".join(f"rank {r}: step {s}" for r, (s, _) in enumerate(steps))
            raise ConfigError(f"the processes of this run would start from different points ({described}; this rank "
                              f"resumes {checkpoint or 'nothing'}): every node must see the same run folder "
                              f"(train.output_dir on a shared file system) to resume")

    def _history_from_metrics(self, path, epoch):
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

    def save(self, name):
        if self.sharded:  # every rank holds a part of the optimizer state: all take part in gathering it
            state = self.state()
        if self.main:
            path = os.path.join(self.checkpoint_dir, name)
            with _reported_write_errors(path):
                ckpt.save_checkpoint(state if self.sharded else self.state(), path)

    def save_weights(self, name):
        """best / last weights alone, as train.weights_format says (.pdparams or .safetensors)."""
        if not self.main:
            return
        extension = self.config.train.weights_format
        for suffix, weights in (("", self.vit), ("_ema", self.ema.state_dict() if self.ema else None)):
            if weights is not None:
                path = os.path.join(self.checkpoint_dir, f"{name}{suffix}.{extension}")
                with _reported_write_errors(path, "weights"):
                    save_weights(weights, path, class_names=self.class_names)

    # ---- the loop -------------------------------------------------------------------------
    def autocast(self):
        return step.autocast(self.amp_dtype, self.config.train.amp_level)

    def loss(self, logits, targets):
        return step.classification_loss(logits, targets)

    def targets(self, images, labels, epoch, batch):
        """Mix the batch and/or smooth its labels as the recipe says."""
        if self.mix is not None:
            return self.mix(images, labels, batch_rng(self.config.train.seed, epoch, batch, self.rank))
        if self.config.train.label_smoothing > 0:
            return images, one_hot_smoothed(labels, self.num_classes, self.config.train.label_smoothing)
        return images, labels

    def _gradient_sync(self, at_update):
        """DataParallel's all-reduce only where the update is made (no_sync before it)."""
        if self.distributed and not self.sharded and not at_update and hasattr(self.model, "no_sync"):
            return self.model.no_sync()
        return contextlib.nullcontext()

    def optimizer_step(self):
        """Apply the accumulated gradients, unless a loss in the window was NaN/Inf (then drop
        them, as the fp16 loss scaler does for an overflow)."""
        if self.window_not_finite:
            self.optimizer.clear_grad(set_to_zero=False)
            skipped = True
        else:  # with fp16 the scaler skips the update itself when it finds Inf/NaN gradients
            found_inf = step.apply_update(self.optimizer, self.scaler)
            skipped = bool(found_inf) if found_inf is not None else False
        self.schedule.step()
        self.global_step += 1
        self.window_not_finite = False
        if skipped:
            self.bad_steps += 1
            if self.bad_steps >= self.config.train.max_bad_steps:
                raise self._diverged()
            return
        self.bad_steps = 0
        if self.ema:
            self.ema.update(self.vit)

    def _diverged(self):
        last = os.path.join(self.checkpoint_dir, "last.pdckpt")
        kept = (f"the last good checkpoint, {last}, is kept" if os.path.exists(last)
                else "no checkpoint had been written yet")
        return TrainingError(
            f"the loss was NaN or Inf for {self.bad_steps} steps in a row, the last at step {self.global_step} "
            f"(epoch {self.epoch + 1}, batch {self.batch_in_epoch}); stopped: {kept}. Lower optimizer.lr, raise "
            f"schedule.warmup_epochs or check the data")

    def _request_stop(self, signum, frame):
        if self.stop_requested:  # a second Ctrl-C stops at once
            self._stop_now(signum)
        logger.warning("received %s: finishing the step, then saving a checkpoint",
                       signal.Signals(signum).name)
        self.stop_requested = True

    def _stop_now(self, signum):
        """End the process at once, as a second Ctrl-C asks: one line, exit code 130 (128 + the
        signal). Raising KeyboardInterrupt instead would unwind through Paddle's backward pass
        and the DataLoader's threads, which print tracebacks of their own; ending here is as
        safe as a SIGKILL: every file is written atomically, and the kernel drops the run's lock."""
        last = os.path.join(self.checkpoint_dir, "last.pdckpt")
        kept = f"{last} is the last whole checkpoint" if os.path.exists(last) else "no checkpoint had been written"
        try:
            for handler in logging.getLogger("paddle_vit").handlers:
                handler.flush()
            sys.stdout.flush()
            sys.stderr.write(f"error: interrupted ({signal.Signals(signum).name} twice; {kept})\n")
            sys.stderr.flush()
        finally:
            os._exit(128 + signum)

    def fit(self):
        train = self.config.train
        total_batches = len(self.train_loader)
        writer = ScalarWriter(os.path.join(self.output_dir, "vdl"), enabled=self.main and train.vdl,
                              keep_until_step=self.global_step)
        progress = Progress(total_batches * train.epochs, self.epoch * total_batches + self.batch_in_epoch,
                            train.log_interval, bar=self.progress_bar and self.main)
        restore_signals = self._install_signal_handlers()
        start = time.time()
        metrics = {}
        try:
            while self.epoch < train.epochs:
                self.phase = "train"
                if not self._train_one_epoch(progress, writer):
                    return self._summary(start, interrupted=True, metrics=metrics)
                self.phase = "eval"
                metrics = self._end_epoch(writer)
        except MemoryError as error:
            raise self._out_of_memory(error) from error
        except RuntimeError as error:
            if self.distributed and stopping.is_communication_error(error):
                stopping.exit_for_lost_peer(self.rank, error, self._last_checkpoint_words())
            raise
        finally:
            progress.close()
            writer.close()
            restore_signals()
            self.close()
        return self._summary(start, interrupted=False, metrics=metrics)

    def _out_of_memory(self, error):
        """Paddle's allocator failure (a MemoryError, "ResourceExhausted") turned into advice."""
        train = self.config.train
        if getattr(self, "phase", "train") == "eval":
            return TrainingError(f"out of memory on {self.place} while evaluating with eval.batch_size "
                                 f"{self.config.eval.batch_size}: lower it, e.g. -o eval.batch_size="
                                 f"{max(1, self.config.eval.batch_size // 2)}")
        half = max(1, train.batch_size // 2)
        return TrainingError(
            f"out of memory on {self.place} at train.batch_size {train.batch_size}: use -o train.batch_size={half} "
            f"-o train.accumulate_steps={train.accumulate_steps * 2} (the same effective batch through gradient "
            f"accumulation){', or train.amp=bf16' if self.place.startswith('gpu') and not self.amp_dtype else ''}")

    def _last_checkpoint_words(self):
        """Where a stopped run continues from, for the line that says it stopped."""
        if not self.main:
            return "rank 0 names the last whole checkpoint"
        last = os.path.join(self.checkpoint_dir, "last.pdckpt")
        if os.path.exists(last):
            return f"{last} is the last whole checkpoint: continue with -o train.resume=auto"
        return "no checkpoint had been written yet"

    def _install_signal_handlers(self):
        """Single process: the first Ctrl-C/SIGTERM finishes the step and saves, a second stops at
        once. Several processes: a signal stops at once with one line (engine/stopping.py).
        Returns the function that restores what was there before."""
        if self.distributed:
            return stopping.install(self.rank, self._last_checkpoint_words)
        previous = {}
        try:
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, self._request_stop)
        except ValueError:  # not the main thread: leave signals alone
            pass

        def restore():
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        return restore

    def _train_one_epoch(self, progress, writer):
        """Train the rest of the current epoch; False when stopped by a signal."""
        train = self.config.train
        epoch, total_batches = self.epoch, len(self.train_loader)
        self.model.train()
        self.train_loader.set_epoch(epoch, start_batch=self.batch_in_epoch)
        running_loss, running_count, interval_steps = paddle.zeros([], dtype="float64"), 0, 0
        self.epoch_images, self.epoch_start = 0, time.time()
        interval_start, interval_images = time.time(), 0
        for images, labels in self.train_loader:
            batch = self.batch_in_epoch
            if train.deterministic:
                paddle.seed(step_seed(train.seed, epoch, batch, self.rank))
            images, targets = self.targets(images, labels, epoch, batch)  # [B, 3, S, S]; [B] or [B, K]
            loss = step.forward_loss(self.model, images, targets, self.autocast)
            # with fp16 the loss scaler checks the gradients; otherwise one scalar read per step
            finite = self._loss_is_finite(loss) if train.check_finite and not self.scaler else True
            at_update = (batch + 1) % train.accumulate_steps == 0 or batch + 1 == total_batches
            if finite:
                # ranks average their gradients once per update, at its last micro-step, not at each
                with self._gradient_sync(at_update):
                    step.backward(loss, self.scaler, train.accumulate_steps)
                running_loss += loss.detach().astype("float64")  # summed on the device, read at log time
                running_count += 1
            else:
                self.window_not_finite = True
                logger.warning("step %d (epoch %d, batch %d): the loss is %s; this update is skipped",
                               self.global_step + 1, epoch + 1, batch + 1, float(loss))
            self.batch_in_epoch += 1
            interval_steps += 1
            if at_update:
                self.optimizer_step()
            interval_images += images.shape[0]
            self.epoch_images += images.shape[0]
            if (at_update and train.checkpoint_steps and self.global_step % train.checkpoint_steps == 0
                    and self.batch_in_epoch < total_batches):  # (the epoch's end writes one anyway)
                self._fold_running_loss(running_loss, running_count)
                running_loss, running_count = paddle.zeros([], dtype="float64"), 0
                self.save("last.pdckpt")
            if interval_steps == train.log_interval or self.batch_in_epoch == total_batches:
                loss_sum = self._fold_running_loss(running_loss, running_count)
                mean_loss = loss_sum / max(running_count, 1)
                images_per_sec = interval_images / max(time.time() - interval_start, 1e-9)
                lr = self.optimizer.get_lr()
                progress.update(interval_steps, epoch, train.epochs, self.batch_in_epoch, total_batches, mean_loss,
                                lr, images_per_sec)
                writer.add("train/loss", mean_loss, self.global_step)
                writer.add("train/lr", lr, self.global_step)
                writer.add("train/images_per_sec", images_per_sec, self.global_step)
                running_loss, running_count, interval_steps = paddle.zeros([], dtype="float64"), 0, 0
                interval_start, interval_images = time.time(), 0
            if self.stop_requested and at_update:
                self._fold_running_loss(running_loss, running_count)  # steps not yet logged still count
                self.save("last.pdckpt")
                logger.warning("stopped at epoch %d, batch %d/%d; resume with -o train.resume=auto "
                               "(same output_dir)", epoch + 1, self.batch_in_epoch, total_batches)
                return False
        return True

    def _loss_is_finite(self, loss):
        """One host read per step. Several processes agree first (the minimum over the ranks), so
        they skip an update together: one rank skipping its backward alone would leave the others
        waiting in the gradient all-reduce."""
        finite = paddle.isfinite(loss).astype("int32")
        if self.distributed:
            paddle.distributed.all_reduce(finite, op=paddle.distributed.ReduceOp.MIN)
        return bool(finite)

    def _fold_running_loss(self, running_loss, running_count):
        """Add the loss summed on the device since the last fold (`running_count` steps of this
        rank) to the epoch's, as the mean over every rank; returns that sum. The host reads the
        loss here (log intervals, checkpoints), not every step."""
        if self.distributed:  # the mean over every rank's batches
            paddle.distributed.all_reduce(running_loss)
            running_loss = running_loss / self.world_size
        loss_sum = float(running_loss)
        if not math.isfinite(loss_sum):  # only reachable with train.check_finite off
            self.bad_steps = self.config.train.max_bad_steps
            raise self._diverged()
        self.epoch_loss_sum += loss_sum
        self.epoch_loss_count += running_count
        return loss_sum

    def _end_epoch(self, writer):
        train, epoch = self.config.train, self.epoch
        seconds = time.time() - self.epoch_start
        record = {
            "epoch": epoch + 1,
            "step": self.global_step,
            "train_loss": self.epoch_loss_sum / max(self.epoch_loss_count, 1),
            "lr": self.optimizer.get_lr(),
            "images_per_sec": self.epoch_images / max(seconds, 1e-9),
            "epoch_seconds": seconds,
        }
        self.epoch_loss_sum, self.epoch_loss_count = 0.0, 0
        skipped = self.train_set.num_bad_images + self.val_set.num_bad_images
        if skipped:
            record["skipped_images"] = skipped  # unreadable files passed over (data.on_bad_image: skip)
        last_epoch = epoch + 1 == train.epochs
        if (epoch + 1) % self.config.eval.interval == 0 or last_epoch:
            result = evaluate(self.model, self.val_loader, self.num_classes, self.autocast)
            record.update(val_top1=result["top1"], val_top5=result["top5"], val_loss=result["loss"])
            if self.ema:
                original = self.ema.apply_to(self.vit)
                ema_result = evaluate(self.model, self.val_loader, self.num_classes, self.autocast)
                self.vit.set_state_dict(original)
                record.update(val_ema_top1=ema_result["top1"], val_ema_top5=ema_result["top5"])
            for key in ("top1", "top5", "loss"):
                writer.add(f"val/{key}", result[key], self.global_step)
            interval = self.config.eval.attention_map_interval
            if interval and (epoch + 1) % interval == 0 and self.main:
                image = attention_overlay_image(self.vit, self.val_set[0][0], self.config.data.mean,
                                                self.config.data.std)
                writer.add_image("val/attention", image, epoch + 1)
            if result["top1"] > self.best_top1:
                self.best_top1 = result["top1"]
                self.save_weights("best")
        self.epoch, self.batch_in_epoch = epoch + 1, 0
        record["best_top1"] = self.best_top1
        self.history.append(record)  # the checkpoint carries the records: a kill between it and
        self.save("last.pdckpt")  # metrics.jsonl loses nothing, the resumed run rewrites the file
        self.save_weights("last")
        if train.save_interval and (epoch + 1) % train.save_interval == 0:
            self.save(f"epoch_{epoch + 1:04d}.pdckpt")
            if self.main:
                ckpt.prune_checkpoints(self.checkpoint_dir, train.keep_last)
        if self.main:
            path = os.path.join(self.output_dir, "metrics.jsonl")
            with _reported_write_errors(path, "metrics"):
                write_metrics(path, self.history)
            described = " ".join(f"{key} {value:.4f}" if isinstance(value, float) else f"{key} {value}"
                                 for key, value in record.items())
            logger.info("%s (%s)", described, format_duration(seconds))
            check_log_files()
        return record

    def _summary(self, start, interrupted, metrics):
        return {"output_dir": self.output_dir, "epochs_done": self.epoch, "global_step": self.global_step,
                "best_top1": self.best_top1, "interrupted": interrupted, "seconds": time.time() - start,
                "last_epoch": metrics}
