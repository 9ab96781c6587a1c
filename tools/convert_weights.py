"""Convert any ViT checkpoint into paddle-vit weights for a named model.

The script form of ``paddle-vit convert`` (paddle_vit/cli/convert_weights.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry
from paddle_vit.cli.convert_weights import main  # noqa: F401  (main(argv) -> exit code, in this process)

if __name__ == "__main__":
    sys.exit(entry("convert"))
