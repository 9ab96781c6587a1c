"""Train a ViT: python tools/train.py -c configs/NAME.yaml [-o section.key=value ...]

The script form of ``paddle-vit train`` (paddle_vit/cli/train.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry
from paddle_vit.cli.train import main  # noqa: F401  (main(argv) -> exit code, in this process)

if __name__ == "__main__":
    sys.exit(entry("train"))
