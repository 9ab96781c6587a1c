"""Train a ViT: python tools/train.py -c configs/NAME.yaml [-o section.key=value ...]

Multi-GPU: python -m paddle.distributed.launch --gpus 0,1 tools/train.py -c ... (rank 0 logs
and writes). Stop with Ctrl-C (or SIGTERM): the step finishes, a checkpoint is written, and
`-o train.resume=auto` continues exactly there.
"""
import argparse
import json
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from paddle_vit.cli import add_common_arguments, attach_log_file, run, setup_logging  # noqa: E402
from paddle_vit.runtime import describe_allocator, relaunch_with_allocator  # noqa: E402


def main(argv):
    parser = argparse.ArgumentParser(description="Train a Vision Transformer.")
    parser.add_argument("-c", "--config", required=True, help="YAML recipe in configs/")
    parser.add_argument("-o", "--override", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config key (repeatable), e.g. -o train.epochs=5")
    add_common_arguments(parser)
    args = parser.parse_args(argv)

    from paddle_vit.config import load_config
    from paddle_vit.engine.trainer import Trainer

    import paddle.distributed as dist

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


if __name__ == "__main__":
    relaunch_with_allocator()  # with tcmalloc as malloc when installed (paddle_vit/runtime.py)
    sys.exit(run(main))
