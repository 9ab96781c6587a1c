"""Benchmark a ViT: paddle-vit benchmark [MODEL] [--mode infer|train|data] [--engine ...] [--compare timm]

Examples (docs/benchmarks.md has the method and the measured table):

    paddle-vit benchmark vit_small_patch16_224 --batch-size 8 --engine to_static
    paddle-vit benchmark vit_tiny_patch16_224 --mode train --compare timm --torch-python /path/venv/bin/python
    paddle-vit benchmark --mode data -c configs/vit_walkthrough_digits_28.yaml --num-workers 1
    paddle-vit benchmark vit_base_patch16_224 --device gpu --dtype bf16 --mode train --peak-tflops 312 --json
    paddle-vit benchmark vit_small_patch16_224 --engine predictor --dtype bf16 --compare timm   # oneDNN bf16 on CPU
    paddle-vit benchmark vit_small_patch16_224 --engine onnxruntime --dtype int8 --compare timm  # vs PyTorch's int8
    paddle-vit benchmark --mode gemm   # the CPU's fp32, bf16 and int8 matrix-product limits
    paddle-vit benchmark vit_small_patch16_224 --compare timm --side-by-side   # every CPU path, in turns

Prints median/min/max images per second, peak memory, achieved TFLOP/s (analytic FLOPs) and
MFU against --peak-tflops; with --compare timm also timm's numbers, measured in turns with
ours, and the ratio. --json prints one JSON object instead. When other processes kept the
machine busy during the timing, one ``warning:`` line on stderr says so (docs/benchmarks.md,
"Machine and method"). Model fields are set with ``-o model.KEY=VALUE`` (e.g. ``-o
model.depth=2``), the data of mode ``data`` with ``-c`` and ``-o data.KEY=VALUE``, as in
tools/train.py.
"""
import argparse
import dataclasses
import json
import os
import sys

from . import ArgumentParser, add_common_arguments, run
from .numbers import integer, number
from ..bench import (DEVICES, DTYPES, ENGINES, MODES, REFERENCES, BenchmarkSettings, busy_warning, format_gemm,
                     format_report, format_side_by_side, gemm_limits, run_benchmark, run_side_by_side)
from ..config import load_config
from ..errors import ConfigError

DEFAULT_MODEL = "vit_small_patch16_224"


def build_parser():
    parser = ArgumentParser(description="Benchmark a Vision Transformer (throughput, memory, MFU).")
    parser.add_argument("model", nargs="?", help=f"registered model name (default: the config's, else {DEFAULT_MODEL})")
    parser.add_argument("-c", "--config", help="YAML recipe: its model and data sections are used")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a config key (repeatable), e.g. -o model.depth=2 -o data.dataset=digits")
    parser.add_argument("--mode", default="infer", choices=MODES + ("gemm",),
                        help="infer: forward pass; train: forward + backward + AdamW step; data: the input pipeline; "
                             "gemm: the CPU's fp32 and bf16 matrix-product GFLOP/s, the limits the others reach for")
    parser.add_argument("--engine", default="dynamic", choices=ENGINES,
                        help="dynamic (eager), to_static (paddle.jit.to_static), predictor (paddle.inference) or "
                             "onnxruntime (the model exported to ONNX on the fly; needs the onnx extra)")
    parser.add_argument("--dtype", default="fp32", choices=tuple(DTYPES),
                        help="fp32; bf16 (GPU, or on CPU --engine predictor: oneDNN's bfloat16 kernels); fp16 (GPU); "
                             "int8 (--engine onnxruntime: the export quantized dynamically, int8 weights per channel)")
    parser.add_argument("--device", default="cpu", choices=DEVICES)
    parser.add_argument("--batch-size", type=integer(1), default=8)
    parser.add_argument("--image-size", type=integer(1), help="input side (default: the model's)")
    parser.add_argument("--warmup", type=integer(0), default=3, help="untimed iterations first")
    parser.add_argument("--iters", type=integer(1), default=5, help="timed iterations per round")
    parser.add_argument("--rounds", type=integer(1), default=4, help="rounds (alternating with --compare)")
    parser.add_argument("--threads", type=integer(1), help="CPU threads for both frameworks (default: all cores)")
    parser.add_argument("--peak-tflops", type=number(above=0), help="the device's peak TFLOP/s for --dtype, to report MFU")
    parser.add_argument("--dataset", help="mode data: digits, synthetic, ... (default: the config's, else synthetic)")
    parser.add_argument("--num-workers", type=integer(0), help="mode data: DataLoader workers (default: the config's)")
    parser.add_argument("--onednn", action=argparse.BooleanOptionalAction, default=True,
                        help="engine predictor on CPU: Paddle Inference's oneDNN kernels (default on, as in "
                             "tools/predict.py; --no-onednn for its plain CPU kernels)")
    parser.add_argument("--compare", choices=REFERENCES, help="also time timm's model of the same configuration")
    parser.add_argument("--side-by-side", action="store_true",
                        help="with --compare timm, mode infer on CPU: every inference path in turns (timm fp32 and "
                             "int8, eager, predictor fp32 (bf16 where the CPU has it), onnxruntime fp32 and int8), "
                             "each with its GFLOP/s against the machine's fp32/int8 matrix-product limit")
    parser.add_argument("--torch-python", default=os.environ.get("PADDLE_VIT_TORCH_PYTHON", sys.executable),
                        help="a Python with torch and timm, for --compare (default: $PADDLE_VIT_TORCH_PYTHON, "
                             "else this Python)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    parser.add_argument("--profile", action="store_true",
                        help="also profile --iters more steps op by op (paddle.profiler; eager and to_static; with "
                             "--compare timm, timm's too, by torch.profiler) and print where the time goes")
    parser.add_argument("--batch-threads", type=integer(1),
                        help="mode train: threads each step's batch is shared over, a slice each (default: the "
                             "config's train.batch_threads, null: as the trainer chooses)")
    add_common_arguments(parser)
    return parser


def settings_from_arguments(args):
    config = load_config(args.config, args.override)
    model_overrides = config.model.vit_overrides()
    if args.image_size is not None:
        model_overrides["image_size"] = args.image_size
    data_config = config.data
    if args.dataset or not args.config:
        data_config = dataclasses.replace(data_config, dataset=args.dataset or "synthetic")
    num_workers = data_config.num_workers if args.num_workers is None else args.num_workers
    return BenchmarkSettings(
        model=args.model or (config.model.name if args.config else DEFAULT_MODEL),
        batch_size=args.batch_size, mode=args.mode, dtype=args.dtype, device=args.device, engine=args.engine,
        warmup=args.warmup, iters=args.iters, rounds=args.rounds, threads=args.threads,
        peak_tflops=args.peak_tflops, model_overrides=model_overrides, data_config=data_config,
        num_workers=num_workers, onednn=args.onednn, profile=args.profile,
        batch_threads=config.train.batch_threads if args.batch_threads is None else args.batch_threads)


def show(result, as_json, formatter):
    """Print `result` (one JSON object with --json, else the report), and on stderr the one-line
    warning when other processes were busy on the machine while it was timed."""
    print(json.dumps(result) if as_json else formatter(result))
    warning = busy_warning(result)
    if warning:
        print(warning, file=sys.stderr)


def benchmark(argv):
    args = build_parser().parse_args(argv)
    if args.mode == "gemm":  # the CPU's limits that the model paths are measured against
        if args.compare:
            raise ConfigError("--mode gemm measures Paddle's matrix product alone; it has no --compare")
        # its numbers are checked as every mode's are, the ones it does not use too: a typo is said
        BenchmarkSettings(batch_size=args.batch_size, warmup=args.warmup, iters=args.iters, rounds=args.rounds,
                          threads=args.threads, peak_tflops=args.peak_tflops,
                          num_workers=args.num_workers or 0).validate()
        result = gemm_limits(threads=args.threads, iterations=args.iters * 2)
        show(result, args.json, format_gemm)
        return 0

    settings = settings_from_arguments(args)
    if args.side_by_side:
        if args.compare != "timm" or args.mode != "infer":
            raise ConfigError("--side-by-side compares every inference path with timm: give --compare timm "
                              "(and --mode infer)")
        given = [option for option, value in (("--engine", args.engine != "dynamic"), ("--dtype", args.dtype != "fp32"))
                 if value]
        if given:
            raise ConfigError(f"--side-by-side times every engine and dtype; leave out {', '.join(given)}")
        result = run_side_by_side(settings, args.torch_python)
        show(result, args.json, format_side_by_side)
        return 0
    result = run_benchmark(settings, compare=args.compare, torch_python=args.torch_python)
    show(result, args.json, format_report)
    return 0


COMMAND = benchmark


def main(argv=None):
    """``paddle-vit benchmark`` in this process: the exit code (2 with one ``error:`` line)."""
    return run(COMMAND, argv)
