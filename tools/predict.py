"""Classify images with trained weights or an exported model.

The script form of ``paddle-vit predict`` (paddle_vit/cli/predict.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry
from paddle_vit.cli.predict import main  # noqa: F401  (main(argv) -> exit code, in this process)

if __name__ == "__main__":
    sys.exit(entry("predict"))
