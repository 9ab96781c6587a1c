"""Benchmark a ViT: python tools/benchmark.py [MODEL] [--mode infer|train|data] [--engine ...] [--compare timm]

The script form of ``paddle-vit benchmark`` (paddle_vit/cli/benchmark.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry


def main(argv=None):
    """``paddle-vit benchmark`` in this process (no restart): the exit code."""
    return entry("benchmark", argv, in_process=True)


if __name__ == "__main__":
    sys.exit(entry("benchmark"))
