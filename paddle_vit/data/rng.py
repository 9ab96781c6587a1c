"""Keyed random generators: every random choice of the data pipeline is a function of its key.

A worker process, a resumed run and an uninterrupted run draw the same numbers because the
generator is built from the key alone (never from Python's `random`, global numpy or Paddle's
RNG, whose state depends on what ran before): the shuffle order from (seed, epoch), a sample's
augmentations from (seed, epoch, index), a batch's mixup/cutmix from (seed, epoch, batch index).
Each use has its own stream number first in the key, so two uses never share numbers.
"""
import numpy as np

from ..errors import ConfigError

STREAM_SAMPLE = 1  # per-sample augmentations
STREAM_SHUFFLE = 2  # the order of an epoch
STREAM_BATCH = 3  # per-batch mixup / cutmix
STREAM_SPLIT = 4  # the fixed train/val split of the digits
STREAM_SYNTHETIC = 5  # the synthetic images
STREAM_SUBSET = 6  # the training subset of data.train_fraction


def keyed_rng(stream, *keys):
    """A numpy Generator determined by `stream` and the non-negative integers `keys`."""
    words = [int(stream)]
    for key in keys:
        key = int(key)
        if key < 0:
            raise ConfigError(f"seeds, epochs and indices must be >= 0, got {key}")
        words.append(key)
    return np.random.default_rng(np.random.SeedSequence(words))


def sample_rng(seed, epoch, index):
    """The generator of every augmentation choice for sample `index` in `epoch`."""
    return keyed_rng(STREAM_SAMPLE, seed, epoch, index)


def shuffle_rng(seed, epoch):
    """The generator of the sample order of `epoch` (the same on every rank)."""
    return keyed_rng(STREAM_SHUFFLE, seed, epoch)


def batch_rng(seed, epoch, batch_index, rank=0):
    """The generator to hand `MixupCutmix` for batch `batch_index` of `epoch` on `rank`.

    Counting `batch_index` from the start of the epoch (also after a resume at start_batch=k)
    makes a resumed epoch mix exactly as the uninterrupted one would have. Each rank of a
    multi-process run mixes its share of the step with numbers of its own (rank 0's are a
    single process's).
    """
    return keyed_rng(STREAM_BATCH, seed, epoch, batch_index, *([rank] if rank else []))
