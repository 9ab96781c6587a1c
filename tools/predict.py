"""Classify images with trained weights or an exported model.

The script form of ``paddle-vit predict`` (paddle_vit/cli/predict.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry


def main(argv=None):
    """``paddle-vit predict`` in this process (no restart): the exit code."""
    return entry("predict", argv, in_process=True)


if __name__ == "__main__":
    sys.exit(entry("predict"))
