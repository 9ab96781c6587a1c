"""Which device Paddle computes on, and the distributed environment: one choice for every tool.

`select_device` reads "auto", "gpu" or "cpu" (train.device, --device) and names the option in
its error; each process of a multi-GPU run takes its own GPU (`paddle.distributed.launch` tells
it which).
"""
import logging

import paddle
import paddle.distributed as dist

from .errors import ConfigError, check_choice

logger = logging.getLogger("paddle_vit")

DEVICES = ("auto", "gpu", "cpu")
GPU_INSTALL = ("install Paddle's CUDA build from Paddle's own index, e.g. python -m pip install "
               "paddlepaddle-gpu==3.3.1 -i https://www.paddlepaddle.org.cn/packages/stable/cu126/ "
               "(cu118, cu126 or cu129 to match your driver; PyPI's paddlepaddle-gpu stops at 2.6)")


def gpu_available():
    """True when this Paddle build has CUDA and at least one GPU is visible."""
    return paddle.device.is_compiled_with_cuda() and paddle.device.cuda.device_count() > 0


def resolve_device(name="auto", option="train.device"):
    """"gpu" or "cpu" for `name` ("auto": a GPU when there is one); asking for a GPU that is
    not there is a ConfigError naming `option`."""
    check_choice(option, name, DEVICES)
    if name == "gpu" and not gpu_available():
        why = (f"this Paddle build has no CUDA ({GPU_INSTALL})" if not paddle.device.is_compiled_with_cuda()
               else "no GPU is visible (check CUDA_VISIBLE_DEVICES and the driver)")
        fix = "-o train.device=cpu or auto" if option.startswith("train.") else f"{option} cpu"
        raise ConfigError(f"{option} is 'gpu' but {why}; use {fix}")
    return "gpu" if name == "gpu" or (name == "auto" and gpu_available()) else "cpu"


def select_device(name="auto", option="train.device"):
    """Set Paddle's device for `name` and return the place string ("gpu:0", "cpu")."""
    place = "cpu" if resolve_device(name, option) == "cpu" else f"gpu:{dist.ParallelEnv().device_id}"
    paddle.set_device(place)
    return place


def world_size():
    return dist.get_world_size()


def rank():
    return dist.get_rank()


def is_main_process():
    """Only rank 0 logs and writes files."""
    return dist.get_rank() == 0


def init_distributed():
    """Start data parallelism when launched by `python -m paddle.distributed.launch` with more
    than one process; returns True if it did."""
    if dist.get_world_size() > 1:
        if not dist.is_initialized():
            dist.init_parallel_env()
        return True
    return False
