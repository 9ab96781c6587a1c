"""DeiT's answer with DeiT's budget: the digits ViT without a teacher and with hard and soft distillation from the digits ResNet.

The script form of ``paddle-vit deit-budget-experiment`` (paddle_vit/cli/deit_budget_experiment.py: its arguments and what it does).
"""
import sys

from paddle_vit.cli import entry


def main(argv=None):
    """``paddle-vit deit-budget-experiment`` in this process (no restart): the exit code."""
    return entry("deit-budget-experiment", argv, in_process=True)


if __name__ == "__main__":
    sys.exit(entry("deit-budget-experiment"))
