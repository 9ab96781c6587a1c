"""Evaluate weights on a validation split.

The script form of ``paddle-vit eval`` (paddle_vit/cli/eval.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry


def main(argv=None):
    """``paddle-vit eval`` in this process (no restart): the exit code."""
    return entry("eval", argv, in_process=True)


if __name__ == "__main__":
    sys.exit(entry("eval"))
