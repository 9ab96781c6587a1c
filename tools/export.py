"""Export trained weights as a Paddle inference model (and ONNX) for deployment.

The script form of ``paddle-vit export`` (paddle_vit/cli/export.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry
from paddle_vit.cli.export import main  # noqa: F401  (main(argv) -> exit code, in this process)

if __name__ == "__main__":
    sys.exit(entry("export"))
