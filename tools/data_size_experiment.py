"""The paper's data-size experiment in miniature: ViT, hybrid and ResNet on growing fractions of the digits.

The script form of ``paddle-vit data-size-experiment`` (paddle_vit/cli/data_size_experiment.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry


def main(argv=None):
    """``paddle-vit data-size-experiment`` in this process (no restart): the exit code."""
    return entry("data-size-experiment", argv, in_process=True)


if __name__ == "__main__":
    sys.exit(entry("data-size-experiment"))
