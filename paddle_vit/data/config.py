"""The data section of a recipe: `DataConfig` and the values its keys may take.

It lives with the data code that reads it, below `paddle_vit.config` (which makes it one
section of a recipe), so that the data package needs nothing above it.
"""
import dataclasses
import math
from typing import List, Optional

from ..errors import ConfigError, check_choice
from ..preprocess.constants import HALF, INTERPOLATIONS

DATASETS = ("digits", "imagefolder", "filelist", "cifar10", "cifar100", "synthetic")
TRAIN_CROPS = ("resize", "random_resized_crop", "pad_crop")
BAD_IMAGE_POLICIES = ("skip", "error")
AUTO_AUGMENTS = ("none", "three_augment")  # null is "none"
THREE_AUGMENT_COLOR_JITTER = 0.3  # DeiT III's colour jitter, data.color_jitter's value under three_augment


@dataclasses.dataclass
class DataConfig:
    """Where the images come from and how they are transformed.

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
    dataset: str = "digits"
    root: Optional[str] = None
    train_list: Optional[str] = None
    val_list: Optional[str] = None
    class_names: Optional[str] = None
    list_separator: Optional[str] = None
    val_fraction: float = 0.2
    split_seed: int = 0
    train_fraction: float = 1.0
    synthetic_train_size: int = 64
    synthetic_val_size: int = 32
    synthetic_classes: int = 4
    num_workers: int = 0
    mean: List[float] = dataclasses.field(default_factory=lambda: list(HALF))
    std: List[float] = dataclasses.field(default_factory=lambda: list(HALF))
    interpolation: str = "bicubic"
    train_crop: str = "resize"
    crop_scale: List[float] = dataclasses.field(default_factory=lambda: [0.08, 1.0])
    crop_padding: int = 4
    hflip: float = 0.0
    randaugment_num_ops: int = 0
    randaugment_magnitude: int = 9
    auto_augment: Optional[str] = None
    color_jitter: Optional[float] = None
    repeated_augmentation: int = 1
    random_erasing: float = 0.0
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0
    mix_prob: float = 1.0
    switch_prob: float = 0.5
    eval_crop_pct: float = 1.0
    on_bad_image: str = "skip"


def color_jitter_strength(data):
    """data.color_jitter, with null resolved: 0.3 under three_augment (DeiT III), else 0 (off)."""
    if data.color_jitter is not None:
        return float(data.color_jitter)
    return THREE_AUGMENT_COLOR_JITTER if data.auto_augment == "three_augment" else 0.0


def check_augmentation_keys(data):
    """Refuse (ConfigError, one line) bad values of data.auto_augment, data.color_jitter and
    data.repeated_augmentation, and 3-Augment together with RandAugment (one policy per image)."""
    check_choice("data.auto_augment", "none" if data.auto_augment is None else data.auto_augment, AUTO_AUGMENTS)
    if data.color_jitter is not None and not 0 <= data.color_jitter < math.inf:
        raise ConfigError(f"data.color_jitter must be a finite number >= 0 (0 is off; DeiT III 0.3) or null, "
                          f"got {data.color_jitter!r}")
    repeats = data.repeated_augmentation
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"data.repeated_augmentation must be an integer >= 1 (1 is off; DeiT: 3), got {repeats!r}")
    if data.auto_augment == "three_augment" and data.randaugment_num_ops > 0:
        raise ConfigError(f"data.auto_augment three_augment and data.randaugment_num_ops "
                          f"{data.randaugment_num_ops} are two augmentation policies: set "
                          f"data.randaugment_num_ops=0 (DeiT III) or data.auto_augment=none")
