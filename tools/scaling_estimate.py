"""Expected per-GPU throughput, memory and all-reduce traffic of data-parallel ViT training on 1, 8 and 64 GPUs.

The script form of ``paddle-vit scaling-estimate`` (paddle_vit/cli/scaling_estimate.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry


def main(argv=None):
    """``paddle-vit scaling-estimate`` in this process (no restart): the exit code."""
    return entry("scaling-estimate", argv, in_process=True)


if __name__ == "__main__":
    sys.exit(entry("scaling-estimate"))
