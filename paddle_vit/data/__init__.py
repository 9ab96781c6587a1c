"""Data: datasets (digits, ImageFolder, PaddleClas file lists, CIFAR, synthetic), keyed transforms, a resumable loader.

Every random choice comes from a numpy Generator keyed by what it is for (see `rng.py`), so a
run resumed mid-epoch, with any number of worker processes, sees the same batches and the
same augmentations as an uninterrupted one.
"""
from .datasets import DATASETS, AugmentedDataset, build_datasets, stratified_split
from .loader import ResumableBatchSampler, ResumableDataLoader, build_dataloader
from .mixup import MixupCutmix, one_hot_smoothed
from .rng import batch_rng, sample_rng, shuffle_rng
from .transforms import build_transforms
