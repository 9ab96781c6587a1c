"""Draw what a trained ViT learned (paper Fig. 6 and 7).

The script form of ``paddle-vit visualize`` (paddle_vit/cli/visualize.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry


def main(argv=None):
    """``paddle-vit visualize`` in this process (no restart): the exit code."""
    return entry("visualize", argv, in_process=True)


if __name__ == "__main__":
    sys.exit(entry("visualize"))
