"""Draw what a trained ViT learned (paper Fig. 6 and 7):

The script form of ``paddle-vit visualize`` (paddle_vit/cli/visualize.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry
from paddle_vit.cli.visualize import main  # noqa: F401  (main(argv) -> exit code, in this process)

if __name__ == "__main__":
    sys.exit(entry("visualize"))
