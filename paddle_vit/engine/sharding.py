"""Sharded optimizer state (ZeRO 1/2) through Paddle's `group_sharded_parallel`, and its
checkpoints gathered into the same single portable file as an unsharded run's.

With `train.sharding: os` or `os_g`, each rank keeps the AdamW moments (and, for os_g, the
reduced gradients) of its own share of the parameters only; Paddle 3.3 implements "os" as
"os_g". The parameters themselves stay whole on every rank, so the model's state_dict is the
usual one. A checkpoint gathers every rank's share of the optimizer state (each parameter's
entries come from exactly one rank) into one portable state, which an unsharded run, or a
sharded run on another number of ranks, loads as it loads any other: each optimizer takes
the entries of the parameters it holds.
"""
import numpy as np
import paddle
from paddle.distributed.sharding import group_sharded_parallel

from ..errors import ConfigError
from ..checkpoint import portable_optimizer_state

SUPPORTED_DEVICES = ("gpu", "xpu")  # group_sharded_parallel asserts one of these (or a custom device)


def check_supported(level, place, distributed):
    """True when `level` shards this run; a ConfigError in one line where Paddle cannot."""
    if level is None:
        return False
    device = place.split(":")[0]
    if device not in SUPPORTED_DEVICES and device not in paddle.device.get_all_custom_device_type():
        raise ConfigError(f"train.sharding={level} needs GPUs or XPUs: Paddle {paddle.__version__}'s "
                          f"group_sharded_parallel supports no {device} (nor gloo); use -o train.sharding=null here")
    if not distributed:
        raise ConfigError(f"train.sharding={level} splits the optimizer state over the processes of a multi-GPU run; "
                          f"this is one process: start it with python -m paddle.distributed.launch --gpus 0,1,...")
    if level == "p_g_os":
        raise ConfigError("train.sharding=p_g_os (ZeRO 3) is not supported yet: its sharded parameters are not "
                          "gathered into the portable checkpoint format; use os_g (the parameters stay whole)")
    return True


def wrap(model, optimizer, scaler, level):
    """(model, optimizer, scaler) wrapped by Paddle for `level`."""
    return group_sharded_parallel(model, optimizer, level, scaler=scaler)


def merge_rank_states(states):
    """One portable optimizer state from the ranks' shares. Per-parameter entries must come from
    one rank each; entries every rank holds (the learning-rate schedule) must agree."""
    merged = {}
    for rank, state in enumerate(states):
        for key, value in state.items():
            if key == "master_weights":
                merged.setdefault(key, {}).update(value)
            elif key in merged and not _equal(merged[key], value):
                raise ValueError(f"optimizer state entry {key} differs between ranks (rank {rank})")
            else:
                merged[key] = value
    return merged


def _equal(a, b):
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return np.array_equal(np.asarray(a), np.asarray(b))


def _to_numpy(value):
    if isinstance(value, paddle.Tensor):
        return value.numpy()
    if isinstance(value, dict):
        return {key: _to_numpy(item) for key, item in value.items()}
    return value


def gathered_optimizer_state(optimizer, model):
    """Every rank's share of the optimizer state, merged (a collective: all ranks call it)."""
    shares = []
    paddle.distributed.all_gather_object(shares, _to_numpy(portable_optimizer_state(optimizer, model)))
    return merge_rank_states(shares)
