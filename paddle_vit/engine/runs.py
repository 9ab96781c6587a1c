"""Where a training run writes, so that no run ever overwrites or mixes with another.

The policy (timm's and Lightning's): every run gets a folder of its own.
- ``train.output_dir`` unset: ``output/<recipe>/run-NNN``, numbered from 001, the next free
  number taken atomically (two runs started at once get two folders), and ``output/<recipe>/latest``
  pointing at the newest (a relative symlink, replaced atomically). ``train.resume=auto``
  continues the run ``latest`` points at, in its own folder.
- ``train.output_dir=DIR``: DIR is the run folder. A DIR that holds a run already is refused
  with the command that continues it (``train.resume=auto``) unless it is resumed.
- ``train.resume=PATH`` of a checkpoint inside a run folder (``.../checkpoints/NAME.pdckpt``)
  continues that run in that folder; a checkpoint elsewhere starts a new run from it.
A lock (``<run>/.lock``, an advisory ``flock`` the kernel releases when the process ends, however
it ends) stops two live processes from writing one run.
"""
import dataclasses
import errno
import fcntl
import glob
import json
import os
import re
import time

from ..checkpoint import find_latest_checkpoint, remove_unfinished_writes, run_folder_of_checkpoint
from ..errors import ConfigError, TrainingError
from .logging_utils import write_metrics

LATEST = "latest"
LOCK = ".lock"
_RUN = re.compile(r"run-(\d{3,})")
# what makes a folder hold a run already
RUN_FILES = ("config.yaml", "metrics.jsonl", "train.log")


def holds_a_run(folder):
    """True when `folder` has the files of a training run in it."""
    return (any(os.path.exists(os.path.join(folder, name)) for name in RUN_FILES)
            or bool(glob.glob(os.path.join(folder, "checkpoints", "*.pdckpt"))))


def latest_run(base):
    """The run folder `base/latest` points at, or None."""
    pointer = os.path.join(base, LATEST)
    if os.path.islink(pointer) or os.path.isdir(pointer):
        target = os.path.realpath(pointer)
        return target if os.path.isdir(target) else None
    return None


def new_run_folder(base):
    """Create and return ``base/run-NNN`` with the next free number; point ``base/latest`` at it."""
    try:
        os.makedirs(base, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"cannot create the output folder {base}: {error.strerror or error}") from None
    if not os.path.isdir(base):
        raise ConfigError(f"the output folder {base} is not a folder")
    numbers = [int(match.group(1)) for name in os.listdir(base) if (match := _RUN.fullmatch(name))]
    number = max(numbers, default=0) + 1
    while True:
        folder = os.path.join(base, f"run-{number:03d}")
        try:
            os.mkdir(folder)  # atomic: a concurrent run that took this number makes us take the next
            break
        except FileExistsError:
            number += 1
        except OSError as error:
            raise ConfigError(f"cannot create the run folder {folder}: {error.strerror or error}") from None
    point_latest(base, folder)
    return folder


def point_latest(base, folder):
    """Make ``base/latest`` point at `folder`, atomically (a new symlink renamed over the old)."""
    pointer = os.path.join(base, LATEST)
    temporary = os.path.join(base, f".{LATEST}.{os.getpid()}.tmp")
    try:
        if os.path.lexists(temporary):
            os.remove(temporary)
        os.symlink(os.path.basename(folder), temporary)
        os.replace(temporary, pointer)
    except OSError:  # a file system without symlinks: the run folder is still whole and named
        if os.path.lexists(temporary):
            os.remove(temporary)


def plan_run(config, main=True):
    """(run folder or None, checkpoint to resume or None) for `config`; None for the folder means
    a new ``run-NNN`` is due (`new_run_folder`), created only once the run is known to start, so
    that a refused resume leaves no empty folder. The main process refuses a folder that holds a
    run the config does not resume (ConfigError); the other ranks of a multi-process run write
    nothing and only follow (the same checkpoint to resume)."""
    train = config.train
    explicit, resume, base = train.output_dir, train.resume, config.output_dir
    if explicit:
        if os.path.exists(explicit) and not os.path.isdir(explicit):
            raise ConfigError(f"train.output_dir {explicit} is a file; expected a folder for the run")
        if main and resume is None and holds_a_run(explicit):
            raise ConfigError(f"train.output_dir {explicit} holds a run already{_run_progress(explicit)}: continue "
                              f"it with -o train.resume=auto, or give another train.output_dir (or leave it unset: "
                              f"each run then gets output/<recipe>/run-NNN)")
        return explicit, _checkpoint_to_resume(resume, explicit)
    if resume == "auto":
        folder = latest_run(base)
        if folder is not None:
            return folder, _checkpoint_to_resume("auto", folder)
    elif resume is not None:
        folder = run_folder_of_checkpoint(resume)
        if folder is not None:
            return folder, resume
    checkpoint = resume if resume not in (None, "auto") else None
    return (None if main else base), checkpoint  # only the main process creates and writes the folder


def _checkpoint_to_resume(resume, folder):
    if resume is None:
        return None
    if resume != "auto":
        return resume
    checkpoint = find_latest_checkpoint(os.path.join(folder, "checkpoints"))
    progress = _run_progress(folder) if checkpoint is None else ""
    if progress:  # an epoch is recorded only after its checkpoint
        raise ConfigError(f"train.resume=auto: {folder} holds a run{progress} but no checkpoint "
                          f"to continue it from (checkpoints/*.pdckpt are gone); starting afresh would write "
                          f"over it: give another train.output_dir, or train.resume=PATH of a checkpoint")
    return checkpoint


def _run_progress(folder):
    try:
        with open(os.path.join(folder, "metrics.jsonl"), encoding="utf-8") as stream:
            lines = [line for line in stream if line.strip()]
        return f" ({len(lines)} epoch{'s' if len(lines) != 1 else ''}, the last {json.loads(lines[-1])['epoch']})" \
            if lines else ""
    except (OSError, ValueError, KeyError, IndexError):
        return ""


def open_run_folder(folder, config, history):
    """Make the main process's run folder ready to write, and lock it: `folder`, or a new
    run-NNN when None; `checkpoints/` without the leftovers of writes a killed run never
    finished; config.yaml naming the folder; metrics.jsonl holding `history` (the resumed
    epochs' records, or none). Returns (the folder, its RunLock)."""
    lock = None
    try:
        output_dir = folder or new_run_folder(config.output_dir)
        os.makedirs(output_dir, exist_ok=True)
        lock = RunLock(output_dir).acquire()
        checkpoint_dir = os.path.join(output_dir, "checkpoints")
        os.makedirs(checkpoint_dir, exist_ok=True)
        remove_unfinished_writes(checkpoint_dir)
        run_config = dataclasses.replace(config, train=dataclasses.replace(config.train, output_dir=output_dir))
        run_config.save(os.path.join(output_dir, "config.yaml"))
        write_metrics(os.path.join(output_dir, "metrics.jsonl"), history)
    except BaseException as error:
        if lock is not None:
            lock.release()
        if isinstance(error, OSError):
            raise ConfigError(f"train.output_dir {folder or config.output_dir} is not writable: "
                              f"{error.strerror or error}") from error
        raise
    return output_dir, lock


class RunLock:
    """An exclusive advisory lock on ``<folder>/.lock`` for the life of a training process."""

    def __init__(self, folder):
        self.path = os.path.join(folder, LOCK)
        self.stream = None

    def acquire(self):
        try:
            stream = open(self.path, "a+", encoding="utf-8")
        except OSError as error:
            raise ConfigError(f"cannot write in the run folder {os.path.dirname(self.path)}: "
                              f"{error.strerror or error}") from None
        try:
            fcntl.flock(stream.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            stream.seek(0)
            holder = stream.read().strip() or "another process"
            stream.close()
            raise TrainingError(f"the run folder {os.path.dirname(self.path)} is in use by another training run "
                                f"({holder}); wait for it, or give this one another train.output_dir") from None
        stream.seek(0)
        stream.truncate()
        stream.write(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        stream.flush()
        self.stream = stream
        return self

    def release(self):
        if self.stream is not None:
            self.stream.close()  # closing the file drops the flock
            self.stream = None
