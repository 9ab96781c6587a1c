"""The training loop: epochs of steps, evaluation, checkpoints, logs, signals.

A `Trainer` is one run, held as two objects: what it is made of, `self.parts` (built by
`build.py`: data, model, optimizer, schedule, AMP, EMA, the wrappers), and where it stands,
`self.position` (position.py: the epoch, batch, step and epoch records that every checkpoint
saves). A checkpoint to continue from is checked and restored by `resume.py`, one step's
forward, loss, backward and update are `step.py`'s; here they are put in motion: the
accumulation window around the steps, the finite check, EMA, the log lines, VisualDL scalars and
metrics.jsonl, the checkpoints, and what Ctrl-C or SIGTERM does.
"""
import contextlib
import dataclasses
import logging
import math
import os
import signal
import sys
import time

import paddle

from .. import checkpoint as ckpt
from ..data import batch_rng, one_hot_smoothed
from ..errors import TrainingError, WeightsError
from ..preprocess.checkpoint import eval_data_keys
from ..viz import attention_overlay_image
from ..weights import save_weights
from . import build, fewshot_eval, resume, runs, seeding, sharding, step, stopping
from .freeze import keep_backbone_in_eval
from .position import TrainingPosition
from .evaluator import evaluate
from .logging_utils import Progress, ScalarWriter, check_log_files, format_duration, write_metrics
from .seeding import step_seed

logger = logging.getLogger("paddle_vit")


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


class Trainer:
    """Everything a run needs, built from one `Config`.

    `fit()` trains from where the run stands (a fresh start, or the checkpoint named by
    `train.resume`), evaluates every `eval.interval` epochs, writes checkpoints, VisualDL
    scalars and metrics.jsonl (rank 0 only), and returns a summary dict. The process's random
    generators (and cuDNN's determinism flag) are given back as they were when it ends, and by
    `close()` for a trainer never fitted.
    """

    def __init__(self, config, progress_bar=False):
        self.progress_bar = progress_bar
        self.lock = None  # the run folder's, taken once the run is known to start
        self.process_random_state = seeding.ProcessRandomState.capture()  # before the run seeds anything
        try:
            placement = build.place_process(config.train.device)
            seeding.seed_process(config.train, placement.place)
            folder, checkpoint = runs.plan_run(config, placement.main)
            resume_state, geometry_differences = None, []
            if checkpoint is not None:  # may set accumulate_steps to keep the run's global batch
                resume_state, config, geometry_differences = resume.open_checkpoint(checkpoint, config,
                                                                                    placement.world_size)
            parts = build.build_run(config, placement)
            if resume_state is not None:  # before a new folder exists: a refused resume leaves nothing
                position = resume.resume(config, resume_state, checkpoint, parts, geometry_differences,
                                         placement.world_size)
            else:
                position = TrainingPosition()
                if config.train.resume:
                    logger.info("train.resume=%s: no checkpoint to resume yet, starting fresh", config.train.resume)
            if placement.distributed:  # before rank 0 writes anything into the run folder
                resume.check_ranks_agree(position, checkpoint)

            self.config = config
            self.placement = placement  # this process's device and rank
            self.parts = parts  # what the run is made of (build.RunParts)
            self.position = position  # where it stands: what every checkpoint saves (TrainingPosition)
            # this process's flags while the loop runs, never saved
            self.window_not_finite = False  # a non-finite loss in this update's window
            self.stop_requested = False  # by the first Ctrl-C or SIGTERM: stop at the next update
            self.phase = "train"  # or "eval": what an out-of-memory error advises on
            self.fewshot_pool_loader = None  # the training split unaugmented, made at the first few-shot eval

            if placement.main:
                self.output_dir, self.lock = runs.open_run_folder(folder, config, position.history)
                logger.info("run folder: %s", self.output_dir)
            else:
                self.output_dir = folder
            self.checkpoint_dir = os.path.join(self.output_dir, "checkpoints")
        except BaseException:
            self.close()
            raise

    def close(self):
        """Release the run folder (the lock), end the threads of train.batch_threads and give the
        process its random generators back; fit() does it when it ends."""
        threads = getattr(getattr(self, "parts", None), "batch_threads", None)
        if threads is not None:
            threads.close()
        if self.lock is not None:
            self.lock.release()
            self.lock = None
        if self.process_random_state is not None:
            self.process_random_state.restore()
            self.process_random_state = None

    # what code outside the engine reads of the parts (experiments.py, the notebooks)
    @property
    def vit(self):
        return self.parts.vit

    @property
    def train_set(self):
        return self.parts.train_set

    @property
    def val_set(self):
        return self.parts.val_set

    @property
    def class_names(self):
        return self.parts.class_names

    # ---- state ----------------------------------------------------------------------------
    def state(self):
        """What a checkpoint holds: the parts' states, the position (a key for each of its
        fields) and what the run was made with."""
        parts = self.parts
        return {
            "model": parts.vit.state_dict(),
            "optimizer": (sharding.gathered_optimizer_state(parts.optimizer, parts.vit) if parts.sharded
                          else ckpt.portable_optimizer_state(parts.optimizer, parts.vit)),
            "scheduler": parts.schedule.state_dict(),
            "scaler": parts.scaler.state_dict() if parts.scaler else None,
            "ema": parts.ema.state_dict() if parts.ema else None,
            **self.position.to_checkpoint(),
            "config": self.config.to_dict(),
            "model_config": dataclasses.asdict(parts.vit.config),
            "class_names": parts.class_names,
            "world_size": self.placement.world_size,
            "distillation": parts.distiller.identity if parts.distiller else None,  # resumed with the same teacher
        }

    def save(self, name):
        sharded = self.parts.sharded
        if sharded:  # every rank holds a part of the optimizer state: all take part in gathering it
            state = self.state()
        if self.placement.main:
            path = os.path.join(self.checkpoint_dir, name)
            with _reported_write_errors(path):
                ckpt.save_checkpoint(state if sharded else self.state(), path)

    def save_weights(self, name):
        """best / last weights alone, as train.weights_format says (.pdparams or .safetensors)."""
        if not self.placement.main:
            return
        extension, ema = self.config.train.weights_format, self.parts.ema
        for suffix, weights in (("", self.parts.vit), ("_ema", ema.state_dict() if ema else None)):
            if weights is not None:
                path = os.path.join(self.checkpoint_dir, f"{name}{suffix}.{extension}")
                with _reported_write_errors(path, "weights"):
                    save_weights(weights, path, class_names=self.parts.class_names, model_config=self.parts.vit.config,
                                 model_name=self.config.model.name, eval_data=eval_data_keys(self.config.data))

    # ---- the loop -------------------------------------------------------------------------
    def autocast(self):
        return step.autocast(self.parts.amp_dtype, self.config.train.amp_level)

    def loss(self, logits, targets):
        return step.classification_loss(logits, targets)

    def forward_loss(self, images, targets, timed=False):
        """One step's loss: the model's on `images` against `targets`, or with train.distillation
        the distilled student's against the labels and the teacher (`timed`: time the teacher's
        share on this step); on slices of the batch in threads with train.batch_threads."""
        distiller = self.parts.distiller

        def loss_of(model, images, targets, first):
            if distiller is not None:  # the teacher's share is timed on the slice of this thread
                return distiller.forward_loss(model, images, targets, self.autocast, timed and first)
            return step.forward_loss(model, images, targets, self.autocast)

        return step.sliced_forward_loss(loss_of, self.parts.model, images, targets, self.parts.batch_threads)

    def targets(self, images, labels, epoch, batch):
        """Mix the batch and/or smooth its labels as the recipe says."""
        if self.parts.mix is not None:
            return self.parts.mix(images, labels, batch_rng(self.config.train.seed, epoch, batch, self.placement.rank))
        if self.config.train.label_smoothing > 0:
            return images, one_hot_smoothed(labels, self.parts.num_classes, self.config.train.label_smoothing)
        return images, labels

    def _gradient_sync(self, at_update):
        """DataParallel's all-reduce only where the update is made (no_sync before it)."""
        model = self.parts.model
        if self.placement.distributed and not self.parts.sharded and not at_update and hasattr(model, "no_sync"):
            return model.no_sync()
        return contextlib.nullcontext()

    def optimizer_step(self):
        """Apply the accumulated gradients, unless a loss in the window was NaN/Inf (then drop
        them, as the fp16 loss scaler does for an overflow)."""
        parts, position = self.parts, self.position
        if self.window_not_finite:
            step.discard_gradients(parts.optimizer, parts.batch_threads)
            skipped = True
        else:  # with fp16 the scaler skips the update itself when it finds Inf/NaN gradients
            found_inf = step.apply_update(parts.optimizer, parts.scaler, parts.batch_threads)
            skipped = bool(found_inf) if found_inf is not None else False
        parts.schedule.step()
        position.global_step += 1
        self.window_not_finite = False
        if skipped:
            position.bad_steps += 1
            if position.bad_steps >= self.config.train.max_bad_steps:
                raise self._diverged()
            return
        position.bad_steps = 0
        if parts.ema:
            parts.ema.update(parts.vit)

    def _diverged(self):
        last = os.path.join(self.checkpoint_dir, "last.pdckpt")
        kept = (f"the last good checkpoint, {last}, is kept" if os.path.exists(last)
                else "no checkpoint had been written yet")
        position = self.position
        return TrainingError(
            f"the loss was NaN or Inf for {position.bad_steps} steps in a row, the last at step "
            f"{position.global_step} (epoch {position.epoch + 1}, batch {position.batch_in_epoch}); stopped: {kept}. "
            f"Lower optimizer.lr, raise schedule.warmup_epochs or check the data")

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
        """Train to train.epochs (or until a signal stops the run); returns the summary dict."""
        try:
            return self._run_epochs()
        finally:
            self.close()  # the lock and the process's random generators, however the run ends

    def _run_epochs(self):
        train, position, main = self.config.train, self.position, self.placement.main
        total_batches = len(self.parts.train_loader)
        writer = ScalarWriter(os.path.join(self.output_dir, "vdl"), enabled=main and train.vdl,
                              keep_until_step=position.global_step)
        progress = Progress(total_batches * train.epochs, position.epoch * total_batches + position.batch_in_epoch,
                            train.log_interval, bar=self.progress_bar and main)
        restore_signals = self._install_signal_handlers()
        start = time.time()
        metrics = {}
        try:
            while position.epoch < train.epochs:
                self.phase = "train"
                epoch_start = time.time()
                finished, images = self._train_one_epoch(progress, writer)
                if not finished:
                    return self._summary(start, interrupted=True, metrics=metrics)
                self.phase = "eval"
                metrics = self._end_epoch(writer, images, time.time() - epoch_start)
        except MemoryError as error:
            raise self._out_of_memory(error) from error
        except RuntimeError as error:
            if self.placement.distributed and stopping.is_communication_error(error):
                stopping.exit_for_lost_peer(self.placement.rank, error, self._last_checkpoint_words())
            raise
        finally:
            progress.close()
            writer.close()
            restore_signals()
        return self._summary(start, interrupted=False, metrics=metrics)

    def _out_of_memory(self, error):
        """Paddle's allocator failure (a MemoryError, "ResourceExhausted") turned into advice."""
        train, place = self.config.train, self.placement.place
        if self.phase == "eval":
            return TrainingError(f"out of memory on {place} while evaluating with eval.batch_size "
                                 f"{self.config.eval.batch_size}: lower it, e.g. -o eval.batch_size="
                                 f"{max(1, self.config.eval.batch_size // 2)}")
        half = max(1, train.batch_size // 2)
        return TrainingError(
            f"out of memory on {place} at train.batch_size {train.batch_size}: use -o train.batch_size={half} "
            f"-o train.accumulate_steps={train.accumulate_steps * 2} (the same effective batch through gradient "
            f"accumulation){', or train.amp=bf16' if place.startswith('gpu') and not self.parts.amp_dtype else ''}")

    def _last_checkpoint_words(self):
        """Where a stopped run continues from, for the line that says it stopped."""
        if not self.placement.main:
            return "rank 0 names the last whole checkpoint"
        last = os.path.join(self.checkpoint_dir, "last.pdckpt")
        if os.path.exists(last):
            return f"{last} is the last whole checkpoint: continue with -o train.resume=auto"
        return "no checkpoint had been written yet"

    def _install_signal_handlers(self):
        """Single process: the first Ctrl-C/SIGTERM finishes the step and saves, a second stops at
        once. Several processes: a signal stops at once with one line (engine/stopping.py).
        Returns the function that restores what was there before."""
        if self.placement.distributed:
            return stopping.install(self.placement.rank, self._last_checkpoint_words)
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
        """Train the rest of the current epoch; returns (False when a signal stopped it, the
        number of images it trained on)."""
        train, parts, position = self.config.train, self.parts, self.position
        epoch, total_batches = position.epoch, len(parts.train_loader)
        parts.model.train()
        if self.config.model.freeze == "backbone":  # a linear probe: the frozen features, no dropout/drop-path
            keep_backbone_in_eval(parts.vit)
        parts.train_loader.set_epoch(epoch, start_batch=position.batch_in_epoch)
        running_loss, running_count, interval_steps = paddle.zeros([], dtype="float64"), 0, 0
        epoch_images, interval_start, interval_images = 0, time.time(), 0
        for images, labels in parts.train_loader:
            batch = position.batch_in_epoch
            if train.deterministic:
                paddle.seed(step_seed(train.seed, epoch, batch, self.placement.rank))
            images, targets = self.targets(images, labels, epoch, batch)  # [B, 3, S, S]; [B] or [B, K]
            # the teacher's cost is timed on one step per log interval: a device sync around those only
            timed = parts.distiller is not None and parts.distiller.teacher is not None and (
                (batch + 1) % train.log_interval == 0 or batch + 1 == total_batches)
            step_started = parts.distiller.share.now() if timed else None
            loss = self.forward_loss(images, targets, timed)  # the teacher sees the mixed images
            # with fp16 the loss scaler checks the gradients; otherwise one scalar read per step
            finite = self._loss_is_finite(loss) if train.check_finite and not parts.scaler else True
            at_update = (batch + 1) % train.accumulate_steps == 0 or batch + 1 == total_batches
            if finite:
                # ranks average their gradients once per update, at its last micro-step, not at each
                with self._gradient_sync(at_update):
                    step.backward(loss, parts.scaler, train.accumulate_steps, parts.batch_threads)
                running_loss += loss.detach().astype("float64")  # summed on the device, read at log time
                running_count += 1
            else:
                self.window_not_finite = True
                logger.warning("step %d (epoch %d, batch %d): the loss is %s; this update is skipped",
                               position.global_step + 1, epoch + 1, batch + 1, float(loss))
            position.batch_in_epoch += 1
            interval_steps += 1
            if at_update:
                self.optimizer_step()
            if timed:
                parts.distiller.share.end_step(step_started)
            interval_images += images.shape[0]
            epoch_images += images.shape[0]
            if (at_update and train.checkpoint_steps and position.global_step % train.checkpoint_steps == 0
                    and position.batch_in_epoch < total_batches):  # (the epoch's end writes one anyway)
                self._fold_running_loss(running_loss, running_count)
                running_loss, running_count = paddle.zeros([], dtype="float64"), 0
                self.save("last.pdckpt")
            if interval_steps == train.log_interval or position.batch_in_epoch == total_batches:
                loss_sum = self._fold_running_loss(running_loss, running_count)
                mean_loss = loss_sum / max(running_count, 1)
                images_per_sec = interval_images / max(time.time() - interval_start, 1e-9)
                lr = parts.optimizer.get_lr()
                progress.update(interval_steps, epoch, train.epochs, position.batch_in_epoch, total_batches,
                                mean_loss, lr, images_per_sec)
                writer.add("train/loss", mean_loss, position.global_step)
                writer.add("train/lr", lr, position.global_step)
                writer.add("train/images_per_sec", images_per_sec, position.global_step)
                running_loss, running_count, interval_steps = paddle.zeros([], dtype="float64"), 0, 0
                interval_start, interval_images = time.time(), 0
            if self.stop_requested and at_update:
                self._fold_running_loss(running_loss, running_count)  # steps not yet logged still count
                self.save("last.pdckpt")
                logger.warning("stopped at epoch %d, batch %d/%d; resume with -o train.resume=auto "
                               "(same output_dir)", epoch + 1, position.batch_in_epoch, total_batches)
                return False, epoch_images
        return True, epoch_images

    def _loss_is_finite(self, loss):
        """One host read per step. Several processes agree first (the minimum over the ranks), so
        they skip an update together: one rank skipping its backward alone would leave the others
        waiting in the gradient all-reduce."""
        finite = paddle.isfinite(loss).astype("int32")
        if self.placement.distributed:
            paddle.distributed.all_reduce(finite, op=paddle.distributed.ReduceOp.MIN)
        return bool(finite)

    def _fold_running_loss(self, running_loss, running_count):
        """Add the loss summed on the device since the last fold (`running_count` steps of this
        rank) to the epoch's, as the mean over every rank; returns that sum. The host reads the
        loss here (log intervals, checkpoints), not every step."""
        if self.placement.distributed:  # the mean over every rank's batches
            paddle.distributed.all_reduce(running_loss)
            running_loss = running_loss / self.placement.world_size
        loss_sum = float(running_loss)
        if not math.isfinite(loss_sum):  # only reachable with train.check_finite off
            self.position.bad_steps = self.config.train.max_bad_steps
            raise self._diverged()
        self.position.epoch_loss_sum += loss_sum
        self.position.epoch_loss_count += running_count
        return loss_sum

    def _end_epoch(self, writer, images, seconds):
        """Evaluate (every eval.interval epochs), save, log and record the epoch just trained:
        `images` in `seconds`."""
        train, parts, position = self.config.train, self.parts, self.position
        epoch = position.epoch
        record = {
            "epoch": epoch + 1,
            "step": position.global_step,
            "train_loss": position.epoch_loss_sum / max(position.epoch_loss_count, 1),
            "lr": parts.optimizer.get_lr(),
            "images_per_sec": images / max(seconds, 1e-9),
            "epoch_seconds": seconds,
        }
        position.epoch_loss_sum, position.epoch_loss_count = 0.0, 0
        skipped = parts.train_set.num_bad_images + parts.val_set.num_bad_images
        if skipped:
            record["skipped_images"] = skipped  # unreadable files passed over (data.on_bad_image: skip)
        if parts.distiller is not None and parts.distiller.share.share() is not None:
            record["teacher_forward_share"] = parts.distiller.share.share()  # of the training step, timed steps
            parts.distiller.share.reset()
        last_epoch = epoch + 1 == train.epochs
        if (epoch + 1) % self.config.eval.interval == 0 or last_epoch:
            record.update(self._evaluation(writer, epoch))
        fewshot_interval = self.config.eval.fewshot_interval
        if fewshot_interval and ((epoch + 1) % fewshot_interval == 0 or last_epoch):
            record.update(self._fewshot_evaluation(writer))
        position.epoch, position.batch_in_epoch = epoch + 1, 0
        record["best_top1"] = position.best_top1
        position.history.append(record)  # the checkpoint carries the records: a kill between it and
        self.save("last.pdckpt")  # metrics.jsonl loses nothing, the resumed run rewrites the file
        self.save_weights("last")
        if train.save_interval and (epoch + 1) % train.save_interval == 0:
            self.save(f"epoch_{epoch + 1:04d}.pdckpt")
            if self.placement.main:
                ckpt.prune_checkpoints(self.checkpoint_dir, train.keep_last)
        if self.placement.main:
            path = os.path.join(self.output_dir, "metrics.jsonl")
            with _reported_write_errors(path, "metrics"):
                write_metrics(path, position.history)
            described = " ".join(f"{key} {value:.4f}" if isinstance(value, float) else f"{key} {value}"
                                 for key, value in record.items())
            logger.info("%s (%s)", described, format_duration(seconds))
            check_log_files()
        return record

    def _evaluation(self, writer, epoch):
        """Evaluate the model (and its EMA) on the validation split after `epoch`, log it, and keep
        the best weights; returns the record's val_* entries."""
        parts, position = self.parts, self.position
        result = evaluate(parts.model, parts.val_loader, parts.num_classes, self.autocast)
        entries = dict(val_top1=result["top1"], val_top5=result["top5"], val_loss=result["loss"])
        if parts.ema:
            original = parts.ema.apply_to(parts.vit)
            ema_result = evaluate(parts.model, parts.val_loader, parts.num_classes, self.autocast)
            parts.vit.set_state_dict(original)
            entries.update(val_ema_top1=ema_result["top1"], val_ema_top5=ema_result["top5"])
        for key in ("top1", "top5", "loss"):
            writer.add(f"val/{key}", result[key], position.global_step)
        interval = self.config.eval.attention_map_interval
        if interval and (epoch + 1) % interval == 0 and self.placement.main:
            image = attention_overlay_image(parts.vit, parts.val_set[0][0], self.config.data.mean,
                                            self.config.data.std)
            writer.add_image("val/attention", image, epoch + 1)
        if result["top1"] > position.best_top1:
            position.best_top1 = result["top1"]
            self.save_weights("best")
        return entries

    def _fewshot_evaluation(self, writer):
        """The few-shot linear accuracy of the frozen representation (engine/fewshot_eval.py: the
        training split unaugmented is the pool, the validation split the test; every rank
        gathers the features): {"fewshot_<k>shot": mean over the seeds}, also logged to VisualDL
        as fewshot/<k>shot. It draws from no generator of the run, so resuming stays exact."""
        settings, parts = self.config.eval, self.parts
        if self.fewshot_pool_loader is None:
            self.fewshot_pool_loader = fewshot_eval.pool_loader(parts.train_set, parts.val_set, settings.batch_size,
                                                                self.config.data.num_workers, self.config.train.seed)
        result = fewshot_eval.fewshot_metrics(parts.vit, self.fewshot_pool_loader, parts.val_loader,
                                              parts.num_classes, settings.fewshot_shots, settings.fewshot_l2_reg,
                                              settings.fewshot_seeds, autocast=self.autocast)
        for k, mean in result["mean"].items():
            writer.add(f"fewshot/{k}shot", mean, self.position.global_step)
        return {f"fewshot_{k}shot": mean for k, mean in result["mean"].items()}

    def _summary(self, start, interrupted, metrics):
        position = self.position
        return {"output_dir": self.output_dir, "epochs_done": position.epoch, "global_step": position.global_step,
                "best_top1": position.best_top1, "interrupted": interrupted, "seconds": time.time() - start,
                "last_epoch": metrics}
