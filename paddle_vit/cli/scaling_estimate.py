"""Expected per-GPU throughput, memory and all-reduce traffic of data-parallel ViT training on
1, 8 and 64 GPUs, computed from the model config (paddle_vit/experiments/scaling.py says how): a plan to
replace with measurements once GPUs are available.

    paddle-vit scaling-estimate                      # ViT-B/16 and ViT-H/14, the paper's batch 4096
    paddle-vit scaling-estimate vit_large_patch16_224 --gpus 8 16 --micro-batch 32 --mfu 0.35
"""
import json

from . import ArgumentParser, add_common_arguments, run
from .numbers import integer, number
from ..experiments import scaling
from ..errors import ConfigError
from ..models import get_model_config

DEFAULT_MICRO_BATCH = {"vit_base_patch16_224": 128, "vit_huge_patch14_224": 32}


def estimate(argv):
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=["vit_base_patch16_224", "vit_huge_patch14_224"])
    parser.add_argument("--gpus", nargs="+", type=integer(above=0), default=[1, 8, 64])
    parser.add_argument("--global-batch", type=integer(above=0), default=4096, help="images per update (paper: 4096)")
    parser.add_argument("--micro-batch", type=integer(above=0), help="images per GPU and step (default: per model)")
    parser.add_argument("--peak-tflops", type=number(above=0), default=312.0, help="16-bit peak (A100: 312)")
    parser.add_argument("--mfu", type=number(above=0), default=0.4, help="fraction of the peak a step reaches")
    parser.add_argument("--memory-gib", type=number(above=0), default=80.0)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the tables")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    if args.mfu > 1:
        raise ConfigError(f"--mfu is a fraction of the peak, in (0, 1]; got {args.mfu}")
    args.models, args.gpus = list(dict.fromkeys(args.models)), list(dict.fromkeys(args.gpus))  # each once
    if args.global_batch < max(args.gpus):  # a GPU without an image takes no part in the update
        raise ConfigError(f"--global-batch {args.global_batch} is smaller than --gpus {max(args.gpus)}: every GPU "
                          f"needs at least one image per update")
    for gpus in args.gpus:
        if args.global_batch % gpus:
            raise ConfigError(f"--global-batch {args.global_batch} is not a multiple of --gpus {gpus}: data "
                              f"parallelism gives every GPU the same number of images")

    hardware = scaling.Hardware(peak_tflops=args.peak_tflops, mfu=args.mfu, memory_gib=args.memory_gib)
    tables, result = [], {"hardware": vars(hardware), "global_batch": args.global_batch, "models": {}}
    for name in args.models:
        config = get_model_config(name)
        micro = args.micro_batch or DEFAULT_MICRO_BATCH.get(name, 32)
        rows = []
        for gpus in args.gpus:
            for sharding in ((None,) if gpus == 1 else (None, "os_g")):
                for recompute in (False, True):
                    rows.append(scaling.estimate(config, gpus, micro_batch(args, micro, gpus),
                                                 args.global_batch, hardware, recompute, sharding))
        result["models"][name] = rows
        tables.append(scaling.format_table(name, rows))
    if args.json:
        print(json.dumps(result))
    else:
        print(f"Assumed: {hardware.name}-class GPU, {hardware.peak_tflops:g} TFLOP/s 16-bit peak at "
              f"{hardware.mfu:.0%} MFU, {hardware.memory_gib:g} GiB; AMP O2 + AdamW; global batch "
              f"{args.global_batch}. Computed, not measured.\n")
        print("\n\n".join(tables))
    return 0


def micro_batch(args, wanted, gpus):
    """The images per GPU and step on `gpus` GPUs: `wanted`, at most the GPU's share of the global
    batch, which must be a whole number of them; a default `wanted` steps down to a divisor."""
    per_gpu = args.global_batch // gpus
    micro = min(wanted, per_gpu)
    if per_gpu % micro == 0:
        return micro
    if args.micro_batch:
        raise ConfigError(f"--micro-batch {args.micro_batch} does not divide the {per_gpu} images per GPU "
                          f"(--global-batch {args.global_batch} on {gpus}): the update accumulates whole micro-batches")
    return max(size for size in range(1, micro + 1) if per_gpu % size == 0)


COMMAND = estimate


def main(argv=None):
    """``paddle-vit scaling-estimate`` in this process: the exit code (2 with one ``error:`` line)."""
    return run(COMMAND, argv)
