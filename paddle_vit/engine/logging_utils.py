"""What a run reports: progress (bar or plain lines), VisualDL scalars, metrics.jsonl."""
import json
import logging
import os
import time

logger = logging.getLogger("paddle_vit")


def format_duration(seconds):
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours:d}:{minutes:02d}:{seconds:02d}"


class Progress:
    """Per-step progress: a tqdm bar when `bar` (a terminal), else a log line every `interval`
    steps. Shows loss, lr, images/s and the ETA of the whole run."""

    def __init__(self, total_steps, done_steps, interval, bar=False):
        self.total_steps = total_steps
        self.done_steps = done_steps
        self.interval = interval
        self.bar = None
        if bar:
            from tqdm import tqdm
            self.bar = tqdm(total=total_steps, initial=done_steps, dynamic_ncols=True, unit="step")
        self.start_time = time.time()
        self.start_steps = done_steps

    def update(self, steps, epoch, epochs, step_in_epoch, steps_per_epoch, loss, lr, images_per_sec):
        """Record `steps` more finished steps and show the latest numbers."""
        self.done_steps += steps
        elapsed = time.time() - self.start_time
        rate = (self.done_steps - self.start_steps) / max(elapsed, 1e-9)
        eta = (self.total_steps - self.done_steps) / max(rate, 1e-9)
        if self.bar is not None:
            self.bar.set_description(f"epoch {epoch + 1}/{epochs}")
            self.bar.set_postfix_str(f"loss {loss:.4f} lr {lr:.2e} {images_per_sec:.1f} img/s", refresh=False)
            self.bar.update(steps)
        else:
            logger.info("epoch %d/%d step %d/%d loss %.4f lr %.3e %.1f img/s eta %s", epoch + 1, epochs,
                        step_in_epoch, steps_per_epoch, loss, lr, images_per_sec, format_duration(eta))

    def close(self):
        if self.bar is not None:
            self.bar.close()


class ScalarWriter:
    """VisualDL scalars (and images) under `<output_dir>/vdl` (`visualdl --logdir <output_dir>/vdl`)."""

    def __init__(self, folder, enabled=True):
        self.writer = None
        if enabled:
            from visualdl import LogWriter
            self.writer = LogWriter(logdir=folder)

    def add(self, tag, value, step):
        if self.writer is not None:
            self.writer.add_scalar(tag=tag, value=float(value), step=int(step))

    def add_image(self, tag, image, step):
        """`image`: uint8 [H, W, 3]."""
        if self.writer is not None:
            self.writer.add_image(tag=tag, img=image, step=int(step))

    def close(self):
        if self.writer is not None:
            self.writer.close()


def append_metrics(path, record):
    """Append one JSON object (one epoch) to metrics.jsonl."""
    with open(path, "a", encoding="utf-8") as stream:
        stream.write(json.dumps(record, sort_keys=False) + "\n")
        stream.flush()
        os.fsync(stream.fileno())
