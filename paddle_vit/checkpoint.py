"""Training checkpoints: everything needed to continue a run exactly, written atomically.

Layout under `<output_dir>/checkpoints/`:
- `last.pdckpt`: the newest resumable state (model, optimizer, schedule, loss scaler, EMA,
  where the run stands: a key for each field of `engine.position.TrainingPosition`, config,
  class names);
- `epoch_NNNN.pdckpt`: kept every `train.save_interval` epochs, the newest `train.keep_last`;
- `best.pdparams` / `last.pdparams` (+ `*_ema.pdparams`): model weights alone, for
  `tools/eval.py --weights` and `paddle_vit.load_pretrained`.
"""
import glob
import logging
import os

import paddle

from .errors import WeightsError
from . import fileio

logger = logging.getLogger("paddle_vit")
CHECKPOINT_FORMAT = "paddle_vit.checkpoint/1"
# what a checkpoint must hold to be resumed; older paddle-vit versions wrote fewer
RESUME_KEYS = ("model", "optimizer", "scheduler", "epoch", "global_step", "model_config", "config")
RESUME_CONFIG_KEYS = (("data", "dataset"), ("train", "batch_size"))  # read to check it continues the same run


def save_object(obj, path):
    """paddle.save `obj` to `path` atomically."""
    fileio.atomic_write(path, lambda temporary: paddle.save(obj, temporary))


def save_checkpoint(state, path):
    state = dict(state, format=CHECKPOINT_FORMAT)
    save_object(state, path)


def load_checkpoint(path):
    """Read a `.pdckpt`; a missing, truncated or foreign file is a WeightsError naming it."""
    if not os.path.isfile(path):
        raise WeightsError(f"checkpoint {path} {_why_not_a_file(path)}")
    try:
        state = paddle.load(path)
    except Exception as error:  # paddle/pickle raise many kinds for a damaged file
        raise WeightsError(f"checkpoint {path} cannot be read (truncated or corrupt?): "
                           f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}") from error
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise WeightsError(f"{path} is not a paddle_vit training checkpoint (.pdckpt written by tools/train.py)")
    return state


def _why_not_a_file(path):
    """The end of the sentence "checkpoint PATH ..." for a path that is no regular file."""
    if os.path.isdir(path):
        inside = os.path.join(path, "checkpoints", "last.pdckpt")
        return ("is a folder; expected a .pdckpt file" + (f" such as {inside}" if os.path.isfile(inside) else ""))
    if os.path.lexists(path):
        return f"is not a regular file ({fileio.kind_of_special_file(path)})"
    return "does not exist"


def check_resumable(state, path):
    """Refuse, naming what it lacks, a checkpoint written before it recorded all a resume needs."""
    missing = [key for key in RESUME_KEYS if key not in state]
    config = state.get("config")
    if isinstance(config, dict):
        missing += [f"config.{section}.{key}" for section, key in RESUME_CONFIG_KEYS
                    if not isinstance(config.get(section), dict) or key not in config[section]]
    if missing:
        raise WeightsError(f"checkpoint {path} was written by an older paddle-vit and lacks {', '.join(missing)}: "
                           f"it cannot be resumed; start a new run from its weights with -o model.pretrained={path}")


def run_folder_of_checkpoint(path):
    """The run folder a checkpoint lives in (``<run>/checkpoints/x.pdckpt``), or None."""
    checkpoints = os.path.dirname(os.path.abspath(path))
    if os.path.basename(checkpoints) != "checkpoints":
        return None
    run = os.path.dirname(checkpoints)
    return run if os.path.isfile(os.path.join(run, "config.yaml")) else None


def find_latest_checkpoint(folder):
    """The resumable `.pdckpt` in `folder` with the highest global step, or None when it holds
    none. Unreadable ones (e.g. cut short by a crash) and ones of an older format are skipped
    with a warning while another can be resumed; when none can, the first one's problem is the
    error (a WeightsError): starting afresh would write over the run they belong to."""
    best_path, best_step, problems = None, -1, []
    for path in sorted(glob.glob(os.path.join(folder, "*.pdckpt"))):
        try:
            state = load_checkpoint(path)
            check_resumable(state, path)
        except WeightsError as error:
            problems.append(error)
            continue
        if state["global_step"] > best_step:
            best_path, best_step = path, state["global_step"]
    if best_path is None and problems:
        if len(problems) == 1:
            raise problems[0]
        raise WeightsError(f"none of the {len(problems)} checkpoints in {folder} can be resumed; the first: "
                           f"{problems[0]}")
    for problem in problems:
        logger.warning("skipping %s", problem)
    return best_path


def remove_unfinished_writes(folder):
    """Delete the temporary files of writes that a killed run never finished."""
    for path in glob.glob(os.path.join(folder, ".*.tmp")):
        logger.info("removing %s, left by a write that did not finish", path)
        os.remove(path)


def prune_checkpoints(folder, keep_last):
    """Keep only the newest `keep_last` `epoch_NNNN.pdckpt` files."""
    periodic = sorted(glob.glob(os.path.join(folder, "epoch_*.pdckpt")))
    for path in periodic[:-keep_last]:
        os.remove(path)


def _rename_optimizer_state(state, renames):
    """Rename the per-parameter entries of a Paddle optimizer state dict.

    Paddle keys accumulators as `<Tensor.name>_<accumulator>_<n>` (and master weights by
    `Tensor.name`), and `Tensor.name`s are counters (`linear_12.w_0`) that differ between
    processes and model instances. `renames` maps old to new parameter names.
    """
    ordered = sorted(renames, key=len, reverse=True)  # longest first: linear_11.w_0 before linear_1.w_0

    def rename(key):
        for old in ordered:
            if key == old or key.startswith(old + "_"):
                return renames[old] + key[len(old):]
        return key

    portable = {}
    for key, value in state.items():
        if key == "master_weights" and isinstance(value, dict):
            portable[key] = {rename(name): weight for name, weight in value.items()}
        elif key == "LR_Scheduler":
            portable[key] = value
        else:
            portable[rename(key)] = value
    return portable


def portable_optimizer_state(optimizer, model):
    """The optimizer state with parameters named by their place in `model` (`encoder.layers.0...`)."""
    renames = {parameter.name: f"@{name}" for name, parameter in model.named_parameters()}
    return _rename_optimizer_state(optimizer.state_dict(), renames)


def restore_optimizer_state(optimizer, model, portable):
    """Load a `portable_optimizer_state` into `optimizer` of (a new instance of) `model`."""
    renames = {f"@{name}": parameter.name for name, parameter in model.named_parameters()}
    optimizer.set_state_dict(_rename_optimizer_state(portable, renames))
