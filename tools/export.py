"""Export trained weights as a Paddle inference model (and ONNX) for deployment.

The script form of ``paddle-vit export`` (paddle_vit/cli/export.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry


def main(argv=None):
    """``paddle-vit export`` in this process (no restart): the exit code."""
    return entry("export", argv, in_process=True)


if __name__ == "__main__":
    sys.exit(entry("export"))
