"""Train a ViT: paddle-vit train -c configs/NAME.yaml [-o section.key=value ...]

Multi-GPU: python -m paddle.distributed.launch --gpus 0,1 tools/train.py -c ... (rank 0 logs
and writes). Stop with Ctrl-C (or SIGTERM): the step finishes, a checkpoint is written, and
`-o train.resume=auto` continues exactly there.
"""
import json
import logging
import os
import sys

import paddle.distributed as dist

from . import ArgumentParser, add_common_arguments, run
from ..config import load_config
from ..engine.logging_utils import attach_log_file, setup_logging
from ..engine.trainer import Trainer
from ..runtime import describe_allocator


def train(argv):
    parser = ArgumentParser(description="Train a Vision Transformer.")
    parser.add_argument("-c", "--config", required=True, help="YAML recipe in configs/")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config key (repeatable), e.g. -o train.epochs=5")
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    main_process = dist.get_rank() == 0  # only rank 0 logs and writes
    setup_logging(logging.INFO if main_process else logging.WARNING)
    config = load_config(args.config, args.override)
    trainer = Trainer(config, progress_bar=sys.stderr.isatty())
    if main_process:
        attach_log_file(os.path.join(trainer.output_dir, "train.log"))
        logging.getLogger("paddle_vit").info("C allocator: %s", describe_allocator())
    summary = trainer.fit()
    if dist.get_rank() == 0:
        print(json.dumps(summary))
    return 0


COMMAND = train


def main(argv=None):
    """``paddle-vit train`` in this process: the exit code (2 with one ``error:`` line)."""
    return run(COMMAND, argv)
