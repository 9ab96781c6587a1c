"""The data section of a recipe: `DataConfig`, the values its keys may take, and its checks.

It lives with the data code that reads it, below `paddle_vit.config` (which makes it one
section of a recipe), so that the data package needs nothing above it.
"""
import dataclasses
import math
from typing import List, Optional

from ..checks import (FRACTION, PROBABILITY, SEED, above, at_least, check_settings, one_of, setting,
                      within)
from ..errors import ConfigError
from ..preprocess.constants import HALF, INTERPOLATIONS
from ..preprocess.spec import check_crop_pct

DATASETS = ("digits", "imagefolder", "filelist", "cifar10", "cifar100", "synthetic")
TRAIN_CROPS = ("resize", "random_resized_crop", "pad_crop")
BAD_IMAGE_POLICIES = ("skip", "error")
AUTO_AUGMENTS = ("none", "three_augment")  # null is "none"
THREE_AUGMENT_COLOR_JITTER = 0.3  # DeiT III's colour jitter, data.color_jitter's value under three_augment


def _three_channels(key, value):
    if len(value) != 3:
        raise ConfigError(f"{key} must be a list of 3 numbers (R, G, B), got {value!r}")


def _every_channel_positive(key, value):
    if any(channel <= 0 for channel in value):
        raise ConfigError(f"{key} must be > 0 for every channel, got {value!r}")


def _area_range(key, value):
    if len(value) != 2 or not 0 < value[0] <= value[1] <= 1:
        raise ConfigError(f"{key} must be [low, high] with 0 < low <= high <= 1, got {value!r}")


def _jitter_factor(key, value):
    if not 0 <= value < math.inf:
        raise ConfigError(f"{key} must be a finite number >= 0 (0 is off; DeiT III 0.3) or null, got {value!r}")


def _copies(key, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{key} must be an integer >= 1 (1 is off; DeiT: 3), got {value!r}")


@dataclasses.dataclass
class DataConfig:
    """Where the images come from and how they are transformed. A key's range or choices stand on
    its line (paddle_vit/checks.py); `validate()` adds what reads several keys: the folder and lists
    each data set needs, one augmentation policy per image.

    dataset: "digits" (scikit-learn's 8x8 handwritten digits, offline), "imagefolder",
        "filelist", "cifar10", "cifar100" or "synthetic".
    root: the ImageFolder root (holding train/ and val/), the folder the filelist's paths are
        relative to, or the CIFAR archive (cifar-10-python.tar.gz / cifar-100-python.tar.gz);
        None downloads CIFAR.
    train_list, val_list: the filelist's lists of "relative/path label" lines (PaddleClas's
        train_list.txt / val_list.txt), relative to root unless absolute.
    class_names: optional file naming the filelist's classes: PaddleClas's label_list form
        ("0 tench" lines) or one name per line; None names them "0", "1", ...
    list_separator: what separates path and label in a list line; None: any run of spaces or
        tabs (the label is the last field, so a path may hold spaces).
    val_fraction, split_seed: the fixed train/val split of the digits.
    train_fraction: train on this stratified fraction of the training split (every class kept
        in proportion, at least one image each; a smaller fraction is a subset of a larger one;
        drawn by data.split_seed and train.seed, the validation split unchanged): the data-size
        experiment of paper Section 4.3.
    synthetic_train_size, synthetic_val_size, synthetic_classes: the synthetic set.
    num_workers: DataLoader worker processes (0 loads in the main process).
    mean, std: normalisation; 0.5/0.5 is what the ViT checkpoints expect, ImageNet's
        (0.485, 0.456, 0.406)/(0.229, 0.224, 0.225) is DeiT's.
    interpolation: "bicubic", "bilinear" or "nearest" for every resize.
    train_crop: "resize" (plain resize to the model input), "random_resized_crop" or
        "pad_crop" (pad by crop_padding pixels, then a random crop: small-image recipes).
    crop_scale: the area range of random_resized_crop.
    crop_padding: pixels of padding for pad_crop.
    hflip: probability of a horizontal flip (0 for digits: a mirrored 2 is no 2).
    randaugment_num_ops, randaugment_magnitude: RandAugment (0 ops switches it off).
    auto_augment: null/"none", or "three_augment": DeiT III's 3-Augment, one of grayscale,
        solarize, gaussian blur per image (data/three_augment.py), after the crop and flip;
        refused together with RandAugment.
    color_jitter: brightness, contrast and saturation factors each uniform in
        [max(0, 1 - c), 1 + c], applied in a random order after the crop, flip and 3-Augment;
        0 is off; null: 0.3 with three_augment (DeiT III), else 0.
    repeated_augmentation: n >= 1 copies of each image per epoch, each with its own
        augmentations, spread over the ranks, the epoch length kept (DeiT's repeated
        augmentation: about N / n distinct images an epoch; data/loader.py); 1 is off.
    random_erasing: probability of erasing a random rectangle (DeiT: 0.25).
    mixup_alpha, cutmix_alpha: Beta parameters of mixup / cutmix (0 switches each off).
    mix_prob: probability of mixing a batch at all; switch_prob: of cutmix over mixup when both.
    eval_crop_pct: eval resizes to size / eval_crop_pct, then centre-crops (1.0: plain resize).
    on_bad_image: "skip" a corrupt or unreadable image (counted in the log) or "error".
    """
    dataset: str = setting("digits", one_of(DATASETS))
    root: Optional[str] = None
    train_list: Optional[str] = None
    val_list: Optional[str] = None
    class_names: Optional[str] = None
    list_separator: Optional[str] = None
    val_fraction: float = setting(0.2, FRACTION)
    split_seed: int = setting(0, SEED)
    train_fraction: float = setting(1.0, within(0, 1, low_open=True))
    synthetic_train_size: int = setting(64, at_least(1))
    synthetic_val_size: int = setting(32, at_least(1))
    synthetic_classes: int = setting(4, at_least(2))
    num_workers: int = setting(0, at_least(0))
    mean: List[float] = setting(list(HALF), _three_channels)
    std: List[float] = setting(list(HALF), _three_channels, _every_channel_positive)
    interpolation: str = setting("bicubic", one_of(INTERPOLATIONS))
    train_crop: str = setting("resize", one_of(TRAIN_CROPS))
    crop_scale: List[float] = setting([0.08, 1.0], _area_range)
    crop_padding: int = setting(4, at_least(0))
    hflip: float = setting(0.0, PROBABILITY)
    randaugment_num_ops: int = setting(0, at_least(0))
    randaugment_magnitude: int = setting(9, within(0, 10))
    auto_augment: Optional[str] = setting(None, one_of(AUTO_AUGMENTS))
    color_jitter: Optional[float] = setting(None, _jitter_factor)
    repeated_augmentation: int = setting(1, _copies)
    random_erasing: float = setting(0.0, PROBABILITY)
    mixup_alpha: float = setting(0.0, at_least(0.0))
    cutmix_alpha: float = setting(0.0, at_least(0.0))
    mix_prob: float = setting(1.0, PROBABILITY)
    switch_prob: float = setting(0.5, PROBABILITY)
    eval_crop_pct: float = setting(1.0, check_crop_pct)  # the range every crop fraction shares
    on_bad_image: str = setting("skip", one_of(BAD_IMAGE_POLICIES))

    def validate(self):
        """Raise ConfigError, one line naming the key, for a value the data code cannot use. Run
        once when a recipe is loaded (paddle_vit/config.py); the data code then trusts the values."""
        check_settings(self, "data")
        if self.dataset == "imagefolder" and not self.root:
            raise ConfigError("data.root must name the ImageFolder root (holding train/ and val/) for data.dataset "
                              "imagefolder")
        if self.dataset == "filelist":
            self._check_filelist_keys()
        if self.dataset == "digits":  # the digits have no validation split but this one
            above(0.0)("data.val_fraction", self.val_fraction)
        if self.auto_augment == "three_augment" and self.randaugment_num_ops > 0:  # one policy per image
            raise ConfigError(f"data.auto_augment three_augment and data.randaugment_num_ops "
                              f"{self.randaugment_num_ops} are two augmentation policies: set "
                              f"data.randaugment_num_ops=0 (DeiT III) or data.auto_augment=none")
        return self

    def _check_filelist_keys(self):
        """data.dataset filelist names its root and both lists; a separator, when given, is one
        that can sit inside a line."""
        for key, what in (("root", "the folder the lists' image paths are relative to"),
                          ("train_list", "the training list (PaddleClas's train_list.txt)"),
                          ("val_list", "the validation list (PaddleClas's val_list.txt)")):
            if not getattr(self, key):
                raise ConfigError(f"data.{key} must name {what} for data.dataset filelist")
        separator = self.list_separator
        if separator is not None and (separator == "" or "\n" in separator or "\r" in separator):
            raise ConfigError(f"data.list_separator must be null (any spaces or tabs) or a non-empty string without "
                              f"line breaks, got {separator!r}")


def color_jitter_strength(data):
    """data.color_jitter, with null resolved: 0.3 under three_augment (DeiT III), else 0 (off)."""
    if data.color_jitter is not None:
        return float(data.color_jitter)
    return THREE_AUGMENT_COLOR_JITTER if data.auto_augment == "three_augment" else 0.0
