"""Data: datasets (digits, ImageFolder, PaddleClas file lists, CIFAR, synthetic), keyed transforms, a resumable loader.

Every random choice comes from a numpy Generator keyed by what it is for (see `rng.py`), so a
run resumed mid-epoch, with any number of worker processes, sees the same batches and the
same augmentations as an uninterrupted one.

The names below are imported on first use, so that `paddle_vit.data.config` (which the recipes'
config and `paddle_vit.preprocess`'s users read) does not bring in Paddle with the loader.
"""
from ..lazy import lazy_names

# public name -> the module of this package that defines it (PEP 562)
_LAZY = {
    "DataConfig": "config",
    "DATASETS": "config",
    "AugmentedDataset": "datasets",
    "build_datasets": "datasets",
    "stratified_split": "datasets",
    "ResumableBatchSampler": "loader",
    "ResumableDataLoader": "loader",
    "build_dataloader": "loader",
    "MixupCutmix": "mixup",
    "one_hot_smoothed": "mixup",
    "batch_rng": "rng",
    "sample_rng": "rng",
    "shuffle_rng": "rng",
    "build_transforms": "transforms",
}

__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_names(__name__, _LAZY)
