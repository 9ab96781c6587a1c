"""Keyed random generators: every random choice of the data pipeline is a function of its key.

A worker process, a resumed run and an uninterrupted run draw the same numbers because the
generator is built from the key alone (never from Python's `random`, global numpy or Paddle's
RNG, whose state depends on what ran before): the shuffle order from (seed, epoch), a sample's
augmentations from (seed, epoch, index), or (seed, epoch, index, copy) for the copies 1, 2, ...
of data.repeated_augmentation, a batch's mixup/cutmix from (seed, epoch, batch index).
Each use has its own stream number first in the key, so two uses never share numbers.

The sampler tells the dataset which copy of an image it wants through one integer, the tagged
index `copy * num_images + index` (`tag_copy` / `untag_copy`): copy 0 is the plain index, so
without repetition nothing changes, and the tag passes through Paddle's DataLoader workers as
any index does.
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


def sample_rng(seed, epoch, index, copy=0):
    """The generator of every augmentation choice for sample `index` in `epoch`; `copy` >= 1
    numbers the repeated copies of repeated augmentation (copy 0 is keyed as before it existed)."""
    return keyed_rng(STREAM_SAMPLE, seed, epoch, index, *([copy] if copy else []))


def tag_copy(index, copy, num_images):
    """The one integer that names copy `copy` of image `index` among `num_images`:
    copy * num_images + index (works on numpy arrays too)."""
    return copy * num_images + index


def untag_copy(tagged, num_images):
    """(index, copy) of a tagged index: the inverse of `tag_copy`."""
    copy, index = divmod(int(tagged), int(num_images))
    return index, copy


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
