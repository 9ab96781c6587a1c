"""Expected per-GPU throughput, memory and all-reduce traffic of data-parallel ViT training on

The script form of ``paddle-vit scaling-estimate`` (paddle_vit/cli/scaling_estimate.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry
from paddle_vit.cli.scaling_estimate import main  # noqa: F401  (main(argv) -> exit code, in this process)

if __name__ == "__main__":
    sys.exit(entry("scaling-estimate"))
