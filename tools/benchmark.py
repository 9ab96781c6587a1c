"""Benchmark a ViT: python tools/benchmark.py [MODEL] [--mode infer|train|data] [--engine ...] [--compare timm]

The script form of ``paddle-vit benchmark`` (paddle_vit/cli/benchmark.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry
from paddle_vit.cli.benchmark import main  # noqa: F401  (main(argv) -> exit code, in this process)

if __name__ == "__main__":
    sys.exit(entry("benchmark"))
