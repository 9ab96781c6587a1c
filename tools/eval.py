"""Evaluate weights on a validation split.

The script form of ``paddle-vit eval`` (paddle_vit/cli/eval.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry
from paddle_vit.cli.eval import main  # noqa: F401  (main(argv) -> exit code, in this process)

if __name__ == "__main__":
    sys.exit(entry("eval"))
