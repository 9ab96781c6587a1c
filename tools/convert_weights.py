"""Convert any ViT checkpoint into paddle-vit weights for a named model.

The script form of ``paddle-vit convert`` (paddle_vit/cli/convert_weights.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry


def main(argv=None):
    """``paddle-vit convert`` in this process (no restart): the exit code."""
    return entry("convert", argv, in_process=True)


if __name__ == "__main__":
    sys.exit(entry("convert"))
