"""The random numbers of a run: the seeds of its global generators and of each step.

A run seeds Paddle's and numpy's global generators (and, when `train.deterministic` on a GPU,
asks cuDNN for deterministic kernels) so that it draws the same weights and masks wherever it
runs.
"""
import numpy as np
import paddle

DETERMINISTIC_FLAG = "FLAGS_cudnn_deterministic"


def step_seed(seed, epoch, batch, rank=0):
    """A seed for one training step, the same however the run was interrupted and resumed. Each
    rank gets its own (rank 0's is a single process's): the ranks' dropout and drop-path masks
    must be independent draws, not one mask repeated on every rank's share of the step."""
    words = [seed, epoch, batch] + ([rank] if rank else [])
    return int(np.random.SeedSequence(words).generate_state(1)[0] % (2 ** 31))


def seed_process(train, place):
    """Seed the global generators for a run (the model's initial weights come from Paddle's);
    cuDNN's deterministic kernels where `train.deterministic` asks for them on a GPU."""
    if train.deterministic and place.startswith("gpu"):
        paddle.set_flags({DETERMINISTIC_FLAG: True})
    paddle.seed(train.seed)
    np.random.seed(train.seed)
