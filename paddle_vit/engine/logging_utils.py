"""What a run reports: log lines (terminal and train.log), progress (bar or plain lines), VisualDL
scalars, metrics.jsonl."""
import json
import logging
import os
import struct
import sys
import time

from tqdm import tqdm
from visualdl.component.base_component import image as image_record
from visualdl.component.base_component import scalar
from visualdl.proto import record_pb2

from ..errors import TrainingError
from .. import fileio

logger = logging.getLogger("paddle_vit")


_FORMATTER = logging.Formatter("%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")


class _LevelPrefix(logging.Formatter):
    def format(self, record):
        return f"{record.levelname.lower()}: {record.getMessage()}"


class _KeepRecords(logging.Handler):
    """Holds the lines logged before the log file may be created (see `attach_log_file`)."""

    def __init__(self):
        super().__init__()
        self.records = []

    def emit(self, record):
        self.records.append(record)


class _Stream(logging.StreamHandler):
    """Writes to whatever `sys.stdout` (or `sys.stderr`) is at the time of each line."""

    def __init__(self, name):
        self.name_of_stream = name
        super().__init__()

    @property
    def stream(self):
        return getattr(sys, self.name_of_stream)

    @stream.setter
    def stream(self, value):
        pass


def setup_logging(level=logging.INFO, to="stdout"):
    """Send the library's log lines (the "paddle_vit" logger) to the terminal, and return it.

    to="stdout": ``HH:MM:SS LEVEL message`` lines, kept for a log file attached later
    (`attach_log_file`); to="stderr": ``level: message`` lines, so that stdout holds only what
    the command prints (predict's predictions)."""
    logger = logging.getLogger("paddle_vit")
    logger.setLevel(level)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    console = _Stream(to)
    console.setFormatter(_FORMATTER if to == "stdout" else _LevelPrefix())
    logger.addHandler(console)
    if to == "stdout":
        logger.addHandler(_KeepRecords())
    logger.propagate = False
    return logger


def attach_log_file(path):
    """Also write the log to `path`, starting with the lines logged so far. Called once the run
    is known to be valid, so that a rejected config leaves no output folder behind."""
    logger = logging.getLogger("paddle_vit")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    file_handler = LogFileHandler(path)
    file_handler.setFormatter(_FORMATTER)
    for handler in [h for h in logger.handlers if isinstance(h, _KeepRecords)]:
        for record in handler.records:
            file_handler.handle(record)
        logger.removeHandler(handler)
    logger.addHandler(file_handler)


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
    """VisualDL scalars (and images) of a run in ``<run>/vdl/vdlrecords.paddle_vit.log``
    (``visualdl --logdir <run>/vdl``), written by this process itself, record by record.

    Why not VisualDL's LogWriter (docs/design.md): it starts a new file at every start (VisualDL
    shows only the newest file of a folder, so a resumed run showed only its resumed part), a
    file named for it is opened with mode "wb", truncating what the run had logged, and its
    writer thread catches a write error, prints a warning and drops the records, so a full disk
    would lose the curve without a word. Here one file is appended to,
    each record flushed at once, a write error is a TrainingError naming the file, and a resumed
    run first drops what the killed one logged after its checkpoint (`keep_until_step`) and any
    record cut short: the curve comes out as an unbroken run's. The records are VisualDL's own
    (length-prefixed `record_pb2.Record`s built by its components)."""

    FILE = "vdlrecords.paddle_vit.log"

    def __init__(self, folder, enabled=True, keep_until_step=None):
        self.stream, self.path = None, os.path.join(folder, self.FILE)
        if not enabled:
            return
        try:
            os.makedirs(folder, exist_ok=True)
            if os.path.exists(self.path):
                self._keep(keep_until_step)
            self.stream = open(self.path, "ab")
        except OSError as error:
            raise self._error(error) from error

    def _error(self, error):
        return TrainingError(f"cannot write the VisualDL log {self.path}: {error.strerror or error}")

    def _keep(self, keep_until_step):
        """Rewrite the file with its complete records up to `keep_until_step` (all when None)."""
        with open(self.path, "rb") as stream:
            data = stream.read()
        kept, offset = [], 0
        while offset + 8 <= len(data):
            (length,) = struct.unpack("<Q", data[offset:offset + 8])
            if offset + 8 + length > len(data):
                break  # cut short by a kill
            chunk = data[offset:offset + 8 + length]
            record = record_pb2.Record()
            try:
                record.ParseFromString(chunk[8:])
            except Exception:  # protobuf's DecodeError: a damaged tail
                break
            if keep_until_step is None or all(value.id <= keep_until_step for value in record.values):
                kept.append(chunk)
            offset += 8 + length

        def write(temporary):
            with open(temporary, "wb") as stream:
                stream.write(b"".join(kept))
        fileio.atomic_write(self.path, write)

    def _write(self, record):
        if self.stream is None:
            return
        data = record.SerializeToString()
        try:
            self.stream.write(struct.pack("<Q", len(data)) + data)
            self.stream.flush()
        except OSError as error:
            raise self._error(error) from error

    def add(self, tag, value, step):
        if self.stream is not None:
            self._write(scalar(tag=tag, value=float(value), step=int(step), walltime=round(time.time() * 1000)))

    def add_image(self, tag, image, step):
        """`image`: uint8 [H, W, 3]."""
        if self.stream is not None:
            self._write(image_record(tag=tag, image_array=image, step=int(step), walltime=round(time.time() * 1000)))

    def close(self):
        if self.stream is not None:
            try:
                self.stream.close()
            except OSError:
                pass
            self.stream = None


class LogFileHandler(logging.FileHandler):
    """The run's train.log. logging swallows a write error (it prints "--- Logging error ---" and
    goes on, the file silently cut); this handler keeps the first one, writes nothing more, and
    `check_log_files` turns it into a TrainingError naming the file."""

    def __init__(self, path):
        super().__init__(path, encoding="utf-8")
        self.failure = None

    def emit(self, record):
        if self.failure is None:
            super().emit(record)
            if self.stream is not None and self.failure is None:
                try:
                    self.stream.flush()
                except OSError as error:
                    self.failure = error

    def handleError(self, record):
        self.failure = self.failure or sys.exc_info()[1]


def check_log_files(logger_name="paddle_vit"):
    """Raise TrainingError for a log file that could not be written (a full disk)."""
    for handler in logging.getLogger(logger_name).handlers:
        failure = getattr(handler, "failure", None)
        if failure is not None:
            reason = getattr(failure, "strerror", None) or str(failure)
            raise TrainingError(f"cannot write the log {handler.baseFilename}: {reason}")


def write_metrics(path, records):
    """metrics.jsonl: one JSON object per finished epoch, rewritten whole and atomically from the
    run's records (which the checkpoint carries), so that a kill or a full disk at any moment
    leaves a file that matches a checkpoint and a resumed run's file equals an unbroken run's."""

    def write(temporary):
        with open(temporary, "w", encoding="utf-8") as stream:
            for record in records:
                stream.write(json.dumps(record, sort_keys=False) + "\n")
    fileio.atomic_write(path, write)
