"""The paper's data-size experiment in miniature: ViT, hybrid and ResNet on growing fractions of

The script form of ``paddle-vit data-size-experiment`` (paddle_vit/cli/data_size_experiment.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry
from paddle_vit.cli.data_size_experiment import main  # noqa: F401  (main(argv) -> exit code, in this process)

if __name__ == "__main__":
    sys.exit(entry("data-size-experiment"))
