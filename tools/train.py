"""Train a ViT: python tools/train.py -c configs/NAME.yaml [-o section.key=value ...]

The script form of ``paddle-vit train`` (paddle_vit/cli/train.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry


def main(argv=None):
    """``paddle-vit train`` in this process (no restart): the exit code."""
    return entry("train", argv, in_process=True)


if __name__ == "__main__":
    sys.exit(entry("train"))
