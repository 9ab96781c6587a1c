"""Training and evaluation: the loop, the optimizer and schedule, checkpoints, logging."""
